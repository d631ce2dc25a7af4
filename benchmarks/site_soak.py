"""The soak of the site in a box: an adaptive cluster under faults, its results checked.

For ``--minutes`` (default 30, counted from its first checked result) an adaptive
``SLURMCluster`` runs on the site's ``login`` host (``interface="ib0"``, one exclusive job per
compute host, between one and all of them) under computations that check their own answers
(``benchmarks/site_soak_app.py``), while every ``--faults-every`` seconds (random in 60-120 by
default) one fault of a real site hits a random compute host: its ``ib0`` cable cut
(``link``); the host killed, its slurmd and processes gone, then slurmd restarted and the node
resumed (``kill``); an ``nft`` rule on it dropping what it sends to the scheduler's port
(``port``); or ``slurmctld`` stopped and started again (``slurmctld``). Each fault is held for
``--hold`` seconds (random in 5-40; slurmctld at most 20), then undone; at most
``--max-faults``, and none begun that could not be undone before the end. At the end (or on
Ctrl-C / SIGTERM) it stops the computation, closes the cluster, waits up to 60 s for its jobs,
processes and temporary files to go, counts those left, then removes them, so that the site is
left clean. A hard bound: 3 minutes to the first result, ``--minutes``, about 3 more to end.

Needs the site (``bash scripts/setup-site --compute-hosts 4``), root, and runs from the
repository root (``scripts/site-soak`` wraps it):

    python benchmarks/site_soak.py --out benchmarks/results/cpu           # 30 minutes
    python benchmarks/site_soak.py --minutes 3 --hosts node3,node4 --kinds link,kill,port

Writes ``site_soak.json`` and ``site_soak.md`` under ``--out``; exits 1 when a result was
wrong or something was left.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "benchmarks")]

import site_faults as site  # noqa: E402  (tests/site_faults.py: the faults, shared with the tests)
from site_faults import KINDS, hold_fault  # noqa: E402
from site_soak_report import render, summarise  # noqa: E402

#: the longest each kind takes to undo (a killed host: slurmd back and SLURM has the node again)
UNDO_S = {"link": 1, "port": 2, "slurmctld": 30, "kill": 90}
APP = ROOT / "benchmarks" / "site_soak_app.py"
#: the longest the cluster may take to check its first round (jobs queued behind others')
START_S = 180


def seconds_range(text: str) -> tuple[float, float]:
    """``"60-120"`` -> (60, 120); ``"5"`` -> (5, 5)."""
    low, _, high = text.partition("-")
    low, high = float(low), float(high or low)
    if not 0 <= low <= high:
        raise argparse.ArgumentTypeError(f"{text!r}: give SECONDS or LOW-HIGH with LOW <= HIGH")
    return low, high


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long it runs (default 30)")
    parser.add_argument("--faults-every", type=seconds_range, default=(60.0, 120.0),
                        help="seconds between faults, random in LOW-HIGH (default 60-120)")
    parser.add_argument("--max-faults", type=int, default=40, help="at most this many faults (default 40)")
    parser.add_argument("--hold", type=seconds_range, default=(5.0, 40.0),
                        help="seconds each fault is held before it is undone (default 5-40)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    parser.add_argument("--hosts", default=None, help="compute hosts used and faulted (default: all)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"fault kinds (default {','.join(KINDS)})")
    parser.add_argument("--out", type=Path, default=None, help="where site_soak.json and .md go")
    parser.add_argument("--workdir", type=Path, default=None, help="logs and temp (default: a new one)")
    args = parser.parse_args(argv)
    args.kinds = [k for k in args.kinds.split(",") if k]
    if unknown := set(args.kinds) - set(KINDS):
        parser.error(f"--kinds: unknown {sorted(unknown)}; choose from {','.join(KINDS)}")
    if args.seed is None:
        args.seed = int(time.time())
    return args


class AppOutput:
    """The app's JSON lines as they arrive, each stamped with the driver's clock, and
    appended to ``log`` at once (a soak killed from outside still leaves what the app said)."""

    def __init__(self, stream, start: float, log: Path) -> None:
        self.events: list[dict] = []
        self.log = log
        log.write_text("")
        self.lock = threading.Lock()
        self.working = threading.Event()  # the first round checked (or the app ended)
        self.start = start
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                event = {"event": "stdout", "text": line.rstrip()[:500]}
            event["at"] = round(time.monotonic() - self.start, 2)
            with self.lock:
                self.events.append(event)
                with open(self.log, "a") as log:
                    log.write(json.dumps(event) + "\n")
            if event.get("event") == "round":
                self.working.set()
        self.working.set()  # EOF: the app ended (before its first round, if it failed)

    def snapshot(self) -> list[dict]:
        with self.lock:
            return list(self.events)


def start_app(args, workdir: Path, job_name: str, hosts: list[str], all_hosts: list[str]):
    others = sorted(set(all_hosts) - set(hosts))
    options = {
        "interface": "ib0", "gpus_per_node": 1, "exclusive": True, "job_name": job_name,
        "walltime": f"00:{int(args.minutes) + 20:02d}:00" if args.minutes < 39 else "02:00:00",
        "death_timeout": 60, "poll_interval": 1, "max_failed_jobs": 1000,
        "log_directory": str(workdir / "logs"),
        "scheduler_options": {"dashboard_address": "localhost:0"},
        "job_extra_directives": [f"--exclude={','.join(others)}"] if others else [],
        "_soak": {"seed": args.seed, "max_jobs": len(hosts), "round_timeout": 300, "phase": 90},
    }
    (workdir / "tmp").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TMPDIR": str(workdir / "tmp")}  # the cluster's and its workers' temp files
    stderr = open(workdir / "app.stderr", "w")
    app = subprocess.Popen(["bash", str(ROOT / "scripts" / "site-exec"), "login", sys.executable, str(APP),
                            json.dumps(options)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=stderr, text=True, cwd=workdir, env=env)
    return app, stderr


def progress(out: AppOutput) -> str:
    events = out.snapshot()
    rounds = [e for e in events if e["event"] == "round"]
    return (f"rounds {len(rounds)}, checked {sum(r['checked'] for r in rounds)}, wrong "
            f"{sum(r['wrong'] for r in rounds)}, errors {sum(e['event'] == 'error' for e in events)}, "
            f"workers {rounds[-1]['workers'] if rounds else 0}")


def working_hosts(out: AppOutput, hosts: list[str]) -> list[str]:
    """The hosts among ``hosts`` with a worker at the last round (``ib0`` 10.78.0.1N is nodeN)."""
    rounds = [e for e in out.snapshot() if e["event"] == "round"]
    seen = {f"node{int(ip.rsplit('.', 1)[1]) - 10}" for ip in (rounds[-1]["hosts"] if rounds else [])}
    return [h for h in hosts if h in seen]


def run_faults(args, hosts, out: AppOutput, deadline: float, stop: threading.Event, running) -> list[dict]:
    rng = random.Random(args.seed)
    port = int(next(e for e in out.snapshot() if e["event"] == "ready")["scheduler"].rsplit(":", 1)[1])
    faults: list[dict] = []
    next_at, shown = time.monotonic() + rng.uniform(*args.faults_every), time.monotonic()
    while not stop.wait(0.5) and time.monotonic() < deadline and running():
        if time.monotonic() - shown > 60:
            print(f"[soak] {time.monotonic() - out.start:7.1f} s: {progress(out)}", flush=True)
            shown = time.monotonic()
        if len(faults) >= args.max_faults or time.monotonic() < next_at:
            continue
        next_at = time.monotonic() + rng.uniform(*args.faults_every)
        busy = working_hosts(out, hosts)  # a fault where a worker runs, where one does
        kind, host = rng.choice(args.kinds), rng.choice(busy or hosts)
        host = "login" if kind == "slurmctld" else host  # where slurmctld runs
        hold = min(rng.uniform(*args.hold), 20 if kind == "slurmctld" else math.inf)
        if time.monotonic() + hold + UNDO_S[kind] > deadline:  # could not be undone before the end
            continue
        at = time.monotonic() - out.start
        print(f"[soak] {at:7.1f} s: fault {len(faults) + 1}: {kind} on {host} for {hold:.0f} s", flush=True)
        record = {"n": len(faults) + 1, "at_s": round(at, 1), "workers_on": busy,
                  **hold_fault(kind, host, hold, stop, port=port)}
        record["undone_at_s"] = round(time.monotonic() - out.start, 1)
        faults.append(record)
        next_at = max(next_at, time.monotonic() + 1)
    return faults


def stop_app(app: subprocess.Popen, grace: float = 120) -> str:
    """Ask the app to stop (a line on stdin), then SIGTERM, then SIGKILL: how it ended."""
    if app.poll() is not None:
        return f"exited by itself with code {app.returncode}"
    try:
        app.stdin.write("stop\n")
        app.stdin.close()
    except (BrokenPipeError, ValueError):
        pass
    for how, wait in (("stopped", grace), ("terminated", 30)):
        try:
            app.wait(timeout=wait)
            return how
        except subprocess.TimeoutExpired:
            app.terminate()
    app.kill()
    app.wait(timeout=30)
    return "killed"


def left_over(job_name: str, hosts: list[str], workdir: Path) -> dict:
    """Jobs of the soak still listed, processes on each host, temp files left."""
    procs = site.leftovers(hosts)
    mine = [f"{pid} {cmd[:200]}" for pid in site.host_pids("login")
            if (cmd := site.command_line(pid)) and str(workdir) in cmd]
    if mine:
        procs["login"] = mine
    temp = sorted(str(p.relative_to(workdir)) for p in (workdir / "tmp").rglob("*") if _left_behind(p))
    temp += sorted(str(p.relative_to(workdir)) for p in (workdir / "logs").glob(".hpcgpu-*/*"))
    return {"jobs": site.site_jobs(job_name), "processes": procs, "temp_files": temp}


def _left_behind(path: Path) -> bool:
    """A file, or an empty directory, that is not Dask's own scratch space (its directory and
    lock files stay by design: the next worker purges stale directories through them)."""
    if path.name == "dask-scratch-space" or path.parent.name == "dask-scratch-space" and path.suffix == ".lock":
        return False
    return path.is_file() or path.is_dir() and not any(path.iterdir())


def clean_up(job_name: str, hosts: list[str], workdir: Path) -> None:
    """Whatever the soak left: its jobs cancelled, its processes killed, every host resumed."""
    site.on_host("login", "scancel", "-n", job_name, timeout=30)
    for host in [*hosts, "login"]:
        for pid in site.host_pids(host):
            if (cmd := site.command_line(pid)) and str(workdir) in cmd:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    for host in hosts:
        site.restore_link(host)
        site.undrop(host)
        if not site.alive_slurmd(host) or site.node_state(host).startswith(("down", "drain", "fail")):
            site.revive_host(host)
    if not site.alive_slurmctld():
        site.start_slurmctld()


def settled(hosts: list[str], timeout: float = 60) -> dict[str, str]:
    """SLURM's state of each host once none is completing a job or coming back (bounded)."""
    def states():
        now = {h: site.node_state(h) for h in hosts}
        return now if all(s in ("idle", "mixed", "allocated") for s in now.values()) else None

    try:
        return site.wait_until(states, timeout, 1, what="the hosts to settle")
    except TimeoutError:
        return {h: site.node_state(h) for h in hosts}


def soak(args) -> dict:
    all_hosts = site.compute_hosts()
    hosts = args.hosts.split(",") if args.hosts else all_hosts
    if missing := set(hosts) - set(all_hosts):
        raise SystemExit(f"--hosts {sorted(missing)}: not hosts of the site ({all_hosts}); "
                         "build it with: bash scripts/setup-site --compute-hosts 4")
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="hpcgpu-soak-"))).resolve()
    job_name = f"soak{os.getpid()}"
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    start = time.monotonic()
    started_utc = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    app, stderr = start_app(args, workdir, job_name, hosts, all_hosts)
    out = AppOutput(app.stdout, start, workdir / "events.jsonl")
    faults: list[dict] = []
    phases = {"to_first_result_s": None}
    try:
        # --minutes of computation from its first checked round, which may take START_S to come
        while not (out.working.wait(1) or stop.is_set() or app.poll() is not None
                   or time.monotonic() > start + START_S):
            pass
        if out.working.is_set() and app.poll() is None and not stop.is_set():
            phases["to_first_result_s"] = round(time.monotonic() - start, 1)
            deadline = time.monotonic() + args.minutes * 60
            faults = run_faults(args, hosts, out, deadline, stop, lambda: app.poll() is None)
    finally:
        ran_s = time.monotonic() - start
        ended = stop_app(app)
        phases["closing_s"] = round(time.monotonic() - start - ran_s, 1)
        stderr.close()
        out.thread.join(timeout=10)
        lingered: list = []  # what was still there, the last time something was

        def gone() -> bool:
            now = left_over(job_name, hosts, workdir)
            if any(now.values()):
                lingered[:] = [round(time.monotonic() - start, 1), now]
            return not any(now.values())

        try:
            site.wait_until(gone, 60, 1, what="the soak's jobs, processes and files to go")
        except TimeoutError:
            pass
        left = left_over(job_name, hosts, workdir)
        left["lingered"] = lingered and {"until_s": lingered[0], **lingered[1]}
        phases["leftovers_gone_s"] = round(time.monotonic() - start - ran_s - phases["closing_s"], 1)
        try:
            clean_up(job_name, hosts, workdir)
        except Exception as error:  # still report what the soak saw
            left["clean_up_error"] = f"{type(error).__name__}: {error}"

    events = out.snapshot()
    return summarise(args=args, hosts=hosts, workdir=workdir, events=events, faults=faults,
                     left=left, app_ended=ended, ran_s=ran_s, phases=phases, started_utc=started_utc,
                     stderr=(workdir / "app.stderr").read_text(errors="replace"),
                     states=settled(hosts))


def main(argv=None) -> int:
    args = parse_args(argv)
    report = soak(args)
    if args.out:  # the record first: whatever rendering does, the run's figures are kept
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "site_soak.json").write_text(json.dumps(report, indent=1) + "\n")
    text = render(report)
    if args.out:
        (args.out / "site_soak.md").write_text(text)
    print(text)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
