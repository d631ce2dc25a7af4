"""The values a benchmark sweep produces: one record per run, one summary per group.

Records are tidy: one row per run, every row carrying its environment, so that a
JSON-lines or CSV file stands on its own (no side file needed to read it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

__all__ = ["Environment", "RunRecord", "Summary", "OK", "FAILED"]

OK = "ok"
FAILED = "failed"


@dataclass(frozen=True)
class Environment:
    """Where a run ran: hardware, software, and the shape of the cluster.

    Examples
    --------
    >>> env = Environment(cluster="hpcgpu", path="local", protocol="tcp", nodes=1,
    ...                   gpus_per_node=2, gpu_model="NVIDIA H200")
    >>> env.versions_text()
    ''
    >>> Environment(versions=(("dask", "2026.8.0"), ("numpy", "2.4.6"))).versions_text()
    'dask=2026.8.0;numpy=2.4.6'
    """

    cluster: str = "hpcgpu"
    path: str = "local"
    protocol: str = "tcp"
    nodes: int = 1
    gpus_per_node: int = 1
    hostname: str = ""
    gpu_model: str | None = None
    driver: str | None = None
    backend: str = "numpy"
    hpcgpu_version: str = ""
    dask_version: str = ""
    distributed_version: str = ""
    python_version: str = ""
    versions: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def versions_text(self) -> str:
        """Library versions as one ``name=version;...`` string (a CSV cell)."""
        return ";".join(f"{name}={version}" for name, version in self.versions)


@dataclass(frozen=True)
class RunRecord:
    """One timed run (or warm-up run) of one workload at one GPU count.

    ``status`` is ``"ok"`` or ``"failed"``; a failed run has ``seconds=None`` and the
    error text, and is kept in the results like any other run.

    Examples
    --------
    >>> r = RunRecord(sweep="s1", workload="array-sum", scaling="strong", gpus=2,
    ...               size="n=2000 chunk=500", work=32e6, work_unit="B", repeat=0,
    ...               warmup=False, status="ok", seconds=0.5)
    >>> r.row()["cluster"], r.row()["seconds"], r.row()["versions"]
    ('hpcgpu', 0.5, '')
    >>> RunRecord.from_row(r.row()) == r
    True
    """

    sweep: str
    workload: str
    scaling: str
    gpus: int
    size: str
    work: float
    work_unit: str
    repeat: int
    warmup: bool
    status: str
    seconds: float | None
    error: str | None = None
    started: str = ""
    env: Environment = field(default_factory=Environment)

    @property
    def ok(self) -> bool:
        """Whether the run succeeded."""
        return self.status == OK

    def row(self) -> dict:
        """A flat dict: the record's fields, then the environment's (versions as text)."""
        row = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "env"}
        env = asdict(self.env)
        env["versions"] = self.env.versions_text()
        return {**row, **env}

    @classmethod
    def from_row(cls, row: dict) -> "RunRecord":
        """Inverse of :meth:`row` (accepts the strings a CSV reader gives)."""
        env_names = {f.name for f in fields(Environment)}
        env = {k: row[k] for k in env_names if k in row}
        pairs = [p.split("=", 1) for p in str(env.pop("versions", "") or "").split(";") if p]
        env["versions"] = tuple((k, v) for k, v in pairs)
        for name in ("nodes", "gpus_per_node"):
            env[name] = int(env.get(name, 1))
        for name in ("gpu_model", "driver"):
            env[name] = env.get(name) or None
        own = {f.name: row[f.name] for f in fields(cls) if f.name in row and f.name != "env"}
        own["gpus"], own["repeat"], own["work"] = int(own["gpus"]), int(own["repeat"]), float(own["work"])
        own["warmup"] = own["warmup"] in (True, "True", "true", "1")
        own["seconds"] = None if own.get("seconds") in (None, "") else float(own["seconds"])
        own["error"] = own.get("error") or None
        return cls(**own, env=Environment(**env))


@dataclass(frozen=True)
class Summary:
    """Aggregate of the measured (non-warm-up) runs of one group.

    A group is one (cluster, protocol, workload, scaling, GPU count). ``median`` and
    the quartiles are over successful runs only; ``failed`` counts the others, and a
    group whose runs all failed has ``median=None`` and ``error`` set.
    """

    cluster: str
    protocol: str
    workload: str
    scaling: str
    gpus: int
    nodes: int
    size: str
    ok: int
    failed: int
    median: float | None
    q1: float | None
    q3: float | None
    minimum: float | None
    maximum: float | None
    throughput: float | None
    work_unit: str
    speedup: float | None = None
    efficiency: float | None = None
    error: str | None = None

    @property
    def iqr(self) -> float | None:
        """Interquartile range (q3 - q1), the spread the tables show."""
        return None if self.q1 is None or self.q3 is None else self.q3 - self.q1
