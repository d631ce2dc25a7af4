"""A scheduler that does not start is reported by its own cause, with the options to check.

distributed wraps the cause twice (``Scheduler failed to start``, ``Cluster failed to
start``); the cause (a busy port, a UCX transport that is not there) is what the user can fix.

Examples
--------
>>> try:
...     try:
...         raise OSError(98, "Address already in use")
...     except OSError as cause:
...         raise RuntimeError("Scheduler failed to start.") from cause
... except RuntimeError as error:
...     print(start_error(error, {"scheduler_options": {"port": 8786}}))
the Dask scheduler did not start: OSError: [Errno 98] Address already in use; check scheduler_options={'port': 8786}
"""

from __future__ import annotations

from typing import Any

__all__ = ["ProcessStartError", "root_cause", "start_error"]


class ProcessStartError(RuntimeError):
    """The scheduler's own process ended (or stayed silent) before it listened; the message
    is its own error (``UCXXNoDeviceError: ...``), then which of the two."""


def root_cause(error: BaseException) -> BaseException:
    """The innermost ``__cause__`` (or context) of ``error``."""
    seen = {id(error)}
    while True:
        inner = error.__cause__ or error.__context__
        if inner is None or id(inner) in seen:
            return error
        seen.add(id(inner))
        error = inner


def start_error(error: BaseException, options: dict[str, Any]) -> RuntimeError:
    """A RuntimeError that says the cause first, then the given options (those not empty)."""
    cause = root_cause(error)
    check = ", ".join(f"{name}={value!r}" for name, value in options.items() if value)
    said = str(cause) if isinstance(cause, ProcessStartError) else f"{type(cause).__name__}: {cause}"
    return RuntimeError(f"the Dask scheduler did not start: {said}"
                        + (f"; check {check}" if check else ""))
