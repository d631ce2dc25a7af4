"""The ``security=`` argument of every cluster class: a temporary certificate, or none.

Examples
--------
>>> cluster_security(False, default=True) is None
True
>>> cluster_security(None, default=True).require_encryption
True
"""

from __future__ import annotations

import warnings
from typing import Any

from distributed.security import Security

__all__ = ["cluster_security", "PLAIN_WARNING"]

PLAIN_WARNING = ("security=False: the scheduler and workers talk without TLS, and anyone who can "
                 "reach the scheduler's port can run code as you. Leave security on unless the "
                 "network is private to you.")


def cluster_security(security: Any, *, default: bool, warn_plain: bool = False,
                     stacklevel: int = 3) -> Security | None:
    """``True`` (or ``None`` when ``default``): a temporary certificate in memory, as
    :meth:`distributed.security.Security.temporary` makes it; ``False``: plain TCP (warned
    when ``warn_plain``); a :class:`~distributed.security.Security` as given."""
    if security is None:
        security = default
    if security is True:
        try:
            return Security.temporary()
        except ImportError:
            raise ImportError("TLS needs the 'cryptography' package, a dependency of hpcgpu: "
                              "pip install cryptography (or reinstall hpcgpu), or pass "
                              "security=False") from None
    if security is False:
        if warn_plain:
            warnings.warn(PLAIN_WARNING, UserWarning, stacklevel=stacklevel)
        return None
    return security
