"""Importing hpcgpu leaves the process as it found it, and Ctrl-C stays a KeyboardInterrupt."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def _changes(before: dict, after: dict) -> dict:
    changed = {}
    for part, old in before.items():
        new = after[part]
        if part == "loggers":  # a new logger is fine while it is left as logging makes it
            new = {name: value for name, value in new.items()
                   if name in old or value != [0, True, False, []]}
        if isinstance(old, dict):
            diff = {k: (old.get(k), new.get(k)) for k in set(old) | set(new) if old.get(k) != new.get(k)}
            if diff:
                changed[part] = diff
        elif old != new:
            changed[part] = (old, new)
    return changed


def test_importing_every_public_module_changes_no_process_wide_state():
    done = subprocess.run([sys.executable, str(HERE / "import_state.py")], capture_output=True,
                          text=True, timeout=300, cwd=HERE.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    state = json.loads(done.stdout)
    assert not state["skipped"] or all("No module named" in e for e in state["skipped"].values()), state["skipped"]
    assert len(state["before"]["signals"]) > 20 and state["before"]["dask config"]  # it looked
    assert _changes(state["before"], state["after"]) == {}


SCRIPT = textwrap.dedent("""
    import os, signal, sys, time
    # A child inherits its parent's ignored and blocked signals, and the pytest process's are
    # not what this checks: start as an interpreter in a terminal does (stderr says what came).
    print("inherited", signal.getsignal(signal.SIGINT), sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
          file=sys.stderr, flush=True)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    from hpcgpu import SLURMCluster
    try:
        print("ready", flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)  # the KeyboardInterrupt ends it at once; without one, the test fails in 30 s
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        print("caught", flush=True)
        raise
""")


def test_ctrl_c_after_importing_a_cluster_class_is_a_keyboard_interrupt(tmp_path):
    script = tmp_path / "interrupted.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert done.stdout.split() == ["ready", "caught"], (done.stdout, done.stderr[-2000:])
    assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr, done.returncode
