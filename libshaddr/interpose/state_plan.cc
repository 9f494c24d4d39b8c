// SPDX-License-Identifier: MIT
// The plan a communicator's group decides its calls by (agreed over its nodes, kept by
// libshaddr) and what a group's first set-up found (state_parts.h).
#include <cstdio>
#include <map>

#include "agree.h"
#include "hash.h"
#include "state_parts.h"
#include "next_mpi.h"  // last: PMPI_* below are the MPI's own

namespace shaddr::interpose {
namespace {

std::map<std::vector<int>, Profile> g_profiles;

// The sizes a plan sends to the fallback, and its hierarchy's limits, as a hash: plans of
// nodes of different sizes or backends may run different algorithms but must agree on these
// over several nodes.
uint64_t fallback_digest(const shaddr_plan &p) {
  uint64_t h = shaddr::kHashSeed;
  for (const shaddr_plan_table &t : p.tables)
    for (int i = 0; i < t.nsteps; i++)
      if (i + 1 == t.nsteps || t.steps[i].use_fallback != t.steps[i + 1].use_fallback)
        h = shaddr::hash_mix(h, t.steps[i].upto << 1 | (t.steps[i].use_fallback ? 1 : 0));
  h = shaddr::hash_mix(h, p.limits.hier_segment);
  h = shaddr::hash_mix(h, p.limits.hier_mesh_max);
  return h;
}

}  // namespace

void agree_plan(State *s) {
  shaddr_plan mine{};
  const shaddr_plan *p = s->sc ? shaddr_comm_plan(s->sc, kFallback) : nullptr;
  if (p) mine = *p;
  const uint64_t d = p ? fallback_digest(mine) : 0;
  // The bitwise or of the digest and of its complement over the ranks with a plan (the others
  // add zeros): equal digests leave d and ~d, different ones a bit set in both.
  uint64_t v[3] = {d, p ? ~d : 0, p ? 0u : 1u}, agreed[3];
  PMPI_Allreduce(v, agreed, 3, MPI_UINT64_T, MPI_BOR, s->comm);
  s->plan = nullptr;
  if (agreed[0] == 0 && agreed[1] == 0) {
    s->why = "no node communicator has a plan";
    return;
  }
  if (agreed[0] != ~agreed[1]) {
    if (settings().verbose && s->rank == 0)
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
  // Kept by libshaddr, shared by equal plans (the communicators of a node size), and alive
  // after the node communicator it came from: a group's profile names it.
  s->plan = shaddr_plan_intern(&mine);
}

std::string describe_plan(const State &s) {
  if (!s.plan) return "none: every sized call forwarded";
  char buf[8192];
  shaddr_plan_format(s.plan, buf, sizeof(buf));
  std::string out = buf;
  if (!out.empty() && out.back() == '\n') out.pop_back();
  for (size_t at = 0; (at = out.find('\n', at)) != std::string::npos;) out.replace(at, 1, "; ");
  return out;
}

const Profile *find_profile(const std::vector<int> &key) {
  auto it = g_profiles.find(key);
  return it == g_profiles.end() ? nullptr : &it->second;
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

}  // namespace shaddr::interpose
