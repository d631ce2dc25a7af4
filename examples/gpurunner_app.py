"""A script launched on every rank that becomes a Dask cluster: ``hpcgpu.GPURunner``.

    srun --nodes=2 --ntasks-per-node=4 --gpus-per-task=1 python examples/gpurunner_app.py

Rank 0 runs this client code, the scheduler and a worker on its own GPU; every other rank
runs a worker on its GPU. All ranks exit with the code the ``with`` block ends with.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import hpcgpu

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_gpu_workers import report, run_checks  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--scheduler-file", default="hpcgpu-scheduler-{job_id}.json")
parser.add_argument("--json", default=None)
parser.add_argument("--exit-code", type=int, default=None)
ns = parser.parse_args()

with hpcgpu.GPURunner(scheduler_file=ns.scheduler_file) as runner:
    client = runner.get_client()  # waits for one worker per rank
    result = run_checks(client, runner.world_size)
    report(result, ns.json)
    client.close()
    if ns.exit_code is not None:
        sys.exit(ns.exit_code)
    if not all(result["checks"].values()):
        sys.exit(1)
