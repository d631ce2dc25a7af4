"""A dashboard through a real Jupyter server's jupyter-server-proxy under a hub-like prefix
(#43 item 9): ``dashboard_link`` with JupyterHub's kind of template names the proxy's path,
and an HTTP GET of that path returns the dashboard's page. The Jupyter server starts once
(module fixture, a few seconds); skipped only where jupyter-server-proxy is not installed.
The proxy reaches ``localhost`` of its own host: a batch job's dashboard, on a compute
node's loopback, is out of its reach (docs/batch.md)."""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import dask.config
import pytest

pytest.importorskip("jupyter_server_proxy")

from hpcgpu import LocalGPUCluster  # noqa: E402

BASE = "/user/hubuser/"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return response.status, response.read().decode("utf-8", "replace")


@pytest.fixture(scope="module")
def jupyter(tmp_path_factory):
    """(base URL, token) of a Jupyter server on 127.0.0.1 under ``/user/hubuser/``."""
    port, token = _free_port(), secrets.token_hex(16)
    argv = [sys.executable, "-m", "jupyter_server", "--no-browser", "--allow-root",
            f"--ServerApp.port={port}", "--ServerApp.ip=127.0.0.1", f"--ServerApp.base_url={BASE}",
            f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={tmp_path_factory.mktemp('jupyter')}",
            # enabled here, not by the file pip puts in its installation's etc/jupyter, which a
            # virtual environment with the system's site-packages does not read
            "--ServerApp.jpserver_extensions=jupyter_server_proxy=True"]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if _get(f"{url}{BASE}api/status", token)[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()[-3000:]
            time.sleep(0.2)
        yield url, token
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_dashboard_link_is_the_proxys_path_and_serves_the_dashboard(jupyter, monkeypatch):
    url, token = jupyter
    monkeypatch.setenv("USER", "hubuser")
    with dask.config.set({"distributed.dashboard.link": "/user/{USER}/proxy/{port}/status"}), \
            LocalGPUCluster(n_workers=0, gpus=[]) as cluster:
        link = cluster.dashboard_link
        port = cluster.scheduler_info["services"]["dashboard"]
        assert link == f"/user/hubuser/proxy/{port}/status", link
        status, page = _get(url + link, token)
    # the status page of this scheduler, its Bokeh document included
    assert status == 200 and "<title>Dask Diagnostic UI</title>" in page and "Bokeh" in page, page[:500]
