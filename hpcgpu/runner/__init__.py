"""Batch mode: a Dask cluster of one worker per GPU inside one allocation.

``hpcgpu run script.py`` (:mod:`hpcgpu.runner.batch`) for the batch script's shell;
:class:`GPURunner` for scripts that the launcher starts on every rank; :func:`get_client`
inside either. Names are imported lazily: ``get_client`` does not load the runner.
"""

from __future__ import annotations

from hpcgpu.system.lazy import lazy_getattr

_EXPORTS = {
    "GPURunner": "hpcgpu.runner.api",
    "SLURMRunner": "hpcgpu.runner.api",
    "get_client": "hpcgpu.runner.client",
    "BatchOptions": "hpcgpu.runner.batch",
    "run_batch": "hpcgpu.runner.batch",
    "Allocation": "hpcgpu.runner.allocation",
    "detect_allocation": "hpcgpu.runner.allocation",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
