"""Run on the site's login host by tests/test_site_*.py: ``python site_app.py MODE OPTIONS``.

OPTIONS is the JSON of SLURMCluster's options, plus ``_scale`` (scale()'s arguments),
``_workers`` (how many to wait for) and ``_cluster`` (another cluster class, e.g.
``SGECluster``). MODE ``compute``: the workers' hosts and addresses and a checked result;
``fault``: the error the user sees and how long it took from ``scale()`` (or from the start,
for an error of the cluster's constructor) and from the first job seen running; ``cut``:
results held on every worker, then (after a line on stdin, once a link is cut) the checked
result, and with ``_back`` (seconds) the time until ``_workers`` are connected again (or,
``"excluded"``, until a job is submitted that excludes a host);
``serve``: print the scheduler's address, then keep the cluster until a line arrives on
stdin; ``plane``: a collective rechunk of NumPy blocks held on both hosts (checked, and the
path each worker took), then, with one worker's collective stalled, a line on stdin once a
link is cut, the error and its time (a line on stdin once the link is back ends it). The
last line of output is JSON.
"""

import json
import os
import socket
import sys
import time

from distributed import Client, as_completed, futures_of

import hpcgpu


def square(x):
    return x * x


def compute(cluster, scale, workers):
    cluster.scale(**scale)
    cluster.wait_for_workers(workers, timeout=90)
    with Client(cluster) as client:
        hosts = client.run(socket.gethostname)
        squares = client.map(square, range(200))
        total = sum(client.gather(squares))
        # one worker sums them all: the other host's results travel between the workers
        summed = client.submit(sum, squares).result()
        transfers = sum(client.run(lambda dask_worker: dask_worker.state.transfer_incoming_count_total).values())
        ucx_tls = sorted(set(client.run(lambda: os.environ.get("UCX_TLS")).values()), key=str)
    return {"scheduler": cluster.scheduler_address, "hosts": hosts, "result": total, "summed": summed,
            "transfers": transfers, "ucx_tls": ucx_tls}


def slow_square(x):
    time.sleep(0.25)
    return x * x


def cut(cluster, scale, workers, back=0):
    """Hold results on every worker, say so, wait for the test to cut a link, then finish;
    with ``back`` (s): then wait that long for the workers to be back (the capacity)."""
    cluster.scale(**scale)
    cluster.wait_for_workers(workers, timeout=90)
    with Client(cluster) as client:
        hosts = client.run(socket.gethostname)
        futures = client.map(slow_square, range(60))
        for done, _ in enumerate(as_completed(futures), 1):
            if done == 6:
                break
        print(json.dumps({"ready": hosts}), flush=True)
        sys.stdin.readline()
        start = time.monotonic()
        total = sum(client.gather(futures))
        result = {"result": total, "seconds": time.monotonic() - start, "hosts": hosts,
                  "workers_after": client.run(socket.gethostname)}
        if back == "excluded":  # until a replacement is submitted off the faulty host
            deadline = time.monotonic() + 90
            # submitted: sbatch has answered (a job id), so that the job table shows its state
            while not any(job.excluded and job.job_id for job in cluster.jobs) and time.monotonic() < deadline:
                time.sleep(0.5)
            result["excluded_seconds"] = time.monotonic() - start
            result["jobs"], result["events"] = cluster.job_table(), cluster.events
        elif back:  # how long until as many workers as before the fault are connected again
            try:
                cluster.wait_for_workers(workers, timeout=back)
                result["capacity_seconds"] = time.monotonic() - start
            except Exception as error:
                result["capacity_error"] = f"{type(error).__name__}: {error}"
            result["jobs"], result["events"] = cluster.job_table(), cluster.events
        return result


def _stall(seconds, dask_worker=None):
    import asyncio

    from hpcgpu.array.plane.worker_side import state_of

    run = state_of(dask_worker).run

    async def stalled(**msg):
        dask_worker.plane_stalled = True  # inside the collective: its inputs are all handed over
        await asyncio.sleep(seconds)
        return await run(**msg)

    dask_worker.handlers["hpcgpu_plane_run"] = stalled


def plane_across(cluster, scale, workers):
    """The plane between the hosts' workers, then a host's link cut during a collective."""
    import dask
    import dask.array as da

    from hpcgpu.array import plane

    cluster.scale(**scale)
    cluster.wait_for_workers(workers, timeout=90)
    with Client(cluster) as client:
        hosts = client.run(socket.gethostname)
        x = da.random.default_rng(0).random((240, 160), chunks=(30, 40)).persist()  # root tasks: spread
        values = x.compute()
        holders = {hosts[w] for ws in client.who_has(futures_of(x)).values() for w in ws}
        first = bool((plane.rechunk(x, (240, 8), method="collective").compute() == values).all())
        paths = client.run(lambda dask_worker: dask_worker._hpcgpu_plane.history[-1][2])
        # both workers stop inside the collective; the host that does not run its barrier
        # (so that the barrier's own worker sees the failure) gets its link cut there
        client.run(_stall, 4)
        future = client.compute(plane.rechunk(x, (240, 4), method="collective"))
        while not all(client.run(lambda dask_worker: getattr(dask_worker, "plane_stalled", False)).values()):
            time.sleep(0.05)
        barrier = next(w for w, keys in client.processing().items() for k in keys if "plane-barrier" in str(k))
        cut = next(h for w, h in hosts.items() if w != barrier)
        print(json.dumps({"ready": hosts, "cut": cut}), flush=True)
        sys.stdin.readline()  # that host's link is cut
        start = time.monotonic()
        try:
            future.result(timeout=60)
            error = None
        except Exception as err:
            error = f"{type(err).__name__}: {err}"
        seconds = time.monotonic() - start
        history = client.run(lambda dask_worker: [h[:3] + (round(h[-1], 3),)
                                                  for h in dask_worker._hpcgpu_plane.history],
                             workers=[barrier])  # the cut host may not answer
        print(json.dumps({"failed": error, "seconds": seconds, "history": history}), flush=True)
        sys.stdin.readline()  # the link is back
        timeouts = client.run(lambda: dask.config.get("hpcgpu.array.plane.timeout", None), on_error="ignore")
        return {"hosts": hosts, "holders": sorted(holders), "first": first, "paths": paths, "error": error,
                "timeouts": timeouts, "cut": cut,
                "seconds": seconds}


def main(mode, options):
    scale, workers = options.pop("_scale", {"jobs": 1}), options.pop("_workers", 1)
    back = options.pop("_back", 0)
    cluster_class = getattr(hpcgpu, options.pop("_cluster", "SLURMCluster"))
    start, after_start = time.monotonic(), None
    try:
        with cluster_class(**options) as cluster:
            start = time.monotonic()  # a fault's time runs from scale(), as the user waits
            if mode == "serve":
                print(json.dumps({"scheduler": cluster.scheduler_address}), flush=True)
                sys.stdin.readline()
                return {"served": True}
            if mode == "cut":
                return cut(cluster, scale, workers, back)
            if mode == "plane":
                return plane_across(cluster, scale, workers)
            try:
                return compute(cluster, scale, workers)
            except Exception:
                after_start = since_first_start(cluster)
                raise
    except Exception as error:
        if mode != "fault":
            raise
        return {"error": f"{type(error).__name__}: {error}", "seconds": time.monotonic() - start,
                "after_start": after_start}


def since_first_start(cluster):
    """Seconds since the cluster first saw one of its jobs running (None: none seen): what the
    scheduler took to start a job is its queue's time, not the cluster's."""
    started = [r.started for r in cluster.fleet.records.values() if r.started is not None]
    return time.monotonic() - min(started) if started else None


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]))), flush=True)
