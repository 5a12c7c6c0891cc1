# -*- coding: utf-8 -*-
# Copyright: (c) 2026, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of the per-destination path MTU filters."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.longhaul.trainnet.plugins.filter import site_routes as pm

SITES = {"cn-home": {"lan": "198.18.1.0/24"}, "us-west": {"lan": "198.18.2.0/24"},
         "us-east": {"lan": ["198.18.3.0/24", "198.18.4.0/24"]}}
LINKS = [{"sites": ["cn-home", "us-west"], "mtu": 1400, "delay_ms": 75, "jitter_ms": 0, "rate_mbit": 50},
         {"sites": ["cn-home", "us-east"], "mtu": 1280},
         {"sites": ["us-west", "us-east"], "delay_ms": 35, "jitter_ms": 2.5, "rate_mbit": 100}]


def test_filters_are_registered():
    assert set(pm.FilterModule().filters()) == {"site_path_routes", "effective_path_routes"}


def test_site_routes_follow_the_link_matrix():
    assert pm.site_path_routes(LINKS, SITES, "cn-home") == [
        {"name": "cn-home<->us-west", "prefix": "198.18.2.0/24", "mtu": 1400, "bandwidth_mbps": 50.0, "rtt_ms": 150.0},
        {"name": "cn-home<->us-east", "prefix": "198.18.3.0/24", "mtu": 1280},
        {"name": "cn-home<->us-east", "prefix": "198.18.4.0/24", "mtu": 1280}]
    # The us-west<->us-east link records no MTU: its routes carry only the path's rate and RTT.
    assert pm.site_path_routes(LINKS, SITES, "us-west") == [
        {"name": "cn-home<->us-west", "prefix": "198.18.1.0/24", "mtu": 1400, "bandwidth_mbps": 50.0, "rtt_ms": 150.0},
        {"name": "us-west<->us-east", "prefix": "198.18.3.0/24", "bandwidth_mbps": 100.0, "rtt_ms": 75.0},
        {"name": "us-west<->us-east", "prefix": "198.18.4.0/24", "bandwidth_mbps": 100.0, "rtt_ms": 75.0}]


@pytest.mark.parametrize("links, sites, site, text", [
    (LINKS, SITES, "eu-north", "site 'eu-north' is not in sites"),
    ([{"sites": ["cn-home"], "mtu": 1400}], SITES, "cn-home", "two site names"),
    ([{"sites": ["cn-home", "mars"], "mtu": 1400}], SITES, "cn-home", "unknown site 'mars'"),
    ([{"sites": ["cn-home", "us-west"], "mtu": "1400"}], SITES, "cn-home", "mtu = '1400' must be an integer from 576 to 9000"),
    ([{"sites": ["cn-home", "us-west"], "mtu": 20000}], SITES, "cn-home", "mtu = 20000 must be an integer from 576 to 9000"),
    ([{"sites": ["cn-home", "us-west"], "mtu": 1400}, {"sites": ["us-west", "cn-home"]}], SITES, "cn-home",
     "already joined by link cn-home<->us-west"),
    (LINKS, dict(SITES, **{"us-west": {"lan": "198.18.2.1/24"}}), "cn-home", "not a network prefix"),
    (LINKS, dict(SITES, **{"us-west": {}}), "cn-home", "has no lan prefix"),
])
def test_site_routes_refuse_bad_input(links, sites, site, text):
    with pytest.raises(AnsibleFilterError, match=text):
        pm.site_path_routes(links, sites, site)


def results(*pairs):
    return {"pairs": [{"source": s, "peer": p, "peer_address": a, "result": {"path_mtu_bytes": m}}
                      for s, p, a, m in pairs]}


def test_effective_routes_take_the_smallest_known_mtu():
    routes = [{"name": "cn-home<->us-west", "prefix": "198.18.2.0/24", "mtu": 1500},
              {"name": "cn-home<->us-east", "prefix": "198.18.3.0/24", "mtu": 1500}]
    measured = results(("cn-gpu1", "use-gpu1", "198.18.3.11", 1280),      # below the matrix: wins
                       ("cn-gpu1", "eu-gpu1", "203.0.113.7", 1380),       # no route covers it: host route
                       ("cn-gpu1", "usw-gpu1", "usw-gpu1", 1200),         # a host name: left out
                       ("usw-gpu1", "cn-gpu1", "198.18.1.11", 1100))      # another source: not ours
    assert pm.effective_path_routes(routes, 1400, measured, "cn-gpu1") == [
        {"name": "cn-home<->us-west", "prefix": "198.18.2.0/24", "mtu": 1400},
        {"name": "cn-home<->us-east (measured from use-gpu1)", "prefix": "198.18.3.0/24", "mtu": 1280},
        {"name": "measured eu-gpu1", "prefix": "203.0.113.7/32", "mtu": 1380}]
    # Without an interface MTU to cap them, and without measurements.
    assert [r["mtu"] for r in pm.effective_path_routes(routes)] == [1500, 1500]


def test_a_measured_path_mtu_holds_both_ways():
    routes = [{"name": "cn-home<->us-east", "prefix": "198.18.3.0/24", "mtu": 1500}]
    measured = results(("cn-gpu1", "use-gpu1", "198.18.3.11", 1280))
    measured["pairs"][0]["source_address"] = "198.18.1.11"
    back = [{"name": "cn-home<->us-east", "prefix": "198.18.1.0/24", "mtu": 1500}]
    # the measured host's route back to the source gets the same MTU (the source's side as before)
    assert pm.effective_path_routes(back, 1400, measured, "use-gpu1") == [
        {"name": "cn-home<->us-east (measured from cn-gpu1)", "prefix": "198.18.1.0/24", "mtu": 1280}]
    assert pm.effective_path_routes(routes, 1400, measured, "cn-gpu1")[0]["mtu"] == 1280
    # both directions measured: the smaller one counts for both ends, one host route per address
    measured["pairs"].append({"source": "use-gpu1", "peer": "cn-gpu1", "peer_address": "198.18.1.11",
                              "source_address": "198.18.3.11", "result": {"path_mtu_bytes": 1240}})
    assert pm.effective_path_routes([], 1400, measured, "cn-gpu1") == [
        {"name": "measured use-gpu1", "prefix": "198.18.3.11/32", "mtu": 1240}]
    assert pm.effective_path_routes([], 1400, measured, "use-gpu1") == [
        {"name": "measured cn-gpu1", "prefix": "198.18.1.11/32", "mtu": 1240}]


@pytest.mark.parametrize("routes, kwargs, text", [
    ([{"mtu": 1400}], {}, "needs a prefix"),
    ([], {"first_flight_bytes": -1}, "first_flight_bytes must be a number >= 0"),
    ([{"prefix": "198.18.3.1/24", "mtu": 1280}], {}, "not a network prefix"),
    ([], {"interface_mtu": "1400"}, "interface_mtu must be an integer"),
    ([], {"measured": {"routes": []}, "host": "cn-gpu1"}, "measure results.json"),
])
def test_effective_routes_refuse_bad_input(routes, kwargs, text):
    with pytest.raises(AnsibleFilterError, match=text):
        pm.effective_path_routes(routes, **kwargs)


def test_tcp_attributes_follow_each_path():
    """initcwnd/initrwnd: the first flight in one round trip, capped at the path's BDP; the cap on the
    congestion window: BDPs of the path; congctl: the same on every WAN route."""
    routes = pm.site_path_routes(LINKS, SITES, "us-west")
    tuned = pm.effective_path_routes(routes, 1400, first_flight_bytes=1048576, cwnd_clamp_bdp=1.5, congctl="bbr")
    # cn-home<->us-west: 50 Mbit/s x 150 ms = 937500 B = 696 segments of 1348 data bytes (MTU 1400 less
    # 40 B of headers and the 12 B timestamps option), below 1 MiB's 778.
    assert tuned[0] == {"name": "cn-home<->us-west", "prefix": "198.18.1.0/24", "mtu": 1400,
                        "initcwnd": 696, "initrwnd": 696, "cwnd_clamp": 1044, "congctl": "bbr"}
    # us-west<->us-east: 100 Mbit/s x 75 ms = 696 segments too; its MTU is the interface's.
    assert tuned[1]["mtu"] == 1400 and tuned[1]["initcwnd"] == 696
    # A BDP above the first flight: 1 MiB in whole data segments, 778 x 1348 B >= 1048576 B.
    fast = [dict(routes[0], bandwidth_mbps=100.0)]
    assert pm.effective_path_routes(fast, 1400, first_flight_bytes=1048576)[0]["initcwnd"] == 778
    # A small first flight: 64 KiB = 49 segments, whatever the BDP; never below the kernel's 10.
    assert pm.effective_path_routes(routes, 1400, first_flight_bytes=65536)[0]["initcwnd"] == 49
    assert pm.effective_path_routes(routes, 1400, first_flight_bytes=1000)[0]["initcwnd"] == 10
    # Nothing asked: the routes carry no TCP attribute; without rate and RTT no window either.
    assert set(pm.effective_path_routes(routes, 1400)[0]) == {"name", "prefix", "mtu"}
    bare = pm.effective_path_routes([{"prefix": "203.0.113.0/24"}], None, first_flight_bytes=1048576,
                                    cwnd_clamp_bdp=1)
    assert bare == [{"name": "203.0.113.0/24", "prefix": "203.0.113.0/24", "initcwnd": 725, "initrwnd": 725}]
