# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure logic behind the interface_link module.

Nothing here runs a command or touches an interface: it parses ``tc qdisc show`` output
(JSON and text), validates the requested values, plans the change (including where the MTU
rollback timer must run and which DF probes check the data path), and renders the diff text.
Standard library only; imports on Python 3.8+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.longhaul.trainnet.plugins.module_utils.mtu import MTU_MAX, MTU_MIN, icmp_payload
from ansible_collections.longhaul.trainnet.plugins.module_utils.probe_result import classify_qdisc_probe

ROLLBACK_MIN = 10
ROLLBACK_MAX = 3600

# Root qdiscs that ``tc qdisc replace dev X root <kind>`` accepts without parameters.
QDISC_CHOICES = ("fq", "fq_codel", "cake", "pfifo", "sfq")

ROLLBACK_UNIT_PREFIX = "trainnet-mtu-rollback-"


# A device that was never brought up has the kernel's noop qdisc, which the qdisc dump leaves
# out: ``tc qdisc show dev X root`` prints nothing while ``ip link`` says "qdisc noop".
NO_ROOT_QDISC = "noop"

STATUS_UNCHANGED = "unchanged"
STATUS_CHANGED = "changed"
STATUS_UNAVAILABLE = "unavailable"

ROLLBACK_NONE = "none"
ROLLBACK_ARM = "arm"
ROLLBACK_UNAVAILABLE = "unavailable"
# A timer armed by an earlier, unconfirmed run is still pending and nothing new is armed.
ROLLBACK_PENDING = "pending"

SHAPE_ROOT = "root"
SHAPE_MQ = "mq"
# The handle given to an mq root the kernel created itself (handle 0:), whose children cannot
# be addressed by ``parent``; re-creating it with a handle makes them addressable.
MQ_HANDLE = "1:"

_UNIT_SAFE = re.compile(r"[A-Za-z0-9_.-]")


# --- validation ---------------------------------------------------------------------------

def validate_mtu(mtu):
    """Return an error message for an out-of-range ``mtu`` option, or None."""
    if mtu is None:
        return None
    if mtu < MTU_MIN or mtu > MTU_MAX:
        return "mtu must be between %d and %d, got %d" % (MTU_MIN, MTU_MAX, mtu)
    return None


def validate_rollback_seconds(seconds):
    """Return an error message for a bad ``rollback_seconds`` option, or None (0 = off)."""
    if seconds is None or seconds == 0:
        return None
    if seconds < ROLLBACK_MIN or seconds > ROLLBACK_MAX:
        return "rollback_seconds must be 0 (off) or between %d and %d, got %d" % (
            ROLLBACK_MIN, ROLLBACK_MAX, seconds)
    return None


def validate_interface_name(name):
    """Return an error message for a name that cannot be an interface name, or None.

    Linux interface names are 1-15 bytes without '/', ':' or whitespace; '.' and '..' are
    reserved. The check also keeps the name from escaping /sys/class/net.
    """
    if not name:
        return "name must not be empty"
    if name in (".", "..") or "/" in name or ":" in name or re.search(r"\s", name):
        return "name %r is not a valid interface name" % name
    if len(name.encode("utf-8")) > 15:
        return "name %r is longer than 15 bytes, the Linux limit for interface names" % name
    return None


def missing_interface_message(name, available):
    """The failure message for an interface that does not exist."""
    names = sorted(available)
    return "interface %s does not exist; interfaces here: %s" % (
        name, ", ".join(names) if names else "(none)")


# --- parsing --------------------------------------------------------------------------------

def parse_mtu(text):
    """Parse the content of /sys/class/net/<name>/mtu."""
    value = (text or "").strip()
    if not value.isdigit():
        raise ValueError("cannot parse MTU from %r" % text)
    return int(value)


def tc_json_unsupported(rc, stdout, stderr):
    """True when tc rejected ``-j`` (iproute2 older than JSON output for tc)."""
    if rc == 0:
        return False
    text = "%s\n%s" % (stdout or "", stderr or "")
    return bool(re.search(r'option "?-j(son)?"? is unknown', text, re.IGNORECASE))


def qdisc_kind_unknown(stderr):
    """True when tc's error says the qdisc kind does not exist in this kernel (the same
    judgement kernel_capability makes of its probes)."""
    return classify_qdisc_probe(1, "", stderr)[0] is False


def parse_qdisc_json(text):
    """Root qdisc kind from ``tc -j qdisc show dev X [root]``.

    Returns the kind (str), NO_ROOT_QDISC for an empty list, and raises ValueError when the
    text is not the JSON list tc prints.
    """
    data = json.loads(text)
    if not isinstance(data, list):
        raise ValueError("tc JSON output is not a list")
    entries = [e for e in data if isinstance(e, dict) and e.get("kind")]
    if not entries:
        return NO_ROOT_QDISC
    for entry in entries:
        if entry.get("root") is True:
            return str(entry["kind"])
    # "tc qdisc show dev X root" lists only the root; older tc versions omit "root": true.
    for entry in entries:
        if "parent" not in entry:
            return str(entry["kind"])
    raise ValueError("no root qdisc in tc JSON output")


_TEXT_LINE = re.compile(r"^qdisc\s+(?P<kind>\S+)\s+(?P<handle>\S+)\s+(?P<rest>.*)$")


def parse_qdisc_text(text):
    """Root qdisc kind from plain ``tc qdisc show dev X [root]``.

    Lines look like ``qdisc noqueue 0: root refcnt 2`` or ``qdisc fq 8001: parent 1:2 ...``.
    Returns NO_ROOT_QDISC for empty output; raises ValueError for anything else unparseable.
    """
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return NO_ROOT_QDISC
    parsed = []
    for line in lines:
        match = _TEXT_LINE.match(line)
        if match:
            parsed.append(match)
    if not parsed:
        raise ValueError("cannot parse tc qdisc output: %r" % lines[0])
    for match in parsed:
        words = match.group("rest").split()
        if "root" in words:
            return match.group("kind")
    for match in parsed:
        if "parent" not in match.group("rest").split():
            return match.group("kind")
    raise ValueError("no root qdisc in tc output")


def parse_root_qdisc(text):
    """Root qdisc kind from tc output, JSON first, then text.

    Some tc builds accept ``-j`` but print text for qdiscs, so the text parser is the fallback
    for any output that is not JSON.
    """
    stripped = (text or "").strip()
    if stripped.startswith("["):
        try:
            return parse_qdisc_json(stripped)
        except ValueError:
            pass
    return parse_qdisc_text(stripped)


# --- the whole qdisc tree (mq roots and their per-queue children) ----------------------------

def _parent_major(parent):
    """'1:4' -> '1', ':4' -> '0' (tc prints the kernel's handle 0 as an empty major)."""
    major = (parent or "").split(":", 1)[0]
    return major.lstrip("0") or "0"


def _minor(parent):
    try:
        return int((parent or "").split(":", 1)[1] or "0", 16)
    except (IndexError, ValueError):
        return 0


def _tree(root, handle, entries):
    """Assemble the tree: the root kind and handle plus, for an mq root, its children."""
    children = []
    if root == SHAPE_MQ and handle is not None:
        major = _parent_major(handle)
        for parent, kind in entries:
            if parent and _parent_major(parent) == major:
                children.append({"parent": parent, "kind": kind})
        children.sort(key=lambda child: _minor(child["parent"]))
    return {"root": root, "handle": handle, "children": children}


def parse_qdisc_tree(text):
    """Root qdisc, its handle and (for an ``mq`` root) its per-queue children.

    Input is the whole dump of ``tc [-j] qdisc show dev X`` (JSON first, text as fallback).
    Returns ``{"root": kind, "handle": "1:" or None, "children": [{"parent", "kind"}, ...]}``
    with the children in queue order; ``root`` is NO_ROOT_QDISC for an empty dump. Raises
    ValueError for output that is neither.
    """
    stripped = (text or "").strip()
    root = parse_root_qdisc(stripped)
    if root == NO_ROOT_QDISC:
        return {"root": root, "handle": None, "children": []}
    handle = None
    entries = []
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except ValueError:
            data = None
        if isinstance(data, list):
            for entry in data:
                if not isinstance(entry, dict) or not entry.get("kind"):
                    continue
                if entry.get("root") is True or ("parent" not in entry and handle is None):
                    handle = handle or entry.get("handle")
                else:
                    entries.append((entry.get("parent"), str(entry["kind"])))
            return _tree(root, handle, entries)
    for line in stripped.splitlines():
        match = _TEXT_LINE.match(line.strip())
        if not match:
            continue
        words = match.group("rest").split()
        if "root" in words:
            handle = match.group("handle")
        elif "parent" in words:
            index = words.index("parent")
            if index + 1 < len(words):
                entries.append((words[index + 1], match.group("kind")))
    return _tree(root, handle, entries)


def as_tree(qdisc):
    """A bare kind (str) is a single root without children."""
    if isinstance(qdisc, dict):
        return qdisc
    return {"root": qdisc, "handle": None, "children": []}


def qdisc_shape(tree):
    """SHAPE_MQ for an mq root with per-queue children, else SHAPE_ROOT."""
    tree = as_tree(tree)
    return SHAPE_MQ if tree["root"] == SHAPE_MQ and tree["children"] else SHAPE_ROOT


def describe_qdisc(tree):
    """'fq' for a single root; 'mq(fq)' or 'mq(fq,pfifo_fast)' for an mq root and its children."""
    tree = as_tree(tree)
    if qdisc_shape(tree) == SHAPE_MQ:
        return "%s(%s)" % (tree["root"], ",".join(sorted(set(c["kind"] for c in tree["children"]))))
    return tree["root"]


def mq_needs_handle(tree):
    """True for an mq root the kernel made itself (handle 0:): tc cannot address its children."""
    tree = as_tree(tree)
    return qdisc_shape(tree) == SHAPE_MQ and _parent_major(tree["handle"]) == "0"


def qdisc_commands(tree, kind):
    """tc argument lists (after ``tc``) that give ``kind`` to the device described by ``tree``.

    A single root is replaced. An mq root is kept (one qdisc per transmit queue, no shared
    lock) and each child that is not ``kind`` yet is replaced; an mq without a handle is first
    re-created with MQ_HANDLE, after which all its children are replaced. The device name is
    left out: callers insert ``dev X``.
    """
    tree = as_tree(tree)
    if qdisc_shape(tree) != SHAPE_MQ:
        return [["root", kind]]
    commands = []
    children = tree["children"]
    if qdisc_is(tree, kind):
        return commands
    if mq_needs_handle(tree):
        commands.append(["root", "handle", MQ_HANDLE, SHAPE_MQ])
        major = MQ_HANDLE.rstrip(":")
        return commands + [["parent", "%s:%x" % (major, _minor(c["parent"])), kind] for c in children]
    return [["parent", c["parent"], kind] for c in children if c["kind"] != kind]


def qdisc_is(tree, kind):
    """Whether the device already has ``kind`` where it matters (root, or every mq child)."""
    tree = as_tree(tree)
    if qdisc_shape(tree) == SHAPE_MQ:
        return all(c["kind"] == kind for c in tree["children"])
    return tree["root"] == kind


def predicted_tree(tree, kind):
    """The tree after qdisc_commands(tree, kind) ran."""
    tree = as_tree(tree)
    if qdisc_shape(tree) != SHAPE_MQ:
        return {"root": kind, "handle": None, "children": []}
    return {"root": tree["root"], "handle": tree["handle"],
            "children": [{"parent": c["parent"], "kind": kind} for c in tree["children"]]}


# --- planning -------------------------------------------------------------------------------

def plan_link(mtu_before, qdisc_before, want_mtu=None, want_qdisc=None, qdisc_available=None,
              rollback_seconds=0, rollback_possible=True, pending_rollback_mtu=None,
              verify_peers=None):
    """Decide what the module will do.

    ``qdisc_before`` is a kind (single root) or a parse_qdisc_tree() dict. ``qdisc_available``
    is True/False when the probe could tell, None when it could not (then the change is
    planned and the real ``tc`` call decides). ``pending_rollback_mtu`` is the MTU an earlier,
    still armed rollback for this interface would restore: a new rollback keeps that target
    (the last confirmed MTU) instead of the current, unconfirmed one, and without a new one the
    pending timer is reported (``rollback`` = ROLLBACK_PENDING) so the caller confirms or
    disarms it. ``verify_peers`` is a list of ``{"peer", "address", "ipv6"[, "route_mtu"]}``:
    each gets DF probes at the new MTU whenever the MTU changes or a pending timer awaits
    confirmation; at ``route_mtu`` instead where the route to that peer carries a smaller MTU
    (a per-destination path MTU, module path_routes): packets to it are never larger.

    Returns a dict with the plan (``mtu``, ``qdisc``, ``rollback`` statuses), the predicted
    values (``mtu_after``, ``qdisc_after``), ``rollback_mtu`` (what an armed or pending
    rollback restores, else None), ``verify`` (the probes) and ``changed``.
    """
    tree = as_tree(qdisc_before)
    if want_mtu is None or want_mtu == mtu_before:
        mtu_status = STATUS_UNCHANGED
        mtu_after = mtu_before
    else:
        mtu_status = STATUS_CHANGED
        mtu_after = want_mtu

    after_tree = tree
    if want_qdisc is None or qdisc_is(tree, want_qdisc):
        qdisc_status = STATUS_UNCHANGED
    elif qdisc_available is False:
        qdisc_status = STATUS_UNAVAILABLE
    else:
        qdisc_status = STATUS_CHANGED
        after_tree = predicted_tree(tree, want_qdisc)

    pending = pending_rollback_mtu is not None
    if mtu_status == STATUS_CHANGED and rollback_seconds:
        rollback = ROLLBACK_ARM if rollback_possible else ROLLBACK_UNAVAILABLE
    elif pending:
        rollback = ROLLBACK_PENDING
    else:
        rollback = ROLLBACK_NONE
    rollback_mtu = None
    if rollback == ROLLBACK_PENDING or (rollback == ROLLBACK_ARM and pending):
        rollback_mtu = pending_rollback_mtu
    elif rollback == ROLLBACK_ARM:
        rollback_mtu = mtu_before

    verify = []
    if want_mtu is not None and (mtu_status == STATUS_CHANGED or rollback == ROLLBACK_PENDING):
        for peer in verify_peers or []:
            size = min(mtu_after, peer.get("route_mtu") or mtu_after)
            verify.append(dict(peer, payload=icmp_payload(size, peer.get("ipv6", False))))

    return {
        "mtu": mtu_status,
        "qdisc": qdisc_status,
        "qdisc_shape": qdisc_shape(tree),
        "rollback": rollback,
        "rollback_mtu": rollback_mtu,
        "mtu_before": mtu_before,
        "mtu_after": mtu_after,
        "qdisc_before": describe_qdisc(tree),
        "qdisc_after": describe_qdisc(after_tree),
        "verify": verify,
        "changed": mtu_status == STATUS_CHANGED or qdisc_status == STATUS_CHANGED,
    }


# --- rollback -------------------------------------------------------------------------------

def rollback_unit_name(name, netns_id=None):
    """systemd unit name for the MTU rollback of interface ``name`` (without suffix).

    Characters systemd would treat specially ('@' templates, '\\' escapes, anything outside
    [A-Za-z0-9_.-]) become ``_xNN`` so the name stays usable in a plain ``systemctl`` call.
    ``netns_id`` (the inode of the interface's network namespace) is appended as ``-ns<id>``:
    every container and namespace has its own ``eth0``, and one systemd may serve several.
    """
    safe = []
    for char in name:
        if _UNIT_SAFE.match(char):
            safe.append(char)
        else:
            safe.extend("_x%02x" % byte for byte in char.encode("utf-8"))
    suffix = "-ns%d" % netns_id if netns_id is not None else ""
    return ROLLBACK_UNIT_PREFIX + "".join(safe) + suffix


def rollback_netns(own, pid1, named):
    """Where the rollback unit must run, judged from namespace identities.

    ``own`` and ``pid1`` are the (inode, device) of /proc/self/ns/net and /proc/1/ns/net (None
    when unreadable); ``named`` is a list of (path, (inode, device)) for the bind mounts in
    /run/netns. systemd starts units in its own (PID 1's) network namespace, so a rollback for
    an interface of another namespace must name that namespace by a path that outlives this
    process. Returns (netns_id, path, error): ``path`` is None when PID 1 shares our namespace;
    ``error`` says why no rollback can be pinned (then netns_id/path are None).
    """
    if own is None:
        return None, None, "cannot read /proc/self/ns/net"
    if pid1 is None:
        return None, None, ("cannot read /proc/1/ns/net (PID 1's network namespace; needs root), "
                            "so the rollback could run against another namespace's interface")
    if tuple(own) == tuple(pid1):
        return own[0], None, None
    for path, ident in sorted(named or []):
        if ident is not None and tuple(ident) == tuple(own):
            return own[0], path, None
    return None, None, ("this module runs in network namespace %d, not in PID 1's (%d), and no "
                        "/run/netns entry names it; systemd would run the rollback in PID 1's "
                        "namespace and change another interface" % (own[0], pid1[0]))


def rollback_argv(systemd_run, unit, seconds, ip_bin, name, mtu, netns_path=None):
    """argv that arms a one-shot timer restoring ``mtu`` on ``name`` after ``seconds``.

    ``netns_path`` pins the service to that network namespace (NetworkNamespacePath=).
    """
    argv = [
        systemd_run,
        "--unit=%s" % unit,
        "--description=trainnet: restore MTU %d on %s unless confirmed" % (mtu, name),
        "--on-active=%ds" % seconds,
        "--timer-property=AccuracySec=1s",
    ]
    if netns_path:
        argv.append("--property=NetworkNamespacePath=%s" % netns_path)
    return argv + [ip_bin, "link", "set", "dev", name, "mtu", str(mtu)]


_PENDING_ARGV = re.compile(r"argv\[\]=\S*ip link set dev (?P<name>\S+) mtu (?P<mtu>\d+)(?:\s|;|$)")


def parse_pending_rollback_mtu(show_output, name):
    """MTU a pending rollback unit would restore, from ``systemctl show -p ExecStart <unit>``.

    Returns None when the output does not name an ``ip link set dev <name> mtu N`` command.
    """
    for match in _PENDING_ARGV.finditer(show_output or ""):
        if match.group("name") == name:
            return int(match.group("mtu"))
    return None


# --- DF probes on the data path ---------------------------------------------------------------

PROBE_COUNT = 3
# The ping payload that proves a peer answers at all (ping's default size).
SMALL_PAYLOAD = 56

PROBE_OK = "ok"
PROBE_TOO_BIG = "too_big"
PROBE_PEER_SILENT = "peer_silent"
PROBE_UNRESOLVED = "unresolved"


def ping_argv(ping, address, payload, ipv6=False, dont_fragment=True):
    """argv of a bounded ping: PROBE_COUNT echoes, 2 s wait each, DF set unless told not to."""
    argv = [ping, "-6" if ipv6 else "-4", "-n", "-c", str(PROBE_COUNT), "-i", "0.2", "-W", "2",
            "-s", str(payload)]
    if dont_fragment:
        argv += ["-M", "do"]
    return argv + [address]


_PMTU = re.compile(r"mtu\s*=\s*(\d+)")


def reported_path_mtu(output):
    """The MTU named by 'Frag needed and DF set (mtu = 1400)' or 'message too long, mtu=1400'."""
    match = _PMTU.search(output or "")
    return int(match.group(1)) if match else None


def parse_route_get_mtu(text):
    """The route MTU (``mtu`` metric) in ``ip -j route get ADDR`` output, else None."""
    try:
        data = json.loads(text or "[]")
    except ValueError:
        return None
    for entry in data if isinstance(data, list) else []:
        for metrics in entry.get("metrics") or [] if isinstance(entry, dict) else []:
            if isinstance(metrics, dict) and isinstance(metrics.get("mtu"), int):
                return metrics["mtu"]
    return None


def judge_probe(small_rc, big_rc, big_output=""):
    """Verdict on one peer: a small ping without DF, then full-size DF pings.

    Only a peer that answers small pings but not full-size ones shows the MTU is too big for
    the path; a peer that answers nothing says nothing about the MTU (it may be down).
    """
    if big_rc == 0:
        return PROBE_OK
    if small_rc != 0:
        return PROBE_PEER_SILENT
    return PROBE_TOO_BIG


def probe_failure_message(name, mtu, restored_to, probe, detail):
    """Failure message for a full-size DF probe that did not get through."""
    peer = probe["peer"]
    where = peer if probe["address"] == peer else "%s (%s)" % (peer, probe["address"])
    path_mtu = reported_path_mtu(detail)
    hint = " (the path reports MTU %d)" % path_mtu if path_mtu else ""
    return ("MTU %d on %s does not reach data-plane peer %s: %d-byte packets (ping -M do -s %d) got "
            "no reply while small pings did%s; the MTU was rolled back to %s. Choose an MTU the "
            "path carries (data_plane_mtu)." % (mtu, name, where, mtu, probe["payload"], hint,
                                                restored_to))


# --- diff -----------------------------------------------------------------------------------

def render_state(mtu, qdisc):
    """The text one side of the diff shows."""
    return "mtu: %s\nqdisc: %s\n" % (mtu, qdisc)


def build_diff(name, mtu_before, qdisc_before, mtu_after, qdisc_after):
    """Ansible diff dict (before/after text with headers naming the interface)."""
    return {
        "before_header": "interface %s (before)" % name,
        "after_header": "interface %s (after)" % name,
        "before": render_state(mtu_before, qdisc_before),
        "after": render_state(mtu_after, qdisc_after),
    }
