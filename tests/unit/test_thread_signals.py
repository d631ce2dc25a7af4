"""Threads that hpcgpu starts block the stop signals; the processes they start do not; every
child is forked by a thread that lives as long as the process (hpcgpu.system.threadsignals,
hpcgpu.system.spawn, hpcgpu.runner.processes)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from hpcgpu.runner.processes import start_child
from hpcgpu.system import commands
from hpcgpu.system.threadsignals import MAIN_THREAD_SIGNALS, blocked_here, born_blocked, start_thread

STOP_BITS = sum(1 << (s - 1) for s in MAIN_THREAD_SIGNALS)


def blocked_in(status: str) -> int:
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigBlk")), 16)


def in_thread(function):
    """``function()`` in a thread born blocking the stop signals; its result."""
    result = []
    start_thread(threading.Thread(target=lambda: result.append(function()))).join()
    return result[0]


def test_a_thread_started_in_a_thread_of_hpcgpu_blocks_them_too():
    assert in_thread(lambda: in_thread(blocked_here)) is True
    assert not blocked_here()  # the caller's own mask is back


def test_the_block_ends_with_the_block():
    with born_blocked():
        assert blocked_here()
    assert not blocked_here()


def test_commands_from_a_blocking_thread_start_unblocked():
    done = in_thread(lambda: commands.run(["cat", "/proc/self/status"], timeout=30))
    assert blocked_in(done.stdout) & STOP_BITS == 0


def test_a_command_that_does_not_answer_is_killed_at_its_timeout():
    done = in_thread(lambda: commands.run(["sleep", "30"], timeout=0.5, check=False))
    assert done.returncode == 124 and "did not answer within 0.5 s" in done.stderr


def test_children_start_unblocked_whichever_thread_asks():
    child = in_thread(lambda: start_child("cat", ["sleep", "30"]))
    try:
        with open(f"/proc/{child.pid}/status") as status:
            assert blocked_in(status.read()) & STOP_BITS == 0
    finally:
        child.stop(grace=5)


#: Says "TERM" if it gets SIGTERM before its input ends, then exits.
LISTENER = ("import signal, sys\n"
            "signal.signal(signal.SIGTERM, lambda *a: print('TERM', flush=True))\n"
            "print('ready', flush=True)\n"
            "sys.stdin.read()\n")


def test_a_child_outlives_the_thread_that_asked_for_it():
    """The death signal comes when the thread that *forked* the child ends: not the
    caller's, which ends here, but the spawner's, which lasts as long as the process."""
    native: list[int] = []

    def start():
        native.append(threading.get_native_id())
        return start_child("listener", [sys.executable, "-c", LISTENER],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    child = in_thread(start)
    try:
        assert child.popen.stdout.readline() == "ready\n"
        while os.path.exists(f"/proc/self/task/{native[0]}"):  # its exit, death signals included
            threading.Event().wait(0.01)
        out, _ = child.popen.communicate("", timeout=30)
    finally:
        child.stop(grace=5)
    assert out == "" and child.popen.returncode == 0


#: Says "TERM" when it gets SIGTERM, and exits.
SLEEPER = ("import signal, sys, time\n"
           "signal.signal(signal.SIGTERM, lambda *a: sys.exit(print('TERM', flush=True)))\n"
           "print('ready', flush=True)\n"
           "time.sleep(300)\n")


@pytest.mark.parametrize("start", ["start_child('listener', ", "start_process("])
def test_a_child_gets_sigterm_when_this_process_dies(tmp_path, start):
    """SIGKILL of the parent: its child hears SIGTERM (PR_SET_PDEATHSIG), in a session of
    its own (start_child) or in the parent's (start_process, hpcgpu.worker's children)."""
    parent = ("import subprocess, sys\n"
              "from hpcgpu.runner.processes import start_child, start_process\n"
              f"child = {start}[sys.executable, '-c', {SLEEPER!r}],\n"
              f"                    stdout=open({str(tmp_path / 'out')!r}, 'w'))\n"
              "print(child.pid, flush=True)\n"
              "sys.stdin.read()\n")
    process = subprocess.Popen([sys.executable, "-c", parent], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    child = int(process.stdout.readline())
    out = tmp_path / "out"
    while "ready" not in (out.read_text() if out.exists() else ""):
        threading.Event().wait(0.01)
    process.kill()
    process.wait(30)
    try:
        while "TERM" not in out.read_text():  # pytest's timeout bounds it
            threading.Event().wait(0.01)
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


WATCHED = '''
import os, signal, subprocess, sys
from types import SimpleNamespace
from hpcgpu.cluster.shutdown import watch

class Cluster:  # what watch() needs: an owner it can refer to weakly
    asynchronous = True

marker = sys.argv[1]
cluster = Cluster()
# hpcgpu's SIGTERM handler and exit hooks, with one job to cancel: its "scancel" is `touch marker`
watch(cluster, SimpleNamespace(cancel_argv=lambda ids: ["touch", marker]),
      {"job": SimpleNamespace(job_id="7", ended=False)})
'''

BEFORE_EXEC = '''
import os, signal, subprocess, sys
from hpcgpu.system.threadsignals import unblock_in_child

marker = sys.argv[1]
signal.signal(signal.SIGTERM, lambda *_: open(marker, "w").close())  # the parent's handler
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGTERM])  # as hpcgpu's spawner thread

def preexec():  # a SIGTERM between fork and exec: the parent's death signal, say
    os.kill(os.getpid(), signal.SIGTERM)
    unblock_in_child()

done = subprocess.run(["true"], preexec_fn=preexec)
print(done.returncode, os.path.exists(marker), flush=True)
'''

FORKED = WATCHED + '''
import multiprocessing, time
how = sys.argv[2]
if how == "terminate":  # a fork-started worker of the user's, stopped as multiprocessing does
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    child.start()
    time.sleep(0.5)
    child.terminate()
    child.join()
    code = child.exitcode
else:  # a forked child that ends as a script does: its exit hooks run
    pid = os.fork()
    if pid == 0:
        sys.exit(0)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(code, os.path.exists(marker), flush=True)
os._exit(0)
'''


def test_a_signal_between_fork_and_exec_runs_no_handler_of_the_parent(tmp_path):
    """A child that hpcgpu starts runs Python between fork and exec (its ``preexec_fn``),
    with the parent's Python signal handlers. A SIGTERM there (the death signal, when the
    parent was killed at that moment) ran the parent's handler in the child; hpcgpu's own
    cancelled the parent's jobs (seen as a pending job of tests/exit_script.py cancelled
    0.2 s after a kill -9; that handler now acts only in its own process, the test below).
    The child now dies of the signal before its exec, running no handler of the parent's."""
    marker = tmp_path / "handled"
    done = subprocess.run([sys.executable, "-c", BEFORE_EXEC, str(marker)], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split() == [str(-signal.SIGTERM), "False"], (done.stdout, done.stderr[-3000:])


@pytest.mark.parametrize("how,code", [("terminate", -signal.SIGTERM), ("exit", 0)])
def test_a_forked_child_neither_cancels_nor_closes_its_parents_clusters(tmp_path, how, code):
    """A process forked from one with a cluster (a multiprocessing worker started by
    ``fork``) inherits hpcgpu's SIGTERM handler and exit hooks: its SIGTERM
    (``Process.terminate``) cancelled the parent's jobs, and so did its normal end. Only
    the process that made a cluster cancels its jobs."""
    marker = tmp_path / "cancelled"
    done = subprocess.run([sys.executable, "-c", FORKED, str(marker), how], capture_output=True,
                          text=True, timeout=60)
    assert done.stdout.split() == [str(code), "False"], (done.stdout, done.stderr[-3000:])
