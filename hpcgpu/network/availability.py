"""Whether UCX can be used in this process, and the TCP fallback when it cannot.

Call :func:`resolve` once, before anything is submitted: a UCX scheduler that cannot
load distributed-ucxx fails late and obscurely ("unknown address scheme 'ucx'").
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import logging
import warnings

from hpcgpu.network.settings import NetworkSettings

__all__ = ["UCXUnavailableError", "UCXFallbackWarning", "ucx_unavailable_reason", "resolve", "INSTALL_HINT"]

logger = logging.getLogger("hpcgpu.network")

INSTALL_HINT = (
    "install distributed-ucxx into the environment of the scheduler, the workers and the "
    "client (pip install 'hpcgpu[ucx]', i.e. distributed-ucxx-cu12; distributed-ucxx-cu13 "
    "for CUDA 13)"
)


class UCXUnavailableError(ImportError):
    """UCX was asked for but distributed-ucxx cannot be loaded here."""


class UCXFallbackWarning(RuntimeWarning):
    """UCX was asked for, could not be loaded, and hpcgpu fell back to TCP."""


def ucx_unavailable_reason() -> str | None:
    """``None`` when distributed-ucxx and ucxx load here; otherwise why not.

    Examples
    --------
    >>> reason = ucx_unavailable_reason()
    >>> reason is None or "distributed" in reason or "ucxx" in reason
    True
    """
    try:
        importlib.import_module("distributed_ucxx")
    except Exception as exc:  # ImportError, or a broken install raising something else
        return f"distributed-ucxx is not importable ({type(exc).__name__}: {exc})"
    if importlib.util.find_spec("ucxx") is None:
        return "distributed-ucxx is installed but its ucxx library is not"
    from distributed.comm.registry import backends, get_backend

    try:
        get_backend("ucx")
    except ValueError as exc:
        return f"distributed does not list the 'ucx' comm backend ({exc}); known: {sorted(backends)}"
    return None


def _fallback(settings: NetworkSettings, reason: str) -> NetworkSettings:
    """The settings with ``settings.fallback`` in place of UCX, and a warning that says why."""
    message = (
        f"protocol={settings.protocol!r} was requested but {reason}: falling back to "
        f"{settings.fallback!r} (fallback={settings.fallback!r}). GPU-to-GPU transfers will go "
        "through host memory and TCP sockets, typically an order of magnitude slower than "
        f"NVLink or InfiniBand through UCX. To use UCX, {INSTALL_HINT}."
    )
    warnings.warn(message, UCXFallbackWarning, stacklevel=3)
    logger.warning(message)
    return dataclasses.replace(
        settings, protocol=settings.fallback, transports=None, net_devices=None,
        client_protocol=None, ucx_environment=(),
    )


def resolve(settings: NetworkSettings, reason: str | None = "check") -> NetworkSettings:
    """The settings to use: as given, or the fallback protocol when UCX cannot load.

    Parameters
    ----------
    settings
        What the user asked for.
    reason
        Why UCX is unavailable, ``None`` when it is available; by default it is checked
        here with :func:`ucx_unavailable_reason` (tests and doctor pass their own).

    Raises
    ------
    UCXUnavailableError
        UCX was asked for, it cannot load and no ``fallback`` was given.

    Examples
    --------
    >>> tcp = NetworkSettings.create("tcp")
    >>> resolve(tcp) is tcp
    True
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     resolve(NetworkSettings.create("ucx", fallback=True), reason="no ucx here").protocol
    'tcp'
    >>> caught[0].category.__name__
    'UCXFallbackWarning'
    >>> resolve(NetworkSettings.create("ucx"), reason="no ucx here")
    Traceback (most recent call last):
    ...
    hpcgpu.network.availability.UCXUnavailableError: protocol='ucx' was requested but no ucx here: \
install distributed-ucxx into the environment of the scheduler, the workers and the client \
(pip install 'hpcgpu[ucx]', i.e. distributed-ucxx-cu12; distributed-ucxx-cu13 for CUDA 13), \
or pass fallback='tcp' to run over TCP with a warning, or protocol='tcp'
    """
    if not settings.is_ucx:
        return settings
    if reason == "check":
        reason = ucx_unavailable_reason()
    if reason is None:
        return settings
    if settings.fallback:
        return _fallback(settings, reason)
    raise UCXUnavailableError(
        f"protocol={settings.protocol!r} was requested but {reason}: {INSTALL_HINT}, or pass "
        "fallback='tcp' to run over TCP with a warning, or protocol='tcp'"
    )
