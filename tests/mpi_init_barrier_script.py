"""Run by tests/integration/test_batch_ranks.py on each rank of ``srun --mpi=pmix`` over two
fake nodes (one host): when did this rank enter and leave ``MPI_Init``?

``python mpi_init_barrier_script.py SHARED_DIRECTORY WAIT``: the ranks of node 0 enter at once
and, once out, leave a file in SHARED_DIRECTORY; the ranks of node 1 enter when such a file
exists, or after WAIT seconds. With a barrier that holds, node 0 cannot leave before node 1
entered (they enter after WAIT s); with one that does not, node 1 enters after node 0 left.
Each rank prints one JSON line: rank, node, enter and leave (``time.time()``).
"""

import json
import os
import sys
import time
from pathlib import Path


def main(shared: Path, wait: float) -> None:
    node = int(os.environ["SLURM_NODEID"])
    if node == 1:
        deadline = time.monotonic() + wait
        while not any(shared.glob("left-*")) and time.monotonic() < deadline:
            time.sleep(0.01)
    enter = time.time()
    from mpi4py import MPI  # MPI_Init

    leave = time.time()
    rank = MPI.COMM_WORLD.Get_rank()
    if node == 0:
        (shared / f"left-{rank}").touch()
    print(json.dumps({"rank": rank, "node": node, "enter": enter, "leave": leave}), flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), float(sys.argv[2]))
