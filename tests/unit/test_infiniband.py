"""The InfiniBand path (hpcgpu.network.ib, the worker's start-up, the doctor) on real outputs.

There is no InfiniBand hardware here: every ``ibstat``, ``ibv_devinfo``, ``ibdev2netdev``,
``ucx_info -d`` and sysfs value below was captured on an IB node by someone else and published
(tests/data/infiniband/, each file's first line names its source; tests/data/README.md lists
them). Where a test combines two sources (a port of one host, the UCX of another) it says so.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from hpcgpu.doctor.ibcheck import check_ib_interface, ib_interface_facts
from hpcgpu.network import NetworkSettings
from hpcgpu.network.ib import (
    IBPort, interface_port, parse_ibdev2netdev, parse_ibstat, parse_ibv_devinfo, plan, port_problem,
    sysfs_port, transports_on, wants_infiniband,
)
from hpcgpu.network.probes import parse_ucx_info
from hpcgpu.worker import ibsetup
from hpcgpu.worker.reach import NetworkCheckError

DATA = Path(__file__).parents[1] / "data"
IB = DATA / "infiniband"


def _read(name: str) -> str:
    """A fixture without its ``# source:`` line."""
    text = (IB / name).read_text()
    assert text.startswith("# source: ")
    return text.split("\n", 1)[1]


def _cori_transports() -> dict[str, list[str]]:
    return parse_ucx_info("", _read("ucx_info-d-cori-gpu.txt"))["transports"]


def _by_name(ports) -> dict[str, IBPort]:
    return {p.name: p for p in ports}


# ------------------------------------------------------------------ parsers --

def test_ibstat_of_a_cori_gpu_node_eight_hcas_and_a_roce_card():
    ports = _by_name(parse_ibstat(_read("ibstat-cori-gpu.txt")))
    assert len(ports) == 9 and all(p.active and p.physical_state == "LinkUp" for p in ports.values())
    assert {n for n, p in ports.items() if p.link_layer == "Ethernet"} == {"mlx4_0:1", "mlx5_3:1"}
    assert ports["mlx5_0:1"] == IBPort("mlx5_0", 1, "ACTIVE", "LinkUp", "InfiniBand", "100")
    assert ports["mlx5_1:1"].rate == "56"


def test_ibstat_of_an_h100_node_with_disabled_ethernet_ports():
    ports = _by_name(parse_ibstat(_read("ibstat-h100-some-down.txt")))
    down = {n: (p.state, p.physical_state, p.link_layer) for n, p in ports.items() if not p.active}
    assert down == {n: ("DOWN", "Disabled", "Ethernet") for n in ("mlx5_2:1", "mlx5_7:1", "mlx5_8:1")}
    infiniband = [p for p in ports.values() if p.link_layer == "InfiniBand"]
    assert len(infiniband) == 8 and all(p.active and p.rate == "400" for p in infiniband)


def test_ibstat_with_a_polling_port():
    ports = _by_name(parse_ibstat(_read("ibstat-h100-roce-polling.txt")))
    assert (ports["mlx5_11:1"].state, ports["mlx5_11:1"].physical_state) == ("DOWN", "Polling")
    assert (ports["mlx5_5:1"].state, ports["mlx5_5:1"].physical_state) == ("DOWN", "Disabled")
    assert sum(p.active for p in ports.values()) == 10


def test_ibv_devinfo_of_two_dual_port_hcas():
    ports = parse_ibv_devinfo(_read("ibv_devinfo-mlx4-dual-port.txt"))
    assert [(p.name, p.state, p.link_layer) for p in ports] == [
        ("mlx4_1:1", "ACTIVE", "InfiniBand"), ("mlx4_1:2", "DOWN", "InfiniBand"),
        ("mlx4_0:1", "ACTIVE", "InfiniBand"), ("mlx4_0:2", "DOWN", "InfiniBand")]
    assert all(p.physical_state is None for p in ports)  # only ibv_devinfo -v prints it


def test_ibdev2netdev_maps_each_interface_to_its_hca_port():
    docs = {link.netdev: link.name for link in parse_ibdev2netdev(_read("ibdev2netdev-ucx-py-docs.txt"))}
    assert docs == {"ib0": "mlx5_0:1", "ib1": "mlx5_1:1", "ib2": "mlx5_2:1", "ib3": "mlx5_3:1"}
    cx4 = parse_ibdev2netdev(_read("ibdev2netdev-cx4.txt"))
    assert [(link.netdev, link.name, link.netdev_up) for link in cx4] == [
        ("ib0", "mlx5_0:1", True), ("ib1", "mlx5_1:1", False)]


def test_ibdev2netdev_v_gives_the_port_state_too():
    links = {link.netdev: link for link in parse_ibdev2netdev(_read("ibdev2netdev-v-cx4-sriov.txt"))}
    assert sorted(links) == ["ib0", "ib1", "ib2", "ib3", "ib4", "ib5"]
    assert (links["ib0"].name, links["ib0"].port_state, links["ib0"].netdev_up) == ("mlx5_0:1", "ACTIVE", True)
    assert (links["ib1"].port_state, links["ib1"].netdev_up) == ("ACTIVE", False)  # port up, netdev down
    assert {links[n].port_state for n in ("ib2", "ib3", "ib4", "ib5")} == {"DOWN"}


def test_ucx_info_of_the_cori_gpu_node_lists_the_transports_of_each_port():
    transports = _cori_transports()
    assert transports_on(transports, "mlx5_0:1") == ("cm", "dc_mlx5", "rc", "rc_mlx5", "ud", "ud_mlx5")
    assert transports_on(transports, "mlx4_0:1") == ("rc", "ud")  # the mlx4 (MT4099) Ethernet port
    assert {"ib1", "ib4", "ib6"} <= set(transports["tcp"])  # IPoIB interfaces: TCP over them
    # ibstat from the same repository (Cori-GPU, the same HCAs): UCX serves every ACTIVE port it lists
    for port in parse_ibstat(_read("ibstat-cori-gpu.txt")):
        assert "rc" in transports_on(transports, port.name), port


# ------------------------------------------------------------------- sysfs --

def _sys_tree(tmp_path: Path, interface: str, device: str | None, dev_port: str = "0") -> Path:
    """/sys/class/infiniband from gpud's capture (real values); /sys/class/net/<interface> is the
    test's own: the kernel's layout (device/infiniband/<hca>, dev_port), pointing at ``device``."""
    root = tmp_path / "sys"
    shutil.copytree(IB / "sys-class-infiniband-h100", root / "class" / "infiniband")
    net = root / "class" / "net" / interface
    net.mkdir(parents=True)
    if device is not None:  # a veth or an Ethernet NIC has no infiniband/ under its device
        (net / "device" / "infiniband" / device).mkdir(parents=True)
        (net / "dev_port").write_text(dev_port + "\n")
    return root


def test_sysfs_of_an_h100_node_agrees_with_its_ibstat():
    """Both captured on one host (gpud commit 377e356 added them together)."""
    for port in parse_ibstat(_read("ibstat-h100-all-active.txt")):
        files = {f: (IB / "sys-class-infiniband-h100" / port.device / "ports/1" / f).read_text()
                 for f in ("state", "phys_state", "link_layer", "rate")}
        from_sysfs = sysfs_port(port.device, 1, files)
        assert (from_sysfs.state, from_sysfs.physical_state, from_sysfs.link_layer) == (
            port.state, port.physical_state, port.link_layer)
        assert from_sysfs.rate.startswith(port.rate + " Gb/sec")


def test_interface_port_reads_the_hca_behind_ib0(tmp_path):
    root = _sys_tree(tmp_path, "ib0", "mlx5_4")
    assert interface_port("ib0", str(root)) == IBPort("mlx5_4", 1, "ACTIVE", "LinkUp", "InfiniBand",
                                                     "400 Gb/sec (4X NDR)")


def test_a_veth_named_ib0_has_no_port(tmp_path):
    """The site's ib0: UCX stays on TCP and nothing is set."""
    root = _sys_tree(tmp_path, "ib0", None)
    assert interface_port("ib0", str(root)) is None
    assert interface_port("nosuch0", str(root)) is None
    assert plan("ib0", "node1", None, {"tcp": ["ib0"]}).net_devices is None


def test_the_second_port_of_a_hca_is_dev_port_1(tmp_path):
    root = _sys_tree(tmp_path, "ib1", "mlx5_0", dev_port="1")
    assert interface_port("ib1", str(root)) is None  # the capture has no port 2: nothing invented


# -------------------------------------------------------------------- plans --

def test_plan_pins_the_port_and_lists_its_transports():
    port = _by_name(parse_ibstat(_read("ibstat-cori-gpu.txt")))["mlx5_0:1"]
    chosen = plan("ib0", "cgpu12", port, _cori_transports())
    assert chosen.net_devices == "mlx5_0:1" and chosen.problem is None
    assert chosen.transports == ("cm", "dc_mlx5", "rc", "rc_mlx5", "ud", "ud_mlx5")
    assert "UCX_NET_DEVICES=mlx5_0:1" in chosen.note and "cgpu12" in chosen.note


def test_plan_with_the_wheels_ucx_leaves_ucx_on_tcp():
    """An ACTIVE port (gpud's H100) with the libucx wheel's UCX (no verbs; captured on a 2 x H200
    machine): pinning UCX_NET_DEVICES to the HCA would leave UCX no device at all."""
    port = _by_name(parse_ibstat(_read("ibstat-h100-all-active.txt")))["mlx5_0:1"]
    wheel = parse_ucx_info("", (DATA / "ucx_info-d.2xH200.txt").read_text())["transports"]
    chosen = plan("ib0", "node1", port, wheel)
    assert chosen.net_devices is None and chosen.problem is None
    assert "no transport on it" in chosen.note and "TCP over ib0" in chosen.note


@pytest.mark.parametrize("fixture, name, cause", [
    ("ibstat-h100-roce-polling.txt", "mlx5_11:1", "no link: check the port's cable"),
    ("ibstat-h100-some-down.txt", "mlx5_2:1", "the port is disabled"),
])
def test_a_down_port_names_host_port_and_fix(fixture, name, cause):
    port = _by_name(parse_ibstat(_read(fixture)))[name]
    what, fix = port_problem("node7", "ib0", port)
    assert what == (f"interface 'ib0' on host node7 is RoCE port {name}, which is DOWN, "
                    f"physical state {port.physical_state}")
    assert fix.startswith(cause) and f"ibstat {port.device} 1" in fix and "--exclude=node7" in fix
    assert plan("ib0", "node7", port, _cori_transports()).problem == (what, fix)


def test_a_down_port_from_ibv_devinfo_and_from_ibdev2netdev():
    port = _by_name(parse_ibv_devinfo(_read("ibv_devinfo-mlx4-dual-port.txt")))["mlx4_1:2"]
    what, fix = port_problem("node3", "ib1", port)
    assert what == "interface 'ib1' on host node3 is InfiniBand port mlx4_1:2, which is DOWN"
    assert fix.startswith("check the port (`ibstat mlx4_1 2` on node3 shows it)")
    link = {lk.netdev: lk for lk in parse_ibdev2netdev(_read("ibdev2netdev-v-cx4-sriov.txt"))}["ib2"]
    assert "mlx5_2:1, which is DOWN" in port_problem("n", "ib2", IBPort(link.device, link.port, link.port_state))[0]


def test_ucx_tls_and_switches_that_keep_ucx_off_the_hca():
    assert wants_infiniband(None, None) and wants_infiniband("rc,cuda_copy", None)
    assert wants_infiniband("^tcp", None) and wants_infiniband("all", None) and wants_infiniband("dc_x,tcp", None)
    assert not wants_infiniband("tcp", None) and not wants_infiniband("tcp,cuda_copy,cuda_ipc", None)
    assert not wants_infiniband(None, False) and not wants_infiniband("rc", False)


# ---------------------------------------------------- hypothesis on tool text --

_REAL_LINES = [line for name in ("ibstat-h100-roce-polling.txt", "ibv_devinfo-mlx4-dual-port.txt",
                                 "ibdev2netdev-v-cx4-sriov.txt") for line in _read(name).splitlines()]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_REAL_LINES), st.text(max_size=80)), max_size=30))
def test_parsers_take_any_text(lines):
    text = "\n".join(lines)
    for parse in (parse_ibstat, parse_ibv_devinfo):
        for port in parse(text):
            assert port.port >= 0 and ":" in port.name
    for link in parse_ibdev2netdev(text):
        assert link.port >= 0 and link.netdev


@given(st.sampled_from([("Active", "ACTIVE", 4), ("Down", "DOWN", 1), ("Initializing", "INIT", 2),
                        ("Armed", "ARMED", 3)]))
def test_the_three_spellings_of_a_port_state_agree(spelling):
    ibstat, word, number = spelling
    from_ibstat = parse_ibstat(f"CA 'x'\n\tPort 1:\n\t\tState: {ibstat}")[0].state
    from_verbs = parse_ibv_devinfo(f"hca_id:\tx\n\t\tport:\t1\n\t\t\tstate:\t\tPORT_{word} ({number})")[0].state
    assert from_ibstat == from_verbs == sysfs_port("x", 1, {"state": f"{number}: {word}"}).state == word


# ------------------------------------------------------- the worker's start --

def test_worker_pins_ucx_net_devices_on_an_ib_host(tmp_path, capsys):
    """ib0 -> mlx5_0 of gpud's H100 tree; UCX transports of the Cori-GPU node (two hosts)."""
    root, env = _sys_tree(tmp_path, "ib0", "mlx5_0"), {}
    chosen = ibsetup.use_infiniband_port("ib0", "ucx", str(root), env, transports=_cori_transports)
    assert env == {"UCX_NET_DEVICES": "mlx5_0:1"} and chosen.transports[0] == "cm"
    assert "UCX_NET_DEVICES=mlx5_0:1" in capsys.readouterr().err


@pytest.mark.parametrize("protocol, env", [
    ("ucx", {"UCX_TLS": "tcp"}),                    # the site test's forced TCP
    ("ucx", {"UCX_NET_DEVICES": "mlx5_1:1"}),        # the user's choice wins
    ("tls", {}),                                     # no UCX at all
])
def test_worker_leaves_ucx_alone_when_told_to(tmp_path, protocol, env):
    before = dict(env)
    root = _sys_tree(tmp_path, "ib0", "mlx5_0")
    chosen = ibsetup.use_infiniband_port("ib0", protocol, str(root), env, transports=_cori_transports)
    assert env == before and chosen.net_devices is None


def test_worker_on_a_veth_ib0_changes_nothing(tmp_path):
    env: dict = {}
    root = _sys_tree(tmp_path, "ib0", None)
    assert ibsetup.use_infiniband_port("ib0", "ucx", str(root), env, transports=pytest.fail) is None
    assert env == {}


def test_worker_stops_on_a_down_port_with_the_fix(monkeypatch, capsys):
    from hpcgpu.worker.__main__ import _check_network

    down = _by_name(parse_ibstat(_read("ibstat-h100-roce-polling.txt")))["mlx5_11:1"]
    monkeypatch.setattr(ibsetup, "interface_port", lambda interface, sys_root: down)
    monkeypatch.setattr(ibsetup.socket, "gethostname", lambda: "node2")
    with pytest.raises(NetworkCheckError, match="host node2 is RoCE port mlx5_11:1, which is DOWN"):
        ibsetup.use_infiniband_port("ib0", "tcp", environ={})
    with pytest.raises(SystemExit) as exit_:
        _check_network(None, {"interface": "ib0", "protocol": "ucx"})
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("NetworkCheckError: interface 'ib0' on host node2") and "cable" in err


# ----------------------------------------------------------------- doctor --

def _facts(port: IBPort | None, transports) -> dict:
    from dataclasses import asdict

    return {"host": "cgpu12", "ib_interface": {"interface": "ib0", "port": asdict(port) if port else None},
            "ucx": {"ucx_info": "/usr/bin/ucx_info" if transports is not None else None,
                    "transports": transports or {}}}


def test_doctor_on_ib_ports_from_real_outputs():
    ucx = NetworkSettings.create("ucx", interface="ib0")
    active = _by_name(parse_ibstat(_read("ibstat-cori-gpu.txt")))["mlx5_0:1"]
    ok = check_ib_interface(_facts(active, _cori_transports()), ucx)
    assert ok.verdict == "ok" and "UCX_NET_DEVICES=mlx5_0:1" in ok.summary
    down = _by_name(parse_ibstat(_read("ibstat-h100-some-down.txt")))["mlx5_7:1"]
    failed = check_ib_interface(_facts(down, _cori_transports()), ucx)
    assert failed.verdict == "fail" and "mlx5_7:1, which is DOWN" in failed.summary and "--exclude" in failed.fix
    wheel = parse_ucx_info("", (DATA / "ucx_info-d.2xH200.txt").read_text())["transports"]
    warned = check_ib_interface(_facts(active, wheel), ucx)
    assert warned.verdict == "warn" and "RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY" in warned.fix
    tcp = check_ib_interface(_facts(active, None), NetworkSettings.create("tcp", interface="ib0"))
    assert tcp.verdict == "ok" and "uses TCP over it" in tcp.summary
    assert check_ib_interface(_facts(None, {}), ucx) is None


def test_doctor_facts_read_the_role_interface(tmp_path):
    root = _sys_tree(tmp_path, "ib0", "mlx5_9")
    settings = NetworkSettings.create("ucx", scheduler_interface="eth0", worker_interface="ib0")
    assert ib_interface_facts(settings, "compute", str(root))["port"]["device"] == "mlx5_9"
    assert ib_interface_facts(settings, "login", str(root)) == {"interface": "eth0", "port": None}
