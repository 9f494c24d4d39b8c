// SPDX-License-Identifier: MIT
#include "nodeblock.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>

#include "backend.h"  // agree()

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

size_t total_bytes(int n, const NodeBlockConfig &c) {
  const size_t fifo = round_up(Fifo::bytes_for(c.fifo_slots, c.fifo_payload), 128);
  const size_t slot = round_up(64 + c.reduce_slot_bytes, 64);  // as slot_stride()
  return 128 + n * (sizeof(RankArea) + sizeof(MsgCounter) + sizeof(Bell) + sizeof(CallLedger)) +
         fifo * (1 + n) +
         round_up(static_cast<size_t>(n) * kSlotRounds * slot, 128);
}

}  // namespace

void NodeBlock::layout(char *base, bool init) {
  const size_t fifo = round_up(Fifo::bytes_for(cfg_.fifo_slots, cfg_.fifo_payload), 128);
  char *p = base + 128;
  areas_ = reinterpret_cast<RankArea *>(p);
  p += size_ * sizeof(RankArea);
  counters_ = reinterpret_cast<MsgCounter *>(p);
  p += size_ * sizeof(MsgCounter);
  bells_ = reinterpret_cast<Bell *>(p);
  p += size_ * sizeof(Bell);
  ledgers_ = reinterpret_cast<CallLedger *>(p);
  p += size_ * sizeof(CallLedger);
  bcast_begin_ = p;
  bcast_ = std::make_unique<Fifo>(p, cfg_.fifo_slots, cfg_.fifo_payload, &cfg_.wait);
  p += fifo;
  bcast_end_ = p;
  for (int r = 0; r < size_; r++, p += fifo)
    p2p_.push_back(std::make_unique<Fifo>(p, cfg_.fifo_slots, cfg_.fifo_payload, &cfg_.wait));
  reduce_ = p;
  if (!init) return;
  for (int r = 0; r < size_; r++) {
    new (&areas_[r]) RankArea{};
    new (&counters_[r]) MsgCounter{};
    new (&bells_[r]) Bell{};
    new (&ledgers_[r]) CallLedger{};
  }
  for (int r = 0; r < size_; r++)
    for (unsigned k = 0; k < kSlotRounds; k++) new (&slot_header(r, k)) SlotHeader{};
  bcast_->init();
  for (auto &f : p2p_) f->init();
  std::memcpy(base, &kMagic, sizeof(kMagic));
}

int NodeBlock::create(const shaddr_host &host, const NodeBlockConfig &cfg,
                      std::unique_ptr<NodeBlock> *out, std::string *why) {
  std::unique_ptr<NodeBlock> nb(new NodeBlock);
  nb->rank_ = host.rank;
  nb->size_ = host.size;
  nb->cfg_ = cfg;
  NodeBlock *raw = nb.get();
  if (int e = SharedRegion::create(
          host, total_bytes(host.size, cfg),
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
  populate(nb->reduce_, static_cast<size_t>(host.size) * kSlotRounds * nb->slot_stride());
  *out = std::move(nb);
  return 0;
}

void NodeBlock::map_bcast_fifo() {
  populate(bcast_begin_, static_cast<size_t>(bcast_end_ - bcast_begin_));
  bcast_mapped_ = true;
}

NodeBlock::~NodeBlock() = default;

}  // namespace shaddr
