// SPDX-License-Identifier: MIT
// Communicator state: created collectively on the first intercepted collective of a
// communicator, cached under an attribute keyval, freed by the keyval's delete callback
// (MPI_Comm_free, MPI_Comm_disconnect) or, for what is still alive, before PMPI_Finalize.
#include "state.h"

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cctype>
#include <cstring>
#include <map>

#include "child_preload.h"
#include "settings.h"
#include "types.h"
#include "next_mpi.h"  // last: PMPI_* below are the MPI's own

namespace shaddr::interpose {
// The warm path's data (state.h reads it inline).
namespace detail {
Settings g_settings;
shaddr_interpose_stats g_stats{};
LastLookup g_last;
}  // namespace detail
using detail::g_last;
using detail::g_settings;
using detail::g_stats;

namespace {

bool g_inited = false;
bool g_off = false;            // forward everything (MPI_THREAD_MULTIPLE, SHADDR_INTERPOSE=0)
std::string g_off_why;
int g_keyval = MPI_KEYVAL_INVALID;
uint64_t g_seq = 0;
// Set-ups kept after their last communicator is freed, so that the group's next communicators
// take them without communicating. At most this many per process, MPI_COMM_WORLD's group
// besides: each holds four internal communicators and a libshaddr node communicator.
constexpr int kKeptSetUps = 8;
int g_kept = 0;
// Where libshaddr's waits drive MPI's progress engine: a receive that never matches (on a
// private communicator of this process alone, on which nothing is ever sent), tested.
MPI_Comm g_progress_comm = MPI_COMM_NULL;
MPI_Request g_progress_req = MPI_REQUEST_NULL;
int g_progress_buf = 0;
// What a set-up found for a group of processes (key: their MPI_COMM_WORLD ranks in the
// group's order), so that the next communicator of the same group knows its plan without
// communicating. Made by collective set-ups only, never dropped: the same entries on every rank
// of a group when one of its communicators makes its first collective call. Small: groups of
// one node size share one plan.
struct Profile {
  bool usable = false;
  bool config_error = false;
  std::string why;
  std::shared_ptr<const shaddr_plan> plan;
};
std::map<std::vector<int>, Profile> g_profiles;
}  // namespace

// A set-up proper, shared by the live communicators of one group (state.h).
struct Shared {
  State h;  // the hierarchy, the internal communicators, libshaddr's node communicator
  int refs = 0;
  uint64_t seq = 0;  // creation order: finalize frees in reverse
  bool kept = false;  // stays after its last communicator, until MPI_Finalize
};

namespace {
std::map<std::vector<int>, Shared *> g_shared;  // live set-ups by group (shareable groups)
std::map<uint64_t, Shared *> g_live;            // every live set-up by seq, for finalize
MPI_Group g_world_group = MPI_GROUP_NULL;

// What runs when the interposer does not call libshaddr: this MPI's own collectives.
#ifdef OMPI_MAJOR_VERSION
constexpr shaddr_fallback kFallback = SHADDR_FALLBACK_OPENMPI;
#else
constexpr shaddr_fallback kFallback = SHADDR_FALLBACK_MPICH;
#endif

// Plans are kept by digest: the communicators of a node size share one.
std::map<uint64_t, std::weak_ptr<const shaddr_plan>> g_plans;

std::shared_ptr<const shaddr_plan> keep_plan(const shaddr_plan &p) {
  auto &slot = g_plans[p.digest];
  if (auto kept = slot.lock()) return kept;
  auto made = std::make_shared<const shaddr_plan>(p);
  slot = made;
  return made;
}

// The sizes a plan sends to the fallback, and its hierarchy's limits, as a hash: plans of
// nodes of different sizes or backends may run different algorithms but must agree on these
// over several nodes.
uint64_t fallback_digest(const shaddr_plan &p) {
  uint64_t h = 14695981039346656037ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; i++) h = (h ^ ((v >> (8 * i)) & 0xff)) * 1099511628211ull;
  };
  for (const shaddr_plan_table &t : p.tables)
    for (int i = 0; i < t.nsteps; i++)
      if (i + 1 == t.nsteps || t.steps[i].use_fallback != t.steps[i + 1].use_fallback)
        mix(t.steps[i].upto << 1 | (t.steps[i].use_fallback ? 1 : 0));
  mix(p.limits.hier_segment);
  mix(p.limits.hier_mesh_max);
  return h;
}

// Takes libshaddr's plan for s->sc and agrees over s->comm that every rank sends the same sizes
// to libshaddr: a rank without a node communicator (a node of one rank) takes the plan of the
// first rank with one; where nodes' plans differ, none (every sized call forwarded).
void agree_plan(State *s) {
  shaddr_plan mine{};
  const shaddr_plan *p = s->sc ? shaddr_comm_plan(s->sc, kFallback) : nullptr;
  if (p) mine = *p;
  const uint64_t d = p ? fallback_digest(mine) : 0;
  // The bitwise or of the digest and of its complement over the ranks with a plan (the others
  // add zeros): equal digests leave d and ~d, different ones a bit set in both.
  uint64_t v[3] = {d, p ? ~d : 0, p ? 0u : 1u}, agreed[3];
  PMPI_Allreduce(v, agreed, 3, MPI_UINT64_T, MPI_BOR, s->comm);
  s->plan.reset();
  if (agreed[0] == 0 && agreed[1] == 0) {
    s->why = "no node communicator has a plan";
    return;
  }
  if (agreed[0] != ~agreed[1]) {
    if (g_settings.verbose && s->rank == 0)
      std::fprintf(stderr, "shaddr-interpose: communicator of %d ranks: the nodes' plans send "
                           "different sizes to libshaddr: every sized call forwarded\n",
                   s->size);
    return;
  }
  if (agreed[2]) {  // some rank has no plan: it takes the first one's
    int src = p ? s->rank : s->size, first = 0;
    PMPI_Allreduce(&src, &first, 1, MPI_INT, MPI_MIN, s->comm);
    PMPI_Bcast(&mine, sizeof(mine), MPI_BYTE, first, s->comm);
  }
  s->plan = keep_plan(mine);
}

// "bcast: 0-0 mpi, 1-4K slots, ...": the plan (SHADDR_VERBOSE).
std::string describe_plan(const State &s) {
  if (!s.plan) return "none: every sized call forwarded";
  char buf[8192];
  shaddr_plan_format(s.plan.get(), buf, sizeof(buf));
  std::string out = buf;
  if (!out.empty() && out.back() == '\n') out.pop_back();
  for (size_t at = 0; (at = out.find('\n', at)) != std::string::npos;) out.replace(at, 1, "; ");
  return out;
}

// SHADDR_INTERPOSE_FORWARD: the calls named are always forwarded (small(), barrier(), and
// the v-calls without a size, which check it themselves). 0, or -EINVAL with *why.
int read_forward(SettingsReader &in, Settings *st, std::string *why) {
  static const struct {
    const char *name;
    shaddr_interpose_call call;
  } names[] = {
      {"barrier", SHADDR_IP_BARRIER},     {"bcast", SHADDR_IP_BCAST},
      {"reduce", SHADDR_IP_REDUCE},       {"allreduce", SHADDR_IP_ALLREDUCE},
      {"gather", SHADDR_IP_GATHER},       {"gatherv", SHADDR_IP_GATHERV},
      {"scatter", SHADDR_IP_SCATTER},     {"scatterv", SHADDR_IP_SCATTERV},
      {"allgather", SHADDR_IP_ALLGATHER}, {"allgatherv", SHADDR_IP_ALLGATHERV},
      {"alltoall", SHADDR_IP_ALLTOALL},   {"alltoallv", SHADDR_IP_ALLTOALLV},
  };
  static_assert(sizeof(names) / sizeof(names[0]) == SHADDR_IP_COUNT,
                "every intercepted collective has a name");
  const std::string list = in.text("SHADDR_INTERPOSE_FORWARD", "");
  size_t at = 0;
  while (at <= list.size()) {
    size_t end = list.find(',', at);
    if (end == std::string::npos) end = list.size();
    std::string w = list.substr(at, end - at);
    w.erase(0, w.find_first_not_of(" \t"));
    w.erase(w.find_last_not_of(" \t") + 1);
    for (char &ch : w) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    at = end + 1;
    if (w.empty()) continue;
    bool known = false;
    for (const auto &n : names)
      if (w == n.name || w == "all") {
        st->forward[n.call] = true;
        known = true;
      }
    if (!known) {
      *why = "SHADDR_INTERPOSE_FORWARD: unknown call `" + w + "` (barrier, bcast, reduce, "
             "allreduce, gather, gatherv, scatter, scatterv, allgather, allgatherv, alltoall, "
             "alltoallv, all)";
      return -EINVAL;
    }
  }
  return 0;
}

// The interposer's settings (settings_table.cc), read once. Returns the first error.
int read_settings(Settings *st, std::string *why) {
  SettingsReader in;
  if (int err = read_forward(in, st, why)) return err;
  st->verbose = shaddr::verbose();
  st->nodes = static_cast<int>(in.size("SHADDR_NODES", 0));
  st->off = !in.flag("SHADDR_INTERPOSE", true);
  st->fail_every = in.size("SHADDR_INTERPOSE_FAIL_EVERY", 0);
  st->verify = in.flag("SHADDR_VERIFY", false);
  st->verify_inject = in.size("SHADDR_VERIFY_INJECT", 0);
  st->preload_children = in.flag("SHADDR_PRELOAD_CHILDREN", false);
  *why = in.why();
  return in.error();
}

int world_allgather(const void *send, void *recv, size_t bytes, void *) {
  if (bytes > INT32_MAX) return -EOVERFLOW;
  return PMPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes),
                        MPI_BYTE, MPI_COMM_WORLD) == MPI_SUCCESS
             ? 0
             : -EIO;
}

// libshaddr's view of the node: collectives over the node communicator.
int host_allgather(const void *send, void *recv, size_t bytes, void *ctx) {
  auto *s = static_cast<State *>(ctx);
  if (bytes > INT32_MAX) return -EOVERFLOW;
  return PMPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes),
                        MPI_BYTE, s->node) == MPI_SUCCESS
             ? 0
             : -EIO;
}

int host_barrier(void *ctx) {
  return PMPI_Barrier(static_cast<State *>(ctx)->node) == MPI_SUCCESS ? 0 : -EIO;
}

// Adds a node communicator's own counters to *out; its mapped bytes only while it is live.
void add_comm_stats(const State &s, bool live, shaddr_interpose_stats *out) {
  shaddr_comm_stats st{};
  if (!s.sc || shaddr_comm_get_stats(s.sc, &st) != 0) return;
  for (uint64_t c : st.calls) out->lib_calls += c;
  out->cache_misses += st.cache_misses;
  out->cache_evictions += st.cache_evictions;
  out->cache_refusals += st.cache_refusals;
  out->heap_transfers += st.heap_transfers;
  out->heap_bytes += st.heap_bytes;
  if (live) out->bytes_mapped += st.bytes_mapped;
}

// Collective over s->comm's nodes: releases libshaddr and the internal communicators of a
// set-up (Shared::h).
void release_handles(State *s) {
  if (s->freed) return;
  s->freed = true;
  if (s->sc) {
    add_comm_stats(*s, false, &g_stats);
    int rc = shaddr_comm_free(s->sc);
    if (rc) say(s, "shaddr_comm_free: %s", std::strerror(-rc));
    s->sc = nullptr;
  }
  if (s->mesh_row != MPI_COMM_NULL) PMPI_Comm_free(&s->mesh_row);
  if (s->mesh_col != MPI_COMM_NULL) PMPI_Comm_free(&s->mesh_col);
  if (s->leaders != MPI_COMM_NULL) PMPI_Comm_free(&s->leaders);
  if (s->node != MPI_COMM_NULL) PMPI_Comm_free(&s->node);
}

bool world_group_key(const std::vector<int> &key) {
  int world_size = 0;
  PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (key.size() != static_cast<size_t>(world_size)) return false;
  for (size_t i = 0; i < key.size(); i++)
    if (key[i] != static_cast<int>(i)) return false;
  return true;
}

// A user communicator's state lets go of its set-up; the last one frees it (collective, as
// MPI_Comm_free and MPI_Finalize are).
void release(State *s) {
  Shared *sh = s->shared;
  if (!sh) return;
  s->shared = nullptr;
  s->freed = true;
  s->sc = nullptr;
  s->node = s->leaders = s->mesh_row = s->mesh_col = MPI_COMM_NULL;
  g_stats.comms_freed++;
  if (--sh->refs > 0) return;
  // A kept set-up stays until MPI_Finalize: communicators of its group, made and freed again
  // and again (libraries do), then take it without communicating. Kept or not was agreed by
  // the group's ranks when it was made (build()), so it is the same on each of them.
  if (sh->kept) return;
  g_live.erase(sh->seq);
  auto it = g_shared.find(sh->h.key);
  if (it != g_shared.end() && it->second == sh) g_shared.erase(it);
  release_handles(&sh->h);
  delete sh;
}

int delete_cb(MPI_Comm, int, void *attr, void *) {
  auto *s = static_cast<State *>(attr);
  if (g_last.s == s) g_last = detail::LastLookup{};
  release(s);
  delete s;
  return MPI_SUCCESS;
}

// Builds the hierarchy of s->comm. Collective over s->comm; every rank reaches the same
// s->usable (the last step agrees on it with an allreduce).
// @keep_plan: s->plan came from the group's profile and decided calls already: kept.
void build(State *s, bool keep_plan) {
  MPI_Comm comm = s->comm;
  if (s->size == 1) {
    s->why = "one rank";
    return;
  }
  int rc = PMPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, s->rank, MPI_INFO_NULL, &s->node);
  if (rc == MPI_SUCCESS && g_settings.nodes > 1) {
    // Testing aid: k virtual nodes per node, by blocks of node ranks.
    int nr, ns;
    PMPI_Comm_rank(s->node, &nr);
    PMPI_Comm_size(s->node, &ns);
    MPI_Comm virt;
    const int k = std::min(g_settings.nodes, ns);
    rc = PMPI_Comm_split(s->node, static_cast<int>(static_cast<long>(nr) * k / ns), nr, &virt);
    PMPI_Comm_free(&s->node);
    s->node = virt;
  }
  if (rc != MPI_SUCCESS) {  // an error handler that returns: nothing was created
    s->node = MPI_COMM_NULL;
    s->why = "MPI_Comm_split_type failed";
    return;
  }
  PMPI_Comm_rank(s->node, &s->node_rank);
  PMPI_Comm_size(s->node, &s->node_size);
  PMPI_Comm_split(comm, s->leader() ? 0 : MPI_UNDEFINED, s->rank, &s->leaders);

  // Every rank learns every rank's leader (its node's lowest comm rank) and node rank.
  int mine[2] = {s->rank, s->node_rank};
  PMPI_Bcast(&mine[0], 1, MPI_INT, 0, s->node);
  std::vector<int> all(2 * static_cast<size_t>(s->size));
  PMPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, comm);
  std::vector<int> leaders;
  for (int r = 0; r < s->size; r++) leaders.push_back(all[2 * r]);
  std::sort(leaders.begin(), leaders.end());
  leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
  s->nnodes = static_cast<int>(leaders.size());
  s->members.assign(leaders.size(), {});
  s->node_of.resize(s->size);
  s->local_of.resize(s->size);
  for (int r = 0; r < s->size; r++) {
    int n = static_cast<int>(std::lower_bound(leaders.begin(), leaders.end(), all[2 * r]) -
                             leaders.begin());
    s->node_of[r] = n;
    s->local_of[r] = all[2 * r + 1];
    s->members[n].push_back(r);
  }
  s->my_node = s->node_of[s->rank];
  s->blocked = true;
  for (int n = 0, next = 0; n < s->nnodes; n++)
    for (int r : s->members[n]) s->blocked = s->blocked && r == next++;

  // The leaders' virtual mesh: the most square factorisation; none when it would be a line.
  for (int c = 1; c * c <= s->nnodes; c++)
    if (s->nnodes % c == 0) s->mesh_cols = c;
  if (s->mesh_cols < 2) s->mesh_cols = 0;
  if (s->mesh_cols && s->leader()) {
    const int me = s->my_node, cols = s->mesh_cols;
    PMPI_Comm_split(s->leaders, me / cols, me % cols, &s->mesh_row);
    PMPI_Comm_split(s->leaders, me % cols, me / cols, &s->mesh_col);
  }

  int ok = 1;
  if (s->nnodes == s->size) {
    s->why = "one rank per node";
    ok = 0;
  }
  int err = 0;
  if (ok && s->node_size > 1) {
    shaddr_host host{s->node_rank, s->node_size, host_allgather, host_barrier, s};
    err = shaddr_comm_create(&host, &s->sc);  // same result on every rank of the node
    if (err) {
      s->sc = nullptr;
      ok = 0;
      s->why = std::string("shaddr_comm_create: ") + std::strerror(-err) + " (" +
               shaddr_last_error() + ")";
      // EINVAL: the settings (or arguments) are wrong, not the machine: say so unasked.
      s->config_error = err == -EINVAL;
    }
  }
  // Every node must succeed, or nobody uses shaddr on this communicator; the set-up is kept
  // after its last communicator where every rank has room for one more (MPI_COMM_WORLD's
  // always: every rank is in its group and frees in the same order).
  int mine_ok[2] = {ok, g_kept < kKeptSetUps || world_group_key(s->key)};
  int every[2] = {0, 0};
  PMPI_Allreduce(mine_ok, every, 2, MPI_INT, MPI_MIN, comm);
  const int all_ok = every[0];
  s->keep = every[1] && !s->key.empty();
  if (!all_ok) {
    if (s->why.empty()) s->why = "shaddr_comm_create failed on another node";
    release_handles(s);
    return;
  }
  if (!keep_plan) agree_plan(s);
  s->usable = true;
}

// The MPI_COMM_WORLD ranks of @comm's group, in its order; empty when some are not in
// MPI_COMM_WORLD (they would not be named alike on every rank).
std::vector<int> group_key(MPI_Comm comm, int size) {
  std::vector<int> key;
  if (comm == MPI_COMM_WORLD) {
    key.resize(static_cast<size_t>(size));
    for (int i = 0; i < size; i++) key[i] = i;
    return key;
  }
  if (g_world_group == MPI_GROUP_NULL) return key;
  MPI_Group g;
  if (PMPI_Comm_group(comm, &g) != MPI_SUCCESS) return key;
  std::vector<int> ranks(static_cast<size_t>(size));
  for (int i = 0; i < size; i++) ranks[i] = i;
  key.resize(static_cast<size_t>(size));
  const int rc = PMPI_Group_translate_ranks(g, size, ranks.data(), g_world_group, key.data());
  PMPI_Group_free(&g);
  for (int r : key)
    if (rc != MPI_SUCCESS || r == MPI_UNDEFINED) return {};
  return key;
}

void save_profile(const State &s, const std::vector<int> &key) {
  if (key.empty()) return;
  Profile &p = g_profiles[key];
  p.usable = s.usable;
  p.config_error = s.config_error;
  p.why = s.why;
  p.plan = s.plan;
}

void apply_profile(const Profile &p, State *s) {
  s->usable = p.usable;
  s->config_error = p.config_error;
  s->why = p.why;
  s->plan = p.plan;
}

// After a set-up: what SHADDR_VERBOSE=1 (or a wrong setting) has to say; @fresh: a new one
// was made (not the live one of the group taken).
void after_build(State *s, bool fresh) {
  if (g_settings.verbose && s->rank == 0 && fresh) {
    if (s->usable)
      std::fprintf(stderr,
                   "shaddr-interpose: communicator of %d ranks: %d node(s)%s, backend %s\n",
                   s->size, s->nnodes, g_settings.nodes > 1 ? " (SHADDR_NODES)" : "",
                   s->sc ? shaddr_comm_backend(s->sc) : "-");
    if (s->usable)
      std::fprintf(stderr, "shaddr-interpose: the plan (bytes; mpi: PMPI_*): %s\n",
                   describe_plan(*s).c_str());
  }
  static bool config_error_said = false;  // unasked: once per process
  if (!s->usable && s->rank == 0 &&
      (g_settings.verbose || (s->config_error && !config_error_said))) {
    std::fprintf(stderr, "shaddr-interpose: communicator of %d ranks: forwarded (%s)\n", s->size,
                 s->why.c_str());
    config_error_said = config_error_said || s->config_error;
  }
}

// libshaddr's progress callback (shaddr_set_progress). Testing a request that is not complete
// runs one pass of the whole progress engine on both MPIs (MPICH: MPID_Progress_test, Open MPI:
// opal_progress), which serves one-sided operations aimed at this rank and others' messages.
// (MPI_Iprobe on a communicator of one rank does not: MPICH's ch4 answers it without
// progressing its active messages.)
void mpi_progress(void *) {
  int flag = 0;
  PMPI_Test(&g_progress_req, &flag, MPI_STATUS_IGNORE);
}

void start_progress() {
  if (PMPI_Comm_dup(MPI_COMM_SELF, &g_progress_comm) != MPI_SUCCESS) {
    g_progress_comm = MPI_COMM_NULL;
  } else if (PMPI_Irecv(&g_progress_buf, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG,
                        g_progress_comm, &g_progress_req) != MPI_SUCCESS) {
    PMPI_Comm_free(&g_progress_comm);
    g_progress_req = MPI_REQUEST_NULL;
  }
  if (g_progress_req == MPI_REQUEST_NULL) {
    say(nullptr, "no request to progress MPI with: libshaddr's waits will not progress "
                 "other MPI operations");
    return;
  }
  shaddr_set_progress(mpi_progress, nullptr);
}

void stop_progress() {
  if (g_progress_req == MPI_REQUEST_NULL) return;
  shaddr_set_progress(nullptr, nullptr);
  PMPI_Cancel(&g_progress_req);
  PMPI_Wait(&g_progress_req, MPI_STATUS_IGNORE);
  PMPI_Comm_free(&g_progress_comm);
}

// Takes @sh's set-up into @s (a user communicator's state).
void attach(State *s, Shared *sh) {
  const State &h = sh->h;
  s->shared = sh;
  sh->refs++;
  s->freed = false;
  s->usable = true;
  s->node = h.node;
  s->leaders = h.leaders;
  s->mesh_row = h.mesh_row;
  s->mesh_col = h.mesh_col;
  s->sc = h.sc;
  s->node_rank = h.node_rank;
  s->node_size = h.node_size;
  s->nnodes = h.nnodes;
  s->my_node = h.my_node;
  s->node_of = h.node_of;
  s->local_of = h.local_of;
  s->members = h.members;
  s->blocked = h.blocked;
  s->mesh_cols = h.mesh_cols;
  if (!s->plan) s->plan = h.plan;
  g_stats.comms_created++;
  if (s->comm == MPI_COMM_WORLD) g_stats.world_nodes = static_cast<uint64_t>(s->nnodes);
}

// Sets up @s: the live set-up of its group if there is one (no communication), else a new one
// (collective over s->comm). @keep_plan: s's plan came from the group's profile.
// Returns whether a new set-up was made.
bool set_up(State *s, bool keep_plan) {
  s->usable = false;
  if (!s->key.empty()) {
    auto it = g_shared.find(s->key);
    if (it != g_shared.end()) {
      attach(s, it->second);
      return false;
    }
  }
  auto *sh = new Shared;
  State &h = sh->h;
  h.comm = s->comm;
  h.rank = s->rank;
  h.size = s->size;
  h.key = s->key;
  h.plan = s->plan;
  build(&h, keep_plan);
  h.comm = MPI_COMM_NULL;  // s->comm may be freed before the set-up
  s->why = h.why;
  s->config_error = h.config_error;
  s->plan = h.plan;
  if (!h.usable) {  // every rank alike (build agrees)
    delete sh;
    return true;
  }
  sh->seq = ++g_seq;
  sh->kept = h.keep;
  if (sh->kept && !world_group_key(h.key)) g_kept++;
  g_live[sh->seq] = sh;
  if (!h.key.empty()) g_shared[h.key] = sh;
  attach(s, sh);
  return true;
}

}  // namespace

void init_globals(bool at_init) {
  if (g_inited) return;
  int initialized = 0, finalized = 0;
  PMPI_Initialized(&initialized);
  PMPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  g_inited = true;
  std::string bad;
  const int bad_err = read_settings(&g_settings, &bad);
  // Its children are not ranks (docs/heap.md).
  shaddr::drop_preload_for_children(g_settings.preload_children);
  // The interposer's settings decide, on each rank alone, whether a call goes to libshaddr or
  // to PMPI_*: ranks that disagree would wait in different collectives. At MPI_Init every
  // rank takes part, so they are compared there; a mismatch or a value that does not parse
  // turns the interposer off on every rank.
  std::string disagree;
  int world_rank = 0, world_size = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (at_init && agree_settings(SettingLayer::kInterposer, world_rank, world_size,
                                world_allgather, nullptr, &disagree) != 0) {
    g_settings.off = true;
  } else if (bad_err) {  // not at MPI_Init: this rank alone decides, as it always did
    disagree = bad;
    g_settings.off = true;
  }
  int provided = MPI_THREAD_SINGLE;
  PMPI_Query_thread(&provided);
  if (!disagree.empty()) {
    g_off = true;
    g_off_why = disagree;
    if (world_rank == 0)
      std::fprintf(stderr, "shaddr-interpose: off, every call goes to PMPI_*: %s\n",
                   disagree.c_str());
  } else if (g_settings.off) {
    g_off = true;
    g_off_why = "SHADDR_INTERPOSE=0";
  } else if (provided == MPI_THREAD_MULTIPLE) {
    // libshaddr's node communicators are not made for concurrent calls from several threads.
    g_off = true;
    g_off_why = "MPI_THREAD_MULTIPLE";
  }
  if (!g_off &&
      PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_cb, &g_keyval, nullptr) !=
          MPI_SUCCESS) {
    g_off = true;
    g_off_why = "MPI_Comm_create_keyval failed";
  }
  if (!g_off) {
    start_progress();
    start_type_checks();
    if (PMPI_Comm_group(MPI_COMM_WORLD, &g_world_group) != MPI_SUCCESS)
      g_world_group = MPI_GROUP_NULL;
  }
  if (g_settings.verify && g_off) {
    int r = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (r == 0)
      std::fprintf(stderr, "shaddr-interpose: SHADDR_VERIFY=1 ignored: the interposer is off (%s)\n",
                   g_off_why.c_str());
  }
  if (g_off && g_settings.verbose && disagree.empty()) {
    int r = 0;
    PMPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (r == 0) std::fprintf(stderr, "shaddr-interpose: off (%s): every call goes to PMPI_*\n",
                             g_off_why.c_str());
  }
}

bool interposer_active() {
  if (!g_inited) init_globals(false);
  return g_inited && !g_off;
}

State *state_lookup(MPI_Comm comm) {
  if (!g_inited) init_globals(false);
  if (!g_inited || g_off || comm == MPI_COMM_NULL) return nullptr;
  void *val = nullptr;
  int flag = 0;
  if (PMPI_Comm_get_attr(comm, g_keyval, &val, &flag) != MPI_SUCCESS) return nullptr;
  if (flag) {
    auto *s = static_cast<State *>(val);
    g_last = detail::LastLookup{comm, s};
    return s->usable ? s : nullptr;
  }
  int inter = 0;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return nullptr;
  auto *s = new (std::nothrow) State;
  if (!s) return nullptr;  // cannot happen in practice; would need agreement otherwise
  s->comm = comm;
  PMPI_Comm_rank(comm, &s->rank);
  PMPI_Comm_size(comm, &s->size);
  if (s->size == 1) {
    s->why = "one rank";
  } else {
    // The same answer on every rank: the profiles of a group are made collectively.
    s->key = group_key(comm, s->size);
    auto it = s->key.empty() ? g_profiles.end() : g_profiles.find(s->key);
    if (it != g_profiles.end()) {
      // The group's answer is known. Where it is usable the set-up is taken or made now, at
      // this first collective of the communicator (the same call on every rank), not at its
      // first call for libshaddr: a count that differs between ranks would send one rank
      // into the set-up's collectives and another into the MPI's call.
      apply_profile(it->second, s);
      if (s->usable) after_build(s, set_up(s, true));
    } else {
      const bool fresh = set_up(s, false);
      save_profile(*s, s->key);
      after_build(s, fresh);
    }
  }
  PMPI_Comm_set_attr(comm, g_keyval, s);
  g_last = detail::LastLookup{comm, s};
  return s->usable ? s : nullptr;
}

namespace {
// SHADDR_VERBOSE=1: what the interposer did in MPI_COMM_WORLD's rank 0, said at MPI_Finalize
// (for a program one cannot change: did its collectives reach libshaddr?).
void say_totals() {
  int rank = 0;
  if (!g_settings.verbose || PMPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS || rank != 0)
    return;
  shaddr_interpose_stats st{};
  shaddr_interpose_get_stats(&st);
  unsigned long long accel = 0, fwd = 0, fell = 0;
  for (int c = 0; c < SHADDR_IP_COUNT; c++) {
    accel += st.accelerated[c];
    fwd += st.forwarded[c];
    fell += st.fallbacks[c];
  }
  std::fprintf(stderr, "shaddr-interpose: rank 0 at MPI_Finalize: %llu calls run by libshaddr, "
                       "%llu forwarded, %llu fallen back; libshaddr ran %llu collectives\n",
               accel, fwd, fell, static_cast<unsigned long long>(st.lib_calls));
}
}  // namespace

void finalize_all() {
  if (!g_inited || g_off) return;
  say_totals();
  // From here on every call is forwarded: calls the MPI makes inside its MPI_Finalize (ROMIO's,
  // through PMPI_*, bindings.cc) find no state.
  g_off = true;
  g_off_why = "MPI_Finalize";
  g_last = detail::LastLookup{};
  // Reverse creation order: the same order on every rank, as the creations were collective.
  // The states stay with their attributes (MPI deletes them at finalize or never); their
  // set-ups are released here, and kept as empty shells for those states.
  while (!g_live.empty()) {
    Shared *sh = std::prev(g_live.end())->second;
    g_live.erase(std::prev(g_live.end()));
    release_handles(&sh->h);
    sh->refs = 1 << 30;  // never freed by a state now
  }
  g_shared.clear();
  stop_progress();
  stop_type_checks();
  if (g_world_group != MPI_GROUP_NULL) PMPI_Group_free(&g_world_group);
}


void say(const State *s, const char *fmt, ...) {
  if (!g_settings.verbose || (s && s->node_rank != 0)) return;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "shaddr-interpose: %s\n", msg);
}

void say_fallback(const State &s, const char *what, int shaddr_err) {
  say(&s, "%s: libshaddr failed (%s: %s); falling back to PMPI_*", what,
      std::strerror(-shaddr_err),
      s.injected ? "injected by SHADDR_INTERPOSE_FAIL_EVERY" : shaddr_last_error());
}

}  // namespace shaddr::interpose

extern "C" __attribute__((visibility("default"))) int shaddr_interpose_get_stats(
    struct shaddr_interpose_stats *out) {
  using namespace shaddr::interpose;
  if (!out) return -EINVAL;
  *out = g_stats;
  for (const auto &[seq, sh] : g_live) {
    (void)seq;
    add_comm_stats(sh->h, true, out);
  }
  return 0;
}
