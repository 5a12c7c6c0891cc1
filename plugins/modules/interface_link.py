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
short_description: Set the MTU and root qdisc of one interface, with a self-arming rollback
version_added: 0.1.0
description:
  - Sets the MTU and the root queueing discipline (qdisc) of one network interface.
  - The module predicts first, then acts. It reads the current MTU from
    C(/sys/class/net/<name>/mtu) and the root qdisc from C(tc -j qdisc show dev <name> root)
    (text output where C(tc) has no JSON), plans the change, returns the plan in check mode
    and otherwise applies it with C(ip link set dev <name> mtu <mtu>) and
    C(tc qdisc replace dev <name> root <qdisc>), then reads both back and fails if a value
    did not stick.
  - Whether the kernel has the wanted qdisc is predicted without touching the interface, by
    adding it to the loopback device of a throwaway network namespace
    (C(unshare --net -- tc qdisc add dev lo root <qdisc>)). A missing qdisc is reported as
    O(qdisc) status V(unavailable) with a warning, or fails the task with O(strict=true).
  - MTU changes can cut the controller off from the host. With O(rollback_seconds) the module
    first arms a systemd timer on the host that restores the old MTU after that many seconds
    (commit-confirm pattern). The caller checks connectivity and disarms the timer with
    C(systemctl stop <rollback_unit>.timer); if the controller loses the host, the host
    restores the old MTU by itself.
  - A rollback timer armed by an earlier run stays armed until it is disarmed or fires. A run
    that changes the MTU again while it is still armed replaces it with one that restores the
    same MTU as the old one (the last confirmed MTU, not the unconfirmed current one). Units
    left over from earlier runs (fired, stopped or failed) are stopped and reset first, so
    re-runs can arm again.
author:
  - longhaul.trainnet maintainers (@longhaul)
requirements:
  - C(ip) and C(tc) from iproute2 on the managed host.
  - C(unshare) (util-linux) to predict whether a qdisc exists; without it the real C(tc) call
    decides.
  - systemd (C(systemd-run), C(systemctl)) for O(rollback_seconds).
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
      - Wanted root qdisc, set with C(tc qdisc replace dev <name> root <qdisc>) (default
        parameters of that qdisc).
      - Omit to leave the root qdisc alone.
      - Only the root is compared and replaced. On a multi-queue device whose root is C(mq),
        setting a qdisc here replaces C(mq) with a single root qdisc.
    type: str
    choices: [fq, fq_codel, cake, pfifo, sfq]
  strict:
    description:
      - If V(false), a qdisc the kernel does not have and a rollback that cannot be armed
        (no systemd) produce warnings and the rest of the change goes ahead.
      - If V(true), both fail the task before anything is changed.
    type: bool
    default: false
  rollback_seconds:
    description:
      - Seconds after which the host restores the old MTU unless the caller disarms the
        rollback first. V(0) turns the rollback off; otherwise 10 to 3600.
      - Armed only when the MTU changes, before it changes, as the transient systemd timer
        C(<rollback_unit>.timer) running C(ip link set dev <name> mtu <old mtu>) (unit name
        C(trainnet-mtu-rollback-<name>)).
      - Disarm with C(systemctl stop <rollback_unit>.timer).
      - The rollback restores only the MTU, not the qdisc.
    type: int
    default: 0
attributes:
  check_mode:
    description: Returns the plan and the predicted values without changing anything or arming a rollback.
    support: full
  diff_mode:
    description: Shows the MTU and root qdisc before and after, with headers naming the interface.
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
seealso:
  - name: tc(8)
    description: Linux traffic control.
    link: https://man7.org/linux/man-pages/man8/tc.8.html
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

# Commit-confirm: arm a rollback on the host, change the MTU, check that the host is still
# reachable at the new MTU, then disarm. If the controller loses the host, the host puts the
# old MTU back by itself after rollback_seconds.
- name: Change the MTU with an automatic rollback
  block:
    - name: Set MTU 1400 (arms trainnet-mtu-rollback-eth1.timer first)
      longhaul.trainnet.interface_link:
        name: eth1
        mtu: 1400
        qdisc: fq
        rollback_seconds: 60
      register: link

    - name: Check the host still answers
      ansible.builtin.wait_for_connection:
        timeout: 20

    - name: Check a peer is reachable with full-size packets at the new MTU (DF set)
      ansible.builtin.command:
        argv: [ping, -c, "3", -W, "2", -M, do, -s, "1372", 198.18.0.2]
      changed_when: false

    - name: Disarm the rollback
      ansible.builtin.command:
        argv: [systemctl, stop, "{{ link.rollback_unit }}.timer"]
      when: link.rollback_unit is not none
      changed_when: true
  rescue:
    - name: Wait for the host to restore the old MTU by itself
      ansible.builtin.wait_for_connection:
        delay: 60
        timeout: 120

    - name: Report the rollback
      ansible.builtin.fail:
        msg: >-
          MTU change on eth1 was not confirmed; the host restored MTU
          {{ link.mtu_before | default('(unknown)') }}.

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
  description: Whether the MTU or the root qdisc changed (in check mode, would change).
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
  description: Kind of the root qdisc before the task (V(noop) when the kernel reports none).
  returned: always
  type: str
  sample: noqueue
qdisc_after:
  description:
    - Kind of the root qdisc after the task, read back from the interface (in check mode, the predicted value).
    - Equal to RV(qdisc_before) when the wanted qdisc is unavailable.
  returned: always
  type: str
  sample: fq
qdisc_status:
  description:
    - V(unchanged) when O(qdisc) is omitted or already the root qdisc, V(changed) when it
      was (or in check mode would be) replaced, V(unavailable) when this kernel does not
      have the wanted qdisc.
  returned: always
  type: str
  sample: changed
rollback_unit:
  description:
    - Name of the transient systemd unit that restores the old MTU; the timer is
      C(<rollback_unit>.timer). Disarm with C(systemctl stop <rollback_unit>.timer).
    - V(null) when no rollback was armed (O(rollback_seconds=0), MTU unchanged, check mode
      or no systemd).
  returned: always
  type: str
  sample: trainnet-mtu-rollback-eth1
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
    rollback:
      description:
        - V(arm) when a rollback is (or in check mode would be) armed before the MTU change,
          V(none) when none is needed or asked for, V(unavailable) when asked for but systemd
          is missing.
      type: str
      sample: arm
    rollback_mtu:
      description:
        - MTU the rollback restores when RV(plan.rollback) is V(arm) (the MTU before the task, or
          the target of a rollback still armed by an earlier run), else V(null).
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
      description: Root qdisc read before planning.
      type: str
      sample: noqueue
    qdisc_after:
      description: Predicted root qdisc.
      type: str
      sample: noqueue
    changed:
      description: Whether the plan changes anything.
      type: bool
      sample: true
  sample:
    mtu: changed
    qdisc: unavailable
    rollback: arm
    rollback_mtu: 1500
    mtu_before: 1500
    mtu_after: 1400
    qdisc_before: noqueue
    qdisc_after: noqueue
    changed: true
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text

from ansible_collections.longhaul.trainnet.plugins.module_utils.probe_result import classify_qdisc_probe
from ansible_collections.longhaul.trainnet.plugins.module_utils.interface_link import (
    QDISC_CHOICES,
    ROLLBACK_ARM,
    ROLLBACK_UNAVAILABLE,
    STATUS_CHANGED,
    STATUS_UNAVAILABLE,
    build_diff,
    missing_interface_message,
    parse_mtu,
    parse_pending_rollback_mtu,
    parse_root_qdisc,
    plan_link,
    qdisc_kind_unknown,
    rollback_argv,
    rollback_unit_name,
    tc_json_unsupported,
    validate_interface_name,
    validate_mtu,
    validate_rollback_seconds,
)

SYS_CLASS_NET = "/sys/class/net"
SYSTEMD_RUNTIME_DIR = "/run/systemd/system"
C_LOCALE = {"LANG": "C", "LC_ALL": "C"}


class InterfaceLink(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.name = module.params["name"]
        self._ip = None
        self._tc = None

    # -- commands ---------------------------------------------------------------------------

    def run(self, argv):
        return self.module.run_command(argv, environ_update=C_LOCALE)

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

    def read_qdisc(self):
        rc, out, err = self.run([self.tc, "-j", "qdisc", "show", "dev", self.name, "root"])
        if tc_json_unsupported(rc, out, err):
            rc, out, err = self.run([self.tc, "qdisc", "show", "dev", self.name, "root"])
        if rc != 0:
            self.fail("cannot read the root qdisc of %s: tc exited %d: %s"
                      % (self.name, rc, (err or out).strip()))
        try:
            return parse_root_qdisc(out)
        except ValueError as exc:
            self.fail("cannot parse the root qdisc of %s: %s" % (self.name, to_text(exc)),
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
        """(systemd_run, systemctl) when a rollback can be armed here, else None."""
        if not os.path.isdir(SYSTEMD_RUNTIME_DIR):
            return None
        systemd_run = self.module.get_bin_path("systemd-run")
        systemctl = self.module.get_bin_path("systemctl")
        if not systemd_run or not systemctl:
            return None
        return systemd_run, systemctl

    def pending_rollback_mtu(self, tools, unit):
        """MTU that a still armed rollback from an earlier run would restore, else None."""
        systemctl = tools[1]
        rc, _out, _err = self.run([systemctl, "is-active", "--quiet", unit + ".timer"])
        if rc != 0:
            return None
        rc, out, _err = self.run([systemctl, "show", "--property=ExecStart", unit + ".service"])
        if rc != 0:
            return None
        return parse_pending_rollback_mtu(out, self.name)

    # -- acting -----------------------------------------------------------------------------

    def arm_rollback(self, tools, unit, seconds, old_mtu):
        systemd_run, systemctl = tools
        units = [unit + ".timer", unit + ".service"]
        # A unit left by an earlier run (armed, fired or failed) blocks systemd-run.
        self.run([systemctl, "stop"] + units)
        self.run([systemctl, "reset-failed"] + units)
        rc, out, err = self.run(rollback_argv(systemd_run, unit, seconds, self.ip, self.name,
                                              old_mtu))
        if rc != 0:
            self.fail("cannot arm the MTU rollback %s (nothing was changed): systemd-run "
                      "exited %d: %s" % (unit, rc, (err or out).strip()))

    def disarm_rollback(self, tools, unit):
        systemctl = tools[1]
        self.run([systemctl, "stop", unit + ".timer", unit + ".service"])
        self.run([systemctl, "reset-failed", unit + ".timer", unit + ".service"])

    def set_mtu(self, mtu, old_mtu, tools, unit, rollback_mtu):
        rc, out, err = self.run([self.ip, "link", "set", "dev", self.name, "mtu", str(mtu)])
        now = self.read_mtu()
        if rc != 0 or now != mtu:
            detail = (err or out).strip() if rc != 0 else "MTU reads back as %d" % now
            armed = unit
            if unit and now == old_mtu and rollback_mtu == old_mtu:
                # Nothing to roll back: remove the timer instead of leaving it armed. (A timer
                # that restores an earlier run's unconfirmed change stays armed.)
                self.disarm_rollback(tools, unit)
                armed = None
            self.fail("setting MTU %d on %s failed: %s" % (mtu, self.name, detail),
                      mtu_before=old_mtu, mtu_after=now, rollback_unit=armed)
        return now

    def set_qdisc(self, kind):
        """Replace the root qdisc; returns False when the kernel turned out not to have it."""
        rc, out, err = self.run([self.tc, "qdisc", "replace", "dev", self.name, "root", kind])
        if rc != 0:
            if qdisc_kind_unknown(err):
                return False
            self.fail("setting root qdisc %s on %s failed: tc exited %d: %s"
                      % (kind, self.name, rc, (err or out).strip()))
        return True

    # -- main -------------------------------------------------------------------------------

    def validate(self):
        for error in (validate_interface_name(self.name),
                      validate_mtu(self.params["mtu"]),
                      validate_rollback_seconds(self.params["rollback_seconds"])):
            if error:
                self.fail(error)
        if not os.path.isdir(os.path.join(SYS_CLASS_NET, self.name)):
            self.fail(missing_interface_message(self.name, self.interfaces()))

    def execute(self):
        self.validate()
        want_mtu = self.params["mtu"]
        want_qdisc = self.params["qdisc"]
        strict = self.params["strict"]
        seconds = self.params["rollback_seconds"]

        mtu_before = self.read_mtu()
        qdisc_before = self.read_qdisc()

        available = None
        if want_qdisc is not None and want_qdisc != qdisc_before:
            available = self.probe_qdisc(want_qdisc)
        tools = self.rollback_tools() if seconds else None
        unit = rollback_unit_name(self.name)
        pending = None
        if tools is not None and want_mtu is not None and want_mtu != mtu_before:
            pending = self.pending_rollback_mtu(tools, unit)

        plan = plan_link(mtu_before, qdisc_before, want_mtu=want_mtu, want_qdisc=want_qdisc,
                         qdisc_available=available, rollback_seconds=seconds,
                         rollback_possible=tools is not None, pending_rollback_mtu=pending)

        if plan["qdisc"] == STATUS_UNAVAILABLE:
            msg = ("qdisc %s is not available in this kernel (tc: Specified qdisc kind is "
                   "unknown); root qdisc of %s stays %s" % (want_qdisc, self.name, qdisc_before))
            if strict:
                self.fail(msg + "; nothing was changed (strict)", plan=plan)
            self.module.warn(msg)
        if plan["rollback"] == ROLLBACK_UNAVAILABLE:
            msg = ("MTU rollback is unavailable on this host (no systemd: systemd-run/systemctl "
                   "missing or %s absent); changing MTU on %s without it"
                   % (SYSTEMD_RUNTIME_DIR, self.name))
            if strict:
                self.fail("MTU rollback is unavailable on this host (no systemd); nothing was "
                          "changed (strict)", plan=plan)
            self.module.warn(msg)

        result = dict(
            changed=plan["changed"],
            interface=self.name,
            mtu_before=mtu_before,
            mtu_after=plan["mtu_after"],
            qdisc_before=qdisc_before,
            qdisc_after=plan["qdisc_after"],
            qdisc_status=plan["qdisc"],
            rollback_unit=None,
            plan=plan,
        )

        if not self.module.check_mode and plan["changed"]:
            armed = None
            if plan["rollback"] == ROLLBACK_ARM:
                self.arm_rollback(tools, unit, seconds, plan["rollback_mtu"])
                armed = unit
                result["rollback_unit"] = unit
            if plan["mtu"] == STATUS_CHANGED:
                result["mtu_after"] = self.set_mtu(
                    want_mtu, mtu_before, tools, armed, plan["rollback_mtu"])
            if plan["qdisc"] == STATUS_CHANGED:
                if not self.set_qdisc(want_qdisc):
                    msg = ("qdisc %s is not available in this kernel (tc: Specified qdisc kind "
                           "is unknown); root qdisc of %s stays %s"
                           % (want_qdisc, self.name, qdisc_before))
                    if strict:
                        self.fail(msg + " (strict)", mtu_before=mtu_before,
                                  mtu_after=result["mtu_after"], rollback_unit=armed, plan=plan)
                    self.module.warn(msg)
                    result["qdisc_status"] = STATUS_UNAVAILABLE
                    result["changed"] = plan["mtu"] == STATUS_CHANGED
                qdisc_now = self.read_qdisc()
                if result["qdisc_status"] == STATUS_CHANGED and qdisc_now != want_qdisc:
                    self.fail("setting root qdisc %s on %s did not stick: it reads back as %s"
                              % (want_qdisc, self.name, qdisc_now),
                              mtu_before=mtu_before, mtu_after=result["mtu_after"],
                              rollback_unit=armed, plan=plan)
                result["qdisc_after"] = qdisc_now

        if self.module._diff:
            result["diff"] = build_diff(self.name, mtu_before, qdisc_before,
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
        ),
        supports_check_mode=True,
    )
    result = InterfaceLink(module).execute()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
