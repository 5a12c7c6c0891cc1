"""roles/control_plane/files/trainnet-wg-setup against fake `ip` and `wg` on PATH: the interface is
configured only once `wg` can reach it (wireguard-go opens its control socket after creating the
TUN device), with the key passed as a file name and never in argv."""

from __future__ import absolute_import, division, print_function

import os
import subprocess

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "control_plane", "files",
                      "trainnet-wg-setup")

# The TUN device exists at once; the control socket after READY_AFTER `wg show` attempts.
FAKE_WG = """#!/bin/sh
state="$STATE/wg-show-count"
n=$(cat "$state" 2>/dev/null || echo 0)
case "$1" in
  show) n=$((n + 1)); echo "$n" > "$state"; [ "$n" -gt "$READY_AFTER" ] || exit 1 ;;
  set) [ "$n" -gt "$READY_AFTER" ] || { echo "Unable to access interface: No such file" >&2; exit 1; }
       echo "$*" >> "$STATE/wg-set" ;;
esac
"""
FAKE_IP = """#!/bin/sh
echo "$*" >> "$STATE/ip"
"""


def run_setup(tmp_path, ready_after):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("wg", FAKE_WG), ("ip", FAKE_IP), ("sleep", "#!/bin/sh\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "wg-test.env").write_text(
        "LISTEN_PORT=51801\nPRIVATE_KEY_FILE=/etc/trainnet/wireguard/private.key\nPEER_PUBLIC_KEY=PUB=\n"
        "KEEPALIVE=5\nENDPOINT=192.0.2.1:51802\nPRESHARED_KEY_FILE=\nLOCAL=169.254.2.1\nREMOTE=169.254.1.2\n"
        "MTU=1320\n")
    env = dict(os.environ, PATH="%s:/usr/bin:/bin" % bin_dir, STATE=str(tmp_path),
               READY_AFTER=str(ready_after), TRAINNET_WG_DIR=str(tmp_path))
    return subprocess.run(["sh", SCRIPT, "wg-test"], env=env, capture_output=True, text=True, timeout=30,
                          check=False)


def test_waits_for_wireguard_go_control_socket(tmp_path):
    # Bug: the script waited for the device only (`ip link show`), so on a loaded host `wg set` ran
    # before wireguard-go's control socket existed and the unit failed (site.yml on the lab).
    proc = run_setup(tmp_path, ready_after=5)
    assert proc.returncode == 0, proc.stderr
    wg_set = (tmp_path / "wg-set").read_text()
    assert "set wg-test listen-port 51801 private-key /etc/trainnet/wireguard/private.key" in wg_set
    assert "endpoint 192.0.2.1:51802" in wg_set and "preshared-key" not in wg_set
    assert "link set dev wg-test mtu 1320 up" in (tmp_path / "ip").read_text()


def test_gives_up_with_a_message_when_wg_never_reaches_the_interface(tmp_path):
    proc = run_setup(tmp_path, ready_after=10000)
    assert proc.returncode == 1
    assert "wg cannot reach it" in proc.stderr
    assert not (tmp_path / "wg-set").exists()
