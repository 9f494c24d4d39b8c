// SPDX-License-Identifier: MIT
// Gather(v), Scatter(v), Allgather(v), Alltoall(v): every rank exposes what others need and
// pulls what it needs straight from the owner's buffer (one copy), visiting peers in a
// staggered order (rank r starts at r + 1) so that not everyone reads the same peer at once.
// Where a reader needs the owner's displacements (Scatterv, Alltoallv), the owner exposes its
// arrays too and the reader fetches its own entry. Everything ends with the closing barrier.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "coll_rules.h"
#include "comm.h"
#include "error.h"

namespace shaddr {

// Which algorithm the gathering collectives take (coll_rules.h).
bool gather_slots_fit(size_t per_rank, const Tuning &t) { return per_rank <= t.slot_max; }

// A ring where reading every peer in turn would thrash the backend's mappings (window: 3 slots
// for 7 peers maps and unmaps on every read, 8x slower than stock MPI at 8 ranks). It needs a
// backend that reads the peer's live memory (not staged copies) and a stage per step (8 bits).
bool allgather_ring_wins(int n, bool backend_stages, size_t max_mappings, const Tuning &t) {
  if (backend_stages || n < 3 || n > 255 || t.allgather_ring == 0) return false;
  return t.allgather_ring == 1 || max_mappings < static_cast<size_t>(n - 1);
}

namespace {

bool in_place(const void *p) { return p == SHADDR_IN_PLACE; }

// Bytes from the start of a v-buffer to the end of its last non-empty block; -EOVERFLOW.
int span(const size_t *counts, const size_t *displs, int n, size_t *out) {
  size_t end = 0;
  for (int i = 0; i < n; i++) {
    size_t e;
    if (!counts[i]) continue;
    if (__builtin_add_overflow(displs[i], counts[i], &e)) return -EOVERFLOW;
    if (e > end) end = e;
  }
  *out = end;
  return 0;
}

// A uniform layout as counts/displacements: block i at i * bytes.
struct Uniform {
  std::vector<size_t> counts, displs;
  int make(int n, size_t bytes) {
    counts.assign(n, bytes);
    displs.resize(n);
    for (int i = 0; i < n; i++)
      if (__builtin_mul_overflow(static_cast<size_t>(i), bytes, &displs[i])) return -EOVERFLOW;
    return 0;
  }
};

int size_mismatch(int peer, size_t theirs, size_t mine) {
  return fail(-EMSGSIZE, "rank " + std::to_string(peer) + " sends " + std::to_string(theirs) +
                             " bytes where " + std::to_string(mine) + " are expected");
}

Comm *enter(shaddr_comm_t *comm, shaddr_coll which, int *err) {
  clear_error();
  *err = check_comm(comm);
  if (*err) return nullptr;
  Comm *c = from_handle(comm);
  c->stats().calls[which]++;
  return c;
}

// Waits for @peer's post of s and copies its exposure 0, a block of @want bytes, to @dst; a block
// of another length is a count mismatch.
int read_block(Comm &c, uint64_t s, int peer, char *dst, size_t want) {
  if (int err = c.wait_posted(peer, s)) return err;
  if (c.remote_len(peer, 0) != want) return size_mismatch(peer, c.remote_len(peer, 0), want);
  return c.copy_from(peer, c.remote_addr(peer, 0), dst, want);
}

// Reads peer's exposure `i`'s size_t entry `index` (its displacement or count arrays).
int fetch_entry(Comm &c, int peer, int i, int index, size_t *out) {
  return c.copy_from(peer, c.remote_addr(peer, i) + sizeof(size_t) * index, out, sizeof(size_t));
}

int gatherv(Comm &c, const void *sendbuf, size_t sendbytes, void *recvbuf,
            const size_t *recvbytes, const size_t *displs, int root) {
  if (int err = c.settle_call()) return err;
  const int me = c.rank(), n = c.size();
  const bool inplace = me == root && in_place(sendbuf);
  if (!inplace)
    if (int err = check_buf(sendbuf, sendbytes, "send buffer")) return err;
  size_t total = 0;
  if (me == root) {
    if (!recvbytes || !displs) return fail(-EINVAL, "NULL counts or displacements at the root");
    if (int err = span(recvbytes, displs, n, &total)) return fail(err, "displacements overflow");
    if (int err = check_buf(recvbuf, total, "receive buffer")) return err;
  }
  char *out = static_cast<char *>(recvbuf);
  const uint64_t s = c.begin();
  const void *bufs[1] = {inplace ? nullptr : sendbuf};
  const size_t lens[1] = {inplace || me == root ? 0 : sendbytes};
  int err = c.post(s, bufs, lens, 1);
  if (me == root) {
    c.stats().bytes[SHADDR_COLL_GATHER] += total;
    if (!inplace) {
      if (sendbytes != recvbytes[me]) err = size_mismatch(me, sendbytes, recvbytes[me]);
      else if (sendbytes) std::memcpy(out + displs[me], sendbuf, sendbytes);
    }
    for (int i = 1; i < n && !err; i++) {
      const int q = (root + i) % n;
      err = read_block(c, s, q, out + displs[q], recvbytes[q]);
    }
  } else {
    c.stats().bytes[SHADDR_COLL_GATHER] += sendbytes;
  }
  return c.finish(s, err);
}

int scatterv(Comm &c, const void *sendbuf, const size_t *sendbytes, const size_t *displs,
             void *recvbuf, size_t recvbytes, int root, bool uniform) {
  const int me = c.rank(), n = c.size();
  if (int err = c.settle_call()) return err;
  const bool inplace = me == root && recvbuf == SHADDR_IN_PLACE;
  if (!inplace)
    if (int err = check_buf(recvbuf, recvbytes, "receive buffer")) return err;
  size_t total = 0;
  if (me == root) {
    if (!sendbytes || !displs) return fail(-EINVAL, "NULL counts or displacements at the root");
    if (int err = span(sendbytes, displs, n, &total)) return fail(err, "displacements overflow");
    if (int err = check_buf(sendbuf, total, "send buffer")) return err;
  }
  const uint64_t s = c.begin();
  int err = 0;
  if (me == root) {
    const void *bufs[3] = {sendbuf, displs, sendbytes};
    const size_t lens[3] = {total, uniform ? 0 : n * sizeof(size_t), uniform ? 0 : n * sizeof(size_t)};
    err = c.post(s, bufs, lens, 3);
    c.stats().bytes[SHADDR_COLL_SCATTER] += total;
    if (!err && !inplace) {
      if (sendbytes[me] != recvbytes) err = size_mismatch(me, sendbytes[me], recvbytes);
      else if (recvbytes) std::memcpy(recvbuf, static_cast<const char *>(sendbuf) + displs[me], recvbytes);
    }
  } else {
    c.stats().bytes[SHADDR_COLL_SCATTER] += recvbytes;
    err = c.wait_posted(root, s);
    size_t displ = recvbytes * me, count = recvbytes;
    if (!err && !uniform) err = fetch_entry(c, root, 1, me, &displ);
    if (!err && !uniform) err = fetch_entry(c, root, 2, me, &count);
    if (!err && count != recvbytes) err = size_mismatch(root, count, recvbytes);
    if (!err) err = c.copy_from(root, c.remote_addr(root, 0) + displ, recvbuf, count);
  }
  return c.finish(s, err);
}

// Small collectives through the per-rank slots of the control block: each rank copies what
// others need into its slot, publishes it, and copies what it needs out of theirs. Two copies
// of a few KiB and no system call or closing barrier: cheaper than one copy through a mapping
// or CMA at these sizes, and the only way on a backend with few mappings (window: 3 slots per
// process, so reading 7 peers in turn unmaps and maps on every read).
bool fits_slot(Comm &c, size_t per_rank) { return gather_slots_fit(per_rank, c.tuning()); }

// Allgatherv through the slots: every rank knows every count, so all of them choose this
// together. A slot starts with its writer's byte count, so that a reader whose count differs
// fails with -EMSGSIZE as it would reading the writer's buffer.
bool fits_slot_v(Comm &c, const size_t *counts, int n) {
  if (c.slot_bytes() <= sizeof(uint64_t)) return false;
  for (int i = 0; i < n; i++)
    if (!fits_slot(c, counts[i]) || counts[i] > c.slot_bytes() - sizeof(uint64_t)) return false;
  return true;
}

int slot_allgatherv(Comm &c, const void *sendbuf, size_t sendbytes, char *out,
                    const size_t *recvbytes, const size_t *displs) {
  c.mark_small_path();
  const int me = c.rank(), n = c.size();
  const bool inplace = in_place(sendbuf);
  const void *mine = inplace ? out + displs[me] : sendbuf;
  const size_t mylen = inplace ? recvbytes[me] : sendbytes;
  uint64_t j;
  if (int err = c.slot_open(&j)) return err;
  char *slot = static_cast<char *>(c.slot(me, j));
  const uint64_t header = mylen;
  std::memcpy(slot, &header, sizeof(header));
  if (mylen <= c.slot_bytes() - sizeof(header)) std::memcpy(slot + sizeof(header), mine, mylen);
  c.slot_publish(j);
  if (int err = c.slot_settle(j)) return err;
  int err = 0;
  if (mylen != recvbytes[me]) err = size_mismatch(me, mylen, recvbytes[me]);
  else if (!inplace && mylen) std::memcpy(out + displs[me], sendbuf, mylen);
  // Every block is read even after a mismatch: each reader must see the writer's count.
  for (int i = 1; i < n; i++) {
    const int q = (me + i) % n;
    if (int e = c.slot_wait(q, j)) {
      err = e;
      break;
    }
    const char *theirs = static_cast<const char *>(c.slot(q, j));
    uint64_t len;
    std::memcpy(&len, theirs, sizeof(len));
    if (len != recvbytes[q]) {
      if (!err) err = size_mismatch(q, len, recvbytes[q]);
    } else if (!err && len) {
      std::memcpy(out + displs[q], theirs + sizeof(len), len);
    }
  }
  c.slot_close(j);
  return err;
}

// Ring Allgatherv: at step k each rank copies block me - 1 - k out of its left neighbour's
// receive buffer as soon as the neighbour has it (stage k), so every rank reads one peer's
// buffer, which stays mapped from call to call. A rank that fails, or whose left neighbour
// failed, posts the last stage so that nobody waits for it; finish() then reports the first
// failure on every rank.
// @own_layout: an Allgatherv, whose displacements are each receiver's own (MPI lets them differ
// between ranks): block b is read at the neighbour's displacement of it, not this rank's; the
// neighbour exposes its array, read once per call.
int ring_allgatherv(Comm &c, const void *sendbuf, size_t sendbytes, char *out, size_t total,
                    const size_t *recvbytes, const size_t *displs, bool own_layout) {
  const int me = c.rank(), n = c.size(), left = (me + n - 1) % n;
  constexpr unsigned kFailed = 255;
  int err = 0;
  if (!in_place(sendbuf)) {
    if (sendbytes != recvbytes[me]) err = size_mismatch(me, sendbytes, recvbytes[me]);
    else if (sendbytes) std::memcpy(out + displs[me], sendbuf, sendbytes);
  }
  const uint64_t s = c.begin();
  const size_t array_bytes = sizeof(size_t) * static_cast<size_t>(n);
  const void *mine[2] = {out, displs};
  const size_t lens[2] = {total, own_layout ? array_bytes : 0};
  if (int e = c.post(s, mine, lens, 2); e && !err) err = e;
  const size_t *left_displs = displs;
  if (own_layout && !err && !(err = c.wait_posted(left, s))) {
    auto *theirs = static_cast<size_t *>(c.scratch(0, array_bytes));
    if (c.remote_len(left, 1) != array_bytes) err = -EPROTO;
    else err = c.copy_from(left, c.remote_addr(left, 1), theirs, array_bytes);
    left_displs = theirs;
  }
  bool failed = err != 0;
  for (int k = 0; k < n - 1 && !failed; k++) {
    c.post_stage(s, static_cast<unsigned>(k));  // blocks me down to me - k are here
    const int b = ((me - 1 - k) % n + n) % n;
    const size_t from = left_displs[b];
    if ((err = c.wait_stage(left, s, static_cast<unsigned>(k))) || c.peer_stage(left) == kFailed)
      failed = true;
    else if (!recvbytes[b])
      continue;  // an empty block may lie past the end of the neighbour's buffer (span())
    else if (from + recvbytes[b] > c.remote_len(left, 0) || from + recvbytes[b] < from)
      err = size_mismatch(left, c.remote_len(left, 0), from + recvbytes[b]);
    else
      err = c.copy_from(left, c.remote_addr(left, 0) + from, out + displs[b], recvbytes[b]);
    failed = failed || err;
  }
  if (failed) c.post_stage(s, kFailed);
  return c.finish(s, err);
}

// Allgatherv across the plan's coarsest level once per group: each block whose owner is in
// another group is read from its owner by one rank of this group (its relay: the group's
// members take the other groups' ranks in turn), and by the group's others from the relay's
// receive buffer, on this side of the link; blocks of this group are read from their owners.
// Every rank exposes its block (0), its receive buffer (1) and, for an Allgatherv, its
// displacements (2: MPI lets them differ between ranks, and a block is read at the relay's);
// a relay's stage is the number of blocks it has read, and 255 says it failed, so that nobody
// waits for a block that will not come; finish() reports the first failure on every rank.
// Each block is still one copy into each rank; the link carries it once per group instead of
// once per rank of the group.
int level_allgatherv(Comm &c, const void *sendbuf, size_t sendbytes, char *out, size_t total,
                     const size_t *recvbytes, const size_t *displs, bool own_layout) {
  const LevelGroups &l = c.levels().levels.front();
  const int me = c.rank(), n = c.size(), g = l.group[static_cast<size_t>(me)];
  constexpr unsigned kFailed = 255;
  std::vector<int> group_ranks, across;  // this group's ranks, the others'
  for (int r = 0; r < n; r++)
    (l.group[static_cast<size_t>(r)] == g ? group_ranks : across).push_back(r);
  const size_t members = group_ranks.size();
  const size_t mine = static_cast<size_t>(
      std::find(group_ranks.begin(), group_ranks.end(), me) - group_ranks.begin());
  // across[i] is read by group_ranks[i % members], its (i / members + 1)-th block.

  int err = 0;
  const bool inplace = in_place(sendbuf);
  if (!inplace) {
    if (sendbytes != recvbytes[me]) err = size_mismatch(me, sendbytes, recvbytes[me]);
    else if (sendbytes) std::memcpy(out + displs[me], sendbuf, sendbytes);
  }
  const uint64_t s = c.begin();
  // The block as sent (its readers compare its length with theirs), as the flat Allgather.
  const void *bufs[3] = {inplace ? out + displs[me] : sendbuf, out, displs};
  const size_t lens[3] = {inplace ? recvbytes[me] : sendbytes, total,
                          own_layout ? sizeof(size_t) * static_cast<size_t>(n) : 0};
  if (int e = c.post(s, bufs, lens, 3); e && !err) err = e;
  // The blocks this rank relays, from their owners across the link.
  unsigned relayed = 0;
  for (size_t i = mine; i < across.size() && !err; i += members) {
    const int q = across[i];
    if (!(err = read_block(c, s, q, out + displs[q], recvbytes[q])))
      c.post_stage(s, ++relayed);
  }
  bool failed = err != 0;
  // This group's blocks from their owners, the others' from their relays.
  for (size_t k = 1; k < members && !failed; k++) {
    const int q = group_ranks[(mine + k) % members];
    failed = (err = read_block(c, s, q, out + displs[q], recvbytes[q])) != 0;
  }
  for (size_t k = 0; k < across.size() && !failed; k++) {
    const size_t i = (k + mine) % across.size();
    const int f = group_ranks[i % members], q = across[i];
    if (f == me) continue;
    const unsigned want = static_cast<unsigned>(i / members) + 1;
    size_t at = displs[q];
    if ((err = c.wait_stage(f, s, want)) || c.peer_stage(f) == kFailed) {
      failed = true;
      break;
    }
    if (!recvbytes[q]) continue;  // may lie past the end of the relay's buffer (span())
    if (own_layout && (err = fetch_entry(c, f, 2, q, &at))) break;
    if (at + recvbytes[q] > c.remote_len(f, 1) || at + recvbytes[q] < at)
      err = size_mismatch(f, c.remote_len(f, 1), at + recvbytes[q]);
    else
      err = c.copy_from(f, c.remote_addr(f, 1) + at, out + displs[q], recvbytes[q]);
    failed = err != 0;
  }
  if (err || failed) c.post_stage(s, kFailed);
  return c.finish(s, err);
}

// @algo: the plan's algorithm for the call; SHADDR_ALGO_FALLBACK for an Allgatherv, whose step
// is looked up here.
int allgatherv(Comm &c, const void *sendbuf, size_t sendbytes, void *recvbuf,
               const size_t *recvbytes, const size_t *displs, shaddr_algo algo) {
  const int me = c.rank(), n = c.size();
  if (!recvbytes || !displs) return fail(-EINVAL, "NULL counts or displacements");
  size_t total;
  if (int err = span(recvbytes, displs, n, &total)) return fail(err, "displacements overflow");
  if (int err = check_buf(recvbuf, total, "receive buffer")) return err;
  const bool inplace = in_place(sendbuf);
  if (!inplace)
    if (int err = check_buf(sendbuf, sendbytes, "send buffer")) return err;
  char *out = static_cast<char *>(recvbuf);
  c.stats().bytes[SHADDR_COLL_ALLGATHER] += total;
  const bool own_layout = algo == SHADDR_ALGO_FALLBACK;  // Allgatherv: each rank's displacements
  if (algo == SHADDR_ALGO_FALLBACK) {
    // Every rank knows every count: the plan's step for the largest block, unless a block
    // does not fit a slot with its count (then the plan's algorithm for the largest sizes).
    const size_t largest = *std::max_element(recvbytes, recvbytes + n);
    algo = c.step(SHADDR_COLL_ALLGATHER, largest).algo;
    if (algo == SHADDR_ALGO_SLOTS && !fits_slot_v(c, recvbytes, n))
      algo = c.step(SHADDR_COLL_ALLGATHER, SIZE_MAX).algo;
    c.stats().runs[SHADDR_COLL_ALLGATHER][algo]++;
  }
  if (algo == SHADDR_ALGO_SLOTS)
    return slot_allgatherv(c, sendbuf, sendbytes, out, recvbytes, displs);
  if (int err = c.settle_call()) return err;
  if (algo == SHADDR_ALGO_RING)
    return ring_allgatherv(c, sendbuf, sendbytes, out, total, recvbytes, displs, own_layout);
  if (allgather_by_levels(c.plan(SHADDR_FALLBACK_NONE), *std::max_element(recvbytes, recvbytes + n)))
    return level_allgatherv(c, sendbuf, sendbytes, out, total, recvbytes, displs, own_layout);
  const void *mine = inplace ? out + displs[me] : sendbuf;
  const size_t mylen = inplace ? recvbytes[me] : sendbytes;
  const uint64_t s = c.begin();
  int err = c.post(s, &mine, &mylen, 1);
  if (!err && !inplace) {
    if (sendbytes != recvbytes[me]) err = size_mismatch(me, sendbytes, recvbytes[me]);
    else if (sendbytes) std::memcpy(out + displs[me], sendbuf, sendbytes);
  }
  for (int i = 1; i < n && !err; i++) {
    const int q = (me + i) % n;
    err = read_block(c, s, q, out + displs[q], recvbytes[q]);
  }
  return c.finish(s, err);
}

int alltoallv(Comm &c, const void *sendbuf, const size_t *sendbytes, const size_t *sdispls,
              void *recvbuf, const size_t *recvbytes, const size_t *rdispls, bool uniform) {
  const int me = c.rank(), n = c.size();
  if (int err = c.settle_call()) return err;
  const bool inplace = in_place(sendbuf);
  if (!recvbytes || !rdispls) return fail(-EINVAL, "NULL receive counts or displacements");
  if (inplace) {
    sendbytes = recvbytes;
    sdispls = rdispls;
  } else if (!sendbytes || !sdispls) {
    return fail(-EINVAL, "NULL send counts or displacements");
  }
  size_t rtotal, stotal;
  if (int err = span(recvbytes, rdispls, n, &rtotal)) return fail(err, "displacements overflow");
  if (int err = span(sendbytes, sdispls, n, &stotal)) return fail(err, "displacements overflow");
  if (int err = check_buf(recvbuf, rtotal, "receive buffer")) return err;
  if (!inplace)
    if (int err = check_buf(sendbuf, stotal, "send buffer")) return err;
  char *out = static_cast<char *>(recvbuf);
  // In place, the blocks peers read are overwritten here: expose a copy instead.
  const char *src = static_cast<const char *>(sendbuf);
  if (inplace) {
    char *copy = static_cast<char *>(c.scratch(0, stotal));
    if (stotal) std::memcpy(copy, recvbuf, stotal);
    src = copy;
  }
  c.stats().bytes[SHADDR_COLL_ALLTOALL] += rtotal;
  const uint64_t s = c.begin();
  const void *bufs[3] = {src, sdispls, sendbytes};
  const size_t lens[3] = {stotal, uniform ? 0 : n * sizeof(size_t), uniform ? 0 : n * sizeof(size_t)};
  int err = c.post(s, bufs, lens, 3);
  if (!err) {
    if (sendbytes[me] != recvbytes[me]) err = size_mismatch(me, sendbytes[me], recvbytes[me]);
    else if (recvbytes[me]) std::memcpy(out + rdispls[me], src + sdispls[me], recvbytes[me]);
  }
  for (int i = 1; i < n && !err; i++) {
    const int q = (me + i) % n;
    if ((err = c.wait_posted(q, s))) break;
    size_t displ = sdispls[me], count = recvbytes[q];  // uniform: same layout on every rank
    if (!uniform && (err = fetch_entry(c, q, 1, me, &displ))) break;
    if (!uniform && (err = fetch_entry(c, q, 2, me, &count))) break;
    if (count != recvbytes[q]) err = size_mismatch(q, count, recvbytes[q]);
    else err = c.copy_from(q, c.remote_addr(q, 0) + displ, out + rdispls[q], count);
  }
  err = c.finish(s, err);
  // A failed call leaves in-place input as it was (coll.h): the copy peers read is intact.
  if (err && inplace && stotal) std::memcpy(recvbuf, src, stotal);
  return err;
}

enum class SlotKind { kGather, kScatter, kAllgather, kAlltoall };

int slot_collective(Comm &c, SlotKind kind, const void *sendbuf, size_t bytes, void *recvbuf,
                    int root) {
  c.mark_small_path();
  const int me = c.rank(), n = c.size();
  char *out = static_cast<char *>(recvbuf);
  uint64_t j;
  if (int err = c.slot_open(&j)) return err;
  // What this rank writes into its slot.
  const bool writes = kind == SlotKind::kScatter ? me == root : true;
  if (writes) {
    const void *src = sendbuf;
    size_t len = bytes;
    if (kind == SlotKind::kScatter || kind == SlotKind::kAlltoall) len = bytes * n;
    if (in_place(sendbuf)) src = kind == SlotKind::kAlltoall ? out : out + me * bytes;
    if (!(kind == SlotKind::kGather && me == root)) std::memcpy(c.slot(me, j), src, len);
  }
  c.slot_publish(j);
  if (int err = c.slot_settle(j)) return err;
  int err = 0;
  switch (kind) {
  case SlotKind::kGather:
    if (me != root) break;
    if (!in_place(sendbuf)) std::memcpy(out + me * bytes, sendbuf, bytes);
    for (int i = 1; i < n && !err; i++) {
      const int q = (root + i) % n;
      if (!(err = c.slot_wait(q, j))) std::memcpy(out + q * bytes, c.slot(q, j), bytes);
    }
    break;
  case SlotKind::kScatter:
    if (me == root) {
      if (recvbuf != SHADDR_IN_PLACE)
        std::memcpy(recvbuf, static_cast<const char *>(sendbuf) + me * bytes, bytes);
    } else if (!(err = c.slot_wait(root, j))) {
      std::memcpy(recvbuf, static_cast<const char *>(c.slot(root, j)) + me * bytes, bytes);
    }
    break;
  case SlotKind::kAllgather:
    if (!in_place(sendbuf)) std::memcpy(out + me * bytes, sendbuf, bytes);
    for (int i = 1; i < n && !err; i++) {
      const int q = (me + i) % n;
      if (!(err = c.slot_wait(q, j))) std::memcpy(out + q * bytes, c.slot(q, j), bytes);
    }
    break;
  case SlotKind::kAlltoall:
    // The slot holds this rank's own blocks too (in place, recvbuf is overwritten below).
    std::memcpy(out + me * bytes, static_cast<const char *>(c.slot(me, j)) + me * bytes, bytes);
    for (int i = 1; i < n && !err; i++) {
      const int q = (me + i) % n;
      if (!(err = c.slot_wait(q, j)))
        std::memcpy(out + q * bytes, static_cast<const char *>(c.slot(q, j)) + me * bytes, bytes);
    }
    break;
  }
  c.slot_close(j);
  return err;
}

// Closes a C entry point that ran a collective: its statistics, its error.
int done(Comm &c, int err, const char *name) { return c.account(err) ? fail(err, name) : 0; }

}  // namespace
}  // namespace shaddr

using shaddr::Comm;
using shaddr::done;
using shaddr::enter;

extern "C" {

SHADDR_API int shaddr_gather(shaddr_comm_t *comm, const void *sendbuf, size_t bytes,
                             void *recvbuf, int root) {
  int err;
  Comm *c = enter(comm, SHADDR_COLL_GATHER, &err);
  if (!c) return err;
  if ((err = shaddr::check_root(*c, root))) return err;
  if (bytes == 0) return c->account(c->settle_call());
  if (c->algorithm(SHADDR_COLL_GATHER, bytes) == SHADDR_ALGO_SLOTS) {
    if (!(c->rank() == root && sendbuf == SHADDR_IN_PLACE) &&
        (err = shaddr::check_buf(sendbuf, bytes, "send buffer")))
      return err;
    if (c->rank() == root && (err = shaddr::check_buf(recvbuf, bytes, "receive buffer")))
      return err;
    return done(*c, shaddr::slot_collective(*c, shaddr::SlotKind::kGather, sendbuf, bytes, recvbuf,
                                        root),
                "shaddr_gather");
  }
  shaddr::Uniform u;
  if ((err = u.make(c->size(), bytes))) return shaddr::fail(err, "shaddr_gather: size");
  return done(*c, shaddr::gatherv(*c, sendbuf, bytes, recvbuf, u.counts.data(), u.displs.data(), root),
              "shaddr_gather");
}

SHADDR_API int shaddr_gatherv(shaddr_comm_t *comm, const void *sendbuf, size_t sendbytes,
                              void *recvbuf, const size_t *recvbytes, const size_t *displs,
                              int root) {
  int err;
  Comm *c = enter(comm, SHADDR_COLL_GATHER, &err);
  if (!c) return err;
  c->stats().runs[SHADDR_COLL_GATHER][SHADDR_ALGO_DIRECT]++;
  if ((err = shaddr::check_root(*c, root))) return err;
  return done(*c, shaddr::gatherv(*c, sendbuf, sendbytes, recvbuf, recvbytes, displs, root),
              "shaddr_gatherv");
}

SHADDR_API int shaddr_scatter(shaddr_comm_t *comm, const void *sendbuf, size_t bytes,
                              void *recvbuf, int root) {
  int err;
  Comm *c = enter(comm, SHADDR_COLL_SCATTER, &err);
  if (!c) return err;
  if ((err = shaddr::check_root(*c, root))) return err;
  if (bytes == 0) return c->account(c->settle_call());
  if (c->algorithm(SHADDR_COLL_SCATTER, bytes) == SHADDR_ALGO_SLOTS) {
    if (c->rank() == root && (err = shaddr::check_buf(sendbuf, bytes, "send buffer")))
      return err;
    if (!(c->rank() == root && recvbuf == SHADDR_IN_PLACE) &&
        (err = shaddr::check_buf(recvbuf, bytes, "receive buffer")))
      return err;
    return done(*c, shaddr::slot_collective(*c, shaddr::SlotKind::kScatter, sendbuf, bytes, recvbuf,
                                        root),
                "shaddr_scatter");
  }
  shaddr::Uniform u;
  if ((err = u.make(c->size(), bytes))) return shaddr::fail(err, "shaddr_scatter: size");
  return done(*c, shaddr::scatterv(*c, sendbuf, u.counts.data(), u.displs.data(), recvbuf, bytes,
                               root, true),
              "shaddr_scatter");
}

SHADDR_API int shaddr_scatterv(shaddr_comm_t *comm, const void *sendbuf, const size_t *sendbytes,
                               const size_t *displs, void *recvbuf, size_t recvbytes, int root) {
  int err;
  Comm *c = enter(comm, SHADDR_COLL_SCATTER, &err);
  if (!c) return err;
  c->stats().runs[SHADDR_COLL_SCATTER][SHADDR_ALGO_DIRECT]++;
  if ((err = shaddr::check_root(*c, root))) return err;
  return done(*c, shaddr::scatterv(*c, sendbuf, sendbytes, displs, recvbuf, recvbytes, root, false),
              "shaddr_scatterv");
}

SHADDR_API int shaddr_allgather(shaddr_comm_t *comm, const void *sendbuf, size_t bytes,
                                void *recvbuf) {
  int err;
  Comm *c = enter(comm, SHADDR_COLL_ALLGATHER, &err);
  if (!c) return err;
  if (bytes == 0) return c->account(c->settle_call());
  const shaddr_algo algo = c->algorithm(SHADDR_COLL_ALLGATHER, bytes);
  if (algo == SHADDR_ALGO_SLOTS) {
    if ((err = shaddr::check_buf(recvbuf, bytes, "receive buffer")) ||
        (sendbuf != SHADDR_IN_PLACE && (err = shaddr::check_buf(sendbuf, bytes, "send buffer"))))
      return err;
    return done(*c, shaddr::slot_collective(*c, shaddr::SlotKind::kAllgather, sendbuf, bytes,
                                        recvbuf, 0),
                "shaddr_allgather");
  }
  shaddr::Uniform u;
  if ((err = u.make(c->size(), bytes))) return shaddr::fail(err, "shaddr_allgather: size");
  return done(*c,
              shaddr::allgatherv(*c, sendbuf, bytes, recvbuf, u.counts.data(), u.displs.data(),
                                 algo),
              "shaddr_allgather");
}

SHADDR_API int shaddr_allgatherv(shaddr_comm_t *comm, const void *sendbuf, size_t sendbytes,
                                 void *recvbuf, const size_t *recvbytes, const size_t *displs) {
  int err;
  Comm *c = enter(comm, SHADDR_COLL_ALLGATHER, &err);
  if (!c) return err;
  return done(*c,
              shaddr::allgatherv(*c, sendbuf, sendbytes, recvbuf, recvbytes, displs,
                                 SHADDR_ALGO_FALLBACK),
              "shaddr_allgatherv");
}

SHADDR_API int shaddr_alltoall(shaddr_comm_t *comm, const void *sendbuf, size_t bytes,
                               void *recvbuf) {
  int err;
  Comm *c = enter(comm, SHADDR_COLL_ALLTOALL, &err);
  if (!c) return err;
  if (bytes == 0) return c->account(c->settle_call());
  if (c->algorithm(SHADDR_COLL_ALLTOALL, bytes) == SHADDR_ALGO_SLOTS) {
    if ((err = shaddr::check_buf(recvbuf, bytes, "receive buffer")) ||
        (sendbuf != SHADDR_IN_PLACE && (err = shaddr::check_buf(sendbuf, bytes, "send buffer"))))
      return err;
    return done(*c, shaddr::slot_collective(*c, shaddr::SlotKind::kAlltoall, sendbuf, bytes,
                                        recvbuf, 0),
                "shaddr_alltoall");
  }
  shaddr::Uniform u;
  if ((err = u.make(c->size(), bytes))) return shaddr::fail(err, "shaddr_alltoall: size");
  return done(*c, shaddr::alltoallv(*c, sendbuf, u.counts.data(), u.displs.data(), recvbuf,
                                u.counts.data(), u.displs.data(), true),
              "shaddr_alltoall");
}

SHADDR_API int shaddr_alltoallv(shaddr_comm_t *comm, const void *sendbuf, const size_t *sendbytes,
                                const size_t *sdispls, void *recvbuf, const size_t *recvbytes,
                                const size_t *rdispls) {
  int err;
  Comm *c = enter(comm, SHADDR_COLL_ALLTOALL, &err);
  if (!c) return err;
  c->stats().runs[SHADDR_COLL_ALLTOALL][SHADDR_ALGO_DIRECT]++;
  return done(*c, shaddr::alltoallv(*c, sendbuf, sendbytes, sdispls, recvbuf, recvbytes, rdispls,
                                false),
              "shaddr_alltoallv");
}

}  // extern "C"
