"""Every keyword of every class is checked for its type and bounds before anything starts
(#38, breaks 6 and 7): a wrong type names the field and the accepted form, a huge count is
refused at once (``nodes=10**30`` hung the constructor), and nothing is submitted."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster_helpers import recorded_commands
from hpcgpu import LSFCluster, LocalGPUCluster, PBSCluster, SGECluster, SLURMCluster
from hpcgpu.cluster.batch.cluster import GPUCluster
from hpcgpu.cluster.batch.cpu_setup import CPU_ONLY
from hpcgpu.jobspec.gpukeywords import GPU_KEYWORDS
from hpcgpu.jobspec.forms import _is
from hpcgpu.jobspec.keywords import KEYWORDS, KeywordTypeError, form_of
from hpcgpu.runner.api import GPURunner
from hpcgpu.system.config import OPTIONS

BATCH = (SLURMCluster, PBSCluster, LSFCluster, SGECluster)


def _own(function) -> list[str]:
    return [p.name for p in inspect.signature(function).parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]


#: class -> every keyword it takes (its signature, and what its **options take)
CLASS_KEYWORDS = {
    **{cls: [*_own(GPUCluster.__init__), *OPTIONS, *CPU_ONLY] for cls in BATCH},
    LocalGPUCluster: _own(LocalGPUCluster.__init__),
    GPURunner: [*_own(GPURunner.__init__), *GPU_KEYWORDS],
}
CASES = sorted({(cls.__name__, name) for cls, names in CLASS_KEYWORDS.items() for name in names})
CLASSES = {cls.__name__: cls for cls in CLASS_KEYWORDS}
#: values of every kind a user may pass by mistake (ints far past any bound among them)
WRONG = st.one_of(
    st.integers(min_value=-10**40, max_value=10**40), st.booleans(),
    st.floats(allow_nan=True), st.text(max_size=8), st.binary(max_size=4),
    st.lists(st.integers(), max_size=2), st.tuples(st.floats()),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.complex_numbers(), st.builds(object), st.just(type), st.sets(st.integers(), max_size=2),
)


def test_every_keyword_of_every_class_has_a_form():
    missing = sorted({name for _, name in CASES if name not in KEYWORDS})
    assert not missing, f"keywords without a form in hpcgpu.jobspec.keywords: {missing}"


def _construct(cls, name: str, value) -> BaseException:
    """The error ``cls(name=value)`` raises, having submitted nothing and started no process
    (and closes a cluster that was built)."""
    children = {p.pid for p in psutil.Process().children(recursive=True)}
    with recorded_commands() as calls:
        try:
            made = cls(**({name: value} if value is not None else {}))
        except (ValueError, TypeError) as error:
            assert not [c for c in calls if c[0] in ("sbatch", "qsub", "bsub")], calls
            started = {p.pid for p in psutil.Process().children(recursive=True)} - children
            assert not started, f"{cls.__name__}({name}={value!r}) started processes {started}"
            return error
    close = getattr(made, "close", None)
    if close is not None:
        close()
    pytest.fail(f"{cls.__name__}({name}={value!r}) was accepted")


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from(CASES), data=st.data())
def test_a_keyword_of_the_wrong_type_is_refused_naming_the_field(case, data):
    cls_name, name = case
    form = form_of(name)
    value = data.draw(WRONG.filter(lambda v: v is not None and not _is(v, form.types)
                                   and not (name == "scheduler" and _jobqueue_n_workers(v))))
    error = _construct(CLASSES[cls_name], name, value)
    assert name in str(error), f"{cls_name}({name}={value!r}): {error!r}"


def _jobqueue_n_workers(value) -> bool:
    """A whole number first is dask-jobqueue's n_workers (``SLURMCluster(2, cores=...)``);
    in bounds it is accepted so (test_jobqueue_api)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 100_000


@pytest.mark.parametrize("value", [-1, 100_001, 10**30])
def test_a_whole_number_first_out_of_bounds_names_scheduler_and_n_workers(value):
    error = _construct(CLASSES["SLURMCluster"], "scheduler", value)
    assert str(error).startswith(f"scheduler={value!r} is read as n_workers"), str(error)


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_every_keyword_of_every_class_refuses_an_object_and_a_string_for_a_flag(case):
    # every (class, keyword) once, besides the property test's sample
    cls_name, name = case
    values = [object()] + (["false"] if form_of(name).types == (bool,) else [])
    for value in values:
        error = _construct(CLASSES[cls_name], name, value)
        assert name in str(error), f"{cls_name}({name}={value!r}): {error!r}"


@pytest.mark.parametrize("name,value", [
    ("python", 10**30), ("protocol", -1), ("net_devices", ["eth0"]),
    ("log_directory", "x" * 100_000), ("death_timeout", "é"), ("scheduler_in_job", "no"),
    ("cpu_affinity", "false"), ("enable_tcp_over_ucx", "no"), ("rmm_managed_memory", "no"),
    ("exclusive", "yes"), ("job_arrays", "false"), ("requeue", 1),
])
@pytest.mark.parametrize("cls", BATCH)
def test_the_reviews_cases_name_the_field(cls, name, value):
    error = _construct(cls, name, value)
    assert str(error).startswith(f"{name}=") or f" {name}=" in str(error), str(error)


@pytest.mark.parametrize("name", ["cpu_affinity", "rmm_managed_memory", "enable_tcp_over_ucx"])
def test_a_string_is_not_true_for_the_local_cluster_and_the_runner(name):
    for cls in (LocalGPUCluster, GPURunner):
        error = _construct(cls, name, "false")
        assert isinstance(error, KeywordTypeError) and "True or False" in str(error)


_HUGE = textwrap.dedent("""
    import json, sys, warnings
    warnings.simplefilter("ignore")
    from hpcgpu import LSFCluster, PBSCluster, SGECluster, SLURMCluster
    out = []
    for cls in (PBSCluster, LSFCluster, SLURMCluster, SGECluster):
        for field, value in [("nodes", 10**30), ("nodes", 10**6), ("gpus_per_node", 10**9),
                             ("cpus_per_gpu", 10**12), ("n_workers", 10**30),
                             ("max_array_size", 10**30), ("array_throttle", 10**30),
                             ("max_failed_jobs", 10**30)]:
            try:
                cls(**{"gpus_per_node": 1, "walltime": "00:05:00", field: value}).close()
                out.append([cls.__name__, field, None])
            except ValueError as error:
                out.append([cls.__name__, field, str(error)])
    print(json.dumps(out))
""")


def test_huge_counts_are_refused_at_construction_naming_the_field():
    # a child process: before the fix nodes=10**30 built worker names forever
    done = subprocess.run([sys.executable, "-c", _HUGE], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    for cls, field, message in json.loads(done.stdout.splitlines()[-1]):
        assert message is not None, f"{cls}({field}=huge) was accepted"
        assert message.startswith(f"{field}=") and "most hpcgpu accepts" in message, message


def test_a_job_of_more_workers_than_a_scheduler_takes_is_refused():
    from hpcgpu.jobspec.resources import GPUJobShape

    with pytest.raises(ValueError, match=r"nodes=100000 x gpus_per_node=8"):
        GPUJobShape.create(nodes=100_000, gpus_per_node=8)


@pytest.mark.parametrize("asked", [dict(n=10**30), dict(gpus=10**30), dict(jobs=10**30)])
def test_scale_to_a_huge_count_is_refused_at_once(asked):
    from types import SimpleNamespace

    from hpcgpu.cluster.batch.scaling import jobs_to_scale
    from hpcgpu.jobspec.resources import GPUJobShape

    shape = GPUJobShape.create(gpus_per_node=4)
    pool = SimpleNamespace(name="default", cpu=False, shape=shape, workers_per_job=4)
    with pytest.raises(ValueError, match="most hpcgpu accepts"):
        jobs_to_scale(pool, **asked)


@pytest.mark.parametrize("value", ["0.0.0.0:1 ; id", "host", ":99999999", "a b:1"])
def test_worker_http_address_is_an_address_only(value, tmp_path):
    error = _construct(SLURMCluster, "worker_http_address", value)
    assert "worker_http_address=" in str(error)


@pytest.mark.parametrize("name,value", [
    ("walltime", float("nan")), ("walltime", float("inf")), ("walltime", 10**30),
    ("walltime", "99999999-00"), ("poll_interval", ""), ("death_timeout", -1),
    ("replace_ahead", 10**30), ("signal_before_walltime", 10**30), ("silence_logs", "é"),
    ("config_name", "é"), ("device_memory_limit", float("nan")), ("rmm_pool_size", 10**30),
    ("memory_per_gpu", 10**30), ("memory_per_node", "9" * 400), ("protocol", "é"),
    ("client_protocol", "a b"),
])
def test_values_of_the_right_type_but_no_form_name_the_field(name, value):
    # found by feeding every keyword odd values of every type: IndexError, OverflowError,
    # AttributeError and KeyError without the field's name before
    error = _construct(SLURMCluster, name, value)
    assert f"{name}=" in str(error), str(error)


@pytest.mark.parametrize("key,value,name", [
    ("hpcgpu.slurm.scheduler-in-job", "no", "scheduler_in_job"),
    ("hpcgpu.defaults.cpu-affinity", "false", "cpu_affinity"),
    ("hpcgpu.slurm.nodes", 10**30, "nodes"),
])
def test_configuration_values_are_checked_as_arguments(key, value, name):
    import dask

    with dask.config.set({key: value}):
        error = _construct(SLURMCluster, "queue", None)
    assert f"{name}=" in str(error), str(error)


@pytest.mark.parametrize("name,value", [("memory_limit", float("nan")), ("memory_limit", -1),
                                        ("memory_limit", "é"), ("protocol", "é"), ("host", "a b"),
                                        ("dashboard_address", "é")])
def test_the_local_clusters_values_name_the_field(name, value):
    error = _construct(LocalGPUCluster, name, value)
    assert f"{name}=" in str(error), str(error)


#: every count of the batch classes (their base class holds the conversion: SLURMCluster's
#: stand for all four) and of LocalGPUCluster
_DIGITS = [name for cls_name, name in CASES if cls_name == "SLURMCluster"
           and form_of(name).low is not None and str in form_of(name).types]


@pytest.mark.parametrize("name", _DIGITS)
def test_a_count_given_as_digits_is_taken_as_that_number(name):
    """The table takes the command line's digits for a count ("2"); the constructors then
    compared them with numbers (LocalGPUCluster(threads_per_worker="2"): "TypeError: '<' not
    supported between instances of 'str' and 'int'") or refused them as no whole number
    (array_throttle='1' must be a whole number of at least 1; n_workers='1' as ``n``)."""
    form = form_of(name)
    value = "0" if name == "n_workers" else f" {max(form.low, 1)}"  # n_workers=0: nothing submitted
    options = {"walltime": "00:05:00", **({} if name == "gpus_per_node" else {"gpus_per_node": 1})}
    try:
        with recorded_commands() as calls:
            SLURMCluster(**options, **{name: value}).close()
        assert not [c for c in calls if c[0] == "sbatch"], calls
    except ValueError as error:  # refused for another reason (a CPU-worker option), by name
        assert f"{name}=" in str(error) and "whole number" not in str(error), str(error)


def test_the_local_clusters_counts_as_digits():
    with LocalGPUCluster(n_workers="0", threads_per_worker=" 2", dashboard_address=None) as cluster:
        assert cluster._worker_options["nthreads"] == 2 and cluster.workers == {}
