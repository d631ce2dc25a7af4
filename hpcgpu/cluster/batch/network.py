"""A cluster's communication settings, from its options and its security, resolved once.

Cluster mode passes the result to the scheduler (:func:`hpcgpu.network.scheduler_options`,
in :func:`hpcgpu.network.config_context`), to every job (``--protocol``/``--interface``
of the workers and the ``UCX_*``/``DASK_DISTRIBUTED_UCXX__*`` exports of the script) and
to the client (:func:`hpcgpu.network.client_address`). See docs/networking.md.
"""

from __future__ import annotations

from typing import Any

from hpcgpu.network import NetworkSettings, job_environment, resolve, scheduler_options
from hpcgpu.network.advice import log_ucx_hint
from hpcgpu.network.dashboard import dashboard_host, dashboard_link  # re-exported
from hpcgpu.network.tls import check_plain_protocol

__all__ = ["cluster_network", "dashboard_host", "dashboard_link", "jobqueue_options"]


def cluster_network(options: dict[str, Any], security: Any, scheduler_in_job: bool = False,
                    own: dict[str, Any] | None = None) -> NetworkSettings:
    """The :class:`~hpcgpu.network.NetworkSettings` of one cluster.

    ``protocol`` defaults to ``tls`` with security on, ``tcp`` without; ``fallback=True``
    follows the same rule. With UCX the scheduler runs outside this process (in a job with
    ``scheduler_in_job``, else in a process of its own here:
    :mod:`~hpcgpu.cluster.batch.scheduler_apart`) and the client reaches it through a second
    listener (``client_protocol``, by default ``tls``/``tcp`` likewise); with
    ``scheduler_in_job`` UCX is not checked here (the login node need not have it: the
    workers fail early, with the fix, where it is missing). The interface the scheduler listens on
    here must exist here: ``own`` (the user's ``scheduler_options``) names it, or a host,
    where given; the workers' ``interface`` is then the compute hosts' alone.

    Examples
    --------
    >>> cluster_network({"protocol": "ucx", "interface": "ib0"}, security=None, scheduler_in_job=True)
    ... # doctest: +NORMALIZE_WHITESPACE
    NetworkSettings(protocol='ucx', transports=None, scheduler_interface='ib0',
        worker_interface='ib0', net_devices=None, client_protocol='tcp', fallback=None,
        ucx_environment=())
    >>> cluster_network({}, security=object()).protocol
    'tls'
    >>> cluster_network({"protocol": "ucx", "client_protocol": "tls"}, security=None)
    Traceback (most recent call last):
    ...
    ValueError: client_protocol='tls' needs security (a Security with certificates, or the default security=None/True): pass security=True or client_protocol='tcp'
    """
    secure = "tls" if security else "tcp"
    protocol = options.get("protocol") or secure
    fallback = secure if options.get("fallback") is True else options.get("fallback")
    client_protocol = options.get("client_protocol")
    if client_protocol is None and str(protocol).lower().startswith("ucx"):
        client_protocol = secure
    net = NetworkSettings.create(
        protocol, options.get("transports") or "auto", options.get("interface"),
        scheduler_interface=options.get("scheduler_interface"),
        worker_interface=options.get("worker_interface"), net_devices=options.get("net_devices"),
        client_protocol=client_protocol, fallback=fallback,
        ucx_environment=options.get("ucx_environment") or None,
    )
    _check_protocols(net, security)
    if not scheduler_in_job and not (own or {}).get("host"):
        _check_scheduler_interface((own or {}).get("interface") or net.scheduler_interface)
    # With the scheduler in a job and a second listener, this process never speaks UCX.
    net = resolve(net, reason=None if scheduler_in_job and net.client_protocol else "check")
    log_ucx_hint(net.protocol, "protocol='ucx'")
    return net


def _check_protocols(net: NetworkSettings, security: Any) -> None:
    check_plain_protocol(net.protocol, security)
    check_plain_protocol(net.client_protocol, security, "client_protocol")
    if net.protocol == "ucx+auth":
        raise ValueError("protocol='ucx+auth' is not available in cluster mode yet (its jobs get no "
                         "key file): use protocol='tls' (default) or 'ucx'; hpcgpu run and "
                         "LocalGPUCluster take 'ucx+auth' (docs/networking.md)")
    if "tls" in (net.protocol, net.client_protocol) and not security:
        raise ValueError(
            f"{'client_protocol' if net.client_protocol == 'tls' else 'protocol'}='tls' needs "
            "security (a Security with certificates, or the default security=None/True): pass "
            f"security=True or {'client_protocol' if net.client_protocol == 'tls' else 'protocol'}='tcp'"
        )


def _check_scheduler_interface(interface: str | None) -> None:
    """The scheduler starts in this process: its interface must be here (else distributed's
    ValueError comes from deep inside the cluster's start)."""
    import socket

    from hpcgpu.worker.reach import host_interfaces, interface_problem

    problem = interface_problem(
        interface, socket.gethostname(), host_interfaces(), role=", where the scheduler runs",
        fix="pass interface= naming a network this host and the compute hosts share (e.g. "
            "interface={example!r}), or scheduler_interface= for the scheduler alone; `hpcgpu doctor` "
            "on a compute host lists its interfaces")
    if problem is not None:
        raise ValueError(problem)


def jobqueue_options(setup: Any, net: NetworkSettings) -> dict[str, Any]:
    """What ``JobQueueCluster`` gets of a cluster's network, for GPU or CPU workers."""
    return dict(
        # The scheduler's own interface: dask-jobqueue's `interface` must not feed it.
        # CPU workers: dask-jobqueue's rule (interface feeds it unless host/interface given).
        scheduler_options=setup.scheduler_options if setup.cpu else {
            **scheduler_options(net), **setup.scheduler_options},
        interface=net.worker_interface,
        # CPU workers: dask-jobqueue's own rule (the given protocol, or tls:// with TLS).
        protocol=setup.network_options["protocol"] if setup.cpu else net.protocol,
        environment=job_environment(net, "worker"),
    )
