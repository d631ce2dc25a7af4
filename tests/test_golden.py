"""jobscripts/cluster holds rendered examples; they must match the template byte for byte."""

from pathlib import Path

import pytest

from hpcgpu.examples import EXAMPLES, render_examples

DIRECTORY = Path(__file__).resolve().parents[1] / "jobscripts" / "cluster"


@pytest.mark.parametrize("filename", sorted(EXAMPLES))
def test_golden_job_script(filename):
    expected = (DIRECTORY / filename).read_text()
    assert render_examples()[filename] == expected, (
        f"{filename} differs from the template: regenerate with "
        "`python -m hpcgpu.examples jobscripts/cluster` and review the diff"
    )


def test_no_stray_golden_files():
    assert sorted(p.name for p in DIRECTORY.iterdir()) == sorted(EXAMPLES)
