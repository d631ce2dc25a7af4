"""Across the site's hosts (scripts/setup-site): worker start-up and transfers between hosts.

Run as root on the machine that holds the site (``bash scripts/setup-site --compute-hosts 4``)::

    python benchmarks/site_bootstrap.py --runs 5 --out benchmarks/results/cpu/site_bootstrap.json

- **start-up**: a ``SLURMCluster`` on ``login`` (``interface="ib0"``, TLS on, one exclusive job
  of 4 GPU workers per compute host) scales to N = 4, 8, 16 workers, once per design of the
  worker start (``--multiprocessing-method`` of ``python -m hpcgpu.worker``): ``spawn`` (each
  worker its own interpreter), ``forkserver`` (Python's fork server: a second interpreter per
  host) and ``forked-server`` (the server forked from the launcher: one start-up per host).
  Timed from the first job's start (a line of the job script's prologue) and from
  ``scale()`` to the N-th worker connected; designs take turns run by run; medians.
- **transfers**: 2 workers, on two hosts or on one, over ``tcp``, ``tls`` and ``ucx``
  (``UCX_TLS=tcp`` forced); one worker fetches ``--mib`` MiB of random bytes from the other,
  timed by the worker's own transfer log; medians over ``--repeats``.
- **reference**: one Python TCP stream of the same bytes between the same two hosts' ``ib0``
  (and within one host): what the network namespaces carry at most for one process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from distributed.diagnostics.plugin import SchedulerPlugin
from hpcgpu.system.workers import scheduler_workers

ROOT = Path(__file__).resolve().parents[1]
SITE_EXEC = ["bash", str(ROOT / "scripts" / "site-exec")]
DESIGNS = ("spawn", "forkserver", "forked-server")
QUICK = {"walltime": "00:20:00", "death_timeout": 60, "interface": "ib0", "exclusive": True,
         "scheduler_options": {"dashboard_address": "localhost:0"}}


PLUGIN = "site-bootstrap-arrivals"


class Arrivals(SchedulerPlugin):
    """When each worker connected (``time.time()``), recorded by the scheduler: no polling."""

    name = PLUGIN

    def __init__(self):
        self.times: list[float] = []

    def add_worker(self, scheduler=None, worker=None, **kwargs):
        self.times.append(time.time())


def _connected(client, n: int, timeout: float = 180) -> float:
    """``time.time()`` when the ``n``-th worker connected."""
    client.wait_for_workers(n, timeout=timeout)
    times = client.run_on_scheduler(lambda dask_scheduler: sorted(
        dask_scheduler.plugins[PLUGIN].times))
    return times[n - 1]


def _drain(cluster, client, name: str) -> None:
    cluster.scale(0)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (scheduler_workers(client) or subprocess.run(
            ["squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True).stdout.strip()):
        time.sleep(0.2)


def _boot_run(cluster, n: int, name: str, stamps: Path) -> dict:
    from distributed import Client

    with Client(cluster) as client:
        for old in stamps.glob("*"):
            old.unlink()
        client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.plugins[PLUGIN].times.clear())
        submitted = time.time()
        try:
            cluster.scale(gpus=n)
            connected = _connected(client, n)
            starts = sorted(float(p.read_text()) for p in stamps.glob("*"))
            started = starts[0]
            seen = client.run(lambda: (__import__("socket").gethostname(),
                                       os.environ.get("CUDA_VISIBLE_DEVICES")))
        finally:
            _drain(cluster, client, name)
    places = sorted(set(seen.values()))
    return {"from_job_start": connected - started, "from_scale": connected - submitted,
            "job_start_spread": starts[-1] - started, "load": os.getloadavg()[0],
            "hosts": len({h for h, _ in places}), "pinned": len(places) == n and all(places)}


def boot(args) -> dict:
    from distributed import Client

    from hpcgpu import SLURMCluster

    logs = Path(tempfile.mkdtemp(prefix="site-boot-", dir=args.tmp))
    clusters = {}
    for design in args.designs:
        stamps = logs / design / "stamps"
        stamps.mkdir(parents=True)
        name = f"sboot-{design}"
        clusters[design] = (name, stamps, SLURMCluster(
            job_name=name, gpus_per_node=4, log_directory=str(logs / design), **QUICK,
            job_script_prologue=[f"date +%s.%N > {stamps}/$SLURM_JOB_ID"],
            worker_extra_args=["--multiprocessing-method", design]))
    runs: dict = {}
    failed: dict = {}
    try:
        for _, _, cluster in clusters.values():
            with Client(cluster) as client:
                client.register_plugin(Arrivals())
        for _ in range(args.runs):
            for n in args.workers:
                for design, (name, stamps, cluster) in clusters.items():  # take turns
                    try:
                        run = _boot_run(cluster, n, name, stamps)
                    except Exception as error:  # a shared site: a fault of someone else's
                        failed.setdefault(f"{design} N={n}", []).append(f"{type(error).__name__}: {error}"[:300])
                        print(f"{design} N={n}: failed: {error}", file=sys.stderr, flush=True)
                        continue
                    runs.setdefault(f"{design} N={n}", []).append(run)
                    print(f"{design:14s} N={n:2d}: {run['from_job_start']:.2f} s from job start, "
                          f"{run['from_scale']:.2f} s from scale, {run['hosts']} hosts, "
                          f"pinned {run['pinned']}", file=sys.stderr, flush=True)
    finally:
        for _, _, cluster in clusters.values():
            cluster.close()
        shutil.rmtree(logs, ignore_errors=True)
    return {key: {"median_from_job_start": statistics.median(r["from_job_start"] for r in values),
                  "median_from_scale": statistics.median(r["from_scale"] for r in values),
                  "n": len(values), "runs": values, "failed": failed.get(key, [])}
            for key, values in runs.items()}


def _fetch_seconds(client, a: str, b: str, mib: int) -> float:
    import numpy as np

    data = client.submit(lambda size: np.frombuffer(np.random.default_rng().bytes(size), np.uint8),
                         mib << 20, workers=[a], pure=False)
    client.submit(len, data, workers=[b], pure=False).result()
    log = client.run(lambda dask_worker: list(dask_worker.transfer_incoming_log)[-1], workers=[b])[b]
    assert log["total"] >= mib << 20, log
    data.release()
    return log["duration"]


def _transfer_case(options: dict, placement: str, args) -> tuple[list[float], list[str], str]:
    from distributed import Client

    from hpcgpu import SLURMCluster

    with SLURMCluster(**options) as cluster, Client(cluster) as client:
        cluster.scale(jobs=2 if placement == "hosts" else 1)
        client.wait_for_workers(2, timeout=120)
        a, b = sorted(scheduler_workers(client))
        seconds = [_fetch_seconds(client, a, b, args.mib) for _ in range(args.repeats)]
        hosts = sorted(set(client.run(lambda: __import__("socket").gethostname()).values()))
        _drain(cluster, client, options["job_name"])
    return seconds, hosts, a


def transfer(args) -> dict:
    out = {}
    for protocol in args.protocols:
        for placement in args.placements:
            logs = tempfile.mkdtemp(prefix="site-xfer-", dir=args.tmp)
            options = dict(QUICK, job_name=f"sxfer-{protocol}", log_directory=logs,
                           gpus_per_node=1 if placement == "hosts" else 2)
            options.update({"tcp": {"security": False}, "tls": {}, "ucx": {"protocol": "ucx"}}[protocol])
            try:
                seconds, hosts, a = _transfer_case(options, placement, args)
            except Exception as error:  # a shared site: a fault of someone else's
                shutil.rmtree(logs, ignore_errors=True)
                out[f"{protocol} {placement}"] = {"failed": f"{type(error).__name__}: {error}"[:300]}
                print(f"{protocol} {placement}: failed: {error}", file=sys.stderr, flush=True)
                continue
            shutil.rmtree(logs, ignore_errors=True)
            rates = [args.mib / 1024 / s for s in seconds]
            out[f"{protocol} {placement}"] = {"median_gib_s": statistics.median(rates), "n": len(rates),
                                              "gib_s": rates, "hosts": hosts, "address": a.split("://")[0]}
            print(f"{protocol} {placement}: {out[f'{protocol} {placement}']['median_gib_s']:.3f} GiB/s "
                  f"{hosts}", file=sys.stderr, flush=True)
    return out


SERVER = """import socket,sys,time
s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind((sys.argv[1],47123));s.listen()
print('ready',flush=True);c,_=s.accept();n=int(sys.argv[2]);buf=bytearray(4<<20);got=0;t=None
while got<n:
    k=c.recv_into(buf);t=t or time.perf_counter();got+=k
    if not k: raise SystemExit('short stream: %d of %d bytes'%(got,n))
print(n/(time.perf_counter()-t)/2**30,flush=True)"""
CLIENT = """import socket,sys
c=socket.create_connection((sys.argv[1],47123));b=bytes(4<<20);n=int(sys.argv[2])
for _ in range(n//len(b)): c.sendall(b)
c.close()"""


def raw(receiver: str, sender: str, address: str, nbytes: int) -> float:
    """GiB/s of one Python TCP stream from ``sender`` to ``address`` on ``receiver``."""
    server = subprocess.Popen([*SITE_EXEC, receiver, sys.executable, "-c", SERVER, address, str(nbytes)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "ready"
        subprocess.run([*SITE_EXEC, sender, sys.executable, "-c", CLIENT, address, str(nbytes)],
                       check=True, timeout=120)
        return float(server.stdout.readline())
    finally:
        server.wait(60)


def reference(args) -> dict:
    nbytes = args.mib << 20
    cases = {"hosts": ("node2", "node1", "10.78.0.12"), "one host": ("node1", "node1", "10.78.0.11")}
    return {f"raw {label}": {"median_gib_s": statistics.median(rates), "n": len(rates), "gib_s": rates}
            for label, case in cases.items()
            for rates in [[raw(*case, nbytes) for _ in range(args.repeats)]]}


def on_login(phase: str, argv: list[str], env: dict | None = None) -> dict:
    done = subprocess.run([*SITE_EXEC, "login", sys.executable, __file__, phase, *argv], cwd=ROOT,
                          stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})}, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", nargs="?", default="all", choices=["all", "boot", "transfer"])
    parser.add_argument("--runs", type=int, default=5, help="start-up runs per design and N")
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 8, 16])
    parser.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=DESIGNS)
    parser.add_argument("--protocols", nargs="+", default=["tcp", "tls", "ucx"])
    parser.add_argument("--placements", nargs="+", default=["hosts", "one host"])
    parser.add_argument("--mib", type=int, default=256, help="MiB per transfer")
    parser.add_argument("--repeats", type=int, default=5, help="transfers per case")
    parser.add_argument("--skip", nargs="*", default=[], choices=["boot", "transfer", "reference"])
    parser.add_argument("--tmp", default=tempfile.gettempdir(), help="a directory every host sees")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.phase != "all":  # on the login host
        print(json.dumps((boot if args.phase == "boot" else transfer)(args)), flush=True)
        return
    Path(args.tmp).mkdir(exist_ok=True)
    argv = [a for a in sys.argv[1:] if not a.startswith("--out") and a != args.out]
    results = {"machine": f"{platform.node()} {os.cpu_count()} cores, the site of scripts/setup-site "
                          f"(login + {len(list(Path('/run/site/uts').glob('node*')))} compute hosts, ib0)",
               "command": "python benchmarks/site_bootstrap.py " + " ".join(sys.argv[1:]),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    phases = {"startup": lambda: on_login("boot", argv),
              "transfers": lambda: on_login("transfer", argv, env={"UCX_TLS": "tcp"}),
              "reference": lambda: reference(args)}
    for key, phase in phases.items():
        if {"startup": "boot", "transfers": "transfer"}.get(key, key) in args.skip:
            continue
        results[key] = phase()
        if args.out:  # after each phase: a site torn down under a later one keeps this
            Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
