"""Verify the control_plane role on three hosts (home master + two anchors) joined by a bridge:
tunnels with recent handshakes, BFD sessions Up, the rendezvous route via the primary anchor and
its move to the secondary when the primary's underlay is cut, the firewall seen from a host that
is not a peer, the quoted env file, keys that never leave their host, and a --limit run that
changes nothing."""

import os
import re
import shlex
import subprocess
import time

import importlib.util

import pytest
import testinfra
import testinfra.utils.ansible_runner


def shared(name):
    """A helper module of molecule/shared (the scenarios' tests are not a package)."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "shared", name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROCESS_ARGUMENTS = shared("process_arguments")
INTERRUPTED = shared("interrupted")

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
SCENARIO = os.environ["MOLECULE_SCENARIO_DIRECTORY"]
MASTER, USW, USE = "trainnet-molecule-cp-master", "trainnet-molecule-cp-usw", "trainnet-molecule-cp-use"
RDV = "198.19.255.1"
WAN_NETNS = "trainnet-molcp-wan"
OUTSIDER = "192.0.2.99"  # an address on the bridge that is no peer
# Long inventory names give id-based interface names: wg-id<N>, N = tunnel address offset.
IF_TO = {MASTER: "wg-id1", USW: "wg-id2", USE: "wg-id3"}
UNDERLAY = {MASTER: "192.0.2.1", USW: "192.0.2.2", USE: "192.0.2.3"}
TUNNEL_ADDRESS = {MASTER: "198.19.254.1", USW: "198.19.254.2", USE: "198.19.254.3"}

testinfra_hosts = ["podman-nsenter://" + name for name in
                   testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")]


def on(name):
    return testinfra.get_host("podman-nsenter://" + name)


def name_of(host):
    return host.backend.name


def peers_of(name):
    return [n for n in (MASTER, USW, USE) if n != name]


def wait_for(predicate, seconds, step=0.2):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    return predicate()


def route_dev(host, address):
    out = host.check_output("ip route get %s", address)
    match = re.search(r" dev (\S+)", out)
    return match.group(1) if match else None


def rdv_dev(host):
    return route_dev(host, RDV)


def relayed_source(sender, source, destination, port=29477):
    """Source address the master sees for UDP sent by `sender` from `source` (bounded: 5 s)."""
    listen = ("import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(('0.0.0.0',%d));"
              "s.settimeout(5);print(s.recvfrom(64)[1][0])" % port)
    receiver = subprocess.Popen(["podman", "exec", MASTER, "python3", "-c", listen],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        send = ("import socket,time;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(('%s',0))\n"
                "for _ in range(10): s.sendto(b'x',('%s',%d)); time.sleep(0.2)" % (source, destination, port))
        sender.run("python3 -c %s", send)
        out, err = receiver.communicate(timeout=10)
    finally:
        receiver.kill()
    return out.strip() or err.strip()


def test_tunnels_have_recent_handshakes_and_mtu(host):
    me = name_of(host)
    for peer in peers_of(me):
        ifname = IF_TO[peer]
        link = host.check_output("ip -o link show dev %s", ifname)
        assert "mtu 1320" in link  # path MTU 1400 - 80
        stamp = wait_for(lambda: int(host.check_output("wg show %s latest-handshakes", ifname).split()[-1]), 15)
        assert 0 < time.time() - stamp < 180, (ifname, stamp)


def test_bfd_sessions_up_on_every_tunnel(host):
    def sessions():
        out = host.check_output("birdc show bfd sessions")
        return dict((m.group(1), m.group(2)) for m in re.finditer(r"^\S+\s+(wg-\S+)\s+(\S+)", out, re.M))
    got = wait_for(lambda: sessions() if all(sessions().get(IF_TO[p]) == "Up" for p in peers_of(name_of(host)))
                   else None, 15)
    assert got, sessions()


def test_rendezvous_via_primary_and_reachable():
    master = on(MASTER)
    assert wait_for(lambda: rdv_dev(master) == IF_TO[USW], 10), master.check_output("ip route")
    # The stable overlay address is the source (it survives a path change).
    assert "src 198.19.254.1" in master.check_output("ip route get %s", RDV)
    assert master.run("ping -n -c 3 -W 2 %s", RDV).rc == 0
    assert on(USW).check_output("ip -o addr show dev lo").count(RDV) == 1
    assert RDV not in on(USE).check_output("ip -o addr show dev lo")


def test_private_key_0600_and_never_in_arguments(host):
    key = host.file("/etc/trainnet/wireguard/private.key")
    assert key.mode == 0o600 and key.user == "root"
    secret = key.content_string.strip()
    assert len(secret) == 44
    cmdlines = host.check_output("cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' || true")
    assert secret not in cmdlines
    for ifname in (IF_TO[p] for p in peers_of(name_of(host))):
        config = host.file("/etc/trainnet/wireguard/%s.conf" % ifname)
        assert config.mode == 0o600 and config.user == "root"
        assert secret not in config.content_string
        assert secret not in host.file("/etc/systemd/system/trainnet-wg-%s.service" % ifname).content_string


def test_env_file_on_training_node_is_quoted_and_complete():
    master = on(MASTER)
    env = master.file("/etc/trainnet/control_plane.env")
    assert env.mode == 0o644
    for line in env.content_string.splitlines():
        if line and not line.startswith("#"):
            name, value = line.split("=", 1)
            assert re.match(r"^[A-Z_][A-Z0-9_]*$", name)
            # shlex round-trip: the value is one shell word that assigns literally
            assert len(shlex.split(value)) == 1 and shlex.quote(shlex.split(value)[0]) == value
    out = master.check_output("env -i bash -c 'set -a; . /etc/trainnet/control_plane.env; env'")
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert values["MASTER_ADDR"] == RDV and values["MASTER_PORT"] == "29500"
    assert values["PET_RDZV_BACKEND"] == "c10d" and values["PET_RDZV_ENDPOINT"] == RDV + ":29400"
    assert "read_timeout=300" in values["PET_RDZV_CONF"] and "join_timeout=900" in values["PET_RDZV_CONF"]
    assert values["PET_RDZV_CONF"].startswith("is_host=false,")  # the anchor's store, never a node's own
    assert values["PET_LOCAL_ADDR"] == "192.0.2.1"
    # Anchors are not training nodes here.
    assert not on(USW).file("/etc/trainnet/control_plane.env").exists


def test_watchdog_metrics():
    master = on(MASTER)
    master.check_output("systemctl start trainnet-control-plane-watchdog.service")
    text = master.file("/var/lib/prometheus/node-exporter/trainnet_control_plane.prom").content_string
    assert re.search(r'trainnet_control_plane_bfd_session_up\{interface="wg-id2",.*state="Up"\} 1', text), text
    assert re.search(r'trainnet_control_plane_handshake_age_seconds\{interface="wg-id2",peer="%s"\} \d' % USW, text)
    assert 'trainnet_control_plane_active_anchor{anchor="%s",interface="wg-id2"' % USW in text
    assert "trainnet_control_plane_rendezvous_on_primary{primary=\"%s\"} 1" % USW in text
    assert master.service("trainnet-control-plane-watchdog.timer").is_enabled


def outsider(argv, timeout=10):
    return subprocess.run(["ip", "netns", "exec", WAN_NETNS] + argv, capture_output=True, text=True,
                          timeout=timeout, check=False)


def counter(host, comment):
    out = host.check_output("nft -a list table inet trainnet_control_plane")
    match = re.search(r'counter packets (\d+) bytes \d+ drop comment "%s"' % comment, out)
    assert match, out
    return int(match.group(1))


@pytest.fixture(name="outsider_address")
def fixture_outsider_address():
    subprocess.run(["ip", "-n", WAN_NETNS, "address", "replace", OUTSIDER + "/24", "dev", "br0"], check=True)
    yield OUTSIDER
    subprocess.run(["ip", "-n", WAN_NETNS, "address", "del", OUTSIDER + "/24", "dev", "br0"], check=False)


def test_firewall_from_a_host_that_is_not_a_peer(outsider_address):
    usw = on(USW)
    # a listener on the rendezvous port for the length of this test (bounded by timeout)
    usw.check_output("systemd-run --unit=cp-test-listener --collect timeout 30 python3 -c %s",
                     "import socket,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
                     "s.bind(('0.0.0.0',29400));s.listen(8);time.sleep(30)")
    time.sleep(1)
    probe = ("import socket,sys;s=socket.socket();s.settimeout(3);"
             "print(s.connect_ex((sys.argv[1],29400)))")
    # From the master through the tunnel: accepted.
    assert on(MASTER).check_output("python3 -c %s %s", probe, RDV).strip() == "0"
    # From the outsider over the underlay: silently dropped (timeout, not refused).
    before_tcp = counter(usw, "rendezvous-not-tunnel")
    result = outsider(["python3", "-c", probe, UNDERLAY[USW]])
    assert result.stdout.strip() not in ("0", ""), result
    assert counter(usw, "rendezvous-not-tunnel") > before_tcp
    # WireGuard's port from a source that is not the configured endpoint: dropped and counted.
    before_wg = counter(usw, "wg-not-peer")
    send = "import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.sendto(b'x'*148,('%s',51801))" % UNDERLAY[USW]
    assert outsider(["python3", "-c", send]).returncode == 0
    assert wait_for(lambda: counter(usw, "wg-not-peer") > before_wg, 3)
    # BFD from the outsider: dropped.
    before_bfd = counter(usw, "bfd-not-tunnel")
    send_bfd = "import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.sendto(b'x'*24,('%s',3784))" % UNDERLAY[USW]
    outsider(["python3", "-c", send_bfd])
    assert wait_for(lambda: counter(usw, "bfd-not-tunnel") > before_bfd, 3)
    usw.run("systemctl stop cp-test-listener")


CUT = """table inet molecule_cut {
  chain in { type filter hook input priority -10; ip saddr %s drop; }
  chain out { type filter hook output priority -10; ip daddr %s drop; }
}"""


def test_failover_when_primary_underlay_is_cut():
    master = on(MASTER)
    assert wait_for(lambda: rdv_dev(master) == IF_TO[USW], 10)
    try:
        master.check_output("echo %s | nft -f -", CUT % (UNDERLAY[USW], UNDERLAY[USW]))
        cut_at = time.monotonic()
        assert wait_for(lambda: rdv_dev(master) == IF_TO[USE], 5, step=0.05), master.check_output("ip route")
        switched = time.monotonic() - cut_at
        assert switched < 3, switched
        # The relay through us-east reaches the same server (us-west), from the same source address.
        assert master.run("ping -n -c 3 -W 2 %s", RDV).rc == 0
        # Traffic from the rendezvous address reaches the master unchanged through the relay: after a
        # failover us-east can see a TCP flow's reply direction first, and its SNAT (like us-west's for
        # a new flow) rewrote the source, so the master reset the connection.
        assert wait_for(lambda: route_dev(on(USW), TUNNEL_ADDRESS[MASTER]) == IF_TO[USE], 5, step=0.05)
        assert relayed_source(on(USW), RDV, TUNNEL_ADDRESS[MASTER]) == RDV
    finally:
        master.run("nft delete table inet molecule_cut")
    restored_at = time.monotonic()
    assert wait_for(lambda: rdv_dev(master) == IF_TO[USW], 10, step=0.1), master.check_output("ip route")
    assert time.monotonic() - restored_at < 10


ECHO_SERVER = """
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("%s", %d)); s.listen(1); s.settimeout(30); c = s.accept()[0]; c.settimeout(40)
while True:
    d = c.recv(64)
    if not d:
        break
    c.sendall(d)
"""

BLIP_CLIENT = """
import os, socket, time
c = socket.create_connection(("%s", %d), timeout=10); c.sendall(b"a"); c.recv(8)
print("connected", flush=True)
for _ in range(300):  # bounded: 30 s for the cut to be in place
    if os.path.exists("/tmp/trainnet-blip-send"):
        break
    time.sleep(0.1)
try:
    c.settimeout(30); c.sendall(b"b"); print("echoed", c.recv(8).decode())
except OSError as e:
    print("error", e)
"""


def test_a_takeover_blip_does_not_reset_connections_to_the_primary():
    """The secondary anchor loses BFD to the primary for a moment (its tunnel underlay cut: a false
    alarm looks the same) while it holds a TCP connection to the rendezvous address: the address is
    local there meanwhile, and the connection must survive (no reset) once the route is back."""
    use = on(USE)
    port = 29400  # the rendezvous port the primary's firewall admits from tunnel addresses
    assert wait_for(lambda: rdv_dev(use) == IF_TO[USW], 10)
    use.run("rm -f /tmp/trainnet-blip-send")
    drops_before = counter(use, "takeover-not-local")
    server = subprocess.Popen(["podman", "exec", USW, "python3", "-c", ECHO_SERVER % (RDV, port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client = None
    try:
        time.sleep(1)
        client = subprocess.Popen(["podman", "exec", USE, "python3", "-c", BLIP_CLIENT % (RDV, port)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert client.stdout.readline().strip() == "connected"
        use.check_output("echo %s | nft -f -", CUT % (UNDERLAY[USW], UNDERLAY[USW]))
        try:
            assert wait_for(lambda: rdv_dev(use) == "lo", 5, step=0.05), use.check_output("ip route")
            use.check_output("touch /tmp/trainnet-blip-send")
            time.sleep(1.5)  # the segment and its retransmissions meet the takeover
        finally:
            use.run("nft delete table inet molecule_cut")
        assert wait_for(lambda: rdv_dev(use) == IF_TO[USW], 10, step=0.1), use.check_output("ip route")
        out, err = client.communicate(timeout=40)
        assert out.strip().splitlines()[-1:] == ["echoed b"], (out, err)
        assert counter(use, "takeover-not-local") > drops_before
    finally:
        for proc in (client, server):
            if proc and proc.poll() is None:
                proc.kill()


def test_limited_rerun_changes_nothing_and_logs_no_key():
    """--limit to the master at -vvv: 0 changed, peers kept, no private key anywhere in the output."""
    secrets = [on(n).file("/etc/trainnet/wireguard/private.key").content_string.strip() for n in (MASTER, USW, USE)]
    before = on(MASTER).check_output("wg show all peers")
    proc = subprocess.run(
        ["ansible-playbook", "-i", INVENTORY, os.path.join(SCENARIO, "converge.yml"), "--limit", MASTER, "-vvv"],
        env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"),
        capture_output=True, text=True, timeout=600, check=False)
    output = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    assert proc.returncode == 0, output[-3000:]
    changed = [line for line in output.splitlines() if line.startswith("changed:") or "changed=" in line]
    assert re.search(r"%s\s*:\s*ok=\d+\s+changed=0\s" % MASTER, output), changed
    for secret in secrets:
        assert secret not in output
    assert on(MASTER).check_output("wg show all peers") == before


def test_a_lost_key_is_regenerated_loaded_and_given_to_the_peers():
    """The anchor's private key file is lost: a full converge at -vvv makes a new one, applies it to that
    host's tunnels in place (the running interfaces held the old key) and gives the peers the new public
    key; every tunnel hands shake again, and no private key, old or new, appears in the output or in any
    process's arguments on the host while the converge ran (sampled throughout, not one snapshot)."""
    use = on(USE)
    old_secret = use.file("/etc/trainnet/wireguard/private.key").content_string.strip()
    use.check_output("rm -f /etc/trainnet/wireguard/private.key")
    started = int(time.time()) - 1
    with PROCESS_ARGUMENTS.sampled(USE) as seen:
        proc = subprocess.run(
            ["ansible-playbook", "-i", INVENTORY, os.path.join(SCENARIO, "converge.yml"), "-vvv"],
            env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"),
            capture_output=True, text=True, timeout=900, check=False)
    output = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
    assert proc.returncode == 0, output[-3000:]
    new_secret = use.file("/etc/trainnet/wireguard/private.key").content_string.strip()
    assert new_secret and new_secret != old_secret
    assert old_secret not in output and new_secret not in output
    cmdlines = seen["text"]
    # The sampler ran while the key was loaded: it saw the module load it (`wg syncconf`, the key on
    # standard input) or the BFD wait that follows each changed path. Either can end within one 10 ms
    # sample on this fast underlay (a fast machine saw only the first), so one of them is enough.
    assert re.search(r"/wg syncconf wg-\S+ /dev/stdin| sh wg-\S+ 169\.254\.\d+\.\d+ \d+", cmdlines), cmdlines[-2000:]
    assert old_secret not in cmdlines and new_secret not in cmdlines
    public = use.file("/etc/trainnet/wireguard/public.key").content_string.strip()
    for peer in peers_of(USE):
        # The running interface holds the key of the file, and the peer holds its public key.
        assert use.check_output("wg show %s public-key", IF_TO[peer]).strip() == public
        assert public in on(peer).check_output("wg show %s peers", IF_TO[USE])

        def handshake(peer=peer):
            stamp = int(on(peer).check_output("wg show %s latest-handshakes", IF_TO[USE]).split()[-1])
            return stamp if stamp >= started else None
        stamp = wait_for(handshake, 30)
        assert stamp, "no handshake on %s towards %s after the key change" % (peer, USE)
    for name in (MASTER, USW, USE):
        test_bfd_sessions_up_on_every_tunnel(on(name))


# --- rolling tunnel restarts, pre-shared key rollback, a converge interrupted after bird.conf changed ---

PSK_FILE = "/etc/trainnet/wireguard/preshared.key"
PSK_A = "YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE="  # base64 of 32 bytes, test values only
PSK_B = "YmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmI="


def converge(*extra, psk=None, timeout=900):
    """A converge of the scenario from here (optionally with TRAINNET_MOLECULE_PSK): (rc, output)."""
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    env.pop("TRAINNET_MOLECULE_PSK", None)
    if psk:
        env["TRAINNET_MOLECULE_PSK"] = psk
    proc = subprocess.run(["ansible-playbook", "-i", INVENTORY, os.path.join(SCENARIO, "converge.yml")] + list(extra),
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)
    return proc.returncode, re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)


def task_lines(output, task, host):
    """The result lines of `host` under every TASK header containing `task` (default callback)."""
    found, inside = [], False
    for line in output.splitlines():
        if line.startswith("TASK ["):
            inside = task in line
        elif inside and "[%s]" % host in line:
            found.append(line.split(":")[0])
    return found


def tunnel_pids(name):
    """Main PID of each tunnel unit of a host (wireguard-go: a restart gives a new one)."""
    host = on(name)
    return dict((ifname, host.check_output("systemctl show -p MainPID --value trainnet-wg-%s.service", ifname).strip())
                for ifname in (IF_TO[p] for p in peers_of(name)))


def bfd_timeouts(name):
    """{interface: detection time in ms} of a host's BFD sessions: the peer's interval x its multiplier."""
    rows = [line.split() for line in on(name).check_output("birdc show bfd sessions").splitlines()]
    return dict((row[1], round(float(row[-1]) * 1000)) for row in rows if len(row) >= 6 and row[1].startswith("wg-"))


# Each host's BFD session states, asked over BIRD's control socket (one connection, no process per
# sample) every 50 ms until a stop file appears; bounded in time and count.
BFD_SAMPLER = r"""
import os, socket, sys, time
out, stop, end = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
def connect():
    s = socket.socket(socket.AF_UNIX); s.settimeout(2); s.connect("/run/bird/bird.ctl"); f = s.makefile("rb")
    f.readline()
    return s, f
rows, conn = [], None
while time.monotonic() < end and not os.path.exists(stop) and len(rows) < 40000:
    states = None
    try:
        conn = conn or connect()
        conn[0].sendall(b"show bfd sessions\n"); states = {}
        while True:
            line = conn[1].readline()
            if not line:
                raise OSError("BIRD closed the socket")
            fields = line.split()
            if len(fields) >= 3 and fields[1].startswith(b"wg-"):
                states[fields[1].decode()] = fields[2].decode()
            if line[:4].isdigit() and line[4:5] == b" ":
                break
    except OSError:
        states, conn = None, None
    rows.append("%.3f %s" % (time.time(), "?" if states is None else
                             " ".join("%s=%s" % kv for kv in sorted(states.items())) or "-"))
    time.sleep(0.05)
with open(out, "w") as f:
    f.write("\n".join(rows) + "\n")
"""


def sample_bfd(names, seconds):
    """Start the sampler on each host; returns a function that stops them and gives {name: [(t, states)]}."""
    procs = {}
    for name in names:
        on(name).check_output("rm -f /tmp/bfd-samples.stop /tmp/bfd-samples.txt")
        procs[name] = subprocess.Popen(["podman", "exec", name, "python3", "-c", BFD_SAMPLER, "/tmp/bfd-samples.txt",
                                        "/tmp/bfd-samples.stop", str(seconds)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop():
        samples = {}
        for name, proc in procs.items():
            on(name).run("touch /tmp/bfd-samples.stop")
            proc.communicate(timeout=60)
            rows = []
            for line in on(name).file("/tmp/bfd-samples.txt").content_string.splitlines():
                stamp, rest = line.split(" ", 1)
                states = None if rest == "?" else dict(kv.split("=") for kv in rest.split() if "=" in kv)
                rows.append((float(stamp), states))
            samples[name] = rows
        return samples
    return stop


def master_multiplier_as_seen_by_peers():
    """The BFD detection time (ms) the anchors have for their session to the master: the multiplier
    the master's BIRD runs, x 50 ms. BIRD itself shows only the peer's multiplier."""
    return sorted(bfd_timeouts(peer)[IF_TO[MASTER]] for peer in peers_of(MASTER))


def every_bfd_timeout():
    return sorted(set(t for name in (MASTER, USW, USE) for t in bfd_timeouts(name).values()))


def test_a_converge_killed_after_bird_conf_changed_is_completed_by_the_next_run():
    """A converge with a new BFD multiplier is killed (SIGKILL, its whole process group) as soon as the
    master's bird.conf holds the new value, before BIRD reloaded it: BIRD runs the old multiplier while
    the file has the new one. The next converge with the same value finds bird.conf unchanged and still
    reloads BIRD (the record of what BIRD loaded differs from the file): every BIRD then runs it."""
    conf_text = INTERRUPTED.container_file(MASTER, "/etc/bird/bird.conf")
    assert "multiplier 5;" in conf_text()
    assert wait_for(lambda: every_bfd_timeout() == [250], 15), every_bfd_timeout()
    env = dict(os.environ)
    env.pop("TRAINNET_MOLECULE_PSK", None)
    argv = ["ansible-playbook", "-i", INVENTORY, os.path.join(SCENARIO, "converge.yml"),
            "-e", "control_plane_bfd_multiplier=7"]
    try:
        # The reload is at least one task away from the write (the start of BIRD's unit comes first).
        killed, output = INTERRUPTED.converge_killed_when(argv, lambda: "multiplier 7;" in conf_text(), env=env)
        assert killed, "bird.conf never changed: %s" % output[-3000:]
        assert "BIRD | Make BIRD run bird.conf" not in output, output[-3000:]
        # The interrupted state: the file has 7, the master's BIRD still runs 5 (nothing reloads it late).
        time.sleep(2)
        assert "multiplier 7;" in conf_text()
        assert master_multiplier_as_seen_by_peers() == [250, 250]

        rc, output = converge("-e", "control_plane_bfd_multiplier=7")
        assert rc == 0, output[-3000:]
        assert wait_for(lambda: every_bfd_timeout() == [350], 15), every_bfd_timeout()
        # The file was already written: no change there, and still a reload.
        assert task_lines(output, "BIRD | Render the whole configuration", MASTER) == ["ok"], output[-3000:]
        assert task_lines(output, "BIRD | Make BIRD run bird.conf", MASTER) == ["changed"], output[-3000:]
    finally:
        rc, output = converge()  # back to the scenario's multiplier
    assert rc == 0, output[-3000:]
    assert wait_for(lambda: every_bfd_timeout() == [250], 15), every_bfd_timeout()


def running_psks(name):
    """{interface: pre-shared key the running tunnel uses} ('(none)' without one); test keys only."""
    host = on(name)
    return dict((ifname, host.check_output("wg show %s preshared-keys", ifname).split()[-1])
                for ifname in (IF_TO[p] for p in peers_of(name)))


def sampled_converge(*extra, psk=None):
    """A converge with every host's BFD sessions sampled throughout and the tunnels' processes
    before and after."""
    before = dict((name, tunnel_pids(name)) for name in (MASTER, USW, USE))
    stop = sample_bfd((MASTER, USW, USE), 900)
    try:
        time.sleep(1)
        rc, output = converge(*extra, psk=psk, timeout=900)
    finally:
        samples = stop()
    after = dict((name, tunnel_pids(name)) for name in (MASTER, USW, USE))
    return dict(rc=rc, output=output, samples=samples, before=before, after=after)


# The SSH test runs before the pre-shared-key tests: their module fixture puts key A on every host
# until the module ends, and a --limit run without it would change (and roll back) a tunnel.
# --- SSH on the anchors: who may open a session, the open one survives, an unconfirmed table goes back ---

# A stand-in for sshd on port 22 (the image has none): a banner, then an echo. Bounded by `timeout`.
SSH_STANDIN = r"""
import socket, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 22)); s.listen(8)
def serve(c):
    c.sendall(b"SSH-2.0-molecule-standin\r\n")
    while True:
        data = c.recv(64)
        if not data:
            break
        c.sendall(data)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
"""

# An SSH session from the outsider that stays open: connects and reads the banner, then waits for a
# line on stdin and tries one echo over the same connection.
OPEN_SESSION = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], 22), timeout=5)
print(s.recv(64).decode().strip(), flush=True)
sys.stdin.readline()
s.settimeout(5)
try:
    s.sendall(b"ping\n"); print(s.recv(64).decode().strip() or "closed", flush=True)
except OSError as error:
    print("error %s" % error, flush=True)
"""


def new_ssh_connection_opens():
    """Does a new TCP connection from the outsider to the anchor's SSH port open (within 3 s)?"""
    probe = "import socket,sys;s=socket.socket();s.settimeout(3);print(s.connect_ex((sys.argv[1],22)))"
    return outsider(["python3", "-c", probe, UNDERLAY[USW]]).stdout.strip() == "0"


def live_table(pid):
    proc = subprocess.run(["nsenter", "-t", pid, "-n", "nft", "list", "table", "inet", "trainnet_control_plane"],
                          capture_output=True, text=True, timeout=10, check=False)
    return proc.stdout if proc.returncode == 0 else ""


@pytest.fixture(name="ssh_standin")
def fixture_ssh_standin(outsider_address):
    usw = on(USW)
    usw.check_output("systemd-run --unit=cp-test-sshd --collect timeout 600 python3 -c %s", SSH_STANDIN)
    yield outsider_address
    usw.run("systemctl stop cp-test-sshd")
    pid = subprocess.check_output(["podman", "inspect", "-f", "{{.State.Pid}}", USW], text=True).strip()
    if outsider_address in live_table(pid):  # the test stopped early: the scenario's SSH sources (none) back
        converge("--limit", USW)


def test_ssh_sources_an_open_session_and_an_unconfirmed_table(ssh_standin):
    """Issue 23 finding 3. The anchor's SSH port takes new connections only from
    control_plane_ssh_sources (and the tunnels); a session that is open survives a table that no longer
    lists its source (ct state established); and a table the run never confirmed (the run dies after
    loading it, as a controller locked out by it would) goes back by itself after
    control_plane_firewall_confirm_sec, and the next run loads the table on disk again."""
    usw = on(USW)

    def listening():
        return usw.run("ss -Hltn 'sport = :22'").stdout.strip()
    assert wait_for(listening, 10)
    before = counter(usw, "ssh-not-tunnel")
    assert not new_ssh_connection_opens()
    assert counter(usw, "ssh-not-tunnel") > before

    rc, output = converge("--limit", USW, "-e", '{"control_plane_ssh_sources": ["%s/32"]}' % ssh_standin)
    assert rc == 0, output[-3000:]
    assert new_ssh_connection_opens()
    session = subprocess.Popen(["ip", "netns", "exec", WAN_NETNS, "python3", "-c", OPEN_SESSION, UNDERLAY[USW]],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert session.stdout.readline().startswith("SSH-2.0-"), "no banner on the open session"
        # A run that loads a table without the outsider and dies before confirming it.
        pid = subprocess.check_output(["podman", "inspect", "-f", "{{.State.Pid}}", USW], text=True).strip()
        env = dict(os.environ)
        env.pop("TRAINNET_MOLECULE_PSK", None)
        argv = ["ansible-playbook", "-i", INVENTORY, os.path.join(SCENARIO, "converge.yml"),
                "--limit", USW, "-e", "control_plane_firewall_confirm_sec=15"]

        def outsider_gone():
            table = live_table(pid)
            return bool(table) and ssh_standin not in table
        killed, output = INTERRUPTED.converge_killed_when(argv, outsider_gone, env=env)
        loaded_at = time.monotonic()
        assert killed, "the table without the outsider was never loaded: %s" % output[-3000:]
        assert usw.run("systemctl is-active %s.timer" % "trainnet-control-plane-nft-rollback").stdout.strip() == "active", \
            "the run was confirmed before it could be killed (the race this test needs): %s" % output[-2000:]
        # The new table refuses a new session from the outsider; the open one still answers.
        assert not new_ssh_connection_opens()
        session.stdin.write("go\n")
        session.stdin.flush()
        assert session.stdout.readline().strip() == "ping", "the open SSH session died with the new table"
        # Nobody confirmed: the previous table (with the outsider) is back after the confirm time.
        assert wait_for(lambda: ssh_standin in live_table(pid), 30), live_table(pid)
        back_after = time.monotonic() - loaded_at
        assert 12 <= back_after <= 30, back_after
        assert new_ssh_connection_opens()
        # The next run loads the table on disk again (it differs from the last confirmed one).
        rc, output = converge("--limit", USW)
        assert rc == 0, output[-3000:]
        assert task_lines(output, "Firewall | Record the confirmed table", USW) == ["changed"], output[-3000:]
        assert ssh_standin not in live_table(pid)
        assert not new_ssh_connection_opens()
    finally:
        if session.poll() is None:
            session.kill()
        session.wait(timeout=10)


# --- a changed rendezvous address: nothing of the old one stays ---

OTHER_RDV = "198.19.255.9"


def rendezvous_state(name):
    """What a host has of the rendezvous addresses: lo addresses, takeover routes (protocol 252), the
    firewall ruleset."""
    host = on(name)
    return {"lo": host.check_output("ip -o -4 address show dev lo"),
            "takeover": host.check_output("ip -4 route show table main proto 252"),
            "firewall": host.check_output("nft list ruleset")}


def assert_rendezvous_is(new, old):
    """The primary serves `new` on lo, the secondary holds only its takeover route, the master routes
    it through the primary, writes it in its env file and reaches it; `old` is on no host any more."""
    usw, use, master = rendezvous_state(USW), rendezvous_state(USE), rendezvous_state(MASTER)
    assert new in usw["lo"] and old not in usw["lo"], usw["lo"]
    assert new not in use["lo"] and old not in use["lo"], use["lo"]
    assert re.search(r"^local %s dev lo .*metric 4000" % re.escape(new), use["takeover"], re.M), use["takeover"]
    assert old not in use["takeover"], use["takeover"]
    # The secondary's takeover chain names the address; no host's ruleset names the old one.
    assert new in use["firewall"], use["firewall"]
    for name, state in ((USW, usw), (USE, use), (MASTER, master)):
        assert old not in state["firewall"], name
    master_host = on(MASTER)
    assert wait_for(lambda: route_dev(master_host, new) == IF_TO[USW], 15), master_host.check_output("ip route")
    assert wait_for(lambda: not master_host.check_output("ip -4 route show %s/32", old).strip(), 15), \
        master_host.check_output("ip -4 route show %s/32", old)
    assert master_host.run("ping -n -c 3 -W 2 %s", new).rc == 0
    env = master_host.file("/etc/trainnet/control_plane.env").content_string
    assert "MASTER_ADDR=%s" % new in env and old not in env, env


def test_a_changed_rendezvous_address_leaves_nothing_of_the_old_one():
    """Issue 23 finding 7. A converge with another control_plane_rendezvous_address moves everything to
    it (the primary's lo address, the secondary's takeover route, BIRD's route on the master, the
    firewall, the training node's env file) and leaves nothing of the old address on any host; a
    converge back does the same the other way."""
    assert_rendezvous_is(RDV, OTHER_RDV)
    try:
        rc, output = converge("-e", "control_plane_rendezvous_address=" + OTHER_RDV)
        assert rc == 0, output[-3000:]
        assert_rendezvous_is(OTHER_RDV, RDV)
    finally:
        rc, output = converge()
    assert rc == 0, output[-3000:]
    assert_rendezvous_is(RDV, OTHER_RDV)


@pytest.fixture(name="every_host_on_psk_a", scope="module")
def fixture_every_host_on_psk_a():
    """Every host gets pre-shared key A, a change of every tunnel (sampled converge); afterwards the
    scenario's state again (no key), which restarts every tunnel once more."""
    try:
        yield sampled_converge(psk=PSK_A)
    finally:
        rc, output = converge()
        assert rc == 0, output[-3000:]
        for name in (MASTER, USW, USE):
            assert not on(name).file(PSK_FILE).exists
            assert set(running_psks(name).values()) == {"(none)"}, name


def test_a_change_of_every_tunnel_goes_one_path_at_a_time_in_place(every_host_on_psk_a):
    """A converge that changes every tunnel (the pre-shared key of every tunnel changes) goes one path
    (both ends of one tunnel) at a time across the control plane, each verified before the next, and
    in place: every tunnel keeps its process (no restart), each peer is re-added so that the new key
    is proven by a handshake at once. Sampled every 50 ms on every host, no host ever had both of its
    paths down (BFD session not Up, or gone), which with three hosts means no two paths of the
    scenario were down at once."""
    run = every_host_on_psk_a
    assert run["rc"] == 0, run["output"][-3000:]
    for name in (MASTER, USW, USE):
        assert set(running_psks(name).values()) == {PSK_A}, name
        assert run["after"][name] == run["before"][name] and "0" not in run["before"][name].values(), (name, run)
    for name, rows in run["samples"].items():
        mine = [IF_TO[p] for p in peers_of(name)]
        assert len(rows) > 100, (name, len(rows))  # bounded but not starved: it sampled throughout
        down = [(t, [i for i in mine if (states or {}).get(i) != "Up"]) for t, states in rows if states is not None]
        # Never both at once. A lone sample is a starved host's BFD flap (seen here without any change),
        # so two samples in a row with both down is the failure.
        both = [t for t, d in down if len(d) == 2]
        runs = [t for t, prev in zip(both[1:], both) if t - prev < 0.2]
        assert not runs, "%s had both paths down at %s" % (name, both[:20])
    # Each host changed its two tunnels in two of the three path steps, each verified.
    steps = [task_lines(run["output"], "Tunnel path | Apply this end]", name) for name in (MASTER, USW, USE)]
    assert all(r == ["changed", "changed"] for r in steps), steps
    verified = [task_lines(run["output"], "Tunnel path | Verify the peer answers", name) for name in (MASTER, USW, USE)]
    assert all(r == ["ok", "ok"] for r in verified), verified


def test_a_preshared_key_changed_under_limit_is_rolled_back(every_host_on_psk_a):
    """Every host has pre-shared key A; a run limited to the master gives it key B, which no peer has:
    the first tunnel changed to B reaches no peer (its peer is re-added, so the old session does not
    hide the mismatch), so its previous configuration goes back (files and live), the rollout stops
    before the master's other tunnel and the run fails saying why. Every tunnel then still carries
    traffic with A, and every configuration file of the master holds A."""
    assert every_host_on_psk_a["rc"] == 0, every_host_on_psk_a["output"][-3000:]

    def configured_psks():
        return on(MASTER).check_output("grep -h '^PresharedKey' /etc/trainnet/wireguard/wg-*.conf").split()
    assert set(configured_psks()) == {"PresharedKey", "=", PSK_A}
    # The shortest verify budget: the rollback comes after it.
    rc, output = converge("--limit", MASTER, "-e", "control_plane_verify_timeout_sec=5", psk=PSK_B)
    assert rc != 0, output[-3000:]
    master = on(MASTER)
    assert set(configured_psks()) == {"PresharedKey", "=", PSK_A}
    assert set(running_psks(MASTER).values()) == {PSK_A}
    assert "pre-shared key" in output and "not with --limit" in output, output[-3000:]
    assert "the previous configuration was put back and every address answers again" in output, output[-3000:]
    # One path changed (and rolled back); the rollout stopped before the other one. (Failures go to
    # stderr, which converge() appends after stdout: they are counted, not placed under their task.)
    assert task_lines(output, "Tunnel path | Apply this end]", MASTER) == ["changed"], output[-3000:]
    assert output.count("Module failed: wg-") == 1, output[-3000:]
    for peer in peers_of(MASTER):
        ifname = IF_TO[peer]
        assert wait_for(lambda ifname=ifname, peer=peer: master.run(
            "ping -n -c 1 -W 1 -I %s %s", ifname, TUNNEL_ADDRESS[peer]).rc == 0, 30), \
            "%s: no traffic through %s after the rollback" % (MASTER, ifname)
    for name in (MASTER, USW, USE):
        test_bfd_sessions_up_on_every_tunnel(on(name))
