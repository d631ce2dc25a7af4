"""The collective plane across the site in a box's hosts (NumPy blocks, the cluster's own
TLS comm): the result checked, and a compute host's link cut during a collective gives a
clear error within seconds, naming the operation and the silent rank: no hang, no wrong
result (docs/collections.md, docs/performance.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from site_faults import cut_link, restore_link
from site_helpers import APP, FAST, PYTHON, ROOT, assert_nothing_left, site  # noqa: F401

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]


def test_the_plane_across_hosts_and_a_link_cut_mid_collective(tmp_path):
    options = {**FAST, "log_directory": str(tmp_path / "logs"), "interface": "ib0", "gpus_per_node": 1,
               "exclusive": True, "_scale": {"jobs": 2}, "_workers": 2,
               "job_script_prologue": ["export DASK_HPCGPU__ARRAY__PLANE__TIMEOUT=2"]}
    env = {**os.environ, "DASK_HPCGPU__ARRAY__PLANE__TIMEOUT": "2"}
    run = subprocess.Popen(["bash", str(ROOT / "scripts" / "site-exec"), "login", PYTHON, str(APP), "plane",
                            json.dumps(options)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    try:
        ready = json.loads(run.stdout.readline() or "{}")
        assert sorted(ready.get("ready", {}).values()) == ["node1", "node2"], run.stderr.read()[-5000:]
        host = ready["cut"]
        cut_link(host)
        try:
            run.stdin.write("cut\n")
            run.stdin.flush()
            failed = json.loads(run.stdout.readline() or "{}")
        finally:
            restore_link(host)
        out, err = run.communicate("back\n", timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
    result = json.loads((out.strip().splitlines() or ["{}"])[-1] or "{}")
    assert result.get("first") is True and result["holders"] == ["node1", "node2"], (result, err[-5000:])
    assert set(result["paths"].values()) == {"comm"}, result
    assert set(map(str, result["timeouts"].values())) == {"2"}, result
    assert re.search(r"collective rechunk \w+ failed on .*(no data from rank|sending to rank)",
                     failed["failed"] or ""), failed
    assert result["seconds"] < 10, result
    assert_nothing_left(60)
