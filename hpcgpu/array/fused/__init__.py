"""Fused block kernels: a block's chain of array steps as one generated kernel.

See :mod:`hpcgpu.array.fused.runner` for when it applies, :mod:`~hpcgpu.array.fused.expr`
for what a chain records, :mod:`~hpcgpu.array.fused.ops`, :mod:`~hpcgpu.array.fused.codegen` and
:mod:`~hpcgpu.array.fused.cuda` for the kernels, and
:mod:`~hpcgpu.array.fused.replay` for the NumPy backend the CPU tests use.
"""

from hpcgpu.array.fused.expr import LazyBlock, force_all
from hpcgpu.array.fused.nodes import Unsupported
from hpcgpu.array.fused.runner import fused_backends, lazy_random_block, run_step

__all__ = ["LazyBlock", "Unsupported", "force_all", "fused_backends", "lazy_random_block", "run_step"]
