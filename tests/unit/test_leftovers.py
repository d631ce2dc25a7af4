"""Nothing left behind, however the process ends (#38: ``temporary_key()`` left its key
directory after SIGTERM): normal exit, Ctrl-C, SIGTERM and SIGKILL all remove it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcgpu.system import leftovers

#: makes a key in the given directory, says where, then waits to be ended
HOLDER = """
import sys, time
from hpcgpu.network.ucxauth import temporary_key
with temporary_key(sys.argv[1]) as path:
    print(path, flush=True)
    if sys.argv[2] == "wait":
        time.sleep(120)
    sys.stdin.readline()  # "exit": once the test has seen the key
"""


def _as_from_a_shell() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _gone_within(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not path.exists()


@pytest.mark.parametrize("end", ["exit", signal.SIGINT, signal.SIGTERM, signal.SIGKILL],
                         ids=["exit", "SIGINT", "SIGTERM", "SIGKILL"])
def test_temporary_key_directory_goes_however_the_process_ends(tmp_path, end):
    # the holder gets signals as a shell's child does, whatever the test process inherited:
    # a child inherits an ignored SIGINT or a blocked mask (in CI the holder once slept on)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), "exit" if end == "exit" else "wait"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=_as_from_a_shell)
    try:
        key = Path(holder.stdout.readline().strip())
        assert key.is_file() and key.parent.parent == tmp_path
        if end == "exit":  # not before: the holder's exit would race the check above
            holder.stdin.write("\n")
            holder.stdin.flush()
        else:
            holder.send_signal(end)
        holder.wait(30)
    finally:
        holder.kill()
        holder.wait()
    assert _gone_within(key.parent, 5), f"{key.parent} left after {end}: {list(tmp_path.iterdir())}"


def test_the_keeper_leaves_with_the_last_path_and_keeps_what_was_forgotten(tmp_path):
    kept, dropped = tmp_path / "kept", tmp_path / "dropped"
    kept.mkdir(), dropped.mkdir()
    leftovers.remove_at_end(dropped)
    keeper = leftovers._keeper
    leftovers.remove_at_end(kept)
    assert leftovers._keeper is keeper  # one keeper per process
    leftovers.forget(kept)
    assert keeper.poll() is None  # still holds ``dropped``
    leftovers.forget(dropped)
    assert keeper.returncode == 0 and leftovers._keeper is None
    assert kept.is_dir() and dropped.is_dir()  # forgotten: the caller's to remove


def test_a_forked_child_does_not_hold_its_parents_keeper(tmp_path):
    """The parent's keeper must see its end of input when the parent ends, not when a forked
    child that inherited the pipe ends; the child's own paths get a keeper of its own."""
    mine = tmp_path / "parent"
    mine.mkdir()
    leftovers.remove_at_end(mine)
    try:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            ok = leftovers._keeper is None and leftovers._pipe == -1 and not leftovers._held
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
        os.close(write)
        assert os.read(read, 1) == b"1"
        os.waitpid(pid, 0)
        os.close(read)
        assert mine.is_dir()  # the child's end removed nothing of the parent's
    finally:
        leftovers.forget(mine)


def test_a_path_with_a_newline_is_refused():
    with pytest.raises(ValueError, match="newline"):
        leftovers.remove_at_end("/tmp/a\nb")


#: a ``unix://`` listener (LocalGPUCluster's workers and nannies), then waits to be ended
LISTENER = """
import asyncio, sys
from distributed.comm import listen
from hpcgpu.network import unixcomm

async def main():
    unixcomm.register()
    async def handle(comm):
        await comm.close()
    listener = listen("unix://", handle)
    await listener.start()
    print(listener.contact_address, flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""


def test_a_unix_listener_leaves_no_socket_directory_after_sigterm(tmp_path):
    """The class of the break: LocalGPUCluster killed with SIGTERM left each worker's and
    nanny's socket directory (``hpcgpu-*`` under TMPDIR, 4 of them for two workers)."""
    holder = subprocess.Popen([sys.executable, "-c", LISTENER], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        socket = Path(holder.stdout.readline().strip().removeprefix("unix://"))
        assert socket.parent.parent == tmp_path and socket.exists()
        holder.send_signal(signal.SIGTERM)
        holder.wait(30)
    finally:
        holder.kill()
        holder.wait()
    assert _gone_within(socket.parent, 5), list(tmp_path.iterdir())
