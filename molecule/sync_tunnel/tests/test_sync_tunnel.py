"""The gradient-sync tunnel on three nodes in two sites (molecule.yml): a full mesh whose MTU fits
the narrowest path (1400 - 80), full-size packets through it with DF set, nothing readable on the
underlay, keys that never leave their node, peers applied in place, a tunnel MTU the path does not
carry rolled back by itself, and bad input refused before any node changes. The interface is the
collection's wireguard_interface module's: its unit trainnet-wg-wgsync0.service and its configuration
file wgsync0.conf (no secret inside) in the key directory."""

import json
import os
import re
import subprocess
import sys
import tempfile
import time

import pytest
import testinfra
import testinfra.utils.ansible_runner


INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
CONVERGE = os.environ["TRAINNET_SYNC_TUNNEL_CONVERGE"]
WAN_NETNS = "trainnet-molst-wan"
NODE1, NODE2, NODE3 = ("trainnet-molecule-st-node1", "trainnet-molecule-st-node2", "trainnet-molecule-st-node3")
NODES = (NODE1, NODE2, NODE3)
TUNNEL = {NODE1: "198.19.253.1", NODE2: "198.19.253.2", NODE3: "198.19.253.3"}
UNDERLAY = {NODE1: "192.0.2.1", NODE2: "192.0.2.2", NODE3: "192.0.2.3"}
IFACE, PORT, MTU = "wgsync0", 52200, 1320
KEY_DIR = "/etc/trainnet/sync_tunnel"
UNIT = "trainnet-wg-%s.service" % IFACE
CONFIG = "%s/%s.conf" % (KEY_DIR, IFACE)

testinfra_hosts = ["podman-nsenter://" + name for name in
                   testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")]


def on(name):
    return testinfra.get_host("podman-nsenter://" + name)


def name_of(host):
    return host.backend.name


def converge(*extra, limit=None, timeout=300):
    """The role again (ansible-playbook, as a user runs it) on every node or on `limit`, extra vars as JSON."""
    argv = ["ansible-playbook", "-i", INVENTORY, CONVERGE] + (["--limit", limit] if limit else [])
    for value in extra:
        argv += ["-e", json.dumps(value)]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))


def ping(host, address, size, count=1):
    return host.run("ping -n -q -c %s -W 2 -M do -s %s -I %s %s", str(count), str(size), IFACE, address)


def test_interface_address_and_mtu_from_the_narrowest_path(host):
    link = json.loads(host.check_output("ip -j -d link show dev %s", IFACE))[0]
    assert link["mtu"] == MTU, link
    assert "UP" in link["flags"], link
    address = json.loads(host.check_output("ip -j -4 address show dev %s", IFACE))[0]["addr_info"]
    assert [(a["local"], a["prefixlen"]) for a in address] == [(TUNNEL[name_of(host)], 24)]
    service = host.service(UNIT)
    assert service.is_running and service.is_enabled


def test_full_mesh_with_every_peer_at_its_underlay_endpoint(host):
    me = name_of(host)
    # `wg show dump`'s first line holds the private key: only the peer lines are read
    dump = host.check_output("wg show %s dump | tail -n +2", IFACE).splitlines()
    peers = {}
    for line in dump:
        fields = line.split("\t")   # public key, preshared key, endpoint, allowed IPs, ...
        peers[fields[2]] = (fields[0], fields[3])
    want = {"%s:%d" % (UNDERLAY[n], PORT): TUNNEL[n] + "/32" for n in NODES if n != me}
    assert {endpoint: allowed for endpoint, (key, allowed) in peers.items()} == want
    # each peer's public key is the one that peer generated for itself
    for node in NODES:
        if node != me:
            key = on(node).file(KEY_DIR + "/public.key").content_string.strip()
            assert peers["%s:%d" % (UNDERLAY[node], PORT)][0] == key
    assert host.check_output("wg show %s listen-port", IFACE).strip() == str(PORT)


def test_full_size_packets_cross_every_pair_and_one_byte_more_does_not_fit(host):
    me = name_of(host)
    for node in NODES:
        if node != me:
            result = ping(host, TUNNEL[node], MTU - 28, count=3)
            assert result.rc == 0, (node, result.stdout, result.stderr)
    # refused by the interface itself (ping -q keeps its "message too long" to itself)
    too_big = ping(host, TUNNEL[NODE3 if me != NODE3 else NODE1], MTU - 27)
    assert too_big.rc != 0 and "(1321) bytes" in too_big.stdout and " 0 received" in too_big.stdout, too_big.stdout


def test_keys_stay_on_their_node_and_out_of_the_files(host):
    key_dir = host.file(KEY_DIR)
    assert key_dir.mode == 0o700 and key_dir.user == "root"
    private = host.file(KEY_DIR + "/private.key")
    assert private.mode == 0o600 and private.user == "root"
    secret = private.content_string.strip()
    places = {name: host.file(name).content_string for name in (CONFIG, KEY_DIR + "/public.key", "/etc/systemd/system/" + UNIT)}
    places["process arguments"] = host.check_output("ps -eo args")   # wireguard-go, wg
    # names only: an assertion message must never show the key
    assert [name for name, text in places.items() if secret in text] == []
    assert host.file(CONFIG).mode == 0o600


SNIFFER = """
import json, select, socket, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))   # every interface of the namespace
end, marker = time.time() + float(sys.argv[1]), bytes.fromhex(sys.argv[2])
while time.time() < end:
    if not select.select([s], [], [], 0.2)[0]:
        continue
    frame = s.recv(65535)
    if frame[12:14] != b"\\x08\\x00":
        continue
    ip = frame[14:]
    proto, ihl = ip[9], (ip[0] & 15) * 4
    ports = (int.from_bytes(ip[ihl:ihl + 2], "big"), int.from_bytes(ip[ihl + 2:ihl + 4], "big")) if proto in (6, 17) else (0, 0)
    print(json.dumps({"proto": proto, "ports": ports, "marker": marker in frame}), flush=True)
"""


def test_gradients_cross_the_underlay_encrypted():
    """Pings with a known payload between two nodes' tunnel addresses: on the bridge's ports, only
    WireGuard's UDP on port 52200, and the payload nowhere."""
    pattern = os.urandom(16).hex()
    capture = subprocess.Popen(["ip", "netns", "exec", WAN_NETNS, sys.executable, "-c", SNIFFER, "4", pattern],
                               stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    sent = on(NODE1).run("ping -n -q -c 5 -i 0.2 -s 1200 -p %s -I %s %s", pattern, IFACE, TUNNEL[NODE3])
    assert sent.rc == 0, sent.stdout + sent.stderr
    frames = [json.loads(line) for line in capture.communicate(timeout=30)[0].splitlines()]
    tunnel = [f for f in frames if f["proto"] == 17 and PORT in f["ports"]]
    assert len(tunnel) >= 10, frames            # 5 requests and 5 replies, at least
    assert [f for f in frames if f["marker"]] == []
    assert [f for f in frames if f["proto"] == 1] == []     # no ICMP on the underlay: it went through the tunnel


def keepalive(name):
    """The persistent keepalive (s) the running tunnel of a node uses towards each peer."""
    rows = on(name).check_output("wg show %s persistent-keepalive", IFACE).splitlines()
    return sorted(set(row.split()[-1] for row in rows))


def ifindex(name):
    return json.loads(on(name).check_output("ip -j link show dev %s", IFACE))[0]["ifindex"]


def test_changed_peers_are_applied_in_place():
    """A new keepalive reaches the running tunnel without a restart: same interface (ifindex), the
    peers' sessions kept, traffic still flows; the next run with the old value puts it back."""
    before = ifindex(NODE1)
    try:
        done = converge({"sync_tunnel_keepalive": 17}, limit=NODE1)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert keepalive(NODE1) == ["17"] and ifindex(NODE1) == before
        assert "PersistentKeepalive = 17" in on(NODE1).file(CONFIG).content_string
        assert ping(on(NODE1), TUNNEL[NODE3], MTU - 28).rc == 0
    finally:
        done = converge(limit=NODE1)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert keepalive(NODE1) == ["25"] and ifindex(NODE1) == before


def test_a_file_written_but_not_applied_is_applied_by_the_next_run():
    """Issue 23 finding 1, for the gradient-sync tunnel: a run that stopped after writing the
    configuration file (here: the file edited to the new keepalive, the tunnel left on the old one)
    is completed by the next run with that value, which finds the file as it wants it and still
    applies it, because it compares the running interface, not only the file."""
    node1 = on(NODE1)
    try:
        node1.check_output("sed -i 's/^PersistentKeepalive = 25$/PersistentKeepalive = 17/' %s", CONFIG)
        assert keepalive(NODE1) == ["25"]
        done = converge({"sync_tunnel_keepalive": 17}, limit=NODE1)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert re.search(r"%s\s*:\s*ok=\d+\s+changed=1\s" % NODE1, done.stdout), done.stdout[-3000:]
        assert keepalive(NODE1) == ["17"]
    finally:
        done = converge(limit=NODE1)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert keepalive(NODE1) == ["25"]


def snapshot():
    """Each node's key directory, tunnel link and peers (never `wg show dump`'s private key line; sorted:
    wireguard-go lists peers in no fixed order)."""
    return {node: on(node).check_output("ls -la --time-style=full-iso %s; ip -o link show dev %s; "
                                        "wg show %s dump | tail -n +2 | cut -f1,3,4 | sort", KEY_DIR, IFACE, IFACE)
            for node in NODES}


ROUTE_INSIDE = "198.19.253.128/25"


@pytest.mark.parametrize("case, extra, fragments", [
    ("interface-of-the-control-plane", {"sync_tunnel_interface": "wg-sync"},
     ["sync_tunnel_interface=wg-sync starts with wg-", "control plane"]),
    ("address-outside-the-network", {"sync_tunnel_network": "198.19.253.0/30"},
     ["training node trainnet-molecule-st-node3: sync tunnel address 198.19.253.3 is not a host address of "
      "sync_tunnel_network 198.19.253.0/30"]),
    # node1 gets a LAN route inside the tunnel network for this case (below)
    ("network-overlaps-a-route", {},
     ["sync_tunnel_network=198.19.253.0/24 overlaps routes trainnet-molecule-st-node1 already has: %s dev eth0" % ROUTE_INSIDE]),
    ("one-address-twice", {"sync_tunnel_address": "198.19.253.9"},
     ["sync tunnel address 198.19.253.9 is set on two training nodes"]),
    ("path-mtu-below-the-ipv4-minimum", {"sync_tunnel_path_mtus": [{"sites": ["site-a", "site-b"], "mtu": 500}]},
     ["needs two sites and an mtu of 576-9000"]),
    ("misspelt-variable", {"sync_tunnel_mesh_peer_limt": 4},
     ["sync_tunnel_mesh_peer_limt (did you mean sync_tunnel_mesh_peer_limit?)"]),
])
def test_bad_input_refused_before_any_node_changes(case, extra, fragments):
    before = snapshot()
    overlap = case == "network-overlaps-a-route"
    if overlap:
        on(NODE1).check_output("ip route add %s dev eth0", ROUTE_INSIDE)
    try:
        # One node runs it: the plan checks every node's input from the inventory all the same.
        run = converge(extra, limit=NODE1)
    finally:
        if overlap:
            on(NODE1).check_output("ip route del %s dev eth0", ROUTE_INSIDE)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    for fragment in fragments:
        assert fragment in out, (case, fragment, out[-3000:])
    assert not re.search(r"TASK \[longhaul\.trainnet\.sync_tunnel : (Keys|Tunnel|Packages) \|", out), case
    assert snapshot() == before, case


def test_a_tunnel_mtu_the_path_does_not_carry_is_rolled_back():
    """Claim a 1500-byte path to site-b: the tunnel MTU would be 1420, whose packets the black hole
    swallows. Every node's full-size check fails, each puts its 1320 back and the run fails naming
    the peers across the black hole; afterwards the mesh works as before."""
    run = converge({"sync_tunnel_path_mtus": [{"sites": ["site-a", "site-b"], "mtu": 1500}]})
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert re.search(r"no answer from [^\n]*%s through wgsync0" % TUNNEL[NODE3], out), out[-3000:]
    assert "with 1420-byte packets (DF)" in out and "the previous configuration was put back" in out, out[-3000:]
    # the failure says why: the peer's handshake went through, only full-size packets are lost
    assert "small pings answer: the path does not carry the tunnel's full-size packets" in out, out[-3000:]
    for node in NODES:
        host = on(node)
        assert host.file("/sys/class/net/%s/mtu" % IFACE).content_string.strip() == str(MTU), node
        assert "mtu %d up" % MTU in host.file("/etc/systemd/system/" + UNIT).content_string, node
    for node in (NODE1, NODE2):
        assert ping(on(node), TUNNEL[NODE3], MTU - 28).rc == 0, node
    again = converge()
    changed = re.findall(r"changed=(\d+)", again.stdout)
    assert again.returncode == 0 and len(changed) == 3 and set(changed) == {"0"}, again.stdout[-3000:]


RETIRE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "playbooks", "retire.yml")


def retire_node3(*extra):
    """playbooks/retire.yml on node3, with the roles given a group of node1 and node2 only (node3 left
    the training nodes), as a user runs it after editing the inventory."""
    with tempfile.NamedTemporaryFile("w", suffix=".yml") as remaining:
        remaining.write("remaining:\n  hosts:\n    %s:\n    %s:\n" % (NODE1, NODE2))
        remaining.flush()
        groups = {"sync_tunnel_group": "remaining", "control_plane_training_group": "remaining",
                  "training_job_node_group": "remaining"}
        run = subprocess.run(["ansible-playbook", "-i", INVENTORY, "-i", remaining.name, RETIRE,
                              "-e", json.dumps(dict(groups, trainnet_retire_hosts=NODE3))] + list(extra),
                             capture_output=True, text=True, timeout=300, check=False,
                             env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
        # The remaining nodes' run with the same groups: they drop node3 as a peer.
        rest = subprocess.run(["ansible-playbook", "-i", INVENTORY, "-i", remaining.name, CONVERGE,
                               "--limit", "remaining", "-e", json.dumps(groups)] + list(extra),
                              capture_output=True, text=True, timeout=300, check=False,
                              env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
    return run, rest


def test_a_node_that_left_the_group_is_retired_and_dropped_by_the_rest():
    """Issue 23 finding 7. A node that left the training nodes keeps nothing of the tunnel: refused
    while still in the group; --check changes nothing; playbooks/retire.yml stops the tunnel and
    removes its unit and key directory, and the remaining nodes' next run drops it as a peer
    (no key of node3 in their tunnel, node1 <-> node2 still carries full-size packets). site.yml with
    node3 back brings it back with a new key that every peer holds."""
    node3 = on(NODE3)
    key3 = node3.file(KEY_DIR + "/public.key").content_string.strip()
    # Still in the group: refused before any change.
    refused = subprocess.run(["ansible-playbook", "-i", INVENTORY, RETIRE, "-e", "trainnet_retire_hosts=" + NODE3],
                             capture_output=True, text=True, timeout=300, check=False,
                             env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1"))
    assert refused.returncode != 0 and "is still in gpu_nodes" in refused.stdout + refused.stderr, \
        (refused.stdout + refused.stderr)[-3000:]
    assert node3.file(KEY_DIR).exists
    try:
        checked = retire_node3("--check")[0]
        assert checked.returncode == 0, checked.stdout[-3000:]
        assert re.search(r"%s\s*:\s*ok=\d+\s+changed=[1-9]" % NODE3, checked.stdout), checked.stdout[-3000:]
        assert node3.file(KEY_DIR + "/private.key").exists and node3.service(UNIT).is_running
        run, rest = retire_node3()
        assert run.returncode == 0, run.stdout[-3000:]
        assert rest.returncode == 0, rest.stdout[-3000:]
        assert node3.run("ip link show dev %s", IFACE).rc != 0
        for path in (KEY_DIR, "/etc/systemd/system/" + UNIT, "/etc/sysctl.d/90-trainnet-sync-tunnel.conf"):
            assert not node3.file(path).exists, path
        assert node3.run("systemctl cat %s", UNIT).rc != 0
        assert node3.file("/proc/sys/net/ipv4/ip_forward").content_string.strip() == "0"
        for node, other in ((NODE1, NODE2), (NODE2, NODE1)):
            host = on(node)
            assert key3 not in host.check_output("wg show %s peers", IFACE)
            assert ping(host, TUNNEL[other], MTU - 28).rc == 0, node
        again = retire_node3()[0]
        assert re.search(r"%s\s*:\s*ok=\d+\s+changed=0\s" % NODE3, again.stdout), again.stdout[-3000:]
    finally:
        back = converge()
    assert back.returncode == 0, (back.stdout + back.stderr)[-3000:]
    for node in NODES:
        test_full_mesh_with_every_peer_at_its_underlay_endpoint(on(node))
    assert node3.file(KEY_DIR + "/public.key").content_string.strip() != key3
