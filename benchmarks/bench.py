"""``hpcgpu bench`` as a script, for batch mode: ``hpcgpu run benchmarks/bench.py [bench options]``.

Inside ``hpcgpu run`` the scheduler's address is in ``DASK_SCHEDULER_ADDRESS``, so the
sweep uses the allocation's workers (1, 2, 4... of them) instead of starting a cluster.
"""

from hpcgpu.cli.bench import bench

if __name__ == "__main__":
    bench(prog_name="hpcgpu bench")
