"""Run by tests/integration/test_ucxauth_batch.py inside a batch job: compute over ``ucx+auth``
(hpcgpu's client and a plain ``distributed.Client`` of the script's own), and check that a
plain ``ucx://`` connection to the same scheduler is refused."""

import asyncio
import os
import stat
import sys

import hpcgpu
from distributed.comm import connect


async def _plain(address: str) -> str:
    try:
        comm = await connect("ucx://" + address.split("://", 1)[1], timeout=5)
    except OSError as exc:
        return f"refused ({type(exc).__name__})"
    await comm.close()
    return "accepted"


def main() -> int:
    client = hpcgpu.get_client()
    client.wait_for_workers(2)
    x = client.submit(lambda: 20, workers=[sorted(client.nthreads())[0]], pure=False)
    total = client.submit(lambda a: a + 22, x, workers=[sorted(client.nthreads())[1]]).result(timeout=60)
    workers = sorted(client.nthreads())
    key = os.environ["DASK_HPCGPU__UCX_AUTH__KEY_FILE"]
    mode = oct(stat.S_IMODE(os.stat(key).st_mode))
    plain = asyncio.run(_plain(client.scheduler.address))
    from distributed import Client

    with Client() as own:  # a plain Client of the script's own, as DASK_SCHEDULER_ADDRESS says
        again = own.submit(lambda: 42, pure=False).result(timeout=60)
    print("RESULT", client.scheduler.address, total, workers, "key", mode, "plain", plain, "own", again)
    ok = client.scheduler.address.startswith("ucx+auth://") and total == again == 42 and mode == "0o600" \
        and all(a.startswith("ucx+auth://") for a in workers) and plain.startswith("refused")
    sys.exit(0 if ok else 3)


if __name__ == "__main__":
    main()
