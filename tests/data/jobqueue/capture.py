"""Capture dask-jobqueue's own job scripts for the cases in cases.json (run once, by hand).

    HOME=$(mktemp -d) python tests/data/jobqueue/capture.py

Writes <case>.sh next to this file: what dask-jobqueue 0.9 renders, with the scheduler
address and the Python executable replaced by placeholders. tests/unit/test_jobqueue_api.py
compares hpcgpu's scripts for the same arguments with these files.
"""

import json
import sys
from pathlib import Path

HERE = Path(__file__).parent


def normalise(script: str, address: str) -> str:
    return script.replace(address, "SCHEDULER").replace(sys.executable, "PYTHON")


def main() -> None:
    # Imported here: importing dask_jobqueue writes ~/.config/dask/jobqueue.yaml (run this
    # with a temporary HOME), and pytest imports this file when it collects doctests.
    import dask_jobqueue

    classes = {"slurm": dask_jobqueue.SLURMCluster, "pbs": dask_jobqueue.PBSCluster,
               "lsf": dask_jobqueue.LSFCluster, "sge": dask_jobqueue.SGECluster}
    cases = json.loads((HERE / "cases.json").read_text())
    for name, case in cases.items():
        options = dict(case["options"], scheduler_options={"dashboard_address": ":0"})
        with classes[case["scheduler"]](**options) as cluster:
            text = normalise(cluster.job_script(), cluster.scheduler.address)
        (HERE / f"{name}.sh").write_text(text)
    print(dask_jobqueue.__version__, "->", len(cases), "scripts")


if __name__ == "__main__":
    main()
