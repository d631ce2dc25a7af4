"""GPUWorkerOptions: dask-cuda's GPU worker keywords parsed into one value (pure; hypothesis)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from hpcgpu.jobspec.gpuflags import flag_argv, gpu_flags, options_from_flags
from hpcgpu.jobspec.gpuoptions import (GPUWorkerOptions, parse_cuda_visible_devices,
                                   ucx_transport_config)

MIG_OUTPUTS = sorted((Path(__file__).parents[1] / "data" / "nvidia-smi-L").glob("*.txt"))

sizes = st.one_of(
    st.none(),
    st.integers(min_value=1, max_value=2**44),
    st.floats(min_value=0.01, max_value=1.0),
    st.builds(lambda n, unit: f"{n}{unit}", st.integers(1, 4096), st.sampled_from(["B", "kB", "MB", "GB", "GiB", "MiB"])),
)
tristate = st.sampled_from([None, True, False])
modules = st.lists(st.sampled_from(["cudf", "rmm", "cupy", "numpy", "json"]), min_size=1, max_size=3, unique=True)


@st.composite
def dask_cuda_keywords(draw) -> dict:
    """A valid subset of LocalCUDACluster's GPU keywords."""
    kw: dict = {}
    if draw(st.booleans()):
        kw["device_memory_limit"] = draw(st.one_of(sizes, st.sampled_from(["default", "auto"])))
    if draw(st.booleans()):
        kw["enable_cudf_spill"], kw["cudf_spill_stats"] = True, draw(st.integers(0, 2))
    use_async = draw(st.booleans())
    if use_async:
        kw["rmm_async"] = True
        if draw(st.booleans()):
            kw["rmm_release_threshold"] = draw(sizes)
    else:
        kw["rmm_managed_memory"] = draw(st.booleans())
        if draw(st.booleans()):
            kw["rmm_pool_size"] = draw(sizes)
            if kw["rmm_pool_size"] not in (None, "auto"):
                kw["rmm_maximum_pool_size"] = draw(sizes)
    if draw(st.booleans()):
        kw["rmm_allocator_external_lib_list"] = draw(st.sampled_from(["cupy", "torch", "cupy,torch", ["torch"]]))
    if draw(st.booleans()):
        kw["pre_import"] = draw(st.one_of(modules, modules.map(",".join)))
    for name in ("rmm_track_allocations", "log_spilling", "cpu_affinity"):
        if draw(st.booleans()):
            kw[name] = draw(st.booleans())
    for name in ("enable_tcp_over_ucx", "enable_infiniband", "enable_rdmacm"):
        kw[name] = draw(tristate)
    if kw.get("enable_rdmacm") and kw.get("enable_infiniband") is False:
        kw["enable_infiniband"] = True
    if not kw.get("rmm_managed_memory"):
        kw["enable_nvlink"] = draw(tristate)
    return kw


@settings(max_examples=200, deadline=None)
@given(dask_cuda_keywords())
def test_every_valid_combination_travels_to_the_worker_unchanged(kw):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        options = GPUWorkerOptions.from_dask_cuda(**kw)
    assert GPUWorkerOptions.from_env(options.to_env()) == options
    for name, value in kw.items():
        got = getattr(options, name)
        if name in ("pre_import", "rmm_allocator_external_lib_list"):
            value = tuple(value.split(",")) if isinstance(value, str) else tuple(value)
        assert got == value, name
    rmm_given = any(k.startswith("rmm_") and k != "rmm_pool_size" and kw[k] not in (None, False) for k in kw)
    if "rmm_pool_size" not in kw:
        assert options.rmm_pool_size == (None if rmm_given else "auto")  # hpcgpu's pool only when no rmm_* given


def _as_text(kw: dict) -> dict:
    """The same keywords as a command line spells them (sizes are strings there)."""
    return {k: (str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("cudf_spill_stats",)
                else v) for k, v in kw.items()}


@click.command()
@gpu_flags
def _entry(**values):
    click.echo(repr(options_from_flags(values)))


@settings(max_examples=100, deadline=None)
@given(dask_cuda_keywords())
def test_the_entry_point_flags_carry_the_same_options(kw):
    import warnings

    kw.pop("log_spilling", None)  # LocalCUDACluster's only: dask cuda worker has no such flag
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        options = GPUWorkerOptions.from_dask_cuda(**_as_text(kw))
        result = CliRunner().invoke(_entry, flag_argv(options), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.strip() == repr(options)


@given(st.lists(st.integers(0, 64), min_size=1, max_size=8, unique=True))
def test_cuda_visible_devices_as_a_list_or_a_string_are_the_same(devices):
    as_list = parse_cuda_visible_devices(devices)
    assert as_list == [str(d) for d in devices]
    assert parse_cuda_visible_devices(",".join(map(str, devices))) == as_list
    assert parse_cuda_visible_devices(" , ".join(map(str, devices))) == as_list


@given(st.text(min_size=1, max_size=12).filter(lambda t: "," not in t and not t.strip().isdigit()
                                                and not t.strip().startswith(("GPU-", "MIG-"))))
def test_anything_else_in_cuda_visible_devices_is_refused_naming_the_accepted_forms(junk):
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES: .* neither a device index nor a UUID"):
        parse_cuda_visible_devices(["0", junk])


def _devices_from_nvidia_smi_L(text: str) -> list[str]:
    """What CUDA can use from ``nvidia-smi -L``: the MIG devices of a GPU in MIG mode, the
    GPU itself otherwise."""
    gpus: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        uuid = re.search(r"\(UUID: ((?:GPU|MIG)-[^)]+)\)", line)
        if line.startswith("#") or not uuid:
            continue
        if uuid.group(1).startswith("GPU-"):
            gpus.append((uuid.group(1), []))
        else:
            gpus[-1][1].append(uuid.group(1))
    return [d for gpu, migs in gpus for d in (migs or [gpu])]


@pytest.mark.parametrize("path", MIG_OUTPUTS, ids=[p.stem for p in MIG_OUTPUTS])
def test_mig_and_gpu_uuids_from_real_nvidia_smi_outputs(path):
    text = path.read_text()
    assert text.startswith("# source: https://")
    devices = _devices_from_nvidia_smi_L(text)
    assert devices and len(set(devices)) == len(devices)
    assert parse_cuda_visible_devices(",".join(devices)) == devices
    assert parse_cuda_visible_devices(devices) == devices
    assert any(d.startswith("MIG-") for d in devices)


def test_gpu_uuids_from_a_captured_nvidia_smi_output():
    text = (Path(__file__).parents[1] / "data" / "nvidia-smi-L.2xH200.txt").read_text()  # lent 2 x H200
    devices = _devices_from_nvidia_smi_L(text)
    assert len(devices) == 2 and parse_cuda_visible_devices(",".join(devices)) == devices


def test_the_legacy_mig_device_form_is_taken():
    # the form drivers before R470 printed, as quoted in NVIDIA/nvidia-container-toolkit#203
    legacy = "MIG-GPU-932bfb2c-849a-2a22-1e84-9eff6bc02b39/1/0"
    assert parse_cuda_visible_devices(legacy) == [legacy]


def test_a_device_named_twice_is_refused():
    with pytest.raises(ValueError, match="names a device twice"):
        parse_cuda_visible_devices("0,1,0")


@pytest.mark.parametrize("kw, message", [
    (dict(rmm_async=True, rmm_managed_memory=True), "incompatible with rmm_async"),
    (dict(rmm_release_threshold="1GB"), "rmm_release_threshold needs rmm_async"),
    (dict(rmm_maximum_pool_size="4GB"), "rmm_maximum_pool_size needs rmm_pool_size"),
    (dict(enable_nvlink=True, rmm_managed_memory=True), "incompatible with enable_nvlink"),
    (dict(enable_rdmacm=True, enable_infiniband=False), "enable_rdmacm=True needs InfiniBand"),
    (dict(rmm_pool_size="huge"), "rmm_pool_size='huge' is not a size"),
    (dict(rmm_pool_size="auto", rmm_managed_memory=True), "rmm_pool_size='auto' (hpcgpu's pool) takes no rmm_managed_memory"),
    (dict(device_memory_limit=-1), "device_memory_limit=-1 is not a size"),
    (dict(device_memory_limit=True), "device_memory_limit=True is not a size"),
    (dict(cudf_spill_stats=-1), "cudf_spill_stats=-1"),
    (dict(pre_import=3), "pre_import=3 must be a comma-separated string"),
    (dict(rmm_allocator_external_lib_list="cupy,jax"), "'jax' is not one of 'cupy', 'torch'"),
])
def test_contradictory_or_bad_keywords_fail_naming_the_field(kw, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        GPUWorkerOptions.from_dask_cuda(**kw)


def test_an_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="rmm_pool"):
        GPUWorkerOptions.from_dask_cuda(rmm_pool="1GB")


def test_a_pool_with_the_async_allocator_warns_as_dask_cuda_does():
    with pytest.warns(FutureWarning, match="'rmm_pool_size' is not needed when 'rmm_async' is enabled"):
        GPUWorkerOptions.from_dask_cuda(rmm_pool_size="1GB", rmm_async=True)


@given(tristate, tristate, tristate, tristate)
def test_transport_switches_follow_dask_cudas_rule(tcp, ib, nvlink, rdmacm):
    config = ucx_transport_config(tcp, ib, nvlink, rdmacm)
    only_disabled = any(v is False for v in (tcp, ib, nvlink)) and not any(v is True for v in (tcp, ib, nvlink))
    for key, value in (("tcp", tcp), ("infiniband", ib), ("nvlink", nvlink)):
        assert config[f"distributed-ucxx.{key}"] == (True if only_disabled and value is None else value)
    assert config["distributed-ucxx.rdmacm"] == rdmacm
    enabled = any(config[f"distributed-ucxx.{k}"] for k in ("tcp", "infiniband", "nvlink"))
    assert config["distributed-ucxx.cuda-copy"] == (True if enabled else None)


def test_a_gpu_worker_without_dask_cuda_keeps_cupys_pool_and_says_what_to_install(monkeypatch, caplog):
    """The worker's branch on a GPU host where dask-cuda is not installed (faked device)."""
    import sys

    import hpcgpu.worker.gpusetup as gs
    import hpcgpu.worker.gpuworker as gw

    monkeypatch.setattr(gs, "dask_cuda_present", lambda: False)
    monkeypatch.setattr(gw, "dask_cuda_present", lambda: False)
    monkeypatch.setattr(gw, "_device_memory", lambda gpu: (8 * 10**9, 10**10))
    monkeypatch.delitem(sys.modules, "fractions", raising=False)
    kwargs = {"memory_limit": 10**9, "nthreads": 1}
    with caplog.at_level("WARNING", logger="distributed.hpcgpu"):
        done = gw.prepare_gpu(GPUWorkerOptions(pre_import=("fractions",), cpu_affinity=False), "0", kwargs)
    assert done["allocator"].startswith("cupy-pool (dask-cuda not installed: install hpcgpu's GPU extras")
    assert "data" not in kwargs and "plugins" not in kwargs and "fractions" in sys.modules
    assert "no spilling from device to host memory" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="distributed.hpcgpu"):
        dask_cuda_meaning = gw.prepare_gpu(GPUWorkerOptions.from_dask_cuda(rmm_pool_size="1GB"), "0", {})
    assert dask_cuda_meaning["allocator"] is None  # dask-cuda's RMMSetup is not there to make it
    assert "the rmm_* options are dask-cuda's and it is not installed" in caplog.text


@pytest.mark.gpu
def test_the_workers_device_memory_comes_from_nvml_without_a_cuda_context():
    """Asking CUDA would create the process's context before the worker starts (about 0.9 s
    on an H100): NVML answers, and NVML shows no context of this process afterwards."""
    import subprocess
    import sys

    code = ("import os, sys, pynvml\n"
            "from hpcgpu.worker.gpuworker import _device_memory\n"
            "free, total = _device_memory('0')\n"
            "handle = pynvml.nvmlDeviceGetHandleByIndex(0)\n"
            "mine = [p for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid == os.getpid()]\n"
            "print(total == pynvml.nvmlDeviceGetMemoryInfo(handle).total, 0 < free <= total, mine, 'cupy' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["True", "True", "[]", "False"], done.stderr


class _NVML:
    """NVML's calls that ``_device_memory`` makes, answering for any device it is asked for."""

    def __init__(self):
        self.asked: list[str] = []

    def nvmlDeviceGetHandleByIndex(self, index):
        self.asked.append(str(index))
        return index

    def nvmlDeviceGetMemoryInfo(self, handle):
        return type("Memory", (), {"free": 6, "total": 8})()


@pytest.mark.parametrize("visible, gpu, asked", [
    ("", None, []),  # hpcgpu's CPU mode on a GPU host: no device, though NVML sees them
    (None, None, ["0"]), ("3,1", None, ["3"]), ("", "2", ["2"]), ("3,1", "1", ["1"])])
def test_the_device_whose_memory_the_worker_asks_for(monkeypatch, visible, gpu, asked):
    import hpcgpu.worker.gpuworker as gw

    nvml = _NVML()
    monkeypatch.setattr(gw, "nvml_library", lambda: nvml)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gw._device_memory(gpu) == ((6, 8) if asked else None)
    assert nvml.asked == asked


def test_without_rmm_the_default_pool_is_cupys_and_an_asked_one_names_what_to_install(monkeypatch):
    """dask-cuda does not require RMM (its wheel's Requires-Dist has no rmm): with
    dask-cuda alone, a worker's default pool is CuPy's own and says why; an RMM pool asked
    for (``rmm_pool_size``, ``rmm_async``) fails at once naming the keyword and the extra.
    Before, every worker died of ``No module named 'rmm'`` (seen on one H200)."""
    import sys

    from hpcgpu.worker import gpusetup

    monkeypatch.setattr(gpusetup, "dask_cuda_present", lambda: True)
    monkeypatch.setitem(sys.modules, "rmm", None)  # import rmm raises ImportError
    kept = []
    monkeypatch.setattr(gpusetup, "keep_cupys_pool", lambda: kept.append(True))
    described = gpusetup.setup_rmm("auto", 80 * 2**30, 70 * 2**30)
    assert described.startswith("cupy-pool (rmm not installed: pip install 'hpcgpu[cuda12]'") and kept
    with pytest.raises(ImportError, match=r"^rmm_pool_size='2GiB' needs RMM, which is not installed: pip install"):
        gpusetup.setup_rmm("2GiB", 80 * 2**30)
    with pytest.raises(ImportError, match=r"^rmm_async=True needs RMM"):
        gpusetup.setup_rmm("auto", 80 * 2**30, rmm_async=True)
