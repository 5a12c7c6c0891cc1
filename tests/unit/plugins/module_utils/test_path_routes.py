# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import path_routes as pr
from ansible_collections.longhaul.trainnet.plugins.module_utils.interface_link import (
    parse_route_get_mtu, plan_link,
)

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "fixtures", "path_routes")


def text(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def live(name):
    return pr.parse_routes(text(name))


def test_parse_lab_routes():
    routes = live("lab_cn_gpu1.json")
    by_dst = {r["dst"]: r for r in routes}
    assert by_dst["0.0.0.0/0"]["gateway"] == "198.18.1.1"
    assert by_dst["198.18.1.0/24"]["protocol"] == "kernel"
    assert by_dst["198.18.3.0/24"]["protocol"] == "250"
    assert by_dst["198.18.3.0/24"]["metrics"] == {"mtu": 1280, "advmss": 1240}


def test_lab_routes_as_wanted_plan_nothing():
    wanted = [{"prefix": "198.18.2.0/24", "mtu": 1400}, {"prefix": "198.18.3.0/24", "mtu": 1280}]
    plan = pr.plan_routes(wanted, live("lab_cn_gpu1.json"), 250)
    assert plan["errors"] == [] and plan["actions"] == [] and not plan["changed"]
    assert [(r["prefix"], r["gateway"], r["dev"], r["advmss"]) for r in plan["routes"]] == [
        ("198.18.2.0/24", "198.18.1.1", "eth0", 1360), ("198.18.3.0/24", "198.18.1.1", "eth0", 1240)]


def test_changed_mtu_replaces_and_unwanted_route_is_deleted():
    plan = pr.plan_routes([{"prefix": "198.18.3.0/24", "mtu": 1400, "name": "cn-home<->us-east"}],
                          live("lab_cn_gpu1.json"), 250)
    assert plan["changed"]
    assert [(a["action"], (a["route"] or a["before"])["prefix"]) for a in plan["actions"]] == [
        ("replace", "198.18.3.0/24"), ("delete", "198.18.2.0/24")]
    drift = pr.drift_lines(plan["actions"])
    assert drift[0] == ("route 198.18.3.0/24: via 198.18.1.1 dev eth0 mtu 1280 advmss 1240 -> "
                        "via 198.18.1.1 dev eth0 mtu 1400 advmss 1360")
    assert "not wanted any more" in drift[1]
    assert pr.render_state(plan["after"]) == "198.18.3.0/24 via 198.18.1.1 dev eth0 mtu 1400 advmss 1360\n"


def test_hand_added_metrics_are_drift_and_other_owners_are_left_alone():
    routes = live("hand_edited.json")
    wanted = [{"prefix": "10.20.0.0/24", "mtu": 1280}, {"prefix": "10.21.0.0/24", "mtu": 1280},
              {"prefix": "10.30.5.0/24", "mtu": 1400}]
    plan = pr.plan_routes(wanted, routes, 250, pr.parse_locks(text("hand_edited.txt")))
    actions = {(a["route"] or a["before"])["prefix"]: a for a in plan["actions"]}
    assert set(actions) == {"10.21.0.0/24", "10.30.5.0/24"}
    assert actions["10.21.0.0/24"]["action"] == "replace"
    before = actions["10.21.0.0/24"]["before"]
    assert (before["initcwnd"], before["congctl"], before["other_metrics"]) == (40, "bbr", ["mtu lock"])
    # The /16 of another owner is the next hop of a /24 inside it, not the default route.
    assert actions["10.30.5.0/24"]["action"] == "add"
    assert actions["10.30.5.0/24"]["route"]["gateway"] == "10.9.0.254"


def test_prefix_of_another_owner_or_without_route_is_an_error_and_nothing_changes():
    routes = live("hand_edited.json")
    plan = pr.plan_routes([{"prefix": "10.30.0.0/16", "mtu": 1400}, {"prefix": "10.21.0.0/24", "mtu": 1400}],
                          routes, 250)
    assert plan["actions"] == [] and not plan["changed"]
    assert "already exists" in plan["errors"][0] and "protocol static" in plan["errors"][0]
    without_default = [r for r in routes if r["dst"] != "0.0.0.0/0"]
    plan = pr.plan_routes([{"prefix": "172.16.0.0/24", "mtu": 1400}], without_default, 250)
    assert "no route covers 172.16.0.0/24" in plan["errors"][0]


@pytest.mark.parametrize("routes, protocol, expected", [
    ([{"prefix": "198.18.3.0/24", "mtu": 1280}], 250, []),
    ([{"prefix": "198.18.3.1/24", "mtu": 1280}], 250, ["host bits set"]),
    ([{"prefix": "0.0.0.0/0", "mtu": 1280}], 250, ["default route"]),
    ([{"prefix": "198.18.3.0/24", "mtu": 500}], 250, ["576 to 9000"]),
    ([{"prefix": "2001:db8::/64", "mtu": 1200}], 250, ["IPv6 needs an mtu of at least 1280"]),
    ([{"prefix": "198.18.3.0/24", "mtu": 1280}, {"prefix": "198.18.3.0/24", "mtu": 1400}], 250, ["give each prefix once"]),
    ([{"prefix": "198.18.3.0/24", "mtu": 1280, "cwnd": 10}], 250, ["unknown keys cwnd"]),
    ([], 2, ["protocol must be an integer from 5 to 255"]),
    # Issue 23 finding 9: the name is a comment line of data_plane's boot unit.
    ([{"prefix": "198.18.3.0/24", "mtu": 1280, "name": "cn-home<->us-east (measured from usw-gpu1)"}], 250, []),
    ([{"prefix": "198.18.3.0/24", "mtu": 1280, "name": "x\nExecStart=/bin/sh"}], 250,
     ["routes[0] (198.18.3.0/24): name='x\\nExecStart=/bin/sh' must be one line of text"]),
    ([{"prefix": "198.18.3.0/24", "mtu": 1280, "name": "x\\"}], 250, ["must be one line of text"]),
])
def test_validate_wanted(routes, protocol, expected):
    errors = pr.validate_wanted(routes, protocol)
    assert len(errors) == len(expected)
    for error, text in zip(errors, expected):
        assert text in error


def test_route_argv_whole_and_delete():
    route = {"prefix": "198.18.3.0/24", "gateway": "198.18.1.1", "dev": "eth0", "mtu": 1280, "advmss": 1240}
    assert pr.route_argv("ip", route, 250) == [
        "ip", "-4", "route", "replace", "198.18.3.0/24", "via", "198.18.1.1", "dev", "eth0", "proto", "250",
        "mtu", "1280", "advmss", "1240"]
    assert pr.route_argv("ip", dict(route, gateway="", advmss=None), 250)[-4:] == ["proto", "250", "mtu", "1280"]
    assert pr.route_argv("ip", route, 250, pr.ACTION_DELETE) == [
        "ip", "-4", "route", "delete", "198.18.3.0/24", "proto", "250"]


def test_covering_route_takes_the_longest_prefix():
    routes = [{"prefix": "198.18.0.0/16", "mtu": 1400}, {"prefix": "198.18.3.0/24", "mtu": 1280}]
    assert pr.covering_route("198.18.3.11", routes)["mtu"] == 1280
    assert pr.covering_route("198.18.2.11", routes)["mtu"] == 1400
    assert pr.covering_route("10.0.0.1", routes) is None
    assert pr.covering_route("use-gpu1", routes) is None


def test_interface_probe_uses_the_smaller_route_mtu():
    """interface_link probes a peer behind a path route at that route's MTU, not the interface's."""
    text = ('[{"dst":"198.18.3.11","gateway":"198.18.1.1","dev":"eth0","prefsrc":"198.18.1.11","flags":[],'
            '"uid":0,"cache":[],"metrics":[{"mtu":1280,"advmss":1240}]}]')
    assert parse_route_get_mtu(text) == 1280
    assert parse_route_get_mtu('[{"dst":"198.18.2.11","dev":"eth0","flags":[]}]') is None
    assert parse_route_get_mtu("not json") is None
    peers = [{"peer": "198.18.3.11", "address": "198.18.3.11", "ipv6": False, "route_mtu": 1280},
             {"peer": "198.18.2.11", "address": "198.18.2.11", "ipv6": False, "route_mtu": None}]
    plan = plan_link(1500, "noqueue", want_mtu=1400, verify_peers=peers)
    assert [p["payload"] for p in plan["verify"]] == [1252, 1372]


def test_locks_come_from_the_text_output():
    assert pr.parse_locks(text("hand_edited.txt")) == {"10.21.0.0/24": {"mtu"}}
    assert pr.parse_locks(text("tuned.txt")) == {"10.21.0.0/24": {"cwnd"}}


def test_tcp_attributes_as_wanted_plan_nothing_and_an_unlocked_cwnd_is_drift():
    routes = live("tuned.json")
    wanted = [{"prefix": "10.21.0.0/24", "mtu": 1280, "initcwnd": 700, "initrwnd": 700,
               "cwnd_clamp": 1000, "congctl": "bbr"}]
    locks = pr.parse_locks(text("tuned.txt"))
    plan = pr.plan_routes(wanted, routes, 250, locks)
    # 10.21 is as wanted; 10.22 is not wanted any more.
    assert [(a["action"], a["before"]["prefix"]) for a in plan["actions"]] == [("delete", "10.22.0.0/24")]
    assert "cwnd (not locked)" in plan["before"][1]["other_metrics"]
    # Without the lock the kernel ignores cwnd: the same value unlocked is drift.
    plan = pr.plan_routes(wanted, routes, 250, {})
    assert plan["actions"][0]["action"] == "replace"
    assert plan["actions"][0]["before"]["cwnd_clamp"] is None
    route = plan["routes"][0]
    assert pr.route_argv("ip", route, 250)[11:] == [
        "mtu", "1280", "advmss", "1240", "initcwnd", "700", "initrwnd", "700",
        "cwnd", "lock", "1000", "congctl", "bbr"]
    assert pr.describe(route).endswith("initcwnd 700 initrwnd 700 cwnd lock 1000 congctl bbr")


@pytest.mark.parametrize("route, expected", [
    ({"initcwnd": 0}, "initcwnd must be an integer from 1 to 4096"),
    ({"initrwnd": 5000}, "initrwnd must be an integer from 1 to 4096"),
    ({"cwnd_clamp": 1}, "cwnd_clamp must be an integer from 2 to 65535"),
    ({"congctl": "bbr; reboot"}, "congctl must be a congestion control name"),
])
def test_tcp_attribute_ranges(route, expected):
    errors = pr.validate_wanted([dict({"prefix": "10.21.0.0/24", "mtu": 1280}, **route)], 250)
    assert len(errors) == 1 and expected in errors[0]


def test_congctl_must_be_available_or_loadable():
    assert pr.congctl_problem("bbr", "reno cubic bbr") is None
    dep = "kernel/net/ipv4/tcp_bbr.ko.xz:\nkernel/net/ipv4/tcp_htcp.ko:\n"
    assert pr.congctl_problem("htcp", "reno cubic", dep) is None
    problem = pr.congctl_problem("vegas", "reno cubic", dep)
    assert "congctl vegas is not available" in problem and "reno, cubic" in problem
