"""Shared parts of the PBS and LSF command shims: run a job script under the local SLURM.

The shims translate the script's own #PBS / #BSUB directives into sbatch options (and refuse
ones they do not know, as the real commands would), submit the script's body unchanged with
``sbatch --ignore-pbs`` (so SLURM does not read those directives itself), and report SLURM's
states in the real commands' output formats.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED"}


def directives(text: str, prefix: str) -> list[list[str]]:
    """The argument lists of the script's directive lines (before the first command)."""
    out = []
    for line in text.splitlines()[1:]:
        if line.startswith(prefix + " "):
            out.append(shlex.split(line[len(prefix):]))
        elif line.strip() and not line.startswith("#"):
            break
    return out


def fail(message: str, code: int = 1) -> None:
    print(message, file=sys.stderr)
    sys.exit(code)


def sbatch(text: str, options: list[str], env: dict[str, str]) -> str:
    """Submit ``text`` with ``options``; the scheduler's variables are exported first."""
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    lines = text.splitlines(keepends=True)
    body = lines[0] + f"export {exports}\n" + "".join(lines[1:])
    done = subprocess.run(["sbatch", "--parsable", "--ignore-pbs", *options], input=body,
                          capture_output=True, text=True)
    if done.returncode:
        fail(done.stderr.strip() or done.stdout.strip(), done.returncode)
    return done.stdout.strip().split(";")[0]


def squeue(job_ids: list[str]) -> dict[str, dict[str, str]]:
    """SLURM job id -> {state, nodes, name} for the ids SLURM still lists."""
    done = subprocess.run(["squeue", "--noheader", "--states=all", f"--jobs={','.join(job_ids)}",
                           "--format=%i|%T|%N|%j"], capture_output=True, text=True)
    jobs = {}
    for line in done.stdout.splitlines():
        job_id, state, nodes, name = line.strip().split("|", 3)
        for one in array_elements(job_id):
            jobs[one] = {"state": state, "nodes": hostnames(nodes), "name": name}
    return jobs


def array_elements(job_id: str) -> list[str]:
    """squeue prints an array's pending elements on one line: ``123_[0-3%2]`` -> 123_0..."""
    match = re.fullmatch(r"(\d+)_\[([\d,-]+)(?:%\d+)?\]", job_id)
    if not match:
        return [job_id]
    out = []
    for part in match.group(2).split(","):
        low, _, high = part.partition("-")
        out += [f"{match.group(1)}_{i}" for i in range(int(low), int(high or low) + 1)]
    return out


def hostnames(nodes: str) -> list[str]:
    if not nodes or nodes == "(null)":
        return []
    done = subprocess.run(["scontrol", "show", "hostnames", nodes], capture_output=True, text=True)
    return done.stdout.split()


def exit_code(job_id: str) -> int | None:
    done = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True)
    match = re.search(r"\bExitCode=(\d+):(\d+)", done.stdout)
    if not match:
        return None
    code, signal = int(match.group(1)), int(match.group(2))
    return 128 + signal if signal and not code else code


def memory_mb(text: str, default_unit: str = "kb") -> int:
    match = re.fullmatch(r"(\d+)([kmgt]?b?)", text.lower())
    if not match:
        fail(f"illegal memory size {text!r}")
    unit = (match.group(2) or default_unit).rstrip("b") or "b"
    scale = {"b": 1 / 2**20, "k": 1 / 1024, "m": 1, "g": 1024, "t": 2**20}[unit]
    return max(1, int(int(match.group(1)) * scale))


def scancel(job_ids: list[str]) -> int:
    return subprocess.run(["scancel", *job_ids]).returncode


def slurm_id(job_id: str) -> str:
    """A PBS/LSF id -> SLURM's: ``123[4].shim`` / ``123[4]`` -> ``123_4``, ``123.shim`` -> ``123``."""
    return re.sub(r"\[(\d+)\]", r"_\1", job_id.split(".")[0])


def slurm_nodes(partition: str | None = None) -> list[dict]:
    """The local SLURM's nodes (of ``partition`` where given), for the node/queue queries:
    name, cpus, memory in MB, GPUs and their type, partitions."""
    done = subprocess.run(["sinfo", "--noheader", "--Node", "--format=%N|%c|%m|%G|%P"],
                          capture_output=True, text=True)
    if done.returncode:
        fail(done.stderr.strip() or "sinfo failed", done.returncode)
    nodes: dict[str, dict] = {}
    for line in done.stdout.splitlines():
        name, cpus, memory, gres, part = line.strip().split("|")
        node = nodes.setdefault(name, {"name": name, "cpus": int(cpus.rstrip("+")),
                                       "memory_mb": int(memory.rstrip("+")), "gpus": 0,
                                       "gpu_type": "", "partitions": []})
        node["partitions"].append(part.rstrip("*"))
        match = re.match(r"gpu:(?:(\w+):)?(\d+)", gres)
        if match:
            node["gpu_type"], node["gpus"] = match.group(1) or "", int(match.group(2))
    return [n for n in nodes.values() if partition is None or partition in n["partitions"]]
