"""A user's script for the one-graph tests: the same hpcgpu.array expression, computed with
the client's default settings and with ``fuse-width`` set in the client, and the tasks that
ran each time, written as JSON.

    python one_graph_script.py OUT.json SCHEDULER_ADDRESS   # a plain distributed.Client
    hpcgpu run one_graph_script.py OUT.json                 # hpcgpu.get_client()
    mpirun -n 3 python -m hpcgpu.mpi one_graph_script.py OUT.json
"""

from __future__ import annotations

import json
import sys

import dask
from dask.utils import key_split
from distributed import get_task_stream

import hpcgpu.array as ha


def expression():
    """400 generated blocks, elementwise, sliced and summed: fused to a few dozen tasks."""
    x = ha.random.normal(10, 1, size=(2000, 2000), chunks=(100, 100), seed=0, backend="cpu")
    return (x + 1)[::2, ::2].sum()


def tasks_that_ran(client, width=None) -> dict:
    """How many tasks ran and of which kinds (key prefixes), and the value."""
    settings = {} if width is None else {"hpcgpu.array.fuse-width": width}
    with dask.config.set(settings), get_task_stream(client) as stream:
        value = float(client.compute(expression()).result())
    return {"tasks": len(stream.data), "kinds": sorted({key_split(t["key"]) for t in stream.data}), "value": value}


def record(client, path: str) -> None:
    client.wait_for_workers(2)
    with open(path, "w") as handle:
        json.dump({"workers": len(client.scheduler_info()["workers"]),
                   "default": tasks_that_ran(client), "width 8": tasks_that_ran(client, 8)}, handle)


if __name__ == "__main__":
    if len(sys.argv) > 2:
        from distributed import Client

        with Client(sys.argv[2]) as plain:
            record(plain, sys.argv[1])
    else:
        import hpcgpu

        record(hpcgpu.get_client(), sys.argv[1])
