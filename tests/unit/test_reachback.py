"""The scheduler's host connecting back to each new worker (hpcgpu.cluster.batch.reachback), on
loopback: a worker that answers counts, one gone (refused) is no problem, one whose port
accepts nothing in time is named with the ports to open; wait_for_workers raises with it."""

from __future__ import annotations

import asyncio
import errno
import socket
import threading
import time
from contextlib import contextmanager

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcgpu.cluster.batch.progress import wait_for_workers
from hpcgpu.cluster.batch.reachback import ReachBack, port_ranges, reach_problem
from hpcgpu.worker.reach import NetworkCheckError

ports = st.integers(1024, 65535)


@given(ports, ports, ports, st.booleans())
def test_port_ranges_read_both_spellings(a, b, c, equals):
    args = [f"--worker-port={a}:{b}"] if equals else ["--worker-port", f"{a}:{b}"]
    args += ["--nthreads", "2", "--nanny-port", str(c)]
    assert port_ranges(args) == {"worker": f"{a}-{b}", "nanny": str(c)}


def test_port_ranges_ignore_a_dangling_option():
    assert port_ranges(["--worker-port"]) == {}


def test_random_ports_get_the_option_and_a_range_to_open():
    message = reach_problem(TimeoutError(), "login", "worker 'w'", "tcp://10.78.0.11:41234", {})
    assert "the workers listen on random ports: fix them with worker_extra_args=['--worker-port', " \
           "'9000:9100', '--nanny-port', '9100:9200']" in message
    assert message.endswith("open those ranges from host login to the compute hosts")


def test_an_unroutable_worker_address_names_the_interface_fix():
    error = OSError(errno.ENETUNREACH, "Network is unreachable")
    message = reach_problem(error, "login", "worker 'w'", "tcp://10.79.0.11:9000", {})
    assert message.startswith("host login cannot reach worker 'w' at tcp://10.79.0.11:9000 "
                              "(Network is unreachable): the workers listen on a network")
    assert "interface='ib0'" in message


def test_a_worker_that_answers_counts_and_one_gone_is_no_problem():
    # a live distributed listener (the handshake completes), and a port nobody listens on
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        gone = f"tcp://127.0.0.1:{closed.getsockname()[1]}"

    async def both():
        from distributed import Scheduler

        async with Scheduler(dashboard_address=":0", host="127.0.0.1") as scheduler:
            reach = ReachBack(dict, lambda info: ("w", {}), timeout=0.5)
            reach.watch({scheduler.address: {"name": "a"}, gone: {"name": "b"},
                         "ucx://10.0.0.1:1": {"name": "c"}})
            while reach._tasks:
                await asyncio.sleep(0.02)
            return reach, scheduler.address

    reach, live = asyncio.run(both())
    assert reach.answered(live) and reach.answered("ucx://10.0.0.1:1")
    # refused: a worker closing (the scheduler drops it itself), not a firewall
    assert reach.answered(gone) and reach.problems == [] and not reach.failed


@contextmanager
def _dropping_port():
    """A loopback address whose listener's backlog is full: the kernel drops further SYNs, as
    a firewall does."""
    with socket.socket() as full:
        full.bind(("127.0.0.1", 0))
        full.listen(0)
        fillers = [socket.socket() for _ in range(4)]  # the backlog holds 0 or 1 (by kernel)
        try:
            for filler in fillers:
                filler.setblocking(False)
                filler.connect_ex(full.getsockname())
            yield f"tcp://127.0.0.1:{full.getsockname()[1]}"
        finally:
            for filler in fillers:
                filler.close()


async def _settled(reach: ReachBack) -> None:
    while reach._tasks:
        await asyncio.sleep(0.02)


def test_a_port_whose_connections_are_dropped_is_named():
    with _dropping_port() as address:
        reach = ReachBack(dict, lambda info: ("worker 'w-0'", {"worker": "9000-9100"}), timeout=0.5)

        async def run():
            reach.watch({address: {"name": "w-0", "nanny": None}})
            await _settled(reach)

        asyncio.run(run())
    assert reach.failed == {address} and not reach.answered(address)
    [message] = reach.problems
    assert message.startswith(f"host {socket.gethostname()} got no answer from worker 'w-0' at "
                              f"{address} within 0.5 s (packets dropped, as a firewall does)")
    assert "open TCP ports 9000-9100 (--worker-port)" in message


def test_wait_for_workers_raises_the_reach_problems_and_counts_answered_workers():
    from types import SimpleNamespace

    fleet = SimpleNamespace(worker_pool=lambda name: "default", spec={}, table=lambda: [],
                            job_pool=lambda job: None)
    running = {"tcp://a:1": {"name": "c-0-0-0", "status": "running"}}

    async def workers():
        return running

    reach = SimpleNamespace(problems=[], answered=lambda address: False)
    with pytest.raises(TimeoutError, match="0 of 1 workers connected"):  # not answered yet
        asyncio.run(wait_for_workers(1, 0, workers=workers, fleet=fleet, failures=[], reach=reach))
    reach.answered = lambda address: True
    asyncio.run(wait_for_workers(1, 1, workers=workers, fleet=fleet, failures=[], reach=reach))
    reach.problems.append("host login got no answer from worker 'c-0-0-0'")
    with pytest.raises(NetworkCheckError, match="1 worker.s. connected but cannot be reached from "
                                                "this host:\nhost login got no answer"):
        asyncio.run(wait_for_workers(1, 1, workers=workers, fleet=fleet, failures=[], reach=reach))


def test_workers_added_outside_a_running_loop_are_not_held_back():
    reach = ReachBack(dict, lambda info: ("w", {}))
    reach.watch({"tcp://10.0.0.1:9000": {"name": "w"}})
    assert reach.answered("tcp://10.0.0.1:9000") and not reach.problems


@pytest.mark.parametrize("steps", range(8))
def test_a_busy_event_loop_does_not_make_an_answering_port_look_dropped(steps):
    # The cluster's loop can be held for longer than the probe's timeout (a loaded login
    # node, a long callback), at any step of the probe; the port answered meanwhile, and that
    # is what counts (held after 2 to 4 steps, an asyncio timeout fired first).
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)  # the kernel completes the connection; nobody needs to accept it
        address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
        reach = ReachBack(dict, lambda info: ("worker 'w-0'", {}), timeout=0.2)

        async def run():
            reach.watch({address: {"name": "w-0"}})
            for _ in range(steps):  # the probe starts its connection
                await asyncio.sleep(0)
            time.sleep(0.5)  # then the loop is held past its timeout
            while reach._tasks:
                await asyncio.sleep(0.02)

        asyncio.run(run())
    assert reach.problems == [] and reach.answered(address)


@pytest.mark.parametrize("successor_mid_probe", [False, True])
def test_a_worker_that_left_during_its_probe_is_no_problem_but_its_successor_is_probed(successor_mid_probe):
    # a worker killed while it was probed (a restart storm): its silence says nothing of the
    # network; a new worker on the same (fixed) port is checked afresh, whether its
    # predecessor's probe has ended or not
    with _dropping_port() as address:
        reach = ReachBack(dict, lambda info: ("worker 'w'", {}), timeout=0.5)

        async def run():
            reach.watch({address: {"name": "w-0"}})
            await asyncio.sleep(0.1)
            reach.left(address)
            if not successor_mid_probe:
                await _settled(reach)
                assert reach.problems == [] and not reach.failed and not reach.answered(address)
            reach.watch({address: {"name": "w-1"}})
            await _settled(reach)

        asyncio.run(run())
    assert reach.failed == {address} and len(reach.problems) == 1
    assert not reach._probing  # nothing kept once the probes ended


def test_workers_that_leave_unprobed_are_not_remembered_and_close_ends_the_threads():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        address = f"tcp://127.0.0.1:{listener.getsockname()[1]}"
        earlier = set(threading.enumerate())  # other tests' probe threads in this process
        reach = ReachBack(dict, lambda info: ("worker 'w-0'", {}), timeout=0.5)

        async def run():
            for n in range(100):  # the workers of a long adaptive run, each gone after its probe
                reach.left(f"tcp://127.0.0.1:{n + 1}")
            reach.watch({address: {"name": "w-0"}})
            await _settled(reach)

        asyncio.run(run())
    assert reach.answered(address) and not reach._probing
    reach.close()

    def its_threads():
        return [t.name for t in set(threading.enumerate()) - earlier if t.name.startswith("hpcgpu-reach")]

    wait_threads = time.monotonic() + 5
    while its_threads() and time.monotonic() < wait_threads:
        time.sleep(0.05)
    assert not its_threads()
