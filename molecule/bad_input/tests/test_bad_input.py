"""Each bad input is refused with a message naming the variable and the allowed values, and the
host stays exactly as prepare left it: its net sysctls, links and files compared with a snapshot
taken before the first bad input."""

import json
import os
import re
import subprocess

import pytest
import testinfra
import testinfra.utils.ansible_runner

# Read the instance over `podman exec` (fast); the role itself runs through ansible-playbook.
testinfra_hosts = ["podman://" + name for name in testinfra.utils.ansible_runner.AnsibleRunner(
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
    ("module-require-bogus", "longhaul.trainnet.kernel_capability",
     {"require": ["bogus"]}, ["require", "bogus"]),
]

# Tasks after preflight; none of them may run for a bad input.
LATER_TASKS = re.compile(r"TASK \[longhaul\.trainnet\.data_plane : (BBR|Sysctl|Interface|MSS clamp|Persist|Env file) \|")
# Counters the kernel changes by itself.
VOLATILE = re.compile(r"^net\.netfilter\.nf_conntrack_count\b")


def snapshot(host):
    """Net sysctls, links, and the files the role would write (the acceptance snapshot)."""
    sysctls = host.run("sysctl -a --pattern '^net\\.' 2>/dev/null").stdout
    return {
        "sysctl": "\n".join(line for line in sysctls.splitlines() if not VOLATILE.match(line)),
        "ip link": host.run("ip -o link").stdout,
        "files": host.run("ls -la --time-style=full-iso /etc/sysctl.d /etc/trainnet /etc/modules-load.d 2>&1").stdout,
    }


@pytest.fixture(scope="module")
def before(host):
    return snapshot(host)


def assert_same_as(host, before):
    after = snapshot(host)
    for part, text in before.items():
        assert after[part] == text, part


def assert_untouched(host):
    for path in ("/etc/sysctl.d/90-trainnet-data-plane.conf", "/etc/trainnet",
                 "/etc/systemd/system/trainnet-data-plane-link.service"):
        assert not host.file(path).exists, path
    assert host.file("/sys/class/net/sync0/mtu").content_string.strip() == "1500"
    # Debian 12 defaults, untouched.
    assert host.file("/proc/sys/net/ipv4/tcp_fastopen").content_string.strip() == "1"
    assert host.file("/proc/sys/net/ipv4/tcp_slow_start_after_idle").content_string.strip() == "1"
    assert host.file("/proc/sys/net/ipv4/tcp_mtu_probing").content_string.strip() == "0"


def test_prepared_host_starts_untouched(host, before):
    """Guards the test itself: the baseline it compares with is the prepared host, and the
    snapshot is stable when nothing runs."""
    assert_untouched(host)
    assert_same_as(host, before)
    assert "net.ipv4.tcp_mtu_probing = 0" in before["sysctl"].splitlines()


@pytest.mark.parametrize("case, extra_vars, expected", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_rejected_before_any_change(host, before, case, extra_vars, expected):
    run = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
         os.environ["TRAINNET_BAD_INPUT_PLAYBOOK"], "-e", json.dumps(extra_vars)],
        env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"),
        capture_output=True, text=True, timeout=300, check=False)
    output = run.stdout + run.stderr
    assert run.returncode != 0, "%s was accepted:\n%s" % (case, output[-3000:])
    for fragment in expected:
        assert fragment in output, "%s: %r missing from:\n%s" % (case, fragment, output[-3000:])
    assert not LATER_TASKS.search(output), "%s: a task after preflight ran:\n%s" % (case, output[-3000:])
    assert_untouched(host)
    assert_same_as(host, before)


@pytest.mark.parametrize("case, module, args, expected", AD_HOC, ids=[c[0] for c in AD_HOC])
def test_bad_input_to_the_module_ad_hoc(host, before, case, module, args, expected):
    name = host.backend.name
    path = "/etc/sysctl.d/90-trainnet-bad-input.conf"
    if module.endswith("sysctl_profile"):
        args = dict(args, path=path)
    run = subprocess.run(
        ["ansible", "-i", os.environ["MOLECULE_INVENTORY_FILE"], name, "-m", module, "-a", json.dumps(args)],
        env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"),
        capture_output=True, text=True, timeout=120, check=False)
    output = run.stdout + run.stderr
    assert run.returncode != 0, "%s was accepted:\n%s" % (case, output[-3000:])
    for fragment in expected:
        assert fragment in output, "%s: %r missing from:\n%s" % (case, fragment, output[-3000:])
    assert not host.file(path).exists
    assert_untouched(host)
    assert_same_as(host, before)
