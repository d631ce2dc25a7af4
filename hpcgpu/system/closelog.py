"""An expected end of a connection logged without its traceback.

distributed logs ``Batched Comm Closed <comm>`` at INFO with the ``CommClosedError``'s
traceback whenever the other end of a batched stream closed while a message was on its
way: at the end of a run that went well, whenever a worker closes while the scheduler still
sends to it, or the other way round. The message stays; its traceback, which says nothing
more, goes. Only in processes hpcgpu runs: its workers (the worker preload), the batch
scheduler (``--preload hpcgpu.system.closelog``) and the scheduler ``GPURunner`` and
``hpcgpu.mpi`` start on rank 0. Any other record, and any other exception, is untouched.
"""

from __future__ import annotations

import logging

__all__ = ["ExpectedCloseFilter", "CancelledTaskFilter", "LateConnectionFilter", "quiet_expected_close",
           "dask_setup"]


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


class CancelledTaskFilter(logging.Filter):
    """Drops the empty ERROR record, with its traceback, that distributed's ``log_errors``
    writes when a client task is cancelled: a client closed while it was reconnecting to a
    scheduler that had gone (the end of a run, or a cancelled job). Cancelling is how
    closing works; it is not an error.

    Examples
    --------
    >>> import asyncio
    >>> record = logging.LogRecord("distributed.client", logging.ERROR, "", 0,
    ...                            asyncio.CancelledError(), (), (asyncio.CancelledError, None, None))
    >>> CancelledTaskFilter().filter(record)
    False
    """

    def filter(self, record: logging.LogRecord) -> bool:
        import asyncio

        return not (record.exc_info and record.exc_info[0] is not None
                    and issubclass(record.exc_info[0], asyncio.CancelledError))


class LateConnectionFilter(logging.Filter):
    """A connection whose TLS handshake ends after its listener stopped (a peer connecting
    as the server closes): distributed then asks the stopped listener its address, and
    tornado logs the ``ValueError`` with two tracebacks. One line says it instead.

    Examples
    --------
    >>> error = ValueError("invalid operation on non-started TCPListener")
    >>> record = logging.LogRecord("tornado.application", logging.ERROR, "", 0, "Exception in callback %r",
    ...                            ("cb",), (ValueError, error, None))
    >>> LateConnectionFilter().filter(record), record.exc_info, record.getMessage()
    (True, None, 'a connection arrived as a listener closed; dropped')
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, ValueError) and "non-started TCPListener" in str(error):
            record.exc_info, record.exc_text = None, None
            record.msg, record.args, record.levelno, record.levelname = (
                "a connection arrived as a listener closed; dropped", (), logging.INFO, "INFO")
        return True


_FILTERS = {"distributed.batched": ExpectedCloseFilter, "distributed.client": CancelledTaskFilter,
            "tornado.application": LateConnectionFilter}


def quiet_expected_close() -> None:
    """Install :class:`ExpectedCloseFilter` on ``distributed.batched``,
    :class:`CancelledTaskFilter` on ``distributed.client`` and :class:`LateConnectionFilter`
    on ``tornado.application`` (once each)."""
    for name, kind in _FILTERS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in logger.filters):
            logger.addFilter(kind())


def dask_setup(server) -> None:
    """As a Dask preload (``--preload hpcgpu.system.closelog``)."""
    quiet_expected_close()
