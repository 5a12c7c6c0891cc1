"""Each bad input is refused with a message naming the variable and the allowed values, and the
host stays exactly as prepare left it."""

import json
import os
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
]


def assert_untouched(host):
    for path in ("/etc/sysctl.d/90-trainnet-data-plane.conf", "/etc/trainnet",
                 "/etc/systemd/system/trainnet-data-plane-link.service"):
        assert not host.file(path).exists, path
    assert host.file("/sys/class/net/sync0/mtu").content_string.strip() == "1500"
    # Debian 12 defaults, untouched.
    assert host.file("/proc/sys/net/ipv4/tcp_fastopen").content_string.strip() == "1"
    assert host.file("/proc/sys/net/ipv4/tcp_slow_start_after_idle").content_string.strip() == "1"
    assert host.file("/proc/sys/net/ipv4/tcp_mtu_probing").content_string.strip() == "0"


@pytest.mark.parametrize("case, extra_vars, expected", BAD_INPUTS, ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_rejected_before_any_change(host, case, extra_vars, expected):
    run = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
         os.environ["TRAINNET_BAD_INPUT_PLAYBOOK"], "-e", json.dumps(extra_vars)],
        capture_output=True, text=True, timeout=300, check=False)
    output = run.stdout + run.stderr
    assert run.returncode != 0, "%s was accepted:\n%s" % (case, output[-3000:])
    for fragment in expected:
        assert fragment in output, "%s: %r missing from:\n%s" % (case, fragment, output[-3000:])
    assert_untouched(host)


def test_prepared_host_starts_untouched(host):
    """Guards the test itself: the baseline it compares with is the prepared host."""
    assert_untouched(host)
