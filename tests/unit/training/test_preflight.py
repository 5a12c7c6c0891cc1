"""Preflight refusals of the training workload: real interfaces, real name resolution, real
subprocesses; none of these needs torch (the checks run before torch is imported)."""

import json
import socket
import subprocess
import sys

import pytest

from .conftest import WORKLOAD, clean_env, load_module

wl = load_module(WORKLOAD, "trainnet_workload_preflight")


def preflight_cli(timeout=30, **env):
    return subprocess.run([sys.executable, WORKLOAD, "--preflight-only"], env=clean_env(**env),
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize("value, words", [
    ("^docker0,lo", "exclusion-list"),
    ("=lo", "exact-match"),
])
def test_gloo_ifname_in_nccl_syntax_is_refused(value, words):
    result = preflight_cli(GLOO_SOCKET_IFNAME=value)
    assert result.returncode == wl.EXIT_PREFLIGHT, result
    assert "GLOO_SOCKET_IFNAME=%r" % value in result.stderr
    assert words in result.stderr


def test_gloo_ifname_missing_interface_is_refused_and_existing_accepted():
    result = preflight_cli(GLOO_SOCKET_IFNAME="lo,trainnet-none0")
    assert result.returncode == wl.EXIT_PREFLIGHT
    assert "trainnet-none0" in result.stderr and "do not exist" in result.stderr
    ok = preflight_cli(GLOO_SOCKET_IFNAME="lo")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["gloo_socket_ifname"] == "lo"


def test_hostname_resolving_to_loopback_without_interface_is_refused():
    # "localhost" is the one name that resolves to loopback on every machine.
    with pytest.raises(wl.PreflightError, match="resolves to loopback"):
        wl.preflight({}, hostname="localhost")
    # The same host with an interface or a local address named is fine.
    assert wl.preflight({"GLOO_SOCKET_IFNAME": "lo"}, hostname="localhost") == {}


def test_local_addr_picks_the_gloo_interface_holding_it():
    assert wl.preflight({}, local_addr="127.0.0.1", hostname="localhost") == {"GLOO_SOCKET_IFNAME": "lo"}
    assert wl.preflight({"PET_LOCAL_ADDR": "127.0.0.1"}, hostname="localhost") == {"GLOO_SOCKET_IFNAME": "lo"}
    # An explicit GLOO_SOCKET_IFNAME is kept.
    assert wl.preflight({"GLOO_SOCKET_IFNAME": "lo"}, local_addr="127.0.0.1") == {}


@pytest.mark.parametrize("addr, words", [("198.18.255.254", "not an address of any interface"), ("tun0", "not an IP address")])
def test_local_addr_not_on_this_host_is_refused(addr, words):
    with pytest.raises(wl.PreflightError, match=words):
        wl.preflight({"GLOO_SOCKET_IFNAME": "lo"}, local_addr=addr)


@pytest.mark.parametrize("nthreads, nsocks, ok", [("8", "8", True), ("8", "9", False), ("16", "5", False), ("", "64", True), ("4", "x", False)])
def test_nccl_sockets_times_threads_limit(nthreads, nsocks, ok):
    result = preflight_cli(GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_NTHREADS=nthreads, NCCL_NSOCKS_PERTHREAD=nsocks)
    if ok:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode == wl.EXIT_PREFLIGHT
        assert "NCCL_" in result.stderr


def test_every_problem_is_named_at_once():
    with pytest.raises(wl.PreflightError) as info:
        wl.preflight({"GLOO_SOCKET_IFNAME": "^lo", "NCCL_SOCKET_NTHREADS": "16", "NCCL_NSOCKS_PERTHREAD": "8",
                      "TRAINNET_PROCESS_GROUP_TIMEOUT_SEC": "soon"})
    text = str(info.value)
    for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = 16 x 8 = 128", "TRAINNET_PROCESS_GROUP_TIMEOUT_SEC"):
        assert name in text


def test_timeout_and_sync_groups_come_from_the_env_file_variables():
    parser = wl.build_parser()
    env = {"TRAINNET_PROCESS_GROUP_TIMEOUT_SEC": "1234", "TRAINNET_SYNC_GROUPS": "4", "TRAINNET_CHECKPOINT_WRITER": "true"}
    settings = wl.resolve_settings(parser.parse_args([]), env)
    assert (settings["pg_timeout_sec"], settings["sync_groups"], settings["checkpoint_writer"]) == (1234, 4, True)
    flags = wl.resolve_settings(parser.parse_args(["--pg-timeout-sec", "99", "--sync-groups", "1"]), env)
    assert (flags["pg_timeout_sec"], flags["sync_groups"]) == (99, 1)
    defaults = wl.resolve_settings(parser.parse_args([]), {})
    assert (defaults["pg_timeout_sec"], defaults["sync_groups"], defaults["checkpoint_writer"]) == (wl.DEFAULT_PG_TIMEOUT_SEC, 8, False)
    with pytest.raises(wl.PreflightError, match="TRAINNET_CHECKPOINT_WRITER"):
        wl.resolve_settings(parser.parse_args([]), {"TRAINNET_CHECKPOINT_WRITER": "US"})


def test_refusal_happens_before_torch_is_imported_or_anything_connects():
    # The full entry point (not --preflight-only), as torchrun would start it, with a bad setting.
    code = ("import sys, importlib.util as u; s = u.spec_from_file_location('w', %r); m = u.module_from_spec(s); "
            "s.loader.exec_module(m); rc = m.main([]); print('torch' in sys.modules); sys.exit(rc)" % WORKLOAD)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=False,
                            env=clean_env(GLOO_SOCKET_IFNAME="^lo", RANK=0, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=1))
    assert result.returncode == wl.EXIT_PREFLIGHT
    assert result.stdout.strip() == "False"
    assert "preflight refused" in result.stderr


def test_bus_bandwidth_is_the_ring_formula():
    # 2(n-1)/n x bytes / time: 2 ranks, 1 MB in 1 s = 8 Mbit/s; 4 ranks = 12 Mbit/s; 1 rank moves nothing.
    assert wl.bus_bandwidth_bps(1_000_000, 1.0, 2) == pytest.approx(8e6)
    assert wl.bus_bandwidth_bps(1_000_000, 1.0, 4) == pytest.approx(12e6)
    assert wl.bus_bandwidth_bps(1_000_000, 1.0, 1) == 0.0


def test_hostname_of_this_machine_is_judged_by_real_resolution():
    addrs = wl.hostname_addresses(socket.gethostname())
    loopback_only = bool(addrs) and all(a.startswith(("127.", "::1")) for a in addrs)
    result = preflight_cli()
    assert (result.returncode == wl.EXIT_PREFLIGHT) == (loopback_only or not addrs), result.stderr
