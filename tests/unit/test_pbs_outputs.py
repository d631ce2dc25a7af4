"""The PBS dialect's parser on real ``qstat -x -f -F json`` answers of OpenPBS 23.06.06
(tests/data/openpbs-23.06.06-qstat-xf-json-*.json, captured from tests/schedulers/pbs/start's
server: a held job, one running on a GPU, ``exit 3``, one qdel'd while running, an array
``-J 1-3``; then the same ids after qdel of the held, running and array jobs)."""

from __future__ import annotations

from pathlib import Path

from hpcgpu.jobspec.dialects import get_dialect

DATA = Path(__file__).parents[1] / "data"
PBS = get_dialect("pbs")


def statuses(name: str) -> dict:
    return {job_id: (s.state, s.exit_code, s.nodes)
            for job_id, s in PBS.parse_status((DATA / name).read_text()).items()}


def test_live_jobs():
    assert statuses("openpbs-23.06.06-qstat-xf-json-live.json") == {
        "13.vm-pbs": ("pending", None, ()),  # qsub -h
        "14.vm-pbs": ("running", None, ("vm-pbs",)),  # exec_host names the mom, not the vnode
        "15.vm-pbs": ("failed", 3, ("vm-pbs",)),
        "16.vm-pbs": ("cancelled", 0, ("vm-pbs",)),  # qdel'd running: Exit_status 0 here
        "17[].vm-pbs": ("running", None, ()),  # the array itself: B (begun)
        "17[1].vm-pbs": ("running", None, ("vm-pbs",)),
    }


def test_ended_jobs():
    ended = statuses("openpbs-23.06.06-qstat-xf-json-ended.json")
    assert ended["13.vm-pbs"] == ("cancelled", None, ())  # deleted while held: never ran
    assert ended["15.vm-pbs"] == ("failed", 3, ("vm-pbs",))
    assert {ended[j][0] for j in ("14.vm-pbs", "16.vm-pbs", "17[1].vm-pbs", "17[2].vm-pbs")} == {
        "cancelled"}
    reason = PBS.parse_status((DATA / "openpbs-23.06.06-qstat-xf-json-ended.json").read_text())
    assert reason["15.vm-pbs"].reason.endswith("on (pbsnode1:ncpus=1) and failed")


def test_walltime_exceeded():
    """``-l walltime=00:00:05`` on ``sleep 60``: the mom kills it (Exit_status -29, JOB_EXEC_KILL_WALLTIME)."""
    ((job_id, status),) = PBS.parse_status(
        (DATA / "openpbs-23.06.06-qstat-xf-json-walltime.json").read_text()).items()
    assert (status.state, status.exit_code) == ("failed", -29)
    assert "exceeded resource walltime" in status.reason
