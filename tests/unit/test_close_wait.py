"""``close`` waits for stopped workers' jobs to leave the queue only while it can see them."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from hpcgpu.cluster.shutdown import wait_until_ended
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.system.commands import CommandResult, set_runner


def _wait_with(answer, grace: float = 5.0) -> tuple[list, list]:
    ran = []
    set_runner(lambda argv, timeout, input: ran.append(argv) or answer(argv))
    jobs = [SimpleNamespace(job_id="7", ended=False)]
    try:
        asyncio.run(wait_until_ended(get_dialect("slurm"), jobs, grace))
    finally:
        set_runner(None)
    return ran, jobs


def test_without_the_status_command_close_does_not_wait_out_its_grace(caplog):
    # e.g. PATH lost the scheduler's commands: before, one call every 0.25 s for the whole 5 s
    ran, jobs = _wait_with(lambda argv: CommandResult(tuple(argv), 127, "", f"{argv[0]}: command not found"))
    assert len(ran) == 1 and not jobs[0].ended
    assert "command not found" in caplog.text


def test_a_job_that_left_the_queue_ends_the_wait_and_a_failing_call_is_retried():
    answers = iter([CommandResult(("squeue",), 1, "", "slurm_load_jobs error: Socket timed out"),
                    CommandResult(("squeue",), 0, "", "")])  # then: no longer listed
    ran, jobs = _wait_with(lambda argv: next(answers))
    assert len(ran) == 2 and jobs[0].ended
