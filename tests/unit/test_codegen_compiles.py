"""The generated CUDA sources compile for Hopper (sm_90), without a GPU: nvcc on this machine.

The GPU tests (tests/unit/test_fused.py, tests/unit/test_fused_batch.py) check the kernels' values on
a lent GPU; this checks, on every CI run, that every loop shape and parameter form the
generator has (flattened or rows-by-columns reduction, per-block or batched keys, 32- or
64-bit indices, maps with blocks in memory) is valid CUDA C++.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from hpcgpu.array.fused.codegen import batch_kernel_source, kernel_source
from hpcgpu.array.fused.cuda import OPTIONS
from hpcgpu.array.fused.expr import ArrayLeaf, LazyBlock, RandomLeaf

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="needs CUDA's nvcc (on the CI and development machines)")


def random(shape, method="normal", dtype="float64", args=(10.0, 1.0), seed=0) -> LazyBlock:
    return LazyBlock(RandomLeaf("cupy", seed, method, args, dtype, shape, 12345, (0,) * len(shape)), "cupy")


def memory(shape) -> LazyBlock:
    return LazyBlock(ArrayLeaf(np.ones(shape)), "cupy")


def cases():
    x, u = random((10000, 10000)), random((300, 7), "uniform", "float32", (0.0, 1.0), 1)
    big = random((50000, 50000))  # 2.5e9 elements: 64-bit indices
    yield "array-sum rows", np.sum((x[::2, ::2] + 1), axis=(0, 1), keepdims=True).node
    yield "axis 0", np.max(x * 2, axis=0, keepdims=True).node
    yield "axis 1", np.min(x[::-1] - 1, axis=1, keepdims=True).node
    yield "narrow inner axis", np.sum(u * u, axis=(0, 1), keepdims=True).node
    yield "two leaves", np.prod(np.where(x[:300, :7] > 10, u, -u), axis=1, keepdims=True).node
    yield "one dimension", np.sum(random((1_000_000,)) + 1, axis=(0,), keepdims=True).node
    yield "three dimensions", np.sum(random((64, 32, 512)), axis=(0, 2), keepdims=True).node
    yield "integers", np.max(random((1000, 1000), "integers", "int64", (-5, 9)) * 3, axis=(0, 1), keepdims=True).node
    yield "64-bit indices", np.sum(big[::3, 1::2], axis=(0, 1), keepdims=True).node


def map_cases():
    a, x = memory((400, 300)), random((400, 300))
    yield "map with a block in memory", ((a + x) * 2)[::-1, ::3].node
    yield "map of a random block", np.sqrt(abs(x)).astype("float32").node
    yield "powers as CuPy computes them", (abs(x) ** 2 + abs(x) ** 0.5 + x ** -1.0 + np.exp2(x) + abs(x) ** 3.25).node
    yield "float32 products", np.square(x.astype("float32") * np.float32(1.5) + 1).node


def _compiles(source: str, tmp_path, name: str) -> None:
    path = tmp_path / f"{name.replace(' ', '_')}.cu"
    path.write_text(source)
    done = subprocess.run([NVCC, "-cubin", "-arch=sm_90", *OPTIONS, str(path), "-o",
                           str(path.with_suffix(".cubin"))], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{name}:\n{done.stderr}\n{source[-2500:]}"


@pytest.mark.parametrize("name,node", list(cases()), ids=[name for name, _ in cases()])
def test_reduction_kernels_compile_per_block_and_batched(name, node, tmp_path):
    source, _, plan = kernel_source(node)
    _compiles(source, tmp_path, f"{name} single")
    batched, batch_plan = batch_kernel_source(node)
    _compiles(batched, tmp_path, f"{name} batched")
    assert batch_plan["outputs"] == plan["outputs"] and batch_plan["batch"] >= 1


@pytest.mark.parametrize("name,node", list(map_cases()), ids=[name for name, _ in map_cases()])
def test_map_kernels_compile(name, node, tmp_path):
    _compiles(kernel_source(node)[0], tmp_path, name)


def test_the_array_sum_walks_rows_and_the_1d_sum_the_flattened_index():
    rows = kernel_source(np.sum((random((10000, 10000))[::2, ::2] + 1), axis=(0, 1), keepdims=True).node)[0]
    flat = kernel_source(np.sum(random((1_000_000,)), axis=(0,), keepdims=True).node)[0]
    assert "for (int o = p; o < 5000; o += parts)" in rows and "i1 += 256" in rows
    assert "r += parts * 256" in flat and "o += parts" not in flat


def _benchmark_kernels():
    import sys

    from conftest import ROOT

    for folder in ("benchmarks", "benchmarks/gpu"):
        if str(ROOT / folder) not in sys.path:
            sys.path.insert(0, str(ROOT / folder))
    import fused_limit
    import kernel_variants

    yield "fused_limit", fused_limit._KERNEL
    for name in kernel_variants._KERNELS:
        yield f"kernel_variants {name}", kernel_variants.source(name)


@pytest.mark.parametrize("name,source", list(_benchmark_kernels()), ids=[name for name, _ in _benchmark_kernels()])
def test_the_benchmarks_hand_written_kernels_compile(name, source, tmp_path):
    _compiles(source, tmp_path, name)
