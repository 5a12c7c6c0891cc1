# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""MTU limits and header overheads, written once for the modules, the filters, the role
preflight (through the mtu_limits filter) and the lab. Pure constants and arithmetic."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Every IPv4 host must accept 576-byte datagrams (RFC 791); IPv6 links carry at least 1280
# (RFC 8200). 9000 is the common jumbo frame: the largest MTU the collection will set.
MTU_MIN = 576
MTU_MIN_IPV6 = 1280
MTU_MAX = 9000

# ICMP echo payload = MTU - IP header - ICMP header: 20 + 8 for IPv4, 40 + 8 for IPv6.
ICMP_ECHO_OVERHEAD_IPV4 = 28
ICMP_ECHO_OVERHEAD_IPV6 = 48


def mtu_floor(ipv6=False):
    """The smallest MTU a path of this family may have."""
    return MTU_MIN_IPV6 if ipv6 else MTU_MIN


def icmp_payload(mtu, ipv6=False):
    """The largest ping payload (`ping -s`) that fits in one packet of `mtu` bytes."""
    return int(mtu) - (ICMP_ECHO_OVERHEAD_IPV6 if ipv6 else ICMP_ECHO_OVERHEAD_IPV4)


def mtu_range_text():
    return '%d-%d' % (MTU_MIN, MTU_MAX)
