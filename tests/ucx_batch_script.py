"""Run by tests/integration/test_batch_ucx.py inside a batch job: compute over UCX, check the addresses."""

import sys
import dask.array as da
import hpcgpu


def main() -> int:
    client = hpcgpu.get_client()
    client.wait_for_workers(2)
    x = da.arange(400 * 400, chunks=100 * 400).reshape(400, 400).rechunk(100).astype("f8")
    total = float(client.compute((x + x.T).sum()).result(timeout=60))
    views = client.run(lambda dask_worker: (dask_worker.address, dask_worker.state.transfer_incoming_count_total))
    print("RESULT", client.scheduler.address, total, sorted(views.values()))
    ok = client.scheduler.address.startswith("ucx://") and total == 2 * sum(range(400 * 400)) \
        and all(a.startswith("ucx://") for a, _ in views.values()) and sum(n for _, n in views.values()) > 0
    sys.exit(0 if ok else 3)


if __name__ == "__main__":
    main()
