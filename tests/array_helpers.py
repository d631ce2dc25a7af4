"""Job-array checks shared by the real SLURM and Grid Engine tests (tests/test_arrays_*.py)."""

from __future__ import annotations

import time

from distributed import Client

from cluster_helpers import gpu_placement, recorded_commands
from conftest import wait_for
from hpcgpu.jobspec.dialects.arrays import element_index
from hpcgpu.system.workers import scheduler_workers


def submits(calls: list[list[str]], executable: str) -> list[list[str]]:
    return [argv for argv in calls if argv and argv[0] == executable]


def check_scale_up_one_array_then_down(cluster, scheduler: str, submit: str, gpus: int,
                                       keep: int, array_of) -> None:
    """scale(gpus=N) with one GPU per job: ONE submit call, N elements of one array, N
    workers named after their elements; scale(gpus=keep) retires N - keep whole elements."""
    with recorded_commands() as calls:
        cluster.scale(gpus=gpus)
        cluster.wait_for_workers(gpus=gpus, timeout=180)
    assert len(submits(calls, submit)) == 1, submits(calls, submit)
    ids = [job.job_id for job in cluster.jobs]
    arrays = {element_index(scheduler, job_id)[0] for job_id in ids}
    assert len(ids) == gpus and len(arrays) == 1 and None not in {
        element_index(scheduler, j)[1] for j in ids}, cluster.job_table()
    assert {array_of(job_id) for job_id in ids} == arrays  # the scheduler's own view
    table, html = cluster.job_table(), cluster._repr_html_()
    assert all(job_id in table and job_id in html for job_id in ids)  # element by element
    with Client(cluster) as client:
        placement = gpu_placement(client)
        # each element's worker carries its element's name and its element's job id
        assert sorted(name.rsplit("-", 2)[0] for name in placement) == sorted(
            job.name for job in cluster.jobs)
        assert len({p["job_id"] for p in placement.values()}) == gpus, placement
        futures = client.map(lambda x: x * x, range(100))
        assert client.submit(sum, futures).result() == sum(x * x for x in range(100))
        del futures
        before = {job.name: job.job_id for job in cluster.jobs}
        with recorded_commands() as calls:
            cluster.scale(gpus=keep)
            wait_for(lambda: len(scheduler_workers(client)) == keep, 90,
                     what=f"{keep} elements' workers to remain")
            wait_for(lambda: sum(j.state == "cancelled" for j in cluster.jobs) == gpus - keep,
                     60, what=f"{gpus - keep} elements cancelled:\n{cluster.job_table()}")
        cancelled = [a for argv in calls if argv[0] in ("scancel", "qdel", "bkill") for a in argv[1:]]
        gone = {before[j.name] for j in cluster.jobs if j.state == "cancelled"}
        assert set(cancelled) == gone, (cancelled, gone)  # single elements, never the array
        alive = [j for j in cluster.jobs if j.state == "running"]
        assert len(alive) == keep and all(array_of(j.job_id) in arrays for j in alive)
        assert client.submit(lambda: 40 + 2).result() == 42


def check_element_lost_mid_computation(cluster, gpus: int, cancel) -> None:
    """An element cancelled by hand while a computation runs: the result is still right
    (its tasks recomputed), and the element is replaced."""
    cluster.scale(gpus=gpus)
    cluster.wait_for_workers(gpus=gpus, timeout=180)
    with Client(cluster) as client:
        futures = client.map(lambda x: (time.sleep(0.2), x + 1)[1], range(80))
        total = client.submit(sum, futures)
        wait_for(lambda: sum(f.done() for f in futures) >= 10, 60, what="work under way")
        victim = cluster.jobs[1]
        cancel(victim.job_id)
        assert total.result(timeout=180) == sum(range(1, 81))
        wait_for(lambda: victim.name not in cluster.worker_spec, 60,
                 what="the lost element to be dropped")
        wait_for(lambda: len(cluster.jobs) == gpus + 1, 60, what="a replacement job")
        cluster.wait_for_workers(gpus=gpus, timeout=180)
        lost = next(j for j in cluster.jobs if j.name == victim.name)
        assert lost.state in ("cancelled", "failed", "completed"), cluster.job_table()
        assert victim.name in " ".join(cluster.events)


def check_adapt_with_arrays(cluster, scheduler: str, submit: str, maximum: int) -> None:
    """adapt from 0 under load grows through array submissions and shrinks back to 0."""
    with recorded_commands() as calls:
        cluster.adapt(minimum_gpus=0, maximum_gpus=maximum, interval="300ms", wait_count=3,
                      target_duration="1s")
        with Client(cluster) as client:
            futures = client.map(lambda x: (time.sleep(0.3), x + 1)[1], range(80))
            assert client.submit(sum, futures).result() == sum(range(1, 81))
            del futures
            wait_for(lambda: not cluster.worker_spec and not scheduler_workers(client),
                     120, interval=0.5, what="adapt to scale back to 0")
    submitted = [j for j in cluster.jobs if j.job_id]
    assert 2 <= len(submitted) <= maximum, cluster.job_table()
    elements = [j for j in submitted if element_index(scheduler, j.job_id)[1] is not None]
    assert elements, cluster.job_table()  # growth came as arrays
    assert len(submits(calls, submit)) < len(submitted)
    wait_for(lambda: all(j.state in ("cancelled", "completed") for j in cluster.jobs), 60,
             what=f"the jobs to end:\n{cluster.job_table()}")
