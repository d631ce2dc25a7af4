"""``hpcgpu doctor``: verdicts from given facts, the real host (no GPU, no InfiniBand),
and the compute-node run as a real SLURM job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest


from hpcgpu.doctor import diagnose
from hpcgpu.doctor.checks import check_gpu_links, check_infiniband, check_interface, evaluate
from hpcgpu.network.probes import collect, probe_infiniband
from hpcgpu.network import NetworkSettings

UCX = NetworkSettings.create("ucx")
IB = NetworkSettings.create("ucx", transports="infiniband,nvlink", worker_interface="ib0")


def _facts(**changes):
    facts = collect()
    facts.update(changes)
    return facts


def _gpus(n):
    return {"gpus": [{"index": i, "name": "NVIDIA H200"} for i in range(n)], "driver": "580"}


def _verdicts(report):
    return {c["name"]: c["verdict"] for c in report["checks"]}


def test_nvlink_all_to_all_is_ok_and_pcie_pairs_warn():
    nvlink = {f"{i}-{j}": "NV18" for i in range(4) for j in range(i + 1, 4)}
    facts = _facts(gpus=_gpus(4), gpu_links={"links": nvlink})
    check = check_gpu_links(facts, UCX)
    assert (check.verdict, check.summary) == ("ok", "NVLink between all 4 GPUs (NV18)")
    assert check_gpu_links(facts, NetworkSettings.create("tcp")).fix == "pass protocol='ucx'"
    facts["gpu_links"] = {"links": {**nvlink, "2-3": "SYS"}}
    assert check_gpu_links(facts, UCX).verdict == "warn"
    assert "GPU2-GPU3: SYS" in check_gpu_links(facts, UCX).summary


def test_infiniband_from_sysfs_and_a_ucx_without_verbs(tmp_path):
    port = tmp_path / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (port / "link_layer").write_text("InfiniBand\n")
    ib = probe_infiniband(str(tmp_path))
    assert ib["devices"] == [{"device": "mlx5_0", "ports": [
        {"port": "1", "state": "4: ACTIVE", "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"}]}]
    wheel_ucx = {"version": "1.21.0", "verbs": False, "ucx_info": "libucx/bin/ucx_info", "unavailable": None}
    check = check_infiniband(_facts(infiniband=ib, ucx=wheel_ucx), IB, "compute")
    assert check.verdict == "fail" and "RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true" in check.fix
    ok = check_infiniband(_facts(infiniband=ib, ucx={**wheel_ucx, "verbs": True}), IB, "compute")
    assert (ok.verdict, ok.summary) == ("ok", "active: mlx5_0:1 (400 Gb/sec (4X NDR), InfiniBand)")
    (port / "state").write_text("1: DOWN\n")
    assert check_infiniband(_facts(infiniband=probe_infiniband(str(tmp_path))), IB, "compute").verdict == "fail"


def test_this_host_has_no_gpu_and_no_infiniband_and_says_so():
    """The CI machine: fine as a login node, not as a GPU compute node."""
    login, compute = diagnose(UCX, "login"), diagnose(UCX, "compute")
    assert _verdicts(login)["GPUs"] == "ok" and "none on this login node" in login["checks"][0]["summary"]
    assert _verdicts(compute)["GPUs"] == "fail" and compute["verdict"] == "fail"
    assert "ask the scheduler for GPUs" in compute["checks"][0]["fix"]
    if not os.path.isdir("/sys/class/infiniband"):
        assert _verdicts(compute)["InfiniBand"] == "warn"
        assert _verdicts(login)["InfiniBand"] == "ok"
    checks = evaluate(_facts(), IB, "compute")
    assert {c.name: c.verdict for c in checks}["InfiniBand"] == "fail"


def test_missing_interface_names_the_ones_that_exist():
    check = check_interface(_facts(), NetworkSettings.create("ucx", worker_interface="ib7"), "compute")
    assert check.verdict == "fail" and "worker_interface='ib7' does not exist here" in check.summary
    assert "lo" in check.fix


def _doctor(*args, prelude=""):
    code = f"{prelude}import sys; from hpcgpu.cli import main; sys.argv = ['hpcgpu', 'doctor', *sys.argv[1:]]; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_cli_json_unreachable_scheduler_fails_with_the_fix():
    out = _doctor("--json", "--role", "login", "--scheduler-address", "tcp://127.0.0.1:1")
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    check = next(c for c in report["checks"] if c["name"] == "Scheduler reachable")
    assert check["verdict"] == "fail" and "Connection refused" in check["summary"]
    assert "scheduler_interface" in check["fix"]


def test_cli_ucx_requested_where_distributed_ucxx_is_missing():
    prelude = "import sys; sys.modules['distributed_ucxx'] = None\n"
    out = _doctor("--json", "--role", "login", "--protocol", "ucx", prelude=prelude)
    report = json.loads(out.stdout)
    assert out.returncode == 1 and _verdicts(report)["UCX"] == "fail"
    assert "pip install 'hpcgpu[ucx]'" in next(c for c in report["checks"] if c["name"] == "UCX")["fix"]
    out = _doctor("--json", "--role", "login", "--protocol", "ucx", "--fallback", "tcp", prelude=prelude)
    assert _verdicts(json.loads(out.stdout))["UCX"] == "warn"
    assert "Configuration" in out.stdout and "protocol=tcp" in out.stdout


def test_cli_table_and_bad_options():
    out = _doctor("--role", "login")
    assert "hpcgpu doctor: this host" in out.stdout and "Configuration" in out.stdout
    bad = _doctor("--protocol", "tcp", "--transports", "nvlink")
    assert bad.returncode == 2 and "transports=('nvlink',)" in bad.stderr


def test_doctor_job_on_a_compute_node(slurm, tmp_path):
    """A real 1-GPU SLURM job: fake GPUs (CUDA_VISIBLE_DEVICES set, no driver) must fail
    the GPU check, and the login node's listener must be reachable from the node."""
    from hpcgpu.doctor.job import run_doctor_job

    settings = NetworkSettings.create("ucx", worker_interface="lo")
    report = run_doctor_job(settings, "slurm", timeout=120, directory=str(tmp_path))
    assert report["role"] == "compute" and report["node"].startswith("node")
    verdicts = _verdicts(report)
    assert verdicts["GPUs"] == "fail" and verdicts["Scheduler reachable"] == "ok"
    assert report["facts"]["gpus"]["cuda_visible_devices"] is not None
    assert verdicts["Interface"] == "ok"
    script = (tmp_path / "doctor.sh").read_text()
    assert "#SBATCH --gpus-per-node=1" in script
    assert "export DASK_DISTRIBUTED_UCXX__CREATE_CUDA_CONTEXT=True" in script


def test_doctor_job_that_never_reports_fails_with_its_own_output(sge, tmp_path):
    """A job that ends without a report is said so as soon as Grid Engine no longer lists
    it, not after the timeout; its output (<name>.o<id> on Grid Engine) is in the error."""
    from hpcgpu.doctor.job import DoctorJobError, run_doctor_job

    started = time.monotonic()
    with pytest.raises(DoctorJobError, match="ended without a report") as error:
        run_doctor_job(NetworkSettings.create("tcp"), "sge", timeout=120, directory=str(tmp_path),
                       python="/nonexistent/bin/python3")
    assert "/nonexistent/bin/python3" in str(error.value)
    assert time.monotonic() - started < 60, "waited for the timeout instead of the job's end"


def test_login_node_without_ucx_is_fine_when_the_client_uses_a_second_listener():
    prelude = "import sys; sys.modules['distributed_ucxx'] = None\n"
    out = _doctor("--json", "--role", "login", "--protocol", "ucx", "--client-protocol", "tls", prelude=prelude)
    report = json.loads(out.stdout)
    assert _verdicts(report)["UCX"] == "ok" and _verdicts(report)["Configuration"] == "ok"
    assert out.returncode == 0, report
