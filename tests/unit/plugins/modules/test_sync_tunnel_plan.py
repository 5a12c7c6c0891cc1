# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sync_tunnel_plan: a node's plan, a cluster's scale, and one failure listing every bad input."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.longhaul.trainnet.plugins.modules import sync_tunnel_plan
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    module_patches, patch_module_args, run_main,
)

NODES = [
    {'name': 'cn-gpu1', 'site': 'cn-home', 'address': '10.97.0.1', 'endpoint': '198.18.1.21'},
    {'name': 'usw-gpu1', 'site': 'us-west', 'address': '10.97.0.2', 'endpoint': '198.18.2.21'},
]


def run(params):
    with patch_module_args(params), module_patches():
        return run_main(sync_tunnel_plan.main)


def test_plan_for_a_node():
    result = run({'host': 'cn-gpu1', 'nodes': NODES, 'path_mtus': [{'sites': ['cn-home', 'us-west'], 'mtu': 1400}]})
    assert result['changed'] is False
    assert result['plan']['mode'] == 'mesh' and result['plan']['mtu'] == 1320
    assert [p['name'] for p in result['plan']['peers']] == ['usw-gpu1']


def test_scale_of_three_sites():
    result = run({'site_sizes': {'cn-home': 64, 'us-west': 64, 'us-east': 64}})
    assert result['scale']['mode'] == 'gateways' and result['scale']['hosts']['gateway']['peers'] == 65


def test_every_problem_in_one_failure():
    nodes = [dict(NODES[0]), dict(NODES[1], address='10.97.0.1', endpoint='nowhere')]
    result = run({'host': 'cn-gpu1', 'nodes': nodes, 'listen_port': 0})
    assert result['failed'] is True
    assert result['msg'].startswith('Invalid gradient-sync tunnel input (nothing was changed): ')
    for text in ('sync tunnel address 10.97.0.1 is set on two training nodes: cn-gpu1 and usw-gpu1',
                 "training node usw-gpu1: endpoint 'nowhere'", 'listen_port=0 is outside 1-65535'):
        assert text in result['msg']
    assert len(result['errors']) == 3


def test_host_and_site_sizes_exclude_each_other():
    result = run({'host': 'cn-gpu1', 'nodes': NODES, 'site_sizes': {'a': 1}})
    assert result['failed'] is True and 'mutually exclusive' in result['msg']
    assert run({'site_sizes': {'a': 0}})['failed'] is True


def test_a_peer_key_that_would_add_config_lines_fails_the_module():
    good = 'xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg='
    bad = good + '\n[Peer]\nPublicKey = ' + good + '\nAllowedIPs = 0.0.0.0/0'
    result = run({'host': 'cn-gpu1', 'nodes': NODES, 'public_keys': {'usw-gpu1': bad}})
    assert result['failed'] is True and 'plan' not in result
    assert result['errors'] == ['training node usw-gpu1: public key=%r is not a WireGuard key '
                                '(44 characters: base64 of 32 bytes, as wg genkey/pubkey print)' % bad]
    assert run({'host': 'cn-gpu1', 'nodes': NODES, 'public_keys': {'usw-gpu1': good}})['plan']['keys_complete']
