"""The ``hpcgpu`` command line: one click group, one module per subcommand."""

from __future__ import annotations

import importlib

import click

__all__ = ["main"]

#: (command name, module, attribute): imported only when that command runs.
SUBCOMMANDS = [
    ("jobscript", "hpcgpu.cli.jobscript", "jobscript"),
    ("run", "hpcgpu.cli.run", "run"),
    ("worker", "hpcgpu.cli.worker", "worker"),
    ("bench", "hpcgpu.cli.bench", "bench"),
    ("demo", "hpcgpu.cli.demo", "demo"),
    ("doctor", "hpcgpu.cli.doctor", "doctor"),
    ("logs", "hpcgpu.cli.logs", "logs"),
]


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, _, _ in SUBCOMMANDS]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        for command, module, attribute in SUBCOMMANDS:
            if command == name:
                return getattr(importlib.import_module(module), attribute)
        return None


@click.group(cls=_LazyGroup)
@click.version_option(package_name="hpcgpu")
def main() -> None:
    """Dask on HPC batch systems for GPU work: one Dask worker per GPU."""
