import pytest

from hpcgpu.jobspec.resources import GPUJobShape, NodeLimits
from hpcgpu.jobspec.units import parse_memory, parse_walltime


@pytest.mark.parametrize(
    "text, seconds",
    [("01:00:00", 3600), ("1-00:00:00", 86400), (90, 5400), ("90", 5400), ("30:00", 1800),
     ("2-12", 216000), ("1-02:30", 95400), ("48:00:00", 172800)],
)
def test_walltime_forms(text, seconds):
    assert parse_walltime(text) == seconds


@pytest.mark.parametrize("text", ["1 hour", "", "1:2:3:4", "00:61:00", "0", -5, "abc", None, True])
def test_bad_walltime_names_the_field(text):
    with pytest.raises(ValueError, match="walltime"):
        parse_walltime(text)


@pytest.mark.parametrize(
    "text, size",
    [("60GB", 60 * 10**9), ("60GiB", 60 * 2**30), ("512MB", 512 * 10**6), ("1.5TB", 15 * 10**11),
     ("1024", 1024), (2048, 2048), ("16 gib", 16 * 2**30)],
)
def test_memory_forms(text, size):
    assert parse_memory(text) == size


@pytest.mark.parametrize("text", ["60XB", "GB", "-1GB", "0", "lots", 1.5, True])
def test_bad_memory_names_the_field(text):
    with pytest.raises(ValueError, match="memory_per_gpu"):
        parse_memory(text)


@pytest.mark.parametrize(
    "options, field",
    [
        ({"nodes": 0}, "nodes"),
        ({"nodes": -1}, "nodes"),
        ({"gpus_per_node": 0}, "gpus_per_node"),
        ({"cpus_per_gpu": "many"}, "cpus_per_gpu"),
        ({"gpus_per_node": 2.5}, "gpus_per_node"),
        ({"walltime": "1 hour"}, "walltime"),
        ({"memory_per_gpu": "60XB"}, "memory_per_gpu"),
        ({"memory_per_node": "0GB"}, "memory_per_node"),
        ({"memory_per_gpu": "1GB", "memory_per_node": "4GB"}, "memory_per_gpu and memory_per_node"),
        ({"queue": "gpu\n#SBATCH --uid=0"}, "queue"),
        ({"account": "acct;id"}, "account"),
        ({"account": " my account"}, "account"),
        ({"job_name": "1job"}, "job_name"),
        ({"exclusive": "yes"}, "exclusive"),
        ({"gpus_per_nodes": 4}, "did you mean 'gpus_per_node'"),
        ({"colour": "red"}, "unknown job shape option 'colour'"),
    ],
)
def test_bad_shapes_name_the_field(options, field):
    with pytest.raises(ValueError) as info:
        GPUJobShape.create(**options)
    assert field in str(info.value)


def test_more_cpus_than_a_node_holds():
    with pytest.raises(ValueError, match=r"cpus_per_gpu=32 .* use cpus_per_gpu<=16"):
        GPUJobShape.create(gpus_per_node=4, cpus_per_gpu=32, limits=NodeLimits(cpus=64))
    with pytest.raises(ValueError, match="gpus_per_node=8 is more than the 4 GPUs"):
        GPUJobShape.create(gpus_per_node=8, limits=NodeLimits(gpus=4))
    with pytest.raises(ValueError, match="memory per node"):
        GPUJobShape.create(gpus_per_node=4, memory_per_gpu="64GB", limits=NodeLimits(memory=128 * 10**9))
    assert GPUJobShape.create(gpus_per_node=4, cpus_per_gpu=16, limits=NodeLimits(cpus=64)).cpus_per_node == 64


def test_shape_totals():
    shape = GPUJobShape.create(nodes=3, gpus_per_node=4, cpus_per_gpu=2, memory_per_node="64GiB")
    assert (shape.total_gpus, shape.cpus_per_node) == (12, 8)
    assert shape.gpu_memory == 16 * 2**30
    assert shape.node_memory == 64 * 2**30


# --- the bare scheduler letters ("60G"): binary as in SLURM, with a warning ----------------
import warnings  # noqa: E402

import dask.utils  # noqa: E402
from hypothesis import given, strategies as st  # noqa: E402

from hpcgpu.jobspec.units import AmbiguousMemoryUnitWarning  # noqa: E402

_numbers = st.one_of(st.integers(1, 10**6).map(str),
                     st.decimals("0.5", "9999", places=2).map(lambda d: f"{d:f}"))
_letters = st.sampled_from("KMGTPkmgtp")


@given(_numbers, _letters)
def test_a_bare_letter_is_binary_as_in_slurm_and_warns(number, letter):
    with pytest.warns(AmbiguousMemoryUnitWarning, match=rf"{number}{letter.upper()}iB"):
        bare = parse_memory(f"{number}{letter}")
    assert bare == parse_memory(f"{number}{letter}iB")


@given(_numbers, _letters, st.booleans())
def test_gb_and_gib_mean_what_dask_means_and_do_not_warn(number, letter, binary):
    text = f"{number}{letter.upper()}{'iB' if binary else 'B'}"
    if letter.upper() == "K" and not binary:
        text = f"{number}kB"  # dask spells the decimal kilobyte kB only
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse_memory(text) == dask.utils.parse_bytes(text)


def test_slurm_renders_a_bare_g_back_as_written():
    from hpcgpu.jobspec.resources import GPUJobShape
    from hpcgpu.jobspec.dialects import get_dialect
    with pytest.warns(AmbiguousMemoryUnitWarning, match="memory_per_gpu='60G'"):
        shape = GPUJobShape.create(gpus_per_node=4, memory_per_gpu="60G")
    assert "#SBATCH --mem=240G" in "\n".join(get_dialect("slurm").directives(shape, "logs"))
