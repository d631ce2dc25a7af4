"""Parse the walltime and memory forms users write, and format them back.

Parsing raises :class:`ValueError` naming the field, the value and the accepted
forms, so that bad input is refused before anything is rendered or submitted.
"""

from __future__ import annotations

import math
import re
import warnings
from datetime import timedelta

__all__ = [
    "parse_device_bytes",
    "WALLTIME_FORMS",
    "MEMORY_FORMS",
    "parse_walltime",
    "parse_memory",
    "format_hms",
    "format_memory",
    "AmbiguousMemoryUnitWarning",
]

WALLTIME_FORMS = (
    "minutes as a number (90), 'MM:SS', 'HH:MM:SS', 'D-HH', 'D-HH:MM' or 'D-HH:MM:SS' "
    "(e.g. '01:00:00', '1-00:00:00')"
)
#: a century of minutes and a yobibyte: more than any job asks for (bounds against typos
#: such as 10**30, which no scheduler parses, not policies)
MAX_WALLTIME_MINUTES = 366 * 24 * 60 * 100
MAX_MEMORY = 2**80
MEMORY_FORMS = "a number of bytes or a size with a unit such as '512MB', '60GB', '60GiB', '1.5TB'"

# "GB" and "GiB" mean what they mean in Dask (dask.utils.parse_bytes): 10**9 and 2**30.
# A bare letter ("60G") is how SLURM, PBS and Grid Engine write memory, and there it is
# binary (SLURM's --mem=60G is 60 GiB); Dask would read it as 10**9. hpcgpu follows the
# batch schedulers, and warns, because the two readings differ by 7 %.
_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20, "gi": 2**30, "gib": 2**30,
    "ti": 2**40, "tib": 2**40, "pi": 2**50, "pib": 2**50,
}
_SCHEDULER_UNITS = {"k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40, "p": 2**50}


class AmbiguousWalltimeWarning(UserWarning):
    """A bare number of minutes that reads as seconds (``walltime=3600``: 2.5 days)."""


#: a bare number at least this large and a multiple of WALLTIME_SECONDS_STEP warns: as
#: seconds it is a whole number of 5 minutes (1800, 3600, 7200, 86400); as minutes 30 hours
#: or more. Numbers of minutes people write (60, 90, 720, 1440, 2880, 10080) do not warn.
WALLTIME_SECONDS_FROM = 1800
WALLTIME_SECONDS_STEP = 300


def _warn_if_seconds(field: str, value: int | float) -> None:
    """Warn when a number of minutes looks like a number of seconds.

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     _warn_if_seconds("walltime", 1440); _warn_if_seconds("walltime", 3600)
    >>> [str(w.message).split(":")[0] for w in caught]
    ['walltime=3600 is read as minutes (2-12']
    """
    if value >= WALLTIME_SECONDS_FROM and value == int(value) and int(value) % WALLTIME_SECONDS_STEP == 0:
        warnings.warn(
            f"walltime={value!r} is read as minutes ({format_hms(int(value) * 60, days=True)}), "
            f"as SLURM reads a bare number; if you meant {int(value)} seconds write "
            f"{field}={format_hms(int(value))!r}", AmbiguousWalltimeWarning, stacklevel=4)


class AmbiguousMemoryUnitWarning(UserWarning):
    """A size such as ``"60G"``: read as the batch schedulers read it (GiB), not as Dask."""
_MEMORY_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_WALLTIME_RE = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def _bad(field: str, value: object, forms: str) -> ValueError:
    return ValueError(f"{field}={value!r} is not understood: use {forms}")


def parse_walltime(value: str | int | float | timedelta, field: str = "walltime") -> int:
    """Return a walltime in seconds, from the forms SLURM accepts.

    Examples
    --------
    >>> parse_walltime("01:00:00")
    3600
    >>> parse_walltime("1-00:00:00")
    86400
    >>> parse_walltime(90)
    5400
    >>> parse_walltime("1 hour")
    Traceback (most recent call last):
    ...
    ValueError: walltime='1 hour' is not understood: use minutes as a number (90), 'MM:SS', \
'HH:MM:SS', 'D-HH', 'D-HH:MM' or 'D-HH:MM:SS' (e.g. '01:00:00', '1-00:00:00')
    """
    if isinstance(value, timedelta):
        seconds = int(value.total_seconds())
    elif isinstance(value, bool):
        raise _bad(field, value, WALLTIME_FORMS)
    elif isinstance(value, (int, float)):
        if not math.isfinite(value) or abs(value) > MAX_WALLTIME_MINUTES:
            raise ValueError(f"{field}={value!r} is not a walltime hpcgpu accepts (at most "
                             f"{MAX_WALLTIME_MINUTES} minutes): use {WALLTIME_FORMS}")
        seconds = int(round(value * 60))
        _warn_if_seconds(field, value)
    elif isinstance(value, str):
        seconds = _parse_walltime_text(value.strip(), field)
    else:
        raise _bad(field, value, WALLTIME_FORMS)
    if seconds <= 0:
        raise ValueError(f"{field}={value!r} must be longer than zero: use {WALLTIME_FORMS}")
    if seconds > MAX_WALLTIME_MINUTES * 60:
        raise ValueError(f"{field}={value!r} is longer than {MAX_WALLTIME_MINUTES} minutes, the "
                         f"most hpcgpu accepts: use {WALLTIME_FORMS}")
    return seconds


def _parse_walltime_text(text: str, field: str) -> int:
    match = _WALLTIME_RE.match(text)
    if not match:
        raise _bad(field, text, WALLTIME_FORMS)
    days, a, b, c = match.groups()
    parts = [int(p) for p in (a, b, c) if p is not None]
    if days is not None:
        # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = (parts + [0, 0])[:3]
        if minutes >= 60 or seconds >= 60:
            raise _bad(field, text, WALLTIME_FORMS)
        return ((int(days) * 24 + hours) * 60 + minutes) * 60 + seconds
    if len(parts) == 1:  # minutes
        return parts[0] * 60
    if len(parts) == 2:  # MM:SS
        minutes, seconds = parts
        if seconds >= 60:
            raise _bad(field, text, WALLTIME_FORMS)
        return minutes * 60 + seconds
    hours, minutes, seconds = parts
    if minutes >= 60 or seconds >= 60:
        raise _bad(field, text, WALLTIME_FORMS)
    return (hours * 60 + minutes) * 60 + seconds


def parse_memory(value: str | int, field: str = "memory_per_gpu") -> int:
    """Return a memory size in bytes; ``GB`` is 10**9 and ``GiB`` 2**30, as in Dask.

    A bare letter (``K``, ``M``, ``G``, ``T``, ``P``, any case) is binary, as in SLURM's
    ``--mem=60G``, PBS and Grid Engine: ``"60G"`` is 60 GiB. Dask reads ``"60G"`` as
    60 * 10**9, so such a value also warns (:class:`AmbiguousMemoryUnitWarning`) and says
    how to write it without doubt.

    Examples
    --------
    >>> parse_memory("60GB")
    60000000000
    >>> parse_memory("60GiB")
    64424509440
    >>> parse_memory("512MB")
    512000000
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", AmbiguousMemoryUnitWarning)
    ...     parse_memory("60G") == parse_memory("60GiB")
    True
    >>> parse_memory("60XB")
    Traceback (most recent call last):
    ...
    ValueError: memory_per_gpu='60XB' is not understood: use a number of bytes or a size \
with a unit such as '512MB', '60GB', '60GiB', '1.5TB'
    """
    if isinstance(value, bool):
        raise _bad(field, value, MEMORY_FORMS)
    if isinstance(value, int):
        number, unit = float(value), 1
    elif isinstance(value, str):
        match = _MEMORY_RE.match(value)
        suffix = match.group(2).lower() if match else ""
        if not match or suffix not in _UNITS and suffix not in _SCHEDULER_UNITS:
            raise _bad(field, value, MEMORY_FORMS)
        number, unit = float(match.group(1)), _UNITS.get(suffix) or _SCHEDULER_UNITS[suffix]
    else:
        raise _bad(field, value, MEMORY_FORMS)
    if not math.isfinite(number * unit) or number * unit > MAX_MEMORY:
        raise ValueError(f"{field}={value!r} is more than {MAX_MEMORY} bytes, the most hpcgpu "
                         f"accepts: use {MEMORY_FORMS}")
    size = int(number * unit)
    if size <= 0:
        raise ValueError(f"{field}={value!r} must be larger than zero: use {MEMORY_FORMS}")
    if isinstance(value, str) and suffix in _SCHEDULER_UNITS:
        decimal = int(number * _UNITS[suffix + "b"])
        _warn_ambiguous(field, value, match.group(1), suffix.upper(), size, decimal)
    return size


def _warn_ambiguous(field: str, value: str, number: str, letter: str, size: int,
                    decimal: int) -> None:
    warnings.warn(
        f"{field}={value!r} is read as {number} {letter}iB ({size} bytes), as SLURM reads "
        f"--mem={number}{letter}; Dask would read it as {number} {letter}B ({decimal} bytes). "
        f"Write {number + letter + 'iB'!r} or {number + letter + 'B'!r} to say which.",
        AmbiguousMemoryUnitWarning, stacklevel=3,
    )


def format_hms(seconds: int, *, days: bool = False) -> str:
    """Format seconds as ``HH:MM:SS`` (hours may pass 24) or ``D-HH:MM:SS``.

    Examples
    --------
    >>> format_hms(5400)
    '01:30:00'
    >>> format_hms(90000)
    '25:00:00'
    >>> format_hms(90000, days=True)
    '1-01:00:00'
    """
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if days and hours >= 24:
        d, hours = divmod(hours, 24)
        return f"{d}-{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{hours:02d}:{minutes:02d}:{secs:02d}"


def format_memory(size: int, units: tuple[tuple[str, int], ...]) -> str:
    """Format bytes in the largest of ``units`` that holds it exactly, else round the smallest up.

    ``units`` runs from the largest to the smallest, each a (suffix, bytes) pair.

    Examples
    --------
    >>> SLURM = (("T", 2**40), ("G", 2**30), ("M", 2**20))
    >>> format_memory(64424509440, SLURM)
    '60G'
    >>> format_memory(60 * 10**9, SLURM)
    '57221M'
    """
    for suffix, unit in units:
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    suffix, unit = units[-1]
    return f"{math.ceil(size / unit)}{suffix}"


def parse_device_bytes(value: str | None, total: int | None, field: str = "size") -> int | None:
    """Bytes from ``"40GB"``, a fraction of ``total`` (``"0.8"``) or ``0``/``none`` (None).

    Examples
    --------
    Rounded down to RMM's 256-byte alignment:

    >>> parse_device_bytes("0.5", 4096), parse_device_bytes("1GB", None), parse_device_bytes("0", 9)
    (2048, 1000000000, None)
    >>> parse_device_bytes("lots", 9, "rmm_pool_size")
    Traceback (most recent call last):
    ...
    ValueError: rmm_pool_size='lots' is not a size: give bytes ('40GB'), a fraction of device memory ('0.9'), 'auto' or 'none'
    """
    if value is None or str(value).strip().lower() in ("0", "none", "off", "false", ""):
        return None
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        number = None
    try:
        if number is not None and 0 < number <= 1:
            if total is None:
                return None
            return int(total * number) // 256 * 256
        from dask.utils import parse_bytes

        return int(parse_bytes(text)) // 256 * 256
    except (ValueError, TypeError):
        raise ValueError(f"{field}={value!r} is not a size: give bytes ('40GB'), a fraction of "
                         "device memory ('0.9'), 'auto' or 'none'") from None
