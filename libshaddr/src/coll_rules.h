// SPDX-License-Identifier: MIT
// The algorithm choices of the collectives, one small function each, defined next to the
// algorithms they choose between (coll_*.cc). Only the plan (plan.cc) asks them: the
// collectives run the algorithm their plan's step names. Each
// takes what every rank of the node knows alike (node size, bytes per rank, the agreed
// Tuning), so every rank chooses the same.
#pragma once

#include <cstddef>
#include <vector>

namespace shaddr {

struct Tuning;
struct LevelGroups;

// coll_bcast.cc. A Bcast of `bytes` goes through the root's slot (checked first) ...
bool bcast_slot_fits(size_t bytes, const Tuning &t);
// ... else through the Bcast FIFO (`fifo_always`: at every size) ...
bool bcast_fifo_wins(size_t bytes, bool fifo_always, const Tuning &t);
// ... else straight from the root's buffer, in streams relayed by non-roots when this holds
// (a segmented Bcast, whose root's data arrives piece by piece, streams nothing; nor does a
// staging backend, whose exposure must be the final data, which a relay's is not yet).
bool bcast_streams_win(int nranks, size_t bytes, bool segmented, bool backend_stages,
                       const Tuning &t);
// `fifo_always` for a Bcast on a backend: a staging backend (shm) takes the FIFO at every size,
// which copies as it goes where an exposure would first copy the whole message, except under
// the heap layer and not segmented: a root's buffer in its heap is then read where it is (one
// copy), and one outside it is staged whole (as the FIFO, two copies).
bool bcast_fifo_always(bool backend_stages, bool heap_layer, bool segmented);

// coll_reduce.cc. SHADDR_SLOT_MAX's default on a node of `nranks`: 16 KiB / (nranks - 1), at
// least 4 KiB (the slots' capacity is 16 KiB).
size_t slot_max_default(int nranks);
// Reduce/Allreduce of `bytes` per rank goes through the control block's slots.
bool reduce_slots_fit(size_t bytes, const Tuning &t);
// A Reduce (not Allreduce) too big for the slots: the root reads every operand itself
// (direct) rather than the partitioned reduction. True at 2 ranks up to 128 KiB: it moves S
// bytes across cores instead of 1.5·S and needs no second phase; above, the partitioned one's
// halved combining wins when both ranks have a core.
bool reduce_direct_wins(int nranks, size_t bytes, const Tuning &t);
constexpr size_t kReduceDirectMax = 128u << 10;
// The rank-order chain of a level's groups: runs of consecutive ranks in one domain.
struct ChainRun {
  int first, count;
};
std::vector<ChainRun> chain_runs(const LevelGroups &l);
// A partitioned Reduce/Allreduce goes down the chain of @l (coll_reduce.cc level_reduce()) where
// its slices cross between domains fewer times than the flat one's operands do, and the node has
// at most 255 ranks (a rank's folds are stages, 8 bits). Rank order decides, not only the
// grouping: ranks alternating between two domains make a chain as long as the node.
bool reduce_chain_pays(const LevelGroups &l);
// Into how many slices the chain of @l cuts a vector of @count elements, @bytes in all
// (coll_reduce.cc Chain; @bytes and @count SIZE_MAX: at large sizes, as the cost model takes it).
size_t chain_slices(const LevelGroups &l, size_t bytes, size_t count);

// coll_gather.cc. Gather, Scatter, Allgather of `per_rank` bytes per block, and Alltoall of
// n blocks of that size (`per_rank` = n * block), go through the control block's slots.
bool gather_slots_fit(size_t per_rank, const Tuning &t);
// An Allgather too big for the slots runs as a ring where reading every peer in turn would
// thrash the backend's mappings (`max_mappings` of them at once).
bool allgather_ring_wins(int nranks, bool backend_stages, size_t max_mappings, const Tuning &t);

}  // namespace shaddr
