# SPDX-License-Identifier: MIT
"""shaddr-bench-multihost: its launch commands, the reading of a job's results and of the plan's
piece size, and the model of stock against shaddr's hierarchy."""
import json
import os
import stat

import pytest

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
    stock, hier = multihost.model("reduce", s, H, P, NET, MEM, bw, sync, g, 262144)
    lead = costs.two_copy_model("reduce", H, s, 50.0, 0.01, g)
    assert stock == lead + costs.two_copy_model("reduce", P, s, 1.0, 0.0002, g)
    assert hier == (sync + (P - 1) * s / bw) + lead
    # Alltoall: the leaders exchange each host's P x P blocks; two node phases.
    stock, hier = multihost.model("alltoall", s, H, P, NET, MEM, bw, sync, g, 262144)
    lead = costs.two_copy_model("alltoall", H, P * P * s, 50.0, 0.01, g)
    assert hier == (2 * sync + 2 * (P - 1) * H * P * s / bw) + lead


def test_bcast_pipelines_the_leaders_pieces_into_the_node():
    H, P, s, bw, sync, g = 2, 4, 1 << 20, 10000.0, 2.0, 0.0001
    node = sync + (P - 1) * s / bw
    lead = costs.two_copy_model("bcast", H, s, 50.0, 0.01, g)
    # The pieces are the plan's: 4 of 256 KiB, 16 of 64 KiB, one where a piece holds it all.
    for segment, pieces in ((256 << 10, 4), (64 << 10, 16), (4 << 20, 1)):
        _, hier = multihost.model("bcast", s, H, P, NET, MEM, bw, sync, g, segment)
        assert hier == max(node, lead) + min(node, lead) / pieces
    # One host: no leaders' phase, stock is the node's own algorithm.
    stock, hier = multihost.model("bcast", 8, 1, P, NET, MEM, bw, sync, g, 262144)
    assert stock == costs.two_copy_model("bcast", P, 8, 1.0, 0.0002, g)
    assert hier == sync + (P - 1) * 8 / bw


def test_the_piece_size_is_read_from_the_plan(tmp_path):
    # A stand-in for build/tools/shaddr-info that answers --plan=<mpi> with its JSON, the piece
    # size differing per MPI so that the argument is seen to be passed on.
    tool = tmp_path / "tools" / "shaddr-info"
    tool.parent.mkdir()
    tool.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        "seg = {'--plan=mpich': 65536, '--plan=openmpi': 131072}[sys.argv[1]]\n"
        "print(json.dumps({'fallback': sys.argv[1][7:], 'ranks': 1, 'backend': 'cma',\n"
        "                  'limits': {'slot_max': 16384, 'bcast_fifo_max': 262144,\n"
        "                             'hier_segment': seg, 'hier_mesh_max': 64}}))\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    assert multihost.hier_segment(str(tmp_path), "mpich") == 65536
    assert multihost.hier_segment(str(tmp_path), "openmpi") == 131072


def test_the_real_plan_gives_the_setting(monkeypatch):
    # build/tools/shaddr-info itself (ctest names the build in SHADDR_BUILD; run by hand, the
    # worktree's build/ where it is built): the plan's hier_segment follows
    # SHADDR_INTERPOSE_SEGMENT as the interposer's does.
    build = os.environ.get("SHADDR_BUILD")
    if not build:
        build = os.path.join(os.path.dirname(__file__), "..", "..", "..", "build")
        if not os.access(os.path.join(build, "tools", "shaddr-info"), os.X_OK):
            pytest.skip("build/tools/shaddr-info not built")
    monkeypatch.setenv("SHADDR_INTERPOSE_SEGMENT", "64K")
    monkeypatch.setenv("SHADDR_CALIBRATION", "off")
    assert multihost.hier_segment(build, "mpich") == 65536
    monkeypatch.delenv("SHADDR_INTERPOSE_SEGMENT")
    assert multihost.hier_segment(build, "openmpi") == 256 << 10
