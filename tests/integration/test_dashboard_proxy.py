"""A dashboard through a real Jupyter server's jupyter-server-proxy under a hub-like prefix
(#43 item 9): ``dashboard_link`` with JupyterHub's kind of template names the proxy's path,
an HTTP GET of that path returns the dashboard's page, and a headless Chromium renders it
there while a computation runs (its websocket through the proxy too). The Jupyter server starts once
(module fixture, a few seconds); skipped only where jupyter-server-proxy is not installed.
The proxy reaches ``localhost`` of its own host: a batch job's dashboard, on a compute
node's loopback, is out of its reach (docs/batch.md)."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

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



@pytest.fixture
def artifacts():
    """Where a test keeps what a person may want to look at after the run (a screenshot):
    ``$HPCGPU_TEST_ARTIFACTS``, else ``.artifacts/`` in the checkout (ignored by git)."""
    folder = Path(os.environ.get("HPCGPU_TEST_ARTIFACTS") or Path(__file__).parents[2] / ".artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _proxied(page) -> list[dict]:
    return [s for s in page.websockets().values() if BASE + "proxy/" in s["url"]]


def test_the_dashboard_through_the_proxy_in_a_real_browser(jupyter, monkeypatch, artifacts):
    """Chromium, headless, opens the proxy's link while a computation runs: the Bokeh
    document's roots render, its websocket connects through the proxy and keeps receiving
    the plots' updates, and the console has no error. The screenshot is kept."""
    from distributed import Client

    import cdp

    executable = cdp.browser()
    if executable is None:  # scripts/test installs Debian's chromium: under CI it must be there
        assert not os.environ.get("CI"), "scripts/test did not install chromium"
        pytest.skip("needs Chromium (apt-get install chromium)")
    url, token = jupyter
    monkeypatch.setenv("USER", "hubuser")

    async def visit(link):
        page = await cdp.Page.open(devtools)
        try:
            await page.send("Emulation.setDeviceMetricsOverride", width=1280, height=900,
                            deviceScaleFactor=1, mobile=False)
            await page.send("Page.navigate", url=f"{url}{link}?token={token}")
            roots = await page.wait_for(
                "window.Bokeh && Bokeh.documents.length && Bokeh.documents[0].roots().length", 60)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and sum(s["received"] for s in _proxied(page)) < 3:
                await asyncio.sleep(0.2)
            shot = await page.screenshot(artifacts / "dashboard-through-proxy.png")
            return roots, _proxied(page), page.errors(), shot
        finally:
            page.close()

    with dask.config.set({"distributed.dashboard.link": "/user/{USER}/proxy/{port}/status"}), \
            LocalGPUCluster(n_workers=1, gpus=[], threads_per_worker=2) as cluster, Client(cluster) as client, \
            cdp.started(executable) as devtools:
        work = client.map(time.sleep, [0.05] * 600, pure=False)  # runs while the page loads
        roots, sockets, errors, shot = asyncio.run(visit(cluster.dashboard_link))
        client.cancel(work)
    assert roots, "the Bokeh document has no roots"
    assert sockets and all(s["error"] is None and not s["closed"] for s in sockets), sockets
    assert sum(s["received"] for s in sockets) >= 3, sockets  # the document and its updates
    assert errors == [], errors
    assert shot.stat().st_size > 10_000  # a rendered page, not a blank one
