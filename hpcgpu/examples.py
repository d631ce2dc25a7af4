"""The example job scripts in ``jobscripts/``, rendered from the package's one template.

Regenerate them with ``python -m hpcgpu.examples jobscripts``; a test renders them
again and compares byte for byte.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from hpcgpu.dialects import get_dialect
from hpcgpu.launchers import get_launcher
from hpcgpu.render import render, worker_job_script
from hpcgpu.resources import GPUJobShape
from hpcgpu.worker_command import WorkerCommand

__all__ = ["EXAMPLES", "render_examples", "write_examples"]

_WORKER = WorkerCommand(scheduler_file="hpcgpu-scheduler.json", nthreads=8)
_SHAPE = dict(cpus_per_gpu=8, memory_per_gpu="60GiB", walltime="01:00:00", job_name="hpcgpu")

#: file name -> (scheduler, site options, launcher, shape options)
EXAMPLES: dict[str, tuple[str, dict, str, dict]] = {
    "slurm-1x4.sh": ("slurm", {}, "srun", dict(nodes=1, gpus_per_node=4)),
    "slurm-2x4.sh": ("slurm", {}, "srun", dict(nodes=2, gpus_per_node=4)),
    "slurm-2x4-gres-h100.sh": (
        "slurm", {"gpu_directive": "gres"}, "srun",
        dict(nodes=2, gpus_per_node=4, gpu_type="h100", queue="gpu", account="proj123"),
    ),
    "slurm-2x4-mpirun.sh": ("slurm", {}, "mpirun", dict(nodes=2, gpus_per_node=4)),
    "pbs-1x4.sh": ("pbs", {}, "mpiexec", dict(nodes=1, gpus_per_node=4)),
    "pbs-2x4.sh": ("pbs", {}, "mpiexec", dict(nodes=2, gpus_per_node=4, queue="gpu")),
    "pbs-2x4-gpus-a100.sh": (
        "pbs", {"gpu_resource": "gpus", "gpu_type_resource": "gpu_type"}, "mpiexec",
        dict(nodes=2, gpus_per_node=4, gpu_type="a100", account="proj123", exclusive=True),
    ),
    "lsf-1x4.sh": ("lsf", {}, "jsrun", dict(nodes=1, gpus_per_node=4)),
    "lsf-2x4.sh": ("lsf", {}, "jsrun", dict(nodes=2, gpus_per_node=4, queue="batch")),
    "lsf-2x6-v100-gb.sh": (
        "lsf", {"memory_unit": "GB"}, "jsrun",
        dict(nodes=2, gpus_per_node=6, cpus_per_gpu=7, gpu_type="TeslaV100_SXM2_16GB",
             account="abc123"),
    ),
    "sge-1x4.sh": ("sge", {}, "direct", dict(nodes=1, gpus_per_node=4)),
    "sge-2x4.sh": (
        "sge", {"multi_node_parallel_environment": "mpi-4"}, "mpirun",
        dict(nodes=2, gpus_per_node=4),
    ),
    "sge-1x4-gpus-job.sh": (
        "sge", {"gpu_complex": "gpus", "gpu_consumable": "job", "memory_resource": "mem_free"},
        "direct", dict(nodes=1, gpus_per_node=4, queue="gpu.q"),
    ),
}


def render_examples() -> dict[str, str]:
    """Render every example; returns file name -> text."""
    texts = {}
    for filename, (scheduler, site, launcher, shape_options) in EXAMPLES.items():
        shape = GPUJobShape.create(**{**_SHAPE, **shape_options})
        script = worker_job_script(
            shape, get_dialect(scheduler, **site), get_launcher(launcher),
            dataclasses.replace(_WORKER, nthreads=shape.cpus_per_gpu),
            log_directory="logs",
        )
        texts[filename] = render(script)
    return texts


def write_examples(directory: str | Path) -> list[Path]:
    """Write every example into ``directory``; returns the paths written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for filename, text in render_examples().items():
        path = directory / filename
        path.write_text(text)
        paths.append(path)
    return paths


if __name__ == "__main__":  # pragma: no cover - the regeneration command
    for written in write_examples(sys.argv[1] if len(sys.argv) > 1 else "jobscripts"):
        print(written)
