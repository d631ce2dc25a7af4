"""LocalGPUCluster takes dask_cuda.LocalCUDACluster's signature (26.10) and LocalCluster's keywords."""

from __future__ import annotations

import inspect
import json
import os
import sys
from pathlib import Path

import pytest
from distributed import Client, LocalCluster, Nanny, Worker
from distributed.deploy.spec import SpecCluster
from distributed.system import MEMORY_LIMIT

from hpcgpu import LocalGPUCluster
from hpcgpu.cluster.local.spec import CLUSTER_KEYWORDS, SCHEDULER_KEYWORDS
from hpcgpu.worker.gpuinfo import count_gpus
from hpcgpu.worker.forkstart import ForkServerNanny
from hpcgpu.worker.gpuworker import GPUWorker
from hpcgpu.jobspec.gpuoptions import ENV_VARIABLE, GPUWorkerOptions

#: dask_cuda.LocalCUDACluster.__init__'s parameters, dask-cuda 26.10.0, in order
DASK_CUDA_26_10 = ["CUDA_VISIBLE_DEVICES", "n_workers", "threads_per_worker", "memory_limit",
                   "device_memory_limit", "enable_cudf_spill", "cudf_spill_stats", "local_directory",
                   "protocol", "enable_tcp_over_ucx", "enable_infiniband", "enable_nvlink", "enable_rdmacm",
                   "rmm_pool_size", "rmm_maximum_pool_size", "rmm_managed_memory", "rmm_async",
                   "rmm_allocator_external_lib_list", "rmm_release_threshold", "rmm_log_directory",
                   "rmm_track_allocations", "log_spilling", "pre_import"]
MIG = Path(__file__).parents[1] / "data" / "nvidia-smi-L" / "a100-80gb-7x1g.10gb.txt"


def _ours() -> list[str]:
    return [p for p in inspect.signature(LocalGPUCluster.__init__).parameters if p != "self"]


def test_the_dask_cuda_signature_in_its_order():
    assert _ours()[:len(DASK_CUDA_26_10)] == DASK_CUDA_26_10


def test_the_live_dask_cuda_signature_where_dask_cuda_is_installed():
    dask_cuda = pytest.importorskip("dask_cuda", reason="dask-cuda is in the GPU extras only")
    live = [p for p in inspect.signature(dask_cuda.LocalCUDACluster.__init__).parameters if p not in ("self", "kwargs")]
    assert live == DASK_CUDA_26_10


def test_every_local_cluster_keyword_has_a_place():
    handled = set(_ours()) | set(CLUSTER_KEYWORDS) | set(SCHEDULER_KEYWORDS) | {
        "processes", "ip", "start", "diagnostics_port", "worker_dashboard_address", "worker_services",
        "scheduler_kwargs", "threads_per_worker"}
    local = [p for p in inspect.signature(LocalCluster.__init__).parameters if p not in ("self", "worker_kwargs")]
    assert [p for p in local if p not in handled] == []


@pytest.fixture
def specs(monkeypatch):
    """LocalGPUCluster(...) builds its specs; nothing starts."""
    seen = {}

    def capture(self, workers=None, scheduler=None, **kwargs):
        seen.update(workers=workers, scheduler=scheduler, cluster=kwargs)

    monkeypatch.setattr(SpecCluster, "__init__", capture)

    def build(**kw):
        seen.clear()
        cluster = LocalGPUCluster(**kw)
        return cluster, seen["workers"], seen["scheduler"]["options"], seen["cluster"]

    return build


def _options(spec: dict) -> GPUWorkerOptions:
    return GPUWorkerOptions.from_env(spec["options"]["env"])


def test_each_dask_cuda_keyword_reaches_the_workers(specs):
    kw = dict(device_memory_limit="30B", enable_cudf_spill=True, cudf_spill_stats=2, rmm_pool_size="2GB",
              rmm_maximum_pool_size="3GB", rmm_managed_memory=True, rmm_allocator_external_lib_list="cupy,torch",
              rmm_log_directory="/tmp/rmm", rmm_track_allocations=True, pre_import=["json"],
              enable_infiniband=True, enable_rdmacm=True)
    cluster, workers, scheduler, _ = specs(CUDA_VISIBLE_DEVICES="0,1", protocol="ucx", security=False, **kw)
    for spec in workers.values():
        options = _options(spec)
        for name, value in kw.items():
            expected = tuple(value.split(",")) if name == "rmm_allocator_external_lib_list" else \
                tuple(value) if name == "pre_import" else value
            assert getattr(options, name) == expected, name
        assert spec["options"]["config"]["distributed-ucxx.infiniband"] is True
        assert spec["options"]["worker_class"] is GPUWorker and spec["cls"] is ForkServerNanny
    assert scheduler["protocol"] == "ucx"
    async_options = _options(next(iter(specs(gpus=["0"], rmm_async=True, rmm_release_threshold="3GB",
                                             security=False)[1].values())))
    assert (async_options.rmm_async, async_options.rmm_release_threshold, async_options.rmm_pool_size) == (True, "3GB", None)


def test_devices_workers_threads_memory_and_local_cluster_keywords(specs):
    devices = [line.split("UUID: ")[1].rstrip(")") for line in MIG.read_text().splitlines() if "UUID: MIG-" in line]
    cluster, workers, scheduler, rest = specs(
        CUDA_VISIBLE_DEVICES=",".join(devices), n_workers=3, threads_per_worker=4, memory_limit="auto",
        scheduler_port=8786, dashboard_address="localhost:8788", interface="lo", security=False,
        local_directory="/tmp/x", death_timeout=30, name="c1", worker_dashboard_address=":0",
        scheduler_kwargs={"idle_timeout": 60}, silence_logs=40)
    assert cluster.gpus == devices and len(workers) == 3
    firsts = [spec["options"]["env"]["CUDA_VISIBLE_DEVICES"].split(",") for spec in workers.values()]
    assert [f[0] for f in firsts] == devices[:3] and all(sorted(f) == sorted(devices) for f in firsts)
    assert [spec["options"]["env"]["HPCGPU_GPU"] for spec in workers.values()] == devices[:3]
    options = next(iter(workers.values()))["options"]
    assert (options["nthreads"], options["memory_limit"], options["local_directory"], options["death_timeout"],
            options["interface"], options["dashboard_address"], options["dashboard"]) == \
        (4, int(MEMORY_LIMIT / 3), "/tmp/x", 30, "lo", ":0", True)
    assert (scheduler["port"], scheduler["dashboard_address"], scheduler["interface"], scheduler["idle_timeout"]) == \
        (8786, "localhost:8788", "lo", 60)
    assert rest["name"] == "c1"


def test_worker_class_as_dask_cuda_takes_it(specs):
    class MyWorker(Worker):
        pass

    class MyNanny(Nanny):
        pass

    _, workers, _, _ = specs(gpus=[], n_workers=1, worker_class=MyWorker, security=False)
    spec = next(iter(workers.values()))
    assert (spec["cls"], spec["options"]["worker_class"]) == (ForkServerNanny, MyWorker)
    _, workers, _, _ = specs(gpus=[], n_workers=1, worker_class=MyNanny, security=False)
    spec = next(iter(workers.values()))
    assert (spec["cls"], spec["options"]["worker_class"]) == (MyNanny, GPUWorker)


@pytest.mark.parametrize("kw, error, message", [
    (dict(CUDA_VISIBLE_DEVICES="0", gpus=["0"]), ValueError, "give the GPUs once"),
    (dict(CUDA_VISIBLE_DEVICES="0,x"), ValueError, "'x' is neither a device index nor a UUID"),
    (dict(CUDA_VISIBLE_DEVICES="0", n_workers=2), ValueError, "n_workers=2 but only 1 GPUs"),
    (dict(gpus=[], processes=False), ValueError, "processes=False"),
    (dict(gpus=[], log_spilling=True, worker_class=Worker), ValueError, "log_spilling=True cannot be combined"),
    (dict(gpus=[], enable_nvlink=True, protocol="tcp"), TypeError, "needs protocol='ucx'"),
    (dict(gpus=[], rmm_release_threshold="1GB"), ValueError, "rmm_release_threshold needs rmm_async"),
    (dict(gpus=[], rmm_async=True, rmm_managed_memory=True), ValueError, "incompatible with rmm_async"),
    (dict(gpus=[], threads_per_worker=0), ValueError, "threads_per_worker=0"),
    (dict(gpus=[], device_memory_limit="x"), ValueError, "device_memory_limit='x' is not a size"),
])
def test_contradictory_keywords_fail_before_anything_starts(specs, kw, error, message):
    with pytest.raises(error, match=message):
        specs(security=False, **kw)


def test_a_pool_with_the_async_allocator_warns_as_dask_cuda_does(specs):
    with pytest.warns(FutureWarning, match="'rmm_pool_size' is not needed"):
        specs(gpus=[], rmm_pool_size="1GB", rmm_async=True, security=False)


@pytest.mark.skipif(count_gpus() > 0, reason="the CPU path: on a GPU machine indices 0 and 1 name real "
                    "devices (the GPU tests and dask-cuda's own suite cover that machine)")
def test_local_cuda_cluster_keywords_start_workers_on_the_cpu():
    """dask-cuda's first test's shape, on two "GPUs" by index (CPU workers without a driver)."""
    with LocalGPUCluster(CUDA_VISIBLE_DEVICES=[0, 1], n_workers=2, threads_per_worker=2, scheduler_port=0,
                         dashboard_address="localhost:0", pre_import="fractions", memory_limit=None,
                         device_memory_limit=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(2, timeout=120)
        seen = client.run(lambda dask_worker: (os.environ["CUDA_VISIBLE_DEVICES"], dask_worker.state.nthreads,
                                               "fractions" in sys.modules, dask_worker.memory_manager.memory_limit,
                                               json.loads(os.environ[ENV_VARIABLE])["device_memory_limit"]))
        assert sorted(seen.values()) == [("0,1", 2, True, None, None), ("1,0", 2, True, None, None)]
        assert sorted(ws.name for ws in cluster.scheduler.workers.values()) == [0, 1]  # as dask-cuda names them
        assert cluster.dashboard_link.startswith("http://localhost:")
        with pytest.raises(ValueError, match="all 2 local GPUs have a worker"):
            cluster.scale(1000)


def test_gpu_workers_are_named_after_their_device_as_in_dask_cuda(specs):
    _, workers, _, _ = specs(CUDA_VISIBLE_DEVICES="3,GPU-53ed329a-42bf-70e2-1495-c8d8909a8616", security=False)
    assert list(workers) == [3, "GPU-53ed329a-42bf-70e2-1495-c8d8909a8616"]
    _, workers, _, _ = specs(gpus=[], n_workers=2, security=False)
    assert [str(name).rsplit("-", 2)[1:] for name in workers] == [["0", "0"], ["0", "1"]]


def test_the_ucx_switches_hold_for_the_start_only(monkeypatch):
    """The transport switches (enable_rdmacm...) are the scheduler's UCX while it starts, and
    then the process's Dask configuration is as it was: they once stayed set, and a later
    UCX listener of the same process found no transport (``UCXXUnsupportedError``)."""
    import dask

    seen = {}

    async def start(self):
        seen["during"] = dask.config.get("distributed-ucxx.rdmacm", None)
        raise RuntimeError("not starting")

    monkeypatch.setattr(SpecCluster, "_start", start)
    before = dask.config.get("distributed-ucxx.rdmacm", None)
    with pytest.raises(RuntimeError, match="not starting"):
        LocalGPUCluster(gpus=[], n_workers=0, protocol="ucx", enable_tcp_over_ucx=True, enable_rdmacm=True,
                        security=False)
    assert seen["during"] is True
    assert dask.config.get("distributed-ucxx.rdmacm", None) == before
