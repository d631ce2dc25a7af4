"""``hpcgpu doctor``: check GPUs, links, InfiniBand, UCX, MPI and interfaces, with fixes."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

from hpcgpu.jobspec.dialects import DIALECTS
from hpcgpu.network import PROTOCOLS, NetworkSettings

__all__ = ["doctor", "print_report"]

_COLOURS = {"ok": "green", "warn": "yellow", "fail": "red"}


def print_report(report: dict, where: str) -> None:
    """A rich table: check, verdict, what was found, the fix."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"hpcgpu doctor: {where} ({report['node']}, role {report['role']})")
    for column in ("check", "verdict", "found", "fix"):
        table.add_column(column, overflow="fold")
    for check in report["checks"]:
        colour = _COLOURS[check["verdict"]]
        # Text, not markup: rich would take the [mpi] of "pip install 'hpcgpu[mpi]'" for a tag
        table.add_row(Text(check["name"]), Text(check["verdict"], style=colour),
                      Text(check["summary"]), Text(check["fix"] or ""))
    Console().print(table)


def _write(report: dict, output: str | None, as_json: bool) -> None:
    text = json.dumps(report, indent=2, default=str)
    if output:
        tmp = Path(output + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, output)  # whole or absent: the login node polls for it
    if as_json:
        click.echo(text)


@click.command()
@click.option("--local", "local", is_flag=True, help="Check this host only (what the job runs).")
@click.option("--job", "job", is_flag=True, help="Also run the checks as a 1-GPU job on a compute node.")
@click.option("--scheduler", default="slurm", show_default=True, type=click.Choice(sorted(DIALECTS)),
              help="Batch system for --job.")
@click.option("--queue", "-q", default=None, help="Partition/queue for --job.")
@click.option("--account", "-A", default=None, help="Account for --job.")
@click.option("--timeout", default=300, show_default=True, type=float, help="Seconds to wait for --job.")
@click.option("--protocol", default="tcp", show_default=True, type=click.Choice(PROTOCOLS))
@click.option("--transports", default="auto", show_default=True,
              help="UCX transports: auto, or some of infiniband,nvlink,rdmacm,tcp.")
@click.option("--interface", default=None, help="Interface for scheduler and workers.")
@click.option("--scheduler-interface", default=None, help="Interface of the scheduler (login node).")
@click.option("--worker-interface", default=None, help="Interface of the workers (compute nodes).")
@click.option("--net-devices", default=None, help="UCX_NET_DEVICES, e.g. mlx5_0:1.")
@click.option("--client-protocol", default=None, type=click.Choice(["tcp", "tls"]),
              help="A second scheduler listener for a client without UCX.")
@click.option("--fallback", default=None, type=click.Choice(["tcp", "tls"]), help="Protocol if UCX cannot load.")
@click.option("--scheduler-address", default=None, help="Check that this address is reachable from here.")
@click.option("--role", default=None, type=click.Choice(["login", "compute"]),
              help="Judge as login or compute node (default: compute inside a job).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--output", default=None, help="Also write the JSON report to this file.")
def doctor(local, job, scheduler, queue, account, timeout, as_json, output, role, scheduler_address, **net):
    """Preflight: GPUs and their links, InfiniBand, UCX, MPI, interfaces, with verdicts and fixes.

    \b
    Examples:
      hpcgpu doctor --protocol ucx --worker-interface ib0
      hpcgpu doctor --protocol ucx --job --queue gpu      # also on a compute node
      hpcgpu doctor --json
    """
    from hpcgpu.doctor import diagnose
    from hpcgpu.worker.placement import job_id_from_env

    try:
        settings = NetworkSettings.create(**net)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    role = role or ("compute" if job_id_from_env() else "login")
    reports = {"here": diagnose(settings, role, scheduler_address)}
    if job and not local:
        from hpcgpu.doctor.job import DoctorJobError, run_doctor_job

        try:
            reports["job"] = run_doctor_job(settings, scheduler, timeout=timeout, queue=queue, account=account)
        except (DoctorJobError, ValueError) as error:
            raise click.ClickException(str(error)) from None
    failed = any(r["verdict"] == "fail" for r in reports.values())
    if as_json or output:
        _write(reports["here"] if len(reports) == 1 else reports, output, as_json)
    if not as_json:
        print_report(reports["here"], "this host")
        if "job" in reports:
            print_report(reports["job"], f"compute node, job {reports['job']['job_id']}")
    sys.exit(1 if failed else 0)
