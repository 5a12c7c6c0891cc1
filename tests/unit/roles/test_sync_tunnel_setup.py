"""roles/sync_tunnel/files/trainnet-sync-setup against fake `ip` and `wg` on PATH: it waits until
`wg` reaches the interface, hands the private key to `wg syncconf` through a pipe (never in argv),
keeps the current address and removes only addresses of earlier settings."""

from __future__ import absolute_import, division, print_function

import os
import subprocess

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles", "sync_tunnel", "files",
                      "trainnet-sync-setup")
SECRET = "cHJpdmF0ZS1rZXktbmV2ZXItaW4tYXJndi0wMDAwMDA="

# `wg show` succeeds after READY_AFTER calls; `wg syncconf IF /dev/stdin` saves what it read.
FAKE_WG = """#!/bin/sh
echo "$*" >> "$STATE/wg-argv"
case "$1" in
  show) n=$(cat "$STATE/n" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$STATE/n"
        [ "$n" -gt "$READY_AFTER" ] ;;
  syncconf) cat "$3" > "$STATE/conf" ;;
esac
"""
# `ip -4 -o address show` lists the current address and one from earlier settings.
FAKE_IP = """#!/bin/sh
echo "$*" >> "$STATE/ip"
case "$*" in
  "-4 -o address show dev wgsync0")
    echo "5: wgsync0    inet 198.19.253.1/24 scope global wgsync0"
    echo "5: wgsync0    inet 10.1.1.1/24 scope global wgsync0" ;;
esac
"""


def run_setup(tmp_path, ready_after):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("wg", FAKE_WG), ("ip", FAKE_IP), ("sleep", "#!/bin/sh\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "private.key").write_text(SECRET + "\n")
    (tmp_path / "peers.conf").write_text("[Peer]\nPublicKey = PUB=\nAllowedIPs = 198.19.253.2/32\n")
    (tmp_path / "tunnel.env").write_text(
        "INTERFACE=wgsync0\nADDRESS=198.19.253.1/24\nMTU=1320\nLISTEN_PORT=52200\n"
        "PRIVATE_KEY_FILE=%s/private.key\nPEERS_FILE=%s/peers.conf\n" % (tmp_path, tmp_path))
    env = dict(os.environ, PATH="%s:/usr/bin:/bin" % bin_dir, STATE=str(tmp_path), READY_AFTER=str(ready_after))
    return subprocess.run(["sh", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True, timeout=30,
                          check=False)


def test_key_through_a_pipe_and_only_the_old_address_removed(tmp_path):
    proc = run_setup(tmp_path, ready_after=5)
    assert proc.returncode == 0, proc.stderr
    conf = (tmp_path / "conf").read_text()
    assert conf.startswith("[Interface]\nPrivateKey = %s\nListenPort = 52200\n\n[Peer]\nPublicKey = PUB=" % SECRET)
    assert SECRET not in (tmp_path / "wg-argv").read_text()
    assert "syncconf wgsync0 /dev/stdin" in (tmp_path / "wg-argv").read_text()
    ip = (tmp_path / "ip").read_text().splitlines()
    assert "address replace 198.19.253.1/24 dev wgsync0" in ip
    assert "address del 10.1.1.1/24 dev wgsync0" in ip
    assert not [line for line in ip if "del 198.19.253.1/24" in line]
    assert ip[-1] == "link set dev wgsync0 mtu 1320 up"
    assert SECRET not in proc.stdout + proc.stderr


def test_gives_up_with_a_message_when_wg_never_reaches_the_interface(tmp_path):
    proc = run_setup(tmp_path, ready_after=10000)
    assert proc.returncode == 1
    assert "wg cannot reach it" in proc.stderr
    assert not (tmp_path / "conf").exists()
