"""container=: the runtime's prefix, the binds, the checks before anything is submitted,
the site profile key, and the client's version check (no scheduler, no runtime)."""

from __future__ import annotations

import os
import shlex

import dask
import pytest
from hypothesis import given, strategies as st

from hpcgpu import SLURMCluster
from hpcgpu.cluster.versions import VersionWatch
from hpcgpu.jobspec.container import Container, bind_paths, container_option
from hpcgpu.system import commands
from hpcgpu.system.pymain import SAFE_MAIN
from hpcgpu.system.versions import local_versions

#: how the worker line starts its module: as -m, without the job's directory on sys.path
WORKER_MAIN = f"-c {shlex.quote(SAFE_MAIN)}"


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "hpcgpu.sif"
    path.write_text("")
    return str(path)


@pytest.fixture
def no_submit(monkeypatch):
    """A submission fails the test: these checks come before submitting (queries may run)."""
    run = commands.run

    def refuse(argv, *args, **kwargs):
        if os.path.basename(str(argv[0])) in ("sbatch", "qsub", "bsub"):
            raise AssertionError(f"ran {argv} before the options were checked")
        return run(argv, *args, **kwargs)
    monkeypatch.setattr(commands, "run", refuse)


def worker_line(script: str) -> list[str]:
    return shlex.split(next(line for line in script.splitlines() if f"{WORKER_MAIN} hpcgpu.worker" in line))


@pytest.mark.parametrize("runtime, start", [
    ("apptainer", ["apptainer", "exec", "--nv", "--bind"]),
    ("singularity", ["singularity", "exec", "--nv", "--bind"]),
    ("podman-hpc", ["podman-hpc", "run", "--rm", "--gpu", "--net", "host"]),
    ("podman", ["podman", "run", "--rm", "--userns=keep-id", "--device", "nvidia.com/gpu=all", "--net", "host"]),
])
def test_cluster_renders_the_runtime_prefix_with_the_binds_it_needs(runtime, start, image, tmp_path):
    logs = tmp_path / "logs"
    cluster = SLURMCluster(gpus_per_node=2, log_directory=str(logs), dashboard_address="localhost:0", container={
        "image": image, "runtime": runtime, "binds": ["/scratch"]})
    try:
        argv = worker_line(cluster.job_script())
        srun_end = argv.index(runtime)
        assert argv[srun_end:srun_end + len(start)] == start
        # the image's python, not this process's path; then the worker
        python = argv.index("-c") - 1
        assert argv[python - 1] == image and argv[python] == "python3"
        bound = (argv[argv.index("--bind") + 1].split(",") if "--bind" in argv
                 else [argv[i + 1].split(":")[0] for i, a in enumerate(argv) if a == "-v"])
        assert bound[:2] == ["/scratch", str(logs)], bound  # the private directory is inside logs
        tls = argv[argv.index("--tls-cert") + 1]
        assert tls.startswith(str(logs) + "/.hpcgpu-")
    finally:
        cluster.close()


def test_podman_passes_the_job_environment_and_working_directory(image):
    text = Container.create(image, runtime="podman").shell_prefix(("/logs",))
    assert "-e 'SLURM_*' " in text and "-e CUDA_VISIBLE_DEVICES " in text and "-e 'HPCGPU_*' " in text
    assert text.endswith(f'-v /logs:/logs -v "$PWD:$PWD" -w "$PWD" {image}')


@pytest.mark.parametrize("value, message", [
    ({"image": "/no/such/hpcgpu.sif"}, r"container=.*image='/no/such/hpcgpu.sif' does not exist .*give the path"),
    ({"image": "IMAGE", "runtime": "docker"}, r"runtime='docker' is not known: use one of apptainer, singularity"),
    ({"image": "IMAGE", "bind": ["/a"]}, r"unknown key\(s\) bind: use image, runtime, binds"),
    ({"image": "IMAGE", "binds": ["/a,b"]}, r"'/a,b' must be an absolute path without ','"),
    ({"image": "IMAGE", "binds": ["relative"]}, r"'relative' must be an absolute path"),
    ({"image": ""}, r"image='' is empty"),
    ({"image": "/x/$(id).sif"}, r"holds a quote, '\$'"),
    ({"image": "IMAGE", "gpus": "yes"}, r"gpus='yes': give True or False"),
])
def test_bad_container_is_refused_before_anything_is_submitted(value, message, image, no_submit):
    value = {k: v.replace("IMAGE", image) if isinstance(v, str) else v for k, v in value.items()}
    with pytest.raises(ValueError, match=message):
        SLURMCluster(gpus_per_node=1, container=value)


def test_container_with_scheduler_in_job_is_refused(image, no_submit):
    with pytest.raises(ValueError, match="scheduler_in_job=True: the scheduler would start outside the image"):
        SLURMCluster(gpus_per_node=1, container=image, scheduler_in_job=True)


def test_container_with_cpu_workers_is_refused(image, no_submit):
    with pytest.raises(ValueError, match=r"cores=4 is dask-jobqueue's CPU-worker option but container=.* "
                                         r"asks for GPU workers"):
        SLURMCluster(cores=4, memory="4GB", container=image)


def test_uri_images_and_podman_names_are_the_runtimes_to_find():
    assert container_option("docker://ghcr.io/me/hpcgpu:1").image == "docker://ghcr.io/me/hpcgpu:1"
    assert container_option({"image": "hpcgpu:1", "runtime": "podman-hpc"}).image == "hpcgpu:1"


def test_relative_image_is_made_absolute(image, monkeypatch):
    monkeypatch.chdir(os.path.dirname(image))
    assert container_option("hpcgpu.sif").image == image


def test_site_profile_gives_the_image_and_binds_and_names_itself_when_wrong(image, tmp_path, no_submit):
    site = {"scheduler": "slurm", "container": {"image": image, "binds": ["/projects", "/scratch"]}}
    with dask.config.set({"hpcgpu.profiles.containers": site}):
        cluster = SLURMCluster(profile="containers", gpus_per_node=1, log_directory=str(tmp_path / "l"),
                               dashboard_address="localhost:0")
        try:
            argv = worker_line(cluster.job_script())
        finally:
            cluster.close()
        assert argv[argv.index("--bind") + 1].startswith("/projects,/scratch,")
    wrong = {**site, "container": {"image": str(tmp_path / "gone.sif")}}
    with dask.config.set({"hpcgpu.profiles.containers": wrong}):
        with pytest.raises(ValueError, match=r"gone.sif' does not exist.*profile 'containers' "
                                             r"\(hpcgpu.profiles.containers.container\)"):
            SLURMCluster(profile="containers", gpus_per_node=1)


@given(st.lists(st.lists(st.sampled_from(["a", "b", "ab"]), min_size=1, max_size=4)
                .map(lambda parts: "/" + "/".join(parts)), max_size=8))
def test_bind_paths_cover_every_path_once_without_nesting(paths):
    kept = bind_paths(paths)
    def inside(path, parent):
        return path == parent or path.startswith(parent + "/")
    assert all(any(inside(p, k) for k in kept) for p in paths)  # every path reachable
    assert not any(inside(a, b) for a in kept for b in kept if a != b)  # none inside another
    assert set(kept) <= set(paths)


def test_version_watch_names_both_versions_once_per_worker():
    seen = []
    watch = VersionWatch(seen.append)
    mine = local_versions()
    other = {**mine, "distributed": "2020.1.0"}
    watch.watch({"tls://n1:1": {"name": "j-0-0", "hpcgpu": {"versions": other}}})
    watch.watch({"tls://n1:1": {"name": "j-0-0", "hpcgpu": {"versions": other}}})
    watch.watch({"tls://n1:2": {"name": "j-0-1", "hpcgpu": {"gpu_present": False}}})  # no versions
    watch.watch({"tls://n1:3": {"name": "cpu-0"}})  # dask-jobqueue's worker: not hpcgpu's
    assert len(seen) == 2
    assert f"distributed 2020.1.0 (client {mine['distributed']})" in seen[0]
    assert "j-0-1" in seen[1] and "reported no versions" in seen[1]
    assert sorted(watch.problems) == ["j-0-0", "j-0-1"]


def test_hpcgpu_run_refuses_a_missing_image_before_starting_anything(monkeypatch):
    from click.testing import CliRunner

    from hpcgpu.cli.run import run
    from hpcgpu.runner import batch

    monkeypatch.setattr(batch, "run_batch", lambda options: pytest.fail("started"))
    result = CliRunner().invoke(run, ["--container", "/no/such.sif", "--container-runtime",
                                      "singularity", "analysis.py"])
    assert result.exit_code == 2
    assert "image='/no/such.sif' does not exist" in result.output
    assert "singularity build" in result.output


def test_batch_workers_get_the_working_directory_not_a_shell_word(tmp_path, monkeypatch):
    from hpcgpu.jobspec.worker_command import WorkerCommand
    from hpcgpu.launchers import get_launcher
    from hpcgpu.runner.allocation import Allocation
    from hpcgpu.runner.launch import workers_argv

    monkeypatch.chdir(tmp_path)
    worker = WorkerCommand(scheduler="tls://n1:1", tls_cert=str(tmp_path / "job" / "cert.pem"))
    argv = workers_argv(Allocation(None, None, nodes=1, gpus_per_node=2, cpus_per_node=2),
                        get_launcher("direct"), worker, "python3", (),
                        Container.create("hpcgpu:1", runtime="podman"))
    assert argv[:4] == ["podman", "run", "--rm", "--userns=keep-id"]
    assert f"{tmp_path}/job:{tmp_path}/job" in argv
    assert argv[argv.index("-w") + 1] == str(tmp_path) and "$PWD" not in " ".join(argv)


def test_hpcgpu_jobscript_renders_the_profiles_container_and_the_option(image, tmp_path):
    from click.testing import CliRunner

    from hpcgpu.cli.jobscript import jobscript

    site = {"scheduler": "slurm", "container": {"image": image, "binds": ["/projects"]}}
    with dask.config.set({"hpcgpu.profiles.containers": site}):
        result = CliRunner().invoke(jobscript, ["slurm", "--profile", "containers",
                                                "--log-directory", str(tmp_path / "logs")])
    assert result.exit_code == 0, result.output
    assert f"apptainer exec --nv --bind /projects,{tmp_path / 'logs'} {image} python3 {WORKER_MAIN} hpcgpu.worker" in result.output
    result = CliRunner().invoke(jobscript, ["slurm", "--container", image, "--container-runtime", "podman-hpc"])
    assert result.exit_code == 0 and "podman-hpc run --rm --gpu --net host" in result.output
    result = CliRunner().invoke(jobscript, ["slurm", "--container", str(tmp_path / "gone.sif")])
    assert result.exit_code == 2 and "gone.sif' does not exist" in result.output
