"""An expected end of a connection logged without its traceback.

distributed logs ``Batched Comm Closed <comm>`` at INFO with the ``CommClosedError``'s
traceback whenever the other end of a batched stream closed while a message was on its
way: at the end of a run that went well, whenever a worker closes while the scheduler still
sends to it, or the other way round. The message stays; its traceback, which says nothing
more, goes. Only in processes hpcgpu runs: its workers (the worker preload), the batch
scheduler (``--preload hpcgpu.closelog``) and the scheduler ``GPURunner`` and
``hpcgpu.mpi`` start on rank 0. Any other record, and any other exception, is untouched.
"""

from __future__ import annotations

import logging

__all__ = ["ExpectedCloseFilter", "quiet_expected_close", "dask_setup"]


class ExpectedCloseFilter(logging.Filter):
    """Drops the traceback of ``Batched Comm Closed`` records whose exception is a
    ``CommClosedError``.

    Examples
    --------
    >>> from distributed.comm.core import CommClosedError
    >>> record = logging.LogRecord("distributed.batched", logging.INFO, "", 0,
    ...                            "Batched Comm Closed %r", ("<TLS>",),
    ...                            (CommClosedError, CommClosedError(), None))
    >>> ExpectedCloseFilter().filter(record), record.exc_info, record.getMessage()
    (True, None, "Batched Comm Closed '<TLS>'")
    """

    def filter(self, record: logging.LogRecord) -> bool:
        from distributed.comm.core import CommClosedError

        if (record.exc_info and isinstance(record.exc_info[1], CommClosedError)
                and str(record.msg).startswith("Batched Comm Closed")):
            record.exc_info, record.exc_text = None, None
        return True


def quiet_expected_close() -> None:
    """Install :class:`ExpectedCloseFilter` on ``distributed.batched`` (once)."""
    logger = logging.getLogger("distributed.batched")
    if not any(isinstance(f, ExpectedCloseFilter) for f in logger.filters):
        logger.addFilter(ExpectedCloseFilter())


def dask_setup(server) -> None:
    """As a Dask preload (``--preload hpcgpu.closelog``)."""
    quiet_expected_close()
