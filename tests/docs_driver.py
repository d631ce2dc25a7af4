"""Run one Python block of the docs, then close the Dask clients and clusters it left open.

A block runs as a notebook cell would (``__name__ == "__main__"``); worker processes started
with ``spawn`` import this driver again, not the block. A block ends where a reader would go
on working (``cluster.adapt(...)``): the test closes what it made, so that no job stays in
the shared queue. That is the only thing added to the block.
"""

import sys


def main(path: str) -> None:
    namespace = {"__name__": "__main__", "__file__": path}
    with open(path, encoding="utf-8") as file:
        code = compile(file.read(), path, "exec")
    try:
        exec(code, namespace)
    finally:
        from distributed import Client
        from distributed.deploy.cluster import Cluster

        for value in list(namespace.values()):
            if isinstance(value, Client):
                value.close()
        for value in list(namespace.values()):
            if isinstance(value, Cluster):
                value.close()


if __name__ == "__main__":
    main(sys.argv[1])
