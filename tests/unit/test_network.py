"""Communication settings: validation, per-role config, job-script environment.

The environment a job script exports must give distributed-ucxx, in the job, the same
configuration as ``dask_config`` gives in-process: checked through a real rendered
script run by bash (no scheduler needed for that part).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import dask
import pytest

from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.launchers import get_launcher
from hpcgpu.network import (
    NetworkSettings,
    UCXFallbackWarning,
    UCXUnavailableError,
    dask_config,
    job_environment,
    resolve,
    scheduler_options,
    ucx_flags,
    ucx_unavailable_reason,
    worker_options,
)
from hpcgpu.jobspec.render import JobScript, render
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.jobspec.worker_command import WorkerCommand


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(protocol="udp"), "protocol='udp'"),
        (dict(protocol="tcp", transports="nvlink"), "protocol='tcp'"),
        (dict(protocol="ucx", transports="nvlink,smoke-signals"), "'smoke-signals'"),
        (dict(protocol="ucx", transports="rdmacm,nvlink"), "add 'infiniband'"),
        (dict(protocol="ucx", fallback="ucx"), "fallback='ucx'"),
        (dict(protocol="tcp", client_protocol="tls"), "client_protocol='tls'"),
        (dict(protocol="ucx", interface="ib0; rm -rf /"), "scheduler_interface="),
        (dict(protocol="ucx", transports="ib", ucx_environment={"TLS": "rc"}), "UCX_TLS"),
    ],
)
def test_bad_settings_name_the_field_and_the_fix(kwargs, field):
    with pytest.raises(ValueError) as err:
        NetworkSettings.create(**kwargs)
    assert field in str(err.value)
    assert "use" in str(err.value) or "add" in str(err.value) or "give" in str(err.value) \
        or "must" in str(err.value) or "leave" in str(err.value) or "e.g." in str(err.value)


def test_transport_aliases_and_order():
    s = NetworkSettings.create("ucxx", transports=["NVLink", "rdma-cm", "ib", "tcp-over-ucx"])
    assert s.transports == ("infiniband", "nvlink", "rdmacm", "tcp")
    assert NetworkSettings.create("ucx", transports="auto").auto


def test_interface_per_role():
    s = NetworkSettings.create("ucx", interface="ib0", scheduler_interface="eth0")
    assert worker_options(s) == {"protocol": "ucx", "interface": "ib0"}
    assert scheduler_options(s) == {"protocol": "ucx", "interface": "eth0"}
    cmd = WorkerCommand(scheduler="ucx://10.0.0.1:8786", **worker_options(s))
    assert cmd.argv("python3")[-4:] == ["--protocol", "ucx", "--interface", "ib0"]


@pytest.mark.parametrize("role, gpu, cuda", [("worker", None, True), ("scheduler", None, False),
                                             ("client", None, False), ("client", True, True)])
def test_only_gpu_roles_ask_for_cuda(role, gpu, cuda):
    flags = ucx_flags(NetworkSettings.create("ucx", transports="nvlink,tcp"), role, gpu)
    assert flags["cuda-copy"] is cuda and flags["nvlink"] is cuda
    assert flags["create-cuda-context"] is cuda and flags["tcp"] is True
    with pytest.raises(ValueError, match="role='nanny'"):
        ucx_flags(NetworkSettings.create("ucx"), "nanny")


def test_non_ucx_protocols_add_nothing():
    for protocol in ("tcp", "tls"):
        s = NetworkSettings.create(protocol, interface="eth0")
        assert dask_config(s) == {} and job_environment(s) == ()
        assert worker_options(s) == {"protocol": protocol, "interface": "eth0"}


def test_fallback_warns_with_the_reason_and_the_fix():
    s = NetworkSettings.create("ucx", transports="ib", net_devices="mlx5_0:1", fallback="tls")
    with pytest.warns(UCXFallbackWarning) as caught:
        used = resolve(s, reason="distributed-ucxx is not importable (No module named 'x')")
    assert (used.protocol, used.transports, used.net_devices) == ("tls", None, None)
    text = str(caught[0].message)
    assert "No module named 'x'" in text and "falling back to 'tls'" in text and "pip install" in text
    with pytest.raises(UCXUnavailableError, match="fallback='tcp'"):
        resolve(NetworkSettings.create("ucx"), reason="no")


def test_resolve_checks_this_environment():
    reason = ucx_unavailable_reason()
    s = NetworkSettings.create("ucx", fallback=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        used = resolve(s)
    assert used.protocol == ("ucx" if reason is None else "tcp")
    assert bool(caught) == (reason is not None)


PROBE = (
    "import json, dask; from distributed_ucxx.config import setup_config; setup_config(); "
    "from distributed_ucxx.ucxx import _prepare_ucx_config; "
    "keys = ['tcp','nvlink','infiniband','rdmacm','cuda-copy','create-cuda-context']; "
    "import os; ucx = {k: v for k, v in os.environ.items() if k.startswith('UCX_')}; "
    "print(json.dumps([{k: dask.config.get('distributed-ucxx.' + k) for k in keys}, "
    "_prepare_ucx_config(), ucx]))"
)


@pytest.mark.skipif(ucx_unavailable_reason() is not None, reason=f"UCX: {ucx_unavailable_reason()}")
@pytest.mark.parametrize("transports", ["auto", "tcp", "infiniband,rdmacm,nvlink"])
def test_job_script_environment_configures_ucx_like_dask_config(tmp_path, transports):
    s = NetworkSettings.create("ucx", transports=transports, net_devices="lo",
                               ucx_environment={"rndv-scheme": "get_zcopy"})
    shape = GPUJobShape.create(gpus_per_node=1, walltime=5)
    command = f"{sys.executable} -c {json.dumps(PROBE)}"
    script = JobScript(shape, get_dialect("slurm"), get_launcher("direct"), command,
                       environment=job_environment(s, "worker"))
    path = tmp_path / "job.sh"
    path.write_text(render(script))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UCX_", "DASK_"))}
    out = subprocess.run(["bash", str(path)], capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    flags, (options, environment), exported = json.loads(out.stdout.strip().splitlines()[-1])
    assert flags == ucx_flags(s, "worker")
    from distributed_ucxx.ucxx import _prepare_ucx_config

    with dask.config.set(dask_config(s, "worker")):
        in_process = _prepare_ucx_config()
    # Same UCX options; the UCX variables reach UCX from the environment in the job and
    # from distributed-ucxx's "environment" config in-process.
    assert options == in_process[0]
    assert {**environment, **exported} == in_process[1]
    assert exported == {"UCX_NET_DEVICES": "lo", "UCX_RNDV_SCHEME": "get_zcopy"}
    if transports == "infiniband,rdmacm,nvlink":
        assert options == {"TLS": "rc,tcp,cuda_copy,cuda_ipc", "SOCKADDR_TLS_PRIORITY": "rdmacm"}
    if transports == "tcp":
        assert options == {"TLS": "tcp,cuda_copy", "SOCKADDR_TLS_PRIORITY": "tcp"}
    if transports == "auto":
        assert options == {}
    assert "export UCX_NET_DEVICES=lo" in path.read_text()


def test_fallback_when_distributed_ucxx_cannot_be_imported():
    """A process where distributed-ucxx is missing: the real check, the real warning."""
    code = (
        "import sys, warnings; sys.modules['distributed_ucxx'] = None\n"
        "from hpcgpu.network import NetworkSettings, resolve, UCXUnavailableError\n"
        "warnings.simplefilter('error')\n"
        "try:\n    resolve(NetworkSettings.create('ucx'))\n"
        "except UCXUnavailableError as e:\n    print('ERROR', e)\n"
        "try:\n    resolve(NetworkSettings.create('ucx', fallback=True))\n"
        "except Warning as w:\n    print('WARNING', type(w).__name__, w)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    error, warning = out.stdout.strip().splitlines()
    assert error.startswith("ERROR protocol='ucx' was requested but distributed-ucxx is not importable")
    assert "pip install 'hpcgpu[ucx]'" in error
    assert warning.startswith("WARNING UCXFallbackWarning protocol='ucx' was requested")
    assert "falling back to 'tcp'" in warning
