"""What ``hpcgpu run`` cannot go on without: a dead scheduler ends the run within seconds.

Without its scheduler the script's client only retries (distributed logs "Failed to
reconnect" after 60 s) and the workers wait for their ``death_timeout``, while the job
holds its nodes until the walltime. So ``hpcgpu run`` looks at the scheduler process each
time it looks at the script (every 0.2 s): once it has exited, the script is stopped
(SIGTERM, SIGKILL 3 s later), the workers are stopped, and the run has ended within
:data:`~hpcgpu.runner.signals.SIGTERM_BUDGET` (:meth:`~hpcgpu.runner.signals.Stop.check`),
with the exit status :data:`SCHEDULER_LOST`.
"""

from __future__ import annotations

from hpcgpu.runner.processes import Child

__all__ = ["SCHEDULER_LOST", "lost"]

#: Exit status of a run whose scheduler died (the script was stopped, whatever it returned).
SCHEDULER_LOST = 1


def lost(scheduler: Child | None, during: str) -> str | None:
    """A message naming the scheduler if it has exited, None while it runs.

    Examples
    --------
    >>> from hpcgpu.runner.processes import start_child
    >>> child = start_child("scheduler", ["true"])
    >>> child.wait(10)
    0
    >>> print(lost(child, "the script ran").replace(str(child.pid), "N"))
    the Dask scheduler (pid N) exited with code 0 while the script ran
    """
    if scheduler is None or scheduler.running():
        return None
    code = scheduler.popen.returncode
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    return f"the Dask scheduler (pid {scheduler.pid}) {how} while {during}"
