"""Flux's #FLUX: directives against flux batch's documented grammar (RFC 36 submission
directives, flux-batch(1) options): no real Flux here, so this and the shim are the check."""

from __future__ import annotations

import shlex

from hypothesis import given, settings
from hypothesis import strategies as st

from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.examples import render_examples
from hpcgpu.jobspec.resources import GPUJobShape

#: flux batch's options hpcgpu may write (flux-batch(1): job parameters, standard I/O, other)
DOCUMENTED = {"--job-name", "--nodes", "--nslots", "--cores-per-slot", "--gpus-per-slot",
              "--time-limit", "--queue", "--setattr", "--exclusive", "--output", "--error",
              "--signal"}


def directive_block(script: str) -> list[str]:
    """RFC 36: the directive lines, which must form one group (blank lines aside) with one
    sentinel; a directive after another line is an error for flux batch."""
    lines = script.splitlines()
    assert lines[0].startswith("#!")
    at = [i for i, line in enumerate(lines) if "FLUX:" in line.upper().split(" ", 1)[0]]
    assert at == list(range(1, 1 + len(at))), "directives not grouped after the shebang"
    assert all(lines[i].startswith("#FLUX: ") for i in at), "one sentinel, '#FLUX:'"
    return [word for i in at for word in shlex.split(lines[i][len("#FLUX:"):], comments=True)]


@settings(max_examples=60, deadline=None)
@given(nodes=st.integers(1, 64), gpus=st.integers(1, 8), cpus=st.integers(1, 16),
       minutes=st.integers(1, 7 * 24 * 60), queue=st.sampled_from([None, "pbatch", "gpu"]),
       exclusive=st.booleans())
def test_directives_ask_flux_for_the_shape(nodes, gpus, cpus, minutes, queue, exclusive):
    shape = GPUJobShape.create(nodes=nodes, gpus_per_node=gpus, cpus_per_gpu=cpus,
                               walltime=f"{minutes // 60}:{minutes % 60:02d}:00", queue=queue, exclusive=exclusive)
    words = directive_block("#!/bin/bash\n" + "\n".join(get_dialect("flux").directives(shape, "l")))
    options = dict(word.partition("=")[::2] for word in words)
    assert set(options) <= DOCUMENTED
    slots, per_slot = int(options["--nslots"]), int(options["--gpus-per-slot"])
    # Flux spreads the slots evenly over --nodes (JobspecV1: node[N] -> slot[ceil(n/N)])
    assert int(options["--nodes"]) == nodes and slots % nodes == 0
    assert slots // nodes * per_slot == gpus
    assert slots // nodes * int(options["--cores-per-slot"]) == shape.cpus_per_node
    assert options["--time-limit"] == f"{minutes}m"
    assert ("--exclusive" in options) == exclusive and options.get("--queue") == queue


def test_the_golden_flux_script_keeps_its_directives_together():
    words = directive_block(render_examples()["flux-2x4.sh"])
    assert words[:5] == ["--job-name=hpcgpu", "--nodes=2", "--nslots=8", "--cores-per-slot=8",
                         "--gpus-per-slot=1"]
    assert "--output=logs/{{name}}-{{id}}.out" in words  # flux's mustache job name and id


def test_status_lines_and_submit_output():
    dialect = get_dialect("flux")
    assert dialect.parse_job_id("ƒ2Fz7aK1\n") == "ƒ2Fz7aK1"
    assert dialect.submit_argv() == ["flux", "batch"]  # the script on standard input
    status = dialect.parse_status("ƒA|TIMEOUT|n[1-2]|-9|\nƒB|SCHED|||\nƒC|NEW|||\nbad line\n")
    assert (status["ƒA"].state, status["ƒA"].nodes, status["ƒA"].exit_code) == (
        "failed", ("n1", "n2"), -9)
    assert status["ƒB"].state == "pending" and status["ƒC"].state == "unknown"
