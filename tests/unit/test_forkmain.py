"""hpcgpu.runner.forkmain: a program forked from this process sees what a new interpreter
would (``hpcgpu run``'s scheduler), and nothing forks beside a thread that could hold a lock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

from hpcgpu.runner.forkmain import fork_main

# Run in a process of its own: pytest-xdist's worker runs threads (execnet's), and a fork
# is refused there (the second test).
PARENT = textwrap.dedent('''
    import json, os, signal, sys
    import dask.config
    from hpcgpu.runner.forkmain import fork_main
    from hpcgpu.system.spawn import run

    run(["true"], timeout=30)  # the spawner thread runs, as in hpcgpu run
    signal.signal(signal.SIGTERM, lambda *a: None)
    signal.signal(signal.SIGHUP, lambda *a: None)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
    sys.path.insert(0, os.getcwd())  # as python -m puts it

    def main(args):
        facts = dict(
            argv=sys.argv, args=list(args), path0=sys.path[0], cwd=os.getcwd(),
            env=os.environ.get("HPCGPU_TEST_FORK"), gone=os.environ.get("HPCGPU_TEST_PARENT_ONLY"),
            config=dask.config.get("distributed.scheduler.idle-timeout", None),
            term=signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            hup=signal.getsignal(signal.SIGHUP) == signal.SIG_DFL,
            int=signal.getsignal(signal.SIGINT) is signal.default_int_handler,
            mask=sorted(map(int, signal.pthread_sigmask(signal.SIG_BLOCK, []))),
            session=os.getsid(0) == os.getpid(), parent=os.getppid(),
            comm=open("/proc/self/comm").read().strip())
        open(args[0], "w").write(json.dumps(facts))
        raise SystemExit(7)

    env = {"HPCGPU_TEST_FORK": "yes", "DASK_DISTRIBUTED__SCHEDULER__IDLE_TIMEOUT": "123s",
           "PATH": os.environ["PATH"]}
    os.environ["HPCGPU_TEST_PARENT_ONLY"] = "1"
    child = fork_main(main, ["prog", sys.argv[1]], env, name="forked-test")
    print(json.dumps({"code": child.wait(60), "pid": child.pid, "me": os.getpid()}))
''')


def test_a_forked_program_sees_a_new_interpreters_state(tmp_path):
    """Its arguments, only its environment (and Dask's configuration read from it), the
    signal handlers and mask of a new interpreter, a session of its own, its name, the
    working directory off its import path, and its exit code."""
    facts = tmp_path / "facts.json"
    done = subprocess.run([sys.executable, "-c", PARENT, str(facts)], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    parent = json.loads(done.stdout.strip().splitlines()[-1])
    seen = json.loads(facts.read_text())
    assert parent["code"] == 7 and seen["parent"] == parent["me"], (parent, seen)
    assert seen["argv"] == ["prog", str(facts)] and seen["args"] == [str(facts)]
    assert seen["env"] == "yes" and seen["gone"] is None and seen["config"] == "123s"
    assert seen["term"] and seen["hup"] and seen["int"] and seen["mask"] == [], seen
    assert seen["session"] and seen["comm"] == "forked-test", seen
    assert os.path.realpath(seen["path0"]) != os.path.realpath(seen["cwd"]), seen


def test_beside_another_thread_nothing_forks():
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert fork_main(lambda args: None, ["prog"], {}) is None
    finally:
        stop.set()
        other.join()
