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


def test_processes_report_reads_real_accounting_records_and_names_each_process():
    """``.ci/processes report`` on a real acct v3 file of this machine kind (Debian 12, Linux
    6.x; tests/data/processes): a ``python -c SAFE_MAIN hpcgpu.worker``-shaped process that
    used 0.2 s, its unseen child counted under it, both under the test of its environment."""
    out = subprocess.run([sys.executable, str(ROOT / ".ci/processes"), "report",
                          str(ROOT / "tests/data/processes")],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "== CPU by process (4 processes ended, 0 CPU s)"
    assert out[3] == "| `python -c hpcgpu.worker` | 1 | 0.2 | 100.0 % |"
    assert "| `true < python -c hpcgpu.worker` | 1 | 0.0 | 0.0 % |" in out
    assert out[out.index("| file | CPU s | share |") + 2] == "| `tests/unit/test_example.py` | 0.2 | 100.0 % |"


def test_processes_kind_names_modules_scripts_and_programs():
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("ci_processes", str(ROOT / ".ci/processes"))
    spec = importlib.util.spec_from_loader("ci_processes", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    assert module.kind(["/usr/bin/python3", "-m", "pytest", "-q"]) == "python -m pytest"
    assert module.kind(["python3", "-B", "-c", "import x", "hpcgpu.worker", "--gpus"]) == "python -c hpcgpu.worker"
    assert module.kind(["python3", "-c", "print(1)"]) == "python -c print(1)"
    safe = 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);'
    assert module.kind(["python3", "-B", "-c", safe + "from multiprocessing.forkserver import main; main(8)"]) \
        == "python -c multiprocessing.forkserver"
    assert module.kind(["python3", "-c", "import sys;exec(eval(sys.stdin.readline()))"]) == "pytest-xdist worker"
    assert module.kind(["/x/bin/python3.11", "-u", "/tmp/a/script.py", "1"]) == "python script.py"
    assert module.kind(["/usr/sbin/slurmstepd"]) == "slurmstepd"
    assert module.kind([]) == "?"
