"""Pure functions from :class:`NetworkSettings` to what each role needs.

* :func:`dask_config`: the ``distributed-ucxx.*`` dask config of one role (scheduler,
  worker, client), for ``dask.config.set`` in a process that starts a scheduler or client;
* :func:`job_environment`: the same as ``export`` lines for a job script (``DASK_*`` and
  ``UCX_*`` variables), for ``JobScript(environment=...)``;
* :func:`worker_options` / :func:`scheduler_options`: the protocol and interface
  arguments of ``WorkerCommand`` and of distributed's ``Scheduler``.

Only a role whose process owns a GPU asks UCX for CUDA transports and a CUDA context
(a login node has no GPU); UCX endpoints agree on the transports both sides have.

Processes that hpcgpu starts for a role (workers and their nannies, a scheduler in a job)
also get :data:`QUIET_PROGRESS`: distributed-ucxx's default progress mode waits on each UCX
request with ``await asyncio.sleep(0)`` in a loop, so an idle process spins at 100 % of a core
(distributed keeps a receive pending on every comm); two clusters on one node starve each other.
"""

from __future__ import annotations

from typing import Any

from hpcgpu.network.settings import NetworkSettings

__all__ = [
    "ROLES", "QUIET_PROGRESS", "ucx_flags", "ucx_variables", "dask_config", "config_context", "job_environment",
    "worker_options", "scheduler_options", "client_address",
]

ROLES = ("scheduler", "worker", "client")
#: ucxx's progress thread and Python futures: a process waits for UCX requests asleep
#: instead of polling them (distributed-ucxx reads ``UCXPY_PROGRESS_MODE`` at UCX start).
#: Only for a process with one event loop that UCX serves (python futures are bound to one
#: loop): a worker, its nanny, a scheduler in a job; not the user's process (client).
QUIET_PROGRESS = (("UCXPY_PROGRESS_MODE", "thread"), ("UCXPY_ENABLE_PYTHON_FUTURE", "1"))
#: distributed-ucxx's high-level switches (``distributed-ucxx.<key>``).
_FLAGS = ("tcp", "nvlink", "infiniband", "rdmacm", "cuda-copy", "create-cuda-context")


def _has_gpu(role: str, gpu: bool | None) -> bool:
    if role not in ROLES:
        raise ValueError(f"role={role!r} is not one of {', '.join(ROLES)}")
    return role == "worker" if gpu is None else gpu


def ucx_flags(settings: NetworkSettings, role: str = "worker", gpu: bool | None = None) -> dict[str, bool | None]:
    """distributed-ucxx's switches for one role (``None``: leave it to UCX).

    ``gpu`` says whether the role's process owns a GPU; by default only workers do.

    Examples
    --------
    >>> ib = NetworkSettings.create("ucx", transports="infiniband,nvlink")
    >>> ucx_flags(ib)
    {'tcp': True, 'nvlink': True, 'infiniband': True, 'rdmacm': False, 'cuda-copy': True, 'create-cuda-context': True}
    >>> ucx_flags(ib, "scheduler")  # a login node: no CUDA transports, no CUDA context
    {'tcp': True, 'nvlink': False, 'infiniband': True, 'rdmacm': False, 'cuda-copy': False, 'create-cuda-context': False}
    >>> ucx_flags(NetworkSettings.create("ucx"))  # auto: UCX picks, the worker brings CUDA
    {'tcp': None, 'nvlink': None, 'infiniband': None, 'rdmacm': None, 'cuda-copy': None, 'create-cuda-context': True}
    >>> ucx_flags(NetworkSettings.create("tcp"))
    {}
    """
    gpu = _has_gpu(role, gpu)
    if not settings.is_ucx:
        return {}
    if settings.auto:
        flags: dict[str, bool | None] = dict.fromkeys(_FLAGS)
        flags["create-cuda-context"] = True if gpu else None
        return flags
    chosen = set(settings.transports or ())
    # distributed-ucxx always keeps tcp: UCX needs it to set up connections.
    return {
        "tcp": True,
        "nvlink": gpu and "nvlink" in chosen,
        "infiniband": "infiniband" in chosen,
        "rdmacm": "rdmacm" in chosen,
        "cuda-copy": gpu,
        "create-cuda-context": gpu,
    }


def ucx_variables(settings: NetworkSettings) -> dict[str, str]:
    """The ``UCX_*`` variables the settings set directly.

    Examples
    --------
    >>> ucx_variables(NetworkSettings.create("ucx", net_devices="mlx5_0:1",
    ...                                      ucx_environment={"rndv-scheme": "get_zcopy"}))
    {'UCX_NET_DEVICES': 'mlx5_0:1', 'UCX_RNDV_SCHEME': 'get_zcopy'}
    """
    if not settings.is_ucx:
        return {}
    variables = {"UCX_NET_DEVICES": settings.net_devices} if settings.net_devices else {}
    variables.update(settings.ucx_environment)
    return variables


def dask_config(settings: NetworkSettings, role: str = "worker", gpu: bool | None = None) -> dict[str, Any]:
    """Dotted dask config keys for one role; empty unless the protocol is UCX.

    Examples
    --------
    >>> cfg = dask_config(NetworkSettings.create("ucx", transports="nvlink", net_devices="all"))
    >>> cfg["distributed-ucxx.nvlink"], cfg["distributed-ucxx.environment"]
    (True, {'net-devices': 'all'})
    >>> import dask
    >>> with dask.config.set(cfg):
    ...     dask.config.get("distributed-ucxx.create-cuda-context")
    True
    """
    flags = ucx_flags(settings, role, gpu)
    if not flags:
        return {}
    config: dict[str, Any] = {f"distributed-ucxx.{key}": value for key, value in flags.items()}
    config["distributed-ucxx.environment"] = {
        name[4:].lower().replace("_", "-"): value for name, value in ucx_variables(settings).items()
    }
    return config


def config_context(settings: NetworkSettings, role: str = "scheduler", gpu: bool | None = None):
    """``dask.config.set`` of :func:`dask_config`: use it around starting a scheduler or client.

    UCX is initialised once per process, at its first UCX connection, so the
    configuration in force at that moment is the one that counts.
    """
    import dask

    return dask.config.set(dask_config(settings, role, gpu))


def _env_name(key: str) -> str:
    return "DASK_DISTRIBUTED_UCXX__" + key.upper().replace("-", "_")


def job_environment(settings: NetworkSettings, role: str = "worker", gpu: bool | None = None) -> tuple[tuple[str, str], ...]:
    """``(name, value)`` pairs to export in a job script before the role starts.

    Dask reads ``DASK_DISTRIBUTED_UCXX__*`` into ``distributed-ucxx.*``; ``UCX_*``
    variables go to UCX directly (and win over dask config); a worker or scheduler
    process waits for UCX asleep (:data:`QUIET_PROGRESS`).

    Examples
    --------
    >>> for name, value in job_environment(NetworkSettings.create(
    ...         "ucx", transports="ib,rdmacm,nvlink", net_devices="mlx5_0:1")):
    ...     print(f"{name}={value}")
    DASK_DISTRIBUTED_UCXX__TCP=True
    DASK_DISTRIBUTED_UCXX__NVLINK=True
    DASK_DISTRIBUTED_UCXX__INFINIBAND=True
    DASK_DISTRIBUTED_UCXX__RDMACM=True
    DASK_DISTRIBUTED_UCXX__CUDA_COPY=True
    DASK_DISTRIBUTED_UCXX__CREATE_CUDA_CONTEXT=True
    UCX_NET_DEVICES=mlx5_0:1
    UCXPY_PROGRESS_MODE=thread
    UCXPY_ENABLE_PYTHON_FUTURE=1
    >>> job_environment(NetworkSettings.create("tcp"))
    ()
    """
    flags = ucx_flags(settings, role, gpu)
    pairs = [(_env_name(key), str(value)) for key, value in flags.items() if value is not None]
    pairs += sorted(ucx_variables(settings).items(), key=lambda kv: kv[0] != "UCX_NET_DEVICES")
    if flags and role != "client":
        pairs += QUIET_PROGRESS
    return tuple(pairs)


def worker_options(settings: NetworkSettings) -> dict[str, str | None]:
    """``protocol`` and ``interface`` for :class:`hpcgpu.jobspec.worker_command.WorkerCommand`.

    Examples
    --------
    >>> worker_options(NetworkSettings.create("ucx", scheduler_interface="eth0", worker_interface="ib0"))
    {'protocol': 'ucx', 'interface': 'ib0'}
    """
    return {"protocol": settings.protocol, "interface": settings.worker_interface}


def scheduler_options(settings: NetworkSettings) -> dict[str, Any]:
    """``protocol`` and ``interface`` for distributed's ``Scheduler`` (``scheduler_options``).

    With ``client_protocol`` the scheduler listens twice: UCX for the workers, TCP/TLS
    for a client that has no UCX; lists are what ``Scheduler`` takes for that.

    Examples
    --------
    >>> scheduler_options(NetworkSettings.create("ucx", scheduler_interface="eth0"))
    {'protocol': 'ucx', 'interface': 'eth0'}
    >>> scheduler_options(NetworkSettings.create("ucx", interface="ib0", client_protocol="tls"))
    {'protocol': ['ucx', 'tls'], 'interface': ['ib0', 'ib0'], 'port': [0, 0]}
    """
    if settings.client_protocol is None:
        return {"protocol": settings.protocol, "interface": settings.scheduler_interface}
    interface = settings.scheduler_interface
    return {
        "protocol": [settings.protocol, settings.client_protocol],
        "interface": [interface, interface] if interface else None,
        "port": [0, 0],
    }


def client_address(addresses: list[str] | tuple[str, ...], settings: NetworkSettings) -> str:
    """The scheduler address the client should use, among a scheduler's listeners.

    Examples
    --------
    >>> s = NetworkSettings.create("ucx", client_protocol="tcp")
    >>> client_address(["ucx://10.1.0.5:40001", "tcp://10.1.0.5:40002"], s)
    'tcp://10.1.0.5:40002'
    """
    wanted = settings.client_protocol or settings.protocol
    for address in addresses:
        if address.split("://", 1)[0] == wanted:
            return address
    raise ValueError(
        f"no scheduler address speaks {wanted!r} among {list(addresses)}: start the scheduler "
        "with scheduler_options(settings)"
    )
