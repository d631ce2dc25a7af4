"""jobscripts/ holds rendered examples; they must match the template byte for byte."""

from pathlib import Path

import pytest

from hpcgpu.jobspec.examples import BATCH_EXAMPLES, EXAMPLES, render_batch_examples, render_examples

DIRECTORY = Path(__file__).resolve().parents[2] / "jobscripts" / "cluster"
BATCH_DIRECTORY = DIRECTORY.parent


@pytest.mark.parametrize("filename", sorted(EXAMPLES))
def test_golden_job_script(filename):
    expected = (DIRECTORY / filename).read_text()
    assert render_examples()[filename] == expected, (
        f"{filename} differs from the template: regenerate with "
        "`python -m hpcgpu.jobspec.examples jobscripts` and review the diff"
    )


def test_no_stray_golden_files():
    assert sorted(p.name for p in DIRECTORY.iterdir()) == sorted(EXAMPLES)


@pytest.mark.parametrize("filename", sorted(BATCH_EXAMPLES))
def test_golden_batch_script(filename):
    expected = (BATCH_DIRECTORY / filename).read_text()
    assert render_batch_examples()[filename] == expected, (
        f"{filename} differs from the template: regenerate with "
        "`python -m hpcgpu.jobspec.examples jobscripts` and review the diff"
    )


def test_no_stray_batch_golden_files():
    files = sorted(p.name for p in BATCH_DIRECTORY.iterdir() if p.is_file())
    assert files == sorted(BATCH_EXAMPLES)
