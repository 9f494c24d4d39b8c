# SPDX-License-Identifier: MIT
"""The topology model (tools/shaddr_bench/topomodel.py): flat vs hierarchical on the synthetic
machines, from shaddr-info's grouping (--topology --json) and topology_links.json, and its
section of make run's report. A model, checked for what it must say, not against a machine."""
import copy
import os

import pytest
from shaddr_bench import goals, report, topomodel

BUILD = os.environ.get("SHADDR_BUILD", os.path.join(topomodel.TOP, "build"))
INFO = os.path.join(BUILD, "tools", "shaddr-info")
needs_info = pytest.mark.skipif(not os.access(INFO, os.X_OK),
                                reason=f"{INFO} not built (make userspace)")
MIB = 1 << 20


def info(packages, per_package, numa_per_package=1, l3_per_numa=1, l3_bytes=32 * MIB):
    """shaddr-info's JSON for ranks on every core of a made-up machine, grouped as group_ranks()
    would (levels that split the ranks alike folded into the coarser)."""
    n = packages * per_package
    per_numa = per_package // numa_per_package
    per_l3 = per_numa // l3_per_numa

    def doms(size, cache=0):
        return [{"os_index": i, "cpus": f"{i * size}-{(i + 1) * size - 1}", "cache_bytes": cache}
                for i in range(n // size)]
    levels = {"package": doms(per_package), "numa": doms(per_numa),
              "l3": doms(per_l3, l3_bytes), "l2": []}
    grouping = []
    seen = set()
    for lvl, size in (("package", per_package), ("numa", per_numa), ("l3", per_l3)):
        if size == n or size in seen:
            continue
        seen.add(size)
        grouping.append({"level": lvl, "same_as": [], "group": [r // size for r in range(n)],
                         "leader": list(range(0, n, size)), "domain": list(range(0, n, size))})
    return {"source": "test", "cpus": f"0-{n - 1}", "levels": levels,
            "rank_cpus": list(range(n)), "grouping": {"levels": grouping, "notes": []}}


def links():
    return topomodel.load_links()


def icelake(**change):
    m = copy.deepcopy(links()["machines"]["icelake-2s-48c"])
    for k, v in change.items():
        m[k]["value"] = v
    return m


def row(node, machine, coll, size):
    return next(r for r in topomodel.predict_node(node, machine, links()["common"], [coll], [size]))


def test_every_figure_names_its_source():
    data = links()
    for key, m in data["machines"].items():
        assert os.path.exists(os.path.join(topomodel.XML_DIR, key + ".xml")), key
        for k, v in m.items():
            if k not in ("name", "cores"):
                assert v["source"].strip(), (key, k)
                assert v["value"] is None or v["value"] > 0, (key, k)
    for v in data["common"].values():
        assert v["source"].strip()
    assert all(p["source"] for p in data["published"])


def test_link_bound_bcast_goes_hierarchical_and_a_fast_link_keeps_it_flat():
    node = topomodel.node_from_info(info(2, 24))  # Ice Lake's shape: 2 packages of 24
    r = row(node, icelake(), "bcast", MIB)
    assert r["flat_by"] == "package link"
    assert r["pick"] == "hierarchical" and r["hier_us"] < r["flat_us"] / 2
    # A link as fast as every reader's core together: nothing to save, one stage less to pay.
    r = row(node, icelake(package_link_gbs=24 * 10), "bcast", MIB)
    assert r["flat_by"] == "core copy" and r["pick"] == "flat"


def test_one_domain_is_flat():
    node = topomodel.node_from_info(info(1, 8))
    assert node.levels == [] and node.describe() == "flat"
    for r in topomodel.predict_node(node, links()["machines"]["laptop-8c"], links()["common"]):
        assert r["pick"] == "flat" and r["hier_us"] is None


def test_monotone_in_size_ranks_and_bandwidth():
    common = links()["common"]
    for coll in topomodel.COLLS:
        node = topomodel.node_from_info(info(2, 24))
        rows = topomodel.predict_node(node, icelake(), common, [coll])
        for a, b in zip(rows, rows[1:]):
            assert b["flat_us"] >= a["flat_us"] and b["hier_us"] >= a["hier_us"], coll
        # More ranks on the far side of the link: flat never gets faster.
        times = [row(topomodel.node_from_info(info(2, k)), icelake(), coll, MIB)["flat_us"]
                 for k in (4, 8, 16, 24)]
        assert times == sorted(times), (coll, times)
        # A faster link or faster cores never make either algorithm slower.
        base = row(node, icelake(), coll, MIB)
        for faster in (icelake(package_link_gbs=134.4), icelake(core_copy_gbs=20)):
            r = row(node, faster, coll, MIB)
            assert r["flat_us"] <= base["flat_us"] and r["hier_us"] <= base["hier_us"], coll


def test_allgather_reads_across_a_domain_once():
    node = topomodel.node_from_info(info(2, 4))
    flows = topomodel.hier_flows(node, "allgather")
    pk = node.where["package"]
    crossing = [(s, d) for phase in flows for s, d, _ in phase if pk[s] != pk[d]]
    # Each of the 8 blocks crosses into the other package once; flat: 4 readers each.
    assert len(crossing) == 8 and len({s for s, _ in crossing}) == 8
    flat = [(s, d) for phase in topomodel.flat_flows(node, "allgather")
            for s, d, _ in phase if pk[s] != pk[d]]
    assert len(flat) == 32
    # Every rank still copies every other rank's block once: 7 blocks of S.
    got = [0.0] * 8
    for phase in flows:
        for _, d, c in phase:
            got[d] += c
    assert got == [7.0] * 8


def test_the_bcast_tree_reaches_every_rank_once():
    node = topomodel.node_from_info(info(2, 24, numa_per_package=2, l3_per_numa=3))
    stages = topomodel.bcast_tree(node)
    readers = [d for st in stages for _, d, _ in st]
    # root -> the far package's leader -> NUMA leaders -> L3 leaders -> the rest
    assert sorted(readers) == list(range(1, 48)) and len(stages) == 4
    # The far package is fed by one read across the link.
    pk = node.where["package"]
    assert sum(1 for st in stages for s, d, _ in st if pk[s] != pk[d]) == 1


@pytest.fixture(scope="module")
def table():
    if not os.access(INFO, os.X_OK):
        pytest.skip(f"{INFO} not built (make userspace)")
    return topomodel.predict_all(BUILD)


@needs_info
def test_shaddr_info_json_groups_the_epyc_as_the_docs_say():
    tm = topomodel.topology_info(BUILD, os.path.join(topomodel.XML_DIR, "epyc9654-2s-nps4.xml"),
                                 "0-191")
    node = topomodel.node_from_info(tm)
    assert node.describe() == "package 2x96, numa 8x24, l3 24x8"
    assert node.cache[0] == 32 * MIB


@needs_info
def test_the_machines_table(table):
    assert "error" not in table and table["label"] == "model, not measured"
    keys = {m["key"]: m for m in table["machines"]}
    assert [r["n"] for r in keys["epyc9654-2s-nps4"]["ranks"]] == topomodel.RANKS
    assert [r["n"] for r in keys["icelake-2s-48c"]["ranks"]] == [32, 48]
    assert [r["n"] for r in keys["laptop-8c"]["ranks"]] == [8]
    xhc = topomodel.lookup(table, "icelake-2s-48c", 48, "bcast", MIB)
    assert xhc["pick"] == "hierarchical" and xhc["flat_by"] == "package link"
    assert all(r["pick"] == "flat" for r in keys["laptop-8c"]["ranks"][0]["rows"])
    big = topomodel.lookup(table, "epyc9654-2s-nps4", 192, "bcast", MIB)
    assert big["pick"] == "hierarchical"


@needs_info
def test_report_section_and_published_figures(table):
    md = "\n".join(report.topology_model_md(table))
    assert "model, not measured" in md and "predicted, not measured" in md
    assert "| bcast | 1 MiB |" in md and "192 ranks" in md
    assert "UPI" in md and "assumption" in md  # the inputs' sources
    g = goals.predicted_vs_published(table)[0]
    assert g.met is None and g.where == "model, not measured"
    flat, hier, flat64, hier64, acoll = g.rows
    assert flat[1] == "bcast 1 MiB, 48 ranks, icelake-2s-48c"
    assert flat[2] == "166.5 (flat)" and hier[2] == "167.9 (hierarchical)"
    assert "package link" in flat[3] and "core copy" in flat[4]
    # Each published time against the model's time for the same algorithm.
    row = topomodel.lookup(table, "icelake-2s-48c", 48, "bcast", MIB)
    assert flat[5] == f"{166.5 / row['flat_us']:.2f}" and hier[5] == f"{167.9 / row['hier_us']:.2f}"
    assert "ICX-48_xhc_vanilla_flat_16K.txt" in flat[-1] and "64 KiB" in flat64[1]
    assert acoll[2] == "none published" and "#12484" in acoll[-1]


def test_report_section_without_a_model():
    assert "Not computed in this run." in "\n".join(report.topology_model_md(None))
    md = "\n".join(report.topology_model_md({"error": "shaddr-info: no such file"}))
    assert "Not computed: shaddr-info: no such file." in md
    assert goals.predicted_vs_published({"error": "x"}) == []


def test_a_missing_shaddr_info_is_an_error_not_a_table(tmp_path):
    assert "error" in topomodel.predict_all(str(tmp_path), machines=["laptop-8c"])


@needs_info
def test_make_runs_report_carries_the_section(table, tmp_path, monkeypatch):
    """report.report() on a fabricated results.json document (two contenders, no guest): the
    model's section is in report.md, after the measured parts, labelled as a model."""
    import synth
    monkeypatch.setattr(report, "plots", lambda *a, **k: [])  # not what is tested; slow
    doc = {"date": "2026-12-02T14:00:00", "host": "h", "cpu": "c", "cores": 2, "ranks": 2,
           "sizes": "8:4M", "short": True, "seconds": 1.0, "kernel": "k", "rounds": 1,
           "copy_limit": synth.copy_limit(), "node_bw": {}, "model": {},
           "contenders": {"mpich": synth.contender(lambda c, s: 2.0 + s / 5000),
                          "interposer-mpich": synth.contender(lambda c, s: 1.0 + s / 9000)},
           "topology_model": table}
    report.report(doc, str(tmp_path))
    md = (tmp_path / "report.md").read_text()
    head = "## Flat vs hierarchical on bigger machines — **model, not measured**"
    assert head in md and md.index(head) > md.index("## Latency, max over ranks")
    assert "| Open MPI coll/xhc, flat (coll_xhc_hierarchy=flat) | bcast 1 MiB, 48 ranks" in md
    del doc["topology_model"]  # an older results.json
    report.report(doc, str(tmp_path))
    assert "Not computed in this run." in (tmp_path / "report.md").read_text()
