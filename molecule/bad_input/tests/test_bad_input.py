"""Each bad input is refused with a message naming the variable and the allowed values, and the
host stays exactly as prepare left it: its net sysctls, links and files compared with a snapshot
taken before the first bad input. The data_plane role and its modules, then the control_plane
role (the instance as home master, two anchors that exist only in the inventory): each bad
topology names the variable and the host."""

import base64
import json
import os
import re
import secrets
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import testinfra
import testinfra.utils.ansible_runner

# Read the instance through nsenter (molecule/conftest.py); the role itself runs through ansible-playbook.
testinfra_hosts = ["podman-nsenter://" + name for name in testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")]

BAD_INPUTS = [
    ("mtu-above-range", {"data_plane_mtu": 9600}, ["data_plane_mtu=9600", "576-9000"]),
    ("mtu-below-range", {"data_plane_mtu": 500}, ["data_plane_mtu=500", "576-9000"]),
    ("zero-bandwidth", {"data_plane_links": [{"name": "zero-bw", "bandwidth_mbps": 0, "rtt_ms": 150}]},
     ["zero-bw", "bandwidth_mbps=0", "greater than 0"]),
    ("negative-rtt", {"data_plane_links": [{"name": "neg-rtt", "bandwidth_mbps": 50, "rtt_ms": -5}]},
     ["neg-rtt", "rtt_ms=-5", "greater than 0"]),
    ("unknown-congestion-control", {"data_plane_congestion_control": "turbo"},
     ["data_plane_congestion_control", "bbr, cubic", "turbo"]),
    ("nccl-sockets-over-64", {"data_plane_nccl_socket_nthreads": 16, "data_plane_nccl_nsocks_perthread": 8},
     ["data_plane_nccl_socket_nthreads=16", "data_plane_nccl_nsocks_perthread=8", "at most 64"]),
    ("missing-interface", {"data_plane_interface": "nosuch0"},
     ["data_plane_interface='nosuch0'", "does not name an interface", "sync0"]),
    ("fastopen-outside-choices", {"data_plane_tcp_fastopen": 7}, ["data_plane_tcp_fastopen", "0, 1, 2, 3"]),
    # The kernel would refuse these: preflight runs sysctl_profile in check mode on the whole
    # profile and stops before the BBR step or any write.
    ("buffer-abc", {"data_plane_sysctl_extra": {"net.core.rmem_max": "abc"}},
     ["net.core.rmem_max: value 'abc' is not valid", "0..2147483647", "from data_plane_sysctl_extra"]),
    ("notsent-lowat-abc", {"data_plane_sysctl_extra": {"net.ipv4.tcp_notsent_lowat": "abc"}},
     ["net.ipv4.tcp_notsent_lowat: value 'abc' is not valid", "0..4294967295", "from data_plane_sysctl_extra"]),
    ("misspelt-sysctl-key", {"data_plane_sysctl_extra": {"net.ipv4.tcp_rmen": "4096 131072 67108864"}},
     ["/proc/sys/net/ipv4/tcp_rmen does not exist", "misspelt", "from data_plane_sysctl_extra"]),
    ("congestion-control-not-in-kernel", {"data_plane_congestion_control": "htcp"},
     ["congestion control htcp is not available in this kernel", "from data_plane_congestion_control"]),
    # A misspelt role variable would be ignored in silence; preflight names the closest known one.
    ("misspelt-role-variable", {"data_plane_mtu_verfy_hosts": ["198.18.9.9"]},
     ["data_plane_mtu_verfy_hosts (did you mean data_plane_mtu_verify_hosts?)"]),
    ("env-name-with-command", {"data_plane_env_extra": {"X=$(touch /tmp/pwned); Y": "1"}},
     ["data_plane_env_extra", "not a valid environment variable name"]),
    ("unknown-congestion-control-extra", {"data_plane_sysctl_extra": {"net.ipv4.tcp_congestion_control": "turbo"}},
     ["congestion control turbo is not available in this kernel", "from data_plane_sysctl_extra"]),
    # Without per-destination routes the interface MTU is every path's: above a known path MTU, refused.
    ("interface-mtu-above-a-path-mtu", {"data_plane_manage_path_routes": False, "data_plane_path_routes": [
        {"name": "to-us-east", "prefix": "198.51.100.0/24", "mtu": 1280}]},
     ["data_plane_mtu=1400 is above the path MTU of", "to-us-east (198.51.100.0/24: 1280)",
      "data_plane_manage_path_routes"]),
    ("path-route-prefix-with-host-bits", {"data_plane_path_routes": [{"prefix": "198.51.100.1/24", "mtu": 1280}]},
     ["prefix '198.51.100.1/24' is not a network prefix"]),
    # A route's cwnd cap reaches connections only through saved TCP metrics: asking for it with
    # metrics saving off (the default) would change nothing, so preflight says what to set.
    # Half the default receive buffer, in whole segments, is the first window: exactly twice the
    # first flight leaves its last segment a round trip behind.
    ("first-flight-above-half-the-receive-buffer", {"data_plane_path_route_first_flight_bytes": 1048576,
                                                    "data_plane_tcp_rmem_default": 2097152},
     ["data_plane_tcp_rmem_default=2097152 is too small for", "raise data_plane_tcp_rmem_default to at least 2099952"]),
    ("cwnd-clamp-without-tcp-metrics", {"data_plane_path_route_cwnd_clamp_bdp": 1.5},
     ["data_plane_path_route_cwnd_clamp_bdp=1.5 needs", "data_plane_tcp_no_metrics_save=0 (it is 1)"]),
]

# The same inputs given to the modules ad hoc (`ansible HOST -m MODULE -a JSON`).
AD_HOC = [
    ("module-buffer-abc", "longhaul.trainnet.sysctl_profile",
     {"settings": {"net.core.rmem_max": "abc"}}, ["net.core.rmem_max: value 'abc' is not valid"]),
    ("module-notsent-lowat-abc", "longhaul.trainnet.sysctl_profile",
     {"settings": {"net.ipv4.tcp_notsent_lowat": "abc"}, "apply_live": False},
     ["net.ipv4.tcp_notsent_lowat: value 'abc' is not valid"]),
    ("module-misspelt-key", "longhaul.trainnet.sysctl_profile",
     {"settings": {"net.ipv4.tcp_rmen": "4096 131072 67108864", "net.ipv4.tcp_mtu_probing": 1}},
     ["net.ipv4.tcp_rmen failed", "does not exist", "nothing was changed"]),
    ("module-unknown-congestion-control", "longhaul.trainnet.sysctl_profile",
     {"settings": {"net.ipv4.tcp_congestion_control": "turbo"}},
     ["congestion control turbo is not available", "nothing was changed"]),
    ("module-path-route-default", "longhaul.trainnet.path_routes",
     {"routes": [{"prefix": "0.0.0.0/0", "mtu": 1280}]}, ["is the default route"]),
    ("module-require-bogus", "longhaul.trainnet.kernel_capability",
     {"require": ["bogus"]}, ["require", "bogus"]),
]

AD_HOC_SYSCTL_FILE = "/etc/sysctl.d/90-trainnet-bad-input.conf"
INSTANCE = "trainnet-molecule-bad-input"
ANCHOR_A, ANCHOR_B = "trainnet-bad-input-anchor-a", "trainnet-bad-input-anchor-b"
SCENARIO = os.environ["MOLECULE_SCENARIO_DIRECTORY"]
# (case, extra vars, host vars laid over topology(), expected fragments)
CONTROL_PLANE_BAD_INPUTS = [
    ("cp-anchor-without-endpoint", {}, {ANCHOR_B: {"control_plane_endpoint": ""}},
     ["control_plane_endpoint is not set for anchor %s" % ANCHOR_B]),
    ("cp-two-hosts-one-tunnel-address", {}, {ANCHOR_B: {"control_plane_tunnel_address": "198.19.254.2"}},
     ["control_plane_tunnel_address=198.19.254.2 is set on two hosts: %s and %s" % (ANCHOR_A, ANCHOR_B)]),
    # The instance's path MTU is 1400: at most 1320 inside WireGuard.
    ("cp-tunnel-mtu-above-path-mtu", {}, {INSTANCE: {"control_plane_tunnel_mtu": 1400}},
     ["control_plane_tunnel_mtu=1400 on host %s must be 0 (derived) or 576-1320" % INSTANCE,
      "control_plane_path_mtu 1400 minus WireGuard overhead 80"]),
    # A role-wide setting, read on the host that runs the check (Ansible names it on the fatal line).
    ("cp-bfd-interval-zero", {"control_plane_bfd_interval_ms": 0}, {},
     ["fatal: [%s]" % INSTANCE, "control_plane_bfd_interval_ms=0 is outside the allowed range 1-10000"]),
    ("cp-preshared-key-not-base64", {}, {INSTANCE: {"control_plane_preshared_key": "not base64!"}},
     ["control_plane_preshared_key on host %s is not valid base64 of 32 bytes" % INSTANCE]),
]

# Tasks after preflight; none of them may run for a bad input.
LATER_TASKS = re.compile(r"TASK \[longhaul\.trainnet\.data_plane : (BBR|Sysctl|Interface|MSS clamp|Persist|Env file) \|"
                         r"|TASK \[longhaul\.trainnet\.control_plane : "
                         r"(Packages|Keys|Tunnels|BIRD|Firewall|Watchdog|Env file|Routes|Verify) \|")
# Counters the kernel changes by itself.
VOLATILE = re.compile(r"^net\.netfilter\.nf_conntrack_count\b")


# The acceptance snapshot: net sysctls, links, and the files the role would write; then what the
# control_plane role would touch (addresses on lo, units, nftables, BIRD, its programs). One command
# for all of it: each command into the container is a process start (podman_nsenter) and a shell.
SNAPSHOT = [
    ("sysctl", "sysctl -a --pattern '^net\\.' 2>/dev/null"),
    ("ip link", "ip -o link"),
    ("files", "ls -la --time-style=full-iso /etc/sysctl.d /etc/trainnet /etc/modules-load.d 2>&1"),
    ("addresses", "ip -o address"),
    ("control plane files", "ls -la --time-style=full-iso /etc/systemd/system /etc/bird /usr/local/libexec/trainnet "
                            "/etc/wireguard 2>&1"),
    ("nft", "nft list ruleset 2>&1"),
]
SECTION = "=== trainnet bad_input snapshot: "


def sections(host, commands):
    """Runs (name, shell command) pairs as one command on the host; returns each one's output by name."""
    out = host.run("; ".join("echo '%s%s'; %s" % (SECTION, name, command) for name, command in commands)).stdout
    parts, name = {}, None
    for line in out.splitlines():
        if line.startswith(SECTION):
            name = line[len(SECTION):]
            parts[name] = []
        elif name is not None:
            parts[name].append(line)
    assert sorted(parts) == sorted(name for name, _command in commands), out[-2000:]
    return parts


def snapshot(host):
    parts = sections(host, SNAPSHOT)
    parts["sysctl"] = [line for line in parts["sysctl"] if not VOLATILE.match(line)]
    return {name: "\n".join(lines) for name, lines in parts.items()}


@pytest.fixture(scope="module")
def before(host):
    # IPv6 duplicate address detection keeps a new link-local address "tentative" for a second or
    # more on a loaded host (a CI run's baseline caught it so); the baseline is the settled host.
    deadline = time.monotonic() + 20
    while "tentative" in host.run("ip -o address").stdout and time.monotonic() < deadline:
        time.sleep(0.2)
    return snapshot(host)


def assert_same_as(host, before):
    after = snapshot(host)
    for part, text in before.items():
        assert after[part] == text, part


UNTOUCHED_ABSENT = ("/etc/sysctl.d/90-trainnet-data-plane.conf", "/etc/trainnet",
                    "/etc/systemd/system/trainnet-data-plane-link.service")
# Debian 12 defaults (and the prepared MTU), untouched.
UNTOUCHED_VALUES = {"/sys/class/net/sync0/mtu": "1500", "/proc/sys/net/ipv4/tcp_fastopen": "1",
                    "/proc/sys/net/ipv4/tcp_slow_start_after_idle": "1", "/proc/sys/net/ipv4/tcp_mtu_probing": "0"}


def assert_untouched(host):
    parts = sections(host, [(path, "test -e %s && echo exists || echo absent" % path) for path in UNTOUCHED_ABSENT]
                     + [(path, "cat %s" % path) for path in UNTOUCHED_VALUES])
    for path in UNTOUCHED_ABSENT:
        assert parts[path] == ["absent"], path
    for path, value in UNTOUCHED_VALUES.items():
        assert "".join(parts[path]).strip() == value, (path, parts[path])


def test_prepared_host_starts_untouched(host, before):
    """Guards the test itself: the baseline it compares with is the prepared host, and the
    snapshot is stable when nothing runs."""
    assert_untouched(host)
    assert_same_as(host, before)
    assert "net.ipv4.tcp_mtu_probing = 0" in before["sysctl"].splitlines()


@pytest.mark.parametrize("case, extra_vars, expected", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_rejected_before_any_change(host, before, refused_runs, case, extra_vars, expected):
    run = refused_runs[case]
    output = run.stdout + run.stderr
    assert run.returncode != 0, "%s was accepted:\n%s" % (case, output[-3000:])
    for fragment in expected:
        assert fragment in output, "%s: %r missing from:\n%s" % (case, fragment, output[-3000:])
    assert not LATER_TASKS.search(output), "%s: a task after preflight ran:\n%s" % (case, output[-3000:])
    assert_untouched(host)
    assert_same_as(host, before)


@pytest.mark.parametrize("case, module, args, expected", AD_HOC, ids=[c[0] for c in AD_HOC])
def test_bad_input_to_the_module_ad_hoc(host, before, refused_runs, case, module, args, expected):
    path = AD_HOC_SYSCTL_FILE
    run = refused_runs[case]
    output = run.stdout + run.stderr
    assert run.returncode != 0, "%s was accepted:\n%s" % (case, output[-3000:])
    for fragment in expected:
        assert fragment in output, "%s: %r missing from:\n%s" % (case, fragment, output[-3000:])
    assert not host.file(path).exists
    assert_untouched(host)
    assert_same_as(host, before)


def topology(host_vars):
    """An inventory added to the scenario's: the instance as home master, two anchors that exist only
    here (TEST-NET-1 endpoints, overlay from the benchmarking range; nothing is sent to them), with
    the case's host vars laid over."""
    hosts = {
        INSTANCE: {"control_plane_tunnel_address": "198.19.254.1", "control_plane_path_mtu": 1400},
        ANCHOR_A: {"control_plane_tunnel_address": "198.19.254.2", "control_plane_endpoint": "192.0.2.2"},
        ANCHOR_B: {"control_plane_tunnel_address": "198.19.254.3", "control_plane_endpoint": "192.0.2.3"},
    }
    for name, values in host_vars.items():
        hosts[name].update(values)
    return {"all": {
        "vars": {"control_plane_tunnel_network": "198.19.254.0/24", "control_plane_rendezvous_address": "198.19.255.1",
                 "control_plane_primary_anchor": ANCHOR_A},
        "children": {"home_master": {"hosts": {INSTANCE: hosts[INSTANCE]}},
                     "control_plane": {"hosts": {ANCHOR_A: hosts[ANCHOR_A], ANCHOR_B: hosts[ANCHOR_B]}}}}}


def control_plane_argv(tmp_path, extra_vars, host_vars, extra_args=()):
    """The control_plane role on the instance (apply_control_plane.yml), with the scenario's inventory
    plus the control-plane topology."""
    inventory = tmp_path / "control_plane.yml"
    inventory.write_text(json.dumps(topology(host_vars)))  # JSON is YAML
    return (["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], "-i", str(inventory),
             os.path.join(SCENARIO, "apply_control_plane.yml"), "-e", json.dumps(extra_vars)] + list(extra_args))


def run_ansible(argv, timeout=300):
    return subprocess.run(argv, env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"),
                          capture_output=True, text=True, timeout=timeout, check=False)


def apply_control_plane(tmp_path, extra_vars, host_vars, extra_args=()):
    return run_ansible(control_plane_argv(tmp_path, extra_vars, host_vars, extra_args))


@pytest.fixture(scope="module")
def refused_runs(host, before, tmp_path_factory):
    """Every bad input of the lists above, run once each, a few at a time: an ansible-playbook run is
    one CPU-bound process (about 4 s here, most of it Ansible starting), and the cases share nothing:
    each must be refused before the host changes, so the host every test then compares with `before`
    is the one all of them left."""
    name = host.backend.name
    argvs = {}
    for case, extra_vars, _expected in BAD_INPUTS:
        argvs[case] = ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
                       os.environ["TRAINNET_BAD_INPUT_PLAYBOOK"], "-e", json.dumps(extra_vars)]
    for case, module, args, _expected in AD_HOC:
        if module.endswith("sysctl_profile"):
            args = dict(args, path=AD_HOC_SYSCTL_FILE)
        argvs[case] = ["ansible", "-i", os.environ["MOLECULE_INVENTORY_FILE"], name, "-m", module, "-a", json.dumps(args)]
    for case, extra_vars, host_vars, _expected in CONTROL_PLANE_BAD_INPUTS:
        argvs[case] = control_plane_argv(tmp_path_factory.mktemp(case), extra_vars, host_vars)
    with ThreadPoolExecutor(max_workers=(os.cpu_count() or 2) + 1) as pool:
        futures = {case: pool.submit(run_ansible, argv) for case, argv in argvs.items()}
        return {case: future.result() for case, future in futures.items()}


def assert_refused_before_any_change(host, before, case, run, expected):
    output = run.stdout + run.stderr
    assert run.returncode != 0, "%s was accepted:\n%s" % (case, output[-3000:])
    # Refused by the topology check, not by something else failing on the way.
    assert "Invalid control-plane input (nothing was changed)" in output, "%s:\n%s" % (case, output[-3000:])
    for fragment in expected:
        assert fragment in output, "%s: %r missing from:\n%s" % (case, fragment, output[-3000:])
    assert not LATER_TASKS.search(output), "%s: a task after preflight ran:\n%s" % (case, output[-3000:])
    assert_untouched(host)
    assert_same_as(host, before)


@pytest.mark.parametrize("case, extra_vars, host_vars, expected", CONTROL_PLANE_BAD_INPUTS,
                         ids=[c[0] for c in CONTROL_PLANE_BAD_INPUTS])
def test_control_plane_bad_input_rejected_before_any_change(host, before, refused_runs, case, extra_vars, host_vars,
                                                            expected):
    assert_refused_before_any_change(host, before, case, refused_runs[case], expected)


def test_control_plane_good_topology_passes_the_check(host, before, tmp_path):
    """Guards the cases above: without a bad input the same inventory passes the topology check
    (the read-only preflight only, in --check)."""
    run = apply_control_plane(tmp_path, {"trainnet_bad_input_tasks_from": "preflight"}, {}, ["--check"])
    output = run.stdout + run.stderr
    assert "Invalid control-plane input" not in output, output[-3000:]
    assert re.search(r"TASK \[longhaul\.trainnet\.control_plane : Preflight \| Check the whole topology[^\n]*\n"
                     r"ok: \[%s\]" % INSTANCE, output), output[-3000:]
    assert_same_as(host, before)


def test_control_plane_vaulted_key_not_32_bytes(host, before, tmp_path):
    """A vaulted pre-shared key that decrypts to valid base64 of 16 bytes: refused, named, never shown."""
    key = base64.b64encode(secrets.token_bytes(16)).decode()
    password = tmp_path / "vault-password"
    password.write_text(secrets.token_hex(16))
    encrypted = subprocess.run(
        ["ansible-vault", "encrypt_string", "--vault-password-file", str(password),
         "--stdin-name", "control_plane_preshared_key"],
        input=key, capture_output=True, text=True, timeout=60, check=False)
    if encrypted.returncode != 0:  # older ansible-vault: the value as an argument
        encrypted = subprocess.run(
            ["ansible-vault", "encrypt_string", "--vault-password-file", str(password), key,
             "--name", "control_plane_preshared_key"], capture_output=True, text=True, timeout=60, check=True)
    assert "!vault" in encrypted.stdout and key not in encrypted.stdout
    vars_file = tmp_path / "vault.yml"
    vars_file.write_text(encrypted.stdout)
    run = apply_control_plane(tmp_path, {}, {}, ["-e", "@" + str(vars_file), "--vault-password-file", str(password)])
    assert_refused_before_any_change(
        host, before, "cp-vaulted-key-16-bytes", run,
        ["control_plane_preshared_key on host %s is not valid base64 of 32 bytes" % INSTANCE,
         "control_plane_preshared_key on host %s is not valid base64 of 32 bytes" % ANCHOR_A])
    assert key not in run.stdout + run.stderr
