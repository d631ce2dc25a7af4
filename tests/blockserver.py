"""Run a doc block as ``python block.py`` would, in a process forked from one interpreter that
has imported distributed and dask.array already (tests/unit/test_docs.py): the import, about
0.6 to 1 CPU-s, is paid once per test process instead of once per block.

What the block sees is what ``python block.py`` gives it (test_docs checks it against a real
one): ``__name__ == "__main__"``, ``__file__``, ``sys.argv``, ``sys.path[0]`` (the block's
directory), its working directory, its environment, stdin from /dev/null, stdout and stderr
to files; an exception ends it with exit code 1 and a traceback, and at exit the interpreter
runs its atexit handlers (a cluster left open closes there, as in a user's script). Its own
globals are fresh: an import the block lacks still fails. The server has started no thread
(forking is safe) and each block is forked from it unchanged, so no block sees another's.

Protocol on the server's stdin and stdout, one JSON line each way: the request
``{"script", "cwd", "env", "stdout", "stderr"}``, then the answers ``{"pid"}`` at the fork and
``{"returncode"}`` at the block's end.
"""

from __future__ import annotations

import builtins
import importlib
import importlib.machinery
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

#: imported once by the server: what nearly every block that runs imports (through hpcgpu)
PRELOAD = ("distributed", "dask.array")


class BlockServer:
    """The test process's side: one server, started on first use, a block at a time."""

    def __init__(self, env: dict, outputs: Path):
        self._env, self._outputs, self._server, self._runs = env, outputs, None, 0

    def run(self, script: Path, env: dict, timeout: float) -> subprocess.CompletedProcess:
        """``python script`` in ``script``'s directory, as :func:`subprocess.run` with
        ``capture_output=True, text=True`` would return it; TimeoutExpired after ``timeout``
        (the block killed)."""
        if self._server is None:  # its answers read unbuffered: see _answer
            self._server = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, bufsize=0, env=self._env,
                                            cwd=self._outputs)
        self._runs += 1
        out, err = (self._outputs / f"{self._runs}.{kind}" for kind in ("out", "err"))
        request = {"script": str(script), "cwd": str(script.parent), "env": env,
                   "stdout": str(out), "stderr": str(err)}
        self._server.stdin.write(json.dumps(request).encode() + b"\n")
        deadline = time.monotonic() + timeout
        pid = self._answer(deadline)["pid"]
        try:
            returncode = self._answer(deadline)["returncode"]
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)  # as subprocess.run does on its timeout
            self._answer(time.monotonic() + 60)
            raise subprocess.TimeoutExpired([sys.executable, script.name], timeout) from None
        return subprocess.CompletedProcess([sys.executable, script.name], returncode,
                                           out.read_text(), err.read_text())

    def _answer(self, deadline: float) -> dict:
        """The server's next line, read a byte at a time: a buffered reader could take both
        answers of a quick block at once, and a wait on the pipe would then never end."""
        line, fd = b"", self._server.stdout.fileno()
        while not line.endswith(b"\n"):
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise TimeoutError
            byte = os.read(fd, 1)
            assert byte, f"the block server ended (exit code {self._server.wait()})"
            line += byte
        return json.loads(line)

    def close(self) -> None:
        if self._server is not None:
            self._server.stdin.close()
            self._server.wait(timeout=30)


def _serve() -> dict:
    """Import :data:`PRELOAD`, then fork one child per request and wait for it; returns the
    request in the child (the server returns only there)."""
    for name in PRELOAD:
        importlib.import_module(name)
    assert threading.active_count() == 1, "a thread before fork"
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return request
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), flush=True)
    sys.exit(0)


def _become(request: dict) -> str:
    """In the child: the process ``python script`` would be, up to running the script."""
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, (path, flags) in enumerate([(os.devnull, os.O_RDONLY),
                                        (request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                        (request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)]):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    import multiprocessing.process

    multiprocessing.process.ORIGINAL_DIR = os.path.abspath(os.getcwd())  # what spawn passes on
    if "numpy" in sys.modules:  # a fresh interpreter's numpy is seeded afresh: so is this one's
        sys.modules["numpy"].random.seed()
    script = os.path.abspath(request["script"])
    sys.argv = [os.path.basename(script)]  # as typed: python block.py
    sys.path[0] = os.path.dirname(script)
    return script


def _run_as_main(script: str) -> None:
    """Run ``script`` as Python runs the script it is given: a new ``__main__`` module with
    the script's absolute ``__file__`` (runpy.run_path would put it in ``sys.argv[0]`` too)."""
    main = types.ModuleType("__main__")
    main.__annotations__, main.__builtins__, main.__file__, main.__cached__ = {}, builtins, script, None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", script)
    sys.modules["__main__"] = main
    with open(script, "rb") as source:
        code = compile(source.read(), script, "exec")
    exec(code, main.__dict__)


if __name__ == "__main__":
    _run_as_main(_become(_serve()))
