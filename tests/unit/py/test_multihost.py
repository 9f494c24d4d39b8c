# SPDX-License-Identifier: MIT
"""shaddr-bench-multihost: its launch commands, the reading of a job's results and the model
of stock against shaddr's hierarchy."""
import json

from shaddr_bench import costs, multihost

NET = {"alpha_us": 50.0, "beta_us_per_byte": 0.01}
MEM = {"alpha_us": 1.0, "beta_us_per_byte": 0.0002}


def test_launchers_place_per_ranks_on_each_test_host():
    cmd = multihost.launcher("mpich", 2, 3, ["UCX_TLS"])
    assert cmd[:3] == ["mpiexec.mpich", "-hosts", "shaddr-h1:3,shaddr-h2:3"]
    assert cmd[-2:] == ["-n", "6"] and multihost.RSH in cmd
    cmd = multihost.launcher("openmpi", 3, 2, ["UCX_TLS", "SHADDR_MIN"])
    assert cmd[:5] == ["mpiexec.openmpi", "--host", "shaddr-h1:2,shaddr-h2:2,shaddr-h3:2",
                       "-n", "6"]
    assert cmd[-4:] == ["-x", "UCX_TLS", "-x", "SHADDR_MIN"]


def test_a_job_is_complete_when_its_json_reads(tmp_path):
    p = tmp_path / "job.json"
    assert not multihost.complete(str(p))
    p.write_text('{"results": [')  # still being written
    assert not multihost.complete(str(p))
    doc = {"results": [{"coll": "bcast", "bytes": 8, "t_max_us": 3.0},
                       {"coll": "reduce", "bytes": 8, "t_max_us": 4.0}]}
    p.write_text(json.dumps(doc))
    assert multihost.complete(str(p))
    assert multihost.rows(doc, "bcast") == {8: 3.0} and multihost.rows(None, "bcast") == {}


def test_the_model_adds_the_leaders_and_the_node_phases():
    H, P, s, bw, sync, g = 2, 4, 4096, 10000.0, 2.0, 0.0001
    stock, hier = multihost.model("reduce", s, H, P, NET, MEM, bw, sync, g)
    lead = costs.two_copy_model("reduce", H, s, 50.0, 0.01, g)
    assert stock == lead + costs.two_copy_model("reduce", P, s, 1.0, 0.0002, g)
    assert hier == (sync + (P - 1) * s / bw) + lead
    # Alltoall: the leaders exchange each host's P x P blocks; two node phases.
    stock, hier = multihost.model("alltoall", s, H, P, NET, MEM, bw, sync, g)
    lead = costs.two_copy_model("alltoall", H, P * P * s, 50.0, 0.01, g)
    assert hier == (2 * sync + 2 * (P - 1) * H * P * s / bw) + lead


def test_bcast_pipelines_the_leaders_pieces_into_the_node():
    H, P, s, bw, sync, g = 2, 4, 4 * multihost.SEGMENT, 10000.0, 2.0, 0.0001
    _, hier = multihost.model("bcast", s, H, P, NET, MEM, bw, sync, g)
    node = sync + (P - 1) * s / bw
    lead = costs.two_copy_model("bcast", H, s, 50.0, 0.01, g)
    assert hier == max(node, lead) + min(node, lead) / 4
    # One host: no leaders' phase, stock is the node's own algorithm.
    stock, hier = multihost.model("bcast", 8, 1, P, NET, MEM, bw, sync, g)
    assert stock == costs.two_copy_model("bcast", P, 8, 1.0, 0.0002, g)
    assert hier == sync + (P - 1) * 8 / bw
