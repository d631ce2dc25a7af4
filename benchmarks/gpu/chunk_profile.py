"""Per-operation cost of one 10000 x 10000 float64 array-sum chunk on a GPU (lead's profile).

Run on a GPU machine: ``python benchmarks/gpu/chunk_profile.py``. Prints milliseconds per
operation (generator set-up, generation, +1, strided and contiguous sums) and the GPU clocks.
"""
import time, cupy
from cupy.cuda import curand
n = 10000
def ev(f, reps=10):
    f(); cupy.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(reps): f()
    cupy.cuda.Device().synchronize()
    return (time.perf_counter() - t) / reps * 1e3
rs = cupy.random.RandomState(1, method=curand.CURAND_RNG_PSEUDO_PHILOX4_32_10)
x = rs.normal(10, 1, (n, n))
buf = cupy.empty((n, n))
print("create Philox RandomState ms", ev(lambda: cupy.random.RandomState(1, method=curand.CURAND_RNG_PSEUDO_PHILOX4_32_10)))
print("normal f64 same generator ms", ev(lambda: rs.normal(10, 1, (n, n))))
print("standard_normal f64 ms", ev(lambda: rs.standard_normal((n, n))))
print("normal f32 ms", ev(lambda: rs.normal(10, 1, (n, n), dtype="float32")))
print("uniform f64 ms", ev(lambda: rs.uniform(0, 1, (n, n))))
print("x+1 ms", ev(lambda: x + 1))
print("x.sum() ms", ev(lambda: x.sum()))
print("(x+1)[::2,::2].sum() ms", ev(lambda: (x + 1)[::2, ::2].sum()))
print("x[::2,::2].sum() ms", ev(lambda: x[::2, ::2].sum()))
print("cupy.empty 800MB ms", ev(lambda: cupy.empty((n, n))))
g = cupy.random.Generator(cupy.random.Philox4x3210(1))
print("Generator Philox standard_normal ms", ev(lambda: g.standard_normal((n, n))))
print("copy ms", ev(lambda: x.copy()))
import subprocess; print(subprocess.run(["nvidia-smi","--query-gpu=clocks.sm,clocks.mem,clocks.max.sm,power.draw,pstate","--format=csv"],capture_output=True,text=True).stdout)
