"""The dashboard line of ``hpcgpu run``, ``hpcgpu.mpi`` and ``GPURunner`` (#43 item 9): the link
as dask's ``distributed.dashboard.link`` template makes it, the same function as cluster and
local mode's ``dashboard_link``; for a dashboard on this node's loopback, the ssh tunnel too.
The three modes' real logs: tests/unit/test_batch_logs.py, tests/integration/test_batch_slurm.py."""

from __future__ import annotations

import dask.config
import pytest

from hpcgpu.cluster.batch.network import dashboard_link as cluster_dashboard_link
from hpcgpu.network.dashboard import dashboard_link
from hpcgpu.runner.dashboard import dashboard_message, scheduler_dashboard_message

HUB = "/user/{USER}/proxy/{port}/status"


@pytest.fixture
def hub(monkeypatch):
    monkeypatch.setenv("USER", "hubuser")
    with dask.config.set({"distributed.dashboard.link": HUB}):
        yield


def test_a_loopback_dashboard_gives_the_templates_link_and_the_tunnel(hub):
    said = dashboard_message("127.0.0.1:8787", 8790, "node3")
    assert said.startswith("dashboard: /user/hubuser/proxy/8790/status on node3 (this node only")
    assert said.endswith("ssh -L 8790:localhost:8790 node3, then open http://localhost:8790/status")


def test_a_dashboard_on_every_interface_gives_the_templates_link(hub):
    assert dashboard_message(":8787", 8790, "node3") == (
        "dashboard: /user/hubuser/proxy/8790/status (every interface of node3, no password)")
    with dask.config.set({"distributed.dashboard.link": "{scheme}://{host}:{port}/status"}):
        assert dashboard_message("10.0.0.5:8787", 8790, "node3") == (
            "dashboard: http://10.0.0.5:8790/status (on 10.0.0.5 of node3, no password)")


def test_the_modes_share_one_link_implementation(hub):
    info = {"services": {"dashboard": 8790}}
    assert cluster_dashboard_link is dashboard_link
    assert dashboard_link(info, "tls://10.0.0.5:8786", "localhost:8787") == "/user/hubuser/proxy/8790/status"

    class Scheduler:  # GPURunner's and hpcgpu.mpi's in-process scheduler
        class http_server:
            port = 8790

    assert scheduler_dashboard_message(Scheduler, "127.0.0.1:8787").startswith(
        "dashboard: /user/hubuser/proxy/8790/status on ")
    assert scheduler_dashboard_message(Scheduler, None) is None


def test_a_template_naming_an_unset_variable_does_not_end_the_run(monkeypatch):
    monkeypatch.delenv("NOT_SET_HERE", raising=False)
    with dask.config.set({"distributed.dashboard.link": "/user/{NOT_SET_HERE}/proxy/{port}/status"}):
        said = dashboard_message("127.0.0.1:8787", 8790, "node3")
    assert said.startswith("dashboard: http://localhost:8790/status (distributed.dashboard.link: KeyError")
    assert "ssh -L 8790:localhost:8790 node3" in said
