// SPDX-License-Identifier: MIT
// A node communicator: the backend, the node control block, the tuning, and the small
// synchronisation vocabulary every collective is written in.
//
// The path of one collective (say shaddr_bcast, coll_bcast.cc):
//   begin()            next sequence number s, identical on every rank
//   expose() + post()  the owner publishes where peers find its data (RankArea addr/len, posted)
//   wait_posted()      a reader waits for the owner's post of s, then
//   copy_from() ...    copies/reduces straight from the owner's memory through the backend
//   finish(status)     closing barrier: nobody reads anyone's buffers after it; every rank
//                      returns the same status (the first failure in rank order)
// Small messages avoid the closing barrier: the Bcast FIFO and the slots carry their own flow
// control.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend.h"
#include "error.h"
#include "nodeblock.h"
#include "plan.h"
#include "plan_model.h"
#include "shaddr/coll.h"
#include "topology.h"
#include "wait.h"

namespace shaddr {

// Sizes that decide algorithms, as the settings give them (Tuning::from_env, comm.cc; defaults
// from the machine's caches and the node size; why: docs/defaults.md); every one can be set with
// a SHADDR_* variable (docs/settings.md). The limits the rules turn at are the plan's
// (shaddr_plan_limits, plan.cc), which takes the backend's defaults where these are not set.
struct Tuning {
  size_t bcast_fifo_max;   // SHADDR_BCAST_FIFO_MAX: Bcast at most this big goes through the FIFO
  size_t chunk;            // SHADDR_CHUNK: copy unit of pipelined transfers (cache-sized)
  size_t reduce_unit;      // SHADDR_REDUCE_UNIT: bytes reduced per pipeline step
  size_t slot_max;  // SHADDR_SLOT_MAX: per-rank data at most this big goes through the slots
  int bcast_streams;         // SHADDR_BCAST_STREAMS: streams of a multi-stream Bcast (1 = off)
  size_t bcast_streams_min;  // SHADDR_BCAST_STREAMS_MIN: smallest Bcast cut into streams
  int allgather_ring;        // SHADDR_ALLGATHER_RING: 0 never, 1 always, else (unset) when
                             // the backend cannot map every peer at once
  bool bcast_fifo_configured;  // SHADDR_BCAST_FIFO_MAX was set (else the backend's default)
  bool slot_max_configured;    // SHADDR_SLOT_MAX was set (else the node size's and backend's)
  // SHADDR_MIN, SHADDR_MIN_<COLL>: where set, the plan sends smaller calls of the collective
  // to the caller's fallback and the others to libshaddr, instead of the model's choice.
  size_t min_bytes[SHADDR_COLL_COUNT];
  bool min_set[SHADDR_COLL_COUNT];
  // SHADDR_PLAN_MARGIN: how much faster (percent) the model must have libshaddr for the plan
  // to choose it over the caller's collective (and whether narrow ranges are smoothed away).
  int plan_margin_pct;
  // SHADDR_INTERPOSE_SEGMENT, SHADDR_INTERPOSE_MESH_MAX: the interposer's hierarchy across
  // nodes, in its plans (agreed over the job when the interposer starts).
  size_t hier_segment;
  size_t hier_mesh_max;
  uint64_t fail_inject;        // SHADDR_FAIL_INJECT: the n-th fallible step fails (0: off)
  int fail_inject_rank;        // SHADDR_FAIL_INJECT_RANK: only on this rank (-1: every rank)
  size_t l1, l2, l3;       // cache sizes found (0 if unknown)
  // The settings of a communicator of `nranks` ranks (some defaults depend on it).
  static Tuning from_env(int nranks);
};

// The address a failed exposure publishes: no user address (non-canonical), and every read of
// it (copy_from(), visit()) fails without touching the backend.
constexpr uint64_t kExposureFailed = uint64_t{1} << 63;

class Comm {
 public:
  static int create(const shaddr_host &host, std::unique_ptr<Comm> *out, std::string *why);
  ~Comm();

  int rank() const { return rank_; }
  int size() const { return size_; }
  Backend &backend() { return *backend_; }
  NodeBlock &block() { return *block_; }
  const Tuning &tuning() const { return tuning_; }
  const CostModel &model() const { return model_; }
  // The node's ranks grouped by the topology's levels the plan uses (SHADDR_TOPOLOGY over the
  // locations gathered at creation; flat on a machine of one NUMA node), equal on every rank.
  const Grouping &levels() const { return levels_; }
  // SHADDR_TOPOLOGY=auto: the plan weighs the levels (a list of levels takes them as given).
  bool levels_weighed() const { return levels_weighed_; }
  // The plan against @fallback (plan.h), built on first use; the collectives run the steps of
  // plan(SHADDR_FALLBACK_NONE), built when the communicator is made.
  // A built plan is read without the lock: every call a caller routes (call.cc) reads it.
  const shaddr_plan &plan(shaddr_fallback fallback) {
    const shaddr_plan *p = plan_ready_[fallback].load(std::memory_order_acquire);
    return p ? *p : build_plan_once(fallback);
  }
  const shaddr_plan_step &step(shaddr_coll coll, size_t bytes, unsigned flags = 0) const;
  // shaddr_call_route() chose @st for the call of @coll on @bytes in plan table @table that the
  // caller makes next: the collective runs it without looking the plan up again. Any other
  // collective, or a call that differs from it, looks its own step up.
  void hand_down(const shaddr_plan_step *st, shaddr_coll coll, size_t bytes, int table) {
    routed_ = Routed{st, coll, bytes, table};
  }
  void drop_handed_down() { routed_.step = nullptr; }
  // The algorithm a collective runs for a call: its plan step's (the one handed down by the
  // route, or looked up), counted in stats().runs. The step's algorithm is the same in the
  // plan against any fallback (the rules alone choose it): plan.cc.
  shaddr_algo algorithm(shaddr_coll coll, size_t bytes, unsigned flags = 0) {
    const shaddr_plan_step *st = routed_.step;
    routed_.step = nullptr;
    if (!st || routed_.coll != coll || routed_.bytes != bytes ||
        routed_.table != plan_table(coll, flags))
      st = &step(coll, bytes, flags);
    stats_.runs[coll][st->algo]++;
    return st->algo;
  }
  const Backend &backend() const { return *backend_; }
  shaddr_comm_stats &stats() { return stats_; }
  const char *backend_reason() const { return reason_.c_str(); }

  // --- the protocol (see the file comment) ---
  uint64_t begin();  // returns s
  // Publish up to four exposures for collective s: addr[i]/len[i]. Returns 0 or the expose()
  // error (the post is made anyway, so that readers do not wait forever; a failed exposure's
  // address is kExposureFailed, which readers refuse to read: the owner's status fails the
  // collective on every rank at finish()).
  int post(uint64_t s, const void *const *bufs, const size_t *lens, int n);
  // Expose one more buffer as exposure i (made visible by the next post_stage()).
  int expose_at(int i, const void *buf, size_t len);
  void post_stage(uint64_t s, unsigned k);
  // Wait for peer's post/stage of s. 0, or -EOWNERDEAD if the peer process died.
  int wait_posted(int peer, uint64_t s);
  int wait_stage(int peer, uint64_t s, unsigned k);
  // Peer's last stage of s (once wait_stage() has seen it reach s).
  unsigned peer_stage(int peer) const { return block_->area(peer).stage.load() & 0xff; }
  uint64_t remote_addr(int peer, int i) const { return block_->area(peer).addr[i]; }
  uint64_t remote_len(int peer, int i) const { return block_->area(peer).len[i]; }
  int finish(uint64_t s, int status);  // closing barrier; returns the node-wide status

  // --- the call ledger (nodeblock.h CallLedger; shaddr_call_agree in coll.h) ---
  // Records the next call as run elsewhere (the caller's MPI) and returns at once.
  void forward_call();
  // Records the next call with `token` (non-zero) and waits for every peer's record of it: 0
  // when all made it with the same token, -EXDEV when one differs or ran it elsewhere (every
  // rank that asks then gets -EXDEV), -EOWNERDEAD when a peer died.
  int agree_call(uint64_t token) {
    announce_pending(token);
    return settle_call();
  }
  // agree_call() in two halves (shaddr_call_announce): records the call and returns; the
  // collective that follows settles it before it reads anything of its peers or writes the
  // caller's output. A slot round settles it after publishing this rank's slot (slot_open()),
  // so that waiting for the peers' records overlaps with theirs for this rank's data.
  //
  // The record's ring (the full barrier that wakes a sleeping peer) is deferred so that it does
  // not precede this rank's way to its data: the settling rings it, and in a slot round the
  // round's own waits and its return do, as for its publication (one barrier for both).
  void announce_pending(uint64_t token);
  // agree_call()'s wait for the pending call; 0 if none is pending. Rings the record unless
  // @in_slot_round (the slot round rings it; every other wait may sleep without ringing).
  int settle_call(bool in_slot_round = false);

  // Copy len bytes at peer's (exposed) address into dst, in tuning().chunk pieces.
  int copy_from(int peer, uint64_t addr, void *dst, size_t len);
  // Run fn(ptr, n) over [addr, addr + len) of peer in pieces of at most `piece` bytes: a
  // pointer into a mapping where the backend maps, else into a bounce buffer.
  template <typename Fn>
  int visit(int peer, uint64_t addr, size_t len, size_t piece, Fn &&fn);

  // Scratch memory owned by this rank, grow-only; index 0 and 1 are independent buffers.
  void *scratch(int which, size_t bytes);

  // Waits until pred() holds, for a change that peer makes (and then rings its bell: wait.h),
  // with peer-death detection.
  template <typename Pred>
  int wait_until(int peer, Pred &&pred);
  // After changing this rank's RankArea or MsgCounter: wakes whoever sleeps waiting for it.
  void ring_mine() {
    ring_pending_ = false;
    ring(block_->bell(rank_));
  }
  // A flag of this rank changed and nobody was rung yet (announce_call() and slot_publish()
  // defer their rings): ring.
  // Done before this rank could yield or sleep in a wait (wait_until) and when the collective
  // returns (account()), so that the ring's full barrier, which waits for the store to reach
  // the other cores, overlaps this rank's wait for its peers instead of preceding it.
  void ring_if_pending() {
    if (ring_pending_) ring_mine();
  }

  // The slots: small exchanges through the control block, without a closing barrier.
  // Every rank takes part in every round j (slot_open() if it writes its slot, else
  // slot_next()) and ends it with slot_close(). Round j uses each rank's slot j % kSlotRounds;
  // slot_open() waits until every rank is done with round j - kSlotRounds, so a slot is never
  // rewritten while someone still reads it (what it last learnt of each rank is kept: most
  // rounds read no other rank's line). The round number travels in the slot's first cache
  // line with the data (nodeblock.h).
  //
  // With a call pending in the ledger, slot_open() opens round j without settling it when no
  // wait is needed; the algorithm then settles it with slot_settle(j) right after
  // slot_publish(j), before it reads a peer's slot or writes the caller's output. On -EXDEV
  // every rank that asked takes its round back (and returns without slot_close()): the round
  // numbers stay equal on every rank, and the speculative publication is withdrawn before this
  // rank records its next call, which any reader of a later round has seen first.
  int slot_open(uint64_t *j);
  int slot_settle(uint64_t j);
  // A rank that does not write its slot in round j: settles a pending call first.
  int slot_next(uint64_t *j) {
    if (int err = settle_call(true)) return err;
    *j = ++slot_seq_;
    return 0;
  }
  // Rank r's slot data of round j; pass the byte count where every rank knows it (where it
  // starts depends on it: nodeblock.h).
  void *slot(int r, uint64_t j, size_t bytes = 0) { return block_->reduce_slot(r, j, bytes); }
  size_t slot_bytes() const { return block_->reduce_slot_bytes(); }
  // meta: a note for the readers (slot_meta()), published with the data.
  void slot_publish(uint64_t j, uint64_t meta = 0);
  int slot_wait(int r, uint64_t j);
  uint64_t slot_meta(int r, uint64_t j) { return block_->slot_header(r, j).meta; }
  void slot_close(uint64_t j);

  Fifo::Cursor &bcast_cursor() { return bcast_cursor_; }

  // The statistics of a collective that ran (calls[] was counted at entry), once, by its C
  // entry point: a failure, or a success that took the FIFO/slots (mark_small_path(), by the
  // algorithm). Returns err.
  void mark_small_path() { small_path_ = true; }
  int account(int err) {
    ring_if_pending();
    if (err) {
      if (err != -EXDEV) stats_.failures++;  // -EXDEV: the ranks' calls differed, nothing moved
    } else if (small_path_) {
      stats_.fifo_calls++;
    }
    small_path_ = false;
    return err;
  }

  // SHADDR_FAIL_INJECT (testing aid): every n-th fallible step of this rank (an exposure, a
  // mapping or read of a peer's memory) fails with -ECANCELED instead of running.
  int injected_failure() {
    if (!tuning_.fail_inject || (tuning_.fail_inject_rank >= 0 && tuning_.fail_inject_rank != rank_))
      return 0;
    return ++fallible_steps_ % tuning_.fail_inject ? 0 : -ECANCELED;
  }

 private:
  // The ledger's record marks (announce_call(), await_call()).
  static constexpr uint64_t kCallWriting = uint64_t{1} << 63;
  static constexpr uint64_t kCallForwardedMark = uint64_t{1} << 62;
  static constexpr uint64_t kCallMarks = kCallWriting | kCallForwardedMark;

  Comm() = default;
  bool peer_alive(int peer);
  int exposure_failed(int peer) {
    return fail(-ECANCELED, "rank " + std::to_string(peer) +
                                " could not expose its buffer: nothing of it was read");
  }
  uint64_t announce_call(uint64_t token);  // writes this rank's ledger record (ring deferred)
  int await_call(uint64_t k, uint64_t token);
  bool peer_done_with(int r, uint64_t round);  // rank r no longer reads round `round` or older
  int rank_ = 0, size_ = 0;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<NodeBlock> block_;
  std::vector<pid_t> pids_;
  Tuning tuning_{};
  CostModel model_;
  Grouping levels_;
  bool levels_weighed_ = true;
  const shaddr_plan &build_plan_once(shaddr_fallback fallback);  // plan.cc, under plans_lock_
  std::unique_ptr<shaddr_plan> plans_[SHADDR_FALLBACK_COUNT];
  std::atomic<const shaddr_plan *> plan_ready_[SHADDR_FALLBACK_COUNT] = {};
  std::mutex plans_lock_;
  struct Routed {
    const shaddr_plan_step *step;  // nullptr: nothing handed down
    shaddr_coll coll;
    size_t bytes;
    int table;
  };
  Routed routed_{};
  shaddr_comm_stats stats_{};
  std::string reason_;
  uint64_t seq_ = 0;
  uint64_t slot_seq_ = 0;
  uint64_t call_seq_ = 0;  // calls recorded in the ledger
  uint64_t pending_call_ = 0;   // announced and not settled (0: none)
  uint64_t pending_token_ = 0;
  // A round opened before its call was settled (slot_open()): what slot_settle() restores.
  uint64_t spec_round_ = 0, spec_prev_round_ = 0, spec_prev_published_ = 0;
  uint64_t slot_published_ = 0;        // the last round this rank wrote its slot in
  std::vector<uint64_t> slot_closed_;  // of each rank: the last round it is known done with
  uint64_t fallible_steps_ = 0;  // SHADDR_FAIL_INJECT's count
  bool small_path_ = false;      // the running collective took the FIFO/slots
  bool ring_pending_ = false;    // see ring_if_pending()
  Fifo::Cursor bcast_cursor_;
  std::vector<char> bounce_;
  std::vector<char> scratch_[2];
};

template <typename Pred>
int Comm::wait_until(int peer, Pred &&pred) {
  Waiter w(block_->wait_policy(), &block_->bell(peer));
  uint64_t next_check = 4096;
  while (!w.round(pred)) {
    if (ring_pending_ && w.effort() >= block_->wait_policy().spins) ring_mine();
    // About every 4096 rounds (a sleep counts 256; a millisecond or more once yielding or
    // sleeping): is the peer still there? Look once more after finding it gone: it may have
    // done its part and exited since the last look (a peer leaves the closing barrier of
    // shaddr_comm_free as soon as it has seen everyone arrive); what a dead process stored is
    // all visible by now.
    if (w.effort() >= next_check) {
      next_check = w.effort() + 4096;
      if (!peer_alive(peer)) return pred() ? 0 : -EOWNERDEAD;
    }
  }
  return 0;
}

template <typename Fn>
int Comm::visit(int peer, uint64_t addr, size_t len, size_t piece, Fn &&fn) {
  if (peer == rank_ && !backend_->stages()) {
    fn(reinterpret_cast<const void *>(addr), len);
    return 0;
  }
  if (len && addr >= kExposureFailed) return exposure_failed(peer);
  size_t off = 0;
  while (off < len) {
    const size_t n = len - off < piece ? len - off : piece;
    RegCache::Ref ref;
    if (int err = injected_failure()) return err;
    int err = backend_->map(peer, addr + off, n, &ref);
    if (!err) {
      fn(static_cast<const void *>(ref.ptr), n);
      backend_->unmap(peer, ref);
    } else if (err == -ENOTSUP || err == -ENOSPC) {
      if (bounce_.size() < n) bounce_.resize(n);
      if ((err = backend_->read(peer, addr + off, bounce_.data(), n))) return err;
      fn(static_cast<const void *>(bounce_.data()), n);
    } else {
      return err;
    }
    off += n;
  }
  return 0;
}

// --- The protocol's code ---
// Inline, so that an algorithm's warm path (coll_*.cc) compiles into its own file and calls
// out only to the plan and the backend; comm.cc makes, tunes and frees node communicators.

inline uint64_t Comm::begin() {
  const uint64_t s = ++seq_;
  block_->area(rank_).seq.store(s, std::memory_order_relaxed);
  return s;
}

inline int Comm::post(uint64_t s, const void *const *bufs, const size_t *lens, int n) {
  RankArea &a = block_->area(rank_);
  int err = 0;
  for (int i = 0; i < n; i++) {
    uintptr_t remote = 0;
    if (!err && lens[i]) err = injected_failure();
    if (!err && lens[i]) err = backend_->expose(bufs[i], lens[i], &remote);
    a.addr[i] = err && lens[i] ? kExposureFailed : remote;
    a.len[i] = lens[i];
  }
  a.posted.store(s, std::memory_order_release);
  ring_mine();
  return err;
}

inline int Comm::expose_at(int i, const void *buf, size_t len) {
  RankArea &a = block_->area(rank_);
  uintptr_t remote = 0;
  int err = len ? injected_failure() : 0;
  if (!err && len) err = backend_->expose(buf, len, &remote);
  a.addr[i] = err ? kExposureFailed : remote;
  a.len[i] = len;
  return err;
}

inline void Comm::post_stage(uint64_t s, unsigned k) {
  block_->area(rank_).stage.store(s << 8 | k, std::memory_order_release);
  ring_mine();
}

inline int Comm::wait_posted(int peer, uint64_t s) {
  const RankArea &a = block_->area(peer);
  return wait_until(peer, [&] { return a.posted.load(std::memory_order_acquire) >= s; });
}

inline int Comm::wait_stage(int peer, uint64_t s, unsigned k) {
  const RankArea &a = block_->area(peer);
  const uint64_t want = s << 8 | k;
  return wait_until(peer, [&] { return a.stage.load(std::memory_order_acquire) >= want; });
}

inline int Comm::finish(uint64_t s, int status) {
  RankArea &mine = block_->area(rank_);
  mine.status[s & 1].store(status, std::memory_order_relaxed);
  mine.arrive.store(s, std::memory_order_release);
  ring_mine();
  int result = 0;
  for (int r = 0; r < size_; r++) {
    const RankArea &a = block_->area(r);
    if (int err = wait_until(r, [&] { return a.arrive.load(std::memory_order_acquire) >= s; }))
      return err;
    // status[s & 1] of rank r is rewritten only at its closing barrier of s + 2, which needs
    // this rank's arrival at s + 1: it is stable here.
    const int st = static_cast<int>(a.status[s & 1].load(std::memory_order_relaxed));
    if (!result && st) result = st;
  }
  backend_->end_exposures();
  return result;
}

// The ledger's `call` is a sequence lock: while a rank rewrites its token it marks `call` with
// kCallWriting (keeping the previous call's number), so a reader that saw call k and then the
// same value again read k's token. A forwarded call is one store, k with kCallForwardedMark,
// and leaves `token` alone: the mark is its token. A rank's `agreed` is stored before its next
// record starts.
inline uint64_t Comm::announce_call(uint64_t token) {
  CallLedger &mine = block_->ledger(rank_);
  const uint64_t k = ++call_seq_;
  mine.call.store((k - 1) | kCallWriting, std::memory_order_release);
  // Release: a reader that sees the new token sees the writing mark before it.
  mine.token.store(token, std::memory_order_release);
  mine.call.store(k, std::memory_order_release);
  ring_pending_ = true;  // rung later (announce_pending()); the peers see the store anyway
  return k;
}

// Every short call the caller's plan forwards comes here, so its record does without ring()'s
// full barrier: that barrier waits for the stores still in flight, the MPI's own stores to
// other cores among them, and cost such a call ~30 ns (Open MPI's 8-byte Bcast: 0.08 us). Only
// a rank whose call differs waits for this record (an erroneous program, or a rank that could
// not prepare its buffers): it is rung if it is seen asleep; one that lies down at this very
// moment sleeps its bounded sleep (SHADDR_WAIT_SLEEP_MAX, or the MPI's progress interval) and
// then sees the record.
inline void Comm::forward_call() {
  if (pending_call_) settle_call();  // a collective that never ran: its call is over
  block_->ledger(rank_).call.store(++call_seq_ | kCallForwardedMark, std::memory_order_release);
  if (block_->bell(rank_).sleepers.load(std::memory_order_relaxed)) ring_mine();
}

inline void Comm::announce_pending(uint64_t token) {
  if (pending_call_) settle_call();  // a collective that never ran: its call is over
  pending_token_ = token;
  pending_call_ = announce_call(token);
}

inline int Comm::settle_call(bool in_slot_round) {
  if (!pending_call_) return 0;
  const uint64_t k = pending_call_;
  pending_call_ = 0;
  const int err = size_ == 1 ? 0 : await_call(k, pending_token_);
  if (err || !in_slot_round) ring_if_pending();
  if (err == -EXDEV)
    return fail(err, "a peer made this call with other arguments or ran it elsewhere");
  return err ? fail(err, "the call's agreement: a peer died") : 0;
}

inline int Comm::await_call(uint64_t k, uint64_t token) {
  for (int r = 0; r < size_; r++) {
    if (r == rank_) continue;
    const CallLedger &l = block_->ledger(r);
    uint64_t theirs = kCallForwarded;
    if (int err = wait_until(r, [&] {
          const uint64_t c = l.call.load(std::memory_order_acquire);
          const uint64_t done = c & ~kCallMarks;  // the last call it recorded whole
          if (c == (k | kCallForwardedMark)) {
            theirs = kCallForwarded;
            return true;
          }
          if (c == k) {
            theirs = l.token.load(std::memory_order_acquire);
            if (l.call.load(std::memory_order_relaxed) == k) return true;
          } else if (done < k) {
            return false;
          }
          // Past k: it saw every token of k equal to its own (so to this rank's), or it did not.
          theirs = l.agreed.load(std::memory_order_acquire) == k ? token : kCallForwarded;
          return true;
        }))
      return err;
    if (theirs != token) return -EXDEV;
  }
  block_->ledger(rank_).agreed.store(k, std::memory_order_release);
  return 0;
}

// Rank r is done with round x once it closed a round >= x (slot_read), or published round
// x + 1: a rank publishes a round only after it has read what it reads of the rounds before.
// So a rank that writes its slot in a round does not close it (no store, no ring): the
// Allreduce never closes, and reading a peer's slot of round j tells that it is done with j-1.
inline bool Comm::peer_done_with(int r, uint64_t round) {
  if (slot_closed_[r] >= round) return true;
  const uint64_t read = block_->area(r).slot_read.load(std::memory_order_acquire);
  const uint64_t published =
      block_->slot_header(r, round + 1).round.load(std::memory_order_acquire);
  const uint64_t seen = std::max(read, published ? published - 1 : 0);
  if (seen > slot_closed_[r]) slot_closed_[r] = seen;
  return seen >= round;
}

inline int Comm::slot_open(uint64_t *j) {
  const uint64_t next = slot_seq_ + 1;
  const uint64_t need = next > kSlotRounds ? next - kSlotRounds : 0;
  if (pending_call_) {
    // Open before settling only where nothing is waited for: a peer that forwarded this call
    // may never take part in round `need` again.
    bool ready = true;
    for (int r = 0; r < size_ && ready && need; r++)
      ready = r == rank_ || peer_done_with(r, need);
    if (!ready) {
      if (int err = settle_call(true)) return err;
    } else {
      spec_round_ = next;
      spec_prev_round_ = block_->slot_header(rank_, next).round.load(std::memory_order_relaxed);
      spec_prev_published_ = slot_published_;
    }
  }
  *j = ++slot_seq_;
  if (!need) return 0;
  for (int r = 0; r < size_; r++) {
    if (r == rank_) continue;
    if (int err = wait_until(r, [&] { return peer_done_with(r, need); })) return err;
  }
  return 0;
}

inline int Comm::slot_settle(uint64_t j) {
  if (spec_round_ != j) return 0;  // settled before the round was opened, or nothing pending
  spec_round_ = 0;
  const int err = settle_call(true);
  if (err == -EXDEV) {
    if (slot_published_ == j) {
      block_->slot_header(rank_, j).round.store(spec_prev_round_, std::memory_order_release);
      slot_published_ = spec_prev_published_;
    }
    slot_seq_ = j - 1;
  }
  return err;
}

inline void Comm::slot_publish(uint64_t j, uint64_t meta) {
  SlotHeader &h = block_->slot_header(rank_, j);
  h.meta = meta;
  h.round.store(j, std::memory_order_release);
  slot_published_ = j;
  ring_pending_ = true;  // rung before this rank waits long or returns (ring_if_pending())
}

inline int Comm::slot_wait(int r, uint64_t j) {
  const SlotHeader &h = block_->slot_header(r, j);
  // Not rewritten with a later round before this rank is done with round j.
  if (int err = wait_until(r, [&] { return h.round.load(std::memory_order_acquire) >= j; }))
    return err;
  if (slot_closed_[r] < j - 1) slot_closed_[r] = j - 1;
  return 0;
}

inline void Comm::slot_close(uint64_t j) {
  if (slot_published_ == j) return;  // the next round's publication or close says it
  block_->area(rank_).slot_read.store(j, std::memory_order_release);
  ring_mine();
}

inline int Comm::copy_from(int peer, uint64_t addr, void *dst, size_t len) {
  if (len && addr >= kExposureFailed) return exposure_failed(peer);
  char *d = static_cast<char *>(dst);
  for (size_t off = 0; off < len; off += tuning_.chunk) {
    const size_t n = len - off < tuning_.chunk ? len - off : tuning_.chunk;
    if (int err = injected_failure()) return err;
    if (int err = backend_->read(peer, addr + off, d + off, n)) return err;
  }
  return 0;
}

inline void *Comm::scratch(int which, size_t bytes) {
  std::vector<char> &v = scratch_[which & 1];
  if (v.size() < bytes) v.resize(bytes);
  return v.data();
}

// The C handle is the Comm itself.
inline Comm *from_handle(shaddr_comm_t *c) { return reinterpret_cast<Comm *>(c); }
inline const Comm *from_handle(const shaddr_comm_t *c) {
  return reinterpret_cast<const Comm *>(c);
}

// No buffer can be larger than the user address space (128 TiB on x86-64 with 4-level tables).
constexpr size_t kMaxBytes = size_t(1) << 47;

// Common argument checks of the C entry points; each returns 0 or a negative errno and records
// the reason.
inline int check_comm(const shaddr_comm_t *c) {
  return c ? 0 : fail(-EINVAL, "NULL communicator");
}

inline int check_root(const Comm &c, int root) {
  if (root < 0 || root >= c.size())
    return fail(-EINVAL, "root " + std::to_string(root) + " is not a rank of this " +
                             std::to_string(c.size()) + "-rank communicator");
  return 0;
}

inline int check_buf(const void *buf, size_t bytes, const char *what) {
  if (!buf && bytes) return fail(-EFAULT, std::string("NULL ") + what);
  if (bytes > kMaxBytes)
    return fail(-EOVERFLOW, std::string(what) + " larger than any address space");
  return 0;
}

}  // namespace shaddr
