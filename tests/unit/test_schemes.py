"""hpcgpu's comm schemes (``unix``, ``ucx+auth``) in distributed's registry of every process
hpcgpu starts, without package metadata (a source tree on ``PYTHONPATH`` has no entry
points: a worker process that met ``ucx+auth://`` failed with ``unknown address scheme``),
and registering them builds nothing on distributed-ucxx. No UCX needed here: the registry
is where a process's listeners and connectors look a scheme up (the same cluster over UCX,
without metadata: tests/unit/test_ucxauth.py)."""

from __future__ import annotations

import subprocess
import sys

from distributed import Client
from distributed.comm.registry import Backend

from hpcgpu import LocalGPUCluster
from hpcgpu.network import ucxauth
from hpcgpu.runner.scheduler import SchedulerOptions, scheduler_argv


def _registry_here() -> tuple[list[str], int]:
    from distributed.comm.registry import backends

    from hpcgpu.network import ucxauth

    return sorted(s for s in ("unix", "ucx+auth") if s in backends), ucxauth._classes.cache_info().currsize


def test_a_local_clusters_worker_process_knows_both_schemes_before_meeting_them():
    with LocalGPUCluster(n_workers=1, gpus=[], dashboard_address=None) as cluster, Client(cluster) as client:
        (found,) = client.run(_registry_here).values()
    assert found == (["ucx+auth", "unix"], 0)  # registered; ucx+auth's classes not built for it


def test_the_batch_scheduler_preloads_them_and_a_preload_registers_before_listening():
    argv = scheduler_argv("python3", SchedulerOptions("ucx+auth", dashboard_address=None), None)
    assert argv[argv.index("hpcgpu.network.schemes") - 1] == "--preload"
    code = ("from distributed import Scheduler; from distributed.comm.registry import backends; "
            "s = Scheduler(preload=['hpcgpu.network.schemes'], dashboard=False); "  # built, not started
            "print(sorted(k for k in backends if k in ('unix', 'ucx+auth')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split("\n")[-2:] == ["['ucx+auth', 'unix']", ""], done.stderr


class _FakeUCXAuth(Backend):
    def get_connector(self):
        return "connector"

    def get_listener(self, loc, handle_comm, deserialize, **connection_args):
        return ("listener", loc)

    def get_address_host(self, loc):
        return loc.split(":")[0]

    def get_address_host_port(self, loc):
        return loc, 1

    def resolve_address(self, loc):
        return loc

    def get_local_address_for(self, loc):
        return loc


def test_the_registered_backend_is_built_when_first_asked(monkeypatch):
    built = []
    monkeypatch.setattr(ucxauth, "_classes", lambda: built.append(1) or _FakeUCXAuth)
    backend = ucxauth._OnFirstUse()
    assert built == []
    assert (backend.get_connector(), backend.get_listener("h:1", None, True),
            backend.get_address_host("h:1")) == ("connector", ("listener", "h:1"), "h")
    assert built
