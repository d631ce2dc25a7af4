"""``expand_hostlist`` against SLURM's own ``scontrol show hostnames`` on this machine."""

from __future__ import annotations

import subprocess

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hpcgpu.jobspec.dialects.slurm import expand_hostlist


def scontrol_hostnames(text: str) -> tuple[str, ...] | None:
    """SLURM's expansion, or None where SLURM calls the list invalid."""
    done = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True,
                          text=True, timeout=30)
    return tuple(done.stdout.split()) if done.returncode == 0 else None


@st.composite
def ranges(draw) -> str:
    parts = []
    for _ in range(draw(st.integers(1, 3))):
        low = draw(st.integers(0, 120))
        high = low + draw(st.integers(0, 3))
        width = len(str(low)) + draw(st.integers(0, 2))  # zero padding
        parts.append(f"{low:0{width}d}" + (f"-{high:0{width}d}" if high > low else ""))
    return ",".join(parts)


# Starting with a letter: scontrol reads "-a" as an option.
_LITERAL = st.builds(str.__add__, st.sampled_from("abnrk"),
                     st.text(st.sampled_from("abnrk-0"), max_size=3))


@st.composite
def names(draw) -> str:
    """``node7`` or ``rack[1-2]-n[1-2]``: SLURM takes nothing after the last bracket."""
    name = draw(_LITERAL)
    for _ in range(draw(st.integers(0, 3))):
        name += f"[{draw(ranges())}]" + draw(_LITERAL)
    return name if "[" not in name else name[:name.rfind("]") + 1]


def test_several_brackets_give_every_combination(slurm):
    text = "rack[1-2]-n[1-2]"
    assert expand_hostlist(text) == scontrol_hostnames(text) == (
        "rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2")


@settings(max_examples=60, deadline=None)
@given(st.lists(names(), min_size=1, max_size=3))
def test_expansion_matches_scontrol_show_hostnames(slurm, items):
    text = ",".join(items)
    expected = scontrol_hostnames(text)
    assume(expected is not None)
    assert expand_hostlist(text) == expected
