"""The UCX hint (one line where NVLink/InfiniBand and distributed-ucxx are there and UCX
is not chosen) and the TLS fallback of a UCX protocol that cannot start."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from hpcgpu.network import advice
from hpcgpu.network.advice import FastLinks, active_ports, local_protocol, nvlink_pairs, ucx_hint

DATA = Path(__file__).parents[1] / "data"
NVLINK = FastLinks(None, nvlink=("0-1 NV18",))


@pytest.mark.parametrize("sample, pairs", [
    ("nvidia-smi-topo-m.4xH200.txt", 6),
    ("nvidia-smi-topo-m.2xH200.txt", 1),
    ("nvidia-smi-topo-m.1xH100.txt", 0),
])
def test_nvlink_pairs_of_real_topologies(sample, pairs):
    found = nvlink_pairs((DATA / sample).read_text())
    assert len(found) == pairs
    assert all(p.split()[1].startswith("NV") for p in found)


def test_active_infiniband_ports():
    facts = {"devices": [{"device": "mlx5_0", "ports": [{"port": "1", "state": "4: ACTIVE"}]},
                         {"device": "mlx5_1", "ports": [{"port": "1", "state": "1: DOWN"}]}]}
    assert active_ports(facts) == ("mlx5_0:1",)


@pytest.mark.parametrize("protocol, links, across, said", [
    ("tls", NVLINK, True, "NVLink between GPUs 0-1 NV18"),
    (None, FastLinks(None, infiniband=("mlx5_0:1",)), True, "InfiniBand ports mlx5_0:1 active"),
    ("tls", FastLinks(None, infiniband=("mlx5_0:1",)), False, None),  # one host: IB does not matter
    ("tcp", FastLinks(None), True, None),                           # no fast link
    ("tls", FastLinks("distributed-ucxx is not importable", nvlink=("0-1 NV18",)), True, None),
    ("ucx", NVLINK, True, None), ("ucxx://", NVLINK, True, None), ("ucx+auth", NVLINK, True, None),
])
def test_hint_decision(protocol, links, across, said):
    line = ucx_hint(protocol, links, "--protocol ucx", across_nodes=across)
    if said is None:
        assert line is None
    else:
        assert said in line and "choose it with --protocol ucx" in line and "\n" not in line


def test_this_cpu_host_gets_no_hint():
    assert advice.host_links().nvlink == () and advice.ucx_hint("tls", advice.host_links(), "x") is None


def test_cluster_and_batch_mode_say_it_once(monkeypatch, caplog, capsys):
    from hpcgpu.cluster.batch.network import cluster_network
    from hpcgpu.runner.batch import BatchOptions, network

    monkeypatch.setattr(advice, "host_links", lambda: NVLINK)
    with caplog.at_level(logging.INFO, logger="hpcgpu.network"):
        assert cluster_network({}, security=object()).protocol == "tls"
    assert [r.getMessage().count("UCX would be faster") for r in caplog.records] == [1]
    assert "protocol='ucx'" in caplog.text
    assert network(BatchOptions("a.py")).protocol == "tls"
    err = capsys.readouterr().err
    assert err.count("UCX would be faster") == 1 and "choose it with --protocol ucx" in err
    assert network(BatchOptions("a.py", protocol="ucx")).protocol == "ucx"
    assert "UCX would be faster" not in capsys.readouterr().err


def test_local_cluster_hint_and_fallback_decision(monkeypatch, caplog):
    monkeypatch.setattr(advice, "host_links", lambda: NVLINK)
    with caplog.at_level(logging.INFO, logger="hpcgpu.network"):
        assert local_protocol(None, None) is None
    assert "LocalGPUCluster(protocol='ucx')" in caplog.text
    monkeypatch.setattr("hpcgpu.network.availability.ucx_unavailable_reason", lambda: "no ucxx here")
    assert local_protocol("ucx", object()) == "tls"
    assert local_protocol("ucx", None) is None
    assert "protocol='ucx' cannot start: no ucxx here; using tls instead" in caplog.text


def test_local_gpu_cluster_with_ucx_that_cannot_start_runs_over_tls(monkeypatch, caplog):
    pytest.importorskip("cryptography")
    from distributed import Client
    from distributed.security import Security

    from hpcgpu.cluster.local import LocalGPUCluster

    monkeypatch.setattr("hpcgpu.network.availability.ucx_unavailable_reason", lambda: "no ucxx here")
    with caplog.at_level(logging.WARNING, logger="hpcgpu.network"), \
            LocalGPUCluster(n_workers=1, gpus=[], protocol="ucx", security=Security.temporary(),
                            dashboard_address=None) as cluster, Client(cluster) as client:
        assert cluster.scheduler_address.startswith("tls://")
        assert client.submit(sum, [1, 2]).result() == 3
    assert "protocol='ucx' cannot start: no ucxx here; using tls instead" in caplog.text


def test_cluster_mode_refuses_ucx_auth_before_submitting():
    from hpcgpu.cluster.batch.network import cluster_network

    with pytest.raises(ValueError, match="protocol='ucx\\+auth' is not available in cluster mode yet"):
        cluster_network({"protocol": "ucx+auth"}, security=object())
