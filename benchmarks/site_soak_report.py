"""The soak's report (``benchmarks/site_soak.py``): what it did and saw, as a dict and as markdown.

``summarise`` folds the app's events, the faults and the leftovers into the JSON report;
``render`` is pure: the report -> markdown.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MACHINE_HOST_RE = re.compile(r"\b(\d+\.){3}\d+(:\d+)?\b|\b[0-9a-f]{8,}\b|\b\d+\b")


def _shape(text: str) -> str:
    """A message with its numbers, addresses and ids blanked: messages that differ only there
    count as one."""
    return MACHINE_HOST_RE.sub("N", text.splitlines()[0] if text else "")[:160]


def _grouped(items: list[dict], key) -> list[dict]:
    counts: Counter = Counter()
    first: dict = {}
    for item in items:
        k = key(item)
        counts[k] += 1
        first.setdefault(k, item)
    return [{"count": n, **first[k]} for k, n in counts.most_common()]


def _recovery(fault: dict, rounds: list[dict], errors: list[dict]) -> dict:
    after = [r["at"] for r in rounds if r["at"] > fault["undone_at_s"]]
    during = [e for e in errors if fault["at_s"] <= e["at"] <= (after[0] if after else float("inf"))]
    return {"recovered_after_s": round(after[0] - fault["undone_at_s"], 1) if after else None,
            "errors_until_recovered": len(during)}


def _tracebacks(stderr: str) -> list[dict]:
    """The exception line of each traceback printed on the app's stderr, grouped."""
    found = []
    lines = stderr.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("Traceback (most recent call last)"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j] and not lines[j][0].isspace()), None)
            found.append({"text": lines[end][:300] if end is not None else "(cut)"})
    return _grouped(found, lambda t: _shape(t["text"]))


def _per_minute(rounds: list[dict], errors: list[dict], faults: list[dict]) -> list[dict]:
    """Each minute of the soak: rounds, values checked and wrong, errors, workers, faults begun."""
    rows: dict[int, dict] = {}
    for r in rounds:
        row = rows.setdefault(int(r["at"] // 60), {"rounds": 0, "checked": 0, "wrong": 0, "workers": []})
        row["rounds"] += 1
        row["checked"] += r["checked"]
        row["wrong"] += r["wrong"]
        row["workers"].append(r["workers"])
    for e in errors:
        rows.setdefault(int(e["at"] // 60), {"rounds": 0, "checked": 0, "wrong": 0, "workers": []})
    out = []
    for minute in sorted(rows):
        row = rows[minute]
        workers = row.pop("workers")
        out.append({"minute": minute, **row, "errors": sum(int(e["at"] // 60) == minute for e in errors),
                    "workers": f"{min(workers)}-{max(workers)}" if workers else "",
                    "faults": [f"{f['kind']} {f['host']}" for f in faults if int(f["at_s"] // 60) == minute]})
    return out


def _commit() -> str:
    done = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=False)
    return done.stdout.strip()


def summarise(*, args, hosts, workdir, events, faults, left, app_ended, ran_s, phases, started_utc,
              stderr, states) -> dict:
    """The JSON report of one soak."""
    rounds = [e for e in events if e["event"] == "round"]
    errors = [e for e in events if e["event"] == "error"]
    messages = [e for e in events if e["event"] == "message"]
    summary = next((e for e in events if e["event"] == "summary"), {})
    for fault in faults:
        fault.update(_recovery(fault, rounds, errors))
    checked, wrong = sum(r["checked"] for r in rounds), sum(r["wrong"] for r in rounds)
    leftover = bool(left["jobs"] or left["processes"] or left["temp_files"] or left.get("clean_up_error"))
    undo_errors = [f for f in faults if "undo_error" in f]
    usable = all(s.rstrip("*~#") in ("idle", "mixed", "allocated") and not s.endswith("*")
                 for s in states.values())
    report = {
        "command": "benchmarks/site_soak.py " + " ".join(sys.argv[1:]),
        "machine": f"{os.cpu_count()} cores, {platform.platform()}, the site in a box "
                   f"(login + {len(states)} compute hosts)",
        "commit": _commit(), "started_utc": started_utc,
        "ended_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "settings": {"minutes": args.minutes, "faults_every_s": list(args.faults_every),
                     "hold_s": list(args.hold), "max_faults": args.max_faults, "seed": args.seed,
                     "hosts": hosts, "kinds": args.kinds},
        "ran_s": round(ran_s, 1), "phases": phases, "workdir": str(workdir), "app_ended": app_ended,
        "faults_injected": len(faults), "faults_by_kind": dict(Counter(f["kind"] for f in faults)),
        "faults": faults,
        "results": {"rounds": len(rounds), "checked": checked, "wrong": wrong,
                    "rounds_failed": len(errors), "first_round_s": rounds[0]["at"] if rounds else None},
        "workers": {"min": min((r["workers"] for r in rounds), default=0),
                    "max": max((r["workers"] for r in rounds), default=0),
                    "hosts_seen": sorted({h for r in rounds for h in r["hosts"]})},
        "errors_seen": _grouped(errors, lambda e: (e["type"], _shape(e["text"]))),
        "hpcgpu_messages": _grouped(messages, lambda m: (m["level"], _shape(m["text"]))),
        "tracebacks_on_stderr": _tracebacks(stderr),
        "cluster": {"failures": len(summary.get("failures", [])), "events": len(summary.get("events", [])),
                    "failure_examples": summary.get("failures", [])[:3],
                    "event_examples": summary.get("events", [])[:3]},
        "left": left, "site_after": states, "per_minute": _per_minute(rounds, errors, faults),
    }
    report["passed"] = bool(rounds) and wrong == 0 and not leftover and not undo_errors and usable
    return report


def _fault_row(f: dict) -> str:
    note = f.get("undo_error") or f.get("error") or ", ".join(
        f"{k} {v}" for k, v in f.items() if k in ("workers_on", "processes_killed", "slurm_states_while_down", "state_after", "port"))
    recovered = "never" if f.get("recovered_after_s") is None else f"{f['recovered_after_s']} s"
    return (f"| {f['n']} | {f['at_s']} | {f['kind']} | {f['host']} | {f['held_s']} | {f['undo_s']} | "
            f"{recovered} | {f['errors_until_recovered']} | {note} |")


def render(report: dict) -> str:
    """The report as markdown (pure)."""
    r, left = report["results"], report["left"]
    lines = [
        "# Site soak", "",
        f"`{report['command']}` on {report['machine']}, commit {report['commit']}, "
        f"{report['started_utc']} to {report['ended_utc']}: {report['ran_s']} s from start to stop "
        f"({', '.join(f'{k} {v}' for k, v in report['phases'].items())}).", "",
        f"**{'PASSED' if report['passed'] else 'FAILED'}**: {report['faults_injected']} faults injected "
        f"({', '.join(f'{k} {v}' for k, v in sorted(report['faults_by_kind'].items())) or 'none'}); "
        f"{r['checked']} results checked in {r['rounds']} rounds, **{r['wrong']} wrong**; "
        f"{r['rounds_failed']} rounds raised an error; left: {len(left['jobs'])} jobs, "
        f"{sum(map(len, left['processes'].values()))} processes, {len(left['temp_files'])} temp files.", "",
        f"Workers: {report['workers']['min']} to {report['workers']['max']} (hosts seen: "
        f"{', '.join(report['workers']['hosts_seen'])}); cluster failure reports "
        f"{report['cluster']['failures']}, events {report['cluster']['events']}; app {report['app_ended']}; "
        f"SLURM after: {', '.join(f'{h} {s}' for h, s in report['site_after'].items())}.", "",
        "## Faults", "",
        "| # | at s | kind | host | held s | undo s | next checked round after undo | errors until then | notes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *map(_fault_row, report["faults"]), "",
        "## What the user saw", "",
        "| count | where | message (first of its kind) |", "| --- | --- | --- |",
        *(f"| {e['count']} | raised | {e['type']}: {_cell(e['text'])} |" for e in report["errors_seen"]),
        *(f"| {m['count']} | {m['logger']} {m['level']} | {_cell(m['text'])} |" for m in report["hpcgpu_messages"]),
        *(f"| {t['count']} | traceback on stderr | {_cell(t['text'])} |" for t in report["tracebacks_on_stderr"]),
        "", "## Minute by minute", "",
        "| minute | rounds | checked | wrong | errors | workers | faults begun |", "| --- | --- | --- | --- | --- | --- | --- |",
        *(f"| {m['minute']} | {m['rounds']} | {m['checked']} | {m['wrong']} | {m['errors']} | {m['workers']} | "
          f"{', '.join(m['faults'])} |" for m in report["per_minute"]),
        "", "## Left", "",
        f"- jobs in squeue: {left['jobs'] or 'none'}",
        f"- processes: {left['processes'] or 'none'}",
        f"- temp files: {left['temp_files'][:20] or 'none'}",
        f"- still there after the cluster closed, gone by the end of the 60 s wait: "
        f"{_lingered(left.get('lingered'))}", "",
    ]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.splitlines()[0][:300].replace("|", "\\|") if text else ""


def _lingered(seen) -> str:
    if not seen:
        return "nothing"
    what = {k: v for k, v in seen.items() if k != "until_s" and v}
    return f"{what} (last seen at {seen['until_s']} s)"
