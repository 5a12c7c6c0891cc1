# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The gradient-sync tunnel's design, computed from the inventory (pure logic, no host access).

Gloo and NCCL's socket transport send gradients in clear TCP, so training nodes of different
sites talk through one WireGuard interface (wg-sync) whose addresses GLOO_SOCKET_IFNAME and
NCCL_SOCKET_IFNAME name. Two shapes:

- full mesh: every node peers with every other node; one hop, no forwarding. Chosen while each
  node has at most `mesh_peer_limit` peers.
- site gateways: beyond that, every node peers with the nodes of its own site, and one gateway
  per site also peers with the other sites' gateways; traffic to another site goes node ->
  own gateway -> remote gateway -> node. Peers per host stay near the site size, at the cost of
  forwarding (and encrypting again) every cross-site byte on the gateways.

The tunnel MTU is the narrowest path a packet on wg-sync can take, minus WireGuard's overhead:
with gateways the inner packet must fit the LAN hop and the WAN hop alike.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

from ansible_collections.longhaul.trainnet.plugins.module_utils.config_value import is_unit_text, problem as value_problem
from ansible_collections.longhaul.trainnet.plugins.module_utils.wireguard import render_config
from ansible_collections.longhaul.trainnet.plugins.module_utils.control_plane import MIN_TUNNEL_PATH_MTU, WIREGUARD_OVERHEAD
from ansible_collections.longhaul.trainnet.plugins.module_utils.mtu import MTU_MAX, mtu_floor

DEFAULT_MESH_PEER_LIMIT = 64
DEFAULT_LISTEN_PORT = 52200
# Length of a base64 WireGuard public key: what a peer section holds before the keys are known.
PUBLIC_KEY_CHARS = 44


class SyncPlanError(Exception):
    """args[0]: every problem found, each naming the node or the field."""


def _address(text):
    try:
        return ipaddress.ip_address(u'%s' % text)
    except ValueError:
        return None


def _entry(link):
    """A path MTU entry as a problem shows it: its sites and mtu (a WAN model link has more)."""
    return dict((k, link[k]) for k in ('sites', 'mtu') if k in link) if isinstance(link, dict) else link


def path_mtu(links, default_mtu, site_a, site_b):
    """The MTU of the path between two sites: from `links` ({sites: [a, b], mtu}), else the default."""
    for link in links:
        if sorted(link['sites']) == sorted([site_a, site_b]):
            return int(link['mtu'])
    return int(default_mtu)


def _network(text):
    try:
        network = ipaddress.ip_network(u'%s' % text, strict=True)
    except ValueError:
        return None
    return network if network.version == 4 and network.prefixlen <= 30 else None


def check(nodes, links, default_mtu=1500, mesh_peer_limit=DEFAULT_MESH_PEER_LIMIT, listen_port=DEFAULT_LISTEN_PORT,
          network=None):
    """Every problem in the input, each naming the node or the field (an empty list: fine).
    With `network`, every tunnel address must be a host address inside it."""
    problems = []
    net = None
    if network is not None:
        net = _network(network)
        if net is None:
            problems.append('sync_tunnel_network=%r is not an IPv4 network of at most /30 (e.g. 10.97.0.0/24)' % (network,))
    names, addresses = {}, {}
    for node in nodes:
        name = node.get('name') or '(unnamed)'
        if name in names:
            problems.append('training node %s is listed twice' % name)
        names[name] = node
        # both go into a comment line of every peer's configuration
        for field in ('name', 'site'):
            if node.get(field) and not is_unit_text(node[field]):
                problems.append('training node %r: %s' % (name, value_problem(node[field], 'unit_text', field)))
        if not node.get('site'):
            problems.append('training node %s has no site' % name)
        address = _address(node.get('address', ''))
        if address is None or address.version != 4:
            problems.append('training node %s: sync tunnel address %r is not an IPv4 address' % (name, node.get('address')))
        elif net is not None and (address not in net or address in (net.network_address, net.broadcast_address)):
            problems.append('training node %s: sync tunnel address %s is not a host address of sync_tunnel_network %s'
                            % (name, address, net))
        elif str(address) in addresses:
            problems.append('sync tunnel address %s is set on two training nodes: %s and %s'
                            % (address, addresses[str(address)], name))
        else:
            addresses[str(address)] = name
        if _address(node.get('endpoint', '')) is None:
            problems.append('training node %s: endpoint %r is not an IP address peers can send to (sync_tunnel_endpoint; '
                            'a node outside the run cannot learn it from its default route)' % (name, node.get('endpoint')))
    if not 1 <= int(mesh_peer_limit) <= 4096:
        problems.append('mesh_peer_limit=%s is outside 1-4096' % mesh_peer_limit)
    if not 1 <= int(listen_port) <= 65535:
        problems.append('listen_port=%s is outside 1-65535' % listen_port)
    # The collection's path MTU rule (module_utils/mtu.py): 576 for IPv4, 1280 where a node's
    # endpoint is IPv6 (an IPv6 path carries at least 1280), as the WAN model's. The tunnel
    # needs more on the paths it crosses (plan(): at least MIN_TUNNEL_PATH_MTU, as the control plane's).
    ipv6 = [n.get('name') for n in nodes if getattr(_address(n.get('endpoint', '')), 'version', 4) == 6]
    floor = mtu_floor(ipv6=bool(ipv6))
    allowed = '%d-%d%s' % (floor, MTU_MAX, (' (IPv6 endpoints: %s)' % ', '.join(map(str, ipv6))) if ipv6 else '')
    if not floor <= int(default_mtu) <= MTU_MAX:
        problems.append('default path MTU %s is outside %s' % (default_mtu, allowed))
    for link in links:
        try:
            mtu_ok = floor <= int(link.get('mtu', 0)) <= MTU_MAX
        except (TypeError, ValueError):
            mtu_ok = False
        if len(link.get('sites', [])) != 2 or not mtu_ok:
            problems.append('path MTU entry %r needs two sites and an mtu of %s' % (_entry(link), allowed))
    sites = {}
    for node in nodes:
        sites.setdefault(node.get('site'), []).append(node)
    for site, members in sorted(sites.items(), key=lambda item: str(item[0])):
        gateways = [n['name'] for n in members if n.get('gateway')]
        if len(gateways) > 1:
            problems.append('site %s has %d sync gateways (%s): at most one' % (site, len(gateways), ', '.join(gateways)))
    return problems


def site_gateways(nodes):
    """{site: its gateway's name}: the node marked gateway, else the first by name."""
    ordered = sorted(nodes, key=lambda n: n['name'])
    out = dict((n['site'], n['name']) for n in ordered if n.get('gateway'))
    for node in ordered:
        out.setdefault(node['site'], node['name'])
    return out


def _collapsed(addresses):
    return [str(net) for net in ipaddress.collapse_addresses(ipaddress.ip_network(u'%s/32' % a) for a in addresses)]


def plan(nodes, me, links=(), default_mtu=1500, mesh_peer_limit=DEFAULT_MESH_PEER_LIMIT,
         listen_port=DEFAULT_LISTEN_PORT, keepalive=25, public_keys=None, network=None):
    """What node `me` builds: mode, MTU, peers (name, endpoint, allowed_ips) and the peers' config text.

    Raises SyncPlanError listing every problem (the whole input is checked, not only `me`'s part)."""
    problems = check(nodes, links, default_mtu, mesh_peer_limit, listen_port, network)
    problems += key_problems(public_keys or {})
    by_name = dict((n.get('name'), n) for n in nodes)
    if me not in by_name:
        problems.append('host %s is not one of the training nodes (%s)' % (me, ', '.join(sorted(map(str, by_name)))))
    if problems:
        raise SyncPlanError(problems)
    own = by_name[me]
    mode = 'mesh' if len(nodes) - 1 <= int(mesh_peer_limit) else 'gateways'
    gateways = site_gateways(nodes)
    hops = []      # (site, site) pairs a packet on wg-sync can cross: the MTU fits the narrowest
    peers = []
    if mode == 'mesh':
        for node in sorted(nodes, key=lambda n: n['name']):
            if node['name'] != me:
                peers.append((node, [node['address']]))
                hops.append((own['site'], node['site']))
    else:
        remote_by_site = {}
        for node in nodes:
            if node['site'] != own['site']:
                remote_by_site.setdefault(node['site'], []).append(node['address'])
        for node in sorted(nodes, key=lambda n: n['name']):
            if node['name'] == me:
                continue
            if node['site'] == own['site']:
                allowed = [node['address']]
                if node['name'] == gateways[own['site']]:
                    # the own gateway carries every other site's addresses
                    allowed += [a for site in sorted(remote_by_site) for a in remote_by_site[site]]
                peers.append((node, allowed))
            elif me == gateways[own['site']] and node['name'] == gateways[node['site']]:
                peers.append((node, remote_by_site[node['site']]))
        # Any node's cross-site packet crosses its LAN to the gateway, the WAN between gateways and
        # the remote LAN: the narrowest of all of them.
        sites = sorted(set(n['site'] for n in nodes))
        hops = [(a, b) for a in sites for b in sites]
    hop_mtus = dict(((a, b), path_mtu(links, default_mtu, a, b)) for a, b in hops)
    mtus = list(hop_mtus.values()) or [int(default_mtu)]
    if min(mtus) < MIN_TUNNEL_PATH_MTU:
        narrow = sorted(set('%s<->%s (%d)' % (a, b, m) for (a, b), m in hop_mtus.items() if m < MIN_TUNNEL_PATH_MTU))
        raise SyncPlanError(['the tunnel of %s crosses %s: a path MTU below %d leaves the tunnel less than %d '
                             '(path MTU minus WireGuard overhead %d)'
                             % (me, ', '.join(narrow), MIN_TUNNEL_PATH_MTU, MIN_TUNNEL_PATH_MTU - WIREGUARD_OVERHEAD,
                                WIREGUARD_OVERHEAD)])
    mtu = min(mtus) - WIREGUARD_OVERHEAD   # at least 576 inside (IPv6 endpoints: 1200)
    out_peers = []
    for node, allowed in peers:
        endpoint = _address(node['endpoint'])
        host = '[%s]' % endpoint if endpoint.version == 6 else str(endpoint)
        out_peers.append({'name': node['name'], 'site': node['site'], 'address': node['address'],
                          'endpoint': '%s:%d' % (host, int(listen_port)),
                          'allowed_ips': _collapsed(allowed), 'keepalive': int(keepalive)})
    keys = public_keys or {}
    return {
        'mode': mode,
        'address': own['address'],
        # the interface's prefix: the network's, else a host route per peer (AllowedIPs) is all there is
        'prefixlen': _network(network).prefixlen if network else 32,
        'site': own['site'],
        'gateway': mode == 'gateways' and gateways[own['site']] == me,
        # gateways forward between wg-sync peers (net.ipv4.ip_forward, a forward rule for wg-sync)
        'forwarding': mode == 'gateways' and gateways[own['site']] == me,
        'listen_port': int(listen_port),
        'mtu': mtu,
        'peers': out_peers,
        'peer_count': len(out_peers),
        'config': render_peers(out_peers, keys),
        'keys_complete': all(p['name'] in keys for p in out_peers),
    }


def key_problems(public_keys):
    """A message per key that is not a WireGuard public key, naming the node: each is written into
    every peer's configuration, where a newline would add lines ([Peer], AllowedIPs) of its own.
    An empty key is one not known yet (a placeholder is written)."""
    return ['training node %s: %s' % (name, value_problem(key, 'wireguard_key', 'public key'))
            for name, key in sorted(public_keys.items(), key=lambda item: str(item[0]))
            if key and value_problem(key, 'wireguard_key', 'public key')]


def render_peers(peers, public_keys):
    """The [Peer] sections of wg-sync's configuration, as the wireguard_interface module writes them. A
    peer whose key is not known yet gets a placeholder of a key's length, so the size is exact before
    keys exist."""
    text = render_config(None, [{'public_key': public_keys.get(peer['name']) or 'X' * PUBLIC_KEY_CHARS,
                                 'comment': '%s (%s)' % (peer['name'], peer['site']), 'endpoint': peer['endpoint'],
                                 'allowed_ips': peer['allowed_ips'], 'keepalive': peer['keepalive']}
                                for peer in peers])
    return text[len('[Interface]\n\n'):] if peers else ''


def scaling(site_sizes, mesh_peer_limit=DEFAULT_MESH_PEER_LIMIT, network=u'10.96.0.0/12', default_mtu=1500):
    """Peers and config bytes per host for sites of the given sizes ({site: nodes}), computed by
    plan() on a generated inventory: {'mode', 'nodes', 'hosts': {kind: {'peers', 'config_bytes'}}},
    kind 'node' (not a gateway) and 'gateway'. Each site's addresses are contiguous, as an
    inventory would number them."""
    hosts = iter(ipaddress.ip_network(network).hosts())
    nodes = []
    for site in sorted(site_sizes):
        for index in range(site_sizes[site]):
            address = str(next(hosts))
            nodes.append({'name': '%s-gpu%03d' % (site, index + 1), 'site': site, 'address': address,
                          'endpoint': address})
    kinds, mode = {}, None
    for node in nodes:
        result = plan(nodes, node['name'], default_mtu=default_mtu, mesh_peer_limit=mesh_peer_limit)
        kind = 'gateway' if result['gateway'] else 'node'
        sizes = kinds.setdefault(kind, {'peers': 0, 'config_bytes': 0})
        sizes['peers'] = max(sizes['peers'], result['peer_count'])
        sizes['config_bytes'] = max(sizes['config_bytes'], len(result['config'].encode('utf-8')))
        mode = result['mode']
    return {'mode': mode, 'nodes': len(nodes), 'hosts': kinds}
