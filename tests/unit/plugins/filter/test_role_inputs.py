# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.longhaul.trainnet.plugins.filter.role_inputs import (
    FilterModule, address_in_networks, config_value_problem, mtu_problem, systemd_quote, unknown_variables)

KNOWN = ['measure_results_dir', 'measure_duration', 'measure_pairs', 'measure_pair_thresholds']


def test_known_names_pass():
    assert unknown_variables(['measure_duration', 'measure_pairs'], KNOWN, 'measure_') == []


def test_misspelt_name_gets_the_closest_known():
    assert unknown_variables(['measure_output_dir', 'measure_duraton'], KNOWN, 'measure_') == [
        'measure_duraton (did you mean measure_duration?)',
        'measure_output_dir (did you mean measure_results_dir?)',
    ]


def test_retired_prefix_is_compared_by_its_tail():
    assert unknown_variables(['trainnet_measure_duration'], KNOWN, 'measure_') == [
        'trainnet_measure_duration (did you mean measure_duration?)']


def test_nothing_close_is_named_alone():
    assert unknown_variables(['measure_zzzzzzzzzz', 'measure_zzzzzzzzzz'], KNOWN, 'measure_') == ['measure_zzzzzzzzzz']


@pytest.mark.parametrize('args', [('x', KNOWN), (['a'], 'b'), (['a'], [1]), (['a'], KNOWN, 3)])
def test_bad_arguments(args):
    with pytest.raises(AnsibleFilterError):
        unknown_variables(*args)


@pytest.mark.parametrize('value, problem', [
    (1400, ''), ('576', ''), (9000, ''),
    (575, 'data_plane_mtu=575 is outside the allowed range 576-9000'),
    (9600, 'data_plane_mtu=9600 is outside the allowed range 576-9000'),
    ('abc', 'data_plane_mtu=abc is outside the allowed range 576-9000'),
    (True, 'data_plane_mtu=True is outside the allowed range 576-9000'),
])
def test_mtu_problem(value, problem):
    assert mtu_problem(value, 'data_plane_mtu') == problem


@pytest.mark.parametrize('address, networks, inside', [
    ('192.0.2.7', ['192.0.2.0/24'], True),
    ('192.0.2.7', ['198.51.100.0/24', '192.0.2.7'], True),
    ('192.0.3.1', ['192.0.2.0/24'], False),
    ('::ffff:192.0.2.7', ['192.0.2.0/24'], True),       # an IPv4 client on a dual-stack sshd
    ('2001:db8::1', ['192.0.2.0/24'], False),
    ('2001:db8::1', ['2001:db8::/32'], True),
    ('192.0.2.7', [], False),
])
def test_address_in_networks(address, networks, inside):
    assert address_in_networks(address, networks) is inside


@pytest.mark.parametrize('address, networks', [('not-an-ip', ['192.0.2.0/24']), ('192.0.2.7', ['192.0.2.0/33']),
                                               ('192.0.2.7', '192.0.2.0/24')])
def test_address_in_networks_refuses_what_is_not_an_address(address, networks):
    with pytest.raises(AnsibleFilterError):
        address_in_networks(address, networks)


@pytest.mark.parametrize('value, kind, problem', [
    ('xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=', 'wireguard_key', ''),
    ('xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=\n[Peer]', 'wireguard_key',
     "k='xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=\\n[Peer]' is not a WireGuard key"),
    ('wgsync0', 'interface_name', ''),
    ('wgsync0\nExecStart=/bin/sh', 'interface_name', "k='wgsync0\\nExecStart=/bin/sh' is not an interface name"),
    ('/etc/trainnet', 'unit_path', ''),
    ('/etc/trainnet\nExecStart=/bin/sh', 'unit_path', 'must be an absolute path'),
    ('cn-home<->us-east', 'unit_text', ''),
    ('x\nExecStart=/bin/sh', 'unit_text', 'must be one line of text'),
])
def test_config_value_problem(value, kind, problem):
    got = config_value_problem(value, kind, 'k')
    assert problem in got and got.startswith("k=" if problem else '') and bool(got) == bool(problem)


def test_config_value_problem_names_the_kinds_on_a_typo():
    with pytest.raises(AnsibleFilterError, match='config_value_problem: kind must be one of interface_name, unit_path'):
        config_value_problem('x', 'path', 'k')


def test_systemd_quote_filter():
    assert systemd_quote('/etc/trainnet/wireguard') == '/etc/trainnet/wireguard'
    assert systemd_quote('/etc/x y\nExecStart=/bin/sh') == '"/etc/x y\\x0aExecStart=/bin/sh"'
    assert systemd_quote(29400) == '29400'
    assert {'config_value_problem', 'systemd_quote'} <= set(FilterModule().filters())
