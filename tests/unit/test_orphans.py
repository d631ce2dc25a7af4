"""The reaper ends a killed run's process groups; a run notices its scheduler's death
(hpcgpu.runner.reaper, orphans, lifeline, signals.Stop.check)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from hpcgpu.runner.processes import start_child
from hpcgpu.runner.reaper import any_running_in_group, reap
from hpcgpu.runner.signals import AFTER_SCRIPT, SIGTERM_BUDGET, Stop

#: ignores SIGTERM, and leaves a child of its own in its process group
STUBBORN = ("import signal, subprocess, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "subprocess.Popen(['sleep', '300'])\n"
            "print('ready', flush=True)\n"
            "time.sleep(300)\n")


def stubborn():
    child = start_child("stubborn", [sys.executable, "-c", STUBBORN], stdout=subprocess.PIPE, text=True)
    assert child.popen.stdout.readline() == "ready\n"
    return child


def test_reap_kills_what_sigterm_does_not_end():
    child = stubborn()
    try:
        assert reap({child.pid}, grace=0.5) == {child.pid}
        assert child.wait(10) == -signal.SIGKILL
        assert child.wait_group(10)  # the grandchild too
    finally:
        child.stop(grace=1)


def test_reap_leaves_sigkill_out_when_sigterm_ends_them():
    child = start_child("sleeper", ["sleep", "300"])
    assert reap({child.pid}, grace=30) == set()
    assert child.wait(10) == -signal.SIGTERM


#: a run that is guarded, starts a stubborn child, says its pid, and waits to be killed
RUN = ("import sys\n"
       "from hpcgpu.runner.signals import Stop\n"
       "from hpcgpu.runner.processes import start_child\n"
       "with Stop():\n"
       f"    child = start_child('script', [sys.executable, '-c', {STUBBORN!r}])\n"
       "    print(child.pid, flush=True)\n"
       "    sys.stdin.read()\n")


def test_the_groups_of_a_killed_run_get_sigterm_then_sigkill():
    run = subprocess.Popen([sys.executable, "-c", RUN], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said = {run.stdout.readline().strip(), run.stdout.readline().strip()}  # its pid, its child's "ready"
    said.remove("ready")
    group = int(said.pop())
    try:
        os.kill(run.pid, signal.SIGKILL)
        killed = time.monotonic()
        run.wait(30)
        while any_running_in_group(group) and time.monotonic() - killed < 60:
            time.sleep(0.05)
        took = time.monotonic() - killed
        assert not any_running_in_group(group)
    finally:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    # SIGKILL once the budget is up (docs/batch.md), not before: SIGTERM alone ends nothing
    assert took >= SIGTERM_BUDGET, took
    said = run.stderr.read()
    assert f"SIGTERM to process group(s) {group}, SIGKILL to {group} after 4 s" in said, said


def test_a_guarded_run_that_ends_in_order_leaves_its_groups_alone():
    with Stop():
        child = start_child("sleeper", ["sleep", "300"])
    try:
        assert child.running()  # the reaper was told "end": it signalled nothing
    finally:
        child.stop(grace=5)


def test_check_sees_the_scheduler_go_once():
    stop, scheduler = Stop(), start_child("scheduler", ["sleep", "300"])
    assert stop.check(scheduler, "the script ran") is False and stop.lost is None
    scheduler.stop(grace=5)
    before = time.monotonic()
    assert stop.check(scheduler, "the script ran") is True
    assert stop.lost == (f"the Dask scheduler (pid {scheduler.pid}) was killed by signal 15 "
                         "while the script ran")
    assert stop.deadline <= time.monotonic() + SIGTERM_BUDGET - AFTER_SCRIPT
    assert stop.deadline >= before + SIGTERM_BUDGET - AFTER_SCRIPT
    assert stop.signum is None and stop.check(scheduler, "later") is True
