"""README.md's notebook quickstart, as written, from the site's login host
(``bash scripts/site-exec login python …``) against the site's SLURM: only the sizes the
site's nodes cannot hold are changed (``cpus_per_gpu=8`` -> ``1``, ``memory_per_gpu="60GB"`` ->
``"2GB"``: a site node has 8 CPUs and 16 GB); the queue (``gpu``), the account and
everything else run as printed. Checks appended after the block: 8 workers over the two jobs
on two hosts, a computation's result, nothing left."""

from __future__ import annotations

import json

import pytest
from docblocks import ROOT, blocks_of
from site_helpers import PYTHON, assert_nothing_left, on_host, site  # noqa: F401

pytestmark = [pytest.mark.site, pytest.mark.slurm, pytest.mark.usefixtures("site")]

SITE_SIZES = (("cpus_per_gpu=8", "cpus_per_gpu=1"), ('memory_per_gpu="60GB"', 'memory_per_gpu="2GB"'))
CHECKS = """
# --- appended by tests/integration/test_site_quickstart.py ---
import json as _json, socket as _socket
_hosts = client.run(_socket.gethostname)
_squares = client.map(lambda x: x * x, range(100))
_total = client.submit(sum, _squares).result()
import time as _time  # the job table learns a job's nodes at its next poll of squeue
_until = _time.monotonic() + 30
while not all(j.nodes for j in cluster.jobs) and _time.monotonic() < _until:
    _time.sleep(0.2)
_jobs = [(j.job_id, list(j.nodes), len(j.workers)) for j in cluster.jobs]
client.close(); cluster.close()
print(_json.dumps({"hosts": _hosts, "total": _total, "jobs": _jobs}))
"""


def quickstart() -> str:
    block = next(b for b in blocks_of(ROOT / "README.md")
                 if b.language == "python" and "SLURMCluster(nodes=1" in b.text)
    assert block.not_run is None, block.id  # the README says it runs as written
    text = block.text
    for old, new in SITE_SIZES:
        assert old in text, (old, block.id)
        text = text.replace(old, new)
    return text


def test_the_readme_quickstart_from_the_login_host(tmp_path):
    script = tmp_path / "quickstart.py"
    script.write_text(quickstart() + CHECKS)
    done = on_host("login", PYTHON, str(script), timeout=150, cwd=tmp_path)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-5000:])
    printed, result = done.stdout.strip().rsplit("\n", 1)
    assert "#SBATCH" in printed and "--account=myproj" in printed and "--partition=gpu" in printed, printed
    out = json.loads(result)
    assert out["total"] == sum(x * x for x in range(100)), out
    assert len(out["hosts"]) == 8 and sorted(set(out["hosts"].values())) == ["node1", "node2"], out
    assert len(out["jobs"]) == 2 and all(len(nodes) == 1 for _, nodes, _ in out["jobs"]), out
    assert_nothing_left()
