"""#38's class of break 1 for ``LocalGPUCluster``: a script started from a shared directory
(``python /home/me/analysis.py`` in a 1777 scratch directory). The script's own interpreter
puts the script's directory first on ``sys.path``, not the working directory; the
interpreters multiprocessing starts for the workers (``python -c``: the fork server, a
spawned worker process, the resource tracker) put the working directory first, and a
``distributed.py`` or ``multiprocessing.py`` planted there ran in them as the user. Each
planted module leaves a marker; none may appear, and the cluster still computes."""

from __future__ import annotations

import subprocess
import sys


#: what each planted module does: leave ``ran-<name>-<pid>`` beside itself, then fail as a
#: missing module would
PLANTED = ("import os, sys\n"
           "open(os.path.join(os.path.dirname(os.path.abspath(__file__)), 'ran-%s-%d' % (__name__, os.getpid())),"
           " 'w').write(' '.join(sys.argv))\n"
           "raise ImportError('planted')\n")
#: modules the workers' interpreters import first: multiprocessing's bootstrap, the fork
#: server's preload list, what a worker process imports
SHADOWED = ("multiprocessing", "distributed", "dask", "hpcgpu", "numpy", "tornado", "lz4")

SCRIPT = """
import sys
import dask
from distributed import Client
from hpcgpu import LocalGPUCluster

if __name__ == "__main__":
    for method in sys.argv[1:]:  # one process: what one start-up costs, for CI
        with dask.config.set({"hpcgpu.local-multiprocessing-method": method}), \
                LocalGPUCluster(n_workers=1, gpus=[], dashboard_address=None) as cluster, Client(cluster) as client:
            assert client.submit(sum, [1, 2]).result() == 3
            print("computed with", method)
"""


def test_local_cluster_from_a_shared_directory_imports_nothing_from_it(tmp_path):
    """The fork server (hpcgpu's default), then spawned worker processes."""
    home, shared = tmp_path / "home", tmp_path / "scratch"
    home.mkdir()
    shared.mkdir()
    shared.chmod(0o1777)
    for name in SHADOWED:
        (shared / f"{name}.py").write_text(PLANTED)
    script = home / "analysis.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script), "forkserver", "spawn"], cwd=shared,
                          capture_output=True, text=True, timeout=120)
    ran = {p.name: p.read_text() for p in shared.glob("ran-*")}
    assert ran == {}, f"a module planted in the working directory ran: {ran}\n{done.stderr[-2000:]}"
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ["computed with forkserver", "computed with spawn"], done.stdout
