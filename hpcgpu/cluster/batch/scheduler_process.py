"""``python -m hpcgpu.cluster.batch.scheduler_process FILE --protocol ucx,tls ...``: the scheduler
that ``scheduler_in_job`` starts inside the first job, and a UCX cluster in a process of its
own (``--options``: all of ``Scheduler``'s keywords as JSON,
:mod:`hpcgpu.cluster.batch.scheduler_apart`).

Like ``dask scheduler --scheduler-file FILE``, plus ``FILE.listeners``: every listener's
address (the scheduler file holds only the first one, UCX for the workers; the client
needs the TCP/TLS one). ``dask scheduler`` itself cannot be used here: with TLS files it
sets ``host='tls://'``, which clashes with ``--interface``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

__all__ = ["main", "write_listeners"]


def write_listeners(path: str, addresses: list[str]) -> None:
    """Write ``{"addresses": [...]}`` atomically (0600, then renamed)."""
    partial = f"{path}.{os.getpid()}.part"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        json.dump({"addresses": addresses}, file)
    os.replace(partial, path)


async def _serve(args: argparse.Namespace) -> None:
    from distributed import Scheduler
    from distributed.security import Security

    from hpcgpu.network.colocate import CoLocateRoots
    from hpcgpu.system import warmup

    split = lambda v: v.split(",") if v else None  # noqa: E731
    protocols = split(args.protocol)
    security = Security(tls_ca_file=args.tls_ca_file, tls_scheduler_cert=args.tls_cert,
                        tls_scheduler_key=args.tls_key) if args.tls_cert else None
    interface = split(args.interface)
    options = dict(protocol=protocols if len(protocols) > 1 else protocols[0],
                   port=[0] * len(protocols) if len(protocols) > 1 else 0,
                   interface=interface if interface and len(interface) > 1 else args.interface,
                   dashboard=False,
                   # /health and /metrics start without the dashboard: this node only
                   dashboard_address="127.0.0.1:0")
    options.update(json.loads(args.options) if args.options else {})
    async with Scheduler(**options, scheduler_file=args.scheduler_file, security=security,
                         plugins=[CoLocateRoots()]) as scheduler:
        write_listeners(args.scheduler_file + ".listeners",
                        [listener.contact_address for listener in scheduler.listeners])
        warmup.dask_setup(scheduler)  # the first graph's imports, before it takes a graph
        await scheduler.finished()


def main(argv: list[str] | None = None) -> None:
    """Start the scheduler; return when it is closed (by the cluster, or by a signal)."""
    parser = argparse.ArgumentParser(prog="python -m hpcgpu.cluster.batch.scheduler_process")
    parser.add_argument("scheduler_file")
    parser.add_argument("--protocol", default="tcp")
    parser.add_argument("--interface", default=None)
    parser.add_argument("--options", default=None, help="Scheduler's keywords as JSON (win over the rest)")
    for flag in ("--tls-ca-file", "--tls-cert", "--tls-key"):
        parser.add_argument(flag, default=None)
    asyncio.run(_serve(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
