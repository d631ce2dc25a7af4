"""(t + t.T).sum() on 2 GPUs with hpcgpu.colocate off, on, off (a cluster each): seconds and
bytes crossing between the workers per compute, one JSON line per repeat.

    python benchmarks/gpu/colocate_probe.py > colocate.jsonl
"""
import json, time
import dask
from distributed import Client, wait
import hpcgpu.array as ha
from hpcgpu import LocalGPUCluster

def moved(client):
    return sum(client.run(lambda dask_worker: dask_worker.transfer_outgoing_bytes_total).values())

def timed(client, label, flag, expr, reps=3):
    for rep in range(reps):
        m0 = moved(client); t0 = time.perf_counter()
        v = float(expr().compute())
        print(json.dumps(dict(colocate=flag, case=label, rep=rep, s=round(time.perf_counter() - t0, 4),
                              moved_mb=round((moved(client) - m0) / 1e6, 1), value=round(v, 1))), flush=True)

if __name__ == "__main__":
    for flag in (False, True, False):
        with dask.config.set({"hpcgpu.colocate": flag}):
            with LocalGPUCluster(CUDA_VISIBLE_DEVICES="0,1") as cluster, Client(cluster) as client:
                client.wait_for_workers(2)
                t = ha.random.random(size=(40000, 40000), chunks=(5000, 5000), seed=3)
                timed(client, "generated 40000^2", flag, lambda: (t + t.T).sum())
                tp = t.persist(); wait(tp)
                timed(client, "persisted 40000^2", flag, lambda: (tp + tp.T).sum())
                y = ha.random.standard_normal(size=(200000, 200000), chunks=(10000, 10000), seed=1)
                timed(client, "std 200000^2", flag, lambda: y.std(), reps=2)
