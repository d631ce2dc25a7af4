"""One SLURMCluster worker in a rootless podman container; run by scripts/container-podman as
its non-root user, with that user's virtual environment. Exits non-zero on any failure.

Usage: python container_podman_app.py IMAGE BIND...
"""

import os
import sys
import time

import dask.array as da
from distributed import Client

from hpcgpu import SLURMCluster
from hpcgpu.system.pymain import SAFE_MAIN


def inside() -> dict:
    """Where the task runs: PID 1 of a container's PID namespace is the worker's own command."""
    return {"pid1": open("/proc/1/cmdline").read().split("\0")[:3], "uid": os.getuid(),
            "slurm_job": os.environ.get("SLURM_JOB_ID"), "cwd": os.getcwd()}


def main(image: str, binds: list[str]) -> None:
    start = time.monotonic()
    container = {"runtime": "podman", "image": image, "gpus": False, "binds": binds}
    cluster = SLURMCluster(gpus_per_node=1, walltime="00:10:00", container=container,
                           python=sys.executable, scheduler_options={"dashboard_address": "localhost:0"})
    try:
        print(cluster.job_script(), flush=True)
        cluster.scale(jobs=1)
        cluster.wait_for_workers(1, timeout=180)
        print(f"worker joined after {time.monotonic() - start:.1f} s", flush=True)
        with Client(cluster) as client:
            where = client.submit(inside, pure=False).result(timeout=60)
            total = float((da.ones((2000, 2000), chunks=500) + 1).sum().compute())
        print("in the worker:", where)
        print("sum:", total)
        assert where["pid1"][:4] == [sys.executable, "-c", SAFE_MAIN, "hpcgpu.worker"], where
        assert where["uid"] == os.getuid() and where["slurm_job"], where
        assert total == 8_000_000.0
        assert not cluster.versions.problems, cluster.versions.problems
    finally:
        cluster.close()
    print(f"ok: the worker ran in a podman container and computed ({time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
