"""What the Scheduler and Dialect bases do for every scheduler: an array element's job id from
the environment, queue queries through the module a scheduler names, class-line constants."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from hpcgpu.schedulers.dialect import Dialect
from hpcgpu.schedulers.registry import get_scheduler


@pytest.mark.parametrize("name, env, expected", [
    ("lsf", {"LSB_JOBID": "5", "LSB_JOBINDEX": "2"}, "5[2]"),
    ("lsf", {"LSB_JOBID": "5", "LSB_JOBINDEX": "0"}, "5"),  # LSF's value outside an array
    ("lsf", {"LSB_JOBID": "5"}, "5"),
    ("sge", {"JOB_ID": "8", "SGE_TASK_ID": "3"}, "8.3"),
    ("sge", {"JOB_ID": "8", "SGE_TASK_ID": "undefined"}, "8"),  # Grid Engine's outside one
    # their job-id variables hold the element's own id already
    ("slurm", {"SLURM_JOB_ID": "124", "SLURM_ARRAY_TASK_ID": "3"}, "124"),
    ("pbs", {"PBS_JOBID": "7[3].srv", "PBS_ARRAY_INDEX": "3"}, "7[3].srv"),
    ("flux", {}, None),
])
def test_an_array_elements_job_id(name, env, expected):
    assert get_scheduler(name).job_id(env) == expected


def test_queue_queries_come_from_the_module_each_scheduler_names(monkeypatch):
    import hpcgpu.schedulers.pbs.queues as pbs_queues

    monkeypatch.setattr(pbs_queues, "offer", lambda shape, dialect: ("offer", shape, dialect))
    monkeypatch.setattr(pbs_queues, "offers", lambda shape, dialect: ["offers", shape, dialect])
    pbs = get_scheduler("pbs")
    assert pbs.queue_offer("shape", "d") == ("offer", "shape", "d")
    assert pbs.queue_offers("shape", "d") == ["offers", "shape", "d"]
    assert get_scheduler("flux").queue_offer("shape") is None  # names none: cannot be asked
    for name in ("slurm", "pbs", "lsf", "sge"):  # the module has both functions
        module = __import__(get_scheduler(name).queries_module, fromlist=["offer"])
        assert callable(module.offer) and callable(module.offers)


def test_a_dialects_class_line_sets_its_constants_and_refuses_unknown_ones():
    @dataclass(frozen=True)
    class Mine(Dialect, name="mine", prefix="#MINE", submit_executable="msub",
               cancel_executable="mdel", default_launcher="srun"):
        pass

    assert (Mine.name, Mine.prefix, Mine().submit_argv(), Mine().cancel_argv(["1"])) == (
        "mine", "#MINE", ["msub"], ["mdel", "1"])
    assert Mine().launcher_for(None) == "srun"
    with pytest.raises(TypeError, match="unknown class keyword.*submit: known are name"):
        class Typo(Dialect, submit="msub"):
            pass
