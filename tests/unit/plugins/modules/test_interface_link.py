# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible.module_utils import basic

from ansible_collections.longhaul.trainnet.plugins.modules import interface_link
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    AnsibleExitJson, AnsibleFailJson, capture_warnings, fake_get_bin_path, patch_module, patch_module_args,
    read_fixture,
)

BINS = {
    "ip": "/usr/sbin/ip",
    "tc": "/usr/sbin/tc",
    "unshare": "/usr/bin/unshare",
    "systemd-run": "/usr/bin/systemd-run",
    "systemctl": "/usr/bin/systemctl",
}
KERNEL_QDISCS = ("pfifo", "pfifo_fast", "tbf", "htb", "noqueue", "mq")


def fixture(name):
    return read_fixture("interface_link", name)


class FakeHost(object):
    """Answers run_command like a host with the kernel of the dev machine (no fq/fq_codel)."""

    def __init__(self, sysfs, name="d0", mtu=1500, qdisc="noqueue", kernel=KERNEL_QDISCS,
                 json_tc=True, mtu_sticks=True, qdisc_sticks=True, unshare_ok=True,
                 systemd_run_rc=0, mtu_rc=0, pending_mtu=None):
        self.sysfs = sysfs
        self.name = name
        self.qdisc = qdisc
        self.kernel = kernel
        self.json_tc = json_tc
        self.mtu_sticks = mtu_sticks
        self.qdisc_sticks = qdisc_sticks
        self.unshare_ok = unshare_ok
        self.systemd_run_rc = systemd_run_rc
        self.mtu_rc = mtu_rc
        self.pending_mtu = pending_mtu
        self.calls = []
        self.environ = []
        os.makedirs(os.path.join(sysfs, name))
        os.makedirs(os.path.join(sysfs, "lo"))
        self.write_mtu(mtu)

    def write_mtu(self, mtu):
        with open(os.path.join(self.sysfs, self.name, "mtu"), "w") as handle:
            handle.write("%d\n" % mtu)

    @property
    def mtu(self):
        with open(os.path.join(self.sysfs, self.name, "mtu")) as handle:
            return int(handle.read())

    def run_command(self, argv, environ_update=None, **kwargs):
        assert isinstance(argv, list), "run_command must get an argv list"
        self.calls.append(list(argv))
        self.environ.append(environ_update)
        prog = argv[0]
        if prog == BINS["tc"]:
            return self.tc(argv[1:])
        if prog == BINS["ip"]:
            if self.mtu_rc:
                return self.mtu_rc, "", "Error: mtu greater than device maximum.\n"
            assert argv[1:5] == ["link", "set", "dev", self.name] and argv[5] == "mtu"
            if self.mtu_sticks:
                self.write_mtu(int(argv[6]))
            return 0, "", ""
        if prog == BINS["unshare"]:
            assert argv[1:3] == ["--net", "--"]
            if not self.unshare_ok:
                return 1, "", "unshare: unshare failed: Operation not permitted\n"
            kind = argv[-1]
            if kind in self.kernel:
                return 0, "", ""
            return 2, "", fixture("tc_stderr_kind_unknown.txt")
        if prog == BINS["systemd-run"]:
            return self.systemd_run_rc, "", ("" if self.systemd_run_rc == 0 else "Failed\n")
        if prog == BINS["systemctl"]:
            return self.systemctl(argv[1:])
        raise AssertionError("unexpected command %r" % argv)

    def systemctl(self, args):
        if args[0] == "is-active":
            return (0, "", "") if self.pending_mtu else (3, "", "")
        if args[0] == "show":
            if not self.pending_mtu:
                return 0, "ExecStart=\n", ""
            text = fixture("systemctl_show_execstart.txt").replace("mtu 1500",
                                                                   "mtu %d" % self.pending_mtu)
            return 0, text, ""
        if args[0] == "stop":
            self.pending_mtu = None
            return 0, "", ""
        if args[0] == "reset-failed":
            return 1, "", "Unit %s not loaded.\n" % args[1]
        raise AssertionError("unexpected systemctl call %r" % args)

    def tc(self, args):
        if args[0] == "-j":
            if not self.json_tc:
                return 255, "", fixture("tc_stderr_json_unknown.txt")
            return 0, json.dumps([{"kind": self.qdisc, "handle": "0:", "root": True,
                                   "options": {}}]), ""
        if args[:2] == ["qdisc", "show"]:
            return 0, "qdisc %s 0: root refcnt 2 \n" % self.qdisc, ""
        if args[:2] == ["qdisc", "replace"]:
            assert args[2:5] == ["dev", self.name, "root"]
            kind = args[5]
            if kind not in self.kernel:
                return 2, "", fixture("tc_stderr_kind_unknown.txt")
            if self.qdisc_sticks:
                self.qdisc = kind
            return 0, "", ""
        raise AssertionError("unexpected tc call %r" % args)

    def commands(self, prog):
        return [c for c in self.calls if c[0] == BINS[prog]]

    def mutating(self):
        return [c for c in self.calls
                if (c[0] == BINS["ip"]) or (c[0] == BINS["tc"] and "replace" in c)
                or c[0] == BINS["systemd-run"]]


@pytest.fixture
def env(monkeypatch, tmp_path):
    sysfs = tmp_path / "sys_class_net"
    systemd_dir = tmp_path / "run_systemd_system"
    systemd_dir.mkdir()
    monkeypatch.setattr(interface_link, "SYS_CLASS_NET", str(sysfs))
    monkeypatch.setattr(interface_link, "SYSTEMD_RUNTIME_DIR", str(systemd_dir))

    patch_module(monkeypatch, get_bin_path=fake_get_bin_path(BINS))
    warnings = capture_warnings(monkeypatch)

    class Env(object):
        pass

    state = Env()
    state.sysfs = str(sysfs)
    state.systemd_dir = str(systemd_dir)
    state.warnings = warnings
    state.host = None

    def make_host(**kwargs):
        state.host = FakeHost(str(sysfs), **kwargs)
        monkeypatch.setattr(basic.AnsibleModule, "run_command",
                            lambda self, argv, **kw: state.host.run_command(argv, **kw))
        return state.host

    state.make_host = make_host
    return state


def run_module(args, check_mode=False, diff=False):
    args = dict(args)
    if check_mode:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as info:
            interface_link.main()
    return info.type is AnsibleExitJson, info.value.args[0]


# --- happy paths ----------------------------------------------------------------------------

def test_sets_mtu_and_available_qdisc(env):
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "qdisc": "pfifo"})
    assert ok, res
    assert res["changed"] is True
    assert (res["mtu_before"], res["mtu_after"]) == (1500, 1400)
    assert (res["qdisc_before"], res["qdisc_after"]) == ("noqueue", "pfifo")
    assert res["qdisc_status"] == "changed"
    assert res["rollback_unit"] is None
    assert res["interface"] == "d0"
    assert res["plan"]["mtu"] == "changed" and res["plan"]["qdisc"] == "changed"
    assert host.mtu == 1400 and host.qdisc == "pfifo"
    assert [BINS["ip"], "link", "set", "dev", "d0", "mtu", "1400"] in host.calls
    assert [BINS["tc"], "qdisc", "replace", "dev", "d0", "root", "pfifo"] in host.calls
    assert not env.warnings


def test_every_command_runs_in_c_locale(env):
    host = env.make_host()
    run_module({"name": "d0", "mtu": 1400, "qdisc": "pfifo", "rollback_seconds": 30})
    assert host.environ
    for environ in host.environ:
        assert environ == {"LANG": "C", "LC_ALL": "C"}


def test_second_run_is_idempotent(env):
    host = env.make_host(mtu=1400, qdisc="pfifo")
    ok, res = run_module({"name": "d0", "mtu": 1400, "qdisc": "pfifo", "rollback_seconds": 60})
    assert ok and res["changed"] is False
    assert res["qdisc_status"] == "unchanged"
    assert res["rollback_unit"] is None
    assert res["plan"]["rollback"] == "none"
    assert host.mutating() == []
    assert host.commands("unshare") == []


def test_qdisc_unavailable_warns_and_still_sets_mtu(env):
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "qdisc": "fq"})
    assert ok, res
    assert res["changed"] is True
    assert res["qdisc_status"] == "unavailable"
    assert res["qdisc_after"] == "noqueue"
    assert host.mtu == 1400
    # predicted in a throwaway netns, never tried on the interface
    assert host.commands("unshare") == [
        [BINS["unshare"], "--net", "--", BINS["tc"], "qdisc", "add", "dev", "lo", "root", "fq"]]
    assert not [c for c in host.calls if c[0] == BINS["tc"] and "replace" in c]
    assert len(env.warnings) == 1 and "fq is not available" in env.warnings[0]


def test_qdisc_unavailable_only_is_not_a_change(env):
    env.make_host(mtu=1400)
    ok, res = run_module({"name": "d0", "mtu": 1400, "qdisc": "fq"})
    assert ok and res["changed"] is False and res["qdisc_status"] == "unavailable"


def test_qdisc_unavailable_strict_fails_before_any_change(env):
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "qdisc": "fq", "strict": True})
    assert not ok
    assert "fq is not available" in res["msg"] and "nothing was changed" in res["msg"]
    assert host.mutating() == []
    assert host.mtu == 1500


def test_probe_inconclusive_then_tc_reports_unknown(env):
    host = env.make_host(unshare_ok=False)
    ok, res = run_module({"name": "d0", "qdisc": "cake"})
    assert ok, res
    assert res["plan"]["qdisc"] == "changed"
    assert res["qdisc_status"] == "unavailable"
    assert res["changed"] is False
    assert res["qdisc_after"] == "noqueue"
    assert env.warnings


def test_probe_inconclusive_then_tc_reports_unknown_strict(env):
    env.make_host(unshare_ok=False)
    ok, res = run_module({"name": "d0", "qdisc": "cake", "strict": True})
    assert not ok and "cake is not available" in res["msg"]


def test_text_fallback_when_tc_has_no_json(env):
    host = env.make_host(json_tc=False, qdisc="pfifo_fast")
    ok, res = run_module({"name": "d0", "qdisc": "pfifo"})
    assert ok, res
    assert res["qdisc_before"] == "pfifo_fast" and res["qdisc_after"] == "pfifo"
    assert [BINS["tc"], "qdisc", "show", "dev", "d0", "root"] in host.calls


# --- check mode and diff --------------------------------------------------------------------

def test_check_mode_predicts_without_touching(env):
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "qdisc": "fq", "rollback_seconds": 30},
                         check_mode=True, diff=True)
    assert ok, res
    assert res["changed"] is True
    assert res["mtu_after"] == 1400
    assert res["qdisc_status"] == "unavailable"
    assert res["rollback_unit"] is None
    assert res["plan"]["rollback"] == "arm"
    assert host.mutating() == []
    assert [c[1] for c in host.commands("systemctl")] == ["is-active"]  # read-only
    assert host.mtu == 1500
    assert res["diff"] == {
        "before_header": "interface d0 (before)",
        "after_header": "interface d0 (after)",
        "before": "mtu: 1500\nqdisc: noqueue\n",
        "after": "mtu: 1400\nqdisc: noqueue\n",
    }


def test_check_mode_unchanged(env):
    env.make_host(mtu=1400, qdisc="pfifo")
    ok, res = run_module({"name": "d0", "mtu": 1400, "qdisc": "pfifo"}, check_mode=True)
    assert ok and res["changed"] is False
    assert "diff" not in res


def test_diff_after_real_change(env):
    env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "qdisc": "pfifo"}, diff=True)
    assert ok
    assert res["diff"]["before"] == "mtu: 1500\nqdisc: noqueue\n"
    assert res["diff"]["after"] == "mtu: 1400\nqdisc: pfifo\n"


# --- rollback -------------------------------------------------------------------------------

def test_rollback_armed_before_mtu_change(env):
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": 45})
    assert ok, res
    unit = "trainnet-mtu-rollback-d0"
    assert res["rollback_unit"] == unit
    assert res["plan"]["rollback"] == "arm"
    assert res["plan"]["rollback_mtu"] == 1500
    # stale units cleared, then armed, then the MTU changed
    progs = [c[0] for c in host.calls]
    i_stop = host.calls.index([BINS["systemctl"], "stop", unit + ".timer", unit + ".service"])
    i_reset = host.calls.index([BINS["systemctl"], "reset-failed", unit + ".timer",
                                unit + ".service"])
    i_arm = progs.index(BINS["systemd-run"])
    i_ip = progs.index(BINS["ip"])
    assert i_stop < i_reset < i_arm < i_ip
    arm = host.calls[i_arm]
    assert "--unit=" + unit in arm
    assert "--on-active=45s" in arm
    assert "--timer-property=AccuracySec=1s" in arm
    assert arm[-7:] == [BINS["ip"], "link", "set", "dev", "d0", "mtu", "1500"]


def test_rollback_not_armed_when_mtu_unchanged(env):
    host = env.make_host(mtu=1400)
    ok, res = run_module({"name": "d0", "mtu": 1400, "qdisc": "pfifo", "rollback_seconds": 45})
    assert ok and res["changed"] is True
    assert res["rollback_unit"] is None
    assert host.commands("systemd-run") == []


def test_rollback_unavailable_without_systemd_warns(env):
    os.rmdir(env.systemd_dir)
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": 45})
    assert ok, res
    assert res["rollback_unit"] is None
    assert res["plan"]["rollback"] == "unavailable"
    assert host.mtu == 1400
    assert any("rollback is unavailable" in w for w in env.warnings)


def test_rollback_unavailable_strict_fails_before_change(env):
    os.rmdir(env.systemd_dir)
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": 45, "strict": True})
    assert not ok and "rollback is unavailable" in res["msg"]
    assert host.mutating() == [] and host.mtu == 1500


def test_arming_failure_fails_without_change(env):
    host = env.make_host(systemd_run_rc=1)
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": 45})
    assert not ok and "cannot arm" in res["msg"]
    assert host.commands("ip") == [] and host.mtu == 1500


def test_failed_mtu_set_disarms_rollback(env):
    host = env.make_host(mtu_rc=2)
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": 45})
    assert not ok
    assert "mtu greater than device maximum" in res["msg"]
    assert res["rollback_unit"] is None
    stops = [c for c in host.commands("systemctl") if c[1] == "stop"]
    assert len(stops) == 2  # stale-unit cleanup before arming, disarm after the failure


def test_pending_rollback_keeps_last_confirmed_mtu(env):
    # an earlier run moved 1500 -> 1400 and was never confirmed: its timer (to 1500) is armed
    host = env.make_host(mtu=1400, pending_mtu=1500)
    ok, res = run_module({"name": "d0", "mtu": 1450, "rollback_seconds": 45})
    assert ok, res
    assert res["plan"]["rollback_mtu"] == 1500
    arm = host.commands("systemd-run")[0]
    assert arm[-1] == "1500"
    assert host.mtu == 1450


def test_pending_rollback_stays_armed_when_mtu_set_fails(env):
    host = env.make_host(mtu=1400, pending_mtu=1500, mtu_rc=2)
    ok, res = run_module({"name": "d0", "mtu": 1450, "rollback_seconds": 45})
    assert not ok
    assert res["rollback_unit"] == "trainnet-mtu-rollback-d0"
    stops = [c for c in host.commands("systemctl") if c[1] == "stop"]
    assert len(stops) == 1  # only the replacement of the old unit


def test_check_mode_reports_pending_target_without_touching_systemd(env):
    host = env.make_host(mtu=1400, pending_mtu=1500)
    ok, res = run_module({"name": "d0", "mtu": 1450, "rollback_seconds": 45}, check_mode=True)
    assert ok and res["plan"]["rollback_mtu"] == 1500
    assert [c[1] for c in host.commands("systemctl")] == ["is-active", "show"]
    assert host.commands("systemd-run") == []


# --- failures -------------------------------------------------------------------------------

def test_mtu_that_does_not_stick_fails(env):
    env.make_host(mtu_sticks=False)
    ok, res = run_module({"name": "d0", "mtu": 1400})
    assert not ok and "reads back as 1500" in res["msg"]


def test_qdisc_that_does_not_stick_fails(env):
    env.make_host(qdisc_sticks=False)
    ok, res = run_module({"name": "d0", "qdisc": "pfifo"})
    assert not ok and "did not stick" in res["msg"]


def test_missing_interface_lists_interfaces(env):
    host = env.make_host()
    ok, res = run_module({"name": "eth9", "mtu": 1400})
    assert not ok
    assert res["msg"] == "interface eth9 does not exist; interfaces here: d0, lo"
    assert host.calls == []


@pytest.mark.parametrize("mtu", [575, 9001, 100])
def test_mtu_out_of_range(env, mtu):
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": mtu})
    assert not ok
    assert res["msg"] == "mtu must be between 576 and 9000, got %d" % mtu
    assert host.calls == []


@pytest.mark.parametrize("seconds", [5, 3601])
def test_rollback_seconds_out_of_range(env, seconds):
    env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": seconds})
    assert not ok and res["msg"].startswith("rollback_seconds must be 0 (off) or between 10")


def test_bad_qdisc_choice_rejected(env):
    env.make_host()
    ok, res = run_module({"name": "d0", "qdisc": "netem"})
    assert not ok and "qdisc" in res["msg"]


def test_path_like_name_rejected(env):
    env.make_host()
    ok, res = run_module({"name": "../d0", "mtu": 1400})
    assert not ok and "not a valid interface name" in res["msg"]
