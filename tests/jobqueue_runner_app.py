"""A batch script written for dask-jobqueue's SLURMRunner, with only the import changed.

    srun -n 3 python tests/jobqueue_runner_app.py <scheduler-file-template> <out.json> <form>

``form``: ``argument`` passes ``scheduler_file=``; ``options`` passes it in
``scheduler_options`` and ``worker_options``, as SLURMRunner also accepts.
"""

import json
import sys

from dask.distributed import Client

from hpcgpu.system.workers import scheduler_workers
from hpcgpu import SLURMRunner  # was: from dask_jobqueue.slurm import SLURMRunner

if __name__ == "__main__":  # (pytest imports this file for its doctests)
    template, out, form = sys.argv[1:4]
    if form == "argument":
        kwargs = {"scheduler_file": template,
                  "scheduler_options": {"dashboard_address": ":0"}}
    else:
        kwargs = {"scheduler_file": None,
                  "scheduler_options": {"scheduler_file": template, "dashboard_address": ":0"},
                  "worker_options": {"scheduler_file": template}}

    with SLURMRunner(**kwargs) as runner:
        with Client(runner) as client:
            client.wait_for_workers(runner.n_workers, timeout=120)
            result = client.submit(lambda x: x + 1, 10).result()
            workers = len(scheduler_workers(client))
            with open(out, "w") as file:
                json.dump({"result": result, "workers": workers, "n_workers": runner.n_workers,
                           "address": runner.scheduler_address,
                           "scheduler_file": str(runner.scheduler_file)}, file)
