"""The ``security=`` argument of every cluster class: a temporary certificate, or none.

Examples
--------
>>> cluster_security(False, default=True) is None
True
>>> cluster_security(None, default=True).require_encryption
True
>>> "BEGIN PRIVATE KEY" in temporary_security().tls_client_key
True
"""

from __future__ import annotations

import datetime
import warnings
from typing import Any

from distributed.security import Security

__all__ = ["cluster_security", "temporary_security", "load_tornado_tls_defaults", "PLAIN_WARNING",
           "check_plain_protocol"]

PLAIN_WARNING = ("security=False: the scheduler and workers talk without TLS, and anyone who can "
                 "reach the scheduler's port can run code as you. Leave security on unless the "
                 "network is private to you.")


def temporary_security(**kwargs: Any) -> Security:
    """A self-signed certificate for every role, in memory only: distributed's
    :meth:`~distributed.security.Security.temporary`, with an ECDSA P-256 key in place of
    its RSA-2048 one.

    Why: an RSA-2048 key takes about 100 ms to make on a 2-core machine (every cluster start
    pays it) and each TLS handshake signs with it; a P-256 key takes microseconds and signs
    faster. The certificate is otherwise the same (CN and SAN ``dask-internal``, one year).
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "dask-internal")])
    now = datetime.datetime.now(tz=datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("dask-internal")]), critical=False)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))  # clocks of other hosts
            .not_valid_after(now + datetime.timedelta(days=365))
            .sign(key, hashes.SHA256()))
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    return Security(require_encryption=True, tls_ca_file=cert_pem,
                    tls_client_key=key_pem, tls_client_cert=cert_pem,
                    tls_scheduler_key=key_pem, tls_scheduler_cert=cert_pem,
                    tls_worker_key=key_pem, tls_worker_cert=cert_pem, **kwargs)


def cluster_security(security: Any, *, default: bool, warn_plain: bool = False,
                     stacklevel: int = 3) -> Security | None:
    """``True`` (or ``None`` when ``default``): a temporary certificate in memory, as
    :func:`temporary_security` makes it; ``False``: plain TCP (warned
    when ``warn_plain``); a :class:`~distributed.security.Security` as given."""
    if security is None:
        security = default
    if security is True:
        try:
            return temporary_security()
        except ImportError:
            raise ImportError("TLS needs the 'cryptography' package, a dependency of hpcgpu: "
                              "pip install cryptography (or reinstall hpcgpu), or pass "
                              "security=False") from None
    if security is False:
        if warn_plain:
            warnings.warn(PLAIN_WARNING, UserWarning, stacklevel=stacklevel)
        return None
    return security


def check_plain_protocol(protocol: str | None, security: Any, field: str = "protocol") -> None:
    """Refuse ``tcp`` beside a ``security`` that requires encryption (the default one).

    Why here: distributed refuses it only when the scheduler starts, deep in the cluster's
    start-up ('encryption required by Dask configuration, refusing communication from/to
    tcp://...'), naming neither the argument nor the fix.

    Examples
    --------
    >>> check_plain_protocol("tcp", None), check_plain_protocol("tls", temporary_security())
    (None, None)
    >>> check_plain_protocol("tcp://", temporary_security())
    Traceback (most recent call last):
    ...
    ValueError: protocol='tcp://' is unencrypted, and security (a certificate, the default) requires encryption: leave protocol out (TLS) or pass protocol='tls', or pass security=False for plain TCP
    """
    if str(protocol or "").lower().split("://")[0] == "tcp" and getattr(security, "require_encryption", False):
        raise ValueError(f"{field}={protocol!r} is unencrypted, and security (a certificate, the "
                         f"default) requires encryption: leave {field} out (TLS) or pass "
                         f"{field}='tls', or pass security=False for plain TCP")


def load_tornado_tls_defaults() -> None:
    """Build tornado's default client TLS context in this process now.

    Why: tornado builds it (``tornado.netutil._client_ssl_defaults``, once per process) when
    a TLS listener *accepts* its first connection, although that connection is already
    wrapped with distributed's context and never uses it; building it loads the system's
    CA bundle, about 20 ms of CPU with OpenSSL 3.0 (100+ ms wall on a loaded 2-core machine,
    25-35 ms on an H100 host). A worker accepts its first connection when the scheduler
    first calls it (the first ``client.run``, ``gather`` or another worker's fetch), which
    paid that cost. Called off the event loop (OpenSSL releases the GIL), it yields the
    same object tornado would build, so nothing else changes.
    """
    from tornado.netutil import _client_ssl_defaults

    _client_ssl_defaults()
