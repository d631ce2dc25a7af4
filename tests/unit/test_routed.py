"""The batch scheduler's address where no interface is named: Dask's own where this host has a
route out, else the route toward the job's other hosts (hpcgpu.network.routed)."""

from __future__ import annotations

import os
import sys

from hpcgpu.network.routed import scheduler_host
from hpcgpu.runner.scheduler import SchedulerOptions, start_scheduler

ROUTES = {"node2.cluster": "10.78.0.11", "node3": "10.77.0.11", "node1": "10.77.0.10"}


def test_a_route_out_leaves_the_choice_to_dask():
    assert scheduler_host(["node1", "node2"], own="node1", toward={"8.8.8.8": "192.0.2.2", **ROUTES}.get) is None


def test_without_a_route_out_the_route_to_the_first_other_host_that_resolves():
    asked = []

    def toward(host):
        asked.append(host)
        return ROUTES.get(host)

    # this host's own name, short or not, comes last; a name that does not resolve is passed over
    assert scheduler_host(["node1", "gone", "node2.cluster"], own="node1.cluster", toward=toward) == "10.78.0.11"
    assert asked == ["8.8.8.8", "gone", "node2.cluster"]


def test_alone_the_route_to_its_own_name_and_none_where_nothing_resolves():
    assert scheduler_host(["node1"], own="node1", toward=ROUTES.get) == "10.77.0.10"
    assert scheduler_host([], own="node1", toward=ROUTES.get) == "10.77.0.10"
    assert scheduler_host(["gone"], own="lost", toward=ROUTES.get) is None


def test_the_scheduler_listens_on_the_host_given_and_an_interface_comes_first():
    child, info = start_scheduler(sys.executable, SchedulerOptions("tcp", dashboard_address=None, host="127.0.0.1"),
                                  None, dict(os.environ), timeout=60)
    child.stop(grace=5)
    assert info["address"].startswith("tcp://127.0.0.1:"), info
    child, info = start_scheduler(sys.executable, SchedulerOptions("tcp", interface="lo", dashboard_address=None,
                                                                   host="192.0.2.99"),
                                  None, dict(os.environ), timeout=60)
    child.stop(grace=5)
    assert info["address"].startswith("tcp://127.0.0.1:"), info
