// SPDX-License-Identifier: MIT
// The node control block: one shared segment per node communicator holding a cache-line-padded
// area per rank, the per-rank message counters (base, bytes ready), the Bcast FIFO, one
// point-to-point FIFO per rank, and the per-rank slots for short exchanges.
//
// Created collectively: rank 0 makes an anonymous memfd; the others open it through
// /proc/<pid>/fd (needs only ptrace *read* rights, which Yama leaves alone), so the segment
// never has a name in /dev/shm and nothing is left behind by a crash. Where /proc is not
// usable the fallback is shm_open + shm_unlink as soon as every rank has it mapped.
//
// Where the ranks are bound inside two or more NUMA nodes, each rank's part (its lines, slots and
// point-to-point FIFO) starts on a page of its own and prefers that rank's node; elsewhere the
// layout is the dense one, byte for byte (docs/topology.md, "Placement").
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fifo.h"
#include "shared_region.h"
#include "shaddr/host.h"
#include "wait.h"

namespace shaddr {

// Written by its rank only, read by all. A collective with sequence number s publishes its
// exposures (addr/len) and then posted = s; stage = (s << 8) | k marks step k of a multi-step
// collective; arrive = s and status[s & 1] close it (the closing barrier). Everything but the
// slot-reduction fields is reused only after every rank has passed the closing barrier.
struct alignas(128) RankArea {
  std::atomic<uint64_t> seq;     // last collective this rank started (diagnostics)
  std::atomic<uint64_t> posted;  // exposures below belong to collective `posted`
  std::atomic<uint64_t> stage;
  std::atomic<uint64_t> arrive;  // closing barrier of collective `arrive` reached
  std::atomic<int64_t> status[2];
  uint64_t addr[4];
  uint64_t len[4];
  std::atomic<uint64_t> slot_read;  // this rank is done with the slots of rounds <= slot_read
};
static_assert(sizeof(RankArea) == 128);

// The call ledger: before every collective call on a communicator whose calls can go either to
// libshaddr or to the MPI, each rank records here which call it is (`call`, counted alike on
// every rank) and what it is (`token`: a digest of the arguments MPI requires to be equal on
// every rank; a call run elsewhere is marked in `call` instead, comm.h). A rank that runs the
// call in libshaddr waits for every peer's
// record of it (Comm::agree_call, or Comm::settle_call after a slot round's own publication)
// before it reads a peer's data or writes its output, so no rank waits in a libshaddr algorithm
// that a peer will not join, and a count mismatch is found before anyone copies. `agreed` is
// the last call this rank saw agreed by all: a peer that is already past call k tells with it
// whether k was agreed (it then saw this rank's equal token) or not.
struct alignas(128) CallLedger {
  std::atomic<uint64_t> call;
  std::atomic<uint64_t> token;
  std::atomic<uint64_t> agreed;
};
static_assert(sizeof(CallLedger) == 128);
constexpr uint64_t kCallForwarded = 0;  // the token of a call the rank runs elsewhere

// A message counter: {base address, bytes written}, which readers follow to copy a buffer
// while it fills, plus an atomic completion count.
struct alignas(128) MsgCounter {
  std::atomic<uint64_t> base;
  std::atomic<uint64_t> bytes;
  std::atomic<uint64_t> done;
};

// The head of a slot (short exchanges through the control block), in the same cache line as the
// first 48 bytes of its data: a reader that waits for `round` fetches them with it. Round j of
// rank r is in slot j % kSlotRounds of r, so a writer can run kSlotRounds - 1 rounds ahead of a
// reader.
struct SlotHeader {
  std::atomic<uint64_t> round;  // the data is round `round`'s, once published (release)
  uint64_t meta;                // the writer's note (Bcast: byte count and root)
};
static_assert(sizeof(SlotHeader) == 16);
// Two: four would let a writer run further ahead of a slow reader, but made 4 KiB calls
// slower, their slots no longer fitting L1 with the caller's buffers (docs/defaults.md).
constexpr unsigned kSlotRounds = 2;
constexpr size_t kSlotInlineMax = 1024;

// Where the block's per-rank parts go: node[r] is node rank r's NUMA node (-1: none, left to
// first touch). With `active` false the layout is dense and no policy is set.
struct NodePlacement {
  std::vector<int> node;
  bool active = false;
};

// One part of the block and the node it was given (docs/topology.md, "Placement").
struct PlacedRange {
  const char *what;  // "lines", "slots", "p2p fifo", "bcast fifo"
  int rank;          // whose (the Bcast FIFO: the rank whose node it is on, 0)
  char *begin;
  size_t bytes;
  int node;          // -1: no policy (first touch)
};

struct NodeBlockConfig {
  uint32_t fifo_slots = 64;
  // A slot carries 8 KiB (with its header line, 8 KiB + 64 B): with 8 KiB - 64 a Bcast of 8 KiB
  // took two messages, its last 64 bytes a second round of FIFO handshakes.
  uint32_t fifo_payload = 8192;
  uint32_t reduce_slot_bytes = 16384;  // slot data, per rank and round in flight
  WaitPolicy wait;                    // how waits on this block's flags and FIFOs wait
};

class NodeBlock {
 public:
  // Collective. 0 or a negative errno on every rank; *why says what failed.
  static int create(const shaddr_host &host, const NodeBlockConfig &cfg,
                    std::unique_ptr<NodeBlock> *out, std::string *why) {
    return create(host, cfg, NodePlacement{}, out, why);
  }
  // As above, with each rank's part on its NUMA node where @placement is active. @placement
  // must be equal on every rank: the layout depends on it.
  static int create(const shaddr_host &host, const NodeBlockConfig &cfg,
                    const NodePlacement &placement, std::unique_ptr<NodeBlock> *out,
                    std::string *why);
  ~NodeBlock();
  NodeBlock(const NodeBlock &) = delete;
  NodeBlock &operator=(const NodeBlock &) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const char *how() const { return region_->how(); }  // "memfd" or "shm_open"
  RankArea &area(int r) { return *reinterpret_cast<RankArea *>(areas_ + r * line_stride_); }
  MsgCounter &counter(int r) {
    return *reinterpret_cast<MsgCounter *>(counters_ + r * line_stride_);
  }
  // Rank r's doorbell: r rings it after changing its RankArea or MsgCounter (wait.h).
  Bell &bell(int r) { return *reinterpret_cast<Bell *>(bells_ + r * line_stride_); }
  CallLedger &ledger(int r) {
    return *reinterpret_cast<CallLedger *>(ledgers_ + r * line_stride_);
  }
  const WaitPolicy &wait_policy() const { return cfg_.wait; }
  // The Bcast FIFO; its pages are mapped in this process on the first use (see populate()).
  Fifo &bcast() {
    if (!bcast_mapped_) map_bcast_fifo();
    return *bcast_;
  }
  Fifo &p2p(int receiver) { return *p2p_[receiver]; }
  size_t reduce_slot_bytes() const { return cfg_.reduce_slot_bytes; }
  // Rank r's slot for round j (16-byte aligned data after its header).
  SlotHeader &slot_header(int r, uint64_t j) {
    return *reinterpret_cast<SlotHeader *>(reduce_ + static_cast<size_t>(r) * rank_slots_stride_ +
                                           j % kSlotRounds * slot_stride());
  }
  // Where `bytes` of data start in it: right after the header, in the flag's cache line,
  // unless they are many (kSlotInlineMax): then at the next line, so that the copy and the
  // reduction kernels' vector loads do not straddle lines.
  void *reduce_slot(int r, uint64_t j = 0, size_t bytes = 0) {
    char *h = reinterpret_cast<char *>(&slot_header(r, j));
    return h + (bytes > kSlotInlineMax ? 64 : sizeof(SlotHeader));
  }
  size_t slot_stride() const { return (64 + cfg_.reduce_slot_bytes + 63) / 64 * 64; }

  // Placement (docs/topology.md, "Placement"): whether the per-rank layout is in use, each part
  // and the node it was given (the same list on every rank), and how many of rank 0's mbind
  // calls failed (their pages then went where first touch put them) and the first one's errno.
  bool placed() const { return placement_.active; }
  std::vector<PlacedRange> placed_ranges() const;
  unsigned placement_failures() const;
  int placement_first_error() const;

 private:
  NodeBlock() = default;
  void layout(char *base, bool init);
  void prefer_nodes(char *base);
  int rank_ = 0, size_ = 0;
  NodeBlockConfig cfg_;
  NodePlacement placement_;
  std::unique_ptr<SharedRegion> region_;
  // Rank r's line of each kind is at <kind>_ + r * line_stride_: dense (128, each kind an array)
  // or one page per rank holding its four lines (placed).
  char *areas_ = nullptr, *counters_ = nullptr, *bells_ = nullptr, *ledgers_ = nullptr;
  size_t line_stride_ = 0;
  size_t rank_slots_stride_ = 0;  // from rank r's slots to rank r + 1's
  size_t fifo_stride_ = 0;        // from one FIFO to the next
  std::unique_ptr<Fifo> bcast_;
  std::vector<std::unique_ptr<Fifo>> p2p_;
  void map_bcast_fifo();
  char *bcast_begin_ = nullptr, *bcast_end_ = nullptr;  // the Bcast FIFO's memory
  char *p2p_begin_ = nullptr;
  bool bcast_mapped_ = false;
  char *reduce_ = nullptr;
};

}  // namespace shaddr
