// SPDX-License-Identifier: MIT
// Reduce and Allreduce.
//
//  - slots: vectors that fit a reduction slot are copied into the node control block; the root
//    (Reduce) or every rank (Allreduce) combines the n slots in rank order. Slots are
//    double-buffered by reduction number j; a rank writes slot j only once every rank has
//    finished reading reduction j - 2, so no closing barrier is needed.
//  - partitioned (as in MVAPICH2-X): the vector is cut into n slices; rank q reduces slice q
//    reading every rank's send buffer directly, reduce_unit bytes at a time (so the accumulator
//    stays in L1), then the slices are read by the root (Reduce) or by everyone (Allreduce) from
//    the rank that computed them.
//  - direct (Reduce only): the root reads every peer's operand itself, reduce_unit bytes at a
//    time, and combines them into its receive buffer; no slices, no second phase.
//  - partitioned down the levels (where the plan keeps a topology level whose domains hold runs
//    of consecutive ranks: reduce_by_levels()): each slice is folded by one rank of each run in
//    turn, a partial result crossing between domains instead of every operand (level_reduce()).
// All three combine operands in rank order (x0 op x1 op ... op xn-1), each element computed by one
// rank: every rank gets bitwise the same result, whatever the arrival order.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "coll_rules.h"
#include "comm.h"
#include "error.h"
#include "plan.h"
#include "reduce_ops.h"
#include "topology.h"

namespace shaddr {

// The slots' reach. A slot reduction has every rank that gets the result read the other n - 1
// slots, (n - 1)·S bytes, where the partitioned one reads about 2·S in slices but pays a
// handshake per peer and stage (a system call each on cma). At 2 ranks on cma the slots won up
// to 16 KiB in every collective (docs/defaults.md), so they take (n - 1)·S up to 16 KiB, and
// never less than the 4 KiB they took at every node size before.
size_t slot_max_default(int nranks) {
  constexpr size_t kReach = 16u << 10, kFloor = 4u << 10;
  const size_t peers = nranks > 1 ? static_cast<size_t>(nranks - 1) : 1;
  return std::max(kFloor, kReach / peers);
}

// Which algorithm a Reduce/Allreduce of `bytes` per rank takes (coll_rules.h).
bool reduce_slots_fit(size_t bytes, const Tuning &t) { return bytes <= t.slot_max; }

// Bytes read across cores for a Reduce of S bytes on n ranks (the root's share is its
// critical path):
//   direct:      (n-1)·S, all of it by the root, which also does all (n-1)·S of combining;
//   partitioned: (n-1)·S/n per rank for the slices, then (n-1)·S/n more by the root:
//                (n-1)·S·(1 + 1/n) in all, 2·(n-1)·S/n by the root, combining (n-1)·S/n.
// At n = 2 the root reads S either way and the partitioned one moves 1.5·S, pays a second phase
// and waits for the other rank's slice: direct wins, until the half of the combining that the
// partitioned root leaves to its peer outweighs that. From n = 3 the partitioned root reads
// 2(n-1)/n·S < (n-1)·S: it wins where the ranks run in parallel. The slots take small sizes.
// Measured at 2 ranks with both cores free, the partitioned one catches up at 128 KiB and wins
// above; from 3 ranks it wins at large sizes (docs/defaults.md). Hence 2 ranks, up to 128 KiB.

bool reduce_direct_wins(int nranks, size_t bytes, const Tuning &t) {
  return nranks == 2 && !reduce_slots_fit(bytes, t) && bytes <= kReduceDirectMax;
}

// Runs of consecutive ranks in one domain of @l, in rank order.
std::vector<ChainRun> chain_runs(const LevelGroups &l) {
  std::vector<ChainRun> runs;
  for (size_t r = 0; r < l.group.size(); r++) {
    if (r && l.group[r] == l.group[r - 1]) runs.back().count++;
    else runs.push_back({static_cast<int>(r), 1});
  }
  return runs;
}

// A partitioned reduction of n slices reads, for rank q's slice, the operands of every rank
// outside q's domain across the level; down the chain each slice crosses once per run boundary.
bool reduce_chain_pays(const LevelGroups &l) {
  const size_t n = l.group.size();
  const std::vector<size_t> members = l.sizes();
  size_t flat = 0;
  for (int g : l.group) flat += n - members[static_cast<size_t>(g)];
  return n <= 255 && (chain_runs(l).size() - 1) * n < flat;
}

// Slices enough that the runs overlap (run j waits for run j - 1's first slice only, 1/8 of a
// rank's share: flat's time plus an eighth), not smaller than kSliceMin, and at most kMaxTasks
// a rank of the smallest run or group, so that its folds and relays fit a stage (8 bits, 255 =
// failed).
size_t chain_slices(const LevelGroups &l, size_t bytes, size_t count) {
  constexpr size_t kSliceMin = 4u << 10, kMaxTasks = 120;
  size_t smallest = l.group.size();
  for (const ChainRun &r : chain_runs(l))
    smallest = std::min(smallest, static_cast<size_t>(r.count));
  for (size_t m : l.sizes()) smallest = std::min(smallest, m);
  return std::min({8 * l.group.size(), std::max<size_t>(1, bytes / kSliceMin), count,
                   kMaxTasks * smallest});
}

namespace {

struct Args {
  const char *in;  // this rank's operand
  char *out;       // where the result goes (root or Allreduce); nullptr elsewhere
  size_t count, esize, bytes;
  shaddr_dtype type;
  shaddr_op op;
  int root;  // -1: Allreduce
};

bool gets_result(const Comm &c, const Args &a) { return a.root < 0 || a.root == c.rank(); }

int slot_reduce(Comm &c, const Args &a) {
  c.mark_small_path();
  uint64_t j;
  if (int err = c.slot_open(&j)) return err;
  std::memcpy(c.slot(c.rank(), j, a.bytes), a.in, a.bytes);
  c.slot_publish(j);
  if (int err = c.slot_settle(j)) return err;
  if (gets_result(c, a)) {
    for (int r = 0; r < c.size(); r++)
      if (int err = c.slot_wait(r, j)) return err;
    reduce_apply3(a.op, a.type, a.out, c.slot(0, j, a.bytes), c.slot(1, j, a.bytes), a.count);
    for (int r = 2; r < c.size(); r++)
      reduce_apply(a.op, a.type, a.out, c.slot(r, j, a.bytes), a.count);
  }
  c.slot_close(j);
  return 0;
}

// Elements [lo, hi) of slice q.
void slice(const Args &a, int n, int q, size_t *lo, size_t *hi) {
  *lo = a.count * q / n;
  *hi = a.count * (q + 1) / n;
}

int partitioned_reduce(Comm &c, const Args &a) {
  const int me = c.rank(), n = c.size();
  // In place, this rank's result slices overwrite its input before later steps (of any rank)
  // can fail; a failed call must leave the input as it was (coll.h), for the caller's
  // fallback: keep a copy until the closing barrier has agreed. (In place means this rank
  // gets the result, so scratch 0 is not the slice buffer below.)
  const bool in_place = a.out && a.out == a.in;
  char *saved = in_place ? static_cast<char *>(c.scratch(0, a.bytes)) : nullptr;
  if (saved) std::memcpy(saved, a.in, a.bytes);
  const uint64_t s = c.begin();
  const void *bufs[1] = {a.in};
  int err = c.post(s, bufs, &a.bytes, 1);

  size_t lo, hi;
  slice(a, n, me, &lo, &hi);
  const size_t my_bytes = (hi - lo) * a.esize;
  char *dst = gets_result(c, a) ? a.out + lo * a.esize : static_cast<char *>(c.scratch(0, my_bytes));

  // Phase 1: reduce my slice, reading everyone's operand in rank order.
  for (int q = 0; q < n && !err; q++) err = c.wait_posted(q, s);
  const size_t unit_elems = c.tuning().reduce_unit / a.esize ? c.tuning().reduce_unit / a.esize : 1;
  char *acc = static_cast<char *>(c.scratch(1, unit_elems * a.esize));
  for (size_t e = lo; e < hi && !err; e += unit_elems) {
    const size_t cnt = hi - e < unit_elems ? hi - e : unit_elems;
    const size_t off = e * a.esize, len = cnt * a.esize;
    for (int q = 0; q < n && !err; q++) {
      auto combine = [&](const void *p, size_t piece_len) {
        (void)piece_len;
        if (q == 0) std::memcpy(acc, p, len);
        else reduce_apply(a.op, a.type, acc, p, cnt);
      };
      if (q == me) combine(a.in + off, len);
      else err = c.visit(q, c.remote_addr(q, 0) + off, len, len, combine);
    }
    if (!err) std::memcpy(dst + (e - lo) * a.esize, acc, len);
  }

  // Phase 2: the slices travel to the root, or to everyone.
  if (int e2 = c.expose_at(1, dst, my_bytes); e2 && !err) err = e2;
  c.post_stage(s, 1);
  if (gets_result(c, a)) {
    for (int i = 1; i < n && !err; i++) {
      const int q = (me + i) % n;  // staggered: ranks start on different peers
      size_t qlo, qhi;
      slice(a, n, q, &qlo, &qhi);
      if ((err = c.wait_stage(q, s, 1))) break;
      err = c.copy_from(q, c.remote_addr(q, 1), a.out + qlo * a.esize, (qhi - qlo) * a.esize);
    }
  }
  err = c.finish(s, err);
  if (err && saved) std::memcpy(a.out, saved, a.bytes);  // nobody reads it after finish()
  return err;
}

// Down the rank-order chain of the plan's coarsest level (level_reduce()): the vector is cut
// into slices; the runs of the chain (chain_runs()) fold each slice in turn, run j starting from
// run j - 1's partial result, which is the only thing of a slice that crosses between domains.
// In run j of m ranks, rank first + i folds the slices t with t % m == i, in increasing t, and
// posts stage c + 1 once its c-th is done (t / m + 1 for slice t); it keeps its partial results
// back to back in its exposure 1. The last run's folder of a slice holds its result: in its
// receive buffer (exposure 2) for an Allreduce or at the root, else in exposure 1.
struct Chain {
  Chain(const LevelGroups &l, const Args &a)
      : runs(chain_runs(l)),
        count(a.count),
        esize(a.esize),
        slices(chain_slices(l, a.bytes, a.count)) {}
  size_t lo(size_t t) const { return count * t / slices; }
  size_t bytes(size_t t) const { return (lo(t + 1) - lo(t)) * esize; }
  int folder(size_t j, size_t t) const {
    return runs[j].first + static_cast<int>(t % static_cast<size_t>(runs[j].count));
  }
  // The stage run j's folder of slice t posts once it is folded.
  unsigned stage(size_t j, size_t t) const {
    return static_cast<unsigned>(t / static_cast<size_t>(runs[j].count)) + 1;
  }
  // Where run j's folder keeps slice t's partial result in its exposure 1.
  size_t part_offset(size_t j, size_t t) const {
    const size_t m = static_cast<size_t>(runs[j].count);
    size_t off = 0;
    for (size_t u = t % m; u < t; u += m) off += bytes(u);
    return off;
  }
  // How many slices rank @r of run @j folds.
  size_t tasks(size_t j, int r) const {
    const size_t m = static_cast<size_t>(runs[j].count), i = static_cast<size_t>(r - runs[j].first);
    return i < slices ? (slices - i - 1) / m + 1 : 0;
  }
  size_t run_of(int r) const {
    size_t j = 0;
    while (j + 1 < runs.size() && runs[j + 1].first <= r) j++;
    return j;
  }
  std::vector<ChainRun> runs;
  size_t count, esize, slices = 1;
};

// Every element is still x0 op x1 op ... op xn-1 in rank order, computed by one rank: bitwise
// the flat reduction's result. An Allreduce's result then crosses the level once per group: the
// last run's group reads each slice from its folder, every other group through a relay of its
// own (the group's ranks take the slices in turn, a stage each after their folds).
int level_reduce(Comm &c, const Args &a) {
  const LevelGroups &l = c.levels().levels.front();
  const int me = c.rank(), n = c.size();
  constexpr unsigned kFailed = 255;
  const Chain ch(l, a);
  const size_t last = ch.runs.size() - 1, j = ch.run_of(me), P = ch.slices;
  const ChainRun &run = ch.runs[j];
  const size_t m = static_cast<size_t>(run.count), i = static_cast<size_t>(me - run.first);
  const bool allreduce = a.root < 0, to_out = j == last && gets_result(c, a);
  // In place, the result overwrites this rank's operand: it is combined from a copy, which
  // also restores the input if the call fails (coll.h).
  const bool in_place = a.out && a.out == a.in;
  char *saved = in_place ? static_cast<char *>(c.scratch(0, a.bytes)) : nullptr;
  if (saved) std::memcpy(saved, a.in, a.bytes);
  const char *own = saved ? saved : a.in;
  size_t part_len = 0;
  if (!to_out)
    for (size_t t = i; t < P; t += m) part_len += ch.bytes(t);
  char *part = part_len ? static_cast<char *>(c.scratch(1, part_len)) : nullptr;

  const uint64_t s = c.begin();
  const void *bufs[3] = {a.in, part, allreduce ? a.out : nullptr};
  const size_t lens[3] = {a.bytes, part_len, allreduce ? a.bytes : 0};
  int err = c.post(s, bufs, lens, 3);
  for (int q = run.first; q < run.first + run.count && !err; q++)
    if (q != me) err = c.wait_posted(q, s);
  bool failed = err != 0;
  // Fails the call on @peer's failure too: it posted kFailed instead of the stage awaited.
  const auto await = [&](int peer, unsigned stage) {
    failed = (err = c.wait_stage(peer, s, stage)) != 0 || c.peer_stage(peer) == kFailed;
    return !failed;
  };

  // This rank's slices of its run: from the previous run's partial (or the chain's first
  // operand), then its run's operands in rank order, reduce_unit bytes at a time.
  const size_t unit_elems = std::max<size_t>(1, c.tuning().reduce_unit / a.esize);
  unsigned done = 0;
  for (size_t t = i; t < P && !failed; t += m) {
    const size_t lo = ch.lo(t), cnt = ch.lo(t + 1) - lo;
    char *dst = to_out ? a.out + lo * a.esize : part + ch.part_offset(j, t);
    const int prev = j ? ch.folder(j - 1, t) : -1;
    if (prev >= 0 && !await(prev, ch.stage(j - 1, t))) break;
    const uint64_t prev_at = prev >= 0 ? c.remote_addr(prev, 1) + ch.part_offset(j - 1, t) : 0;
    for (size_t e = 0; e < cnt && !err; e += unit_elems) {
      const size_t k = std::min(unit_elems, cnt - e), off = (lo + e) * a.esize, len = k * a.esize;
      char *acc = dst + e * a.esize;
      int q = run.first;
      if (prev >= 0) err = c.copy_from(prev, prev_at + e * a.esize, acc, len);
      else if (q == me) std::memcpy(acc, own + off, len);
      else err = c.copy_from(q, c.remote_addr(q, 0) + off, acc, len);
      for (q += prev < 0; q < run.first + run.count && !err; q++) {
        if (q == me) reduce_apply(a.op, a.type, acc, own + off, k);
        else err = c.visit(q, c.remote_addr(q, 0) + off, len, len, [&](const void *p, size_t) {
          reduce_apply(a.op, a.type, acc, p, k);
        });
      }
    }
    if (!(failed = err != 0)) c.post_stage(s, ++done);
  }

  // The results: the root reads each slice from its holder; an Allreduce's ranks read theirs
  // from the holder (its group) or from their group's relay.
  const auto read_result = [&](size_t t, int from, int exposure, uint64_t at) {
    return c.copy_from(from, c.remote_addr(from, exposure) + at, a.out + ch.lo(t) * a.esize,
                       ch.bytes(t));
  };
  if (!allreduce && me == a.root) {
    for (size_t t = 0; t < P && !failed; t++) {
      const int h = ch.folder(last, t);
      if (h == me || !await(h, ch.stage(last, t))) continue;
      failed = (err = read_result(t, h, 1, ch.part_offset(last, t))) != 0;
    }
  } else if (allreduce) {
    const int g = l.group[static_cast<size_t>(me)];
    std::vector<int> mates;
    for (int r = 0; r < n; r++)
      if (l.group[static_cast<size_t>(r)] == g) mates.push_back(r);
    const size_t G = mates.size();
    const size_t gi =
        static_cast<size_t>(std::find(mates.begin(), mates.end(), me) - mates.begin());
    const bool holders_group = g == l.group[static_cast<size_t>(ch.runs[last].first)];
    for (size_t t = gi; t < P && !failed && !holders_group; t += G) {  // relayed slices first
      const int h = ch.folder(last, t);
      if (!await(h, ch.stage(last, t))) break;
      if (!(failed = (err = read_result(t, h, 2, ch.lo(t) * a.esize)) != 0))
        c.post_stage(s, ++done);
    }
    for (size_t t = 0; t < P && !failed; t++) {
      int from = ch.folder(last, t);
      unsigned stage = ch.stage(last, t);
      if (!holders_group) {
        if (t % G == gi) continue;
        from = mates[t % G];
        stage = static_cast<unsigned>(ch.tasks(ch.run_of(from), from) + t / G + 1);
      }
      if (from == me || !await(from, stage)) continue;
      failed = (err = read_result(t, from, 2, ch.lo(t) * a.esize)) != 0;
    }
  }
  if (failed) c.post_stage(s, kFailed);
  err = c.finish(s, err);
  if (err && saved) std::memcpy(a.out, saved, a.bytes);  // nobody reads it after finish()
  return err;
}

// The root reads each peer's operand (q != root), reduce_unit bytes at a time, and combines
// the n operands in rank order straight into its receive buffer, which stays in L1 for the
// step. The others only expose their input and wait at the closing barrier.
int direct_reduce(Comm &c, const Args &a) {
  const int me = c.rank(), n = c.size();
  const uint64_t s = c.begin();
  if (me != a.root) {
    const void *bufs[1] = {a.in};
    return c.finish(s, c.post(s, bufs, &a.bytes, 1));
  }
  // In place, the result overwrites this rank's input before later reads (which may fail)
  // are done; a failed call must leave the input as it was (coll.h): keep a copy until the
  // closing barrier has agreed, and combine this rank's operand from the copy.
  const bool in_place = a.out == a.in;
  char *saved = in_place ? static_cast<char *>(c.scratch(0, a.bytes)) : nullptr;
  if (saved) std::memcpy(saved, a.in, a.bytes);
  const char *own = saved ? saved : a.in;
  int err = 0;
  for (int q = 0; q < n && !err; q++)
    if (q != me && !(err = c.wait_posted(q, s)) && c.remote_len(q, 0) != a.bytes) err = -EPROTO;
  const size_t unit_elems = c.tuning().reduce_unit / a.esize ? c.tuning().reduce_unit / a.esize : 1;
  for (size_t e = 0; e < a.count && !err; e += unit_elems) {
    const size_t cnt = a.count - e < unit_elems ? a.count - e : unit_elems;
    const size_t off = e * a.esize, len = cnt * a.esize;
    char *acc = a.out + off;
    // Operand 0 is read straight into the accumulator from rank 0; at root 0 it is this
    // rank's own, combined with operand 1 on the way in (no copy of it first).
    if (me != 0) err = c.copy_from(0, c.remote_addr(0, 0) + off, acc, len);
    for (int q = 1; q < n && !err; q++) {
      const char *left = q == 1 && me == 0 ? own + off : acc;  // operands 0 .. q-1
      if (q == me) {
        reduce_apply(a.op, a.type, acc, own + off, cnt);
        continue;
      }
      err = c.visit(q, c.remote_addr(q, 0) + off, len, len, [&](const void *p, size_t) {
        reduce_apply3(a.op, a.type, acc, left, p, cnt);
      });
    }
  }
  err = c.finish(s, err);
  if (err && saved) std::memcpy(a.out, saved, a.bytes);  // nobody reads it after finish()
  return err;
}

int reduce(shaddr_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
           shaddr_dtype type, shaddr_op op, int root, const char *name) {
  clear_error();
  if (int err = check_comm(comm)) return err;
  Comm &c = *from_handle(comm);
  if (root >= 0)
    if (int err = check_root(c, root)) return err;
  if (int err = shaddr_op_supported(op, type)) return fail(err, std::string(name) + ": op/type");
  Args a{};
  a.esize = static_cast<size_t>(shaddr_dtype_size(type));
  if (__builtin_mul_overflow(count, a.esize, &a.bytes))
    return fail(-EOVERFLOW, std::string(name) + ": count too large");
  a.count = count;
  a.type = type;
  a.op = op;
  a.root = root;
  const bool result_here = root < 0 || root == c.rank();
  if (sendbuf == SHADDR_IN_PLACE) {
    if (!result_here)
      return fail(-EINVAL, std::string(name) + ": SHADDR_IN_PLACE on a rank that is not the root");
    sendbuf = recvbuf;
  }
  if (int err = check_buf(sendbuf, a.bytes, "send buffer")) return err;
  if (result_here)
    if (int err = check_buf(recvbuf, a.bytes, "receive buffer")) return err;
  a.in = static_cast<const char *>(sendbuf);
  a.out = result_here ? static_cast<char *>(recvbuf) : nullptr;
  const shaddr_coll which = root < 0 ? SHADDR_COLL_ALLREDUCE : SHADDR_COLL_REDUCE;
  c.stats().calls[which]++;
  c.stats().bytes[which] += a.bytes;
  if (c.size() == 1 || count == 0) {
    if (int err = c.settle_call()) return err;
    if (a.out && a.out != a.in && a.bytes) std::memmove(a.out, a.in, a.bytes);
    return 0;
  }
  const shaddr_algo algo = c.algorithm(
      which, a.bytes, root < 0 && a.in == a.out ? SHADDR_PLAN_IN_PLACE : 0);
  if (algo != SHADDR_ALGO_SLOTS)
    if (int err = c.account(c.settle_call())) return err;
  const int err = c.account(
      algo == SHADDR_ALGO_SLOTS                                    ? slot_reduce(c, a)
      : algo == SHADDR_ALGO_ROOT                                   ? direct_reduce(c, a)
      : reduce_by_levels(c.plan(SHADDR_FALLBACK_NONE), a.bytes, a.root < 0)
          ? level_reduce(c, a)
          : partitioned_reduce(c, a));
  return err ? fail(err, name) : 0;
}

}  // namespace
}  // namespace shaddr

extern "C" {

SHADDR_API int shaddr_reduce(shaddr_comm_t *comm, const void *sendbuf, void *recvbuf,
                             size_t count, enum shaddr_dtype type, enum shaddr_op op, int root) {
  if (root < 0) {
    shaddr::clear_error();
    return shaddr::fail(-EINVAL, "shaddr_reduce: negative root");
  }
  return shaddr::reduce(comm, sendbuf, recvbuf, count, type, op, root, "shaddr_reduce");
}

SHADDR_API int shaddr_allreduce(shaddr_comm_t *comm, const void *sendbuf, void *recvbuf,
                                size_t count, enum shaddr_dtype type, enum shaddr_op op) {
  return shaddr::reduce(comm, sendbuf, recvbuf, count, type, op, -1, "shaddr_allreduce");
}

}  // extern "C"
