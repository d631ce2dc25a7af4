"""The environment of a benchmark run, asked of the workers themselves.

GPU model, driver and library versions come from the workers (that is where the work
runs), through NVML and package metadata: nothing CUDA-related is imported to find them.
"""

from __future__ import annotations

import math
import os
import platform
import socket
from importlib import metadata, util

from hpcgpu.bench.records import Environment

__all__ = ["LIBRARIES", "worker_facts", "describe", "backends"]

#: distributions whose versions the results carry (those not installed are left out)
LIBRARIES = ("numpy", "pandas", "cupy-cuda13x", "cupy-cuda12x", "cudf-cu13", "cudf-cu12",
             "dask-cudf-cu13", "dask-cudf-cu12", "rmm-cu13", "rmm-cu12", "dask-cuda",
             "distributed-ucxx-cu13", "distributed-ucxx-cu12", "ucxx-cu13", "ucxx-cu12",
             "nvidia-ml-py")


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def worker_facts() -> dict:
    """Facts about the calling process (run on each worker through ``client.run``).

    Examples
    --------
    >>> facts = worker_facts()
    >>> sorted(facts)[:4], isinstance(facts["gpu"], bool)
    (['cudf', 'cupy', 'driver', 'gpu'], True)
    """
    from hpcgpu.worker.gpuinfo import count_gpus, describe_gpu

    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip() or "0"
    gpus = count_gpus()
    info = describe_gpu(visible) if gpus else None
    driver = None
    if gpus:
        try:
            import pynvml

            driver = pynvml.nvmlSystemGetDriverVersion()
            driver = driver.decode() if isinstance(driver, bytes) else driver
        except Exception:  # NVML without the call: leave it out
            driver = None
    return {
        "node": os.environ.get("SLURMD_NODENAME") or socket.gethostname(),
        "gpu": bool(gpus),
        "gpu_model": info.model if info else None,
        "driver": driver,
        "cupy": util.find_spec("cupy") is not None,
        "cudf": util.find_spec("cudf") is not None and util.find_spec("dask_cudf") is not None,
        "versions": {n: v for n in LIBRARIES if (v := _version(n))},
    }


def backends(facts: list[dict]) -> tuple[str, str]:
    """(array backend, dataframe backend) that every worker in ``facts`` supports.

    Examples
    --------
    >>> backends([{"gpu": True, "cupy": True, "cudf": False}])
    ('cupy', 'pandas')
    >>> backends([{"gpu": True, "cupy": True, "cudf": True}, {"gpu": False, "cupy": True, "cudf": True}])
    ('numpy', 'pandas')
    """
    gpu = bool(facts) and all(f["gpu"] and f["cupy"] for f in facts)
    frame = gpu and all(f["cudf"] for f in facts)
    return ("cupy" if gpu else "numpy"), ("cudf" if frame else "pandas")


def describe(client, workers: list[str], cluster: str, path: str, protocol: str) -> tuple[Environment, list[dict]]:
    """Ask ``workers`` for their facts; return the Environment and the raw facts."""
    import dask
    import distributed

    answers = client.run(worker_facts, workers=workers)
    facts = [answers[w] for w in workers if w in answers]
    nodes = len({f["node"] for f in facts}) or 1
    first = facts[0] if facts else {}
    array, frame = backends(facts)
    versions = dict(sorted((first.get("versions") or {}).items()))
    env = Environment(
        cluster=cluster, path=path, protocol=protocol, nodes=nodes,
        gpus_per_node=math.ceil(len(workers) / nodes), hostname=socket.gethostname(),
        gpu_model=first.get("gpu_model"), driver=first.get("driver"),
        backend=f"{array}/{frame}", hpcgpu_version=_version("hpcgpu"), dask_version=dask.__version__,
        distributed_version=distributed.__version__, python_version=platform.python_version(),
        versions=tuple(versions.items()),
    )
    return env, facts
