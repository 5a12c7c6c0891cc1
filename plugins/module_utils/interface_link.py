# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure logic behind the interface_link module.

Nothing here runs a command or touches an interface: it parses ``tc qdisc show`` output
(JSON and text), validates the requested values, plans the change and renders the diff text.
Standard library only; imports on Python 3.8+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.longhaul.trainnet.plugins.module_utils.probe_result import classify_qdisc_probe

MTU_MIN = 576
MTU_MAX = 9000
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


# --- planning -------------------------------------------------------------------------------

def plan_link(mtu_before, qdisc_before, want_mtu=None, want_qdisc=None, qdisc_available=None,
              rollback_seconds=0, rollback_possible=True, pending_rollback_mtu=None):
    """Decide what the module will do.

    ``qdisc_available`` is True/False when the probe could tell, None when it could not (then
    the change is planned and the real ``tc`` call decides). ``pending_rollback_mtu`` is the
    MTU an earlier, still armed rollback for this interface would restore: a new rollback
    keeps that target (the last confirmed MTU) instead of the current, unconfirmed one.

    Returns a dict with the plan (``mtu``, ``qdisc``, ``rollback`` statuses), the predicted
    values (``mtu_after``, ``qdisc_after``), ``rollback_mtu`` (what an armed rollback restores,
    else None) and ``changed``.
    """
    if want_mtu is None or want_mtu == mtu_before:
        mtu_status = STATUS_UNCHANGED
        mtu_after = mtu_before
    else:
        mtu_status = STATUS_CHANGED
        mtu_after = want_mtu

    if want_qdisc is None or want_qdisc == qdisc_before:
        qdisc_status = STATUS_UNCHANGED
        qdisc_after = qdisc_before
    elif qdisc_available is False:
        qdisc_status = STATUS_UNAVAILABLE
        qdisc_after = qdisc_before
    else:
        qdisc_status = STATUS_CHANGED
        qdisc_after = want_qdisc

    if mtu_status != STATUS_CHANGED or not rollback_seconds:
        rollback = ROLLBACK_NONE
    elif rollback_possible:
        rollback = ROLLBACK_ARM
    else:
        rollback = ROLLBACK_UNAVAILABLE
    rollback_mtu = None
    if rollback == ROLLBACK_ARM:
        rollback_mtu = mtu_before if pending_rollback_mtu is None else pending_rollback_mtu

    return {
        "mtu": mtu_status,
        "qdisc": qdisc_status,
        "rollback": rollback,
        "rollback_mtu": rollback_mtu,
        "mtu_before": mtu_before,
        "mtu_after": mtu_after,
        "qdisc_before": qdisc_before,
        "qdisc_after": qdisc_after,
        "changed": mtu_status == STATUS_CHANGED or qdisc_status == STATUS_CHANGED,
    }


# --- rollback -------------------------------------------------------------------------------

def rollback_unit_name(name):
    """systemd unit name for the MTU rollback of interface ``name`` (without suffix).

    Characters systemd would treat specially ('@' templates, '\\' escapes, anything outside
    [A-Za-z0-9_.-]) become ``_xNN`` so the name stays usable in a plain ``systemctl`` call.
    """
    safe = []
    for char in name:
        if _UNIT_SAFE.match(char):
            safe.append(char)
        else:
            safe.extend("_x%02x" % byte for byte in char.encode("utf-8"))
    return ROLLBACK_UNIT_PREFIX + "".join(safe)


def rollback_argv(systemd_run, unit, seconds, ip_bin, name, mtu):
    """argv that arms a one-shot timer restoring ``mtu`` on ``name`` after ``seconds``."""
    return [
        systemd_run,
        "--unit=%s" % unit,
        "--description=trainnet: restore MTU %d on %s unless confirmed" % (mtu, name),
        "--on-active=%ds" % seconds,
        "--timer-property=AccuracySec=1s",
        ip_bin, "link", "set", "dev", name, "mtu", str(mtu),
    ]


_PENDING_ARGV = re.compile(r"argv\[\]=\S*ip link set dev (?P<name>\S+) mtu (?P<mtu>\d+)(?:\s|;|$)")


def parse_pending_rollback_mtu(show_output, name):
    """MTU a pending rollback unit would restore, from ``systemctl show -p ExecStart <unit>``.

    Returns None when the output does not name an ``ip link set dev <name> mtu N`` command.
    """
    for match in _PENDING_ARGV.finditer(show_output or ""):
        if match.group("name") == name:
            return int(match.group("mtu"))
    return None


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
