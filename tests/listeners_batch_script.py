"""A batch-mode user script (``hpcgpu run``, ``python -m hpcgpu.mpi``): writes the
scheduler's report and every socket that the processes of its job listen on (those whose
environment holds the job's ``SLURM_JOB_ID``, or the test's ``HPCGPU_TEST_MARKER``), for
tests/integration/test_listeners.py. Arguments: the output file, the workers to wait for,
and ``--runner`` for ``hpcgpu.GPURunner`` on every rank (``srun``)."""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hpcgpu  # noqa: E402
from batchtools import processes_with  # noqa: E402
from listeners import listening, with_descendants  # noqa: E402

def write(client, path: str, workers: int) -> None:
    client.wait_for_workers(workers)
    info = client.scheduler_info(n_workers=-1)
    name = "HPCGPU_TEST_MARKER" if "HPCGPU_TEST_MARKER" in os.environ else "SLURM_JOB_ID"
    pids = with_descendants([pid for pid, _ in processes_with(f"{name}={os.environ[name]}")])
    with open(path, "w") as handle:
        json.dump({"info": info, "sockets": listening(pids | {os.getpid()})}, handle, default=str)
    client.close()


if __name__ == "__main__":
    if "--runner" in sys.argv:  # every rank runs this: rank 0 the block, the others a worker
        with hpcgpu.GPURunner(scheduler_file=sys.argv[1] + ".scheduler-{job_id}.json") as runner:
            write(runner.get_client(), sys.argv[1], int(sys.argv[2]))
    else:
        write(hpcgpu.get_client(), sys.argv[1], int(sys.argv[2]))
