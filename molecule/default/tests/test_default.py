"""Verify the data_plane role on a Debian 12 host in a non-init network namespace."""

import json
import os
import re
import subprocess

import pytest
import testinfra
import testinfra.utils.ansible_runner

DROPIN = "/etc/sysctl.d/90-trainnet-data-plane.conf"
ENV_FILE = "/etc/trainnet/data_plane.env"
ALLOWED_CC = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"
# 1 Gbit/s x 200 ms = 25 MB of window; the kernel needs about twice that in buffer.
MIN_BUFFER_FOR_LARGEST_LINK = 50_000_000

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
# Instances are podman containers named like their inventory host, entered with nsenter
# (molecule/conftest.py): far cheaper than `podman exec` or testinfra's ansible backend per read.
testinfra_hosts = ["podman-nsenter://" + name for name in
                   testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")]


def run_module(host, module, args):
    """Run a collection module on the instance the way `ansible -m` does, return its result."""
    name = host.backend.name
    proc = subprocess.run(
        ["ansible", name, "-i", INVENTORY, "-m", module] + (["-a", json.dumps(args)] if args else []),
        env=dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", ANSIBLE_LOAD_CALLBACK_PLUGINS="1"),
        capture_output=True, text=True, timeout=120, check=False)
    report = json.loads(proc.stdout)
    return report["plays"][0]["tasks"][0]["hosts"][name]


def sysctl(host, key):
    return " ".join(host.file("/proc/sys/" + key.replace(".", "/")).content_string.split())


def test_live_tcp_settings(host):
    assert sysctl(host, "net.ipv4.tcp_congestion_control") == "bbr"
    assert sysctl(host, "net.ipv4.tcp_fastopen") == "3"
    assert sysctl(host, "net.ipv4.tcp_fastopen_blackhole_timeout_sec") == "3600"
    assert sysctl(host, "net.ipv4.tcp_mtu_probing") == "1"
    assert sysctl(host, "net.ipv4.tcp_base_mss") == "1024"
    assert sysctl(host, "net.ipv4.tcp_no_metrics_save") == "1"
    assert sysctl(host, "net.ipv4.tcp_slow_start_after_idle") == "0"


def test_buffers_sized_from_largest_bdp(host):
    rmin, rdefault, rmax = (int(v) for v in sysctl(host, "net.ipv4.tcp_rmem").split())
    wmin, wdefault, wmax = (int(v) for v in sysctl(host, "net.ipv4.tcp_wmem").split())
    assert (rmin, rdefault) == (4096, 131072)
    assert (wmin, wdefault) == (4096, 16384)
    assert rmax == wmax
    assert MIN_BUFFER_FOR_LARGEST_LINK <= rmax <= 1 << 30


def test_dropin_owned_whole(host):
    dropin = host.file(DROPIN)
    assert dropin.is_file
    assert dropin.user == "root" and dropin.mode == 0o644
    lines = [line for line in dropin.content_string.splitlines() if line and not line.startswith("#")]
    keys = {line.split("=", 1)[0].strip(): line.split("=", 1)[1].strip() for line in lines}
    assert keys["net.ipv4.tcp_congestion_control"] == "bbr"
    assert keys["net.ipv4.tcp_fastopen"] == "3"
    assert " ".join(keys["net.ipv4.tcp_rmem"].split()) == sysctl(host, "net.ipv4.tcp_rmem")
    # No fq qdisc in this kernel: default_qdisc must be left out, not written and failing at boot.
    assert "net.core.default_qdisc" not in keys


def test_global_keys_skipped_and_reported_not_failed(host):
    """Keys this namespace cannot set are comments with a reason, never live settings."""
    content = host.file(DROPIN).content_string
    writable = {}
    for key in ("net.core.netdev_max_backlog", "net.core.rmem_max", "net.core.wmem_max"):
        path = "/proc/sys/" + key.replace(".", "/")
        probe = host.run("test -w %s && echo $(cat %s) > %s", path, path, path)
        writable[key] = probe.rc == 0
        if writable[key]:
            assert "\n%s = " % key in content
        else:
            assert "# skipped here: %s" % key in content
    # netdev_max_backlog is global: a non-init netns never gets to set it.
    assert not writable["net.core.netdev_max_backlog"]


def test_interface_mtu_and_boot_unit(host):
    assert host.file("/sys/class/net/sync0/mtu").content_string.strip() == "1400"
    unit = host.file("/etc/systemd/system/trainnet-data-plane-link.service")
    assert "ip link set dev sync0 mtu 1400" in unit.content_string
    assert host.service("trainnet-data-plane-link.service").is_enabled
    # The rollback timer was disarmed after the verify ping succeeded.
    timers = host.run("systemctl list-timers --all --no-legend").stdout
    assert "trainnet-mtu-rollback" not in timers


def test_full_size_packet_crosses_new_mtu(host):
    ping = host.run("ping -c 1 -W 2 -M do -s 1372 192.0.2.2")
    assert ping.rc == 0, ping.stderr
    too_big = host.run("ping -c 1 -W 2 -M do -s 1373 192.0.2.2")
    assert too_big.rc != 0


def test_path_route_carries_the_smaller_path_mtu(host):
    route = host.run("ip route show 198.51.100.0/24 proto 250").stdout
    assert "via 192.0.2.2 dev sync0" in route and "mtu 1280 advmss 1240" in route, route
    unit = host.file("/etc/systemd/system/trainnet-data-plane-link.service").content_string
    assert ("ExecStart=/usr/sbin/ip -4 route replace 198.51.100.0/24 via 192.0.2.2 dev sync0 proto 250 "
            "mtu 1280 advmss 1240\n" in unit), unit
    # Packets to that site are sized for its path, those to the peer's own LAN for the interface.
    assert host.run("ping -c 1 -W 2 -M do -s 1252 198.51.100.2").rc == 0
    too_big = host.run("ping -c 1 -W 2 -M do -s 1253 198.51.100.2")
    assert too_big.rc != 0 and "mtu=1280" in too_big.stdout + too_big.stderr
    assert host.run("ping -c 1 -W 2 -M do -s 1372 192.0.2.2").rc == 0


def test_mss_clamp_table_loaded(host):
    ruleset = host.run("nft list table inet trainnet_data_plane")
    assert ruleset.rc == 0
    assert "maxseg size set rt mtu" in ruleset.stdout


def test_env_file_for_launchers(host):
    env = host.file(ENV_FILE)
    assert env.mode == 0o644
    values = dict(line.split("=", 1) for line in env.content_string.splitlines() if line and not line.startswith("#"))
    assert values["GLOO_SOCKET_IFNAME"] == "sync0"
    assert values["NCCL_SOCKET_IFNAME"] == "=sync0"
    assert values["NCCL_IB_DISABLE"] == "1"
    assert int(values["NCCL_SOCKET_NTHREADS"]) * int(values["NCCL_NSOCKS_PERTHREAD"]) <= 64


def lab_namespaces():
    """Network namespaces of an ocean lab (demo or lab tests) that are up on this machine."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30,
                         check=False).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.split() and line.split()[0].startswith("trainnet-lab")]


@pytest.fixture
def restricted_allowed_cc():
    """Recreate the boot-time state of this machine: cubic absent from the allowed list.

    The list is global (init netns), so a lab that is up would see it change under its hosts:
    refuse then (a failure, not a skip). The old list is put back even when the test fails.
    """
    labs = lab_namespaces()
    if labs:
        pytest.fail("refusing to rewrite the global %s while a lab is up (namespaces: %s); "
                    "run `python3 lab/lab.py down` first" % (ALLOWED_CC, ", ".join(labs)))
    with open(ALLOWED_CC) as handle:
        before = handle.read().strip()
    try:
        with open(ALLOWED_CC, "w") as handle:
            handle.write("reno bbr\n")
        yield
    finally:
        with open(ALLOWED_CC, "w") as handle:
            handle.write(before + "\n")
        with open(ALLOWED_CC) as handle:
            assert handle.read().strip() == before, "could not restore " + ALLOWED_CC


def test_cubic_refused_in_non_init_netns(host, restricted_allowed_cc):
    assert host.run("sysctl -w net.ipv4.tcp_congestion_control=cubic").rc != 0
    result = run_module(host, "longhaul.trainnet.sysctl_profile", {
        "path": "/tmp/trainnet-cc-probe.conf",
        "settings": {"net.ipv4.tcp_congestion_control": "cubic"}})
    try:
        assert not result.get("failed"), result
        assert result["skipped_keys"] == ["net.ipv4.tcp_congestion_control"], result
        assert "allowed" in result["keys"]["net.ipv4.tcp_congestion_control"]["reason"]
        assert sysctl(host, "net.ipv4.tcp_congestion_control") == "bbr"
    finally:
        host.run("rm -f /tmp/trainnet-cc-probe.conf")


def test_capability_probe_sees_the_container(host):
    result = run_module(host, "longhaul.trainnet.kernel_capability", {})
    kernel = result["kernel"]
    assert kernel["init_netns"] is False
    assert kernel["container"]["detected"] is True
    assert kernel["interfaces"]["sync0"]["mtu"] == 1400
    assert "bbr" in kernel["congestion_control"]["settable_default"]
    json.dumps(kernel)


def run_playbook(host, playbook, *args):
    project = os.environ["MOLECULE_PROJECT_DIRECTORY"]
    proc = subprocess.run(
        ["ansible-playbook", "-i", INVENTORY, os.path.join(project, "playbooks", playbook),
         "-e", "trainnet_data_plane_hosts=" + host.backend.name] + list(args),
        # molecule exports ANSIBLE_FORCE_COLOR for its own runs; the diff is parsed here.
        env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"),
        capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout)


def rollback_timers(host):
    return [line for line in host.run("systemctl list-timers --all --no-legend").stdout.splitlines()
            if "trainnet-mtu-rollback" in line]


def mtu(host):
    return int(host.file("/sys/class/net/sync0/mtu").content_string.strip())


def test_pending_rollback_is_confirmed_by_a_rerun(host):
    """Ctrl-C after the MTU change: the next run must see the armed timer and confirm it."""
    host.run_expect([0], "ip link set dev sync0 mtu 1500")
    try:
        armed = run_module(host, "longhaul.trainnet.interface_link",
                           {"name": "sync0", "mtu": 1400, "rollback_seconds": 600})
        assert armed["rollback_unit"] and armed["plan"]["rollback"] == "arm", armed
        assert len(rollback_timers(host)) == 1
        # The re-run finds the MTU already at 1400: nothing to change, but a timer to confirm.
        run_playbook(host, "site.yml")
        assert rollback_timers(host) == []
        assert mtu(host) == 1400
    finally:
        for line in rollback_timers(host):
            host.run("systemctl stop %s", [w for w in line.split() if w.endswith(".timer")][0])
        host.run("ip link set dev sync0 mtu 1400")


def test_drift_shown_exactly_then_remediated(host):
    """Runs last: drifts two keys and the MTU, expects --check --diff to show exactly those,
    then repairs with remediate.yml (whose comparison runs the role in task-level check mode)."""
    host.run_expect([0], "sysctl -w net.ipv4.tcp_slow_start_after_idle=1 net.ipv4.tcp_fastopen=1")
    host.run_expect([0], "ip link set dev sync0 mtu 1500")
    host.run_expect([0], "ip route replace 198.51.100.0/24 via 192.0.2.2 dev sync0 proto 250 mtu 1400 initcwnd 20")
    diff = run_playbook(host, "site.yml", "--check", "--diff")
    route_diff = diff.split("--- before: routes of protocol 250 (before)", 1)[1].split("\n\n", 1)[0]
    # initcwnd is a route attribute the role owns: set by hand on its route, it is drift and goes.
    assert "-198.51.100.0/24 via 192.0.2.2 dev sync0 mtu 1400 advmss - initcwnd 20" in route_diff, route_diff
    assert "+198.51.100.0/24 via 192.0.2.2 dev sync0 mtu 1280 advmss 1240" in route_diff, route_diff
    interface_diff = diff.split("--- before: interface sync0 (before)", 1)[1].split("\n\n", 1)[0]
    assert "-mtu: 1500" in interface_diff and "+mtu: 1400" in interface_diff, interface_diff
    live_diff = diff.split("--- before: live values", 1)[1].split("\n\n", 1)[0]
    changed_lines = sorted(line for line in live_diff.splitlines() if line[:1] in "+-" and line[:3] not in ("---", "+++"))
    assert changed_lines == sorted([
        "-net.ipv4.tcp_fastopen = 1", "+net.ipv4.tcp_fastopen = 3",
        "-net.ipv4.tcp_slow_start_after_idle = 1", "+net.ipv4.tcp_slow_start_after_idle = 0"]), live_diff
    # Check mode changed nothing.
    assert sysctl(host, "net.ipv4.tcp_fastopen") == "1"
    assert mtu(host) == 1500 and rollback_timers(host) == []

    report = run_playbook(host, "remediate.yml", "--check")
    assert "net.ipv4.tcp_fastopen" in report and "net.ipv4.tcp_slow_start_after_idle" in report
    assert "mtu sync0: 1500 -> 1400" in report
    assert "route 198.51.100.0/24: via 192.0.2.2 dev sync0 mtu 1400" in report
    assert mtu(host) == 1500
    # Without --check: the comparison play predicts (task-level check mode), the second applies.
    run_playbook(host, "remediate.yml")
    assert sysctl(host, "net.ipv4.tcp_fastopen") == "3"
    assert sysctl(host, "net.ipv4.tcp_slow_start_after_idle") == "0"
    assert mtu(host) == 1400 and rollback_timers(host) == []
    assert "mtu 1280 advmss 1240" in host.run("ip route show 198.51.100.0/24 proto 250").stdout
    assert "no host drifted" in run_playbook(host, "remediate.yml", "--check")
