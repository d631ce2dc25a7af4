"""``cluster.dashboard_link`` names the address the dashboard listens on, and it answers."""

from __future__ import annotations

import urllib.request

import pytest

from cluster_helpers import FAST
from hpcgpu import SLURMCluster

pytestmark = pytest.mark.slurm


def _get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status


def test_the_default_link_is_localhost_and_answers(slurm, clusters):
    cluster = clusters(SLURMCluster, gpus_per_node=1, **FAST)
    link = cluster.dashboard_link
    assert link.startswith("http://localhost:") and link.endswith("/status"), link
    assert _get(link) == 200
    # what upstream would name, the scheduler's own address, is refused by this dashboard
    upstream = link.replace("localhost", cluster.scheduler_address.split("://")[1].rsplit(":", 1)[0])
    with pytest.raises(OSError):
        _get(upstream)


def test_a_dashboard_on_all_interfaces_is_named_by_the_scheduler_host(slurm, clusters):
    options = dict(FAST, scheduler_options={"dashboard_address": ":0"})
    cluster = clusters(SLURMCluster, gpus_per_node=1, **options)
    host = cluster.scheduler_address.split("://")[1].rsplit(":", 1)[0]
    assert cluster.dashboard_link.startswith(f"http://{host}:")
    assert _get(cluster.dashboard_link) == 200
