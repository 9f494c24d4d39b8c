// SPDX-License-Identifier: MIT
#include "nodeblock.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>

#include "backend.h"  // agree()
#include "placement.h"

namespace shaddr {
namespace {

constexpr uint64_t kMagic = 0x5348414444524e42ull;  // "SHADDRNB"

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// Maps [p, p + len) in this process now, writable, allocating what is not there yet: the first
// use of each page of the Bcast FIFO cost a fault in every process, which showed in the time
// of the first few hundred calls (docs/defaults.md). Only speed depends on it (kernels
// before 5.14 lack MADV_POPULATE_WRITE: pages then fault in on first use, as before). The FIFO
// (528 KiB) is mapped on its first use, not at creation: a program may make many communicators
// and Bcast mid-sized messages on few.
void populate(char *p, size_t len) {
#ifdef MADV_POPULATE_WRITE
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + len + page - 1) & ~(page - 1);
  madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_POPULATE_WRITE);
#else
  (void)p;
  (void)len;
#endif
}

// Where everything is, from the block's start. Dense: a 128-byte header, each kind of line an
// array of n, the FIFOs and the slots back to back (the layout before placement, unchanged).
// Placed: every part that one rank writes or reads most starts on a page of its own, so that a
// page's node can be that rank's: the header's page, one page per rank for its four lines, the
// Bcast FIFO, one FIFO per receiver, each rank's slots.
struct Layout {
  size_t lines, line_stride, kind_stride;
  size_t bcast, fifo_stride, p2p;
  size_t slots, rank_slots_stride, total;
};

Layout layout_for(int n, const NodeBlockConfig &c, bool placed) {
  const size_t un = static_cast<size_t>(n);
  const size_t page = placed ? static_cast<size_t>(sysconf(_SC_PAGESIZE)) : 128;
  const size_t slot = round_up(64 + c.reduce_slot_bytes, 64);  // as slot_stride()
  static_assert(sizeof(RankArea) == 128 && sizeof(MsgCounter) == 128 && sizeof(Bell) == 128 &&
                sizeof(CallLedger) == 128);
  Layout l{};
  l.lines = placed ? page : 128;
  l.line_stride = placed ? round_up(4 * 128, page) : 128;
  l.kind_stride = placed ? 128 : un * 128;
  l.bcast = l.lines + (placed ? un * l.line_stride : 4 * un * 128);
  l.fifo_stride = round_up(Fifo::bytes_for(c.fifo_slots, c.fifo_payload), page);
  l.p2p = l.bcast + l.fifo_stride;
  l.slots = l.p2p + un * l.fifo_stride;
  l.rank_slots_stride = placed ? round_up(kSlotRounds * slot, page) : kSlotRounds * slot;
  l.total = l.slots + round_up(un * l.rank_slots_stride, 128);
  return l;
}

// After the magic in the header: rank 0's count of failed mbind calls and the first errno.
constexpr size_t kFailuresAt = 8, kFirstErrorAt = 12;

}  // namespace

void NodeBlock::layout(char *base, bool init) {
  const Layout l = layout_for(size_, cfg_, placement_.active);
  areas_ = base + l.lines;
  counters_ = areas_ + l.kind_stride;
  bells_ = counters_ + l.kind_stride;
  ledgers_ = bells_ + l.kind_stride;
  line_stride_ = l.line_stride;
  fifo_stride_ = l.fifo_stride;
  rank_slots_stride_ = l.rank_slots_stride;
  bcast_begin_ = base + l.bcast;
  bcast_ = std::make_unique<Fifo>(bcast_begin_, cfg_.fifo_slots, cfg_.fifo_payload, &cfg_.wait);
  bcast_end_ = bcast_begin_ + l.fifo_stride;
  p2p_begin_ = base + l.p2p;
  for (int r = 0; r < size_; r++)
    p2p_.push_back(std::make_unique<Fifo>(p2p_begin_ + r * l.fifo_stride, cfg_.fifo_slots,
                                          cfg_.fifo_payload, &cfg_.wait));
  reduce_ = base + l.slots;
  if (!init) return;
  // Before the first touch below: a page's node is chosen when it is first allocated.
  if (placement_.active) prefer_nodes(base);
  for (int r = 0; r < size_; r++) {
    new (&area(r)) RankArea{};
    new (&counter(r)) MsgCounter{};
    new (&bell(r)) Bell{};
    new (&ledger(r)) CallLedger{};
  }
  for (int r = 0; r < size_; r++)
    for (unsigned k = 0; k < kSlotRounds; k++) new (&slot_header(r, k)) SlotHeader{};
  bcast_->init();
  for (auto &f : p2p_) f->init();
  std::memcpy(base, &kMagic, sizeof(kMagic));
}

std::vector<PlacedRange> NodeBlock::placed_ranges() const {
  std::vector<PlacedRange> out;
  if (!placement_.active) return out;
  auto node = [this](int r) { return placement_.node[static_cast<size_t>(r)]; };
  for (int r = 0; r < size_; r++) {
    out.push_back({"lines", r, areas_ + r * line_stride_, line_stride_, node(r)});
    out.push_back({"slots", r, reduce_ + r * rank_slots_stride_, rank_slots_stride_, node(r)});
    out.push_back({"p2p fifo", r, p2p_begin_ + r * fifo_stride_, fifo_stride_, node(r)});
  }
  out.push_back({"bcast fifo", 0, bcast_begin_, fifo_stride_, node(0)});
  return out;
}

// Rank 0, on the fresh (sparse) region. A part whose rank has no node gets no policy: its pages
// go where the first toucher runs, as without placement.
void NodeBlock::prefer_nodes(char *base) {
  uint32_t failures = 0;
  int32_t first = 0;
  for (const PlacedRange &p : placed_ranges()) {
    if (p.node < 0) continue;
    if (int err = prefer_numa_node(p.begin, p.bytes, p.node)) {
      if (!failures++) first = -err;
    }
  }
  std::memcpy(base + kFailuresAt, &failures, sizeof(failures));
  std::memcpy(base + kFirstErrorAt, &first, sizeof(first));
}

unsigned NodeBlock::placement_failures() const {
  uint32_t v;
  std::memcpy(&v, static_cast<char *>(region_->base()) + kFailuresAt, sizeof(v));
  return v;
}

int NodeBlock::placement_first_error() const {
  int32_t v;
  std::memcpy(&v, static_cast<char *>(region_->base()) + kFirstErrorAt, sizeof(v));
  return v;
}

int NodeBlock::create(const shaddr_host &host, const NodeBlockConfig &cfg,
                      const NodePlacement &placement, std::unique_ptr<NodeBlock> *out,
                      std::string *why) {
  std::unique_ptr<NodeBlock> nb(new NodeBlock);
  nb->rank_ = host.rank;
  nb->size_ = host.size;
  nb->cfg_ = cfg;
  nb->placement_ = placement;
  if (nb->placement_.node.size() != static_cast<size_t>(host.size)) nb->placement_ = {};
  NodeBlock *raw = nb.get();
  if (int e = SharedRegion::create(
          host, layout_for(host.size, cfg, nb->placement_.active).total,
          [raw](void *base) { raw->layout(static_cast<char *>(base), true); }, &nb->region_,
          why))
    return e;
  int err = 0;
  if (host.rank != 0) {
    uint64_t magic;
    std::memcpy(&magic, nb->region_->base(), sizeof(magic));
    if (magic != kMagic)
      err = -EPROTO;
    else
      nb->layout(static_cast<char *>(nb->region_->base()), false);
  }
  if (int e = agree(host, err, why, "checking the node control block")) return e;
  // What every call touches: the rank areas and the slots (the FIFOs on their first use).
  char *base = static_cast<char *>(nb->region_->base());
  populate(base, static_cast<size_t>(nb->bcast_begin_ - base));
  populate(nb->reduce_, static_cast<size_t>(host.size) * nb->rank_slots_stride_);
  *out = std::move(nb);
  return 0;
}

void NodeBlock::map_bcast_fifo() {
  populate(bcast_begin_, static_cast<size_t>(bcast_end_ - bcast_begin_));
  bcast_mapped_ = true;
}

NodeBlock::~NodeBlock() = default;

}  // namespace shaddr
