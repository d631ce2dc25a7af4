"""``.ci/files``: the per-file table CI prints after the suite, from pytest's JUnit XML."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

JUNIT = """<testsuites><testsuite>
<testcase classname="tests.unit.test_ci_files" name="a" time="2.0"/>
<testcase classname="tests.unit.test_ci_files" name="b" time="1.0"><failure/></testcase>
<testcase classname="hpcgpu.system.threadsignals" name="blocked_here" time="0.5"/>
<testcase classname="" name="collection error" time="0"><error/></testcase>
</testsuite></testsuites>
"""


def test_rows_per_file_heaviest_first_an_empty_classname_included(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    out = subprocess.run([sys.executable, str(ROOT / ".ci/files"), str(junit)],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[2] == "| `tests/unit/test_ci_files.py` (1 failed) | 2 | 3.0 | 85.7 % |"
    assert out[3] == "| `hpcgpu/system/threadsignals.py` | 1 | 0.5 | 14.3 % |"
    assert out[4] == "| `?` (1 failed) | 1 | 0.0 | 0.0 % |"
    assert out[5] == "| all 3 files | 4 | 3.5 | 100 % |"
