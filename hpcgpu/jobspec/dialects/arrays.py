"""Job arrays, kept under this name: they live in :mod:`hpcgpu.schedulers.arrays`."""

from typing import Any

from hpcgpu.schedulers import arrays as _arrays
from hpcgpu.schedulers.arrays import (ArrayRequest, array_directives, element_index, element_job_id,
                                      element_name, expand_indices, name_template)

__all__ = ["ArrayRequest", "array_directives",
           "element_index", "element_name", "element_job_id", "expand_indices",
           "name_template"]


def __getattr__(name: str) -> Any:
    return getattr(_arrays, name)
