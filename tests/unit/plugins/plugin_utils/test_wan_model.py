# -*- coding: utf-8 -*-
# Copyright: (c) 2026, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of the WAN model: the link matrix checked and normalised once for every reader."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.longhaul.trainnet.plugins.filter import wan_model as wan_filter
from ansible_collections.longhaul.trainnet.plugins.plugin_utils import wan_model as wm

SITES = ["cn-home", "us-west", "us-east"]
LAB = [{"sites": ["cn-home", "us-west"], "delay_ms": 75, "jitter_ms": 0, "rate_mbit": 50, "loss": 0.005,
        "queue_bytes": 0, "mtu": 1400, "icmp_blackhole": True},
       {"sites": ["cn-home", "us-east"], "delay_ms": 100, "rate_mbit": 50, "loss": 0.007},
       {"sites": ["us-west", "us-east"], "delay_ms": 37.5, "jitter_ms": 0.25, "rate_mbit": 100}]


def test_the_lab_matrix_normalised():
    links, problems = wm.normalise(LAB, SITES)
    assert problems == []
    assert [(l["name"], l["mtu"], l["rtt_ms"], l["bandwidth_mbps"], l["loss_pct"]) for l in links] == [
        ("cn-home<->us-west", 1400, 150, 50, 0.5),
        ("cn-home<->us-east", 1500, 200, 50, 0.7),      # decimal arithmetic: 0.007 x 100 is 0.7
        ("us-west<->us-east", 1500, 75.5, 100, 0)]
    assert links[1]["icmp_blackhole"] is False and links[1]["loss_model"] == "bernoulli"
    # a full one-BDP queue holds a packet one round trip (without jitter); 37.5 ms x 2 x 100 Mbit/s is 937500 B
    assert [l["queue_delay_ms"] for l in links] == [150, 200, 75]
    assert LAB[1] == {"sites": ["cn-home", "us-east"], "delay_ms": 100, "rate_mbit": 50, "loss": 0.007}  # not modified


def test_without_defaults_a_link_keeps_only_what_it_gives():
    links, problems = wm.normalise([{"sites": ["cn-home", "us-east"], "mtu": 1280}], SITES,
                                   required=("sites",), defaults=False)
    assert problems == [] and links == [{"sites": ["cn-home", "us-east"], "mtu": 1280, "name": "cn-home<->us-east"}]


@pytest.mark.parametrize("link, problem", [
    ({"sites": ["cn-home", "us-west"], "delay_ms": 75, "rate_mbit": 50, "mtu": 575},
     "link cn-home<->us-west: mtu = 575 must be an integer from 576 to 9000"),
    ({"sites": ["cn-home", "us-west"], "delay_ms": 75, "rate_mbit": 50, "mtu": 9001},
     "link cn-home<->us-west: mtu = 9001 must be an integer from 576 to 9000"),
    ({"sites": ["cn-home", "us-west"], "delay_ms": 75, "rate_mbit": 50, "mtu": "1400"},
     "link cn-home<->us-west: mtu = '1400' must be an integer from 576 to 9000"),
    ({"sites": ["cn-home", "mars"], "delay_ms": 75, "rate_mbit": 50}, "link cn-home<->mars: sites: unknown site 'mars'"),
    ({"sites": ["cn-home", "cn-home"], "delay_ms": 75, "rate_mbit": 50},
     "link cn-home<->cn-home: sites: a link joins two different sites"),
    ({"sites": ["cn-home", ""], "delay_ms": 75, "rate_mbit": 50},
     "trainnet_wan_links[0]: sites = ['cn-home', ''] must be a list of two site names"),
    ({"sites": ["cn-home", "us-west"], "rate_mbit": 50}, "link cn-home<->us-west: delay_ms is missing"),
    ({"sites": ["cn-home", "us-west"], "delay_ms": 75, "rate_mbit": 0},
     "link cn-home<->us-west: rate_mbit = 0 must be a rate in Mbit/s above 0 (at most 10000)"),
    ({"sites": ["cn-home", "us-west"], "delay_ms": 75, "rate_mbit": 50, "loss": True},
     "link cn-home<->us-west: loss = True must be a probability in [0, 1) (0.01 is 1%)"),
    ({"sites": ["cn-home", "us-west"], "delay_ms": 75, "rate_mbit": 50, "queue_bytes": 1000},
     "link cn-home<->us-west: queue_bytes = 1000 cannot hold one packet of the path MTU (1500); use 0 for about one BDP"),
    ({"sites": ["cn-home", "us-west"], "delay_ms": 75, "rate_mbit": 50, "loss_burst_packets": 4},
     "link cn-home<->us-west: loss_burst_packets = 4 needs loss_model: gilbert_elliott (bernoulli losses are independent, no bursts)"),
    ({"sites": ["cn-home", "us-west"], "delay_ms": 75, "rate_mbit": 50, 7: 1, "colour": "blue"},
     "link cn-home<->us-west: unknown field 7"),
    ("cn-home<->us-west", "trainnet_wan_links[0]: expected a mapping"),
])
def test_each_rule_names_the_link_and_the_field(link, problem):
    links, problems = wm.normalise([link], SITES)
    assert links == [] and any(p.startswith(problem) for p in problems), problems


def test_one_link_per_pair_and_a_list_of_links():
    pair = [{"sites": ["cn-home", "us-west"], "delay_ms": 75, "rate_mbit": 50},
            {"sites": ["us-west", "cn-home"], "delay_ms": 80, "rate_mbit": 50}]
    links, problems = wm.normalise(pair, SITES)
    assert len(links) == 1 and problems == ["link us-west<->cn-home: the sites are already joined by link cn-home<->us-west"]
    assert wm.normalise({"sites": []}) == ([], ["trainnet_wan_links: expected a list of links, got dict"])
    assert wm.normalise(None) == ([], [])


def test_the_filter_returns_the_model_or_fails_listing_every_problem():
    assert wan_filter.wan_links(LAB, {site: {"lan": "198.18.%d.0/24" % i} for i, site in enumerate(SITES, 1)}) \
        == wm.normalise(LAB, SITES)[0]
    bad = [dict(LAB[0], mtu=100), dict(LAB[2], rate_mbit=-1)]
    with pytest.raises(AnsibleFilterError) as caught:
        wan_filter.wan_links(bad, dict.fromkeys(SITES))
    assert "mtu = 100 must be an integer" in str(caught.value) and "rate_mbit = -1" in str(caught.value)
    with pytest.raises(AnsibleFilterError, match="sites must be a dict"):
        wan_filter.wan_links(LAB, SITES)
    assert set(wan_filter.FilterModule().filters()) == {"wan_links"}


@pytest.mark.parametrize("queue_bytes, rate_mbit, delay_ms, expected", [
    (0, 50, 75, 150),            # one BDP of the round trip: one RTT
    (0, 1000, 0.5, 1),           # the 64 KiB floor: 65536 B at 1 Gbit/s is 0.52 ms, rounded up
    (125000, 10, 5, 100),        # a queue of its own: 1 Mbit at 10 Mbit/s
    (125001, 10, 5, 101),        # a byte more: rounded up, never under
])
def test_queue_delay_is_how_long_a_full_queue_holds_a_packet(queue_bytes, rate_mbit, delay_ms, expected):
    assert wm.queue_delay_ms(queue_bytes, rate_mbit, delay_ms) == expected
