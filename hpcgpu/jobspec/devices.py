"""dask-cuda's ``CUDA_VISIBLE_DEVICES`` argument: device indices and GPU or MIG UUIDs."""

from __future__ import annotations

from typing import Any

__all__ = ["parse_cuda_visible_devices"]


def parse_cuda_visible_devices(value: Any) -> list[str]:
    """dask-cuda's ``CUDA_VISIBLE_DEVICES``: ``"0,1"``, ``[0, 1]``, GPU or MIG UUIDs.

    Returns the entries as strings (an index or a UUID), as they go into the workers'
    ``CUDA_VISIBLE_DEVICES``.

    Examples
    --------
    >>> parse_cuda_visible_devices("0, 3,6")
    ['0', '3', '6']
    >>> parse_cuda_visible_devices([1, "MIG-41b3359c-e721-56e5-8009-12e5797ed514"])
    ['1', 'MIG-41b3359c-e721-56e5-8009-12e5797ed514']
    >>> parse_cuda_visible_devices("0,gpu0")
    Traceback (most recent call last):
    ...
    ValueError: CUDA_VISIBLE_DEVICES: 'gpu0' is neither a device index nor a UUID starting with 'GPU-' or 'MIG-' (as nvidia-smi -L prints them)
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        text = str(item).strip()
        if isinstance(item, bool) or not (text.isdigit() or text.startswith(("GPU-", "MIG-"))):
            raise ValueError(f"CUDA_VISIBLE_DEVICES: {text!r} is neither a device index nor a UUID "
                             "starting with 'GPU-' or 'MIG-' (as nvidia-smi -L prints them)")
        out.append(str(int(text)) if text.isdigit() else text)
    if len(set(out)) != len(out):
        raise ValueError(f"CUDA_VISIBLE_DEVICES={value!r} names a device twice: one worker per device")
    return out
