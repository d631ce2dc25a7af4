"""Excluded hosts on the real local schedulers (#38's site fault): the exclusion lines each
dialect renders are read by the scheduler itself, and meant (SLURM's ``sbatch --test-only``
places the job on another node, Grid Engine's ``qsub -w v`` finds no queue when its only
host is excluded); and a cluster whose job failed the network check on one node submits
its replacement with ``--exclude`` for that node, which runs elsewhere and computes.

The 4 nodes of the local SLURM share one host, so no network check fails on one of them
alone: the bad node's job script prints the worker's ``NetworkCheckError:`` line and exits
(the check's own messages are tested in tests/unit/test_worker_reach.py and, with a link
really down, on the site in a box). The scheduler's side is real.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from cluster_helpers import FAST
from conftest import wait_for
from hpcgpu import SLURMCluster
from test_directive_parse import bsub_lines
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.launchers import get_launcher
from hpcgpu.jobspec.render import JobScript, render
from hpcgpu.jobspec.resources import GPUJobShape

NODES = ("node1", "node2", "node3", "node4")
SETTINGS = settings(max_examples=6, deadline=None, derandomize=True,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def script(scheduler: str, hosts) -> str:
    dialect = get_dialect(scheduler)
    shape = GPUJobShape.create(gpus_per_node=1, walltime="00:05:00")
    return render(JobScript(shape, dialect, get_launcher(dialect.default_launcher), "true",
                            job_extra_directives=dialect.exclusion_directives(hosts)))


@pytest.mark.slurm
@SETTINGS
@given(hosts=st.sets(st.sampled_from(NODES), min_size=1, max_size=3))
def test_sbatch_reads_the_exclusion_and_places_the_job_elsewhere(slurm, tmp_path, hosts):
    path = tmp_path / "job.sbatch"
    path.write_text(script("slurm", hosts))
    done = subprocess.run(["sbatch", "--test-only", str(path)], capture_output=True, text=True,
                          timeout=60)
    placed = re.search(r"on nodes (\S+) in partition", done.stderr)
    assert done.returncode == 0 and placed, done.stderr
    assert placed.group(1) in NODES and placed.group(1) not in hosts, (hosts, done.stderr)


@pytest.mark.slurm
def test_sbatch_excluding_every_node_finds_none(slurm, tmp_path):
    path = tmp_path / "job.sbatch"
    path.write_text(script("slurm", NODES))
    done = subprocess.run(["sbatch", "--test-only", str(path)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0 and "Requested node configuration is not available" in done.stderr


@pytest.mark.sge
@SETTINGS
@given(others=st.sets(st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True), max_size=3),
       excluded=st.booleans())
def test_qsub_verifies_the_exclusion_as_meant(sge, tmp_path, others, excluded):
    """The cell's one execution host (this machine's name) excluded: no queue; others only:
    a queue (``qsub -w v`` verifies against an empty cell, running nothing)."""
    host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    hosts = (others - {host}) | ({host} if excluded else set())
    if not hosts:
        hosts = {"nohost"}
    path = tmp_path / "job.sh"
    path.write_text(script("sge", hosts))
    done = subprocess.run(["qsub", "-w", "v", str(path)], capture_output=True, text=True, timeout=60)
    said = done.stdout + done.stderr
    if host in hosts:  # qsub's answer names the request as it read it: every host, negated
        assert "no suitable queues" in said, said
        read = re.search(r"\bhostname=(\S+?)\)", said).group(1)
        assert sorted(h.removeprefix("!") for h in read.split("&")) == sorted(hosts), said
    else:
        assert "verification: found suitable queue(s)" in said, said


@SETTINGS
@given(hosts=st.sets(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,12}", fullmatch=True), min_size=1, max_size=4))
def test_lsf_model_reads_the_exclusion_as_one_select(hosts):
    """No LSF here: the model of bsub's reading (test_directive_parse.py) over a whole script."""
    selects = [value for option, value in bsub_lines(script("lsf", hosts))
               if option == "-R" and value.startswith("select[")]
    (select,) = selects
    tests = select.removeprefix("select[").removesuffix("]").split(" && ")
    assert sorted(t.removeprefix("hname!=") for t in tests) == sorted(hosts), select


FAIL_ON_FIRST_NODE = r'''
mark={mark}
[ -e "$mark" ] || echo "$SLURMD_NODENAME" > "$mark"
if [ "$(cat "$mark")" = "$SLURMD_NODENAME" ]; then
  echo "NetworkCheckError: interface 'ib0' on host $SLURMD_NODENAME is down (link state down): this host lost its network" >&2
  exit 1
fi
'''


@pytest.mark.slurm
def test_a_replacement_stays_off_the_node_whose_network_check_failed(slurm, clusters, tmp_path, caplog):
    mark = tmp_path / "bad-node"
    prologue = FAIL_ON_FIRST_NODE.format(mark=mark).strip().splitlines()
    cluster = clusters(SLURMCluster, **{**FAST, "gpus_per_node": 1, "job_script_prologue": prologue})
    with caplog.at_level("WARNING", logger="hpcgpu.cluster"):
        cluster.scale(jobs=1)
        cluster.wait_for_workers(gpus=1, timeout=90)
    bad = mark.read_text().strip()
    first, second = cluster.jobs[0], cluster.jobs[-1]
    assert first.nodes == (bad,) and first.state == "failed" and not first.excluded, cluster.job_table()
    assert second.excluded == (bad,) and second.nodes and bad not in second.nodes, cluster.job_table()
    shown = subprocess.run(["scontrol", "show", "job", second.job_id], capture_output=True,
                           text=True, timeout=30).stdout
    assert f"ExcNodeList={bad}" in shown, shown
    assert cluster.job_table().splitlines()[0].endswith("excluding")
    (line,) = [r.getMessage() for r in caplog.records if "excluded from new jobs" in r.getMessage()]
    assert line.startswith(f"host {bad} excluded from new jobs for the cluster's life: a worker of "
                           f"job {first.name} (id {first.job_id}) failed the network check there: "
                           f"interface 'ib0' on host {bad} is down (link state down)"), line
    with cluster.get_client() as client:
        assert client.submit(sum, range(10)).result(timeout=60) == 45


@pytest.mark.sge
def test_grid_engine_takes_the_replacement_with_its_exclusion(sge, clusters, tmp_path, caplog):
    """The cell's one host fails the check: the replacement, excluding it, is accepted by
    qsub as part of the cluster's whole script and waits (no other host). Polls 6 s apart:
    the job ends before any sees it running, so only ``qacct`` names its host (before that
    was read, such a job's failure counted as one "at once" and the replacing stopped)."""
    from hpcgpu import SGECluster

    prologue = ['echo "NetworkCheckError: interface \'ib0\' on host $(hostname) is down (link state down)" >&2',
                "exit 1"]
    cluster = clusters(SGECluster, **{**FAST, "gpus_per_node": 1, "job_script_prologue": prologue,
                                      "poll_interval": 6})
    cluster.scale(jobs=1)
    wait_for(lambda: len(cluster.jobs) == 2 and cluster.jobs[1].job_id, 90, 0.5, what="the replacement")
    first, second = cluster.jobs
    assert first.state == "failed" and second.excluded == first.nodes, cluster.job_table()
    shown = subprocess.run(["qstat", "-j", second.job_id], capture_output=True, text=True, timeout=30).stdout
    assert re.search(rf"hard resource_list:.*hostname=!{first.nodes[0]}\b", shown), shown
    assert second.state == "pending" and not cluster.failures[1:], cluster.job_table()
