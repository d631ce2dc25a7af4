"""A script that ends with its cluster still open (#43 item 4): ``cluster.scale(...)`` as its
last line, as many examples end. The cluster closes before the interpreter shuts down, as
``cluster.close()`` would: exit code 0, no traceback on stderr (none of "cannot schedule new
futures after interpreter shutdown", none of workers' closed streams), and no job of the
script left in the queue. Against the real local SLURM and Grid Engine, and LocalGPUCluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from conftest import ROOT

SCRIPTS = {
    "local": "from hpcgpu import LocalGPUCluster\n"
             "if __name__ == '__main__':\n"
             "    cluster = LocalGPUCluster(n_workers=1)\n"
             "    cluster.scale(2)\n",
    "slurm": "from hpcgpu import SLURMCluster\n"
             "cluster = SLURMCluster(gpus_per_node=1, walltime='00:10:00', job_name='{name}')\n"
             "cluster.scale(gpus=2)\n",
    "sge": "from hpcgpu import SGECluster\n"
           "cluster = SGECluster(gpus_per_node=1, walltime='00:10:00', job_name='{name}')\n"
           "cluster.scale(gpus=2)\n",
}


def _left(kind: str, name: str) -> str:
    if kind == "slurm":
        argv = ["squeue", "-h", "-n", name, "-o", "%i %T"]
    elif kind == "sge":
        argv = ["bash", "-c", f"qstat -u '*' -r | grep -B1 'Full jobname: *{name}$' || true"]
    else:
        return ""
    return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout.strip()


@pytest.mark.parametrize("kind", [pytest.param("local"),
                                  pytest.param("slurm", marks=pytest.mark.slurm),
                                  pytest.param("sge", marks=pytest.mark.sge)])
def test_a_script_ending_right_after_scale_closes_its_cluster_cleanly(kind, request, tmp_path):
    if kind != "local":
        request.getfixturevalue(kind)
    name = f"end{uuid.uuid4().hex[:6]}"
    script = tmp_path / "script.py"
    script.write_text(SCRIPTS[kind].format(name=name))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    assert not _left(kind, name), f"jobs of the script left in the queue: {_left(kind, name)}"
