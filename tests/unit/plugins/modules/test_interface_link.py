# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import CommandResult
from ansible_collections.longhaul.trainnet.plugins.modules import interface_link
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    capture_warnings, fake_get_bin_path, patch_module, run_with_args,
    read_fixture,
)

BINS = {
    "ip": "/usr/sbin/ip",
    "tc": "/usr/sbin/tc",
    "unshare": "/usr/bin/unshare",
    "systemd-run": "/usr/bin/systemd-run",
    "systemctl": "/usr/bin/systemctl",
    "ping": "/usr/bin/ping",
}
KERNEL_QDISCS = ("pfifo", "pfifo_fast", "tbf", "htb", "noqueue", "mq")
PEER = "198.18.2.11"


def fixture(name):
    return read_fixture("interface_link", name)


def single_root(kind):
    return [{"kind": kind, "handle": "0:", "root": True, "options": {}}]


class FakeHost(object):
    """Answers run_bounded like a host with the kernel of the dev machine (no fq/fq_codel).

    ``qdisc`` is a root kind or a list of tc JSON entries (a whole ``tc -j qdisc show`` dump).
    ``path_mtu`` is the largest packet the path to the peers carries (None: any); ``alive``
    the peers that answer pings.
    """

    def __init__(self, sysfs, name="d0", mtu=1500, qdisc="noqueue", kernel=KERNEL_QDISCS,
                 json_tc=True, mtu_sticks=True, qdisc_sticks=True, unshare_ok=True,
                 systemd_run_rc=0, mtu_rc=0, pending_mtu=None, path_mtu=None,
                 alive=(PEER, "2001:db8::2"), route_mtus=None):
        self.sysfs = sysfs
        self.route_mtus = route_mtus or {}
        self.name = name
        self.entries = single_root(qdisc) if isinstance(qdisc, str) else json.loads(json.dumps(qdisc))
        self.kernel = kernel
        self.json_tc = json_tc
        self.mtu_sticks = mtu_sticks
        self.qdisc_sticks = qdisc_sticks
        self.unshare_ok = unshare_ok
        self.systemd_run_rc = systemd_run_rc
        self.mtu_rc = mtu_rc
        self.pending_mtu = pending_mtu
        self.path_mtu = path_mtu
        self.alive = set(alive)
        self.calls = []
        self.limits = []
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

    @property
    def qdisc(self):
        return [e for e in self.entries if e.get("root")][0]["kind"]

    def children(self):
        return sorted((e["parent"], e["kind"]) for e in self.entries if not e.get("root"))

    def run_bounded(self, argv, limit=None, **kwargs):
        assert isinstance(argv, list), "commands must be argv lists"
        assert limit, "every command needs a time limit"
        self.calls.append(list(argv))
        self.limits.append(limit)
        return CommandResult(*self.answer(argv))

    def answer(self, argv):
        prog = argv[0]
        if prog == BINS["tc"]:
            return self.tc(argv[1:])
        if prog == BINS["ip"] and argv[2:5] == ["-j", "route", "get"]:
            metrics = [{"mtu": self.route_mtus[argv[5]]}] if argv[5] in self.route_mtus else []
            return 0, json.dumps([{"dst": argv[5], "dev": self.name, "flags": [], "metrics": metrics}]), ""
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
            if self.systemd_run_rc == 0:
                self.pending_mtu = int(argv[-1])
            return self.systemd_run_rc, "", ("" if self.systemd_run_rc == 0 else "Failed\n")
        if prog == BINS["systemctl"]:
            return self.systemctl(argv[1:])
        if prog == BINS["ping"]:
            return self.ping(argv[1:])
        raise AssertionError("unexpected command %r" % argv)

    def ping(self, args):
        address = args[-1]
        payload = int(args[args.index("-s") + 1])
        size = payload + (48 if "-6" in args else 28)
        dont_fragment = "-M" in args and args[args.index("-M") + 1] == "do"
        if dont_fragment and size > self.mtu:
            return 1, "", "ping: local error: message too long, mtu=%d\n" % self.mtu
        if address not in self.alive:
            return 1, "3 packets transmitted, 0 received, 100% packet loss\n", ""
        if dont_fragment and self.path_mtu is not None and size > self.path_mtu:
            return 1, "3 packets transmitted, 0 received, 100% packet loss\n", ""  # black hole
        return 0, "3 packets transmitted, 3 received, 0% packet loss\n", ""

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
            assert args[1:] == ["qdisc", "show", "dev", self.name]
            return 0, json.dumps(self.entries), ""
        if args[:2] == ["qdisc", "show"]:
            lines = []
            for e in self.entries:
                where = "root refcnt 2" if e.get("root") else "parent %s" % e["parent"]
                lines.append("qdisc %s %s %s \n" % (e["kind"], e["handle"], where))
            return 0, "".join(lines), ""
        if args[:2] == ["qdisc", "replace"]:
            assert args[2:4] == ["dev", self.name]
            kind = args[-1]
            if kind not in self.kernel:
                return 2, "", fixture("tc_stderr_kind_unknown.txt")
            if not self.qdisc_sticks:
                return 0, "", ""
            if args[4:7] == ["root", "handle", "1:"] and kind == "mq":
                children = [e for e in self.entries if not e.get("root")]
                self.entries = [{"kind": "mq", "handle": "1:", "root": True}] + [
                    {"kind": "pfifo_fast", "handle": "0:", "parent": "1:%s" % e["parent"].split(":")[1]}
                    for e in children]
            elif args[4] == "root":
                self.entries = single_root(kind)
            else:
                assert args[4] == "parent"
                parents = [e for e in self.entries if e.get("parent") == args[5]]
                if not parents:
                    return 2, "", "Error: Failed to find specified qdisc.\n"
                parents[0]["kind"] = kind
            return 0, "", ""
        raise AssertionError("unexpected tc call %r" % args)

    def commands(self, prog):
        return [c for c in self.calls if c[0] == BINS[prog]]

    def mutating(self):
        return [c for c in self.calls
                if (c[0] == BINS["ip"] and "get" not in c) or (c[0] == BINS["tc"] and "replace" in c)
                or c[0] == BINS["systemd-run"]
                or (c[0] == BINS["systemctl"] and c[1] in ("stop", "reset-failed"))]


@pytest.fixture
def env(monkeypatch, tmp_path):
    sysfs = tmp_path / "sys_class_net"
    systemd_dir = tmp_path / "run_systemd_system"
    systemd_dir.mkdir()
    netns_dir = tmp_path / "run_netns"
    netns_dir.mkdir()
    own_ns = tmp_path / "self_ns_net"
    own_ns.write_text("")
    monkeypatch.setattr(interface_link, "SYS_CLASS_NET", str(sysfs))
    monkeypatch.setattr(interface_link, "SYSTEMD_RUNTIME_DIR", str(systemd_dir))
    monkeypatch.setattr(interface_link, "OWN_NETNS", str(own_ns))
    # By default the module shares PID 1's network namespace (a container with systemd).
    monkeypatch.setattr(interface_link, "PID1_NETNS", str(own_ns))
    monkeypatch.setattr(interface_link, "NAMED_NETNS_DIR", str(netns_dir))

    def refuse_run_command(self, *args, **kwargs):
        raise AssertionError("commands go through run_bounded (time limit, LANG=C)")

    patch_module(monkeypatch, get_bin_path=fake_get_bin_path(BINS), run_command=refuse_run_command)
    warnings = capture_warnings(monkeypatch)

    class Env(object):
        pass

    state = Env()
    state.sysfs = str(sysfs)
    state.systemd_dir = str(systemd_dir)
    state.netns_dir = str(netns_dir)
    state.own_ns = str(own_ns)
    state.tmp = tmp_path
    state.warnings = warnings
    state.host = None
    state.monkeypatch = monkeypatch

    def make_host(**kwargs):
        state.host = FakeHost(str(sysfs), **kwargs)
        monkeypatch.setattr(interface_link, "run_bounded",
                            lambda argv, limit=None, **kw: state.host.run_bounded(argv, limit, **kw))
        return state.host

    state.make_host = make_host
    return state


def unit_name(env, name="d0"):
    return "trainnet-mtu-rollback-%s-ns%d" % (name, os.stat(env.own_ns).st_ino)


def run_module(args, check_mode=False, diff=False):
    return run_with_args(interface_link.main, args, check_mode, diff)


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


def test_every_command_is_time_bounded(env):
    # run_bounded (LANG=C, time limit) is the only way out; run_command would raise.
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "qdisc": "pfifo", "rollback_seconds": 30,
                          "verify_peers": [PEER]})
    assert ok, res
    progs = set(c[0] for c in host.calls)
    assert {BINS["ip"], BINS["tc"], BINS["systemctl"], BINS["systemd-run"], BINS["ping"]} <= progs
    assert all(0 < limit <= 60 for limit in host.limits)


def test_hung_command_fails_with_its_name(env, monkeypatch):
    env.make_host()
    monkeypatch.setattr(interface_link, "run_bounded",
                        lambda argv, limit=None, **kw: CommandResult(124, "", "", timed_out=True))
    ok, res = run_module({"name": "d0", "mtu": 1400})
    assert not ok and "did not finish within 30 s" in res["msg"] and "tc -j qdisc show" in res["msg"]


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
    assert [BINS["tc"], "qdisc", "show", "dev", "d0"] in host.calls


# --- check mode and diff --------------------------------------------------------------------

def test_check_mode_predicts_without_touching(env):
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "qdisc": "fq", "rollback_seconds": 30},
                         check_mode=True, diff=True)
    assert ok, res
    assert res["changed"] is True
    assert res["mtu_after"] == 1400
    assert res["qdisc_status"] == "unavailable"
    # the unit the real run would arm (check mode predicts the real result)
    assert res["rollback_unit"] == unit_name(env)
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
    unit = unit_name(env)
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
    # PID 1 shares our network namespace: nothing to pin
    assert not [a for a in arm if "NetworkNamespacePath" in a]


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
    assert res["rollback_unit"] == unit_name(env)
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


# --- finding 3: a pending timer is reported on every run --------------------------------------

def test_rerun_reports_pending_timer_when_mtu_already_set(env):
    # Ctrl-C during the connectivity check: MTU is 1400, its rollback (to 1500) still armed.
    host = env.make_host(mtu=1400, pending_mtu=1500)
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": 60})
    assert ok, res
    assert res["changed"] is False
    assert res["rollback_unit"] == unit_name(env)
    assert (res["plan"]["rollback"], res["plan"]["rollback_mtu"]) == ("pending", 1500)
    assert any("still pending" in w and "1500" in w for w in env.warnings)
    assert host.mutating() == [] and host.pending_mtu == 1500


def test_pending_timer_reported_without_rollback_seconds(env):
    env.make_host(mtu=1400, pending_mtu=1500)
    ok, res = run_module({"name": "d0", "qdisc": "pfifo"})
    assert ok and res["rollback_unit"] == unit_name(env)
    assert res["plan"]["rollback"] == "pending"


def test_pending_rerun_verifies_the_unconfirmed_mtu(env):
    host = env.make_host(mtu=1400, pending_mtu=1500, path_mtu=1400)
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": 60,
                          "verify_peers": [PEER]})
    assert ok, res
    assert [r["result"] for r in res["verify_results"]] == ["ok"]
    assert host.commands("ping")[0][-5:] == ["-s", "1372", "-M", "do", PEER]


# --- finding 4: the rollback runs in the interface's network namespace --------------------------

def other_pid1_netns(env):
    pid1 = env.tmp / "pid1_ns_net"
    pid1.write_text("")
    env.monkeypatch.setattr(interface_link, "PID1_NETNS", str(pid1))


def test_rollback_pinned_to_named_netns_outside_pid1(env):
    other_pid1_netns(env)
    named = os.path.join(env.netns_dir, "side")
    os.link(env.own_ns, named)  # same inode and device, as a /run/netns bind mount has
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": 30})
    assert ok, res
    arm = host.commands("systemd-run")[0]
    assert "--property=NetworkNamespacePath=%s" % named in arm
    assert "--unit=%s" % unit_name(env) in arm


def test_rollback_refused_in_unnamed_netns_outside_pid1(env):
    other_pid1_netns(env)
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": 30})
    assert ok, res
    assert res["plan"]["rollback"] == "unavailable" and res["rollback_unit"] is None
    assert host.commands("systemd-run") == []
    assert any("not in PID 1's" in w for w in env.warnings)


def test_rollback_refused_in_unnamed_netns_strict_changes_nothing(env):
    other_pid1_netns(env)
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": 30, "strict": True})
    assert not ok and "not in PID 1's" in res["msg"] and "nothing was changed" in res["msg"]
    assert host.mutating() == [] and host.mtu == 1500


def test_unreadable_pid1_netns_refuses_to_arm(env):
    env.monkeypatch.setattr(interface_link, "PID1_NETNS", str(env.tmp / "missing"))
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": 30})
    assert ok and res["plan"]["rollback"] == "unavailable"
    assert host.commands("systemd-run") == []


# --- finding 5: DF probes on the data path ------------------------------------------------------

def test_mtu_too_big_for_the_path_is_rolled_back_and_fails(env):
    host = env.make_host(mtu=1400, path_mtu=1400)
    ok, res = run_module({"name": "d0", "mtu": 1500, "rollback_seconds": 60,
                          "verify_peers": [PEER]})
    assert not ok
    assert PEER in res["msg"] and "1500-byte" in res["msg"] and "-s 1472" in res["msg"]
    assert "rolled back to 1400" in res["msg"]
    assert host.mtu == 1400 and res["mtu_after"] == 1400
    # nothing left for the timer to do: disarmed
    assert res["rollback_unit"] is None and host.pending_mtu is None


def test_mtu_too_big_without_timer_is_rolled_back(env):
    host = env.make_host(mtu=1400, path_mtu=1400)
    ok, res = run_module({"name": "d0", "mtu": 1500, "verify_peers": [PEER]})
    assert not ok and host.mtu == 1400


def test_pmtu_error_is_quoted(env, monkeypatch):
    host = env.make_host(mtu=1400)
    real = host.ping

    def frag_needed(args):
        if "-M" in args:
            return 1, "From 198.18.2.1 icmp_seq=1 Frag needed and DF set (mtu = 1400)\n", ""
        return real(args)
    host.ping = frag_needed
    ok, res = run_module({"name": "d0", "mtu": 1500, "verify_peers": [PEER]})
    assert not ok and "path reports MTU 1400" in res["msg"]


def test_path_that_carries_the_mtu_passes(env):
    host = env.make_host(path_mtu=1500)
    ok, res = run_module({"name": "d0", "mtu": 1400, "rollback_seconds": 60,
                          "verify_peers": [PEER]})
    assert ok, res
    assert res["verify_results"] == [dict(res["plan"]["verify"][0], result="ok")]
    assert host.mtu == 1400 and res["rollback_unit"] == unit_name(env)


def test_peer_behind_a_smaller_path_route_is_probed_at_the_route_mtu(env):
    """A path_routes route gives that peer a smaller MTU: probing it at the interface's would fail."""
    host = env.make_host(path_mtu=1280, route_mtus={PEER: 1280})
    ok, res = run_module({"name": "d0", "mtu": 1400, "verify_peers": [PEER]})
    assert ok, res
    ping = host.commands("ping")[0]
    assert ping[ping.index("-s") + 1] == "1252"
    assert res["verify_results"][0]["route_mtu"] == 1280 and host.mtu == 1400


def test_ipv6_peer_uses_48_bytes_of_headers(env):
    host = env.make_host(path_mtu=1500)
    ok, res = run_module({"name": "d0", "mtu": 1400, "verify_peers": ["2001:db8::2"]})
    assert ok, res
    ping = host.commands("ping")[0]
    assert "-6" in ping and ping[ping.index("-s") + 1] == "1352"


def test_silent_peer_warns_and_keeps_the_mtu(env):
    host = env.make_host(alive=())
    ok, res = run_module({"name": "d0", "mtu": 1400, "verify_peers": [PEER]})
    assert ok, res
    assert res["verify_results"][0]["result"] == "peer_silent"
    assert host.mtu == 1400 and any("answers no pings" in w for w in env.warnings)


def test_unresolvable_peer_warns(env, monkeypatch):
    env.make_host()

    def no_such_host(*args, **kwargs):
        raise interface_link.socket.gaierror(-2, "Name or service not known")
    monkeypatch.setattr(interface_link.socket, "getaddrinfo", no_such_host)
    ok, res = run_module({"name": "d0", "mtu": 1400, "verify_peers": ["nosuch.example"]})
    assert ok and res["plan"]["verify"] == []
    assert any("cannot resolve nosuch.example" in w for w in env.warnings)


def test_no_probe_when_mtu_unchanged_and_nothing_pending(env):
    host = env.make_host(mtu=1400)
    ok, res = run_module({"name": "d0", "mtu": 1400, "verify_peers": [PEER]})
    assert ok and res["plan"]["verify"] == [] and host.commands("ping") == []


def test_missing_ping_fails_before_change(env, monkeypatch):
    host = env.make_host()
    monkeypatch.setattr(interface_link.AnsibleModule, "get_bin_path",
                        fake_get_bin_path(dict(BINS, ping=None)))
    ok, res = run_module({"name": "d0", "mtu": 1400, "verify_peers": [PEER]})
    assert not ok and "needs ping" in res["msg"]
    assert host.mutating() == []


@pytest.mark.parametrize("peer", ["", "  ", "-f"])
def test_bad_peer_rejected(env, peer):
    host = env.make_host()
    ok, res = run_module({"name": "d0", "mtu": 1400, "verify_peers": [peer]})
    assert not ok and res["msg"].startswith("verify_peers:")
    assert host.calls == []


# --- finding 9: mq roots keep mq ------------------------------------------------------------------

def test_mq_root_kept_and_children_get_the_qdisc(env):
    host = env.make_host(qdisc=json.loads(fixture("tc_json_mq_all.json")))
    ok, res = run_module({"name": "d0", "qdisc": "pfifo"}, diff=True)
    assert ok, res
    assert host.qdisc == "mq"
    assert host.children() == [("1:%d" % i, "pfifo") for i in range(1, 5)]
    replaces = [c for c in host.commands("tc") if "replace" in c]
    assert all(c[5] == "parent" for c in replaces) and len(replaces) == 4
    assert (res["qdisc_before"], res["qdisc_after"]) == ("mq(pfifo_fast)", "mq(pfifo)")
    assert res["plan"]["qdisc_shape"] == "mq"
    assert res["diff"]["after"] == "mtu: 1500\nqdisc: mq(pfifo)\n"


def test_kernel_default_mq_gets_a_handle_then_children(env):
    host = env.make_host(qdisc=json.loads(fixture("tc_json_mq_default.json")))
    ok, res = run_module({"name": "d0", "qdisc": "pfifo"})
    assert ok, res
    replaces = [c[5:] for c in host.commands("tc") if "replace" in c]
    assert replaces[0] == ["root", "handle", "1:", "mq"]
    assert sorted(replaces[1:]) == [["parent", "1:%d" % i, "pfifo"] for i in range(1, 5)]
    assert host.children() == [("1:%d" % i, "pfifo") for i in range(1, 5)]


def test_mq_only_children_that_differ_are_replaced(env):
    host = env.make_host(qdisc=json.loads(fixture("tc_json_mq_mixed.json")))
    ok, res = run_module({"name": "d0", "qdisc": "pfifo"})
    assert ok, res
    replaces = [c[5:] for c in host.commands("tc") if "replace" in c]
    assert sorted(replaces) == [["parent", "1:2", "pfifo"], ["parent", "1:4", "pfifo"]]


def test_mq_with_wanted_children_is_unchanged(env):
    host = env.make_host(qdisc=json.loads(fixture("tc_json_mq_fq_children.json")),
                         kernel=KERNEL_QDISCS + ("fq",))
    ok, res = run_module({"name": "d0", "qdisc": "fq"})
    assert ok and res["changed"] is False and res["qdisc_status"] == "unchanged"
    assert host.mutating() == [] and host.commands("unshare") == []


def test_single_queue_root_is_replaced(env):
    host = env.make_host(qdisc=json.loads(fixture("tc_json_noqueue.json")))
    ok, res = run_module({"name": "d0", "qdisc": "pfifo"})
    assert ok, res
    replaces = [c[5:] for c in host.commands("tc") if "replace" in c]
    assert replaces == [["root", "pfifo"]]
    assert res["plan"]["qdisc_shape"] == "root" and host.qdisc == "pfifo"


def test_mq_child_that_does_not_stick_fails(env):
    env.make_host(qdisc=json.loads(fixture("tc_json_mq_all.json")), qdisc_sticks=False)
    ok, res = run_module({"name": "d0", "qdisc": "pfifo"})
    assert not ok and "reads back as mq(pfifo_fast)" in res["msg"]


# --- check mode predicts the real run -------------------------------------------------------------

PREDICTABLE = {
    "mtu+qdisc+rollback": (dict(), {"mtu": 1400, "qdisc": "pfifo", "rollback_seconds": 30}),
    "pending re-run": (dict(mtu=1400, pending_mtu=1500), {"mtu": 1400, "rollback_seconds": 30}),
    "pending, new mtu": (dict(mtu=1400, pending_mtu=1500), {"mtu": 1450, "rollback_seconds": 30}),
    "mq": (dict(qdisc=json.loads(fixture("tc_json_mq_default.json"))), {"qdisc": "pfifo"}),
    "unavailable qdisc": (dict(), {"mtu": 1400, "qdisc": "fq"}),
    "verified": (dict(path_mtu=1500), {"mtu": 1400, "verify_peers": [PEER]}),
    "unchanged": (dict(mtu=1400, qdisc="pfifo"), {"mtu": 1400, "qdisc": "pfifo"}),
}


@pytest.mark.parametrize("case", sorted(PREDICTABLE))
def test_check_mode_predicts_exactly_what_the_real_run_reports(env, case):
    host_args, args = PREDICTABLE[case]
    args = dict(args, name="d0")
    host = env.make_host(**host_args)
    ok, predicted = run_module(args, check_mode=True, diff=True)
    assert ok, predicted
    assert host.mutating() == [] and host.commands("ping") == []
    ok, real = run_module(args, diff=True)
    assert ok, real
    # only the probe outcomes need the real change
    assert predicted.pop("verify_results") == []
    real.pop("verify_results")
    assert predicted == real
