#!/usr/bin/env python3
"""Stands in for ``python -m distributed.cli.dask_scheduler`` in the fast race tests: says
its (made-up) address where ``hpcgpu run`` listens for it, then waits to be stopped."""

import json
import os
import signal
import sys

ADDRESS = "tls://127.0.0.1:4242"

if __name__ == "__main__":
    info = json.dumps({"address": ADDRESS, "services": {}}).encode()
    fd = os.environ.get("HPCGPU_ADDRESS_FD")
    if fd:
        os.write(int(fd), info)
        os.close(int(fd))
    sys.stdin.close()
    signal.pause()
