"""playbooks/validate.yml against the converged control plane: one row per host with tunnels 2/2,
BFD 2/2 and the right active anchor (local on the primary), and strict mode failing while a BFD
session is down (BFD dropped on one tunnel of the master by a table of the test's own)."""

import json
import os
import re
import subprocess
import time

import testinfra

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PLAYBOOK = os.path.join(os.environ["MOLECULE_PROJECT_DIRECTORY"], "playbooks", "validate.yml")
MASTER, USW, USE = "trainnet-molecule-cp-master", "trainnet-molecule-cp-usw", "trainnet-molecule-cp-use"
IF_USE = "wg-id3"  # the master's tunnel to USE
IF_USW = "wg-id2"  # the master's tunnel to USW
ROW = re.compile(r"(trainnet-molecule-cp-\w+) \| (\d+)/(\d+) \| ([^|]+?) \| (\d+)/(\d+) \| ([^|]+?) \| ([^\"]*)\"")
TABLE = "trainnet_test_validate"


def on(name):
    return testinfra.get_host("podman-nsenter://" + name)


def validate(*extra):
    # The kernel rows are not under test here (trainnet_validate_require=[]).
    proc = subprocess.run(
        ["ansible-playbook", "-i", INVENTORY, PLAYBOOK, "-e", json.dumps({"trainnet_validate_require": []})]
        + list(extra),
        env=dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", ANSIBLE_STDOUT_CALLBACK="default",
                 ANSIBLE_CALLBACK_RESULT_FORMAT="json"),
        capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    rows = dict((m.group(1), {"tunnels": (int(m.group(2)), int(m.group(3))), "handshake": m.group(4),
                              "bfd": (int(m.group(5)), int(m.group(6))), "anchor": m.group(7), "note": m.group(8)})
                for m in ROW.finditer(out))
    return proc.returncode, rows, out


def bfd_state(host, ifname):
    match = re.search(r"^\S+\s+%s\s+(\S+)" % re.escape(ifname), host.check_output("birdc show bfd sessions"), re.M)
    return match.group(1) if match else None


def wait_for(predicate, seconds, step=0.5):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def all_bfd_up():
    return all(bfd_state(on(name), ifname) == "Up" for name, ifname in
               ((MASTER, "wg-id2"), (MASTER, "wg-id3"), (USW, "wg-id1"), (USW, "wg-id3"),
                (USE, "wg-id1"), (USE, "wg-id2")))


def test_validate_reports_the_control_plane_per_host():
    assert wait_for(all_bfd_up, 20)  # an earlier test cut and restored a path
    rc, rows, out = validate("--check")
    assert rc == 0, out[-3000:]
    assert set(rows) == {MASTER, USW, USE}, out[-3000:]
    for name, row in rows.items():
        assert row["tunnels"] == (2, 2) and row["bfd"] == (2, 2), (name, row)
        age = re.match(r"^(\d+) s$", row["handshake"])
        assert age and int(age.group(1)) <= 180, (name, row)
        assert row["note"] == "-", (name, row)
    assert rows[MASTER]["anchor"] == USW
    assert rows[USE]["anchor"] == USW  # the secondary reaches the primary over its tunnel
    assert rows[USW]["anchor"] == "local"  # the primary serves the rendezvous address
    assert "changed=0" in out and "changed=1" not in out


def validate_with_master_bfd(expected, *extra):
    """validate.yml, run again (at most 3 runs) while the master's BFD count is not `expected`
    because the session the test did not cut (to USW) is down too: on a loaded 2-core CI host a
    BFD session can restart with no cut (one CI run saw 0/2 for 1/2)."""
    runs = 0
    while True:
        runs += 1
        rc, rows, out = validate(*extra)
        if rows.get(MASTER, {}).get("bfd") == expected or runs == 3:
            return rc, rows, out
        wait_for(lambda: bfd_state(on(MASTER), IF_USW) == "Up", 20)


def test_strict_fails_while_a_bfd_session_is_down():
    master = on(MASTER)
    master.check_output(
        "nft -f - <<'EOF'\ntable inet %s {\n  chain input {\n    type filter hook input priority filter - 10;\n"
        "    iifname \"%s\" udp dport 3784 drop\n  }\n}\nEOF" % (TABLE, IF_USE))
    try:
        assert wait_for(lambda: bfd_state(master, IF_USE) != "Up", 10)
        rc, rows, out = validate_with_master_bfd((1, 2), "-e", "trainnet_validate_control_plane_strict=true")
        assert rc != 0, out[-3000:]
        assert rows[MASTER]["bfd"] == (1, 2) and rows[MASTER]["tunnels"] == (2, 2), rows
        assert "control plane degraded" in out and IF_USE in out, out[-3000:]
        # Report only by default: the same state does not fail.
        rc, rows, out = validate_with_master_bfd((1, 2))
        assert rc == 0 and rows[MASTER]["bfd"] == (1, 2), out[-3000:]
    finally:
        master.run("nft delete table inet %s", TABLE)
    assert wait_for(all_bfd_up, 20)
