"""interface_link's MTU rollback timer really fires, in the right network namespace.

On a two-site container lab (systemd as PID 1 in each container): the module changes eth0's MTU
with a 10 s rollback that nobody confirms; the timer must restore the old MTU by itself and
leave every other eth0 (the other lab host's, this machine's) alone. The second test runs the
module inside a named network namespace of a container (`ip netns exec side`), whose eth0 shares
its name with the container's own: the timer must restore the namespace's eth0, not the
container's (systemd runs units in PID 1's namespace unless told otherwise).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

import pytest
from conftest import REPO_ROOT, missing_lab_requirements, two_site_raw

from trainnet_lab.lab import podman
from trainnet_lab.spec import DEFAULT_IMAGE

pytestmark = pytest.mark.lab

ROLLBACK_SECONDS = 10
# The timer fires after ROLLBACK_SECONDS (AccuracySec=1s); give systemd some slack, bounded.
RESTORE_DEADLINE = ROLLBACK_SECONDS + 25


@pytest.fixture
def container_lab(make_lab):
    reason = missing_lab_requirements(need_containers=True)
    if reason:
        pytest.skip(reason)
    if podman("image", "exists", DEFAULT_IMAGE, check=False).returncode != 0:
        pytest.skip(f"image {DEFAULT_IMAGE} not built (lab/image/build-image.sh)")
    if not shutil.which("ansible"):
        pytest.skip("needs ansible on PATH (source scripts/bootstrap.sh)")
    return make_lab(two_site_raw(delay_ms=5, rate_mbit=50), host_kind="container")


def run_module(container: str, args: dict, interpreter: str = "/usr/bin/python3") -> dict:
    """interface_link on a lab container, the way `ansible -m` runs it; returns its result."""
    proc = subprocess.run(
        ["ansible", "all", "-i", container + ",", "-c", "containers.podman.podman",
         "-e", "ansible_python_interpreter='%s'" % interpreter,
         "-m", "longhaul.trainnet.interface_link", "-a", json.dumps(args)],
        env=dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
                 ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg")),
        capture_output=True, text=True, timeout=120, check=False, cwd=str(REPO_ROOT))
    assert proc.stdout.strip().startswith("{"), proc.stdout[-2000:] + proc.stderr[-2000:]
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"][container]
    assert not result.get("failed"), {k: result.get(k) for k in ("msg", "module_stdout", "module_stderr")}
    return result


def sh(container: str, script: str) -> str:
    result = podman("exec", container, "sh", "-c", script, check=False, timeout=60)
    assert result.returncode == 0, f"{script}: {result.stderr}"
    return result.stdout.strip()


def local_eth0_mtu() -> int | None:
    try:
        with open("/sys/class/net/eth0/mtu") as handle:
            return int(handle.read())
    except OSError:
        return None


def wait_for(read, want, deadline: float) -> object:
    """Poll read() once a second until it returns want or the deadline passes; last value."""
    value = read()
    while value != want and time.monotonic() < deadline:
        time.sleep(1)
        value = read()
    return value


def test_unconfirmed_mtu_change_is_rolled_back_by_the_timer(container_lab):
    near, far = container_lab.spec.container("near1"), container_lab.spec.container("far1")

    def near_mtu():
        return int(sh(near, "cat /sys/class/net/eth0/mtu"))

    def far_mtu():
        return int(sh(far, "cat /sys/class/net/eth0/mtu"))
    before = {"near": near_mtu(), "far": far_mtu(), "machine": local_eth0_mtu()}
    wanted = before["near"] - 200

    result = run_module(near, {"name": "eth0", "mtu": wanted, "rollback_seconds": ROLLBACK_SECONDS})
    assert not result.get("failed"), result
    assert (result["mtu_before"], result["mtu_after"]) == (before["near"], wanted)
    unit = result["rollback_unit"]
    netns_inode = int(sh(near, "stat -L -c %i /proc/self/ns/net"))
    assert unit == "trainnet-mtu-rollback-eth0-ns%d" % netns_inode
    assert unit + ".timer" in sh(near, "systemctl list-timers --all --no-legend")
    assert near_mtu() == wanted

    # Nobody confirms: the host puts the old MTU back by itself.
    armed_at = time.monotonic()
    restored = wait_for(near_mtu, before["near"], armed_at + RESTORE_DEADLINE)
    took = time.monotonic() - armed_at
    assert restored == before["near"], f"MTU still {restored} after {took:.0f} s"
    assert took >= ROLLBACK_SECONDS - 2, f"restored after {took:.1f} s, before the timer was due"
    # Only this namespace's eth0 was touched.
    assert far_mtu() == before["far"]
    assert local_eth0_mtu() == before["machine"]
    # A re-run finds nothing pending any more.
    rerun = run_module(near, {"name": "eth0", "mtu": before["near"]})
    assert rerun["rollback_unit"] is None and rerun["changed"] is False, rerun


def test_rollback_runs_in_the_namespace_of_the_interface(container_lab):
    near = container_lab.spec.container("near1")
    # A namespace inside the container whose eth0 has the container's eth0's name; the
    # container's own eth0 gets a distinct MTU so a rollback landing there would show.
    try:
        # (no dummy driver in this kernel: a veth pair inside the namespace)
        sh(near, "ip netns add side && ip -n side link add eth0 type veth peer name eth0-peer && "
                 "ip -n side link set eth0 mtu 1500 up && ip link set dev eth0 mtu 1450")
        # Ansible takes the interpreter as one path: a wrapper runs Python inside the namespace.
        sh(near, "printf '#!/bin/sh\\nexec ip netns exec side /usr/bin/python3 \"$@\"\\n' "
                 "> /usr/local/bin/python3-side && chmod 755 /usr/local/bin/python3-side")
        def side_mtu():
            return int(sh(near, "ip netns exec side cat /sys/class/net/eth0/mtu"))

        def own_mtu():
            return int(sh(near, "cat /sys/class/net/eth0/mtu"))
        result = run_module(near, {"name": "eth0", "mtu": 1280, "rollback_seconds": ROLLBACK_SECONDS},
                            interpreter="/usr/local/bin/python3-side")
        assert not result.get("failed"), result
        side_inode = int(sh(near, "stat -L -c %i /run/netns/side"))
        assert result["rollback_unit"] == "trainnet-mtu-rollback-eth0-ns%d" % side_inode
        assert side_mtu() == 1280 and own_mtu() == 1450
        unit = result["rollback_unit"]
        assert sh(near, "systemctl show -P NetworkNamespacePath %s.service" % unit) == "/run/netns/side"

        armed_at = time.monotonic()
        restored = wait_for(side_mtu, 1500, armed_at + RESTORE_DEADLINE)
        assert restored == 1500, f"side eth0 still at {restored}"
        assert own_mtu() == 1450, "the rollback changed the container's eth0, not the namespace's"
    finally:
        sh(near, "ip netns del side 2>/dev/null; ip link set dev eth0 mtu 1500; true")
