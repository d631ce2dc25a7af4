"""``dask.array.gufunc`` under hpcgpu.array: Dask's own objects (hpcgpu has no other path for them)."""

from hpcgpu.system.reexport import fallback

__getattr__, __dir__, __all__ = fallback(__name__, globals(), "dask.array.gufunc")

