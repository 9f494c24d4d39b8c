// SPDX-License-Identifier: MIT
// Barrier and Bcast.
//
// Bcast has these algorithms:
//  - slots (as the short reductions): the root copies the message into its slot of the control
//    block and publishes the round number in the slot's first cache line; every other rank waits
//    for it there and copies the message out. Two copies, no barrier, and per call a reader
//    touches the slot's lines and its own flag line only: the choice for messages that fit a
//    slot.
//  - FIFO: the root pushes the message through the node's Bcast FIFO in slot-sized pieces, each
//    read by the n-1 others. Two copies, but no closing barrier and no mapping: the choice for
//    small messages, and for the shm backend at every size (but under the heap layer, where a
//    root's buffer in its heap is read in place: bcast_fifo_always).
//  - message counter: the root exposes its buffer and publishes {base, bytes ready}; every other
//    rank copies straight from the root's buffer, in cache-sized pipeline segments
//    (SHADDR_CHUNK), as the counter advances. One copy per reader. A segmented Bcast advances the
//    counter as the root's data arrives (the multi-node leader).
//  - down the levels (the copy path's sizes where the plan keeps a topology level): as the
//    message counter, but each rank copies from its parent in the plan's levels (level_parent())
//    and publishes its own progress: the root's memory is read once per domain, not once per
//    rank, and a domain's ranks read their leader's copy on their side of the link.
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "coll_rules.h"
#include "comm.h"
#include "error.h"

namespace shaddr {

// Which algorithm a Bcast of `bytes` takes (coll_rules.h).
bool bcast_slot_fits(size_t bytes, const Tuning &t) { return bytes <= t.slot_max; }
bool bcast_fifo_wins(size_t bytes, bool fifo_always, const Tuning &t) {
  return fifo_always || bytes <= t.bcast_fifo_max;
}

bool bcast_streams_win(int nranks, size_t bytes, bool segmented, bool backend_stages,
                       const Tuning &t) {
  return !segmented && !backend_stages && nranks > 2 && bytes >= t.bcast_streams_min &&
         t.bcast_streams > 1;
}

bool bcast_fifo_always(bool backend_stages, bool heap_layer, bool segmented) {
  return backend_stages && (segmented || !heap_layer);
}

namespace {

constexpr uint32_t kAbort = 0x80000000u;  // FIFO stream flag: the root's data source failed

// A slot Bcast's meta: the byte count, the root, and whether the root's data source failed.
constexpr uint64_t kSlotAbort = uint64_t{1} << 63;
uint64_t bcast_meta(size_t bytes, int root) { return uint64_t(unsigned(root)) << 32 | bytes; }

int slot_bcast(Comm &c, char *buf, size_t bytes, int root, size_t segment,
               shaddr_bcast_ready_fn ready, void *ctx) {
  c.mark_small_path();
  uint64_t j;
  if (c.rank() == root) {
    if (int err = c.slot_open(&j)) return err;
    int err = 0;
    for (size_t off = 0; ready && off < bytes && !err; off += segment)
      err = ready(off, bytes - off < segment ? bytes - off : segment, ctx);
    if (!err) std::memcpy(c.slot(root, j, bytes), buf, bytes);
    c.slot_publish(j, bcast_meta(bytes, root) | (err ? kSlotAbort : 0));
    if (int e = c.slot_settle(j)) return e;
    c.slot_close(j);
    return err ? fail(err, "shaddr_bcast: the root's data source failed") : 0;
  }
  if (int err = c.slot_next(&j)) return err;
  if (int err = c.slot_wait(root, j)) return fail(err, "shaddr_bcast");
  const uint64_t meta = c.slot_meta(root, j);
  int err = 0;
  if (meta == (bcast_meta(bytes, root) | kSlotAbort))
    err = fail(-ECANCELED, "shaddr_bcast: the root's data source failed");
  else if (meta != bcast_meta(bytes, root))
    err = fail(-EPROTO, "shaddr_bcast: slot message out of step (collectives called in a "
                        "different order or with different sizes on different ranks?)");
  else
    std::memcpy(buf, c.slot(root, j, bytes), bytes);
  c.slot_close(j);
  return err;
}

int fifo_bcast(Comm &c, uint64_t s, char *buf, size_t bytes, int root, size_t segment,
               shaddr_bcast_ready_fn ready, void *ctx) {
  Fifo &fifo = c.block().bcast();
  const uint32_t stream = static_cast<uint32_t>(s) & ~kAbort;
  const size_t piece = fifo.payload_max();
  const uint32_t readers = static_cast<uint32_t>(c.size() - 1);
  if (c.rank() == root) {
    size_t ready_to = 0;
    for (size_t off = 0; off < bytes; off += piece) {
      const size_t n = bytes - off < piece ? bytes - off : piece;
      while (ready && ready_to < off + n) {
        const size_t seg = bytes - ready_to < segment ? bytes - ready_to : segment;
        if (int err = ready(ready_to, seg, ctx)) {
          fifo.push(root, stream | kAbort, nullptr, 0, readers, &c.bcast_cursor());
          return fail(err, "shaddr_bcast: the root's data source failed");
        }
        ready_to += seg;
      }
      fifo.push(root, stream, buf + off, static_cast<uint32_t>(n), readers, &c.bcast_cursor());
    }
    return 0;
  }
  for (size_t off = 0; off < bytes; off += piece) {
    const size_t n = bytes - off < piece ? bytes - off : piece;
    Fifo::Message m{};
    int err = fifo.pop(&c.bcast_cursor(), buf + off, static_cast<uint32_t>(n), &m);
    if (!err && m.stream == (stream | kAbort))
      return fail(-ECANCELED, "shaddr_bcast: the root's data source failed");
    if (!err && (m.stream != stream || m.writer != root || m.bytes != n)) err = -EPROTO;
    if (err)
      return fail(err, "shaddr_bcast: FIFO message out of step (collectives called in a "
                       "different order or with different sizes on different ranks?)");
  }
  return 0;
}

int counter_bcast(Comm &c, uint64_t s, char *buf, size_t bytes, int root, size_t segment,
                  shaddr_bcast_ready_fn ready, void *ctx) {
  MsgCounter &ctr = c.block().counter(root);
  int err = 0;
  if (c.rank() == root) {
    ctr.base.store(0, std::memory_order_relaxed);  // 1 = the data source failed
    ctr.bytes.store(ready ? 0 : bytes, std::memory_order_relaxed);
    const void *bufs[1] = {buf};
    err = c.post(s, bufs, &bytes, 1);
    for (size_t off = 0; ready && !err && off < bytes; off += segment) {
      const size_t n = bytes - off < segment ? bytes - off : segment;
      if ((err = ready(off, n, ctx))) break;
      ctr.bytes.store(off + n, std::memory_order_release);
      c.ring_mine();
    }
    if (err) {
      ctr.base.store(1, std::memory_order_relaxed);
      ctr.bytes.store(bytes, std::memory_order_release);
      c.ring_mine();
    }
    return c.finish(s, err);
  }
  err = c.wait_posted(root, s);
  const uint64_t addr = c.remote_addr(root, 0);
  if (!err && c.remote_len(root, 0) != bytes) err = -EMSGSIZE;
  size_t got = 0;
  while (!err && got < bytes) {
    size_t avail = ctr.bytes.load(std::memory_order_acquire);
    if (avail <= got) {
      err = c.wait_until(root, [&] {
        return (avail = ctr.bytes.load(std::memory_order_acquire)) > got;
      });
      if (err) break;
    }
    if (ctr.base.load(std::memory_order_relaxed)) {
      err = -ECANCELED;
      break;
    }
    err = c.copy_from(root, addr + got, buf + got, avail - got);
    got = avail;
  }
  if (!err) ctr.done.fetch_add(1, std::memory_order_relaxed);
  return c.finish(s, err);
}

// The rank @r copies a Bcast from @root down the levels @g from: at the coarsest level where r
// is not in its source's group, the leader of r's group copies from the source; every other
// rank of the group looks further down with that leader as its source. A rank in its source's
// group at every level copies from the source (the root's own domain reads the root).
int level_parent(const Grouping &g, int r, int root) {
  int src = root;
  for (const LevelGroups &l : g.levels) {
    const int mine = l.group[static_cast<size_t>(r)];
    if (mine == l.group[static_cast<size_t>(src)]) continue;
    const int lead = l.leader[static_cast<size_t>(mine)];
    if (lead == r) return src;
    src = lead;
  }
  return src;
}

// Down the levels: the root posts its buffer and advances its counter as counter_bcast's does;
// every other rank copies from its parent as the parent's counter advances, SHADDR_CHUNK at a
// time, and a rank some other rank copies from (a leader) posts its own buffer and advances its
// own counter behind its copy, so that a domain's ranks copy chunk k from their leader while
// the leader copies chunk k + 1. A failure anywhere reaches the ranks below it as the root's
// does (the counter's base 1, -ECANCELED), and every rank's status at finish().
int level_bcast(Comm &c, uint64_t s, char *buf, size_t bytes, int root, size_t segment,
                shaddr_bcast_ready_fn ready, void *ctx) {
  const Grouping &g = c.levels();
  const int me = c.rank();
  if (me == root) return counter_bcast(c, s, buf, bytes, root, segment, ready, ctx);
  const int parent = level_parent(g, me, root);
  bool relay = false;
  for (int r = 0; r < c.size() && !relay; r++)
    relay = r != root && r != me && level_parent(g, r, root) == me;
  MsgCounter &mine = c.block().counter(me);
  int err = 0;
  if (relay) {
    mine.base.store(0, std::memory_order_relaxed);
    mine.bytes.store(0, std::memory_order_relaxed);
    const void *bufs[1] = {buf};
    err = c.post(s, bufs, &bytes, 1);
  }
  MsgCounter &theirs = c.block().counter(parent);
  if (!err) err = c.wait_posted(parent, s);
  const uint64_t addr = err ? 0 : c.remote_addr(parent, 0);
  if (!err && c.remote_len(parent, 0) != bytes) err = -EMSGSIZE;
  size_t got = 0;
  while (!err && got < bytes) {
    size_t avail = 0;
    err = c.wait_until(parent, [&] {
      return (avail = theirs.bytes.load(std::memory_order_acquire)) > got;
    });
    if (err) break;
    if (theirs.base.load(std::memory_order_relaxed)) {
      err = -ECANCELED;
      break;
    }
    err = c.copy_from(parent, addr + got, buf + got, avail - got);
    if (err) break;
    got = avail;
    if (relay) {
      mine.bytes.store(got, std::memory_order_release);
      c.ring_mine();
    }
  }
  if (err && relay) {  // the ranks below stop waiting for data that will not come
    mine.base.store(1, std::memory_order_relaxed);
    mine.bytes.store(bytes, std::memory_order_release);
    c.ring_mine();
  }
  return c.finish(s, err);
}

// Multi-stream: the message is cut into C streams; the first reader of stream k (its driver,
// rank root + 1 + k) copies it from the root and publishes its progress in its own counter;
// everyone else copies stream k from the driver's buffer. The root's memory is read C times
// instead of n - 1, and C ranks pull from it at once.
int multistream_bcast(Comm &c, uint64_t s, char *buf, size_t bytes, int root, int streams) {
  const int me = c.rank(), n = c.size();
  MsgCounter &mine = c.block().counter(me);
  mine.bytes.store(0, std::memory_order_relaxed);
  const void *bufs[1] = {buf};
  int err = c.post(s, bufs, &bytes, 1);
  if (me == root) return c.finish(s, err);
  auto lo = [&](int k) { return bytes * k / streams; };
  const int my_stream = (me - root - 1 + n) % n;  // < streams if this rank drives one
  if (!err) err = c.wait_posted(root, s);
  if (!err && my_stream < streams) {
    const uint64_t src = c.remote_addr(root, 0);
    for (size_t off = lo(my_stream); off < lo(my_stream + 1) && !err; off += c.tuning().chunk) {
      const size_t end = std::min(lo(my_stream + 1), off + c.tuning().chunk);
      err = c.copy_from(root, src + off, buf + off, end - off);
      mine.bytes.store(end - lo(my_stream), std::memory_order_release);
      c.ring_mine();
    }
  }
  for (int i = 1; i <= streams && !err; i++) {
    const int k = (my_stream + i) % streams;
    if (k == my_stream) continue;
    const int driver = (root + 1 + k) % n;
    MsgCounter &theirs = c.block().counter(driver);
    if ((err = c.wait_posted(driver, s))) break;
    const uint64_t src = c.remote_addr(driver, 0);
    size_t got = 0;
    const size_t len = lo(k + 1) - lo(k);
    while (got < len && !err) {
      size_t avail = 0;
      err = c.wait_until(driver, [&] {
        return (avail = theirs.bytes.load(std::memory_order_acquire)) > got;
      });
      if (!err) err = c.copy_from(driver, src + lo(k) + got, buf + lo(k) + got, avail - got);
      got = avail;
    }
  }
  return c.finish(s, err);
}

int bcast(shaddr_comm_t *comm, void *buf, size_t bytes, int root, size_t segment,
          shaddr_bcast_ready_fn ready, void *ctx) {
  clear_error();
  if (int err = check_comm(comm)) return err;
  Comm &c = *from_handle(comm);
  if (int err = check_root(c, root)) return err;
  if (int err = check_buf(buf, bytes, "Bcast buffer")) return err;
  if (c.rank() != root) ready = nullptr;
  c.stats().calls[SHADDR_COLL_BCAST]++;
  c.stats().bytes[SHADDR_COLL_BCAST] += bytes;
  // Every rank of a segmented Bcast passes a segment; only the root has a data source, so
  // the choice of algorithm must not depend on `ready`.
  const bool segmented = segment != 0;
  if (segment == 0 || segment > bytes) segment = bytes ? bytes : 1;
  if (c.size() == 1 || bytes == 0) {
    if (int err = c.settle_call()) return err;
    for (size_t off = 0; ready && off < bytes; off += segment)
      if (int err = ready(off, bytes - off < segment ? bytes - off : segment, ctx))
        return fail(err, "shaddr_bcast: the root's data source failed");
    return 0;
  }
  const shaddr_algo algo =
      c.algorithm(SHADDR_COLL_BCAST, bytes, segmented ? SHADDR_PLAN_SEGMENTED : 0);
  if (algo == SHADDR_ALGO_SLOTS)
    return c.account(slot_bcast(c, static_cast<char *>(buf), bytes, root, segment, ready, ctx));
  if (int err = c.settle_call()) return c.account(err);
  const uint64_t s = c.begin();
  int err;
  if (algo == SHADDR_ALGO_FIFO) {
    c.mark_small_path();
    err = fifo_bcast(c, s, static_cast<char *>(buf), bytes, root, segment, ready, ctx);
  } else if (algo == SHADDR_ALGO_STREAMS) {
    const int streams = std::min(c.size() - 1, c.tuning().bcast_streams);
    err = multistream_bcast(c, s, static_cast<char *>(buf), bytes, root, streams);
    if (err) fail(err, "shaddr_bcast");
  } else if (bcast_by_levels(c.plan(SHADDR_FALLBACK_NONE), bytes)) {
    err = level_bcast(c, s, static_cast<char *>(buf), bytes, root, segment, ready, ctx);
    if (err) fail(err, "shaddr_bcast");
  } else {
    err = counter_bcast(c, s, static_cast<char *>(buf), bytes, root, segment, ready, ctx);
    if (err) fail(err, "shaddr_bcast");
  }
  return c.account(err);
}

}  // namespace
}  // namespace shaddr

using shaddr::Comm;

extern "C" {

SHADDR_API int shaddr_barrier(shaddr_comm_t *comm) {
  shaddr::clear_error();
  if (int err = shaddr::check_comm(comm)) return err;
  Comm &c = *shaddr::from_handle(comm);
  c.stats().calls[SHADDR_COLL_BARRIER]++;
  if (int err = c.settle_call()) return err;
  if (c.size() == 1) return 0;
  c.stats().runs[SHADDR_COLL_BARRIER][SHADDR_ALGO_BARRIER]++;
  const uint64_t s = c.begin();
  if (int err = c.account(c.finish(s, 0))) return shaddr::fail(err, "shaddr_barrier");
  return 0;
}

SHADDR_API int shaddr_bcast(shaddr_comm_t *comm, void *buf, size_t bytes, int root) {
  return shaddr::bcast(comm, buf, bytes, root, 0, nullptr, nullptr);
}

SHADDR_API int shaddr_bcast_segmented(shaddr_comm_t *comm, void *buf, size_t bytes, int root,
                                      size_t segment, shaddr_bcast_ready_fn ready, void *ctx) {
  shaddr::clear_error();
  if (!segment) return shaddr::fail(-EINVAL, "shaddr_bcast_segmented: segment 0");
  if (comm && shaddr::from_handle(comm)->rank() == root && !ready)
    return shaddr::fail(-EINVAL, "shaddr_bcast_segmented: the root needs a ready callback");
  return shaddr::bcast(comm, buf, bytes, root, segment, ready, ctx);
}

}  // extern "C"
