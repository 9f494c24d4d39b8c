// SPDX-License-Identifier: MIT
// The interposer's per-communicator state: the node/leader hierarchy and the libshaddr node
// communicator, cached on the user's communicator with an attribute keyval.
#pragma once

#include <mpi.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "shaddr/coll.h"
#include "shaddr_interpose.h"

namespace shaddr::interpose {

struct Shared;

// A communicator's state is made at its first intercepted collective, the same call on every
// rank: rank, size, the plan of its group and the set-up proper (the hierarchy, libshaddr's
// node communicator). Creating a communicator costs nothing; its first collective takes the
// live set-up of its group without communicating, or makes one (collective). A group whose
// set-up said every call is forwarded is remembered (the same on every rank of the group, as
// set-ups are collective) and not set up again.
//
// Communicators of the same group share one set-up (Shared: the internal communicators and
// libshaddr's node communicator, with its control block and heap mappings) while any of them
// is alive: collectives on communicators of one group are called in the same order on every
// rank (MPI's rule for correct programs: else they could deadlock), so their calls can share
// one sequence. The set-up is freed with the last of them (MPI_Comm_free is collective).
struct State {
  MPI_Comm comm = MPI_COMM_NULL;  // the user's communicator (not owned)
  bool usable = false;            // false: every collective on it is forwarded
  bool keep = false;  // set-up: kept after its last communicator (agreed by build())
  std::string why;                // why not usable (SHADDR_VERBOSE)
  bool config_error = false;      // not usable because of a wrong setting: said unasked
  int rank = 0, size = 0;

  // Hierarchy. Node ranks follow comm rank order; nodes are numbered by their leader's rank.
  MPI_Comm node = MPI_COMM_NULL;     // this rank's (virtual) node
  MPI_Comm leaders = MPI_COMM_NULL;  // node rank 0 of every node; MPI_COMM_NULL elsewhere
  int node_rank = 0, node_size = 0;
  int nnodes = 0, my_node = 0;
  std::vector<int> node_of;                 // comm rank -> node index
  std::vector<int> local_of;                // comm rank -> node rank
  std::vector<std::vector<int>> members;    // node index -> its comm ranks, ascending
  bool blocked = false;  // nodes are consecutive blocks of comm ranks (no reordering needed)
  // The leaders' 2D virtual mesh that combines a short Alltoall's messages: nnodes = rows x
  // mesh_cols, leader i at row i / mesh_cols, column i % mesh_cols; mesh_cols 0: no mesh.
  int mesh_cols = 0;
  MPI_Comm mesh_row = MPI_COMM_NULL;  // the leaders of my row, ranked by column
  MPI_Comm mesh_col = MPI_COMM_NULL;  // the leaders of my column, ranked by row
  shaddr_comm_t *sc = nullptr;  // over `node`; nullptr when the node has one rank
  // libshaddr's plan against this MPI, as libshaddr keeps it (shaddr_plan_intern: the
  // interposer keeps no copy): over several nodes every rank's plan sends the same sizes to
  // libshaddr (agree_plan), and the calls are decided on it (agree.h); a rank of a node of one
  // takes the plan of the first rank with one. On one node the route reads the node
  // communicator's own, equal to it. Null: every sized call is forwarded.
  const shaddr_plan *plan = nullptr;
  Shared *shared = nullptr;  // the set-up this state uses (its handles above are copies)
  std::vector<int> key;      // the group's MPI_COMM_WORLD ranks (empty: not shareable)
  bool freed = false;        // the set-up proper was released (or never existed)
  uint64_t lib_seq = 0;    // libshaddr calls on this rank (SHADDR_INTERPOSE_FAIL_EVERY)
  bool injected = false;   // the last failure was injected

  bool leader() const { return node_rank == 0; }
  // Several (virtual) nodes: calls are agreed over the whole communicator (agree.h,
  // agree_nodes), not by one node's call ledger, and run through the hierarchy. On one node
  // the call ledger of `sc` records every call (agree.h).
  bool multi() const { return nnodes > 1; }
};

// Settings (read once at MPI_Init or the first collective).
struct Settings {
  bool verbose = false;
  int nodes = 0;               // SHADDR_NODES: virtual nodes per physical node (0/1: off)
  bool forward[SHADDR_IP_COUNT] = {};  // SHADDR_INTERPOSE_FORWARD: always PMPI_*
  bool off = false;            // SHADDR_INTERPOSE=0
  uint64_t fail_every = 0;     // SHADDR_INTERPOSE_FAIL_EVERY: testing aid, see inject_fault
  bool verify = false;         // SHADDR_VERIFY=1: check every collective (verify.h)
  uint64_t verify_inject = 0;  // SHADDR_VERIFY_INJECT: testing aid, see verify.h
  bool preload_children = false;  // SHADDR_PRELOAD_CHILDREN: keep the preload for children
};

// What a warm call reads, kept in state.cc and read here inline: a call that the plan forwards
// costs a few compares (docs/architecture.md, the path of one call).
namespace detail {
extern Settings g_settings;
extern shaddr_interpose_stats g_stats;
// The last communicator looked up and its state: most programs call collectives on one
// communicator in a row, and the attribute lookup was most of a forwarded call's cost. Cleared
// when that state is deleted (MPI_Comm_free, MPI_Comm_disconnect, MPI_Finalize), before its
// handle can be reused.
struct LastLookup {
  MPI_Comm comm = MPI_COMM_NULL;
  State *s = nullptr;
};
extern LastLookup g_last;
}  // namespace detail

inline const Settings &settings() { return detail::g_settings; }

// The state of @comm, looked up (and made at @comm's first collective, collectively); nullptr
// when every collective on @comm goes to PMPI_* (the decision is the same on every rank of
// @comm).
State *state_lookup(MPI_Comm comm);
inline State *state_of(MPI_Comm comm) {
  const detail::LastLookup &l = detail::g_last;
  if (l.s && comm == l.comm) return l.s->usable ? l.s : nullptr;
  return state_lookup(comm);
}

// Frees every live state (reverse creation order) before PMPI_Finalize.
void finalize_all();
// Reads the settings once. @at_init: called by MPI_Init(_thread) on every rank, so the
// settings are agreed over MPI_COMM_WORLD (else this rank's own are used).
void init_globals(bool at_init);
// MPI is initialised and the interposer does not forward everything (SHADDR_INTERPOSE=0,
// MPI_THREAD_MULTIPLE).
bool interposer_active();

// Counters (shaddr_interpose_get_stats).
inline void count_accel(shaddr_interpose_call c, const State &s) {
  detail::g_stats.accelerated[c]++;
  if (s.multi()) detail::g_stats.hierarchical[c]++;
}
inline void count_forward(shaddr_interpose_call c) { detail::g_stats.forwarded[c]++; }
inline void count_fallback(shaddr_interpose_call c) { detail::g_stats.fallbacks[c]++; }
inline void count_mesh() { detail::g_stats.mesh_alltoall++; }
// This process's forwarded calls so far.
inline uint64_t forwarded_calls(shaddr_interpose_call c) { return detail::g_stats.forwarded[c]; }

// SHADDR_VERBOSE=1 diagnostics: printed by rank 0 of @comm's node (or every rank if @s is
// nullptr), with shaddr_last_error() when @shaddr_err is non-zero.
void say(const State *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void say_fallback(const State &s, const char *what, int shaddr_err);

// Testing aid for the fallback paths: with SHADDR_INTERPOSE_FAIL_EVERY=n, every n-th libshaddr
// call on a communicator is reported as failed (-ECANCELED) after it ran, so its outputs are
// already written when PMPI_* redoes the call. Ranks of a node make the same libshaddr calls on
// a communicator in the same order, so they agree on which ones fail, as with real failures.
inline int inject_fault(State &s, int rc) {
  s.injected = false;
  const uint64_t every = settings().fail_every;
  if (rc || !every || ++s.lib_seq % every) return rc;
  s.injected = true;
  return -ECANCELED;
}

}  // namespace shaddr::interpose
