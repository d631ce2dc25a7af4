"""A process forked after NVML's initialisation initialises it again (CPU: a fake pynvml
that counts its ``nvmlInit`` calls; ``tests/gpu/test_nvml_fork.py`` is the real one)."""

import os
import sys
import types

import pytest

from hpcgpu.worker import gpuinfo


@pytest.fixture
def counting_pynvml(monkeypatch):
    fake = types.ModuleType("pynvml")
    fake.inits = 0

    def init():
        fake.inits += 1

    fake.nvmlInit = init
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpuinfo.nvml_library.cache_clear()
    yield fake
    gpuinfo.nvml_library.cache_clear()


def test_a_forked_child_initialises_nvml_itself(counting_pynvml):
    assert gpuinfo.nvml_library() is counting_pynvml and gpuinfo.nvml_library() is counting_pynvml
    assert counting_pynvml.inits == 1  # once per process
    pid = os.fork()
    if pid == 0:  # the child exits with the number of initialisations it saw
        gpuinfo.nvml_library()
        os._exit(counting_pynvml.inits)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 2
    gpuinfo.nvml_library()
    assert counting_pynvml.inits == 1  # the parent keeps its own
