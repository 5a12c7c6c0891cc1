# -*- coding: utf-8 -*-
# Copyright: (c) 2025, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Bandwidth-delay product and socket-buffer sizing filters.

Documentation of each filter is in the YAML file of the same name next to this one
(bdp_bytes.yml, tcp_buffer_max.yml, tcp_buffer_triplet.yml, wan_link_paths.yml).

The BDP arithmetic and the exact numbers (fractions.Fraction on the decimal text of each value)
are plugins/plugin_utils/bdp.py, shared with the lab and the benchmarks; this file validates
the filters' arguments and turns bad ones into AnsibleFilterError naming the argument.
"""

from __future__ import annotations

import math
from fractions import Fraction

from ansible.errors import AnsibleFilterError
from ansible_collections.longhaul.trainnet.plugins.plugin_utils import wan_model
from ansible_collections.longhaul.trainnet.plugins.plugin_utils.bdp import bdp, exact
from ansible_collections.longhaul.trainnet.plugins.plugin_utils.bdp import bdp_bytes as shared_bdp_bytes

MIB = 1024 * 1024
# tcp_rmem/tcp_wmem and net.core.rmem_max/wmem_max are C ints in the kernel.
KERNEL_INT_MAX = 2 ** 31 - 1


def _number(value, what):
    """Exact Fraction of an int, float or numeric string; bools and others are refused."""
    try:
        return exact(value)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError("%s %s" % (what, exc))


def _positive(value, what):
    number = _number(value, what)
    if number <= 0:
        raise AnsibleFilterError("%s must be greater than 0, got %r" % (what, value))
    return number


def _byte_count(value, what):
    number = _positive(value, what)
    if number.denominator != 1:
        raise AnsibleFilterError("%s must be a whole number of bytes, got %r" % (what, value))
    return int(number)


def bdp_bytes(bandwidth_mbps, rtt_ms):
    """Bandwidth-delay product in bytes (rounded up) of a path of bandwidth_mbps and rtt_ms."""
    bandwidth = _positive(bandwidth_mbps, "bdp_bytes: bandwidth_mbps")
    rtt = _positive(rtt_ms, "bdp_bytes: rtt_ms")
    return shared_bdp_bytes(bandwidth, rtt)


def _link_label(link, index):
    name = link.get("name") if isinstance(link, dict) else None
    if name:
        return "link %r (index %d)" % (name, index)
    return "link at index %d" % index


def tcp_buffer_max(links, overhead_factor=2, floor_bytes=16777216, ceiling_bytes=1073741824):
    """Socket-buffer maximum for the largest BDP of the links.

    max over links of BDP x overhead_factor, rounded UP to a whole MiB, clamped to
    [floor_bytes, ceiling_bytes]. An empty list gives floor_bytes.
    """
    factor = _number(overhead_factor, "tcp_buffer_max: overhead_factor")
    if factor < 1:
        raise AnsibleFilterError("tcp_buffer_max: overhead_factor must be at least 1, got %r"
                                 % (overhead_factor,))
    floor = _byte_count(floor_bytes, "tcp_buffer_max: floor_bytes")
    ceiling = _byte_count(ceiling_bytes, "tcp_buffer_max: ceiling_bytes")
    if floor > ceiling:
        raise AnsibleFilterError("tcp_buffer_max: floor_bytes (%d) is larger than ceiling_bytes (%d)"
                                 % (floor, ceiling))
    if ceiling > KERNEL_INT_MAX:
        raise AnsibleFilterError("tcp_buffer_max: ceiling_bytes (%d) exceeds the kernel's limit for "
                                 "socket buffer sysctls (%d)" % (ceiling, KERNEL_INT_MAX))
    if links is None:
        links = []
    if isinstance(links, (str, bytes, dict)) or not hasattr(links, "__iter__"):
        raise AnsibleFilterError("tcp_buffer_max: expects a list of links "
                                 "({name, bandwidth_mbps, rtt_ms}), got %s" % type(links).__name__)
    need = Fraction(0)
    for index, link in enumerate(links):
        label = _link_label(link, index)
        if not isinstance(link, dict):
            raise AnsibleFilterError("tcp_buffer_max: %s must be a dict with bandwidth_mbps and "
                                     "rtt_ms, got %r" % (label, link))
        for field in ("bandwidth_mbps", "rtt_ms"):
            if link.get(field) is None:
                raise AnsibleFilterError("tcp_buffer_max: %s has no %s" % (label, field))
        bandwidth = _positive(link["bandwidth_mbps"], "tcp_buffer_max: %s: bandwidth_mbps" % label)
        rtt = _positive(link["rtt_ms"], "tcp_buffer_max: %s: rtt_ms" % label)
        need = max(need, bdp(bandwidth, rtt) * factor)
    if need == 0:
        return floor
    rounded = int(math.ceil(need / MIB)) * MIB
    return max(floor, min(ceiling, rounded))


def tcp_buffer_triplet(max_bytes, min_bytes=4096, default_bytes=131072):
    """The 'min default max' string for net.ipv4.tcp_rmem / tcp_wmem."""
    maximum = _byte_count(max_bytes, "tcp_buffer_triplet: max_bytes")
    minimum = _byte_count(min_bytes, "tcp_buffer_triplet: min_bytes")
    default = _byte_count(default_bytes, "tcp_buffer_triplet: default_bytes")
    if not minimum <= default <= maximum:
        raise AnsibleFilterError("tcp_buffer_triplet: need min_bytes <= default_bytes <= max_bytes, "
                                 "got %d %d %d" % (minimum, default, maximum))
    if maximum > KERNEL_INT_MAX:
        raise AnsibleFilterError("tcp_buffer_triplet: max_bytes (%d) exceeds the kernel's limit (%d)"
                                 % (maximum, KERNEL_INT_MAX))
    return "%d %d %d" % (minimum, default, maximum)


def wan_link_paths(wan_links):
    """WAN link matrix entries -> data-plane link dicts {name, bandwidth_mbps, rtt_ms, loss_pct},
    every link checked by the collection's WAN model (plugin_utils/wan_model.py)."""
    links, problems = wan_model.normalise(wan_links)
    if problems:
        raise AnsibleFilterError("wan_link_paths: " + "; ".join(problems))
    return [{key: link[key] for key in ("name", "bandwidth_mbps", "rtt_ms", "loss_pct")} for link in links]


class FilterModule(object):
    """Buffer sizing filters of longhaul.trainnet."""

    def filters(self):
        return {
            "bdp_bytes": bdp_bytes,
            "tcp_buffer_max": tcp_buffer_max,
            "tcp_buffer_triplet": tcp_buffer_triplet,
            "wan_link_paths": wan_link_paths,
        }
