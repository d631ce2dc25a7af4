"""dask-cuda's worker keywords on the batch entry points: SLURMCluster & co., ``hpcgpu run``,
GPURunner. Rendered into the job script as the flags ``python -m hpcgpu.worker`` parses,
checked before anything is submitted, also from the configuration."""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import tempfile

import dask.config
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgpu import LSFCluster, PBSCluster, SGECluster, SLURMCluster
from hpcgpu.cluster.batch.job import GPUJob
from hpcgpu.cluster.batch.setup import prepare
from hpcgpu.jobspec.examples import GPU_OPTIONS, render_examples
from hpcgpu.jobspec.gpuflags import options_from_flags
from hpcgpu.jobspec.gpukeywords import GPU_KEYWORDS, SWITCHES
from hpcgpu.jobspec.gpuoptions import ENV_VARIABLE, GPUWorkerOptions
from hpcgpu.system import commands
from hpcgpu.worker.__main__ import main as worker_main

LOGS = tempfile.mkdtemp(prefix="hpcgpu-gpuopts-")  # dask-jobqueue makes log directories
atexit.register(shutil.rmtree, LOGS, True)
KINDS = ("slurm", "pbs", "lsf", "sge")
SITE = {"sge": {"site": {"gpu_complex": "gpu"}}}
QUIET = dict(scheduler_options={"dashboard_address": "localhost:0"}, log_directory=LOGS)
EVERY = dict(device_memory_limit="30GB", enable_cudf_spill=True, cudf_spill_stats=1,
             rmm_pool_size="20GB", rmm_maximum_pool_size="40GB", rmm_managed_memory=True,
             rmm_allocator_external_lib_list=["cupy", "torch"], rmm_log_directory="/scratch/rmm logs",
             rmm_track_allocations=True, log_spilling=True, pre_import=["cudf", "rmm"],
             cpu_affinity=False)


def script(kind: str = "slurm", **options) -> str:
    """The job script SLURMCluster & co. submit for ``options`` (nothing starts)."""
    setup = prepare(kind, {"log_directory": LOGS, **SITE.get(kind, {}), **options})
    return GPUJob("tls://10.0.0.1:8786", "job-1", **setup.job_options).job_script()


def worker_argv(text: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if "hpcgpu.worker" in line]
    words = shlex.split(line)
    return words[words.index("hpcgpu.worker") + 1:]


def parsed(text: str) -> GPUWorkerOptions:
    """What the worker entry point in the script makes of its flags."""
    ctx = worker_main.make_context("hpcgpu.worker", worker_argv(text))
    return options_from_flags(ctx.params)


@pytest.mark.parametrize("kind", KINDS)
def test_no_keyword_leaves_the_script_as_it_was(kind):
    plain = script(kind)
    assert script(kind, device_memory_limit="default", rmm_pool_size="auto", cpu_affinity=True) == plain
    assert not [w for w in worker_argv(plain) if w.startswith(("--rmm", "--device", "--pre-import"))]


@pytest.mark.parametrize("kind", KINDS)
def test_every_keyword_reaches_the_worker_command_of_every_scheduler(kind):
    text = script(kind, **EVERY)
    assert parsed(text) == GPUWorkerOptions.from_dask_cuda(**{k: v for k, v in EVERY.items() if k != "log_spilling"})
    assert "'--rmm-log-directory' '/scratch/rmm logs'" in text or "--rmm-log-directory '/scratch/rmm logs'" in text


def test_async_keywords_and_explicit_none():
    text = script(rmm_async=True, rmm_release_threshold="2GB", device_memory_limit=None)
    assert parsed(text) == GPUWorkerOptions.from_dask_cuda(rmm_async=True, rmm_release_threshold="2GB",
                                                           device_memory_limit=None)
    assert worker_argv(script(rmm_pool_size=None))[-2:] == ["--rmm-pool-size", "none"]


def test_golden_example_is_what_slurmcluster_renders():
    golden = render_examples()["slurm-1x4-dask-cuda.sh"]
    ours = script(**GPU_OPTIONS["slurm-1x4-dask-cuda.sh"])
    flags = worker_argv(golden)[worker_argv(golden).index("--device-memory-limit"):]
    assert worker_argv(ours)[-len(flags):] == flags
    assert parsed(golden) == GPUWorkerOptions.from_dask_cuda(**GPU_OPTIONS["slurm-1x4-dask-cuda.sh"])


_SIZE = st.one_of(st.integers(1, 2**45), st.builds(lambda n, u: f"{n}{u}", st.integers(1, 999),
                                                   st.sampled_from(["B", "kB", "MB", "GB", "GiB", "TB"])),
                  st.floats(0.01, 1.0).map(lambda f: round(f, 3)))
_MODULE = st.from_regex(r"[a-z][a-z0-9_]{0,8}(\.[a-z][a-z0-9_]{0,5})?", fullmatch=True)


@settings(max_examples=25, deadline=None)
@given(pool=_SIZE, limit=_SIZE, modules=st.lists(_MODULE, min_size=1, max_size=4),
       as_text=st.booleans(), libs=st.sampled_from([None, "cupy", ["torch"], "cupy,torch"]))
def test_user_sizes_and_lists_reach_the_worker_as_given(pool, limit, modules, as_text, libs):
    options = dict(rmm_pool_size=pool, device_memory_limit=limit,
                   pre_import=",".join(modules) if as_text else modules)
    if libs is not None:
        options["rmm_allocator_external_lib_list"] = libs
    expected = GPUWorkerOptions.from_dask_cuda(**options)
    assert parsed(script(**options)) == GPUWorkerOptions.from_dask_cuda(
        **{**options, "rmm_pool_size": str(pool), "device_memory_limit": str(limit)})
    assert expected.pre_import == tuple(modules)


@pytest.mark.parametrize("options, message", [
    (dict(rmm_pool_size="lots"), "rmm_pool_size='lots' is not a size"),
    (dict(device_memory_limit=-1), "device_memory_limit=-1 is not a size"),
    (dict(rmm_release_threshold="1GB"), "rmm_release_threshold needs rmm_async=True"),
    (dict(rmm_allocator_external_lib_list="jax"), "'jax' is not one of 'cupy', 'torch'"),
    (dict(rmm_async=True, rmm_managed_memory=True), "incompatible with rmm_async=True"),
    (dict(pre_import=["cudf\ntouch /tmp/x"]), "pre_import="),
    (dict(rmm_log_directory="/a\nb"), "rmm_log_directory="),
    (dict(cudf_spill_stats=-2), "cudf_spill_stats=-2 must be a whole number"),
    (dict(enable_nvlink=True, protocol="tcp"), "enable_nvlink=True needs protocol='ucx'"),
    (dict(enable_nvlink=True, protocol="ucx", transports="infiniband"), "give one of them"),
    (dict(cores=8, memory="8GB", rmm_pool_size="1GB"), "drop rmm_pool_size for CPU workers"),
])
@pytest.mark.parametrize("cls", [SLURMCluster, PBSCluster, LSFCluster, SGECluster])
def test_bad_values_fail_before_anything_is_submitted(cls, options, message):
    calls = []
    commands.set_runner(lambda argv, timeout, input: calls.append(argv))
    try:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            cls(**QUIET, **options)
    finally:
        commands.set_runner(None)
    assert calls == []


def test_transport_switches_choose_the_network_not_worker_flags():
    setup = prepare("slurm", dict(log_directory=LOGS, enable_infiniband=True, enable_rdmacm=True))
    assert (setup.network_options["protocol"], setup.network_options["transports"]) == ("ucx", "infiniband,rdmacm")
    assert setup.gpu_options is None and "gpu_options" not in setup.job_options
    off = prepare("slurm", dict(log_directory=LOGS, enable_nvlink=False))  # no UCX: nothing changes
    assert (off.network_options["protocol"], off.network_options["transports"]) == (None, "auto")


def test_the_configuration_gives_keywords_and_arguments_win():
    with dask.config.set({"hpcgpu.slurm.rmm-pool-size": "2GB", "hpcgpu.slurm.pre-import": ["cudf"],
                          "hpcgpu.defaults.device-memory-limit": "0.5"}):
        from_config = parsed(script())
        explicit = parsed(script(rmm_pool_size="3GB", device_memory_limit=None))
    assert (from_config.rmm_pool_size, from_config.pre_import, from_config.device_memory_limit) == ("2GB", ("cudf",), "0.5")
    assert (explicit.rmm_pool_size, explicit.pre_import, explicit.device_memory_limit) == ("3GB", ("cudf",), None)
    with dask.config.set({"hpcgpu.profiles.rmm": {"scheduler": "slurm", "rmm-async": True}}):
        assert parsed(script(profile="rmm")).rmm_async is True


def test_cluster_and_its_gpu_pools_render_the_keywords():
    with SLURMCluster(**QUIET, gpus_per_node=2, rmm_pool_size="1GB", pre_import="fractions",
                      pools={"big": dict(gpus_per_node=4),
                             "cpu": dict(gpus_per_node=0, cores_per_node=2, memory_per_node="2GB")}) as cluster:
        assert cluster.gpu_options == GPUWorkerOptions.from_dask_cuda(rmm_pool_size="1GB", pre_import="fractions")
        for pool in (None, "big"):
            assert parsed(cluster.job_script(pool)) == cluster.gpu_options
        assert "--rmm-pool-size" not in cluster.job_script("cpu")  # dask-jobqueue's CPU workers


def test_hpcgpu_run_takes_the_transport_switches_as_the_network(monkeypatch):
    from hpcgpu.cli.run import run

    seen = {}
    monkeypatch.setattr("hpcgpu.runner.batch.run_batch", lambda options: seen.setdefault("options", options) and 0)
    result = CliRunner().invoke(run, ["--enable-nvlink", "--enable-infiniband", "--rmm-pool-size", "1GB",
                                      "--device-memory-limit", "none", "script.py"])
    assert result.exit_code == 0, result.output
    options = seen["options"]
    assert (options.protocol, options.transports) == ("ucx", "infiniband,nvlink")
    assert options.worker_args == ("--device-memory-limit", "none", "--rmm-pool-size", "1GB")
    bad = CliRunner().invoke(run, ["--enable-nvlink", "--protocol", "tcp", "--no-tls", "script.py"])
    assert bad.exit_code == 2 and "enable_nvlink=True needs protocol='ucx', not 'tcp'" in bad.output


def test_gpurunner_keywords_are_checked_and_set_for_its_workers(monkeypatch):
    from hpcgpu.runner import api

    monkeypatch.setattr(os, "environ", dict(os.environ))
    os.environ.pop(ENV_VARIABLE, None)
    with pytest.raises(TypeError, match="unexpected keyword argument.*rmm_pool"):
        api._runner_gpu_options({"rmm_pool": "1GB"})
    with pytest.raises(ValueError, match="rmm_pool_size='x' is not a size"):
        api._runner_gpu_options({"rmm_pool_size": "x"})
    assert api._runner_gpu_options({}) is None and ENV_VARIABLE not in os.environ
    options = api._runner_gpu_options({"rmm_pool_size": "1GB", "pre_import": "fractions"})
    assert GPUWorkerOptions.from_env(os.environ) == options
    assert options == GPUWorkerOptions.from_dask_cuda(rmm_pool_size="1GB", pre_import="fractions")


def test_the_batch_keywords_are_localgpuclusters():
    import inspect

    from hpcgpu import LocalGPUCluster

    local = set(inspect.signature(LocalGPUCluster).parameters)
    assert set(GPU_KEYWORDS) <= local and set(SWITCHES) <= set(GPU_KEYWORDS)


def test_hpcgpu_jobscript_takes_the_worker_flags():
    from hpcgpu.cli.jobscript import jobscript

    def run(*args):
        return CliRunner().invoke(jobscript, ["slurm", "--log-directory", LOGS, *args])

    given = run("--rmm-pool-size", "2GB", "--pre-import", "cudf", "--device-memory-limit", "none")
    assert given.exit_code == 0, given.output
    assert parsed(given.output) == GPUWorkerOptions.from_dask_cuda(rmm_pool_size="2GB", pre_import="cudf",
                                                                   device_memory_limit=None)
    plain = run()
    assert plain.exit_code == 0 and "--rmm" not in plain.output and "--device-memory" not in plain.output
    bad = run("--rmm-pool-size", "lots")
    assert bad.exit_code == 2 and "rmm_pool_size='lots' is not a size" in bad.output
