"""The lab command's life cycle on a real (small) lab: up is idempotent and repairs a dead
emulator, status notices it, down leaves nothing and is safe to repeat, foreign names are refused.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import (REPO_ROOT, TEST_LAB_NAME, TWO_SITE_INVENTORY, missing_lab_requirements,
                      remove_stale_test_lab, two_site_raw)
from lab_traffic import ping

from trainnet_lab import netns
from trainnet_lab.lab import CONTAINER_LABEL, Lab, LabError, podman

pytestmark = pytest.mark.lab


def lab_command(*args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(REPO_ROOT / "lab" / "lab.py"), *args,
            "-i", str(TWO_SITE_INVENTORY), "--name", TEST_LAB_NAME, "--hosts-as", "netns"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def lab_namespaces(lab_name: str = TEST_LAB_NAME) -> list[str]:
    return [f"{lab_name}-rt-near", f"{lab_name}-rt-far", f"{lab_name}-near1", f"{lab_name}-far1"]


def emulator_processes() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="replace")
            except OSError:
                continue
            if "trainnet_lab.emulator" in cmdline and f"/{TEST_LAB_NAME}/" in cmdline:
                found.append(int(entry))
    return found


@pytest.fixture
def clean_slate():
    reason = missing_lab_requirements()
    if reason:
        pytest.skip(reason)
    remove_stale_test_lab()
    yield
    lab_command("down")
    remove_stale_test_lab()


def test_up_is_idempotent_status_notices_a_dead_emulator_and_down_cleans(clean_slate):
    first = lab_command("up")
    assert first.returncode == 0, first.stderr
    assert all(netns.netns_exists(name) for name in lab_namespaces())
    state_before = json.loads((Lab.from_state(TEST_LAB_NAME).state_file).read_text())

    again = lab_command("up")
    assert again.returncode == 0, again.stderr
    state_after = json.loads((Lab.from_state(TEST_LAB_NAME).state_file).read_text())
    assert state_after["created"] == state_before["created"]
    assert state_after["emulator_pid"] == state_before["emulator_pid"]  # not restarted

    healthy = lab_command("status")
    assert healthy.returncode == 0, healthy.stdout + healthy.stderr
    assert "emulator: ok" in healthy.stdout and "near->far" in healthy.stdout

    # A dead emulator: its TUN devices vanish with it, status says so, up brings it back.
    pid = state_after["emulator_pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and pid in emulator_processes():
        time.sleep(0.05)
    dead = lab_command("status")
    assert dead.returncode == 1
    assert "not running" in dead.stdout
    assert netns.ip("link", "show", "wan0", netns=f"{TEST_LAB_NAME}-rt-near",
                    check=False).returncode != 0
    repaired = lab_command("up")
    assert repaired.returncode == 0, repaired.stderr
    assert lab_command("status").returncode == 0

    down = lab_command("down")
    assert down.returncode == 0, down.stdout + down.stderr
    assert not any(netns.netns_exists(name) for name in lab_namespaces())
    assert emulator_processes() == []
    with pytest.raises(LabError):
        Lab.from_state(TEST_LAB_NAME)

    repeated = lab_command("down")
    assert repeated.returncode == 0, repeated.stdout + repeated.stderr


def test_up_refuses_a_namespace_it_did_not_create(clean_slate):
    foreign = f"{TEST_LAB_NAME}-far1"
    netns.ip("netns", "add", foreign)
    try:
        refused = lab_command("up")
        assert refused.returncode == 2
        assert foreign in refused.stderr and "did not create" in refused.stderr
        # Nothing was created before the refusal.
        assert not any(netns.netns_exists(n) for n in lab_namespaces() if n != foreign)
        with pytest.raises(LabError):
            Lab.from_state(TEST_LAB_NAME)
    finally:
        netns.ip("netns", "del", foreign, check=False)


def test_changed_link_settings_restart_only_the_emulator(make_lab):
    lab = make_lab(two_site_raw(delay_ms=20, rate_mbit=50))
    pid = lab.emulator_pid()
    created = lab.state["created"]
    changed = make_lab(two_site_raw(delay_ms=40, rate_mbit=50))
    assert changed.emulator_pid() != pid
    assert changed.state["created"] == created
    assert abs(ping(changed, "near1", "far1", count=10, interval=0.1)["rtt_median_ms"] - 80) <= 2


def test_container_lab_hosts_boot_and_talk_across_the_wan(make_lab):
    reason = missing_lab_requirements(need_containers=True)  # podman and the lab image
    if reason:
        pytest.skip(reason)
    lab = make_lab(two_site_raw(delay_ms=10, rate_mbit=50), host_kind="container")
    container = lab.spec.container("near1")
    inside = podman("exec", container, "sh", "-c",
                    "sysctl -n net.ipv4.tcp_congestion_control; ip -br addr show eth0; "
                    "ping -n -q -c 3 -i 0.2 far1").stdout
    assert inside.splitlines()[0] == "cubic"  # starts from Debian defaults, not the host's bbr
    assert "198.19.1.10/24" in inside
    assert " 0% packet loss" in inside
    lab.up(log=lambda *_: None)  # idempotent with containers too
    labelled = podman("ps", "-a", "--filter", f"label={CONTAINER_LABEL}={TEST_LAB_NAME}",
                      "--format", "{{.Names}}").stdout.split()
    assert sorted(labelled) == sorted(lab.spec.container(h) for h in lab.spec.hosts)
