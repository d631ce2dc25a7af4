"""Run on the site's login host by tests/test_site_*.py: ``python site_app.py MODE OPTIONS``.

OPTIONS is the JSON of SLURMCluster's options, plus ``_scale`` (scale()'s arguments),
``_workers`` (how many to wait for) and ``_cluster`` (another cluster class, e.g.
``SGECluster``). MODE ``compute``: the workers' hosts and addresses and a checked result;
``fault``: the error the user sees and how long it took from ``scale()`` (or from the start,
for an error of the cluster's constructor) and from the first job seen running; ``cut``:
results held on every worker, then (after a line on stdin, once a link is cut) the checked
result, and with ``_back`` (seconds) the time until ``_workers`` are connected again;
``serve``: print the scheduler's address, then keep the cluster until a line arrives on
stdin. The last line of output is JSON.
"""

import json
import os
import socket
import sys
import time

from distributed import Client, as_completed

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
        if back:  # how long until as many workers as before the fault are connected again
            try:
                cluster.wait_for_workers(workers, timeout=back)
                result["capacity_seconds"] = time.monotonic() - start
            except Exception as error:
                result["capacity_error"] = f"{type(error).__name__}: {error}"
            result["jobs"], result["events"] = cluster.job_table(), cluster.events
        return result


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
