# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import CommandResult
from ansible_collections.longhaul.trainnet.plugins.modules import path_routes
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    capture_warnings, fake_get_bin_path, patch_module, run_with_args,
)

BINS = {"ip": "/usr/sbin/ip", "ping": "/usr/bin/ping"}
METRIC_KEYS = {"mtu": "mtu", "advmss": "advmss", "initcwnd": "initcwnd", "initrwnd": "initrwnd",
               "cwnd": "cwnd", "congctl": "congestion"}


class FakeRoutes(object):
    """A main table answering `ip -4 -j route show`, `ip -4 route show ... proto N` and `ip -4 route
    replace/delete` like iproute2 6.1; `path_mtu` is what the remote paths carry (DF pings)."""

    def __init__(self, path_mtu=1500, fail_replace=False):
        self.table = {"0.0.0.0/0": {"gateway": "198.18.1.1", "dev": "eth0", "protocol": "", "metrics": {}, "locks": set()},
                      "198.18.1.0/24": {"gateway": "", "dev": "eth0", "protocol": "kernel", "metrics": {}, "locks": set()}}
        self.path_mtu = path_mtu
        self.fail_replace = fail_replace
        self.calls = []

    def run_bounded(self, argv, limit=None, **kwargs):
        assert limit, "every command needs a time limit"
        self.calls.append(list(argv))
        if argv[0] == BINS["ping"]:
            size = int(argv[argv.index("-s") + 1]) + 28
            return CommandResult(0 if "-M" not in argv or size <= self.path_mtu else 1, "", "")
        assert argv[:2] == [BINS["ip"], "-4"] or argv[:2] == [BINS["ip"], "-6"], argv
        if argv[1] == "-6":
            return CommandResult(0, "[]", "") if "-j" in argv else CommandResult(0, "", "")
        if argv[2] == "-j":
            return CommandResult(0, json.dumps(self.dump()), "")
        if argv[2:4] == ["route", "show"]:
            proto = argv[argv.index("proto") + 1]
            return CommandResult(0, "".join(self.text(dst) for dst, r in sorted(self.table.items())
                                            if r["protocol"] == proto), "")
        if argv[3] == "replace":
            if self.fail_replace:
                return CommandResult(2, "", "Error: Nexthop has invalid gateway.\n")
            words = argv[4:]
            route = {"gateway": "", "dev": "", "protocol": "", "metrics": {}, "locks": set()}
            i = 1
            while i < len(words):
                word = words[i]
                if word in ("via", "dev", "proto"):
                    route[{"via": "gateway", "dev": "dev", "proto": "protocol"}[word]] = words[i + 1]
                    i += 2
                    continue
                lock = words[i + 1] == "lock"
                value = words[i + 2] if lock else words[i + 1]
                route["metrics"][METRIC_KEYS[word]] = value if word == "congctl" else int(value)
                if lock:
                    route["locks"].add(word)
                i += 3 if lock else 2
            self.table[words[0]] = route
            return CommandResult(0, "", "")
        if argv[3] == "delete":
            del self.table[argv[4]]
            return CommandResult(0, "", "")
        raise AssertionError("unexpected command %r" % argv)

    def dump(self):
        out = []
        for dst, r in sorted(self.table.items()):
            entry = {"dst": "default" if dst == "0.0.0.0/0" else dst, "dev": r["dev"], "flags": []}
            if r["gateway"]:
                entry["gateway"] = r["gateway"]
            if r["protocol"]:
                entry["protocol"] = r["protocol"]
            if r["metrics"]:
                entry["metrics"] = [dict(r["metrics"])]
            out.append(entry)
        return out

    def text(self, dst):
        r = self.table[dst]
        words = [dst] + (["via", r["gateway"]] if r["gateway"] else []) + ["dev", r["dev"], "proto", r["protocol"]]
        for word, key in METRIC_KEYS.items():
            if key in r["metrics"]:
                words += [word] + (["lock"] if word in r["locks"] else []) + [str(r["metrics"][key])]
        return " ".join(words) + " \n"

    def mutating(self):
        return [c for c in self.calls if c[0] == BINS["ip"] and c[3] in ("replace", "delete")]


@pytest.fixture
def fake(monkeypatch):
    patch_module(monkeypatch, get_bin_path=fake_get_bin_path(BINS))
    routes = FakeRoutes()
    routes.warnings = capture_warnings(monkeypatch)
    routes.files = {path_routes.CC_AVAILABLE: "reno cubic bbr", path_routes.NO_METRICS_SAVE: "0\n"}
    monkeypatch.setattr(path_routes, "run_bounded", routes.run_bounded)
    monkeypatch.setattr(path_routes, "read_text", lambda path: routes.files.get(path, ""))
    return routes


def run_module(args, check_mode=False, diff=False):
    return run_with_args(path_routes.main, args, check_mode, diff)


WANTED = [{"prefix": "198.18.3.0/24", "mtu": 1280, "name": "cn-home<->us-east", "initcwnd": 300,
           "initrwnd": 300, "cwnd_clamp": 900, "congctl": "bbr"}]


def test_check_mode_predicts_what_the_real_run_does_then_nothing_changes(fake):
    ok, predicted = run_module({"routes": WANTED}, check_mode=True, diff=True)
    assert ok and predicted["changed"] and fake.mutating() == []
    assert predicted["drift"] == ["route 198.18.3.0/24: missing (want via 198.18.1.1 dev eth0 mtu 1280 advmss 1240 "
                                  "initcwnd 300 initrwnd 300 cwnd lock 900 congctl bbr)"]
    ok, applied = run_module({"routes": WANTED, "verify_peers": ["198.18.3.11"]}, diff=True)
    assert ok and applied["changed"]
    assert (applied["routes"], applied["diff"]) == (predicted["routes"], predicted["diff"])
    assert applied["verify_results"] == [{"address": "198.18.3.11", "prefix": "198.18.3.0/24",
                                          "payload": 1252, "result": "ok"}]
    assert fake.text("198.18.3.0/24") == ("198.18.3.0/24 via 198.18.1.1 dev eth0 proto 250 mtu 1280 advmss 1240 "
                                          "initcwnd 300 initrwnd 300 cwnd lock 900 congctl bbr \n")
    ok, again = run_module({"routes": WANTED})
    assert ok and not again["changed"] and again["drift"] == []
    # the boot unit's ExecStart= line: plain words, as systemd reads them unquoted
    assert applied["routes"][0]["command"] == ("/usr/sbin/ip -4 route replace 198.18.3.0/24 via 198.18.1.1 dev eth0 proto 250 "
                                               "mtu 1280 advmss 1240 initcwnd 300 initrwnd 300 cwnd lock 900 congctl bbr")


def test_a_hand_change_is_drift_and_an_empty_list_removes_the_routes(fake):
    run_module({"routes": WANTED})
    fake.table["198.18.3.0/24"]["locks"].discard("cwnd")
    ok, res = run_module({"routes": WANTED}, check_mode=True)
    assert ok and res["changed"] and "cwnd (not locked)" in res["drift"][0]
    ok, res = run_module({"routes": []})
    assert ok and res["changed"] and "198.18.3.0/24" not in fake.table and "0.0.0.0/0" in fake.table


def test_a_path_that_does_not_carry_the_mtu_undoes_the_change(fake):
    fake.path_mtu = 1200
    ok, res = run_module({"routes": WANTED, "verify_peers": ["198.18.3.11"]})
    assert not ok and "does not reach 198.18.3.11" in res["msg"] and "put back" in res["msg"]
    assert "198.18.3.0/24" not in fake.table


def test_bad_input_fails_before_any_change(fake):
    for args, text in (({"routes": [dict(WANTED[0], congctl="vegas")]}, "congctl vegas is not available"),
                       ({"routes": [dict(WANTED[0], prefix="198.18.1.0/24")]}, "already exists"),
                       ({"routes": WANTED, "verify_peers": ["use-gpu1"]}, "not an IP address"),
                       ({"routes": WANTED, "protocol": 3}, "protocol must be an integer from 5 to 255"),
                       # issue 23 finding 9: the name would add a line to data_plane's boot unit
                       ({"routes": [dict(WANTED[0], name="x\nExecStart=/bin/sh")]},
                        "name='x\\nExecStart=/bin/sh' must be one line of text")):
        ok, res = run_module(args)
        assert not ok and text in res["msg"], res
    assert fake.mutating() == []


def test_a_failed_replace_puts_back_what_was_done(fake):
    run_module({"routes": WANTED})
    fake.fail_replace = True
    ok, res = run_module({"routes": [dict(WANTED[0], mtu=1400)]})
    assert not ok and "Nexthop has invalid gateway" in res["msg"]
    assert fake.table["198.18.3.0/24"]["metrics"]["mtu"] == 1280


@pytest.mark.parametrize("no_metrics_save, clamp, warned", [("1\n", 900, True), ("0\n", 900, False), ("1\n", None, False)])
def test_a_cwnd_cap_the_kernel_would_not_apply_is_warned_about(fake, no_metrics_save, clamp, warned):
    # tcp_init_metrics() takes a route's locked cwnd from the destination's TCP metrics, which the
    # kernel does not save with tcp_no_metrics_save=1: the route would carry a cap nothing uses.
    fake.files[path_routes.NO_METRICS_SAVE] = no_metrics_save
    ok, result = run_module({"routes": [dict(WANTED[0], cwnd_clamp=clamp)]}, check_mode=True)
    assert ok and result["changed"]
    cap_warnings = [w for w in fake.warnings if "cwnd_clamp" in w]
    assert bool(cap_warnings) is warned, fake.warnings
    if warned:
        assert "198.18.3.0/24" in cap_warnings[0] and "net.ipv4.tcp_no_metrics_save=1" in cap_warnings[0]
