"""scripts/dask-cuda-suite switches only the class import of dask-cuda's test file."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "dask-cuda-suite"


def _script():
    loader = importlib.machinery.SourceFileLoader("dask_cuda_suite", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("dask_cuda_suite", loader))
    loader.exec_module(module)
    return module


def test_only_the_class_import_changes():
    source = ("import os\n\nfrom dask_cuda import CUDAWorker, LocalCUDACluster, utils\n"
              "from dask_cuda.utils import get_gpu_uuid\n\ndef test():\n    LocalCUDACluster(n_workers=1)\n")
    out = _script().switched(source)
    assert out == ("import os\n\nfrom dask_cuda import CUDAWorker, utils\n"
                   "from hpcgpu import LocalGPUCluster as LocalCUDACluster\n"
                   "from dask_cuda.utils import get_gpu_uuid\n\ndef test():\n    LocalCUDACluster(n_workers=1)\n")
    alone = _script().switched("from dask_cuda import LocalCUDACluster\n")
    assert alone == "from hpcgpu import LocalGPUCluster as LocalCUDACluster\n"
    with pytest.raises(SystemExit, match="no 'from dask_cuda import ... LocalCUDACluster' line"):
        _script().switched("import dask_cuda\n")


def test_the_installed_test_file_is_switched_where_dask_cuda_is_installed():
    pytest.importorskip("dask_cuda", reason="dask-cuda is in the GPU extras only")
    tests = _script().installed_tests()
    assert tests is not None
    source = (tests / "test_local_cuda_cluster.py").read_text()
    out = _script().switched(source)
    import difflib

    changed = [line for line in difflib.unified_diff(source.splitlines(), out.splitlines(), n=0, lineterm="")
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == ["-from dask_cuda import CUDAWorker, LocalCUDACluster, utils",
                       "+from dask_cuda import CUDAWorker, utils",
                       "+from hpcgpu import LocalGPUCluster as LocalCUDACluster"]


def test_outcomes_from_junit(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text('<testsuites><testsuite><testcase name="a"/><testcase name="b"><failure/></testcase>'
                     '<testcase name="c"><skipped type="pytest.xfail"/></testcase>'
                     '<testcase name="d"><skipped type="pytest.skip"/></testcase>'
                     '<testcase name="e"><error/></testcase></testsuite></testsuites>')
    assert _script().outcomes(junit) == {"a": "passed", "b": "failed", "c": "xfailed", "d": "skipped", "e": "error"}
    report = _script().summary({"original": {"a": "passed", "b": "passed", "c": "xfailed"},
                                "switched": {"a": "passed", "b": "failed", "c": "xfailed"}})
    assert (report["dask_cuda_passed"], report["hpcgpu_passed_of_those"], report["not_passed"]) == (2, 1, {"b": "failed"})
