"""After every bad input the host must be exactly as prepare left it."""

import os

import testinfra

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")


def test_no_file_written(host):
    for path in ("/etc/sysctl.d/90-trainnet-data-plane.conf", "/etc/trainnet/data_plane.env",
                 "/etc/systemd/system/trainnet-data-plane-link.service", "/etc/trainnet"):
        assert not host.file(path).exists, path


def test_interface_untouched(host):
    assert host.file("/sys/class/net/sync0/mtu").content_string.strip() == "1500"


def test_sysctls_at_distribution_defaults(host):
    assert host.file("/proc/sys/net/ipv4/tcp_fastopen").content_string.strip() == "1"
    assert host.file("/proc/sys/net/ipv4/tcp_slow_start_after_idle").content_string.strip() == "1"
    assert host.file("/proc/sys/net/ipv4/tcp_mtu_probing").content_string.strip() == "0"
