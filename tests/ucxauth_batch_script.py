"""Run by tests/integration/test_ucxauth_batch.py inside a batch job: compute over ``ucx+auth``, and
check that a plain ``ucx://`` connection to the same scheduler is refused."""

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
    print("RESULT", client.scheduler.address, total, workers, "key", mode, "plain", plain)
    ok = client.scheduler.address.startswith("ucx+auth://") and total == 42 and mode == "0o600" \
        and all(a.startswith("ucx+auth://") for a in workers) and plain.startswith("refused")
    sys.exit(0 if ok else 3)


if __name__ == "__main__":
    main()
