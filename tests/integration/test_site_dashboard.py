"""The dashboard of a batch job, seen from ``login`` the way ``hpcgpu run`` tells the user to:
it listens on the compute host's 127.0.0.1 only (not reachable from ``login`` directly), and
``ssh -L P:localhost:PORT HOST`` brings it to ``login`` (here the forward's two ends without
ssh: tests/site_forward.py)."""

from __future__ import annotations

import re
import subprocess
from contextlib import contextmanager

import pytest
from conftest import wait_for
from site_helpers import PYTHON, ROOT, assert_nothing_left, job_finished, job_logs, on_host, site  # noqa: F401

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]

#: the user's script: computes, says where the dashboard is, then holds until told to end
HOLD = """
import pathlib, time
import hpcgpu
client = hpcgpu.get_client()
assert client.submit(sum, [1, 2]).result() == 3
pathlib.Path("ready").write_text("ok")
deadline = time.monotonic() + 120
while not pathlib.Path("done").exists() and time.monotonic() < deadline:
    time.sleep(0.2)
"""

#: an HTTP GET from a site host: the status code, or the error's name
FETCH = """
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=20) as page:
        print(page.status, "Dask" in page.read().decode(errors="replace"))
except Exception as error:
    print(type(error).__name__, getattr(error, "reason", ""))
"""


@contextmanager
def forward_end(host: str, listen: str, target_host: str, target_port: int):
    """One end of the forward on ``host``; yields the port it listens on."""
    end = subprocess.Popen(["bash", str(ROOT / "scripts" / "site-exec"), host, PYTHON,
                            str(ROOT / "tests" / "site_forward.py"), listen, target_host, str(target_port)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield int(end.stdout.readline())
    finally:
        end.stdin.close()  # it ends when its stdin closes
        end.wait(timeout=30)


def fetch(url: str) -> str:
    return on_host("login", PYTHON, "-c", FETCH, url, timeout=60).stdout.strip()


def test_a_batch_jobs_dashboard_through_ssh_l_from_login(tmp_path):
    (tmp_path / "hold.py").write_text(HOLD)
    done = on_host("login", "sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=1", "--gpus-per-node=1",
                   "--cpus-per-task=1", "--mem=2G", "--time=5", f"--chdir={tmp_path}",
                   f"--output={tmp_path}/%j.out", f"--error={tmp_path}/%j.err", f"--export=ALL,HPCGPU_PYTHON={PYTHON}",
                   str(ROOT / "jobscripts" / "slurm-2x4.sbatch"), "hold.py", timeout=60)
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip().split(";")[0]
    try:
        wait_for(lambda: (tmp_path / "ready").exists() or job_finished(job_id), 120, 0.5,
                 what="the script to compute")
        log = (tmp_path / f"{job_id}.err").read_text()
        said = re.search(r"dashboard: http://127\.0\.0\.1:(\d+)/status on (node\d) \(this node only, no "
                         r"password\); from your own machine: ssh -L (\d+):localhost:\1 \2", log)
        assert said and (tmp_path / "ready").exists(), log
        port, host = int(said.group(1)), said.group(2)
        # not from login straight to the compute host: the dashboard is on its 127.0.0.1 only
        assert fetch(f"http://{host}:{port}/status").startswith("URLError [Errno 111]"), log
        with forward_end(host, "0.0.0.0", "127.0.0.1", port) as node_end, \
                forward_end("login", "127.0.0.1", host, node_end) as login_port:
            assert fetch(f"http://localhost:{login_port}/status") == "200 True"
    finally:
        (tmp_path / "done").touch()
    assert wait_for(lambda: job_finished(job_id), 120, 0.5, what=f"job {job_id} to end") == ("COMPLETED", "0:0"), \
        job_logs(tmp_path, job_id)
    assert_nothing_left()
