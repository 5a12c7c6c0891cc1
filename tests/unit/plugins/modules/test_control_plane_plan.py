# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""control_plane_plan: one failure listing every bad input; a plan without secrets."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import json

from ansible_collections.longhaul.trainnet.plugins.modules import control_plane_plan
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    module_patches, patch_module_args, run_main,
)

PSK = base64.b64encode(b'p' * 32).decode()


def args(**changes):
    hosts = [
        {'name': 'cn-master', 'role': 'master', 'tunnel_address': '10.254.0.1', 'preshared_key': PSK},
        {'name': 'usw-anchor', 'role': 'anchor', 'tunnel_address': '10.254.0.2', 'endpoint': '198.18.2.10',
         'preshared_key': PSK},
        {'name': 'use-anchor', 'role': 'anchor', 'tunnel_address': '10.254.0.3', 'endpoint': '198.18.3.10',
         'preshared_key': PSK},
    ]
    params = {'host': 'cn-master', 'hosts': hosts, 'tunnel_network': '10.254.0.0/24',
              'rendezvous_address': '10.255.0.1', 'primary_anchor': 'usw-anchor'}
    params.update(changes)
    return params


def run(params):
    with patch_module_args(params), module_patches():
        return run_main(control_plane_plan.main)


def test_plan_has_no_secret_and_changes_nothing():
    result = run(args())
    assert result['changed'] is False
    assert [t['peer'] for t in result['plan']['tunnels']] == ['usw-anchor', 'use-anchor']
    assert all(t['preshared_key'] is True for t in result['plan']['tunnels'])
    assert PSK not in json.dumps(result)


def test_every_problem_in_one_failure():
    params = args(bfd_interval_ms=0)
    params['hosts'][2]['endpoint'] = ''
    params['hosts'][1]['tunnel_address'] = '10.254.0.1'
    result = run(params)
    assert result['failed'] is True
    assert result['msg'].startswith('Invalid control-plane input (nothing was changed): ')
    for text in ('control_plane_bfd_interval_ms=0', 'control_plane_endpoint is not set for anchor use-anchor',
                 'control_plane_tunnel_address=10.254.0.1 is set on two hosts: cn-master and usw-anchor'):
        assert text in result['msg']
    assert len(result['errors']) == 3


def test_training_node_problems_fail_with_the_topology_ones():
    params = args(bfd_interval_ms=0, training_sources=['10.9.0.0/33'], training_nodes=[
        {'name': 'usw-gpu1', 'gateway': 'usw-anchor', 'local_address': '198.18.2.11'},
        {'name': 'use-gpu1', 'gateway': '198.18.3.11', 'local_address': '198.18.3.11'},
        {'name': 'cn-gpu1', 'gateway': '198.18.1.10', 'local_address': 'cn-gpu1.lan'},
        {'name': 'ok-gpu', 'gateway': '198.18.1.10', 'local_address': '198.18.1.20'},
    ])
    result = run(params)
    assert result['failed'] is True
    assert result['errors'] == [
        'control_plane_bfd_interval_ms=0 is outside the allowed range 1-10000',
        "control_plane_gateway='usw-anchor' on host usw-gpu1 must be the IPv4 address of its site's control host "
        "(or empty)",
        'control_plane_gateway=198.18.3.11 on host use-gpu1 is the host itself',
        "control_plane_local_address='cn-gpu1.lan' on host cn-gpu1 must be an IP address (or empty)",
        "control_plane_training_sources entry '10.9.0.0/33' must be an IPv4 network in CIDR form",
    ]


def test_training_nodes_with_gateways_plan_normally():
    result = run(args(training_nodes=[{'name': 'cn-gpu1', 'gateway': '198.18.1.10', 'local_address': '198.18.1.11'}],
                      training_sources=['198.18.1.0/24']))
    assert result['changed'] is False and 'failed' not in result
