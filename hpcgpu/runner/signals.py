"""The signals that stop a batch run: the first one recorded, every one forwarded to the script."""

from __future__ import annotations

import math
import signal
import time

from hpcgpu.runner.processes import Child

__all__ = ["SIGTERM_BUDGET", "STOP_SIGNALS", "Stop"]

#: Signals that stop a batch run: cancel (TERM), walltime warnings (USR1/USR2), Ctrl-C, hang-up.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)
#: Seconds the whole stop may take after SIGTERM: SLURM sends SIGKILL KillWait seconds
#: later (30 by default, less at some sites), to the scheduler, workers and script as well.
SIGTERM_BUDGET = 4.0


class Stop:
    """Records the first stop signal and forwards every one to the running script."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.script: Child | None = None
        self.forwarded = False
        self.deadline = math.inf
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "Stop":
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def _handle(self, signum: int, _frame) -> None:
        if self.signum is None:
            self.signum = signum
        if signum == signal.SIGTERM:
            self.deadline = min(self.deadline, time.monotonic() + SIGTERM_BUDGET)
        if self.script is not None and self.script.running():
            self.script.signal_group(signum)
            self.forwarded = True

    def left(self, step: float) -> float:
        """``step`` seconds, or what is left of the budget after SIGTERM if that is less."""
        return max(0.1, min(step, self.deadline - time.monotonic()))
