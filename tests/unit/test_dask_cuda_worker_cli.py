"""``hpcgpu worker`` takes ``dask cuda worker``'s flags (dask-cuda 26.10) and starts workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from distributed import Client, LocalCluster

from hpcgpu.cli.worker import entry_argv, worker
from hpcgpu.jobspec.gpuoptions import ENV_VARIABLE, GPUWorkerOptions

FLAGS = Path(__file__).parents[1] / "data" / "dask-cuda-26.10-worker-flags.txt"


def _dask_cuda_params() -> list[str]:
    return [line.strip() for line in FLAGS.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _ours() -> set[str]:
    return {o for p in worker.params for o in (*p.opts, *p.secondary_opts)} | {p.name.upper() for p in worker.params}


def test_every_dask_cuda_worker_flag_is_taken():
    params = _dask_cuda_params()
    assert len(params) == 41
    missing = [p for p in params if not set(p.split()) <= _ours()]
    assert missing == []


def test_the_live_dask_cuda_flags_match_the_recorded_list_where_dask_cuda_is_installed():
    cli = pytest.importorskip("dask_cuda.cli", reason="dask-cuda is in the GPU extras only")
    live = [" ".join(sorted(p.opts + p.secondary_opts)) if p.opts[0].startswith("-") else p.name.upper()
            for p in cli.worker.params]
    assert set(live) <= set(_dask_cuda_params()) | {" ".join(sorted(p.split())) for p in _dask_cuda_params()}


def _argv(args: list[str], monkeypatch, gpus: int = 2) -> list[str]:
    """What ``hpcgpu worker ARGS`` hands the entry point (nothing starts)."""
    seen = {}
    monkeypatch.setattr("hpcgpu.worker.__main__.main.main", lambda args, prog_name: seen.setdefault("argv", args))
    monkeypatch.setattr("hpcgpu.cli.worker.gpus_here", lambda: gpus)
    result = CliRunner().invoke(worker, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return seen["argv"]


def test_dask_cuda_flags_reach_the_entry_point(monkeypatch, tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    argv = _argv(["tcp://h:8786", "--nthreads", "4", "--memory-limit", "10GB", "--rmm-pool-size", "2GB",
                  "--rmm-maximum-pool-size", "4GB", "--set-rmm-allocator-for-libs", "cupy",
                  "--enable-cudf-spill", "--cudf-spill-stats", "2", "--pre-import", "cudf,rmm",
                  "--device-memory-limit", "0.5", "--disable-infiniband", "--tls-ca-file", str(ca),
                  "--worker-port", "9000:9001", "--resources", "MEM=1e9", "--no-dashboard",
                  "--preload", "a.b", "--multiprocessing-method", "spawn", "--name", "w"], monkeypatch)
    text = " ".join(argv)
    for piece in ("tcp://h:8786", "--nthreads 4", "--memory-limit 10GB", "--rmm-pool-size 2GB",
                  "--rmm-maximum-pool-size 4GB", "--set-rmm-allocator-for-libs cupy", "--enable-cudf-spill",
                  "--cudf-spill-stats 2", "--pre-import cudf,rmm", "--device-memory-limit 0.5",
                  "--disable-infiniband", f"--tls-ca-file {ca}", "--worker-port 9000:9001",
                  "--resources MEM=1e9", "--no-dashboard", "--preload a.b", "--gpus-per-node 2",
                  "--multiprocessing-method spawn", "--name w"):
        assert piece in text, piece


def test_defaults_keep_hpcgpu_choices_and_a_cpu_host_starts_one_worker(monkeypatch):
    argv = _argv(["tcp://h:8786"], monkeypatch, gpus=0)
    assert argv == ["tcp://h:8786"]  # hpcgpu's pool, no worker dashboard, one CPU worker


@pytest.mark.parametrize("args, message", [
    (["tcp://h:1", "--rmm-release-threshold", "1GB"], "rmm_release_threshold needs rmm_async"),
    (["tcp://h:1", "--rmm-async", "--rmm-managed-memory"], "incompatible with rmm_async"),
    (["tcp://h:1", "--rmm-pool-size", "lots"], "rmm_pool_size='lots' is not a size"),
    (["tcp://h:1", "--set-rmm-allocator-for-libs", "jax"], "'jax' is not one of"),
    (["--nthreads", "2"], "give the scheduler address or --scheduler-file"),
    (["-x"], "can't start with '-'"),
])
def test_contradictory_or_bad_flags_fail_with_the_fix(args, message, monkeypatch):
    monkeypatch.setattr("hpcgpu.cli.worker.gpus_here", lambda: 0)
    result = CliRunner().invoke(worker, args)
    assert result.exit_code != 0 and message in result.output, result.output


def test_the_scheduler_address_from_dasks_config_as_dask_cuda_takes_it(monkeypatch):
    import dask

    with dask.config.set({"scheduler-address": "tcp://h:8786"}):
        assert _argv([], monkeypatch, gpus=0) == ["tcp://h:8786"]


def test_entry_argv_round_trips_the_gpu_options():
    from hpcgpu.jobspec.gpuflags import options_from_flags
    values = dict(rmm_async=True, rmm_release_threshold="3GB", rmm_maximum_pool_size="4GB")
    argv = entry_argv("tcp://h:1", values, set(values), 1)
    assert argv[:3] == ["tcp://h:1", "--gpus-per-node", "1"]
    assert options_from_flags(values) == GPUWorkerOptions.from_dask_cuda(**values)


def test_hpcgpu_worker_starts_against_a_local_scheduler_with_the_options_in_its_workers():
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", SLURM_JOB_ID="")
        proc = subprocess.Popen(
            [sys.executable, "-m", "hpcgpu", "worker", cluster.scheduler_address, "--nthreads", "2",
             "--name", "cw", "--pre-import", "fractions", "--enable-cudf-spill", "--rmm-pool-size", "1GB",
             "--death-timeout", "30"], env=env)
        try:
            client.wait_for_workers(1, timeout=60)
            info = client.run(lambda dask_worker: (dask_worker.name, dask_worker.state.nthreads,
                                                   "fractions" in sys.modules,
                                                   os.environ.get(ENV_VARIABLE)))
            ((name, nthreads, imported, options),) = info.values()
            assert (name, nthreads, imported) == ("cw-0-0", 2, True)
            got = GPUWorkerOptions.from_env({ENV_VARIABLE: options})
            assert (got.rmm_pool_size, got.enable_cudf_spill, got.pre_import) == ("1GB", True, ("fractions",))
        finally:
            proc.terminate()
            assert proc.wait(timeout=60) == 0


@pytest.mark.gpu
def test_hpcgpu_worker_starts_one_worker_per_gpu_with_dask_cudas_rmm_setup():
    pytest.importorskip("dask_cuda")
    import cupy
    from dask_cuda.utils import get_cluster_configuration

    n = cupy.cuda.runtime.getDeviceCount()
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        proc = subprocess.Popen([sys.executable, "-m", "hpcgpu", "worker", cluster.scheduler_address,
                                 "--rmm-pool-size", "2GB", "--rmm-maximum-pool-size", "3GB",
                                 "--device-memory-limit", "1GB", "--pre-import", "json", "--death-timeout", "60"])
        try:
            client.wait_for_workers(n, timeout=120)

            def probe():
                import rmm

                return os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0], type(rmm.mr.get_current_device_resource()).__name__

            seen = client.run(probe)
            assert len({v[0] for v in seen.values()}) == n and {v[1] for v in seen.values()} == {"PoolMemoryResource"}
            config = get_cluster_configuration(client)
            assert (config["[plugin] RMMSetup"]["initial_pool_size"], config["[plugin] RMMSetup"]["maximum_pool_size"],
                    config["device-memory-limit"]) == (2000000000, 3000000000, 1000000000)
        finally:
            proc.terminate()
            assert proc.wait(timeout=60) == 0


def test_hpcgpu_run_hands_the_gpu_flags_to_its_workers(monkeypatch):
    from hpcgpu.cli.run import run

    seen = {}
    monkeypatch.setattr("hpcgpu.runner.batch.run_batch", lambda options: seen.setdefault("options", options) and 0)
    result = CliRunner().invoke(run, ["--rmm-pool-size", "20GB", "--enable-cudf-spill", "--pre-import", "cudf",
                                      "--worker-args", "--lifetime 1h", "script.py"])
    assert result.exit_code == 0, result.output
    assert seen["options"].worker_args[-2:] == ("--lifetime", "1h")
    assert " ".join(seen["options"].worker_args).startswith("--enable-cudf-spill --rmm-pool-size 20GB --pre-import cudf")
    assert "--enable-nvlink" not in " ".join(seen["options"].worker_args)  # the switches pick --transports
    bad = CliRunner().invoke(run, ["--rmm-release-threshold", "1GB", "script.py"])
    assert bad.exit_code == 2 and "rmm_release_threshold needs rmm_async" in bad.output
