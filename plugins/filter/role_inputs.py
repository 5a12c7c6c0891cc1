# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters that check a role's inputs. Documentation: unknown_variables.yml, mtu_problem.yml,
address_in_networks.yml, config_value_problem.yml and systemd_quote.yml next to this file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import ipaddress

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import is_sequence

from ansible_collections.longhaul.trainnet.plugins.module_utils import config_value
from ansible_collections.longhaul.trainnet.plugins.module_utils.mtu import MTU_MAX, MTU_MIN


def _names(value, what):
    if not is_sequence(value) or any(not isinstance(v, str) for v in value):
        raise AnsibleFilterError('%s must be a list of variable names, got %r' % (what, value))
    return list(value)


def unknown_variables(names, known, prefix=''):
    """Each name that is not in `known`, with the closest known name: sorted list of strings.

    'data_plane_mtu_verfy_hosts (did you mean data_plane_mtu_verify_hosts?)'. Names are compared
    without the role prefix, so a prefix shared by every name does not make them all look alike.
    """
    names = _names(names, 'the input')
    known = _names(known, 'known')
    if not isinstance(prefix, str):
        raise AnsibleFilterError('prefix must be a string, got %r' % (prefix,))

    def tail(name):
        # also after an older prefix: trainnet_measure_duration -> duration
        return name.split(prefix, 1)[1] if prefix and prefix in name else name

    tails = {}
    for name in known:
        tails.setdefault(tail(name), name)
    out = []
    for name in sorted(set(names) - set(known)):
        close = difflib.get_close_matches(tail(name), list(tails), n=1, cutoff=0.5)
        out.append('%s (did you mean %s?)' % (name, tails[close[0]]) if close else name)
    return out


def mtu_problem(value, name):
    """'' when `value` is an MTU the collection may set, else '<name>=<value> is outside ...'."""
    try:
        ok = not isinstance(value, bool) and MTU_MIN <= int(str(value)) <= MTU_MAX
    except ValueError:
        ok = False
    if ok:
        return ''
    return '%s=%s is outside the allowed range %d-%d' % (name, value, MTU_MIN, MTU_MAX)


def config_value_problem(value, kind, name):
    """'' when `value` is a valid `kind` (wireguard_key, interface_name, unit_path, unit_text), else a
    message naming `name`, the value and what it must be (module_utils/config_value.py)."""
    try:
        return config_value.problem(value, kind, name)
    except ValueError as exc:
        raise AnsibleFilterError('config_value_problem: %s' % exc)


def systemd_quote(value):
    """`value` as one argument of a systemd ExecStart= line (module_utils/config_value.py)."""
    return config_value.systemd_quote(value)


def address_in_networks(address, networks):
    """True when `address` (IPv4 or IPv6, an IPv4-mapped IPv6 address counts as IPv4) lies in one of `networks`."""
    try:
        addr = ipaddress.ip_address(str(address).strip())
    except ValueError:
        raise AnsibleFilterError('%r is not an IP address' % (address,))
    if addr.version == 6 and addr.ipv4_mapped:
        addr = addr.ipv4_mapped
    if isinstance(networks, str) or not is_sequence(networks):
        raise AnsibleFilterError('networks must be a list of networks, got %r' % (networks,))
    for net in networks:
        try:
            network = ipaddress.ip_network(str(net).strip(), strict=False)
        except ValueError:
            raise AnsibleFilterError('%r is not an IP network' % (net,))
        if network.version == addr.version and addr in network:
            return True
    return False


class FilterModule(object):
    """Role input checks of longhaul.trainnet."""

    def filters(self):
        return {'address_in_networks': address_in_networks, 'config_value_problem': config_value_problem,
                'mtu_problem': mtu_problem, 'systemd_quote': systemd_quote, 'unknown_variables': unknown_variables}
