#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: interface_link
short_description: Set the MTU and qdisc of one interface, with a self-arming rollback and data-path check
version_added: 0.1.0
description:
  - Sets the MTU and the queueing discipline (qdisc) of one network interface.
  - The module predicts first, then acts. It reads the current MTU from
    C(/sys/class/net/<name>/mtu) and the qdiscs from C(tc -j qdisc show dev <name>)
    (text output where C(tc) has no JSON), plans the change, returns the plan in check mode
    and otherwise applies it with C(ip link set dev <name> mtu <mtu>) and C(tc qdisc replace),
    then reads both back and fails if a value did not stick. Check mode returns what the real
    run would (only RV(verify_results) needs the real change).
  - On a single-queue device the root qdisc is replaced. A multi-queue device whose root is
    C(mq) keeps C(mq) (one qdisc per transmit queue, no lock shared by all queues) and each
    per-queue child gets O(qdisc); an C(mq) the kernel created without a handle (C(0:)) is
    first re-created as C(mq) with handle C(1:) so its children can be addressed.
  - Whether the kernel has the wanted qdisc is predicted without touching the interface, by
    adding it to the loopback device of a throwaway network namespace
    (C(unshare --net -- tc qdisc add dev lo root <qdisc>)). A missing qdisc is reported as
    O(qdisc) status V(unavailable) with a warning, or fails the task with O(strict=true).
  - MTU changes can cut the controller off from the host. With O(rollback_seconds) the module
    first arms a systemd timer on the host that restores the old MTU after that many seconds
    (commit-confirm pattern). The caller checks connectivity and disarms the timer with
    C(systemctl stop <rollback_unit>.timer); if the controller loses the host, the host
    restores the old MTU by itself.
  - systemd starts units in its own (PID 1's) network namespace. When the module runs in
    another network namespace (C(ip netns exec)), the rollback unit is pinned to it with
    C(NetworkNamespacePath=/run/netns/<name>); a namespace without such a path gets no timer
    (rollback V(unavailable)). The unit name ends in C(-ns<inode of the namespace>), so the
    C(eth0) of every namespace and container has its own timer.
  - Every run looks for a rollback timer of this interface that an earlier run armed and
    nobody confirmed (for example after Ctrl-C during the connectivity check). It is reported
    with a warning, as RV(plan.rollback=pending) and in RV(rollback_unit), even when the MTU
    already has the wanted value, so the caller confirms (disarms) or lets it fire. A run that
    changes the MTU again while it is armed replaces it with one that restores the same MTU
    (the last confirmed one, not the unconfirmed current one). Units left over from earlier
    runs (fired, stopped or failed) are stopped and reset first, so re-runs can arm again.
  - With O(verify_peers), whenever the MTU changes (or a pending timer awaits confirmation) the
    module pings each peer with full-size packets and the Don't Fragment bit
    (C(ping -M do -s <MTU - 28>), C(MTU - 48) for IPv6). A peer that answers small pings but
    not full-size ones proves the path does not carry the MTU; the MTU is put back, a timer
    with nothing left to restore is disarmed, and the task fails naming the peer and the size.
    Where the route to a peer carries a smaller MTU (C(ip route get), for example one set by
    M(longhaul.trainnet.path_routes) for a path below the interface MTU), that peer is probed
    at the route's MTU, as no packet to it is larger.
    A peer that answers no ping at all, or does not resolve, is reported with a warning.
author:
  - longhaul.trainnet maintainers (@longhaul)
requirements:
  - C(ip) and C(tc) from iproute2 on the managed host.
  - C(unshare) (util-linux) to predict whether a qdisc exists; without it the real C(tc) call
    decides.
  - systemd (C(systemd-run), C(systemctl)) for O(rollback_seconds); systemd 242 or later
    when the module runs outside PID 1's network namespace.
  - C(ping) (iputils) for O(verify_peers).
options:
  name:
    description:
      - Name of the interface, for example C(eth1).
      - The module fails, listing the interfaces that exist, when there is no such interface.
    type: str
    required: true
  mtu:
    description:
      - Wanted MTU in bytes, from 576 to 9000.
      - Omit to leave the MTU alone.
    type: int
  qdisc:
    description:
      - Wanted qdisc, set with C(tc qdisc replace) (default parameters of that qdisc) - as the
        root of a single-queue device, on each per-queue child of an C(mq) root.
      - Omit to leave the qdiscs alone.
    type: str
    choices: [fq, fq_codel, cake, pfifo, sfq]
  strict:
    description:
      - If V(false), a qdisc the kernel does not have and a rollback that cannot be armed
        (no systemd, or a network namespace systemd cannot reach) produce warnings and the
        rest of the change goes ahead.
      - If V(true), both fail the task before anything is changed.
    type: bool
    default: false
  rollback_seconds:
    description:
      - Seconds after which the host restores the old MTU unless the caller disarms the
        rollback first. V(0) turns the rollback off; otherwise 10 to 3600.
      - Armed only when the MTU changes, before it changes, as the transient systemd timer
        C(<rollback_unit>.timer) running C(ip link set dev <name> mtu <old mtu>) (unit name
        C(trainnet-mtu-rollback-<name>-ns<netns inode>)).
      - Disarm with C(systemctl stop <rollback_unit>.timer).
      - The rollback restores only the MTU, not the qdisc.
    type: int
    default: 0
  verify_peers:
    description:
      - Host names or addresses on the data path that must carry full-size packets at the new
        MTU (pinged with DF after the change; see the description).
      - Empty means only the caller's own checks confirm the change.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    description:
      - Returns the plan and the values the real run would report, without changing anything,
        arming a rollback or sending probes.
    support: full
  diff_mode:
    description: Shows the MTU and qdisc before and after, with headers naming the interface.
    support: full
  platform:
    description: Linux hosts with iproute2.
    support: full
    platforms: linux
notes:
  - Run in a network namespace (C(ip netns exec)) or a container to manage its interfaces;
    C(/sys/class/net) must belong to the same network namespace as the module.
  - The returned RV(qdisc_before) is V(noop) for an interface that has never been up (the
    kernel leaves its placeholder qdisc out of C(tc qdisc show)).
  - Every command runs with C(LANG=C) and a time limit.
seealso:
  - name: tc(8)
    description: Linux traffic control.
    link: https://man7.org/linux/man-pages/man8/tc.8.html
  - name: tc-mq(8)
    description: The multiqueue qdisc, one child qdisc per transmit queue.
    link: https://man7.org/linux/man-pages/man8/tc-mq.8.html
  - name: systemd-run(1)
    description: Transient units and timers used for the rollback.
    link: https://www.freedesktop.org/software/systemd/man/latest/systemd-run.html
"""

EXAMPLES = r"""
- name: Set MTU 1400 and fq on the gradient-sync interface
  longhaul.trainnet.interface_link:
    name: eth1
    mtu: 1400
    qdisc: fq

- name: Fail instead of warning when the kernel has no fq
  longhaul.trainnet.interface_link:
    name: eth1
    qdisc: fq
    strict: true

# Commit-confirm: arm a rollback on the host, change the MTU, check full-size packets reach the
# peers (the module rolls back and fails if not), check the controller still reaches the host,
# then disarm. If the controller loses the host, the host puts the old MTU back by itself.
- name: Change the MTU with an automatic rollback
  block:
    - name: Set MTU 1400 (arms the rollback timer first, then verifies the data path)
      longhaul.trainnet.interface_link:
        name: eth1
        mtu: 1400
        qdisc: fq
        rollback_seconds: 60
        verify_peers: [198.18.2.11, 198.18.3.11]
      register: link

    - name: Check the host still answers
      ansible.builtin.wait_for_connection:
        timeout: 20
      when: link.rollback_unit is not none

    # Also confirms a timer left pending by an interrupted earlier run.
    - name: Disarm the rollback
      ansible.builtin.command:
        argv: [systemctl, stop, "{{ link.rollback_unit }}.timer"]
      when: link.rollback_unit is not none
      changed_when: true
  rescue:
    - name: Report the rollback
      ansible.builtin.fail:
        msg: >-
          MTU change on eth1 was not confirmed ({{ ansible_failed_result.msg }}); the host
          restores MTU {{ link.plan.rollback_mtu | default('(unknown)') }} by itself.

- name: Preview the change
  longhaul.trainnet.interface_link:
    name: eth1
    mtu: 1400
    qdisc: fq
  check_mode: true
  diff: true
  register: preview

- name: Show what would change
  ansible.builtin.debug:
    var: preview.plan
"""

RETURN = r"""
changed:
  description: Whether the MTU or the qdisc changed (in check mode, would change).
  returned: always
  type: bool
  sample: true
interface:
  description: The interface managed.
  returned: always
  type: str
  sample: eth1
mtu_before:
  description: MTU before the task.
  returned: always
  type: int
  sample: 1500
mtu_after:
  description: MTU after the task, read back from the interface (in check mode, the predicted value).
  returned: always
  type: int
  sample: 1400
qdisc_before:
  description:
    - Kind of the root qdisc before the task (V(noop) when the kernel reports none). For an
      C(mq) root, C(mq) followed by the kinds of its per-queue children, for example
      V(mq(pfifo_fast)).
  returned: always
  type: str
  sample: noqueue
qdisc_after:
  description:
    - The same after the task, read back from the interface (in check mode, the predicted value).
    - Equal to RV(qdisc_before) when the wanted qdisc is unavailable.
  returned: always
  type: str
  sample: fq
qdisc_status:
  description:
    - V(unchanged) when O(qdisc) is omitted or already in place, V(changed) when it was (or in
      check mode would be) set, V(unavailable) when this kernel does not have the wanted qdisc.
  returned: always
  type: str
  sample: changed
rollback_unit:
  description:
    - Name of the transient systemd unit that will restore an MTU unless confirmed - the one
      this run armed (or in check mode would arm), or one an earlier run left pending. The
      timer is C(<rollback_unit>.timer); confirm with C(systemctl stop <rollback_unit>.timer).
    - V(null) when no rollback is armed or pending.
  returned: always
  type: str
  sample: trainnet-mtu-rollback-eth1-ns4026532281
verify_results:
  description:
    - One entry per probed peer (RV(plan.verify) plus C(result)) - V(ok), or V(peer_silent)
      when the peer answered no ping at all. Empty in check mode and when nothing was probed.
  returned: always
  type: list
  elements: dict
  sample: [{peer: 198.18.2.11, address: 198.18.2.11, ipv6: false, payload: 1372, result: ok}]
plan:
  description: The prediction made before acting.
  returned: always
  type: dict
  contains:
    mtu:
      description: V(unchanged) or V(changed).
      type: str
      sample: changed
    qdisc:
      description: V(unchanged), V(changed) or V(unavailable).
      type: str
      sample: unavailable
    qdisc_shape:
      description: V(root) for a single root qdisc, V(mq) for an C(mq) root with per-queue children.
      type: str
      sample: root
    rollback:
      description:
        - V(arm) when a rollback is (or in check mode would be) armed before the MTU change,
          V(pending) when none is armed but one from an earlier run still waits for
          confirmation, V(none) when none is needed or asked for, V(unavailable) when asked for
          but systemd is missing or cannot reach this network namespace.
      type: str
      sample: arm
    rollback_mtu:
      description:
        - MTU the armed or pending rollback restores (the MTU before the task, or the target of
          a rollback still armed by an earlier run), else V(null).
      type: int
      sample: 1500
    mtu_before:
      description: MTU read before planning.
      type: int
      sample: 1500
    mtu_after:
      description: Predicted MTU.
      type: int
      sample: 1400
    qdisc_before:
      description: Qdisc read before planning (as RV(qdisc_before)).
      type: str
      sample: noqueue
    qdisc_after:
      description: Predicted qdisc (as RV(qdisc_after)).
      type: str
      sample: noqueue
    verify:
      description:
        - The DF probes that run after the change, one per resolved peer - C(peer), the
          C(address) it resolved to, C(ipv6) and the ping C(payload) (MTU - 28, or - 48 for IPv6).
      type: list
      elements: dict
      sample: [{peer: 198.18.2.11, address: 198.18.2.11, ipv6: false, payload: 1372}]
    changed:
      description: Whether the plan changes anything.
      type: bool
      sample: true
  sample:
    mtu: changed
    qdisc: unavailable
    qdisc_shape: root
    rollback: arm
    rollback_mtu: 1500
    mtu_before: 1500
    mtu_after: 1400
    qdisc_before: noqueue
    qdisc_after: noqueue
    verify: []
    changed: true
"""

import os
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import run_bounded
from ansible_collections.longhaul.trainnet.plugins.module_utils.probe_result import classify_qdisc_probe
from ansible_collections.longhaul.trainnet.plugins.module_utils.interface_link import (
    PROBE_OK,
    PROBE_PEER_SILENT,
    QDISC_CHOICES,
    ROLLBACK_ARM,
    ROLLBACK_PENDING,
    ROLLBACK_UNAVAILABLE,
    SMALL_PAYLOAD,
    STATUS_CHANGED,
    STATUS_UNAVAILABLE,
    build_diff,
    describe_qdisc,
    judge_probe,
    missing_interface_message,
    parse_mtu,
    parse_pending_rollback_mtu,
    parse_qdisc_tree,
    parse_route_get_mtu,
    plan_link,
    ping_argv,
    probe_failure_message,
    qdisc_commands,
    qdisc_is,
    qdisc_kind_unknown,
    rollback_argv,
    rollback_netns,
    rollback_unit_name,
    tc_json_unsupported,
    validate_interface_name,
    validate_mtu,
    validate_rollback_seconds,
)

SYS_CLASS_NET = "/sys/class/net"
SYSTEMD_RUNTIME_DIR = "/run/systemd/system"
OWN_NETNS = "/proc/self/ns/net"
PID1_NETNS = "/proc/1/ns/net"
NAMED_NETNS_DIR = "/run/netns"

# Seconds each command may take: local netlink calls answer at once, systemd may be busy, and a
# probe is PROBE_COUNT pings of at most 2 s each.
LIMIT_LINK = 30
LIMIT_SYSTEMD = 60
LIMIT_PING = 15


def _ns_identity(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_dev)


class InterfaceLink(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.name = module.params["name"]
        self._ip = None
        self._tc = None

    # -- commands ---------------------------------------------------------------------------

    def run(self, argv, limit=LIMIT_LINK):
        res = run_bounded(argv, limit)
        if res.timed_out:
            self.fail("%s did not finish within %d s" % (" ".join(argv), limit))
        return res.rc, res.out, res.err

    @property
    def ip(self):
        if self._ip is None:
            self._ip = self.module.get_bin_path("ip", required=True)
        return self._ip

    @property
    def tc(self):
        if self._tc is None:
            self._tc = self.module.get_bin_path("tc", required=True)
        return self._tc

    def fail(self, msg, **kwargs):
        self.module.fail_json(msg=msg, interface=self.name, **kwargs)

    # -- reading ----------------------------------------------------------------------------

    def interfaces(self):
        try:
            return sorted(os.listdir(SYS_CLASS_NET))
        except OSError:
            return []

    def read_mtu(self):
        path = os.path.join(SYS_CLASS_NET, self.name, "mtu")
        try:
            with open(path) as handle:
                return parse_mtu(handle.read())
        except (IOError, OSError, ValueError) as exc:
            self.fail("cannot read the MTU of %s from %s: %s" % (self.name, path, to_text(exc)))

    def read_qdisc_tree(self):
        # The whole dump, not just the root: an mq root's per-queue children matter.
        rc, out, err = self.run([self.tc, "-j", "qdisc", "show", "dev", self.name])
        if tc_json_unsupported(rc, out, err):
            rc, out, err = self.run([self.tc, "qdisc", "show", "dev", self.name])
        if rc != 0:
            self.fail("cannot read the qdiscs of %s: tc exited %d: %s"
                      % (self.name, rc, (err or out).strip()))
        try:
            return parse_qdisc_tree(out)
        except ValueError as exc:
            self.fail("cannot parse the qdiscs of %s: %s" % (self.name, to_text(exc)),
                      stdout=out)

    # -- predicting -------------------------------------------------------------------------

    def probe_qdisc(self, kind):
        """True/False when a throwaway netns tells whether the kernel has ``kind``, else None."""
        unshare = self.module.get_bin_path("unshare")
        if not unshare:
            return None
        rc, out, err = self.run([unshare, "--net", "--", self.tc, "qdisc", "add", "dev", "lo",
                                 "root", kind])
        # None when unshare is not permitted (no CAP_SYS_ADMIN) or on another error: the real
        # call decides then.
        return classify_qdisc_probe(rc, out, err)[0]

    def rollback_tools(self):
        """(systemd_run, systemctl) when systemd runs here, else None."""
        if not os.path.isdir(SYSTEMD_RUNTIME_DIR):
            return None
        systemd_run = self.module.get_bin_path("systemd-run")
        systemctl = self.module.get_bin_path("systemctl")
        if not systemd_run or not systemctl:
            return None
        return systemd_run, systemctl

    def rollback_netns(self):
        """(netns_id, path or None, error or None): see module_utils rollback_netns."""
        named = []
        try:
            entries = sorted(os.listdir(NAMED_NETNS_DIR))
        except OSError:
            entries = []
        for entry in entries:
            path = os.path.join(NAMED_NETNS_DIR, entry)
            named.append((path, _ns_identity(path)))
        return rollback_netns(_ns_identity(OWN_NETNS), _ns_identity(PID1_NETNS), named)

    def pending_rollback_mtu(self, tools, unit):
        """MTU that a still armed rollback from an earlier run would restore, else None."""
        systemctl = tools[1]
        rc, _out, _err = self.run([systemctl, "is-active", "--quiet", unit + ".timer"],
                                  LIMIT_SYSTEMD)
        if rc != 0:
            return None
        rc, out, _err = self.run([systemctl, "show", "--property=ExecStart", unit + ".service"],
                                 LIMIT_SYSTEMD)
        if rc != 0:
            return None
        return parse_pending_rollback_mtu(out, self.name)

    def resolve_peers(self, peers):
        """[{"peer", "address", "ipv6"}] for the peers that resolve; warns about the others."""
        resolved = []
        for peer in peers:
            try:
                infos = socket.getaddrinfo(peer, None, 0, socket.SOCK_DGRAM)
            except (socket.error, UnicodeError) as exc:
                self.module.warn("verify_peers: cannot resolve %s (%s); the MTU is not verified "
                                 "towards it" % (peer, to_text(exc)))
                continue
            infos = [i for i in infos if i[0] in (socket.AF_INET, socket.AF_INET6)]
            if not infos:
                self.module.warn("verify_peers: %s has no IPv4 or IPv6 address; the MTU is not "
                                 "verified towards it" % peer)
                continue
            family, _type, _proto, _name, sockaddr = infos[0]
            ipv6 = family == socket.AF_INET6
            # A route to the peer may carry a smaller path MTU (path_routes): probe at that.
            rc, out, _err = self.run([self.ip, "-6" if ipv6 else "-4", "-j", "route", "get",
                                      sockaddr[0]])
            resolved.append({"peer": peer, "address": sockaddr[0], "ipv6": ipv6,
                             "route_mtu": parse_route_get_mtu(out) if rc == 0 else None})
        return resolved

    # -- acting -----------------------------------------------------------------------------

    def arm_rollback(self, tools, unit, seconds, old_mtu, netns_path):
        systemd_run, systemctl = tools
        units = [unit + ".timer", unit + ".service"]
        # A unit left by an earlier run (armed, fired or failed) blocks systemd-run.
        self.run([systemctl, "stop"] + units, LIMIT_SYSTEMD)
        self.run([systemctl, "reset-failed"] + units, LIMIT_SYSTEMD)
        rc, out, err = self.run(rollback_argv(systemd_run, unit, seconds, self.ip, self.name,
                                              old_mtu, netns_path), LIMIT_SYSTEMD)
        if rc != 0:
            self.fail("cannot arm the MTU rollback %s (nothing was changed): systemd-run "
                      "exited %d: %s" % (unit, rc, (err or out).strip()))

    def disarm_rollback(self, tools, unit):
        systemctl = tools[1]
        self.run([systemctl, "stop", unit + ".timer", unit + ".service"], LIMIT_SYSTEMD)
        self.run([systemctl, "reset-failed", unit + ".timer", unit + ".service"], LIMIT_SYSTEMD)

    def set_mtu(self, mtu, old_mtu, tools, unit, rollback_mtu):
        rc, out, err = self.run([self.ip, "link", "set", "dev", self.name, "mtu", str(mtu)])
        now = self.read_mtu()
        if rc != 0 or now != mtu:
            detail = (err or out).strip() if rc != 0 else "MTU reads back as %d" % now
            armed = unit
            if unit and now == rollback_mtu:
                # Nothing to roll back: remove the timer instead of leaving it armed. (A timer
                # that restores an earlier run's unconfirmed change stays armed.)
                self.disarm_rollback(tools, unit)
                armed = None
            self.fail("setting MTU %d on %s failed: %s" % (mtu, self.name, detail),
                      mtu_before=old_mtu, mtu_after=now, rollback_unit=armed)
        return now

    def verify_data_path(self, plan, ping, tools, unit, restore_mtu):
        """DF probes at the new MTU; on a peer that answers small but not full-size packets,
        put ``restore_mtu`` back, disarm a timer that has nothing left to do, and fail."""
        results = []
        for probe in plan["verify"]:
            rc, out, err = self.run(ping_argv(ping, probe["address"], probe["payload"],
                                              probe["ipv6"]), LIMIT_PING)
            small_rc = None
            if rc != 0:
                small_rc = self.run(ping_argv(ping, probe["address"], SMALL_PAYLOAD,
                                              probe["ipv6"], dont_fragment=False), LIMIT_PING)[0]
            verdict = judge_probe(small_rc, rc, out + err)
            results.append(dict(probe, result=verdict))
            if verdict == PROBE_PEER_SILENT:
                self.module.warn("verify_peers: %s answers no pings at all; the MTU is not "
                                 "verified towards it" % probe["peer"])
            elif verdict != PROBE_OK:
                self.run([self.ip, "link", "set", "dev", self.name, "mtu", str(restore_mtu)])
                now = self.read_mtu()
                armed = unit
                if unit and now == plan["rollback_mtu"]:
                    self.disarm_rollback(tools, unit)
                    armed = None
                self.fail(probe_failure_message(self.name, plan["mtu_after"], now, probe,
                                                out + err),
                          mtu_before=plan["mtu_before"], mtu_after=now, rollback_unit=armed,
                          verify_results=results, plan=plan)
        return results

    def set_qdisc(self, tree, kind):
        """Give ``kind`` to the device (root, or each mq child); False when the kernel turned
        out not to have it."""
        for args in qdisc_commands(tree, kind):
            rc, out, err = self.run([self.tc, "qdisc", "replace", "dev", self.name] + args)
            if rc != 0:
                if qdisc_kind_unknown(err):
                    return False
                self.fail("setting qdisc %s on %s failed: tc qdisc replace dev %s %s exited %d: %s"
                          % (kind, self.name, self.name, " ".join(args), rc, (err or out).strip()))
        return True

    # -- main -------------------------------------------------------------------------------

    def validate(self):
        for error in (validate_interface_name(self.name),
                      validate_mtu(self.params["mtu"]),
                      validate_rollback_seconds(self.params["rollback_seconds"])):
            if error:
                self.fail(error)
        for peer in self.params["verify_peers"]:
            if not peer or not peer.strip() or peer.startswith("-"):
                self.fail("verify_peers: %r is not a host name or address" % peer)
        if not os.path.isdir(os.path.join(SYS_CLASS_NET, self.name)):
            self.fail(missing_interface_message(self.name, self.interfaces()))

    def execute(self):
        self.validate()
        want_mtu = self.params["mtu"]
        want_qdisc = self.params["qdisc"]
        strict = self.params["strict"]
        seconds = self.params["rollback_seconds"]

        mtu_before = self.read_mtu()
        tree_before = self.read_qdisc_tree()

        available = None
        if want_qdisc is not None and not qdisc_is(tree_before, want_qdisc):
            available = self.probe_qdisc(want_qdisc)
        tools = self.rollback_tools()
        netns_id, netns_path, netns_error = (None, None, None)
        unit = None
        pending = None
        if tools is not None:
            netns_id, netns_path, netns_error = self.rollback_netns()
            if netns_error is None:
                unit = rollback_unit_name(self.name, netns_id)
                # Looked for on every run: a re-run inside the window of an unconfirmed change
                # must see the timer even when the MTU already has the wanted value.
                pending = self.pending_rollback_mtu(tools, unit)
        peers = self.resolve_peers(self.params["verify_peers"]) if want_mtu is not None else []

        plan = plan_link(mtu_before, tree_before, want_mtu=want_mtu, want_qdisc=want_qdisc,
                         qdisc_available=available, rollback_seconds=seconds,
                         rollback_possible=unit is not None, pending_rollback_mtu=pending,
                         verify_peers=peers)

        ping = None
        if plan["verify"]:
            ping = self.module.get_bin_path("ping")
            if not ping:
                self.fail("verify_peers needs ping (iputils-ping) on the host; nothing was changed",
                          plan=plan)
        if plan["qdisc"] == STATUS_UNAVAILABLE:
            msg = ("qdisc %s is not available in this kernel (tc: Specified qdisc kind is "
                   "unknown); qdisc of %s stays %s" % (want_qdisc, self.name, plan["qdisc_before"]))
            if strict:
                self.fail(msg + "; nothing was changed (strict)", plan=plan)
            self.module.warn(msg)
        if plan["rollback"] == ROLLBACK_UNAVAILABLE:
            reason = netns_error or ("no systemd: systemd-run/systemctl missing or %s absent"
                                     % SYSTEMD_RUNTIME_DIR)
            if strict:
                self.fail("MTU rollback is unavailable on this host (%s); nothing was changed "
                          "(strict)" % reason, plan=plan)
            self.module.warn("MTU rollback is unavailable on this host (%s); changing MTU on %s "
                             "without it" % (reason, self.name))
        if pending is not None:
            self.module.warn("the MTU rollback %s.timer armed by an earlier run is still pending: "
                             "it restores MTU %d on %s unless the change is confirmed "
                             "(systemctl stop %s.timer)" % (unit, pending, self.name, unit))

        armed = unit if plan["rollback"] in (ROLLBACK_ARM, ROLLBACK_PENDING) else None
        result = dict(
            changed=plan["changed"],
            interface=self.name,
            mtu_before=mtu_before,
            mtu_after=plan["mtu_after"],
            qdisc_before=plan["qdisc_before"],
            qdisc_after=plan["qdisc_after"],
            qdisc_status=plan["qdisc"],
            rollback_unit=armed,
            verify_results=[],
            plan=plan,
        )

        if not self.module.check_mode and (plan["changed"] or plan["verify"]):
            if plan["rollback"] == ROLLBACK_ARM:
                self.arm_rollback(tools, unit, seconds, plan["rollback_mtu"], netns_path)
            if plan["mtu"] == STATUS_CHANGED:
                result["mtu_after"] = self.set_mtu(
                    want_mtu, mtu_before, tools, armed, plan["rollback_mtu"])
            if plan["verify"]:
                # A changed MTU goes back to what it was; an unchanged one that a pending timer
                # still guards goes back to that timer's (last confirmed) MTU.
                restore = mtu_before if plan["mtu"] == STATUS_CHANGED else plan["rollback_mtu"]
                result["verify_results"] = self.verify_data_path(plan, ping, tools, armed,
                                                                 restore)
            if plan["qdisc"] == STATUS_CHANGED:
                if not self.set_qdisc(tree_before, want_qdisc):
                    msg = ("qdisc %s is not available in this kernel (tc: Specified qdisc kind "
                           "is unknown); qdisc of %s stays %s"
                           % (want_qdisc, self.name, plan["qdisc_before"]))
                    if strict:
                        self.fail(msg + " (strict)", mtu_before=mtu_before,
                                  mtu_after=result["mtu_after"], rollback_unit=armed, plan=plan)
                    self.module.warn(msg)
                    result["qdisc_status"] = STATUS_UNAVAILABLE
                    result["changed"] = plan["mtu"] == STATUS_CHANGED
                tree_now = self.read_qdisc_tree()
                if result["qdisc_status"] == STATUS_CHANGED and not qdisc_is(tree_now, want_qdisc):
                    self.fail("setting qdisc %s on %s did not stick: it reads back as %s"
                              % (want_qdisc, self.name, describe_qdisc(tree_now)),
                              mtu_before=mtu_before, mtu_after=result["mtu_after"],
                              rollback_unit=armed, plan=plan)
                result["qdisc_after"] = describe_qdisc(tree_now)

        if self.module._diff:
            result["diff"] = build_diff(self.name, mtu_before, result["qdisc_before"],
                                        result["mtu_after"], result["qdisc_after"])
        return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            mtu=dict(type="int"),
            qdisc=dict(type="str", choices=list(QDISC_CHOICES)),
            strict=dict(type="bool", default=False),
            rollback_seconds=dict(type="int", default=0),
            verify_peers=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    result = InterfaceLink(module).execute()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
