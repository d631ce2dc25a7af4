"""``mpirun -n N python -m hpcgpu.mpi [options] script.py [args...]``.

Every rank runs this; rank 0 runs the script (as ``__main__``) against a cluster of one
worker per rank's GPU, and every rank exits with the script's exit code.
"""

from __future__ import annotations

import runpy
import sys

import click

from hpcgpu.mpi.core import initialize, mpi, shutdown
from hpcgpu.runner.ranks import exit_code_of

__all__ = ["main"]


@click.command(context_settings=dict(allow_interspersed_args=False))
@click.argument("script")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--nthreads", type=int, default=1, show_default=True)
@click.option("--memory-limit", default="auto", show_default=True)
@click.option("--interface", default=None, help="Network interface, e.g. ib0.")
@click.option("--protocol", default=None, help="With --no-tls: tcp (default) or ucx.")
@click.option("--tls/--no-tls", default=True, show_default=True)
@click.option("--dashboard-address", default="127.0.0.1:8787", show_default=True,
              help="This node only by default (the log says how to reach it with ssh -L); "
                   "':8787' for every interface (no password); '' turns the dashboard off.")
@click.option("--local-directory", default=None)
def main(script, args, nthreads, memory_limit, interface, protocol, tls, dashboard_address,
         local_directory) -> None:
    """Run SCRIPT on rank 0 with a Dask cluster of one worker per MPI rank's GPU."""
    try:
        MPI = mpi()
    except ImportError as exc:  # every rank: say it once per rank, no traceback
        raise click.ClickException(str(exc)) from None
    try:
        initialize(interface=interface, nthreads=nthreads, memory_limit=memory_limit,
                   protocol=protocol, security=tls, dashboard=bool(dashboard_address),
                   dashboard_address=dashboard_address or None, local_directory=local_directory)
    except ValueError as exc:  # the same on every rank: rank 0 says it, every rank stops
        if MPI.COMM_WORLD.Get_rank() == 0:
            click.echo(f"hpcgpu.mpi: error: {exc}", err=True)
        sys.exit(1)
    sys.argv = [script, *args]
    try:
        runpy.run_path(script, run_name="__main__")
        code = 0
    except BaseException as exc:  # noqa: BLE001 - every ending becomes the job's exit code
        code = exit_code_of(exc)
        if not isinstance(exc, SystemExit):
            import traceback

            traceback.print_exc()
    shutdown(code)
    sys.exit(code)


if __name__ == "__main__":
    main(prog_name="python -m hpcgpu.mpi")
