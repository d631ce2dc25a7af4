"""``hpcgpu jobscript`` reads the dask config exactly as the Python API does (issue 26)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from hpcgpu.cluster.batch.setup import prepare


def _jobscript(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    environment.update(XDG_CACHE_HOME=str(tmp_path / "cache"), **env)
    return subprocess.run([sys.executable, "-m", "hpcgpu", "jobscript", *args],
                          capture_output=True, text=True, timeout=120, env=environment,
                          cwd=tmp_path)


def test_config_files_environment_and_jobqueue_reach_the_script(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    (config / "site.yaml").write_text(yaml.safe_dump({
        "hpcgpu": {"slurm": {"queue": "gpu", "gpus-per-node": 2}},
        "jobqueue": {"slurm": {"log-directory": str(tmp_path / "jq-logs"),
                               "job-script-prologue": ["module load cuda"]}},
    }))
    done = _jobscript(tmp_path, "slurm", DASK_CONFIG=str(config),
                      DASK_HPCGPU__SLURM__WALLTIME="00:07:00")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "#SBATCH --partition=gpu" in text and "#SBATCH --ntasks-per-node=2" in text
    assert "#SBATCH --time=00:07:00" in text
    assert f"#SBATCH --output={tmp_path}/jq-logs/%x-%j.out" in text
    assert "\nmodule load cuda\n" in text
    # An argument wins over the config, as for SLURMCluster(queue=...).
    done = _jobscript(tmp_path, "slurm", "--queue", "debug", DASK_CONFIG=str(config))
    assert "#SBATCH --partition=debug" in done.stdout, done.stderr


def test_default_log_directory_is_the_python_apis_not_the_working_directory(tmp_path):
    done = _jobscript(tmp_path, "slurm")
    assert done.returncode == 0, done.stderr
    logs = tmp_path / "cache" / "hpcgpu" / "logs"
    assert f"#SBATCH --output={logs}/%x-%j.out" in done.stdout
    assert "--output=./" not in done.stdout
    assert logs.is_dir()


def test_a_bad_value_from_the_environment_is_refused_with_its_name(tmp_path):
    done = _jobscript(tmp_path, "pbs", DASK_HPCGPU__PBS__LOG_DIRECTORY="/tmp/x\ntouch /tmp/pwned #")
    assert done.returncode == 2 and "log_directory" in done.stderr and not done.stdout


def test_a_refused_value_of_the_users_config_file_says_where_it_came_from(tmp_path):
    """~/.config/dask/hpcgpu.yaml (here DASK_CONFIG): a profile's value and a scheduler
    section's value are refused naming the key they came from; an argument's as before."""
    config = tmp_path / "config"
    config.mkdir()
    (config / "hpcgpu.yaml").write_text(yaml.safe_dump({"hpcgpu": {
        "profiles": {"mysite": {"scheduler": "slurm", "walltime": "forever"}},
        "sge": {"gpus-per-node": 0}}}))
    done = _jobscript(tmp_path, "slurm", "--profile", "mysite", DASK_CONFIG=str(config))
    assert done.returncode == 2 and not done.stdout
    assert "walltime='forever'" in done.stderr
    assert "profile 'mysite' (hpcgpu.profiles.mysite.walltime) of your dask config" in done.stderr
    done = _jobscript(tmp_path, "sge", DASK_CONFIG=str(config))
    assert "from hpcgpu.sge.gpus-per-node of your dask config" in done.stderr, done.stderr
    with pytest.raises(ValueError) as refused:
        prepare("slurm", {"walltime": "forever"})
    assert "comes from" not in str(refused.value)


@pytest.mark.parametrize("scheduler", ["slurm", "pbs", "lsf", "sge"])
def test_directives_are_the_python_apis(scheduler, tmp_path):
    done = _jobscript(tmp_path, scheduler, "--gpus-per-node", "2", "--log-directory",
                      str(tmp_path), "--queue", "q")
    assert done.returncode == 0, done.stderr
    setup = prepare(scheduler, {"gpus_per_node": 2, "log_directory": str(tmp_path), "queue": "q"})
    for line in setup.dialect.directives(setup.shape, setup.log_directory):
        assert line in done.stdout.splitlines()


@pytest.mark.parametrize("key, value, words", [
    ("launcher", "bogus", "launcher='bogus' is not supported"),
    ("log-directory", "/proc/nope/x", "log_directory='/proc/nope/x' cannot be made"),
    ("site", {"gpu_directive": "bogus"}, "gpu_directive='bogus'")])
def test_every_check_of_a_profiles_value_names_the_profile(tmp_path, key, value, words):
    """#43 item 5: the launcher's, the site options' and the log directory's checks ran after
    the config's values were named; a profile's value was refused without its source."""
    import dask.config

    directory = tmp_path / "dask"
    directory.mkdir()
    (directory / "hpcgpu.yaml").write_text(yaml.safe_dump({"hpcgpu": {"profiles": {
        "mysite": {key: value}}}}))
    with dask.config.set(dask.config.collect(paths=[str(directory)], env={})):
        with pytest.raises(ValueError) as refused:
            prepare("slurm", {"profile": "mysite"})
    assert str(refused.value).startswith(words), refused.value
    assert str(refused.value).endswith(
        f"(the value comes from profile 'mysite' (hpcgpu.profiles.mysite.{key}) of your dask "
        "config: ~/.config/dask/*.yaml or DASK_* variables)"), refused.value
    assert str(refused.value).count("comes from") == 1


def test_a_misspelt_key_of_a_profile_is_refused_not_dropped(tmp_path):
    """A key a profile cannot hold (``gpus-per-nodes``) was dropped without a word, and the job
    ran with the default; it is refused naming the profile, the key and the likely one."""
    import dask.config

    directory = tmp_path / "dask"
    directory.mkdir()
    (directory / "hpcgpu.yaml").write_text(yaml.safe_dump({"hpcgpu": {"profiles": {"mysite": {
        "scheduler": "slurm", "gpus-per-nodes": 4, "max-queued-jobs": 2, "queue": "gpu"}}}}))
    with dask.config.set(dask.config.collect(paths=[str(directory)], env={})):
        with pytest.raises(ValueError) as refused:
            prepare("slurm", {"profile": "mysite"})
    assert str(refused.value).startswith(
        "profile 'mysite' (hpcgpu.profiles.mysite of your dask config) has no key "
        "gpus-per-nodes: did you mean gpus-per-node? A profile holds "), refused.value
    assert "max-queued-jobs" in str(refused.value) and "gpus_per_node" not in str(refused.value)


def test_the_packaged_defaults_read_by_libyaml_are_pyyamls():
    """hpcgpu.yaml and dask-jobqueue's jobqueue.yaml are read with libyaml's loader where
    PyYAML has it (a tenth of the pure-Python loader's time, in every process); the values
    must be what PyYAML's own safe loader reads."""
    from pathlib import Path

    import dask_jobqueue

    from hpcgpu.system import config

    assert config._SAFE_LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    assert config._PACKAGED == yaml.safe_load(config._YAML.read_text())
    packaged = yaml.safe_load((Path(dask_jobqueue.__file__).with_name("jobqueue.yaml")).read_text())
    assert config._jobqueue_packaged() == packaged["jobqueue"]
