"""The per-GPU worker: ``python -m hpcgpu.worker <scheduler> [options]``.

See :mod:`hpcgpu.worker.placement` (which GPU, which name), :mod:`hpcgpu.worker.nannies`
(a nanny per GPU from one process per node), :mod:`hpcgpu.worker.gpuinfo` (what the GPU is)
and :mod:`hpcgpu.worker.preload` (what runs inside the worker).
"""

from hpcgpu.worker.placement import Placement, placement_from_env

__all__ = ["Placement", "placement_from_env"]
