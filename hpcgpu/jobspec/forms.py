"""The forms a keyword may take, and the check of one value against its form.

A :class:`Form` is a keyword's Python types, its bounds and its accepted form in words;
:func:`check_value` refuses a value not of that form with the field's name and the form
(:class:`KeywordTypeError` for a wrong type, ``ValueError`` for a wrong value). The table of
which keyword has which form is :mod:`hpcgpu.jobspec.keywords`.

Examples
--------
>>> check_value("nodes", 4, count(1, 8))
>>> check_value("exclusive", "yes", FLAG)
Traceback (most recent call last):
...
hpcgpu.jobspec.forms.KeywordTypeError: exclusive='yes' is a str: give True or False
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

__all__ = ["Form", "KeywordTypeError", "count", "check_value", "whole_number", "with_article",
           "http_address", "MAX_TEXT", "MAX_NODES", "MAX_GPUS_PER_NODE", "MAX_WORKERS", "MAX_SECONDS",
           "FLAG", "TEXT", "PATH", "DURATION", "DURATION_OFF", "WALLTIME", "MEMORY", "SIZE",
           "TEXTS", "TEXT_OR_TEXTS", "DICT", "PROTOCOL", "MEMORY_LIMIT", "LISTEN"]

#: the longest text any keyword takes (Linux's PATH_MAX): longer is a mistake, not a path
MAX_TEXT = 4096
#: more nodes than the largest machines have (about 11,000 in 2025)
MAX_NODES = 100_000
#: more GPUs than any node has (8 today; room for chiplets and MIG slices)
MAX_GPUS_PER_NODE = 128
#: more workers than one Dask scheduler takes, in one job and in one cluster
MAX_WORKERS = 100_000
#: the longest duration any keyword takes (about 31 years)
MAX_SECONDS = 10**9


class KeywordTypeError(TypeError, ValueError):
    """A keyword of the wrong type: a ``TypeError``, and a ``ValueError`` as every other
    refusal of the constructors (callers that catch ``ValueError`` keep working)."""


@dataclass(frozen=True)
class Form:
    """What one keyword accepts.

    Attributes
    ----------
    types : tuple of type
        The Python types taken (``bool`` is not an ``int`` here unless listed).
    text : str
        The accepted form, in the words of the error message.
    low, high : int or None
        Bounds of a count (a whole number, or a string of digits).
    items : tuple of type or None
        The types of a list's items or a dict's values.
    parse : callable or None
        Reads a value of the right type; its ``ValueError``/``TypeError``/``KeyError`` means
        the value is not of the form.
    """

    types: tuple[type, ...]
    text: str
    low: int | None = None
    high: int | None = None
    items: tuple[type, ...] | None = None
    parse: Callable[[Any], Any] | None = None


def count(low: int, high: int) -> Form:
    """A whole number from ``low`` to ``high`` (a string of digits too: the command line's).

    >>> count(1, 8).text
    'a whole number from 1 to 8'
    """
    return Form((int, str), f"a whole number from {low} to {high}", low, high)


def _duration(value: Any) -> Any:
    """Seconds of a duration as dask reads it; the words ``off`` and ``auto`` pass."""
    if isinstance(value, str) and value.strip().lower() in ("off", "auto", "false", "none"):
        return value
    from dask.utils import parse_timedelta

    seconds = parse_timedelta(value, default="seconds")
    if not 0 <= seconds <= MAX_SECONDS:  # nan fails too
        raise ValueError(value)
    return seconds


def _size(value: Any) -> Any:
    """A device size as a number: finite, at most an exbibyte (a negative one is refused by
    its own check, :func:`~hpcgpu.jobspec.gpuoptions.check_device_bytes`, with its words)."""
    if isinstance(value, (int, float)) and not value <= 2**60 or value != value:  # nan
        raise ValueError(value)
    return value


def _memory_limit(value: Any) -> Any:
    """A worker's host memory limit as distributed reads it: ``"auto"``, a size, bytes or a
    fraction of the host's memory."""
    if isinstance(value, str) and value.strip().lower() in ("auto", "none", ""):
        return value
    if isinstance(value, str):
        from dask.utils import parse_bytes

        value = parse_bytes(value)
    if not 0 <= value <= 2**80:  # nan fails too
        raise ValueError(value)
    return value


_LISTEN = re.compile(r"(?:[A-Za-z0-9_.-]*|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?")


def _listen(value: Any) -> Any:
    """A host, ``host:port``, ``:port`` or a port, as distributed's listen addresses."""
    if not value or not _LISTEN.fullmatch(value):
        raise ValueError(value)
    return value


_PROTOCOL = re.compile(r"[a-z][a-z0-9+]*(?:://)?")


def _protocol(value: Any) -> Any:
    """A comm protocol's name (``tcp``, ``tls``, ``ucx``, ``tls://``), nothing else."""
    if not _PROTOCOL.fullmatch(value):
        raise ValueError(value)
    return value


def _logging_level(value: Any) -> Any:
    """A level ``logging`` knows (``"error"``, ``40``), as ``silence_logs`` takes it."""
    import logging

    if isinstance(value, str) and not isinstance(logging.getLevelName(value.upper()), int):
        raise ValueError(value)
    return value


_HTTP_ADDRESS = re.compile(r"(?:[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])?:\d{1,5}")


def http_address(value: Any) -> str:
    """``value`` if it is a listen address ``[host]:port`` (``":9100"``, ``"10.1.0.5:0"``,
    ``"[::1]:0"``): it goes unquoted into dask-jobqueue's worker command, so nothing else.

    >>> http_address(":9100")
    ':9100'
    >>> http_address("0.0.0.0:1 ; id")
    Traceback (most recent call last):
    ...
    ValueError: '0.0.0.0:1 ; id' is not host:port
    """
    if not isinstance(value, str) or not _HTTP_ADDRESS.fullmatch(value):
        raise ValueError(f"{value!r} is not host:port")
    return value


FLAG = Form((bool,), "True or False")
TEXT = Form((str,), "a string")
PATH = Form((str, os.PathLike), "a path (a string)")
DURATION = Form((int, float, str, timedelta), "seconds (90) or a duration ('5 minutes', '90s')",
                parse=_duration)
#: a duration, or off (retirement)
DURATION_OFF = Form((int, float, str, timedelta, bool), "a duration ('5 minutes', '90s'), 'off' "
                    "or False", parse=_duration)
WALLTIME = Form((int, float, str, timedelta), "minutes (90) or 'HH:MM:SS' ('01:00:00')")
MEMORY = Form((int, str), "bytes (60000000000) or a size with a unit ('60GB', '60GiB')")
SIZE = Form((int, float, str), "bytes (40000000000), a size ('40GB') or a fraction (0.9)",
            parse=_size)
TEXTS = Form((list, tuple), "a list of strings (['a', 'b'])", items=(str,))
TEXT_OR_TEXTS = Form((str, list, tuple), "a string ('a,b') or a list of strings (['a', 'b'])",
                     items=(str,))
DICT = Form((dict,), "a dict")
LISTEN = Form((str,), "an address: a host, 'host:port' or ':port' ('localhost:8787', ':0')",
              parse=_listen)
PROTOCOL = Form((str,), "a protocol: 'tcp', 'tls', 'ucx' or 'ucxx'", parse=_protocol)
MEMORY_LIMIT = Form((int, float, str), "'auto', bytes, a size ('20GB') or a fraction (0.5)",
                    parse=_memory_limit)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}...({len(text)} characters)"


def _is(value: Any, types: tuple[type, ...]) -> bool:
    # bool is an int to Python, never a count or a size here
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def with_article(value: Any) -> str:
    """``value``'s type with its article.

    >>> with_article(3), with_article("x"), with_article([1])
    ('an int', 'a str', 'a list')
    """
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeio' else 'a'} {name}"


def whole_number(field: str, value: Any, low: int, high: int) -> int:
    """``value`` as an int from ``low`` to ``high``, or a ``ValueError`` naming the field.

    >>> whole_number("nodes", "4", 1, 8)
    4
    >>> whole_number("nodes", 9, 1, 8)
    Traceback (most recent call last):
    ...
    ValueError: nodes=9 is more than 8, the most hpcgpu accepts: give a whole number from 1 to 8
    """
    accepted = f"a whole number from {low} to {high}"
    if not _is(value, (int, str)):
        raise KeywordTypeError(f"{field}={_shown(value)} is {with_article(value)}: give {accepted}")
    text = value.strip() if isinstance(value, str) else None
    if text is not None and not (text.isascii() and text.isdigit() and len(text) <= 20):
        raise ValueError(f"{field}={_shown(value)} is not {accepted}")
    number = int(value)
    if number > high:
        raise ValueError(f"{field}={_shown(value)} is more than {high}, the most hpcgpu "
                         f"accepts: give {accepted}")
    if number < low:
        raise ValueError(f"{field}={_shown(value)} must be {accepted}")
    return number


def check_value(field: str, value: Any, form: Form) -> None:
    """Refuse ``value`` (None: not given, always taken) unless it has ``form``."""
    if value is None:
        return
    if form.low is not None and form.high is not None:
        whole_number(field, value, form.low, form.high)
        return
    if not _is(value, form.types):
        raise KeywordTypeError(f"{field}={_shown(value)} is {with_article(value)}: give {form.text}")
    if isinstance(value, (str, os.PathLike)) and len(os.fspath(value)) > MAX_TEXT:
        raise ValueError(f"{field}={_shown(value)} is longer than {MAX_TEXT} characters: "
                         f"give {form.text} of at most {MAX_TEXT}")
    if form.parse is not None and not isinstance(value, bool):
        try:
            form.parse(value)
        except Exception:  # the parsers are pure: any failure means "not of this form"
            raise ValueError(f"{field}={_shown(value)} is not understood: give {form.text}") from None
    if form.items is None or isinstance(value, str):
        return
    items = value.values() if isinstance(value, dict) else value
    for item in items:
        if not _is(item, form.items):
            raise KeywordTypeError(f"{field}={_shown(value)} holds {_shown(item)}, "
                                   f"{with_article(item)}: give {form.text}")


