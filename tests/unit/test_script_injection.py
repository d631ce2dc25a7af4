"""Shell and directive injection through the fields that reach a job script (issue 26, break 3).

A value with a newline, a space or quotes must be refused, naming the field, before anything
is rendered or submitted: from arguments, config files and ``DASK_HPCGPU__*`` alike.
"""

from __future__ import annotations

import os
import shlex

import dask.config
import pytest
from click.testing import CliRunner

from hpcgpu.cli.jobscript import jobscript
from hpcgpu.cluster.batch.setup import prepare
from hpcgpu.jobspec.dialects import get_dialect
from hpcgpu.jobspec.launchers import get_launcher
from hpcgpu.jobspec.render import JobScript, render, worker_job_script
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.jobspec.worker_command import WorkerCommand
from hpcgpu.system.pymain import SAFE_MAIN

SCHEDULERS = ("slurm", "pbs", "lsf", "sge")
ATTACK = "/tmp/x\ntouch /tmp/pwned #"


def _script(scheduler: str, **options) -> str:
    site = options.pop("site", {})
    dialect = get_dialect(scheduler, **site)
    shape = options.pop("shape", GPUJobShape.create(gpus_per_node=2))
    return render(JobScript(shape, dialect, get_launcher(dialect.default_launcher), "hostname",
                            **options))


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_log_directory_with_a_newline_is_refused_at_render(scheduler):
    with pytest.raises(ValueError, match=r"log_directory=.*newline.*Remove it"):
        _script(scheduler, log_directory=ATTACK)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("value", ["/tmp/my logs", "/tmp/a'b", '/tmp/a"b', "/tmp/$(id)",
                                   "/tmp/a#b"])
def test_log_directory_cannot_leave_its_directive(scheduler, value):
    with pytest.raises(ValueError, match=r"log_directory=.*cannot go into a scheduler directive"):
        _script(scheduler, log_directory=value)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_shebang_with_a_newline_is_refused(scheduler):
    with pytest.raises(ValueError, match=r"shebang=.*newline"):
        _script(scheduler, shebang="#!/bin/bash\ntouch /tmp/pwned")


@pytest.mark.parametrize("field", ["queue", "account", "gpu_type"])
def test_shape_names_with_a_trailing_newline_are_refused(field):
    # "$" of a regular expression matches before a final newline: fullmatch, not match.
    with pytest.raises(ValueError, match=field):
        GPUJobShape.create(**{field: "gpu\n"})


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_shape_built_directly_is_checked_at_render(scheduler):
    shape = GPUJobShape(queue="gpu\ntouch /tmp/pwned")
    with pytest.raises(ValueError, match=r"queue=.*newline"):
        _script(scheduler, shape=shape)


@pytest.mark.parametrize("scheduler, option", [
    ("pbs", "gpu_resource"), ("pbs", "gpu_type_resource"), ("lsf", "gpu_mode"),
    ("sge", "parallel_environment"), ("sge", "gpu_complex"),
    ("sge", "multi_node_parallel_environment")])
@pytest.mark.parametrize("value", ["ngpus\ntouch /tmp/pwned", 'x" -x "', "a b"])
def test_site_options_are_refused_before_rendering(scheduler, option, value):
    with pytest.raises(ValueError, match=option):
        get_dialect(scheduler, **{option: value})


def test_exported_variable_names_are_identifiers():
    with pytest.raises(ValueError, match="not a shell variable name"):
        _script("slurm", environment=(("X=1; touch /tmp/pwned; Y", "1"),))


@pytest.mark.parametrize("field", ["name", "interface", "local_directory", "scheduler_file"])
def test_worker_command_fields_are_single_line(field):
    options = {"scheduler": "tls://h:1", field: "a\ntouch /tmp/pwned"}
    if field == "scheduler_file":
        options.pop("scheduler")
    with pytest.raises(ValueError, match=rf"{field}=.*newline"):
        WorkerCommand(**options)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_cluster_options_are_refused_before_anything_is_made(scheduler, tmp_path):
    bad = f"{tmp_path}/logs\ntouch {tmp_path}/pwned #"
    with pytest.raises(ValueError, match="log_directory"):
        prepare(scheduler, {"log_directory": bad})
    assert os.listdir(tmp_path) == []  # not even the directory was made


@pytest.mark.parametrize("key, value", [
    ("log-directory", "/tmp/x\ntouch /tmp/pwned #"), ("shebang", "#!/bin/sh\nid"),
    ("queue", "debug\nid"), ("local-directory", "/tmp\nid"),
    ("site", {"gpu_resource": "ngpus\nid"})])
def test_values_from_dask_config_are_checked_too(key, value, tmp_path):
    # DASK_HPCGPU__PBS__... and config files land in the same dask config as this.
    with dask.config.set({f"hpcgpu.pbs.{key}": value}):
        with pytest.raises(ValueError, match=key.replace("-", "_")):
            prepare("pbs", {"log_directory": str(tmp_path)} if key != "log-directory" else {})


def test_values_from_the_environment_are_checked(tmp_path, monkeypatch):
    monkeypatch.setenv("DASK_HPCGPU__SLURM__SHEBANG", "'#!/bin/sh\\nid'")
    dask.config.refresh()
    try:
        with pytest.raises(ValueError, match="shebang"):
            prepare("slurm", {"log_directory": str(tmp_path)})
    finally:
        monkeypatch.delenv("DASK_HPCGPU__SLURM__SHEBANG")
        dask.config.refresh()


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_jobscript_cli_refuses_a_log_directory_with_a_newline(scheduler):
    result = CliRunner().invoke(jobscript, [scheduler, "--log-directory", ATTACK])
    assert result.exit_code == 2, result.output
    assert "log_directory" in result.output and "touch" not in result.output.split("Error")[0]


def test_raw_shell_fields_stay_raw():
    text = _script("slurm", job_script_prologue=("source ~/env.sh && module load cuda",),
                   job_extra_directives=("--constraint='a100|h100'",))
    assert "\nsource ~/env.sh && module load cuda\n" in text
    assert "#SBATCH --constraint='a100|h100'" in text


def test_worker_extra_args_and_python_are_passed_through():
    worker = WorkerCommand(scheduler="tls://h:1", extra=("--resources", "A=1"))
    dialect = get_dialect("slurm")
    text = render(worker_job_script(GPUJobShape.create(), dialect, get_launcher("srun"), worker,
                                    python="/opt/py/bin/python3"))
    assert f"/opt/py/bin/python3 -c {shlex.quote(SAFE_MAIN)} hpcgpu.worker tls://h:1" in text
    assert "--resources A=1" in text


def test_refusal_names_the_fix():
    with pytest.raises(ValueError) as info:
        _script("slurm", log_directory="/scratch/my project/logs")
    assert "symbolic link" in str(info.value) and "' '" in str(info.value)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_cpu_workers_options_are_checked_too(scheduler, tmp_path):
    # dask-jobqueue's CPU jobs put these in directives unquoted.
    from hpcgpu.cluster.batch.cpu_setup import prepare_cpu

    cpu = {"cores": 2, "memory": "2GB"}
    with pytest.raises(ValueError, match="log_directory"):
        prepare_cpu(scheduler, {**cpu, "log_directory": ATTACK})
    with pytest.raises(ValueError, match="queue"):
        prepare_cpu(scheduler, {**cpu, "queue": "a b", "log_directory": str(tmp_path)})
    with dask.config.set({f"jobqueue.{scheduler}.shebang": "#!/bin/sh\nid"}):
        with pytest.raises(ValueError, match="shebang"):
            prepare_cpu(scheduler, {**cpu, "log_directory": str(tmp_path)})
    # dask-jobqueue writes these into the worker's command line unquoted.
    for name, value in [("local_directory", "/tmp/$(id)"), ("interface", "ib0;id")]:
        with pytest.raises(ValueError, match=rf"{name}=.*unquoted worker command"):
            prepare_cpu(scheduler, {**cpu, name: value, "log_directory": str(tmp_path)})
    # ... where dask-jobqueue's users write local_directory="$TMPDIR" for the job to expand.
    prepare_cpu(scheduler, {**cpu, "local_directory": "${TMPDIR}/dask-$USER",
                            "log_directory": str(tmp_path)})


def test_pool_options_are_checked_and_name_the_pool(tmp_path):
    from hpcgpu.cluster.batch.pools import prepare_pool

    with pytest.raises(ValueError, match=r"pools\['big'\]: queue="):
        prepare_pool("slurm", "big", {"queue": "q\nid"}, {"log_directory": str(tmp_path)})
    with pytest.raises(ValueError, match=r"pools\['cpu'\]: queue="):
        prepare_pool("slurm", "cpu", {"queue": "q id", "gpus_per_node": 0, "cores_per_node": 2,
                                      "memory_per_node": "2GB"}, {"log_directory": str(tmp_path)})


def test_cluster_name_is_single_line(tmp_path):
    from hpcgpu import SLURMCluster

    with pytest.raises(ValueError, match=r"name=.*newline"):
        SLURMCluster(name="c\ntouch /tmp/pwned", log_directory=str(tmp_path))
    with pytest.raises(ValueError, match=r"name=.*unquoted"):
        SLURMCluster(name="c;id", log_directory=str(tmp_path))
