"""Where a collective's time goes on the GPUs: the whole persist, each rank's own time in
the operation, and the task stream's time per kind of task (put, barrier, unpack).

    python benchmarks/gpu/plane_phases.py --gpus 2
    python benchmarks/gpu/plane_phases.py --gpus 4 --weak-rows 62500 --only matmul-weak

``--weak-rows N`` adds ``matmul-weak``: ``a`` of ``N`` rows per GPU times 20000 columns
(62500: 10 GB per GPU) times ``b`` of 20000², 2500² chunks, and times the sum of the
persisted product on its own (``sum_s``), the second half of scaleout.py's case.
"""
from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--weak-rows", type=int, default=0)
    ap.add_argument("--only", default="", help="the operations whose name holds this text")
    a = ap.parse_args()
    from dask.utils import key_split
    from distributed import Client, get_task_stream, wait

    import hpcgpu.array as ha
    from hpcgpu import LocalGPUCluster
    from hpcgpu.array import plane

    with LocalGPUCluster(n_workers=a.gpus, dashboard_address=None, silence_logs=40) as cl, Client(cl) as c:
        x = ha.random.random(size=(20000, 20000), chunks=(2500, 2500), seed=1).persist()
        wait(x)
        ops = [("transpose", lambda: plane.transpose(x)), ("rechunk", lambda: plane.rechunk(x, (20000, 500))),
               ("matmul", lambda: plane.matmul(x, x))]
        if a.weak_rows:
            w = ha.random.random(size=(a.weak_rows * a.gpus, 20000), chunks=(2500, 2500), seed=2).persist()
            wait(w)
            ops.append(("matmul-weak", lambda: plane.matmul(w, x)))
        for name, make in [op for op in ops if a.only in op[0]]:
            for rep in range(3):
                with get_task_stream(c) as ts:
                    t = time.perf_counter()
                    y = make().persist()
                    wait(y)
                    total = time.perf_counter() - t
                per = defaultdict(float)
                for task in ts.data:
                    for s in task["startstops"]:
                        per[key_split(task["key"]) + ":" + s["action"]] += s["stop"] - s["start"]
                ranks = c.run(lambda dask_worker: dask_worker._hpcgpu_plane.history[-1][-1])
                t = time.perf_counter()
                float(y.sum().compute())
                summed = time.perf_counter() - t
                print(json.dumps({"op": name, "gpus": a.gpus, "rep": rep, "persist_s": round(total, 4),
                                  "sum_s": round(summed, 4),
                                  "rank_s": [round(v, 4) for v in ranks.values()],
                                  "tasks": len(ts.data), "by_kind_s": {k: round(v, 4) for k, v in per.items()}}), flush=True)
                del y


if __name__ == "__main__":
    main()
