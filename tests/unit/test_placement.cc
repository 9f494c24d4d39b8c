// SPDX-License-Identifier: MIT
// Memory placement (docs/topology.md, "Placement"), checked where the pages are, not where they
// were meant to go: libnuma's move_pages(2) (a query: no target nodes) for every page of every
// part of the node control block and of the shm backend's staging, and get_mempolicy(2) for the
// policy a part was given. On whatever NUMA nodes the machine has: on a host of one node every
// page on node 0 and nothing failed; in the kmod guest (2 NUMA nodes, SHADDR_TEST_NUMA_NODES=2)
// four ranks bound to CPUs of both nodes, each rank's parts on its node.
#include <numaif.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend.h"
#include "bootstrap.h"
#include "comm.h"
#include "nodeblock.h"
#include "placement.h"
#include "shaddr/coll.h"
#include "topology.h"

using namespace shaddr;

namespace {

const size_t kPage = static_cast<size_t>(sysconf(_SC_PAGESIZE));

// The machine's online NUMA nodes, as sysfs lists them (independent of placement.cc's count).
std::vector<int> online_nodes() {
  std::ifstream in("/sys/devices/system/node/online");
  std::string list, why;
  CpuSet set;
  if (!std::getline(in, list) || CpuSet::parse(list, &set, &why)) return {0};
  return set.cpus();
}

// The node of each page of [p, p + bytes): move_pages(2) with no target nodes only reports
// (a negative errno for a page not allocated, -ENOENT).
std::vector<int> page_nodes(const void *p, size_t bytes) {
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~(kPage - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes + kPage - 1) & ~(kPage - 1);
  std::vector<void *> pages;
  for (uintptr_t a = lo; a < hi; a += kPage) pages.push_back(reinterpret_cast<void *>(a));
  std::vector<int> status(pages.size(), -1);
  if (move_pages(0, pages.size(), pages.data(), nullptr, status.data(), 0))
    status.assign(pages.size(), -errno - 1000);  // the call itself failed: no page passes
  return status;
}

// The policy of the memory at p (get_mempolicy(2), MPOL_F_ADDR): its mode and the nodes of its
// mask.
struct Policy {
  int mode = -1;
  std::vector<int> nodes;
};
Policy policy_at(const void *p) {
  Policy out;
  unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {};
  if (get_mempolicy(&out.mode, mask, 1024 + 1, const_cast<void *>(p), MPOL_F_ADDR)) {
    out.mode = -errno;
    return out;
  }
  for (int n = 0; n < 1024; n++)
    if (mask[n / (8 * sizeof(unsigned long))] >> (n % (8 * sizeof(unsigned long))) & 1)
      out.nodes.push_back(n);
  return out;
}

// Maps the pages of [p, p + bytes) in this process (move_pages reports only mapped pages) by
// reading a byte of each: a peer's pages are found, never allocated by this.
void map_by_reading(const void *p, size_t bytes) {
  const char *c = static_cast<const char *>(p);
  for (size_t i = 0; i < bytes; i += kPage) (void)*static_cast<const volatile char *>(c + i);
  (void)*static_cast<const volatile char *>(c + bytes - 1);
}

// Allocates the pages of [p, p + bytes) (p page-aligned) without writing to them.
bool populate(void *p, size_t bytes) { return madvise(p, bytes, MADV_POPULATE_WRITE) == 0; }

// Every part of @nb: its policy is "preferred @node" and each of its pages on @node. Returns 0
// or a code naming the first failure; adds the pages to *per_node.
int check_parts(NodeBlock &nb, std::map<int, size_t> *per_node, std::string *what) {
  for (const PlacedRange &p : nb.placed_ranges()) {
    *what = std::string(p.what) + " of rank " + std::to_string(p.rank) + " (node " +
            std::to_string(p.node) + ")";
    if (reinterpret_cast<uintptr_t>(p.begin) % kPage || p.bytes % kPage) return 40;
    if (!populate(p.begin, p.bytes)) return 43;  // FIFOs are otherwise allocated on first use
    const Policy pol = policy_at(p.begin);
    if (pol.mode != MPOL_PREFERRED || pol.nodes != std::vector<int>{p.node}) return 41;
    for (int n : page_nodes(p.begin, p.bytes)) {
      if (n != p.node) {
        *what += ": a page on " + std::to_string(n);
        return 42;
      }
      (*per_node)[n]++;
    }
  }
  return 0;
}

std::string pages_per_node(const std::map<int, size_t> &m) {
  std::string s;
  for (auto [node, pages] : m)
    s += (s.empty() ? "" : ", ") + std::to_string(pages) + " on node " + std::to_string(node);
  return s;
}

// Binds the calling process to one CPU of its affinity: node rank r to the (r mod count)th,
// so that ranks alternate over the CPUs (and the guest's NUMA nodes, vCPUs round-robin).
// Returns the affinity it had, to be restored.
cpu_set_t bind_to_one_cpu(int rank) {
  cpu_set_t was, one;
  CPU_ZERO(&was);
  sched_getaffinity(0, sizeof(was), &was);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; c++)
    if (CPU_ISSET(c, &was)) cpus.push_back(c);
  CPU_ZERO(&one);
  CPU_SET(cpus[static_cast<size_t>(rank) % cpus.size()], &one);
  sched_setaffinity(0, sizeof(one), &one);
  return was;
}

}  // namespace

TEST(Placement, NodesOfTheMachineAndWhenPlacementPays) {
  EXPECT_EQ(static_cast<size_t>(machine_numa_nodes()), online_nodes().size());
  if (const char *want = std::getenv("SHADDR_TEST_NUMA_NODES")) {
    EXPECT_EQ(machine_numa_nodes(), std::atoi(want));
  }
  EXPECT_FALSE(placement_pays(std::vector<int>{}));
  EXPECT_FALSE(placement_pays(std::vector<int>{-1, -1}));
  EXPECT_FALSE(placement_pays(std::vector<int>{1, 1, -1}));
  EXPECT_TRUE(placement_pays(std::vector<int>{0, 1}));
  EXPECT_TRUE(placement_pays(std::vector<int>{-1, 3, -1, 2}));
  EXPECT_EQ(prefer_numa_node(nullptr, kPage, -1), -EINVAL);
}

// Placement off: the dense layout, byte for byte the one before placement existed, and no
// policy on any page (they stay where first touch put them).
TEST(Placement, DenseLayoutAndNoPolicyWhenNotPlaced) {
  const int rc = run_forked(3, [](const shaddr_host &h) {
    std::unique_ptr<NodeBlock> nb;
    std::string why;
    if (NodeBlock::create(h, NodeBlockConfig{}, NodePlacement{{0, 0, 0}, false}, &nb, &why))
      return 10;
    if (nb->placed() || !nb->placed_ranges().empty()) return 11;
    char *a0 = reinterpret_cast<char *>(&nb->area(0));
    if (reinterpret_cast<char *>(&nb->area(1)) - a0 != 128) return 12;
    if (reinterpret_cast<char *>(&nb->counter(0)) - a0 != 3 * 128) return 13;
    if (reinterpret_cast<char *>(&nb->ledger(2)) - a0 != 3 * 3 * 128 + 2 * 128) return 14;
    if (reinterpret_cast<char *>(nb->reduce_slot(1, 0)) -
            reinterpret_cast<char *>(nb->reduce_slot(0, 0)) !=
        static_cast<ptrdiff_t>(kSlotRounds * nb->slot_stride()))
      return 15;
    if (policy_at(a0).mode != MPOL_DEFAULT) return 16;
    for (int n : page_nodes(a0, 3 * 4 * 128))
      if (n < 0) return 17;  // populated at creation, on some node
    return h.barrier(h.ctx) ? 18 : 0;
  });
  EXPECT_EQ(rc, 0);
}

// Placement forced on with the machine's nodes given to the ranks in turn (all node 0 on a host
// of one): every part page-aligned, preferring its rank's node, every page there, the FIFOs and
// slots still work in the padded layout.
TEST(Placement, EachRanksPartsOnTheNodeItIsGiven) {
  const std::vector<int> nodes = online_nodes();
  constexpr int kRanks = 4;
  NodePlacement placement;
  for (int r = 0; r < kRanks; r++)
    placement.node.push_back(nodes[static_cast<size_t>(r) % nodes.size()]);
  placement.active = true;
  const int rc = run_forked(kRanks, [&](const shaddr_host &h) {
    std::unique_ptr<NodeBlock> nb;
    std::string why, what;
    if (NodeBlock::create(h, NodeBlockConfig{}, placement, &nb, &why)) return 10;
    if (!nb->placed() || nb->placement_failures()) {
      std::fprintf(stderr, "rank %d: %u mbind calls failed: %s\n", h.rank,
                   nb->placement_failures(), std::strerror(nb->placement_first_error()));
      return 11;
    }
    if (reinterpret_cast<char *>(&nb->area(1)) - reinterpret_cast<char *>(&nb->area(0)) !=
        static_cast<ptrdiff_t>(kPage))
      return 12;
    std::map<int, size_t> per_node;
    if (int e = check_parts(*nb, &per_node, &what)) {
      std::fprintf(stderr, "rank %d: %s: failed (%d)\n", h.rank, what.c_str(), e);
      return e;
    }
    if (h.rank == 0)
      std::fprintf(stderr, "placed control block of %d ranks (nodes given in turn: %zu): %s\n",
                   h.size, nodes.size(), pages_per_node(per_node).c_str());
    // The padded layout in use: a message through the next rank's FIFO, a slot round.
    const int to = (h.rank + 1) % h.size, from = (h.rank + h.size - 1) % h.size;
    const uint64_t mine = 0x5348414400000000ull | static_cast<uint64_t>(h.rank);
    if (nb->p2p(to).push(h.rank, 1, &mine, sizeof(mine), 1)) return 20;
    Fifo::Cursor cur;
    uint64_t got = 0;
    Fifo::Message m;
    if (nb->p2p(h.rank).pop(&cur, &got, sizeof(got), &m) || m.writer != from ||
        got != (0x5348414400000000ull | static_cast<uint64_t>(from)))
      return 21;
    std::memcpy(nb->reduce_slot(h.rank, 1, 8), &mine, sizeof(mine));
    nb->slot_header(h.rank, 1).round.store(1, std::memory_order_release);
    if (h.barrier(h.ctx)) return 22;
    uint64_t peer;
    std::memcpy(&peer, nb->reduce_slot(from, 1, 8), sizeof(peer));
    if (nb->slot_header(from, 1).round.load(std::memory_order_acquire) != 1 ||
        peer != (0x5348414400000000ull | static_cast<uint64_t>(from)))
      return 23;
    return h.barrier(h.ctx) ? 24 : 0;
  });
  EXPECT_EQ(rc, 0);
}

// What Comm::create does: four ranks, each bound to one CPU (in turn over the machine's, so
// over the guest's NUMA nodes); placement where they span two or more nodes, with each rank's
// parts on its own node, else the dense layout on node 0 of a host of one node. The shm
// backend's staging: each rank's area, written by its exposure, on its node.
TEST(Placement, CommPlacesEachBoundRanksMemoryOnItsNode) {
  constexpr int kRanks = 4;
  const bool want_numa = std::getenv("SHADDR_TEST_NUMA_NODES") != nullptr &&
                         std::atoi(std::getenv("SHADDR_TEST_NUMA_NODES")) > 1;
  const int rc = run_forked(kRanks, [&](const shaddr_host &h) {
    const cpu_set_t was = bind_to_one_cpu(h.rank);
    const int mine = own_numa_node();
    auto run = [&]() -> int {
      shaddr_comm_t *comm = nullptr;
      if (shaddr_comm_create(&h, &comm)) return 30;
      NodeBlock &nb = from_handle(comm)->block();
      std::vector<int> nodes;
      std::string why, what;
      int res = 0;
      if (gather_rank_numa_nodes(h, &nodes, &why)) res = 31;
      if (!res && nodes[static_cast<size_t>(h.rank)] != mine) res = 32;
      if (!res && nb.placed() != placement_pays(nodes)) res = 33;
      if (!res && want_numa && (!nb.placed() || mine < 0)) res = 34;  // the guest: it must be
      std::map<int, size_t> per_node;
      if (!res && nb.placed()) {
        if (nb.placement_failures()) res = 35;
        for (const PlacedRange &p : nb.placed_ranges())
          if (!res && p.node != nodes[static_cast<size_t>(p.rank)]) res = 36;
        if (!res && (res = check_parts(nb, &per_node, &what)))
          std::fprintf(stderr, "rank %d: %s: failed (%d)\n", h.rank, what.c_str(), res);
      } else if (!res) {
        // Not placed: no policy, and the pages every call touches exist on a node of the
        // machine (node 0 on a host of one).
        char *a0 = reinterpret_cast<char *>(&nb.area(0));
        if (policy_at(a0).mode != MPOL_DEFAULT) res = 37;
        for (int n : page_nodes(a0, 4 * kRanks * 128)) {  // the lines, populated at creation
          per_node[n]++;
          if (!res && (n < 0 || (machine_numa_nodes() == 1 && n != 0))) {
            std::fprintf(stderr, "rank %d: a page of the lines at %p: %d\n", h.rank,
                         static_cast<void *>(a0), n);
            res = 38;
          }
        }
      }
      // The collectives over this block (placed in the guest): every root's Bcast at sizes
      // through the slots, the FIFO and the copy path, and Allreduces through the slots.
      for (size_t bytes : {size_t(8), size_t(4096), size_t(100000), size_t(1) << 20}) {
        for (int root = 0; !res && root < h.size; root++) {
          std::vector<uint8_t> buf(bytes, 0);
          if (h.rank == root)
            for (size_t i = 0; i < bytes; i++) buf[i] = static_cast<uint8_t>(i * 7 + root);
          if (shaddr_bcast(comm, buf.data(), bytes, root)) res = 60;
          for (size_t i = 0; !res && i < bytes; i++)
            if (buf[i] != static_cast<uint8_t>(i * 7 + root)) res = 61;
        }
      }
      for (size_t count : {size_t(1), size_t(1000), size_t(100000)}) {
        std::vector<int64_t> in(count), out(count, 0);
        for (size_t i = 0; i < count; i++) in[i] = static_cast<int64_t>(i) * (h.rank + 1);
        if (!res && shaddr_allreduce(comm, in.data(), out.data(), count, SHADDR_INT64,
                                     SHADDR_OP_SUM))
          res = 62;
        const int64_t ranks_sum = static_cast<int64_t>(h.size) * (h.size + 1) / 2;
        for (size_t i = 0; !res && i < count; i++)
          if (out[i] != static_cast<int64_t>(i) * ranks_sum) res = 63;
      }
      if (!res)
        std::fprintf(stderr, "rank %d (node %d): control block %s: %s\n", h.rank, mine,
                     nb.placed() ? "placed" : "dense", pages_per_node(per_node).c_str());
      if (shaddr_comm_free(comm) && !res) res = 39;
      return res;
    };
    int res = run();
    // The shm backend: each rank's exposure on its node (where it has one), seen by its peer.
    std::unique_ptr<Backend> shm;
    std::string why;
    std::vector<int> nodes;
    if (!res && (make_shm_backend(h, &shm, &why) || gather_rank_numa_nodes(h, &nodes, &why)))
      res = 50;
    if (!res) {
      std::vector<char> buf(16 * kPage, static_cast<char>(h.rank + 1));
      uintptr_t at = 0;
      RegCache::Ref own, peer;
      const int other = (h.rank + 1) % h.size;
      if (shm->expose(buf.data(), buf.size(), &at)) res = 51;
      if (!res && h.barrier(h.ctx)) res = 52;  // every rank staged
      if (!res && (shm->map(h.rank, at, buf.size(), &own) ||
                   shm->map(other, at, buf.size(), &peer)))
        res = 53;
      // Where a rank has no node: on a host of one, node 0; elsewhere any node.
      auto expected = [&](int r) {
        const int n = nodes[static_cast<size_t>(r)];
        return n >= 0 ? n : machine_numa_nodes() == 1 ? 0 : -1;
      };
      std::map<int, size_t> per_node;
      if (!res) {
        map_by_reading(peer.ptr, buf.size());
        for (int n : page_nodes(own.ptr, buf.size())) {
          per_node[n]++;
          if (n < 0 || (expected(h.rank) >= 0 && n != expected(h.rank))) res = 55;
        }
        for (int n : page_nodes(peer.ptr, buf.size()))
          if (n < 0 || (expected(other) >= 0 && n != expected(other))) res = 56;
      }
      if (!res && mine >= 0) {
        const Policy pol = policy_at(own.ptr);
        if (pol.mode != MPOL_PREFERRED || pol.nodes != std::vector<int>{mine}) res = 57;
      }
      if (!res)
        std::fprintf(stderr, "rank %d (node %d): shm staging, 64 KiB exposed: %s\n", h.rank, mine,
                     pages_per_node(per_node).c_str());
      if (!res && h.barrier(h.ctx)) res = 58;  // no peer unmaps while another still reads
    }
    sched_setaffinity(0, sizeof(was), &was);
    return res;
  });
  EXPECT_EQ(rc, 0);
}
