"""``hpcgpu logs JOB_ID``: the last lines of a job's stdout/stderr, as the batch scheduler
wrote them (the workers' Dask logs, and in batch mode the scheduler's, are in its stderr)."""

from __future__ import annotations

import os

import click

from hpcgpu.system import config
from hpcgpu.system.joblogs import DEFAULT_LINES, job_files, node_local_type, read_log
from hpcgpu.system.logdir import default_log_directory
from hpcgpu.system.safedir import HeldDirectory

__all__ = ["logs", "not_found"]


def not_found(job_id: str, directory: str, local_type: str | None) -> str:
    """Why no file of the job is in ``directory``.

    Examples
    --------
    >>> print(not_found("42", "/tmp/l", "tmpfs"))
    no log of job 42 in /tmp/l: if the job ran on another node, its logs are there: not reachable from here, /tmp/l is on a node-local filesystem (tmpfs) (read them on that node, or give log_directory a directory the nodes share); else the job is still running and the scheduler copies its output here when it ends (PBS; LSF unless LSB_STDOUT_DIRECT=Y), it is not your job, its logs went to another log directory (--log-directory), or they were pruned (hpcgpu.log-retention)
    """
    local = (f"if the job ran on another node, its logs are there: not reachable from here, "
             f"{directory} is on a node-local filesystem ({local_type}) (read them on that "
             "node, or give log_directory a directory the nodes share); else ") if local_type else ""
    return (f"no log of job {job_id} in {directory}: {local}the job is still running and the "
            "scheduler copies its output here when it ends (PBS; LSF unless "
            "LSB_STDOUT_DIRECT=Y), it is not your job, its logs went to another log directory "
            "(--log-directory), or they were pruned (hpcgpu.log-retention)")


@click.command()
@click.argument("job_id")
@click.option("--log-directory", "-d", default=None,
              help="Where the job's logs are (default: the cluster's default log directory).")
@click.option("--lines", "-n", default=DEFAULT_LINES, show_default=True, type=click.IntRange(0),
              help="Last lines of each file.")
@click.option("--all", "whole", is_flag=True, help="Whole files.")
def logs(job_id: str, log_directory: str | None, lines: int, whole: bool) -> None:
    """Print the last lines of your job JOB_ID's stdout and stderr files.

    \b
    Example:
      hpcgpu logs 4242 -n 50
    """
    directory = os.path.abspath(os.path.expanduser(
        log_directory or config.get("defaults.log-directory") or default_log_directory()))
    try:
        held = HeldDirectory(directory, "--log-directory")
    except ValueError as error:
        raise click.ClickException(f"{error}: job logs are read only from such a directory")
    except OSError as error:
        raise click.ClickException(f"--log-directory {directory}: {error.strerror}")
    with held:
        names = job_files(sorted(os.listdir(held.fd)), job_id)
        if not names:
            raise click.ClickException(not_found(job_id, directory, node_local_type(directory)))
        for name in names:
            try:
                text = read_log(held, name, None if whole else lines)
            except (PermissionError, FileNotFoundError) as error:
                raise click.ClickException(str(error))
            click.echo(f"==> {directory}/{name} <==")
            click.echo(text)
