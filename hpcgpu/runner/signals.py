"""What stops a batch run: the first signal recorded, every one forwarded to the script; a
dead scheduler (:mod:`hpcgpu.runner.lifeline`); and, if ``hpcgpu run`` itself is killed,
a reaper that ends what it started (:mod:`hpcgpu.runner.orphans`)."""

from __future__ import annotations

import math
import signal
import sys
import time

from hpcgpu.runner import orphans
from hpcgpu.runner.lifeline import lost
from hpcgpu.runner.processes import Child

__all__ = ["SIGTERM_BUDGET", "STOP_SIGNALS", "Stop"]

#: Signals that stop a batch run: cancel (TERM), walltime warnings (USR1/USR2), Ctrl-C, hang-up.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP)
#: Seconds the whole stop may take after SIGTERM: SLURM sends SIGKILL KillWait seconds
#: later (30 by default, less at some sites), to the scheduler, workers and script as well.
SIGTERM_BUDGET = 4.0
#: Seconds of that budget kept for what follows the script when the scheduler died (the
#: client, the workers, the interpreter's exit: 0.5 s measured, 0.7 s with both cores
#: busy): nothing is left to wait for, so the run ends about when the budget is up
#: (docs/batch.md promises 5 s from the scheduler's death).
AFTER_SCRIPT = 1.0


class Stop:
    """Records the first stop signal and forwards every one to the running script.

    Inside the ``with`` block, the process groups of the children started are guarded
    (:func:`~hpcgpu.runner.orphans.guarded`): if this process is killed, each gets SIGTERM,
    and SIGKILL :data:`SIGTERM_BUDGET` s later, as after a SIGTERM to the run.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        #: why the run stops without a signal: its scheduler died (:meth:`check`)
        self.lost: str | None = None
        self.script: Child | None = None
        self.forwarded = False
        self.deadline = math.inf
        self._previous: dict[int, object] = {}
        self._guard = orphans.guarded(SIGTERM_BUDGET)

    def __enter__(self) -> "Stop":
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        self._guard.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._guard.__exit__(*exc)
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)

    def check(self, scheduler: Child | None, during: str) -> bool:
        """Whether the run must stop: a signal came, or ``scheduler`` has exited (said once;
        then the whole stop has :data:`SIGTERM_BUDGET` s, the script's part of it
        :data:`AFTER_SCRIPT` s less)."""
        if self.signum is None and self.lost is None:
            self.lost = lost(scheduler, during)
            if self.lost is not None:
                self.deadline = min(self.deadline, time.monotonic() + SIGTERM_BUDGET - AFTER_SCRIPT)
                print(f"hpcgpu run: {self.lost}: stopping the run", file=sys.stderr, flush=True)
        return self.signum is not None or self.lost is not None

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
