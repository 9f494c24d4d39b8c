# SPDX-License-Identifier: MIT
"""Flat vs hierarchical collectives on machines this project cannot run on: A MODEL, NOT A
MEASUREMENT (docs/topology.md, "Predicted"; issue 54).

Inputs: the synthetic hwloc machines of tests/unit/topology/, grouped as libshaddr groups them
(`build/tools/shaddr-info --topology FILE --cpus LIST --json`: ranks bound one per core, rank i
on the first thread of core i), and per-level bandwidths and latencies with their sources
(topology_links.json, "assumption" where no source gave one).

Every algorithm is a set of single copies, flows (src rank, dst rank, bytes as a multiple of
the message size S): the reader (dst) copies. Its time is the busiest resource's bytes over its
bandwidth, the stages pipelined in chunks (as the counter Bcast is today):

  T(S) = max over resources (bytes / bandwidth) + (stages - 1) * min(S, chunk) / core
         + sum over stages (stage_us + the stage's worst crossing latency
                            + fanout_us * (readers of one writer - 1))

Resources: each reader's core (core_copy_gbs); the package link per direction between two
packages; a NUMA node's path to the others in its package, out and in (numa_link_gbs, where
given); an L3 domain's link out and in (l3_link_gbs, where given: EPYC's CCD to IO die); and
a NUMA node's memory, for both the source's reads and the reader's writes, only where S does
not fit the source's (or reader's) shared cache (hwloc's L3, or shared L2, size). Not modelled:
cache-to-cache forwarding on the far side of a link (a line one remote reader fetched may
serve the next: flat's link load is then an upper bound), DRAM and cache contention beyond
the bandwidths named, prefetching, frequency.

Algorithms, root 0 (which leads every group it is in), levels as group_ranks() keeps them:
  bcast      flat: every rank reads S from the root. hierarchical: each rank reads S from its
             parent, the leader of its finest group (or of the next coarser group where it
             leads that one), the root at the top.
  reduce     flat: reduce-scatter (each rank reduces S/n from every rank), then the root reads
             the n-1 slices. hierarchical: libshaddr's chain (coll_reduce.cc level_reduce()):
             the ranks cut into runs of consecutive ranks in one domain of the coarsest level,
             each of n slices folded by one rank of each run in turn (it reads its run's other
             operands and the previous run's partial), then the root reads each slice from the
             last run's rank that holds it; none where the chain crosses the level more often
             than the flat reads do (chain_pays()).
  allreduce  flat: reduce-scatter, then every rank reads every slice. hierarchical: the chain,
             then each slice read from its holder by the holder's group, and by one relay of
             every other group (the group's ranks in turn), whose group reads it there.
  allgather  flat: every rank reads every other rank's S. hierarchical (the finest level):
             each block crosses into each other finest domain once (read by one of its ranks,
             in turn), and that domain's ranks read it from there.
"""
import json
import os
import subprocess
from dataclasses import dataclass, field


HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
LINKS = os.path.join(HERE, "topology_links.json")
XML_DIR = os.path.join(TOP, "tests", "unit", "topology")
COLLS = ["bcast", "reduce", "allreduce", "allgather"]
SIZES = [8 << 10, 64 << 10, 1 << 20, 16 << 20]
RANKS = [32, 48, 64, 96, 128, 192]
LEVELS = ["package", "numa", "l3", "l2"]


def load_links(path=LINKS):
    with open(path) as f:
        return json.load(f)


def value(entry):
    """A figure of topology_links.json ({"value", "source"}), or None where it has none."""
    return None if entry is None else entry.get("value")


def parse_cpulist(text):
    """"0-3,8" -> {0, 1, 2, 3, 8} (sysfs's cpulist grammar, as shaddr-info prints it)."""
    out = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def topology_info(build, xml, cpus):
    """`shaddr-info --topology XML --cpus CPUS --json`'s object."""
    exe = os.path.join(build, "tools", "shaddr-info")
    p = subprocess.run([exe, "--topology", xml, "--cpus", cpus, "--json"], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, SHADDR_TOPOLOGY="auto"))
    if p.returncode:
        raise RuntimeError(f"{exe} --topology {xml} --json: exit {p.returncode}: "
                           f"{p.stderr.strip()[-300:]}")
    return json.loads(p.stdout)


@dataclass
class Node:
    """n ranks on one machine: where each is (per level, the index of its domain; -1 where the
    machine lacks the level), the shared cache of each rank's domain, and the grouping."""
    n: int
    where: dict                 # level -> [domain index per rank]
    cache: list                 # bytes of the shared cache (L3, else shared L2) per rank
    levels: list                # grouping levels, coarse to fine: {"level", "group", "leader"}
    notes: list = field(default_factory=list)

    def describe(self):
        """"package 2x96, numa 8x24": each level, its groups and their sizes ("2x8/24": sizes
        8 and 24); "flat" without levels."""
        out = []
        for lv in self.levels:
            sizes = sorted({len(m) for m in groups_of(lv).values()})
            out.append(f"{'='.join([lv['level']] + lv['same_as'])} {len(lv['leader'])}x"
                       + "/".join(map(str, sizes)))
        return ", ".join(out) or "flat"


def node_from_info(info):
    """A Node from shaddr-info's JSON (with its grouping)."""
    cpus = info["rank_cpus"]
    where, caches = {}, [0] * len(cpus)
    for lvl in LEVELS:
        doms = [parse_cpulist(d["cpus"]) for d in info["levels"].get(lvl, [])]
        idx = []
        for r, c in enumerate(cpus):
            i = next((k for k, d in enumerate(doms) if c in d), -1)
            idx.append(i)
            if i >= 0 and lvl in ("l3", "l2") and not caches[r]:
                caches[r] = info["levels"][lvl][i]["cache_bytes"]
        where[lvl] = idx
    g = info.get("grouping") or {"levels": [], "notes": []}
    return Node(len(cpus), where, caches, g["levels"], g["notes"])


# --- the algorithms as flows --------------------------------------------------------------


def groups_of(level):
    """{group: [ranks]} of one grouping level, ranks in order (the leader first)."""
    out = {}
    for r, g in enumerate(level["group"]):
        out.setdefault(g, []).append(r)
    return out


def parent(node, r):
    """A rank's parent in the hierarchical Bcast: the leader of its finest group that it does
    not lead itself, else the root. Leaders are their groups' lowest ranks, so the root (rank
    0) leads every group it is in."""
    for lv in reversed(node.levels):
        leader = lv["leader"][lv["group"][r]]
        if leader != r:
            return leader
    return 0


def bcast_tree(node):
    """[(parent, rank)] by depth: stages[k] = the copies at depth k+1 below the root."""
    depth = {0: 0}
    par = {r: parent(node, r) for r in range(1, node.n)}

    def d(r):
        if r not in depth:
            depth[r] = d(par[r]) + 1
        return depth[r]
    stages = {}
    for r in range(1, node.n):
        stages.setdefault(d(r), []).append((par[r], r, 1.0))
    return [stages[k] for k in sorted(stages)]


def flat_flows(node, coll):
    n = node.n
    ranks = range(n)
    if coll == "bcast":
        return [[(0, r, 1.0) for r in ranks if r]]
    rs = [(j, i, 1.0 / n) for i in ranks for j in ranks if i != j]
    if coll == "reduce":
        return [rs, [(i, 0, 1.0 / n) for i in ranks if i]]
    if coll == "allreduce":
        return [rs, [(i, j, 1.0 / n) for i in ranks for j in ranks if i != j]]
    if coll == "allgather":
        return [[(j, i, 1.0) for i in ranks for j in ranks if i != j]]
    raise ValueError(coll)


def finest_group_of(node, r):
    """The ranks of @r's finest group (in order, the leader first)."""
    lv = node.levels[-1]
    return groups_of(lv)[lv["group"][r]]


def chain_runs(node):
    """The runs of consecutive ranks in one group of the coarsest level."""
    top = node.levels[0]["group"]
    runs = []
    for r in range(node.n):
        if r and top[r] == top[r - 1]:
            runs[-1].append(r)
        else:
            runs.append([r])
    return runs


def chain_pays(node):
    """libshaddr's reduce_chain_pays(): the chain crosses between domains (runs - 1 times a
    slice) less than the flat reduction reads across (each rank's slice from every rank outside
    its domain)."""
    top = node.levels[0]["group"]
    n = node.n
    flat = sum(n - top.count(g) for g in top)
    return n <= 255 and (len(chain_runs(node)) - 1) * n < flat


def chain_phases(node, coll):
    """Reduce (to rank 0) or Allreduce down the chain of the coarsest level's runs, in the
    library's slices at large sizes (8 a rank, at most 120 per rank of the smallest run or
    group), each a fraction of S; a phase's flows between the same two ranks summed."""
    n = node.n
    runs = chain_runs(node)
    groups = groups_of(node.levels[0])
    smallest = min([len(r) for r in runs] + [len(m) for m in groups.values()])
    p = min(8 * n, 120 * smallest)
    fold, holders = {}, []

    def add(phase, s, d):
        phase[(s, d)] = phase.get((s, d), 0.0) + 1.0 / p
    for t in range(p):
        prev = None
        for run in runs:
            f = run[t % len(run)]
            for x in run:
                if x != f:
                    add(fold, x, f)
            if prev is not None:
                add(fold, prev, f)
            prev = f
        holders.append(prev)
    flows = lambda phase: [(s, d, c) for (s, d), c in phase.items()]  # noqa: E731
    if coll == "reduce":
        out = {}
        for h in holders:
            if h:
                add(out, h, 0)
        return [flows(fold), flows(out)]
    last = node.levels[0]["group"][runs[-1][0]]
    relay, local = {}, {}
    for g, mates in groups.items():
        for t, h in enumerate(holders):
            src = h if g == last else mates[t % len(mates)]
            if src != h:
                add(relay, h, src)
            for r in mates:
                if r != src:
                    add(local, src, r)
    return [flows(fold), flows(relay), flows(local)]


def hier_flows(node, coll):
    if coll == "bcast":
        return bcast_tree(node)
    if coll in ("reduce", "allreduce"):
        return chain_phases(node, coll) if chain_pays(node) else None
    if coll == "allgather":
        # At the finest level: a block read once into each finest domain also crosses each
        # coarser boundary at most once per finest domain.
        doms = groups_of(node.levels[-1])
        cross, local = [], []
        for d, dm in doms.items():
            turn = 0
            for e, em in doms.items():
                if e == d:
                    continue
                for x in em:
                    reader = dm[turn % len(dm)]
                    turn += 1
                    cross.append((x, reader, 1.0))
                    local += [(reader, y, 1.0) for y in dm if y != reader]
            local += [(x, y, 1.0) for x in dm for y in dm if x != y]
        return [cross, local]
    raise ValueError(coll)


# --- cost -------------------------------------------------------------------------------


def crossing(node, s, d):
    """The coarsest level a copy from rank @s to rank @d crosses: package, numa, l3 or local."""
    for lvl in ("package", "numa", "l3"):
        w = node.where[lvl]
        if w[s] >= 0 and w[s] != w[d]:
            return lvl
    return "local"


RESOURCE_NAMES = {"core": "core copy", "link": "package link", "numa": "NUMA path",
                  "l3": "L3 domain link", "mem": "memory"}


def loads(node, phases):
    """Per resource, the bytes (as multiples of S) all phases move through it: {(kind, id):
    (coefficient, coefficient where S must come from or go to memory)}."""
    out = {}

    def add(key, c):
        out[key] = out.get(key, 0.0) + c
    pk, nu, l3 = node.where["package"], node.where["numa"], node.where["l3"]
    for phase in phases:
        for s, d, c in phase:
            add(("core", d), c)
            if pk[s] != pk[d]:
                add(("link", (pk[s], pk[d])), c)
            elif nu[s] != nu[d]:
                add(("numa", ("out", nu[s])), c)
                add(("numa", ("in", nu[d])), c)
            if l3[s] >= 0 and l3[s] != l3[d]:
                add(("l3", ("out", l3[s])), c)
                add(("l3", ("in", l3[d])), c)
            add(("memsrc", (nu[s], s)), c)
            add(("memdst", (nu[d], d)), c)
    return out


def cost(node, phases, size, links, common):
    """T(@size) in us of one algorithm (its @phases) and its bottleneck's name."""
    m = links
    core = value(m["core_copy_gbs"]) * 1e3  # bytes/us
    bw = {"core": core, "link": _bw(m, "package_link_gbs"), "numa": _bw(m, "numa_link_gbs"),
          "l3": _bw(m, "l3_link_gbs"), "mem": _bw(m, "numa_memory_gbs")}
    busy = {}
    mem = {}
    for (kind, key), c in loads(node, phases).items():
        if kind in ("memsrc", "memdst"):
            numa, rank = key
            if size > node.cache[rank]:  # not served by (or kept in) the shared cache
                mem[numa] = mem.get(numa, 0.0) + c
            continue
        if bw[kind]:
            t = c * size / bw[kind]
            busy[kind] = max(busy.get(kind, 0.0), t)
    if bw["mem"]:
        for c in mem.values():
            busy["mem"] = max(busy.get("mem", 0.0), c * size / bw["mem"])
    kind, t = max(busy.items(), key=lambda kv: kv[1])
    chunk = value(common["chunk_bytes"])
    lat = value(common["latency_us"])
    t += (len(phases) - 1) * min(size, chunk) / core
    for phase in phases:
        readers = {}
        for s, d, _ in phase:
            readers[s] = readers.get(s, 0) + 1
        t += (value(common["stage_us"]) + max(lat[crossing(node, s, d)] for s, d, _ in phase)
              + value(common["fanout_us"]) * (max(readers.values()) - 1))
    return t, RESOURCE_NAMES[kind]


def _bw(m, key):
    v = value(m.get(key))
    return v * 1e3 if v else None


def predict_node(node, links, common, colls=COLLS, sizes=SIZES):
    """[{coll, bytes, flat_us, flat_by, hier_us, hier_by, pick}] for one Node; hierarchical is
    None where the grouping is flat (nothing to build a hierarchy from) and for a reduction
    whose chain does not pay (libshaddr keeps it flat there)."""
    out = []
    for coll in colls:
        flat = flat_flows(node, coll)
        hier = hier_flows(node, coll) if node.levels else None
        for s in sizes:
            ft, fb = cost(node, flat, s, links, common)
            row = {"coll": coll, "bytes": s, "flat_us": ft, "flat_by": fb,
                   "hier_us": None, "hier_by": None, "pick": "flat"}
            if hier:
                ht, hb = cost(node, hier, s, links, common)
                row.update(hier_us=ht, hier_by=hb, pick="hierarchical" if ht < ft else "flat")
            out.append(row)
    return out


def predict_all(build, links=None, machines=None):
    """The model's table for every machine of topology_links.json that has an XML here:
    {"machines": [{name, key, sources, ranks: [{n, grouping, rows}]}], "common", "published",
    "label"}; {"error": why} when shaddr-info cannot say."""
    links = links or load_links()
    common = links["common"]
    out = {"label": "model, not measured", "common": common, "published": links["published"],
           "machines": []}
    for key, m in links["machines"].items():
        if machines and key not in machines:
            continue
        xml = os.path.join(XML_DIR, key + ".xml")
        cores = m["cores"]  # the XML's cores; its CPUs may be threads
        try:
            per = []
            for n in [r for r in RANKS if r <= cores] or [cores]:
                node = node_from_info(topology_info(build, xml, f"0-{n - 1}"))
                per.append({"n": n, "grouping": node.describe(),
                            "rows": predict_node(node, m, common)})
        except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as e:
            return {"error": str(e)}
        inputs = {k: v for k, v in m.items() if k not in ("name", "cores")}
        out["machines"].append({"key": key, "name": m["name"], "cores": cores, "ranks": per,
                                "sources": inputs})
    return out


def lookup(tm, machine, n, coll, size):
    """One row of predict_all()'s table, or None."""
    for m in tm.get("machines", []):
        if m["key"] != machine:
            continue
        for r in m["ranks"]:
            if r["n"] != n:
                continue
            for row in r["rows"]:
                if row["coll"] == coll and row["bytes"] == size:
                    return row
    return None
