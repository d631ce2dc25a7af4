"""``hpcgpu.get_client()``: the client of the cluster this process was started in."""

from __future__ import annotations

import os

from hpcgpu.system.schedfile import read_trusted_json

__all__ = ["get_client", "scheduler_address"]


def scheduler_address(address: str | None = None) -> str:
    """The scheduler address: ``address``, else Dask's ``scheduler-address`` setting
    (``DASK_SCHEDULER_ADDRESS``, set by ``hpcgpu run`` and ``hpcgpu.mpi``), else the
    file named by ``HPCGPU_SCHEDULER_FILE``.

    Examples
    --------
    >>> scheduler_address("tls://10.0.0.1:8786")
    'tls://10.0.0.1:8786'
    """
    if address:
        return address
    import dask

    found = dask.config.get("scheduler-address", None)
    if found:
        return found
    path = os.environ.get("HPCGPU_SCHEDULER_FILE")
    # hpcgpu run's own file (0600); taken only where no other user could have written it
    found = read_trusted_json(path, "HPCGPU_SCHEDULER_FILE", private=True) if path else None
    if found and found.get("address"):
        return found["address"]
    raise ValueError(
        "no hpcgpu cluster found: DASK_SCHEDULER_ADDRESS and HPCGPU_SCHEDULER_FILE are unset. "
        "Run the script with `hpcgpu run script.py` (or `python -m hpcgpu.mpi script.py`), "
        "use `with hpcgpu.GPURunner() as runner: runner.get_client()`, or pass address="
    )


def get_client(address: str | None = None, *, timeout: str | float = "60s", **kwargs):
    """Connect a :class:`distributed.Client` to the cluster this script runs in.

    TLS settings come from Dask's configuration, which ``hpcgpu run`` sets for the script
    (``DASK_DISTRIBUTED__COMM__TLS__*``); pass ``security=`` to override.

    Parameters
    ----------
    address : str, optional
        Scheduler address; found as :func:`scheduler_address` says when omitted.
    timeout : str or float
        How long to try to connect.
    **kwargs
        Passed to :class:`distributed.Client`.

    Examples
    --------
    >>> import hpcgpu
    >>> client = hpcgpu.get_client()  # doctest: +SKIP
    >>> client.submit(sum, [1, 2], resources={"GPU": 1}).result()  # doctest: +SKIP
    3
    """
    from distributed import Client

    return Client(scheduler_address(address), timeout=timeout, **kwargs)
