"""What ``hpcgpu run`` is asked to do (:class:`BatchOptions`), checked before anything starts."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

from hpcgpu.jobspec.container import Container
from hpcgpu.network import UCX_PROTOCOLS, NetworkSettings, resolve
from hpcgpu.network.advice import log_ucx_hint
from hpcgpu.runner.dashboard import DEFAULT_DASHBOARD

__all__ = ["BatchOptions", "network"]

#: option -> (smallest value, what it is, an example): refused below it, with this message
_NUMBERS = {
    "timeout": (0, "seconds to wait for --min-workers; more than 0", "--timeout 300"),
    "grace": (0, "seconds processes get to stop; 0 or more", "--grace 10"),
    "nthreads": (1, "threads per worker; 1 or more", "--nthreads 1"),
    "min_workers": (1, "workers to wait for; 1 or more, or leave it out for one per GPU",
                    "--min-workers 4"),
    "nodes": (1, "nodes to use; 1 or more, or leave it out for every node of the allocation",
              "--nodes 2"),
    "gpus_per_node": (1, "every worker needs a GPU: 1 or more, or leave it out to count the "
                         "allocation's GPUs (for CPU-only work use distributed.LocalCluster or "
                         "dask-jobqueue)", "--gpus-per-node 4"),
}


def _check_numbers(options: "BatchOptions") -> None:
    """Refuse numbers ``hpcgpu run`` cannot work with, naming the option and the fix.

    Examples
    --------
    >>> BatchOptions("a.py", timeout=-1)
    Traceback (most recent call last):
    ...
    ValueError: --timeout -1: seconds to wait for --min-workers; more than 0 (e.g. --timeout 300)
    """
    for name, (smallest, what, example) in _NUMBERS.items():
        value = getattr(options, name)
        if value is None:
            continue
        bad = not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value)
        if bad or value < smallest or (name == "timeout" and value <= 0) or math.isinf(value):
            shown = f"{value:g}" if isinstance(value, float) else value
            raise ValueError(f"--{name.replace('_', '-')} {shown}: {what} (e.g. {example})")


@dataclass(frozen=True)
class BatchOptions:
    """What ``hpcgpu run`` was asked to do; see ``hpcgpu run --help`` for each field."""

    script: str
    args: tuple[str, ...] = ()
    launcher: str | None = None
    launcher_args: tuple[str, ...] = ()
    nodes: int | None = None
    gpus_per_node: int | None = None
    min_workers: int | None = None
    timeout: float = 300.0
    tls: bool = True
    key_files: bool = True  # False: the certificate in the environment, no file (direct, srun)
    protocol: str | None = None
    interface: str | None = None
    transports: str | None = None
    fallback: str | None = None
    dashboard_address: str | None = DEFAULT_DASHBOARD
    nthreads: int = 1
    memory_limit: str = "auto"
    worker_args: tuple[str, ...] = ()
    work_dir: str | None = None  # None: the per-user private directory (runner.jobdir)
    keep_work_dir: bool = False
    grace: float = 10.0
    python: str = field(default_factory=lambda: sys.executable)
    #: the workers' image (docs/containers.md) and its python; the scheduler and script stay here
    container: Container | None = None
    container_python: str = "python3"

    def __post_init__(self) -> None:
        _check_numbers(self)

    def protocol_name(self) -> str:
        """``ucx``/``ucxx`` as asked (UCX carries no TLS); else ``tls`` with TLS on, or the
        protocol asked for, ``tcp`` by default."""
        if (self.protocol or "").lower() in UCX_PROTOCOLS:
            return self.protocol.lower()
        if self.tls:
            if self.protocol not in (None, "tls"):
                raise ValueError(f"protocol={self.protocol!r} does not carry TLS: "
                                 "use --protocol tls, or --no-tls")
            return "tls"
        return self.protocol or "tcp"


def network(options: BatchOptions) -> NetworkSettings:
    """The run's :class:`~hpcgpu.network.NetworkSettings`, resolved (UCX missing raises,
    or falls back with a warning when ``fallback`` is given).

    Examples
    --------
    >>> network(BatchOptions("a.py", protocol="tcp", tls=False)).protocol
    'tcp'
    """
    fallback = options.fallback
    if fallback is not None and fallback.lower() in ("true", "yes", "1"):
        fallback = "tls" if options.tls else "tcp"
    net = NetworkSettings.create(options.protocol_name(), options.transports or "auto",
                                 options.interface, fallback=fallback)
    net = resolve(net)
    log_ucx_hint(net.protocol, "--protocol ucx",
                 say=lambda text: print(f"hpcgpu run: {text}", file=sys.stderr, flush=True))
    return net


