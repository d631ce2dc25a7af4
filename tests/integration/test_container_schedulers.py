"""Workers in a container image, on the real local SLURM, Grid Engine and OpenPBS, through
a stand-in ``apptainer``.

Apptainer cannot be installed on these machines (no Debian 12 package, no download from
its releases), so tests/shims/container/apptainer stands in for it: it checks what hpcgpu
rendered (``exec``, ``--nv``, the image, every path the worker command names inside a
``--bind`` path) and runs the command on the host. The job scripts, the schedulers, their
launchers and the workers are real. docs/containers.md says what this does not verify.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time

import pytest
from distributed import Client

from batchtools import ROOT, job_output, slurm_finished
from cluster_helpers import FAST, SHIMS, check_failing_job_reported
from conftest import wait_for
from hpcgpu import PBSCluster, SGECluster, SLURMCluster

#: The image's own packages: another hpcgpu than the client's
IMAGE_SITE = '''import importlib.metadata as m
_version = m.version
m.version = lambda name: "0.0.0+image" if name == "hpcgpu" else _version(name)
'''


@pytest.fixture
def image(slurm, tmp_path, monkeypatch):
    """A stand-in image, the shim first on the jobs' PATH (sbatch passes the environment)."""
    path = tmp_path / "hpcgpu.sif"
    path.write_text("stand-in image\n")
    site = tmp_path / "image-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(IMAGE_SITE)
    monkeypatch.setenv("PATH", f"{SHIMS / 'container'}:{os.environ['PATH']}")
    monkeypatch.setenv("HPCGPU_SHIM_LOG", str(tmp_path / "shim.log"))
    monkeypatch.setenv("HPCGPU_SHIM_SITE", str(site))
    return path


@pytest.mark.slurm
def test_worker_in_container_computes_and_other_versions_are_reported(image, clusters, tmp_path, caplog):
    data = tmp_path / "data"
    data.mkdir()
    cluster = clusters(SLURMCluster, **FAST, gpus_per_node=1, python=sys.executable,
                       container={"image": str(image), "binds": [str(data)]})
    with caplog.at_level(logging.WARNING, logger="hpcgpu.cluster"):
        cluster.scale(jobs=1)
        cluster.wait_for_workers(1, timeout=120)
        # the client is told of the image's hpcgpu as the worker joins: within seconds
        joined = time.monotonic()
        wait_for(lambda: cluster.versions.problems, timeout=5)
        assert time.monotonic() - joined < 5
        with Client(cluster) as client:
            # a function of the worker's own os.environ (a bound os.environ.get would carry the client's)
            where = client.submit(lambda: os.environ.get("HPCGPU_IN_CONTAINER"), pure=False).result(timeout=30)
            assert client.submit(sum, range(10)).result(timeout=30) == 45
        assert where == str(image)  # the worker ran in the "image"
    (message,) = cluster.versions.problems.values()
    client_version = cluster.versions.mine["hpcgpu"]
    assert f"hpcgpu 0.0.0+image (client {client_version})" in message
    assert "dask" not in message.split(": install")[0]  # dask and distributed match
    assert message in caplog.text
    calls = (tmp_path / "shim.log").read_text().splitlines()
    # the job's python check, then srun's worker task: both in the image, with --nv and the binds
    assert len(calls) == 2 and all(c.startswith("nv=1 binds=") for c in calls), calls
    binds = calls[1].split()[1].removeprefix("binds=").split(",")
    assert binds[0] == str(data) and str(tmp_path / "logs") in binds
    assert "runpy._run_module_as_main(sys.argv.pop(1)) hpcgpu.worker" in calls[1]  # SAFE_MAIN, not -m


@pytest.mark.slurm
def test_image_without_hpcgpu_ends_the_job_saying_so(image, clusters):
    cluster = clusters(SLURMCluster, **FAST, gpus_per_node=1, python="/nonexistent/bin/python3",
                       max_failed_jobs=1, container=str(image))
    check_failing_job_reported(cluster, within=60)
    (job,) = cluster.jobs
    assert job.exit_code == 2, job.stderr_tail
    assert f"image {image} on " in job.stderr_tail and "install hpcgpu in the image" in job.stderr_tail


#: The batch job's own script: where its workers run, and a sum computed there
BATCH_SCRIPT = '''import json, os, sys
import hpcgpu
with hpcgpu.get_client() as client:
    where = client.run(lambda: os.environ.get("HPCGPU_IN_CONTAINER"))
    total = client.submit(sum, range(10)).result()
json.dump({"where": sorted(set(where.values())), "total": total}, open(sys.argv[1], "w"))
'''


@pytest.mark.slurm
def test_batch_mode_starts_the_workers_in_the_container(slurm, tmp_path, monkeypatch):
    image = tmp_path / "hpcgpu.sif"
    image.write_text("stand-in image\n")
    (tmp_path / "user.py").write_text(BATCH_SCRIPT)
    monkeypatch.setenv("PATH", f"{SHIMS / 'container'}:{os.environ['PATH']}")
    monkeypatch.setenv("HPCGPU_SHIM_LOG", str(tmp_path / "shim.log"))
    site = tmp_path / "image-site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(IMAGE_SITE)
    monkeypatch.setenv("HPCGPU_SHIM_SITE", str(site))
    # jobscripts/slurm-2x4.sbatch as users submit it, shrunk to one GPU by sbatch's options
    done = subprocess.run(
        ["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=1", "--gpus-per-node=1",
         "--cpus-per-task=1", "--mem=2G", "--time=5", "--job-name=hpcgpu-batch-test",
         f"--chdir={tmp_path}", f"--output={tmp_path}/%j.out", f"--error={tmp_path}/%j.err",
         f"--export=ALL,HPCGPU_PYTHON={sys.executable},XDG_CACHE_HOME={tmp_path}/cache",
         str(ROOT / "jobscripts" / "slurm-2x4.sbatch"), "--container", str(image),
         "--container-python", sys.executable, str(tmp_path / "user.py"), str(tmp_path / "result.json")],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    state = wait_for(lambda: slurm_finished(job_id), 120, 0.5, what=f"job {job_id}")
    assert state == ("COMPLETED", "0:0"), job_output(tmp_path, f"{job_id}.*")[-4000:]
    assert json.loads((tmp_path / "result.json").read_text()) == {"where": [str(image)], "total": 45}
    # hpcgpu run names the image's other hpcgpu in the job's log once the worker is there
    assert re.search(r"worker '.*' at \S+ runs other versions than this client: hpcgpu 0\.0\.0\+image "
                     r"\(client ", job_output(tmp_path, f"{job_id}.*"))
    (call,) = (tmp_path / "shim.log").read_text().splitlines()  # srun's one task: the workers
    binds = call.split()[1].removeprefix("binds=").split(",")
    tls = call.split("--tls-cert ")[1].split()[0]
    assert call.startswith("nv=1 ") and any(tls.startswith(b + "/") for b in binds), call


def check_in_container(cls, clusters, tmp_path, **options) -> None:
    """One worker of ``cls`` in the stand-in image computes. Grid Engine and PBS pass no
    environment to the job: the prologue puts the runtime on PATH, as a site's
    ``module load apptainer`` does."""
    image = tmp_path / "hpcgpu.sif"
    image.write_text("stand-in image\n")
    log = tmp_path / "shim.log"
    cluster = clusters(cls, **FAST, gpus_per_node=1, python=sys.executable, container=str(image),
                       job_script_prologue=[f"export PATH={SHIMS / 'container'}:$PATH HPCGPU_SHIM_LOG={log}"],
                       **options)
    cluster.scale(jobs=1)
    cluster.wait_for_workers(1, timeout=120)
    with Client(cluster) as client:
        where = client.submit(lambda: os.environ.get("HPCGPU_IN_CONTAINER"), pure=False).result(timeout=30)
        assert client.submit(sum, range(10)).result(timeout=30) == 45
    assert where == str(image)
    calls = log.read_text().splitlines()
    assert len(calls) == 2 and all(c.startswith("nv=1 binds=") for c in calls), calls


@pytest.mark.sge
def test_sge_worker_in_container_computes(sge, clusters, tmp_path):
    check_in_container(SGECluster, clusters, tmp_path, profile="sge-gpu")


@pytest.mark.pbs
def test_pbs_worker_in_container_computes(pbs, clusters, tmp_path):  # pbs first: PATH undone last
    check_in_container(PBSCluster, clusters, tmp_path)
