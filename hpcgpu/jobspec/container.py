"""Dask workers inside a container image: the runtime's prefix in front of the worker command.

Built on Apptainer's ``exec`` semantics, which Singularity shares: the container uses the
host's network and environment, runs as the user, and sees ``$HOME``, ``/tmp`` and the
working directory; ``--nv`` brings the host's NVIDIA driver and the job's GPUs in. What the
workers need besides (the log directory, the cluster's private directory with the TLS files,
the scheduler file, a local directory) is bound at the same path, so that the worker command
reads the same on both sides. ``podman-hpc`` (NERSC's wrapper) and rootless ``podman`` start
an OCI container instead: they get the host network, the user's id (``--userns keep-id``),
the job's scheduler, Dask, UCX and CUDA variables (``-e NAME*``) and the same binds, and
``$PWD`` as working directory.

Examples
--------
>>> c = Container.create({"image": "/sw/hpcgpu.sif", "binds": ["/scratch"]})
>>> c.prefix(("/home/me/logs",))
['apptainer', 'exec', '--nv', '--bind', '/scratch,/home/me/logs', '/sw/hpcgpu.sif']
>>> Container.create("/sw/hpcgpu.sif", runtime="docker")
Traceback (most recent call last):
...
ValueError: container runtime='docker' is not known: use one of apptainer, singularity, podman-hpc, podman (container={'runtime': 'apptainer', 'image': ...})
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from hpcgpu.jobspec.forms import with_article
from hpcgpu.jobspec.scriptfields import shell_join, single_line

__all__ = ["Container", "RUNTIMES", "URI_SCHEMES", "bind_paths", "check_image", "container_option",
           "worker_binds"]

#: runtime -> (argv before the options, the GPU flag); apptainer and singularity: ``exec``
RUNTIMES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "apptainer": (("apptainer", "exec"), ("--nv",)),
    "singularity": (("singularity", "exec"), ("--nv",)),
    "podman-hpc": (("podman-hpc", "run", "--rm"), ("--gpu",)),
    "podman": (("podman", "run", "--rm", "--userns=keep-id"), ("--device", "nvidia.com/gpu=all")),
}
#: Images that are not a local path: pulled by the runtime, not checked here.
URI_SCHEMES = ("docker://", "docker-archive:", "library://", "oras://", "shub://", "http://",
               "https://", "instance://")
#: The host variables an OCI container gets (podman passes none by default): the
#: scheduler's and launcher's ranks, CUDA's devices, the workers' own settings.
OCI_ENVIRONMENT = ("SLURM_*", "PMI_*", "PMIX_*", "OMPI_*", "PALS_*", "FLUX_*", "CUDA_VISIBLE_DEVICES",
                   "HPCGPU_*", "DASK_*", "UCX_*", "NCCL_*", "OMP_NUM_THREADS", "HOME", "USER")
# A bind is "src[:dst[:opts]]" and a list of them is comma-separated: neither may hold one.
_BIND = re.compile(r"/[^,:\x00-\x1f]*")


@dataclass(frozen=True)
class Container:
    """Where the workers run: an image and the runtime that starts it.

    Attributes
    ----------
    image : str
        The image: a ``.sif`` file or sandbox directory (apptainer, singularity; checked to
        exist before anything is submitted), a URI (``docker://...``) or, for podman(-hpc),
        an image name.
    runtime : {"apptainer", "singularity", "podman-hpc", "podman"}
        The command that starts it.
    binds : tuple of str
        More host paths the workers need, bound at the same path (absolute, no ``,`` or ``:``).
    gpus : bool
        Bring the GPUs in (``--nv``, ``--gpu``, ``--device nvidia.com/gpu=all``).
    options : tuple of str
        More options of the runtime, placed before the image (``--cleanenv``, ``--contain``...).
    """

    image: str
    runtime: str = "apptainer"
    binds: tuple[str, ...] = ()
    gpus: bool = True
    options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.runtime not in RUNTIMES:
            raise ValueError(f"container runtime={self.runtime!r} is not known: use one of "
                             f"{', '.join(RUNTIMES)} (container={{'runtime': 'apptainer', 'image': ...}})")
        if not isinstance(self.image, str) or not self.image.strip():
            raise ValueError(f"container image={self.image!r} is empty: give the image, e.g. "
                             "container='/path/to/hpcgpu.sif'")
        single_line("container image", self.image)
        if any(c in self.image for c in "\"'`$\\ "):
            raise ValueError(f"container image={self.image!r} holds a quote, '$', '\\\\' or a space: "
                             "give a path or URI without them (move or link the image)")
        for path in self.binds:
            _bind("container binds", path)
        for option in self.options:
            single_line("container options", option)

    @classmethod
    def create(cls, value: Any, **overrides: Any) -> "Container":
        """From the ``container=`` option: an image (str), a dict of the fields, or a Container.

        >>> Container.create({"image": "x.sif", "runtime": "singularity", "gpus": False}).runtime
        'singularity'
        >>> Container.create({"image": "x.sif", "bind": ["/a"]})
        Traceback (most recent call last):
        ...
        ValueError: container: unknown key(s) bind: use image, runtime, binds, gpus, options
        """
        if isinstance(value, Container):
            fields = dict(image=value.image, runtime=value.runtime, binds=value.binds,
                          gpus=value.gpus, options=value.options)
        elif isinstance(value, str):
            fields = {"image": value}
        elif isinstance(value, dict):
            fields = {k.replace("-", "_"): v for k, v in value.items() if v is not None}
        else:
            raise ValueError(f"container={value!r} is {with_article(value)}: give an image "
                             "path ('/sw/hpcgpu.sif') or {'image': ..., 'runtime': ..., 'binds': [...]}")
        fields.update({k: v for k, v in overrides.items() if v is not None})
        unknown = sorted(set(fields) - {"image", "runtime", "binds", "gpus", "options"})
        if unknown:
            raise ValueError(f"container: unknown key(s) {', '.join(unknown)}: use image, runtime, "
                             "binds, gpus, options")
        for name in ("binds", "options"):
            if isinstance(fields.get(name), str):
                fields[name] = fields[name].split(",") if name == "binds" else fields[name].split()
            fields[name] = tuple(str(item) for item in fields.get(name) or ())
        if not isinstance(fields.get("gpus", True), bool):
            raise ValueError(f"container gpus={fields['gpus']!r}: give True or False")
        return cls(**fields)

    @property
    def executable(self) -> str:
        """The runtime's command, which must be on the nodes' PATH."""
        return RUNTIMES[self.runtime][0][0]

    def prefix(self, needed: tuple[str, ...] = (), cwd: str = "$PWD") -> list[str]:
        """The argv in front of the worker's python: the runtime, its options, the binds
        (the user's first, then those ``needed`` by hpcgpu; nested ones dropped) and the
        image. ``cwd``: the working directory an OCI container gets (a job script's ``$PWD``).

        >>> Container.create("img", runtime="podman-hpc", gpus=False).prefix(("/logs",))[:9]
        ['podman-hpc', 'run', '--rm', '--net', 'host', '-e', 'SLURM_*', '-e', 'PMI_*']
        """
        start, gpu_flag = RUNTIMES[self.runtime]
        binds = bind_paths((*self.binds, *needed))
        argv = [*start, *(gpu_flag if self.gpus else ())]
        if self.runtime in ("apptainer", "singularity"):
            argv += ["--bind", ",".join(binds)] if binds else []
        else:
            argv += ["--net", "host"]
            for name in OCI_ENVIRONMENT:
                argv += ["-e", name]
            for path in binds:
                argv += ["-v", f"{path}:{path}"]
            argv += ["-v", f"{cwd}:{cwd}", "-w", cwd]
        return argv + list(self.options) + [self.image]

    def shell_prefix(self, needed: tuple[str, ...] = ()) -> str:
        """:meth:`prefix` for the job's shell: quoted, ``$PWD`` left for the shell to expand.

        >>> Container.create("img", runtime="podman", gpus=False).shell_prefix()[-28:]
        '-v "$PWD:$PWD" -w "$PWD" img'
        """
        return " ".join(f'"{word}"' if word in ("$PWD", "$PWD:$PWD") else shell_join([word])
                        for word in self.prefix(needed))


def worker_binds(worker: Any, *more: str) -> tuple[str, ...]:
    """The host paths a :class:`~hpcgpu.jobspec.worker_command.WorkerCommand` names, for a
    container to bind: ``more`` (a log directory), the directories of its TLS files and
    scheduler file, its local directory; not those the job's shell expands (``$TMPDIR``).

    >>> from hpcgpu.jobspec.worker_command import WorkerCommand
    >>> worker_binds(WorkerCommand(scheduler_file="/s/a.json", tls_cert="/p/c.pem",
    ...                            local_directory="$TMPDIR"), "/logs")
    ('/logs', '/p', '/s')
    """
    files = [worker.tls_ca_file, worker.tls_cert, worker.tls_key, worker.scheduler_file]
    paths = [*more, *(os.path.dirname(f) for f in files if f), worker.local_directory]
    return tuple(dict.fromkeys(os.path.abspath(p) for p in paths
                               if p and "$" not in p and not p.startswith("~")))


def bind_paths(paths) -> list[str]:
    """Absolute paths, each once, without those inside another one (in the order given).

    >>> bind_paths(["/scratch/me", "/logs", "/scratch", "/logs/.hpcgpu-0/c-1", "/logs"])
    ['/scratch', '/logs']
    """
    kept: list[str] = []
    for path in (os.path.normpath(str(p)) for p in paths):
        if any(path == k or path.startswith(k.rstrip("/") + "/") for k in kept):
            continue
        inside = [i for i, k in enumerate(kept) if k.startswith(path.rstrip("/") + "/")]
        at = inside[0] if inside else len(kept)  # where the first path it holds was
        kept = [k for i, k in enumerate(kept) if i not in inside]
        kept.insert(at, path)
    return kept


def _bind(field: str, path: str) -> str:
    if not _BIND.fullmatch(str(path)):
        raise ValueError(f"{field}: {path!r} must be an absolute path without ',' or ':' (the runtime "
                         "reads those as separators): bind its parent directory instead")
    return path


def check_image(container: Container) -> Container:
    """The container with its image path made absolute, or a ``ValueError`` naming the
    field and the fix when a local image is missing (I/O: one ``stat``; before submitting).
    Images given as URIs, and podman's image names, are the runtime's to find."""
    image = container.image
    if image.startswith(URI_SCHEMES) or container.runtime not in ("apptainer", "singularity"):
        return container
    path = os.path.abspath(os.path.expanduser(image))
    if not os.path.exists(path):
        raise ValueError(
            f"container image={image!r} does not exist ({path}): give the path of a .sif file or "
            f"sandbox directory on a filesystem the nodes share (build one with `{container.executable} "
            "build hpcgpu.sif docker://...`), or a URI such as docker://...")
    return Container.create(container, image=path)


def container_option(value: Any, scheduler_in_job: bool = False) -> Container | None:
    """The validated ``container=`` option of a cluster (None: none), its image checked
    (:func:`check_image`); errors start with ``container=`` and say the fix.

    >>> container_option(None) is None
    True
    >>> container_option({"image": "/no/such.sif"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: container={'image': '/no/such.sif'}: image='/no/such.sif' does not exist (/no/such.sif): give the path ...
    """
    if value is None:
        return None
    try:
        container = check_image(Container.create(value))
    except ValueError as error:
        raise ValueError(f"container={value!r}: {str(error).removeprefix('container ')}") from None
    if scheduler_in_job:
        raise ValueError(f"container={value!r} with scheduler_in_job=True: the scheduler would start "
                         "outside the image; leave scheduler_in_job off (the scheduler runs in this process)")
    return container
