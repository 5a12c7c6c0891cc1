# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gradient-sync tunnel planner: mesh or site gateways, MTU from the narrowest path, bad input
named by node, and how the design scales (3 sites x 64 nodes, the README's figures)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import sync_tunnel as st

# The default lab's training nodes: cn-home <-> us-west has a 1400-byte path.
NODES = [
    {'name': 'cn-gpu1', 'site': 'cn-home', 'address': '10.97.0.1', 'endpoint': '198.18.1.21'},
    {'name': 'usw-gpu1', 'site': 'us-west', 'address': '10.97.0.2', 'endpoint': '198.18.2.21'},
    {'name': 'usw-gpu2', 'site': 'us-west', 'address': '10.97.0.3', 'endpoint': '198.18.2.22'},
    {'name': 'use-gpu1', 'site': 'us-east', 'address': '10.97.0.4', 'endpoint': '198.18.3.21'},
]
LINKS = [{'sites': ['us-west', 'cn-home'], 'mtu': 1400}]


def test_small_cluster_is_a_full_mesh_with_the_narrowest_path_mtu():
    plan = st.plan(NODES, 'cn-gpu1', links=LINKS)
    assert plan['mode'] == 'mesh' and not plan['gateway'] and not plan['forwarding']
    assert [p['name'] for p in plan['peers']] == ['use-gpu1', 'usw-gpu1', 'usw-gpu2']
    assert plan['peers'][1] == {'name': 'usw-gpu1', 'site': 'us-west', 'address': '10.97.0.2', 'endpoint': '198.18.2.21:52200',
                                'allowed_ips': ['10.97.0.2/32'], 'keepalive': 25}
    assert plan['mtu'] == 1400 - 80                      # its paths: 1400 to us-west, 1500 to us-east
    # use-gpu1's paths are all 1500 bytes; one interface, one MTU per node
    assert st.plan(NODES, 'use-gpu1', links=LINKS)['mtu'] == 1500 - 80


def test_addresses_inside_the_network_and_its_prefix_on_the_interface():
    assert st.plan(NODES, 'cn-gpu1', network='10.97.0.0/24')['prefixlen'] == 24
    assert st.plan(NODES, 'cn-gpu1')['prefixlen'] == 32
    with pytest.raises(st.SyncPlanError) as caught:
        st.plan(NODES, 'cn-gpu1', network='10.97.0.0/30')
    # .3 is the /30's broadcast address, .4 outside it
    assert caught.value.args[0] == ['training node %s: sync tunnel address %s is not a host address of '
                                    'sync_tunnel_network 10.97.0.0/30' % pair
                                    for pair in (('usw-gpu2', '10.97.0.3'), ('use-gpu1', '10.97.0.4'))]
    for bad in ('', '10.97.0.1/24', '10.97.0.0/31', 'fd00::/64'):
        with pytest.raises(st.SyncPlanError) as caught:
            st.plan(NODES, 'cn-gpu1', network=bad)
        assert 'is not an IPv4 network of at most /30' in caught.value.args[0][0]


def test_config_text_holds_every_peer_and_the_keys_when_known():
    keys = dict((n['name'], chr(65 + i) * 42 + 'A=') for i, n in enumerate(NODES))   # canonical: wg accepts them
    plan = st.plan(NODES, 'usw-gpu1', links=LINKS, public_keys=keys)
    assert plan['keys_complete']
    assert plan['config'].count('[Peer]') == 3
    assert 'PublicKey = %s' % keys['cn-gpu1'] in plan['config']
    assert 'Endpoint = 198.18.1.21:52200\nAllowedIPs = 10.97.0.1/32\nPersistentKeepalive = 25' in plan['config']
    without = st.plan(NODES, 'usw-gpu1', links=LINKS)
    assert not without['keys_complete'] and len(without['config']) == len(plan['config'])   # placeholder: same size


# Issue 23 finding 9: a public key read from a peer is written into every node's peers file.
REAL_KEYS = {'cn-gpu1': 'xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=', 'usw-gpu1': 'TrMvSoP4jYQlY6RIzBgbssQqY3vxI2Pi+y71lOWWXX0=',
             'usw-gpu2': 'gN65BkIKy1eCE9pP1wdc8ROUtkHLF2PfAqYdyYBz6EA=', 'use-gpu1': 'HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw='}
INJECTED = REAL_KEYS['use-gpu1'] + '\n[Peer]\nPublicKey = %s\nAllowedIPs = 0.0.0.0/0' % REAL_KEYS['cn-gpu1']


def test_real_keys_are_written_one_per_peer():
    plan = st.plan(NODES, 'usw-gpu1', links=LINKS, public_keys=REAL_KEYS)
    assert plan['keys_complete'] and plan['config'].count('[Peer]') == 3
    lines = plan['config'].splitlines()
    assert sorted(line for line in lines if line.startswith('PublicKey = ')) == sorted(
        'PublicKey = ' + REAL_KEYS[name] for name in ('cn-gpu1', 'usw-gpu2', 'use-gpu1'))


@pytest.mark.parametrize('me', ['usw-gpu1', 'cn-gpu1'])
def test_a_key_with_a_newline_is_refused_naming_the_node_and_the_key(me):
    keys = dict(REAL_KEYS, **{'use-gpu1': INJECTED})
    with pytest.raises(st.SyncPlanError) as caught:
        st.plan(NODES, me, links=LINKS, public_keys=keys)
    assert caught.value.args[0] == ['training node use-gpu1: public key=%r is not a WireGuard key '
                                    '(44 characters: base64 of 32 bytes, as wg genkey/pubkey print)' % INJECTED]


def test_a_key_not_known_yet_gets_the_placeholder():
    keys = dict(REAL_KEYS, **{'use-gpu1': ''})
    plan = st.plan(NODES, 'cn-gpu1', links=LINKS, public_keys=keys)
    assert 'PublicKey = ' + 'X' * 44 in plan['config']   # empty: not known yet (check mode), no error


@pytest.mark.parametrize('field, value', [('name', 'use-gpu1\nAllowedIPs = 0.0.0.0/0'), ('site', 'us-east\n[Peer]')])
def test_node_names_and_sites_with_a_newline_are_refused(field, value):
    nodes = copy.deepcopy(NODES)
    nodes[3][field] = value
    with pytest.raises(st.SyncPlanError) as caught:
        st.plan(nodes, 'cn-gpu1', links=LINKS)
    assert '%s=%r must be one line of text' % (field, value) in '; '.join(caught.value.args[0])


def test_ipv6_endpoint_in_brackets_and_keepalive_off():
    nodes = copy.deepcopy(NODES)
    nodes[1]['endpoint'] = '2001:db8::21'
    plan = st.plan(nodes, 'cn-gpu1', links=LINKS, keepalive=0)
    assert plan['peers'][1]['endpoint'] == '[2001:db8::21]:52200'
    assert 'PersistentKeepalive' not in plan['config']


def test_beyond_the_peer_limit_sites_talk_through_gateways():
    plan = {n['name']: st.plan(NODES, n['name'], links=LINKS, mesh_peer_limit=2) for n in NODES}
    assert {p['mode'] for p in plan.values()} == {'gateways'}
    # us-west's gateway: its first node by name; it peers with its site and the other gateways
    assert plan['usw-gpu1']['gateway'] and plan['usw-gpu1']['forwarding']
    assert not plan['usw-gpu2']['gateway']
    gw = dict((p['name'], p['allowed_ips']) for p in plan['usw-gpu1']['peers'])
    assert gw == {'cn-gpu1': ['10.97.0.1/32'], 'use-gpu1': ['10.97.0.4/32'], 'usw-gpu2': ['10.97.0.3/32']}
    # a node peers with its own site only; its gateway carries the other sites' addresses
    node = dict((p['name'], p['allowed_ips']) for p in plan['usw-gpu2']['peers'])
    assert node == {'usw-gpu1': ['10.97.0.1/32', '10.97.0.2/32', '10.97.0.4/32']}
    # a packet may cross a LAN hop and the 1400-byte WAN hop: every node gets the narrowest
    assert {p['mtu'] for p in plan.values()} == {1320}


def test_a_marked_gateway_wins_over_the_first_by_name():
    nodes = copy.deepcopy(NODES)
    nodes[2]['gateway'] = True
    assert st.site_gateways(nodes) == {'cn-home': 'cn-gpu1', 'us-west': 'usw-gpu2', 'us-east': 'use-gpu1'}
    assert st.plan(nodes, 'usw-gpu2', links=LINKS, mesh_peer_limit=2)['gateway']


@pytest.mark.parametrize('change, me, fragments', [
    (lambda n: n[1].update(address='10.97.0.1'), 'cn-gpu1',
     ['sync tunnel address 10.97.0.1 is set on two training nodes: cn-gpu1 and usw-gpu1']),
    (lambda n: n[0].update(address='not-an-ip'), 'cn-gpu1', ["training node cn-gpu1: sync tunnel address 'not-an-ip'"]),
    (lambda n: n[3].update(endpoint=''), 'cn-gpu1', ["training node use-gpu1: endpoint ''"]),
    (lambda n: n[0].update(site=''), 'cn-gpu1', ['training node cn-gpu1 has no site']),
    (lambda n: n.append(dict(n[0])), 'cn-gpu1', ['training node cn-gpu1 is listed twice']),
    (lambda n: [x.update(gateway=True) for x in n[1:3]], 'cn-gpu1',
     ['site us-west has 2 sync gateways (usw-gpu1, usw-gpu2): at most one']),
    (lambda n: None, 'nosuch', ['host nosuch is not one of the training nodes']),
])
def test_bad_input_names_the_node(change, me, fragments):
    nodes = copy.deepcopy(NODES)
    change(nodes)
    with pytest.raises(st.SyncPlanError) as caught:
        st.plan(nodes, me, links=LINKS)
    text = '; '.join(caught.value.args[0])
    for fragment in fragments:
        assert fragment in text


def test_bad_settings_are_named():
    with pytest.raises(st.SyncPlanError) as caught:
        st.plan(NODES, 'cn-gpu1', links=[{'sites': ['cn-home'], 'mtu': 'x'}], mesh_peer_limit=0, listen_port=70000)
    text = '; '.join(caught.value.args[0])
    assert 'mesh_peer_limit=0 is outside 1-4096' in text and 'listen_port=70000 is outside 1-65535' in text
    assert "path MTU entry {'sites': ['cn-home'], 'mtu': 'x'} needs two sites and an mtu of 576-9000" in text


def test_path_mtus_follow_the_collections_rule_by_endpoint_family():
    """576 is the floor on IPv4 endpoints, as for every other path MTU of the collection; an IPv6
    endpoint anywhere needs 1280."""
    narrow = [{'sites': ['cn-home', 'us-west'], 'mtu': 656, 'delay_ms': 75, 'rate_mbit': 50}]
    assert st.plan(NODES, 'cn-gpu1', links=narrow)['mtu'] == 576
    # A 576-byte path is a valid path, but too narrow for a tunnel of at least 576 (as the control plane's).
    narrow[0]['mtu'] = 655
    with pytest.raises(st.SyncPlanError) as caught:
        st.plan(NODES, 'cn-gpu1', links=narrow)
    assert ('the tunnel of cn-gpu1 crosses cn-home<->us-west (655): a path MTU below 656 leaves the tunnel less than 576'
            in caught.value.args[0][0])
    with pytest.raises(st.SyncPlanError) as caught:
        st.plan(NODES, 'cn-gpu1', links=[{'sites': ['cn-home', 'us-west'], 'mtu': 575}])
    assert "needs two sites and an mtu of 576-9000" in '; '.join(caught.value.args[0])
    nodes = copy.deepcopy(NODES)
    nodes[0]['endpoint'] = '2001:db8::1'
    with pytest.raises(st.SyncPlanError) as caught:
        st.plan(nodes, 'cn-gpu1', links=[{'sites': ['cn-home', 'us-west'], 'mtu': 1000}])
    assert ("needs two sites and an mtu of 1280-9000 (IPv6 endpoints: %s)" % nodes[0]['name']) in '; '.join(caught.value.args[0])


def test_scaling_three_sites_of_64():
    """The README's figures: a full mesh of 192 nodes needs 191 peers and about 33 KB of peer
    configuration on every node; at the default limit of 64 peers the sites switch to gateways:
    63 peers per node, 65 on a gateway, about 11 KB each."""
    sites = {'cn-home': 64, 'us-west': 64, 'us-east': 64}
    gateways = st.scaling(sites)
    assert gateways['mode'] == 'gateways' and gateways['nodes'] == 192
    assert gateways['hosts']['node']['peers'] == 63 and gateways['hosts']['gateway']['peers'] == 65
    assert 10000 < gateways['hosts']['node']['config_bytes'] < gateways['hosts']['gateway']['config_bytes'] < 12000
    mesh = st.scaling(sites, mesh_peer_limit=191)
    assert mesh['mode'] == 'mesh' and list(mesh['hosts']) == ['node'] and mesh['hosts']['node']['peers'] == 191
    assert 30000 < mesh['hosts']['node']['config_bytes'] < 36000
    # the default lab's shape stays a mesh
    assert st.scaling({'cn-home': 1, 'us-west': 2, 'us-east': 1})['hosts'] == {'node': {'peers': 3, 'config_bytes': 509}}
