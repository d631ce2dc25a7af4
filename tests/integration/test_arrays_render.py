"""Job arrays, pure parts: directives per scheduler (golden files, checked by the real sbatch
and qsub), element ids, the real squeue/qstat output of arrays (tests/data), worker names."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hpcgpu.cluster.batch.arrays import ArraySettings, consecutive_runs, parse_site_limit
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.dialects.arrays import (FIRST_INDEX, INDEX_VARIABLES, ArrayRequest, array_directives,
                                    element_index, element_job_id, element_name, expand_indices,
                                    name_template)
from hpcgpu.jobspec.launchers import get_launcher
from hpcgpu.jobspec.render import render, worker_job_script
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.jobspec.worker_command import WorkerCommand

DATA = Path(__file__).parents[1] / "data"
GOLDEN = DATA / "arrays"
LAUNCHERS = {"slurm": "srun", "sge": "direct", "pbs": "mpiexec", "lsf": "jsrun"}


def array_script(scheduler: str, count: int = 6, throttle: int | None = 2) -> str:
    """The script of an array of ``count`` one-GPU jobs, as GPUCluster renders it."""
    request = ArrayRequest(scheduler, count, throttle)
    skip, extra = array_directives(request, "hpcgpu", "logs")
    shape = GPUJobShape.create(gpus_per_node=1, cpus_per_gpu=2, walltime="00:10:00")
    worker = WorkerCommand(scheduler="tls://10.0.0.1:8786", nthreads=2,
                           name=name_template("MyCluster", 12, request.first))
    return render(worker_job_script(shape, get_dialect(scheduler), get_launcher(LAUNCHERS[scheduler]),
                                    worker, log_directory="logs", job_extra_directives=extra,
                                    job_directives_skip=skip))


@pytest.mark.parametrize("scheduler", sorted(FIRST_INDEX))
def test_golden_array_script(scheduler):
    path = GOLDEN / f"{scheduler}-array.sh"
    assert array_script(scheduler) == path.read_text(), (
        f"{path} differs: regenerate with `python tests/integration/test_arrays_render.py` and review")


def test_slurm_array_script_passes_sbatch_test_only(slurm, tmp_path):
    path = tmp_path / "array.sh"
    path.write_text(array_script("slurm").replace("logs/", f"{tmp_path}/"))
    done = subprocess.run(["sbatch", "--test-only", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and "to start at" in done.stderr, done.stderr


def test_sge_array_script_passes_qsub_verify(sge, tmp_path):
    path = tmp_path / "array.sh"
    path.write_text(array_script("sge").replace("logs/", f"{tmp_path}/"))
    done = subprocess.run(["qsub", "-w", "v", str(path)], capture_output=True, text=True)
    assert done.returncode == 0 and "verification: found suitable queue" in done.stdout, (
        done.stdout + done.stderr)


def test_real_squeue_output_of_arrays_is_read_per_element():
    slurm = get_dialect("slurm")
    pending = slurm.parse_status((DATA / "squeue_array_pending_range.txt").read_text())
    assert sorted(pending) == [f"187_{i}" for i in range(6)]
    assert pending["187_4"].state == "pending" and pending["187_0"].nodes == ("node1",)
    after = slurm.parse_status((DATA / "squeue_array_elements.txt").read_text())
    assert after["187_2"].state == "cancelled" and after["187_5"].reason == "JobArrayTaskLimit"
    held = slurm.parse_status((DATA / "squeue_array_held_elements.txt").read_text())
    assert sorted(held) == ["333_0", "333_1"]


def test_real_qstat_output_of_arrays_is_read_per_element():
    sge = get_dialect("sge")
    before = sge.parse_status((DATA / "qstat_array_running_pending.txt").read_text())
    assert {k: v.state for k, v in before.items()} == {
        "8.1": "running", "8.2": "running", "8.3": "running",
        "8.4": "pending", "8.5": "pending", "8.6": "pending"}
    after = sge.parse_status((DATA / "qstat_array_after_qdel.txt").read_text())
    assert sorted(after) == ["8.1", "8.3", "8.4", "8.6"]
    assert sge.parse_job_id((DATA / "qsub_terse_array.txt").read_text()) == "8"
    assert sge.exit_code_argv("8.2") == ["qacct", "-j", "8", "-t", "2"]


@given(st.sampled_from(sorted(FIRST_INDEX)), st.integers(1, 10**7), st.integers(0, 10**5),
       st.sampled_from(["", ".pbs01", ".server.example.org"]))
def test_element_ids_round_trip(scheduler, number, index, server):
    array_id = f"{number}[]{server}" if scheduler == "pbs" else str(number)
    element = element_job_id(scheduler, array_id, index)
    assert element_index(scheduler, element) == (array_id, index)
    assert element_index(scheduler, str(number))[1] is None


@given(st.lists(st.tuples(st.integers(0, 500), st.integers(0, 20), st.integers(1, 3)),
                min_size=1, max_size=5))
def test_expand_indices_matches_the_ranges(parts):
    text = ",".join(f"{lo}-{lo + n}:{step}" for lo, n, step in parts)
    expected = [i for lo, n, step in parts for i in range(lo, lo + n + 1, step)]
    assert expand_indices(text) == expected


@given(st.sampled_from(sorted(FIRST_INDEX)), st.integers(0, 10**6), st.integers(2, 2000),
       st.data())
def test_each_element_names_its_workers_after_its_own_spec_entry(scheduler, first, count, data):
    request = ArrayRequest(scheduler, count)
    template = name_template("My-Cluster", first, request.first)
    offset = data.draw(st.integers(0, count - 1))
    env = {INDEX_VARIABLES[scheduler]: str(request.indices[offset])}
    assert element_name(template, env) == f"My-Cluster-{first + offset}"


@given(st.lists(st.integers(0, 60), unique=True, min_size=1),
       st.one_of(st.none(), st.integers(1, 7)))
def test_consecutive_runs(numbers, longest):
    runs = consecutive_runs([f"c-{n}" for n in numbers], longest)
    flat = [int(name.split("-")[1]) for run in runs for name in run]
    assert flat == sorted(numbers)
    for run in runs:
        values = [int(name.split("-")[1]) for name in run]
        assert values == list(range(values[0], values[0] + len(values)))
        assert longest is None or len(run) <= longest


def test_settings_and_site_limits():
    assert ArraySettings.create(None, 50, 3) == ArraySettings(True, 50, 3)
    with pytest.raises(ValueError, match="array_throttle=0"):
        ArraySettings.create(None, None, 0)
    with pytest.raises(ValueError, match="job_arrays='yes'"):
        ArraySettings.create("yes", None, None)
    assert parse_site_limit("sge", "max_aj_tasks                 75000\n") == 75000


if __name__ == "__main__":  # regenerate the golden files
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name in FIRST_INDEX:
        (GOLDEN / f"{name}-array.sh").write_text(array_script(name))
