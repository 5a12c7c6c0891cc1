# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The control-plane planner: bad input named by variable and host, tunnels and BFD routes per host."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import copy

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import control_plane as cp

PSK = base64.b64encode(b'k' * 32).decode()
HOSTS = [
    {'name': 'cn-master', 'role': 'master', 'tunnel_address': '10.254.0.1', 'endpoint': '198.18.1.10',
     'path_mtu': 1400, 'tunnel_mtu': 0, 'site_prefixes': [], 'preshared_key': ''},
    {'name': 'usw-anchor', 'role': 'anchor', 'tunnel_address': '10.254.0.2', 'endpoint': '198.18.2.10',
     'path_mtu': 1400, 'tunnel_mtu': 0, 'site_prefixes': ['10.20.2.0/24'], 'preshared_key': ''},
    {'name': 'use-anchor', 'role': 'anchor', 'tunnel_address': '10.254.0.3', 'endpoint': '198.18.3.10',
     'path_mtu': 1500, 'tunnel_mtu': 0, 'site_prefixes': [], 'preshared_key': ''},
]
SETTINGS = {'tunnel_network': '10.254.0.0/24', 'link_network': '169.254.0.0/16',
            'rendezvous_address': '10.255.0.1', 'primary_anchor': 'usw-anchor', 'listen_port_base': 51800,
            'bfd_interval_ms': 50, 'bfd_multiplier': 3, 'bfd_idle_tx_ms': 1000, 'keepalive': 25}


def hosts_with(name, **changes):
    hosts = copy.deepcopy(HOSTS)
    for host in hosts:
        if host['name'] == name:
            host.update(changes)
    return hosts


def test_good_input_has_no_errors():
    assert cp.check(HOSTS, SETTINGS) == []


@pytest.mark.parametrize('hosts, settings, expected', [
    (hosts_with('use-anchor', endpoint=''), SETTINGS,
     'control_plane_endpoint is not set for anchor use-anchor'),
    (hosts_with('use-anchor', tunnel_address='10.254.0.2'), SETTINGS,
     'control_plane_tunnel_address=10.254.0.2 is set on two hosts: usw-anchor and use-anchor'),
    (hosts_with('usw-anchor', tunnel_mtu=1400), SETTINGS,
     'control_plane_tunnel_mtu=1400 on host usw-anchor must be 0 (derived) or 576-1320: '
     'control_plane_path_mtu 1400 minus WireGuard overhead 80'),
    (hosts_with('usw-anchor', path_mtu=655), SETTINGS,
     'control_plane_path_mtu=655 on host usw-anchor leaves a tunnel MTU of 575 (minus WireGuard overhead 80): '
     'a tunnel needs at least 576, a path MTU of at least 656'),
    (HOSTS, dict(SETTINGS, bfd_interval_ms=0), 'control_plane_bfd_interval_ms=0 is outside the allowed range 1-10000'),
    (HOSTS, dict(SETTINGS, bfd_idle_tx_ms=0), 'control_plane_bfd_idle_tx_ms=0 is outside the allowed range 1-10000'),
    (HOSTS, dict(SETTINGS, bfd_multiplier=1), 'control_plane_bfd_multiplier=1 is outside the allowed range 2-255'),
    (HOSTS, dict(SETTINGS, path_queue_delay_ms=-1),
     'control_plane_path_queue_delay_ms=-1 is outside the allowed range 0-10000'),
    (HOSTS, dict(SETTINGS, path_queue_delay_ms=150),
     'control_plane_bfd_interval_ms x control_plane_bfd_multiplier = 150 ms is shorter than '
     'control_plane_path_queue_delay_ms=150 plus two intervals: a loaded path delays BFD packets that long and '
     'the session would go down with no fault; set control_plane_bfd_multiplier to 5 or more (250 ms)'),
    (hosts_with('cn-master', tunnel_address='10.9.0.1'), SETTINGS,
     'control_plane_tunnel_address=10.9.0.1 on host cn-master must be one of the first 254 host addresses'),
    (hosts_with('cn-master', endpoint='home.example'), SETTINGS,
     "control_plane_endpoint='home.example' on host cn-master must be an IP address"),
    (HOSTS, dict(SETTINGS, primary_anchor='cn-master'),
     "control_plane_primary_anchor='cn-master' must name a host of the anchor group"),
    (HOSTS, dict(SETTINGS, rendezvous_address='10.254.0.1'),
     'control_plane_tunnel_address=10.254.0.1 on host cn-master equals control_plane_rendezvous_address'),
    (HOSTS, dict(SETTINGS, link_network='169.254.0.0/24'), "control_plane_link_network='169.254.0.0/24' must be"),
    (hosts_with('usw-anchor', site_prefixes=['10.20.2.1/24']), SETTINGS,
     "control_plane_site_prefixes entry '10.20.2.1/24' on host usw-anchor must be an IPv4 network"),
])
def test_bad_input_names_variable_and_host(hosts, settings, expected):
    errors = cp.check(hosts, settings)
    assert any(expected in error for error in errors), errors


@pytest.mark.parametrize('key', ['not base64!', base64.b64encode(b'x' * 31).decode(), PSK[:-4]])
def test_bad_preshared_key_is_named_without_its_value(key):
    hosts = copy.deepcopy(HOSTS)
    for host in hosts:
        host['preshared_key'] = key
    errors = cp.check(hosts, SETTINGS)
    named = [e for e in errors if 'control_plane_preshared_key on host' in e]
    assert len(named) == 3, errors
    assert all(key not in e for e in errors)


def test_preshared_key_must_match_on_both_ends():
    errors = cp.check(hosts_with('cn-master', preshared_key=PSK), SETTINGS)
    assert 'control_plane_preshared_key differs between cn-master and usw-anchor' in ' '.join(errors)
    good = copy.deepcopy(HOSTS)
    for host in good:
        host['preshared_key'] = PSK
    assert cp.check(good, SETTINGS) == []


def test_two_masters_refused():
    hosts = hosts_with('use-anchor', role='master')
    assert any('exactly one home master' in e for e in cp.check(hosts, SETTINGS))


def test_master_plan_tunnels_ports_and_mtu():
    plan = cp.plan(HOSTS, SETTINGS, 'cn-master')
    tunnels = dict((t['peer'], t) for t in plan['tunnels'])
    assert sorted(tunnels) == ['use-anchor', 'usw-anchor']
    usw = tunnels['usw-anchor']
    assert usw['ifname'] == 'wg-usw-anchor'
    assert (usw['local'], usw['remote']) == ('169.254.1.2', '169.254.2.1')
    # master listens on base + peer id; the anchor's interface towards the master on base + master id
    assert usw['listen_port'] == 51802 and usw['endpoint'] == '198.18.2.10:51801'
    # path MTU 1400 on both ends: 1400 - 80
    assert usw['mtu'] == 1320
    # the narrower end decides: master 1400 -> 1320 even though us-east has 1500
    assert tunnels['use-anchor']['mtu'] == 1320
    assert plan['forwarding'] is True and plan['rendezvous_local'] is False
    assert plan['rendezvous_takeover'] is False  # the home master never answers for the rendezvous address


def test_both_ends_of_a_tunnel_agree():
    plans = dict((h['name'], cp.plan(HOSTS, SETTINGS, h['name'])) for h in HOSTS)
    for me, plan in plans.items():
        for tunnel in plan['tunnels']:
            other = [t for t in plans[tunnel['peer']]['tunnels'] if t['peer'] == me][0]
            assert (tunnel['local'], tunnel['remote']) == (other['remote'], other['local'])
            assert tunnel['mtu'] == other['mtu']
            assert tunnel['endpoint'].endswith(':%d' % other['listen_port'])


def test_master_routes_rendezvous_direct_then_via_secondary():
    plan = cp.plan(HOSTS, SETTINGS, 'cn-master')
    protocols = dict((p['name'], p) for p in plan['bird_protocols'])
    direct = protocols['cp_direct']
    assert direct['preference'] == cp.PREFERENCE_DIRECT
    assert {'prefix': '10.255.0.1/32', 'via': '169.254.2.1', 'peer': 'usw-anchor'} in direct['routes']
    assert {'prefix': '10.20.2.0/24', 'via': '169.254.2.1', 'peer': 'usw-anchor'} in direct['routes']
    backup = protocols['cp_via_3']
    assert backup['preference'] < cp.PREFERENCE_DIRECT
    assert {'prefix': '10.255.0.1/32', 'via': '169.254.3.1', 'peer': 'usw-anchor'} in backup['routes']
    # us-east's own addresses are not relayed through us-east itself
    assert all(r['peer'] != 'use-anchor' for r in backup['routes'])


def test_primary_anchor_serves_rendezvous_and_relays_master_via_secondary():
    plan = cp.plan(HOSTS, SETTINGS, 'usw-anchor')
    assert plan['rendezvous_local'] is True and plan['forwarding'] is True
    assert plan['rendezvous_takeover'] is False
    prefixes = [r['prefix'] for p in plan['bird_protocols'] for r in p['routes']]
    assert '10.255.0.1/32' not in prefixes
    backup = [p for p in plan['bird_protocols'] if p['name'] == 'cp_via_3'][0]
    assert {'prefix': '10.254.0.1/32', 'via': '169.254.3.2', 'peer': 'cn-master'} in backup['routes']


def test_secondary_anchor_takes_over_rendezvous_only_behind_its_bfd_route():
    plan = cp.plan(HOSTS, SETTINGS, 'use-anchor')
    assert plan['rendezvous_takeover'] is True and plan['rendezvous_local'] is False
    # it still routes the address to the primary first: the takeover is only a fallback
    direct = [p for p in plan['bird_protocols'] if p['name'] == 'cp_direct'][0]
    assert {'prefix': '10.255.0.1/32', 'via': '169.254.2.3', 'peer': 'usw-anchor'} in direct['routes']


def test_master_never_relays():
    plan = cp.plan(HOSTS, SETTINGS, 'use-anchor')
    assert [p['name'] for p in plan['bird_protocols']] == ['cp_direct', 'cp_via_2']


def test_plan_raises_with_every_error():
    with pytest.raises(cp.PlanError) as info:
        cp.plan(hosts_with('use-anchor', endpoint=''), dict(SETTINGS, bfd_interval_ms=0), 'cn-master')
    assert len(info.value.args[0]) == 2


def test_long_names_get_id_interfaces():
    assert cp.interface_name('usw-anchor-0001', 7) == 'wg-id7'
    assert cp.interface_name('use', 3) == 'wg-use'


def test_ipv6_endpoint_is_bracketed():
    plan = cp.plan(hosts_with('usw-anchor', endpoint='2001:db8::2'), SETTINGS, 'cn-master')
    usw = [t for t in plan['tunnels'] if t['peer'] == 'usw-anchor'][0]
    assert usw['endpoint'] == '[2001:db8::2]:51801' and usw['endpoint_family'] == 6


def test_master_without_endpoint_is_allowed():
    plan = cp.plan(hosts_with('cn-master', endpoint=''), SETTINGS, 'usw-anchor')
    master = [t for t in plan['tunnels'] if t['peer'] == 'cn-master'][0]
    assert master['endpoint'] == '' and master['endpoint_address'] == ''


@pytest.mark.parametrize('interval, delay, multiplier', [(50, 0, 2), (50, 1, 3), (50, 150, 5), (50, 151, 6),
                                                         (50, 200, 6), (100, 70, 3), (1000, 10, 3)])
def test_bfd_multiplier_outlasts_a_full_queue_and_one_loss(interval, delay, multiplier):
    assert cp.bfd_multiplier_for(interval, delay) == multiplier
    settings = dict(SETTINGS, bfd_interval_ms=interval, path_queue_delay_ms=delay)
    assert cp.bfd_timing_problems(dict(settings, bfd_multiplier=multiplier)) == []
    if delay:   # one less is refused
        assert len(cp.bfd_timing_problems(dict(settings, bfd_multiplier=multiplier - 1))) == 1
