"""Run on the site's login host by tests/integration/test_site_scaling.py:
``python site_modes_app.py MODE OPTIONS`` (OPTIONS: SLURMCluster's, as JSON).

MODE ``pools``: one array of two GPU jobs and a CPU pool's job, annotated tasks on each
pool; ``adapt``: an adaptive cluster from no job, grown by pending tasks and shrunk back
when they are done; ``firewall``: the error ``wait_for_workers`` raises, and when. The last line of output is JSON: where each task ran (host and the
worker's address), the jobs, the results.
"""

import json
import socket
import sys
import time

import dask
from distributed import get_worker

from site_app import since_first_start

from hpcgpu.system.workers import scheduler_workers
from hpcgpu import SLURMCluster


def where(x):
    """x*x, with the host and the address of the worker that computed it."""
    return x * x, socket.gethostname(), get_worker().address, str(get_worker().name)


def slow_where(x):
    time.sleep(0.2)
    return where(x)


def wait(condition, timeout, what):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} after {timeout} s")
        time.sleep(0.2)


def ran(results):
    return {"result": sum(r[0] for r in results),
            "ran": sorted({(host, address) for _, host, address, _ in results}),
            "names": sorted({name for *_, name in results})}


def pools(cluster):
    cluster.scale(jobs=2)
    cluster.scale(jobs=1, pool="cpu")
    cluster.wait_for_workers(3, timeout=90)
    with cluster.get_client() as client:
        with dask.annotate(resources={"GPU": 1}):
            on_gpu = [dask.delayed(where)(i) for i in range(40)]
        with dask.annotate(resources={"CPU": 1}):
            on_cpu = [dask.delayed(where)(i) for i in range(40, 60)]
        gpu_ran, cpu_ran = client.compute([on_gpu, on_cpu], sync=True)
    jobs = [(job.pool, job.job_id, list(job.nodes)) for job in cluster.jobs]
    return {"gpu": ran(gpu_ran), "cpu": ran(cpu_ran), "jobs": jobs}


def adapt(cluster):
    start, times = time.monotonic(), {}
    with cluster.get_client() as client:
        # target_duration 1 s: the 12 s of work asks for both jobs until it is nearly done.
        # With Dask's 5 s, one worker's threads brought the estimate down to one job before a
        # busy machine's second worker connected, and adapt rightly cancelled that job.
        cluster.adapt(minimum_jobs=0, maximum_jobs=2, interval="0.5s", wait_count=2, target_duration="1s")
        futures = client.map(slow_where, range(60))
        cluster.wait_for_workers(2, timeout=90)  # grown by the pending tasks alone
        times["grown"] = time.monotonic() - start
        grown = [(job.job_id, list(job.nodes)) for job in cluster.jobs]
        out = ran(client.gather(futures))
        times["computed"] = time.monotonic() - start
        del futures
        # idle again: both jobs retired, then ended (as the next poll of the queue sees)
        wait(lambda: not scheduler_workers(client), 60, "workers retired")
        times["retired"] = time.monotonic() - start
        wait(lambda: all(job.state not in ("submitting", "pending", "running")
                         for job in cluster.jobs), 30, "jobs ended")
        times["ended"] = time.monotonic() - start
    return {**out, "grown": grown, "states": sorted({job.state for job in cluster.jobs}), "times": times}


def firewall(cluster):
    """The error of wait_for_workers, how long after scale(), after the first job ran and after
    the first worker joined."""
    start = time.monotonic()
    cluster.scale(jobs=2)
    try:
        cluster.wait_for_workers(2, timeout=90)
    except Exception as error:
        now, wall = time.monotonic(), time.time()
        joined = [t for events in cluster.scheduler.get_events().values() for t, msg in events
                  if isinstance(msg, dict) and msg.get("action") == "add-worker"]
        return {"error": f"{type(error).__name__}: {error}", "seconds": now - start,
                "after_start": since_first_start(cluster),
                "after_join": wall - min(joined) if joined else None}
    return {"connected": True}


if __name__ == "__main__":
    mode, options = sys.argv[1], json.loads(sys.argv[2])
    with SLURMCluster(**options) as cluster:
        out = {"pools": pools, "adapt": adapt, "firewall": firewall}[mode](cluster)
        closing = time.monotonic()
    out["close_seconds"] = time.monotonic() - closing
    print(json.dumps(out), flush=True)
