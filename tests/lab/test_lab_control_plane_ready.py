"""The lab carries a control plane: WireGuard (wireguard-go) between the home master and the anchors
across the emulated WAN, with the inventory's link physics (cn-home<->us-west: path MTU 1400 with
an ICMP black hole).

Builds a container lab of the inventory's home master and anchors (inventories/lab, moved to
198.19.0.0/16 so it never meets the demo lab) and checks what the control_plane role relies on:
the image has its tools, wireguard-go runs in a container (it needs /dev/net/tun) and two
containers' instances with the same interface name do not collide, WireGuard's UDP crosses the
emulator from each host's trainnet_lab_address (the underlay endpoint), the tunnel MTU must leave
room for the outer headers on the 1400 path, and a cut link leaves the tunnel interface up.
"""

from __future__ import annotations

import time

import pytest
from conftest import REPO_ROOT, missing_lab_requirements
from lab_traffic import emulator_counters

from ansible_collections.longhaul.trainnet.plugins.module_utils.link_measure import parse_ping_summary
from trainnet_lab.inventory import read_inventory
from trainnet_lab.spec import raw_from_inventory

pytestmark = pytest.mark.lab

CONTROL_GROUPS = {"home_master", "control_plane"}
# One UDP port per tunnel interface: a host with two tunnels (an anchor) listens on two ports.
WG_PORTS = {"wgtest0": 51820, "wgtest1": 51821}
# WireGuard's overhead with an IPv6 outer header (40 + UDP 8 + WireGuard 32): a tunnel MTU that
# is safe on either underlay family. The role derives its MTU the same way.
WG_OVERHEAD = 80
TOOLS = ("wireguard-go", "wg", "bird", "birdc", "nft", "python3")


def control_plane_raw() -> dict:
    """The lab inventory's sites, links and control-plane hosts, on 198.19 instead of 198.18."""
    raw, _problems = raw_from_inventory(read_inventory(REPO_ROOT / "inventories" / "lab"),
                                        host_kind="netns")

    def moved(address: str) -> str:
        assert address.startswith("198.18."), address
        return "198.19." + address[len("198.18."):]

    raw["sites"] = {name: {"lan": moved(site["lan"])} for name, site in raw["sites"].items()}
    raw["hosts"] = {name: {**host, "address": moved(host["address"])}
                    for name, host in raw["hosts"].items() if CONTROL_GROUPS & set(host["groups"])}
    return raw


def sh(lab, host: str, script: str, timeout: float = 60):
    return lab.run_on(host, ["sh", "-c", script], timeout=timeout)


def start_wireguard(lab, host: str, interface: str) -> str:
    """wireguard-go under systemd (as the role runs it), a key made on the host; its public key."""
    started = sh(lab, host, f"""set -e
umask 077
wg genkey > /run/{interface}.key
systemd-run --quiet --collect --unit=trainnet-test-{interface} wireguard-go -f {interface}
for i in $(seq 50); do [ -S /var/run/wireguard/{interface}.sock ] && break; sleep 0.1; done
wg pubkey < /run/{interface}.key""")
    assert started.returncode == 0, started.stderr
    return started.stdout.strip()


def configure_peer(lab, host: str, interface: str, address: str, peer_key: str, endpoint: str,
                   mtu: int) -> None:
    """The peer without persistent keepalive: set, it sends a keepalive at once, and two ends that
    both initiate lose both handshakes (each drops the response to its own initiation once it has
    answered the other's) until a retry 5 s later, or several, falls apart by more than the path's
    one-way delay (measured: 5-15 s here, over 20 s once in CI). keep_alive() adds it afterwards."""
    port = WG_PORTS[interface]
    done = sh(lab, host, f"""set -e
wg set {interface} private-key /run/{interface}.key listen-port {port} peer {peer_key} \
  endpoint {endpoint}:{port} allowed-ips 0.0.0.0/0
ip addr add {address}/31 dev {interface}
ip link set {interface} mtu {mtu} up""")
    assert done.returncode == 0, done.stderr


def keep_alive(lab, host: str, interface: str, peer_key: str) -> None:
    done = sh(lab, host, f"wg set {interface} peer {peer_key} persistent-keepalive 25")
    assert done.returncode == 0, done.stderr


def tunnel_ping(lab, host: str, address: str, *, size: int = 56, count: int = 5) -> dict:
    result = lab.run_on(host, ["ping", "-n", "-q", "-M", "do", "-s", str(size), "-c", str(count),
                               "-i", "0.2", "-W", "2", address], timeout=count * 0.2 + 30)
    return parse_ping_summary(result.stdout) or {"loss_pct": 100.0}


def wait_for_handshake(lab, host: str, interface: str, address: str, limit: float = 20.0) -> None:
    """Ping through the new tunnel until its first handshake completes. On a lossy path a lost
    handshake packet is retried only after WireGuard's REKEY_TIMEOUT (5 s): the pings measured
    after this see the tunnel, not its setup. Bounded by `limit` (four attempts); a failure
    shows both ends' WireGuard state and the emulator's counters."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        lab.run_on(host, ["ping", "-n", "-q", "-c", "1", "-W", "1", address], timeout=10)
        shown = sh(lab, host, f"wg show {interface} latest-handshakes").stdout.split()
        if len(shown) >= 2 and shown[1] != "0":
            return
    raise AssertionError(f"{host}: no WireGuard handshake on {interface} within {limit:g} s")


def tunnel_state(lab, hosts, interface: str) -> str:
    """What each end's WireGuard and the emulator saw: read when a tunnel does not come up."""
    lines = []
    for host in hosts:
        shown = sh(lab, host, f"wg show {interface} dump; systemctl is-active trainnet-test-{interface};"
                   f" journalctl -q -n 5 -u trainnet-test-{interface} --no-pager", timeout=30)
        lines.append(f"{host}: {shown.stdout.strip()} {shown.stderr.strip()}")
    for link in lab.status()["links"]:
        lines.append(f"emulator {link['directions']}")
    return "\n".join(lines)


def build_tunnel(lab, a: str, b: str, interface: str, addresses: tuple[str, str], mtu: int):
    keys = {host: start_wireguard(lab, host, interface) for host in (a, b)}
    assert keys[a] != keys[b]
    # The responder first: an initiation that reaches a WireGuard without its key or its link up is
    # lost and retried only after REKEY_TIMEOUT (5 s). Only a's ping initiates (see configure_peer).
    for host, peer, address in ((b, a, addresses[1]), (a, b, addresses[0])):
        configure_peer(lab, host, interface, address, keys[peer],
                       lab.spec.hosts[peer].address, mtu)
    try:
        wait_for_handshake(lab, a, interface, addresses[1])
    except AssertionError as failed:
        raise AssertionError(f"{failed}\n{tunnel_state(lab, (a, b), interface)}") from None
    for host, peer in ((a, b), (b, a)):
        keep_alive(lab, host, interface, keys[peer])
    return keys


def test_wireguard_crosses_the_emulated_wan_within_the_path_mtu(make_lab, figure):
    reason = missing_lab_requirements(need_containers=True)
    if reason:
        pytest.skip(reason)
    raw = control_plane_raw()
    assert set(raw["hosts"]) == {"cn-master", "usw-anchor", "use-anchor"}
    lab = make_lab(raw, host_kind="container")
    west = lab.spec.link_between("cn-home", "us-west")
    anchors = lab.spec.link_between("us-west", "us-east")
    assert (west.mtu, west.icmp_blackhole) == (1400, True)  # the inventory's black hole

    for host in lab.spec.hosts:
        found = sh(lab, host, "for t in " + " ".join(TOOLS) + "; do command -v $t; done")
        assert len(found.stdout.split()) == len(TOOLS), f"{host}: {found.stdout}"
        tun = sh(lab, host, "test -c /dev/net/tun && echo tun")
        assert tun.stdout.strip() == "tun", f"{host}: no /dev/net/tun"

    # The same interface name on both ends: each container has its own /var/run/wireguard.
    keys = build_tunnel(lab, "cn-master", "usw-anchor", "wgtest0", ("198.19.253.0", "198.19.253.1"),
                        west.mtu - WG_OVERHEAD)
    for host in ("cn-master", "usw-anchor"):
        shown = sh(lab, host, "wg show wgtest0 public-key")
        assert shown.stdout.strip() == keys[host]
    assert tunnel_ping(lab, "cn-master", "198.19.253.1")["loss_pct"] <= 40  # 0.5% loss each way
    peer = sh(lab, "cn-master", "wg show wgtest0 endpoints").stdout
    underlay = lab.spec.hosts["usw-anchor"].address  # trainnet_lab_address is the endpoint
    assert f"{underlay}:{WG_PORTS['wgtest0']}" in peer

    # Full-size inner packets fit the 1400 path at MTU 1400 - 80 ...
    full = tunnel_ping(lab, "cn-master", "198.19.253.1", size=west.mtu - WG_OVERHEAD - 28)
    assert full["loss_pct"] <= 40, full
    # ... but not at WireGuard's usual 1420: the outer packets vanish in the black hole.
    before = emulator_counters(lab, "cn-home->us-west")["drop_mtu"]
    sh(lab, "cn-master", "ip link set wgtest0 mtu 1420")
    too_big = tunnel_ping(lab, "cn-master", "198.19.253.1", size=1420 - 28, count=3)
    dropped = emulator_counters(lab, "cn-home->us-west")["drop_mtu"] - before
    sh(lab, "cn-master", f"ip link set wgtest0 mtu {west.mtu - WG_OVERHEAD}")
    figure(f"tunnel MTU {west.mtu - WG_OVERHEAD}: loss {full['loss_pct']}%; tunnel MTU 1420: "
           f"loss {too_big['loss_pct']}%, {dropped} outer packets over the path MTU dropped",
           "MTU 1320 carries full-size packets, 1420 black-holes them", too_big["loss_pct"] == 100)
    assert too_big["loss_pct"] == 100 and dropped >= 3

    # Anchor <-> anchor across the 1500 path, and UDP from the other anchor's address.
    build_tunnel(lab, "usw-anchor", "use-anchor", "wgtest1", ("198.19.252.0", "198.19.252.1"),
                 anchors.mtu - WG_OVERHEAD)
    assert tunnel_ping(lab, "usw-anchor", "198.19.252.1",
                       size=anchors.mtu - WG_OVERHEAD - 28)["loss_pct"] <= 40

    # A silent cut: the tunnel stops carrying anything, but its interface stays up (WireGuard has
    # no link state: liveness must come from BFD). Restored, it carries again.
    lab.set_link("cn-home", "us-west", down=True)
    assert tunnel_ping(lab, "cn-master", "198.19.253.1", count=3)["loss_pct"] == 100
    state = sh(lab, "cn-master", "ip -br link show wgtest0").stdout.split()
    assert state[1] in ("UNKNOWN", "UP"), state
    assert tunnel_ping(lab, "usw-anchor", "198.19.252.1", count=3)["loss_pct"] <= 40
    lab.set_link("cn-home", "us-west", down=False)
    assert tunnel_ping(lab, "cn-master", "198.19.253.1")["loss_pct"] <= 40
