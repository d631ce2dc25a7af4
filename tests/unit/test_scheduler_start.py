"""A scheduler that does not start is reported by its cause (busy port, bad UCX transport)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import traceback

import pytest

from hpcgpu import SLURMCluster


def _failure(tmp_path, **options) -> str:
    with pytest.raises(RuntimeError) as caught:
        SLURMCluster(gpus_per_node=1, log_directory=str(tmp_path), **options)
    text = "".join(traceback.format_exception(caught.value))
    assert "AttributeError" not in text and "_pools" not in text, text
    return str(caught.value)


def test_a_busy_scheduler_port_is_named_with_its_cause(tmp_path):
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        message = _failure(tmp_path, scheduler_options={"port": port})
    assert message.startswith("the Dask scheduler did not start: OSError: [Errno 98] Address already in use")
    assert f"'port': {port}" in message


def test_a_ucx_transport_that_is_not_there_is_named_with_its_cause(tmp_path):
    """In a fresh interpreter: UCX reads its configuration once per process, and tests that
    run before this one in the same process (pytest-xdist) may have started it already."""
    pytest.importorskip("distributed_ucxx")
    code = ("from hpcgpu import SLURMCluster\n"
            "try:\n"
            f"    SLURMCluster(gpus_per_node=1, log_directory={str(tmp_path)!r}, protocol='ucx',\n"
            "                 ucx_environment={'UCX_TLS': 'nonsense'})\n"
            "except RuntimeError as error:\n"
            "    print('MESSAGE: ' + str(error))\n")
    # nor the UCX variables an earlier test in this process left in its environment
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_", "DASK_DISTRIBUTED_UCXX"))}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert "AttributeError" not in done.stderr and "_pools" not in done.stderr, done.stderr[-3000:]
    message = done.stdout.partition("MESSAGE: ")[2].strip()
    assert message.startswith("the Dask scheduler did not start: UCXXNoDeviceError"), done.stdout + done.stderr[-3000:]
    assert "ucx_environment={'UCX_TLS': 'nonsense'}" in message
