"""Keep a listener that is bound to every address to the one address it was asked for.

ucxx's Python API binds UCX's listener on the wildcard address whatever address it was
given (docs/security.md, "Why every interface"). A classic BPF socket filter on that
listening socket makes the kernel drop every packet whose IPv4 destination is not the
asked address, as ``bind`` to that address would: a connection to any other address of
the host (from this host or another) is never set up, and the connections it accepts
inherit the filter. Linux only; a listener this process cannot find as a TCP socket (UCX's
RDMA connection manager on InfiniBand) is left as it is, and the caller says so.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import socket
import stat
import struct

__all__ = ["admit_only", "destination_filter", "listening_socket"]

SO_ATTACH_FILTER = 26
_SKF_NET_OFF = -0x100000  # loads relative to the IP header (the filter sees the TCP header)


def destination_filter(address: str) -> list[tuple[int, int, int, int]]:
    """The BPF program (code, jt, jf, k): accept an IPv4 packet to ``address``, drop others.

    >>> destination_filter("127.0.0.1")[1]
    (21, 0, 1, 2130706433)
    """
    wanted = int(ipaddress.IPv4Address(address))
    return [(0x20, 0, 0, (_SKF_NET_OFF + 16) & 0xFFFFFFFF),  # ld [net + 16]: destination
            (0x15, 0, 1, wanted),                             # jeq wanted ? accept : drop
            (0x06, 0, 0, 0xFFFFFFFF),                         # ret all of it
            (0x06, 0, 0, 0)]                                  # ret nothing: dropped


def listening_socket(port: int) -> int | None:
    """The descriptor of this process's TCP socket listening on ``port`` of the IPv4
    wildcard address, or None."""
    for name in os.listdir("/proc/self/fd"):
        try:  # a socket only: a stray duplicate of a pipe's end would keep the pipe open
            fd = int(name)
            if not stat.S_ISSOCK(os.fstat(fd).st_mode):
                continue
            copy = os.dup(fd)
        except (ValueError, OSError):
            continue
        try:
            sock = socket.socket(fileno=copy)
        except OSError:
            os.close(copy)  # never left open: it would keep the socket alive
            continue
        with sock:
            try:
                listening = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                found = (sock.family == socket.AF_INET and sock.type == socket.SOCK_STREAM
                         and listening and sock.getsockname() == ("0.0.0.0", port))
            except OSError:
                continue
        if found:
            return fd
    return None


def admit_only(port: int, address: str) -> bool:
    """Attach :func:`destination_filter` of ``address`` to the wildcard listener on ``port``;
    whether there was one (an IPv6 ``address`` is not handled: False)."""
    try:
        ipaddress.IPv4Address(address)
    except ValueError:
        return False
    fd = listening_socket(port)
    if fd is None:
        return False
    program = destination_filter(address)
    filters = ctypes.create_string_buffer(b"".join(struct.pack("=HBBI", *line) for line in program))
    fprog = struct.pack("@HP", len(program), ctypes.addressof(filters))  # struct sock_fprog
    with socket.socket(fileno=os.dup(fd)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)
    return True
