"""A worker's HTTP server (/health, /metrics; no password) listens on loopback unless the
user asks (#38 break 5): the entry point's argv, the cluster keyword and its config key."""

from __future__ import annotations

import dask

from hpcgpu import SLURMCluster
from hpcgpu.jobspec.worker_command import WorkerCommand
from hpcgpu.worker.__main__ import _dask_worker_argv


def _http(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "--dashboard-address"]


def test_the_entry_point_puts_the_http_server_on_loopback():
    argv = _dask_worker_argv("tls://h:1", {}, "w", 2, ())
    assert _http(argv) == ["127.0.0.1:0"] and "--no-dashboard" in argv


def test_the_config_key_and_the_flag_choose_another_address():
    with dask.config.set({"hpcgpu.defaults.worker-http-address": ":9100"}):
        assert _http(_dask_worker_argv("tls://h:1", {}, "w", 1, ())) == [":9100"]
    assert _http(_dask_worker_argv("tls://h:1", {"http_address": "10.0.0.5:0"}, "w", 1, ())) == ["10.0.0.5:0"]


def test_the_users_own_dashboard_address_wins():
    argv = _dask_worker_argv("tls://h:1", {}, "w", 1, ("--dashboard-address", ":8790"))
    assert _http(argv) == [":8790"]


def test_the_worker_command_renders_the_option_only_when_given():
    assert "--http-address" not in WorkerCommand(scheduler="tls://h:1").argv("p")
    argv = WorkerCommand(scheduler="tls://h:1", http_address=":9100").argv("p")
    assert argv[argv.index("--http-address") + 1] == ":9100"


def test_clusters_carry_the_keyword_and_the_config_key_into_their_jobs(tmp_path):
    logs = dict(log_directory=str(tmp_path))
    for options, expected in [({}, None), ({"worker_http_address": ":9100"}, ":9100")]:
        cluster = SLURMCluster(gpus_per_node=1, **logs, **options)
        try:
            line = next(w for w in cluster.job_script().split("\n") if "hpcgpu.worker" in w)
        finally:
            cluster.close()
        assert (f"--http-address {expected}" in line) if expected else "--http-address" not in line
    with dask.config.set({"hpcgpu.slurm.worker-http-address": ":9101"}):
        cluster = SLURMCluster(gpus_per_node=1, **logs)
        try:
            assert "--http-address :9101" in cluster.job_script()
        finally:
            cluster.close()


def test_dask_jobqueue_cpu_workers_too(tmp_path):
    cluster = SLURMCluster(cores=2, memory="4GB", log_directory=str(tmp_path))
    try:
        assert "--dashboard-address 127.0.0.1:0" in cluster.job_script()
    finally:
        cluster.close()
