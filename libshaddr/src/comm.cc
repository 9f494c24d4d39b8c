// SPDX-License-Identifier: MIT
// Node communicators: creation (backend + control block), tuning from the machine's caches,
// a peer's liveness, and the C entry points that are not collectives or the plan's. The
// post/wait/finish protocol every collective is written in is inline in comm.h.
#include "comm.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>

#include "coll_rules.h"
#include "error.h"
#include "placement.h"
#include "settings.h"
#include "size_parse.h"

namespace shaddr {
namespace {

// Cache size of `level` (1, 2, 3; data or unified) of cpu0 from sysfs, 0 if unknown.
size_t cache_size(int level) {
  for (int i = 0; i < 8; i++) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    std::ifstream lv(dir + "/level"), ty(dir + "/type"), sz(dir + "/size");
    int l = 0;
    std::string type, size;
    if (!(lv >> l) || !(ty >> type) || !(sz >> size)) continue;
    if (l != level || type == "Instruction") continue;
    std::uint64_t v = 0;  // sysfs writes "32K", "1024K", "32M": the one size grammar
    return parse_size(size, &v) == SizeError::kNone ? static_cast<size_t>(v) : 0;
  }
  return 0;
}

// The cost model the plan is built from (plan_model.h), the same on every rank: a calibration or
// tuning file that differs between ranks, or does not parse on one, is refused on every rank.
int agree_model(const shaddr_host &host, CostModel *model, std::string *why) {
  std::string my_why;
  const int my_err = model->load(&my_why);
  const uint64_t mine[2] = {my_err ? 1u : 0u, my_err ? 0 : model->hash()};
  std::vector<uint64_t> all(2 * static_cast<size_t>(host.size));
  if (int err = host.allgather(mine, all.data(), sizeof(mine), host.ctx)) {
    *why = "allgather of the cost model's hash failed";
    return err;
  }
  for (int r = 0; r < host.size; r++) {
    if (all[2 * r]) {
      *why = r == host.rank ? my_why
                            : "rank " + std::to_string(r) + " cannot read its cost model (its " +
                                  "calibration or SHADDR_TUNING_FILE)";
      return -EINVAL;
    }
    if (all[2 * r + 1] != all[1]) {
      *why = "rank " + std::to_string(r) + "'s cost model (its calibration and the lines of "
             "SHADDR_TUNING_FILE) differs from rank 0's: every rank must decide alike";
      return -EINVAL;
    }
  }
  return 0;
}

}  // namespace

Tuning Tuning::from_env(int nranks) {
  Tuning t{};
  t.l1 = cache_size(1);
  t.l2 = cache_size(2);
  t.l3 = cache_size(3);
  // Pipeline segments that fit the cache the copy streams through: readers copy the source
  // once, so a segment of half the L2 keeps source and destination lines resident
  // (docs/seed001-segmentation.md measures segment sizes here).
  const size_t l2 = t.l2 ? t.l2 : (512u << 10);
  const size_t l1 = t.l1 ? t.l1 : (32u << 10);
  // Values were checked by agree_settings() (declared ranges in settings_table.cc).
  SettingsReader in;
  t.chunk = std::max<size_t>(in.size("SHADDR_CHUNK", l2 / 2), 4096);
  t.reduce_unit = std::max<size_t>(in.size("SHADDR_REDUCE_UNIT", l1 / 2), 256);
  t.bcast_fifo_max = in.size("SHADDR_BCAST_FIFO_MAX", 16u << 10);
  t.slot_max = in.size("SHADDR_SLOT_MAX", slot_max_default(nranks));
  t.bcast_streams = static_cast<int>(in.size("SHADDR_BCAST_STREAMS", 4));
  t.bcast_streams_min = in.size("SHADDR_BCAST_STREAMS_MIN", 8u << 20);
  t.allgather_ring = in.choice("SHADDR_ALLGATHER_RING", 2);  // "0 1 auto"
  t.bcast_fifo_configured = in.is_set("SHADDR_BCAST_FIFO_MAX");
  t.slot_max_configured = in.is_set("SHADDR_SLOT_MAX");
  const bool all_set = in.is_set("SHADDR_MIN");
  const size_t all = in.size("SHADDR_MIN", 0);
  for (int coll = 0; coll < SHADDR_COLL_COUNT; coll++) {
    std::string name = "SHADDR_MIN_";
    for (const char *p = coll_name(static_cast<shaddr_coll>(coll)); *p; p++)
      name += static_cast<char>(std::toupper(static_cast<unsigned char>(*p)));
    t.min_set[coll] = coll != SHADDR_COLL_BARRIER && (all_set || in.is_set(name.c_str()));
    t.min_bytes[coll] = t.min_set[coll] ? in.size(name.c_str(), all) : 0;
  }
  t.plan_margin_pct = static_cast<int>(in.size("SHADDR_PLAN_MARGIN", 10));
  t.hier_segment = in.size("SHADDR_INTERPOSE_SEGMENT", 256u << 10);
  t.hier_mesh_max = in.size("SHADDR_INTERPOSE_MESH_MAX", 64);
  t.fail_inject = in.size("SHADDR_FAIL_INJECT", 0);
  t.fail_inject_rank =
      in.is_set("SHADDR_FAIL_INJECT_RANK")
          ? static_cast<int>(std::min<uint64_t>(in.size("SHADDR_FAIL_INJECT_RANK", 0), INT32_MAX))
          : -1;
  return t;
}

int Comm::create(const shaddr_host &host, std::unique_ptr<Comm> *out, std::string *why) {
  std::unique_ptr<Comm> c(new (std::nothrow) Comm);
  if (!c) return -ENOMEM;
  c->rank_ = host.rank;
  c->size_ = host.size;
  // First of all, before anything depends on them: settings that do not parse on some rank,
  // or that decide the protocol and differ between ranks, are refused by every rank.
  if (int err = agree_settings(SettingLayer::kLibrary, host.rank, host.size, host.allgather,
                               host.ctx, why))
    return err;
  c->tuning_ = Tuning::from_env(host.size);
  if (int err = agree_model(host, &c->model_, why)) return err;
  NodeBlockConfig cfg;
  // Like SHADDR_BACKEND, SHADDR_WAIT is the same on every rank: a bad value fails everywhere.
  if (int err = WaitPolicy::from_env(host.size, &cfg.wait, why)) return err;
  if (int err = select_backend(host, &c->backend_, &c->reason_)) {
    *why = c->reason_;
    return err;
  }
  // The control block's per-rank parts on their ranks' NUMA nodes where the ranks span several
  // (docs/topology.md, "Placement"); on a machine of one node no exchange and the dense layout.
  // The same locations group the ranks into the plan's levels (SHADDR_TOPOLOGY's, agreed).
  std::vector<RankLocation> locations;
  if (int err = gather_rank_locations(host, &locations, why)) return err;
  TopologyChoice choice;
  if (int err = topology_choice_from_env(&choice, why)) return err;
  if (!locations.empty()) c->levels_ = group_ranks(locations, choice.levels);
  c->levels_weighed_ = choice.automatic;
  NodePlacement placement;
  placement.node = rank_numa_nodes(locations, host.size);
  placement.active = placement_pays(placement.node);
  if (int err = NodeBlock::create(host, cfg, placement, &c->block_, why)) return err;
  // The plan decides the rest, the limits the rules turn at on this backend included.
  const shaddr_plan &plan = c->plan(SHADDR_FALLBACK_NONE);
  if (!plan.ranks) {
    *why = "libshaddr's plan could not be built for this node (SHADDR_VERBOSE=1 says why)";
    return -EINVAL;
  }
  c->pids_.resize(host.size);
  c->slot_closed_.assign(host.size, 0);
  const pid_t me = getpid();
  if (int err = host.allgather(&me, c->pids_.data(), sizeof(pid_t), host.ctx)) {
    *why = "allgather of process ids failed";
    return err;
  }
  if (verbose() && host.rank == 0)
    std::fprintf(stderr,
                 "shaddr: node communicator of %d ranks: backend %s; control block %s; "
                 "chunk %zu B, reduce unit %zu B, Bcast FIFO up to %zu B, slots up to "
                 "%zu B; waits: %s\n",
                 host.size, c->reason_.c_str(), c->block_->how(), c->tuning_.chunk,
                 c->tuning_.reduce_unit, plan.limits.bcast_fifo_max, plan.limits.slot_max,
                 cfg.wait.why);
  if (verbose() && host.rank == 0) {
    std::string nodes;
    for (int n : placement.node) nodes += (nodes.empty() ? "" : ",") + std::to_string(n);
    if (c->block_->placed())
      std::fprintf(stderr,
                   "shaddr: placement: each rank's lines, slots and FIFO on its NUMA node (ranks' "
                   "nodes %s), the Bcast FIFO on rank 0's; %s; mbind calls failed: %u%s%s\n",
                   nodes.c_str(), placement_method(), c->block_->placement_failures(),
                   c->block_->placement_failures() ? ", the first: " : "",
                   c->block_->placement_failures()
                       ? std::strerror(c->block_->placement_first_error())
                       : "");
    else if (machine_numa_nodes() < 2)
      std::fprintf(stderr, "shaddr: placement: none (one NUMA node: nothing read)\n");
    else
      std::fprintf(stderr,
                   "shaddr: placement: none, the ranks are not bound inside two or more NUMA "
                   "nodes (ranks' nodes %s; -1: not bound inside one)\n",
                   nodes.c_str());
  }
  if (verbose() && host.rank == 0) {
    const std::string text = plan_levels_text(plan);
    std::string groups;
    for (const LevelGroups &l : c->levels_.levels) {
      groups += std::string("; ") + level_name(l.level) + " groups";
      for (size_t g = 0; g < l.groups(); g++) {
        groups += " {";
        const char *sep = "";
        for (int r = 0; r < host.size; r++)
          if (l.group[static_cast<size_t>(r)] == static_cast<int>(g))
            groups += sep + std::to_string(r), sep = ",";
        groups += "}";
      }
    }
    std::string notes;
    if (!locations.empty() && !choice.levels) notes = "; SHADDR_TOPOLOGY=flat";
    for (const std::string &n : c->levels_.notes) notes += "; " + n;
    if (const std::string why = levels_weighing(*c, plan); !why.empty()) notes += "; " + why;
    std::fprintf(stderr, "shaddr: %s%s%s%s\n", text.c_str(), groups.c_str(),
                 locations.empty() ? "; one NUMA node: no location read" : "", notes.c_str());
  }
  if (verbose() && host.rank == 0 && !c->model_.calibration().empty())
    std::fprintf(stderr, "shaddr: calibration %s (%s)\n", c->model_.calibration().c_str(),
                 c->model_.calibration_date().empty() ? "no date in its header"
                                                      : c->model_.calibration_date().c_str());
  *out = std::move(c);
  return 0;
}

Comm::~Comm() = default;

bool Comm::peer_alive(int peer) {
  if (peer < 0 || peer >= size_) return true;
  if (kill(pids_[peer], 0) && errno == ESRCH) return false;
  // A zombie (e.g. a forked test rank whose parent is another rank) is dead too.
  std::ifstream stat("/proc/" + std::to_string(pids_[peer]) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;
  const size_t paren = line.rfind(')');  // the command name may hold spaces and parentheses
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  return line[paren + 2] != 'Z' && line[paren + 2] != 'X';
}

}  // namespace shaddr

using shaddr::Comm;
using shaddr::fail;

extern "C" {

SHADDR_API int shaddr_comm_create(const struct shaddr_host *host, shaddr_comm_t **out) {
  shaddr::clear_error();
  if (!host || !out) return fail(-EINVAL, "shaddr_comm_create: NULL argument");
  if (!host->allgather || !host->barrier)
    return fail(-EINVAL, "shaddr_comm_create: host callbacks missing");
  if (host->size < 1 || host->rank < 0 || host->rank >= host->size)
    return fail(-EINVAL, "shaddr_comm_create: rank " + std::to_string(host->rank) +
                             " of size " + std::to_string(host->size));
  std::unique_ptr<Comm> c;
  std::string why;
  if (int err = Comm::create(*host, &c, &why)) return fail(err, "shaddr_comm_create: " + why);
  *out = reinterpret_cast<shaddr_comm_t *>(c.release());
  return 0;
}

SHADDR_API int shaddr_comm_free(shaddr_comm_t *comm) {
  shaddr::clear_error();
  if (!comm) return 0;
  // Local: no peer reads this rank's memory once its own collectives have returned (those
  // that read a peer's buffer end with a closing barrier; the slots and FIFOs are in the
  // control block, which every rank maps for itself). A free that waited for the peers could
  // deadlock where a caller frees one communicator later on some rank than on another (MPICH
  // defers a communicator's free while an errored call still holds it).
  delete shaddr::from_handle(comm);
  return 0;
}

SHADDR_API int shaddr_comm_rank(const shaddr_comm_t *comm) {
  shaddr::clear_error();
  if (int err = shaddr::check_comm(comm)) return err;
  return shaddr::from_handle(comm)->rank();
}

SHADDR_API int shaddr_comm_size(const shaddr_comm_t *comm) {
  shaddr::clear_error();
  if (int err = shaddr::check_comm(comm)) return err;
  return shaddr::from_handle(comm)->size();
}

SHADDR_API const char *shaddr_comm_backend(const shaddr_comm_t *comm) {
  if (!comm) return "";
  return const_cast<Comm *>(shaddr::from_handle(comm))->backend().name();
}

SHADDR_API int shaddr_comm_get_stats(const shaddr_comm_t *comm, struct shaddr_comm_stats *st) {
  shaddr::clear_error();
  if (int err = shaddr::check_comm(comm)) return err;
  if (!st) return fail(-EINVAL, "shaddr_comm_get_stats: NULL stats");
  Comm *c = const_cast<Comm *>(shaddr::from_handle(comm));
  *st = c->stats();
  std::vector<const shaddr::RegCacheStats *> seen;  // a backend may share one cache
  for (int p = 0; p < c->size(); p++) {
    const shaddr::RegCacheStats *cs = c->backend().cache_stats(p);
    if (!cs || std::find(seen.begin(), seen.end(), cs) != seen.end()) continue;
    seen.push_back(cs);
    st->cache_hits += cs->hits;
    st->cache_misses += cs->misses;
    st->cache_evictions += cs->evictions;
    st->cache_refusals += cs->refusals;
    st->bytes_mapped += cs->bytes_mapped;
  }
  if (const shaddr::HeapStats *hs = c->backend().heap_stats()) {
    st->heap_transfers = hs->transfers;
    st->heap_bytes = hs->bytes;
    st->heap_exposures = hs->exposures;
    st->heap_peers = hs->peers;
  }
  return 0;
}

}  // extern "C"
