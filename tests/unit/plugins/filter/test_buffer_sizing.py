# -*- coding: utf-8 -*-
# Copyright: (c) 2025, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Unit tests of the buffer sizing filters."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.longhaul.trainnet.plugins.filter import buffer_sizing as bs

MIB = 1024 * 1024


def test_filters_are_registered():
    assert set(bs.FilterModule().filters()) == {"bdp_bytes", "tcp_buffer_max",
                                                "tcp_buffer_triplet", "wan_link_paths"}


@pytest.mark.parametrize("bandwidth, rtt, expected", [
    (1000, 200, 25000000),
    (1000, 150, 18750000),
    (10000, 70, 87500000),
    (1, 1, 125),
    (0.1, 0.1, 2),           # 1.25 bytes, rounded up
    ("1000", "200", 25000000),
    (1000.0, 200.0, 25000000),
])
def test_bdp_bytes(bandwidth, rtt, expected):
    assert bs.bdp_bytes(bandwidth, rtt) == expected
    assert isinstance(bs.bdp_bytes(bandwidth, rtt), int)


@pytest.mark.parametrize("bandwidth, rtt", [(0, 200), (1000, 0), (-1, 200), (1000, -5),
                                            (None, 200), (True, 200), ("fast", 200),
                                            (float("inf"), 200)])
def test_bdp_bytes_rejects(bandwidth, rtt):
    with pytest.raises(AnsibleFilterError):
        bs.bdp_bytes(bandwidth, rtt)


def test_one_gbit_200ms_gives_at_least_25mb_window_with_2x():
    links = [{"name": "cn-home<->us-east", "bandwidth_mbps": 1000, "rtt_ms": 200, "loss_pct": 1.0}]
    result = bs.tcp_buffer_max(links)
    assert result >= 50000000           # 2 x 25,000,000: a window of >= 25 MB at half overhead
    assert result // 2 >= bs.bdp_bytes(1000, 200)
    assert result == 48 * MIB           # rounded up to the next whole MiB
    assert result % MIB == 0


def test_tcp_buffer_max_takes_the_largest_bdp():
    links = [
        {"name": "a<->b", "bandwidth_mbps": 1000, "rtt_ms": 150},
        {"name": "a<->c", "bandwidth_mbps": 1000, "rtt_ms": 200},
        {"name": "b<->c", "bandwidth_mbps": 10000, "rtt_ms": 70},
    ]
    # 87.5 MB x 2 = 175,000,000 -> 167 MiB (175,112,192)
    assert bs.tcp_buffer_max(links) == 167 * MIB


def test_tcp_buffer_max_rounds_up_to_whole_mib():
    # 100 Mbit/s x 100 ms = 1,250,000 B; x 16 = 20,000,000 -> 20 MiB = 20,971,520
    assert bs.tcp_buffer_max([{"bandwidth_mbps": 100, "rtt_ms": 100}], overhead_factor=16) == 20 * MIB
    # exactly 24 MiB stays 24 MiB
    exact = 24 * MIB / 2 / 125.0  # bandwidth giving BDP x 2 == 24 MiB at 1 ms
    assert bs.tcp_buffer_max([{"bandwidth_mbps": exact, "rtt_ms": 1}]) == 24 * MIB
    # 1000 Mbit/s x 201.326592 ms x 2 is exactly 48 MiB; a little more rounds up to 49 MiB
    assert bs.tcp_buffer_max([{"bandwidth_mbps": 1000, "rtt_ms": 201.326592}]) == 48 * MIB
    assert bs.tcp_buffer_max([{"bandwidth_mbps": 1000, "rtt_ms": 201.326593}]) == 49 * MIB


def test_tcp_buffer_max_clamps():
    small = [{"bandwidth_mbps": 10, "rtt_ms": 10}]
    assert bs.tcp_buffer_max(small) == 16777216
    assert bs.tcp_buffer_max(small, floor_bytes=4 * MIB) == 4 * MIB
    huge = [{"bandwidth_mbps": 100000, "rtt_ms": 300}]   # 3.75 GB BDP
    assert bs.tcp_buffer_max(huge) == 1073741824
    assert bs.tcp_buffer_max(huge, ceiling_bytes=256 * MIB) == 256 * MIB


def test_tcp_buffer_max_empty_is_floor():
    assert bs.tcp_buffer_max([]) == 16777216
    assert bs.tcp_buffer_max(None) == 16777216
    assert bs.tcp_buffer_max([], floor_bytes=8 * MIB) == 8 * MIB


def test_tcp_buffer_max_overhead_factor_and_string_numbers():
    links = [{"bandwidth_mbps": "1000", "rtt_ms": "200"}]
    assert bs.tcp_buffer_max(links, overhead_factor=1) == 24 * MIB     # 25,000,000 -> 24 MiB
    assert bs.tcp_buffer_max(links, overhead_factor=2.0) == 48 * MIB
    assert bs.tcp_buffer_max(links, overhead_factor="3") == 72 * MIB   # 75,000,000 -> 72 MiB


@pytest.mark.parametrize("link, words", [
    ({"name": "cn-home<->us-east", "rtt_ms": 200}, ["cn-home<->us-east", "bandwidth_mbps"]),
    ({"name": "cn-home<->us-east", "bandwidth_mbps": 1000}, ["cn-home<->us-east", "rtt_ms"]),
    ({"name": "x<->y", "bandwidth_mbps": 0, "rtt_ms": 200}, ["x<->y", "bandwidth_mbps", "greater than 0"]),
    ({"name": "x<->y", "bandwidth_mbps": 1000, "rtt_ms": -1}, ["x<->y", "rtt_ms", "greater than 0"]),
    ({"bandwidth_mbps": 1000, "rtt_ms": "slow"}, ["index 1", "rtt_ms"]),
    ("not a dict", ["index 1"]),
])
def test_tcp_buffer_max_errors_name_the_link_and_field(link, words):
    links = [{"name": "ok", "bandwidth_mbps": 1, "rtt_ms": 1}, link]
    with pytest.raises(AnsibleFilterError) as err:
        bs.tcp_buffer_max(links)
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize("kwargs", [
    {"overhead_factor": 0.5},
    {"overhead_factor": 0},
    {"floor_bytes": 0},
    {"floor_bytes": 2 * MIB, "ceiling_bytes": MIB},
    {"ceiling_bytes": 2 ** 31},
    {"floor_bytes": 1.5},
])
def test_tcp_buffer_max_rejects_bad_parameters(kwargs):
    with pytest.raises(AnsibleFilterError):
        bs.tcp_buffer_max([{"bandwidth_mbps": 1000, "rtt_ms": 200}], **kwargs)


@pytest.mark.parametrize("links", ["1000", {"bandwidth_mbps": 1, "rtt_ms": 1}, 5])
def test_tcp_buffer_max_needs_a_list(links):
    with pytest.raises(AnsibleFilterError, match="list"):
        bs.tcp_buffer_max(links)


def test_tcp_buffer_triplet():
    assert bs.tcp_buffer_triplet(50331648) == "4096 131072 50331648"
    assert bs.tcp_buffer_triplet(50331648, default_bytes=16384) == "4096 16384 50331648"
    assert bs.tcp_buffer_triplet("50331648", min_bytes=8192) == "8192 131072 50331648"


@pytest.mark.parametrize("args, kwargs", [
    ((65536,), {}),                              # default above max
    ((50331648,), {"min_bytes": 262144}),        # min above default
    ((0,), {}),
    ((2 ** 31,), {}),
    (("lots",), {}),
    ((1.5,), {}),
])
def test_tcp_buffer_triplet_rejects(args, kwargs):
    with pytest.raises(AnsibleFilterError):
        bs.tcp_buffer_triplet(*args, **kwargs)


def test_wan_link_paths():
    wan = [
        {"sites": ["cn-home", "us-east"], "delay_ms": 100, "jitter_ms": 5, "rate_mbit": 1000,
         "loss": 0.01, "mtu": 1400},
        {"sites": ["us-west", "us-east"], "delay_ms": 35, "rate_mbit": 10000},
        {"sites": ["a", "b"], "delay_ms": 37.5, "jitter_ms": 0.25, "rate_mbit": 50, "loss": 0.001},
    ]
    assert bs.wan_link_paths(wan) == [
        {"name": "cn-home<->us-east", "bandwidth_mbps": 1000, "rtt_ms": 210, "loss_pct": 1},
        {"name": "us-west<->us-east", "bandwidth_mbps": 10000, "rtt_ms": 70, "loss_pct": 0},
        {"name": "a<->b", "bandwidth_mbps": 50, "rtt_ms": 75.5, "loss_pct": 0.1},
    ]
    assert bs.wan_link_paths([]) == [] and bs.wan_link_paths(None) == []


def test_wan_link_paths_feed_tcp_buffer_max():
    wan = [{"sites": ["cn-home", "us-east"], "delay_ms": 100, "rate_mbit": 1000, "loss": 0.01}]
    assert bs.tcp_buffer_max(bs.wan_link_paths(wan)) == 48 * MIB


@pytest.mark.parametrize("entry, words", [
    ({"sites": ["a"], "delay_ms": 1, "rate_mbit": 1}, ["sites"]),
    ({"delay_ms": 1, "rate_mbit": 1}, ["sites"]),
    ({"sites": ["a", "b"], "rate_mbit": 1}, ["a<->b", "delay_ms"]),
    ({"sites": ["a", "b"], "delay_ms": 1}, ["a<->b", "rate_mbit"]),
    ({"sites": ["a", "b"], "delay_ms": 1, "rate_mbit": 0}, ["a<->b", "rate_mbit"]),
    ({"sites": ["a", "b"], "delay_ms": -1, "rate_mbit": 1}, ["a<->b", "delay_ms"]),
    ({"sites": ["a", "b"], "delay_ms": 1, "jitter_ms": -1, "rate_mbit": 1}, ["jitter_ms"]),
    ({"sites": ["a", "b"], "delay_ms": 1, "rate_mbit": 1, "loss": 1}, ["a<->b", "loss"]),
    ({"sites": ["a", "b"], "delay_ms": 1, "rate_mbit": 1, "loss": -0.1}, ["loss"]),
])
def test_wan_link_paths_errors(entry, words):
    with pytest.raises(AnsibleFilterError) as err:
        bs.wan_link_paths([entry])
    for word in words:
        assert word in str(err.value)
