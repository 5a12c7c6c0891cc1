# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The control plane's topology, checked and planned from the inventory: one WireGuard tunnel per
pair of control hosts (the home master and the anchors), the addresses and ports on both ends, the
tunnel MTU, and the BIRD static routes (direct first, through another anchor second) that BFD
switches between. Pure: no host is read or changed, so the role can check every host's input
before any host is modified.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

from ansible_collections.longhaul.trainnet.plugins.module_utils.config_value import is_interface_name, is_wireguard_key
from ansible_collections.longhaul.trainnet.plugins.module_utils.mtu import MTU_MAX, MTU_MIN

# Worst case per packet: outer IPv6 (40) + UDP (8) + WireGuard header (16) + auth tag (16). With
# an IPv4 underlay it is 60, but an endpoint may move to IPv6: always subtract the worst case.
WIREGUARD_OVERHEAD = 80
BFD_PORTS = (3784, 3785, 4784)  # single-hop control, echo, multi-hop (RFC 5881, 5883)
PREFERENCE_DIRECT = 200
PREFERENCE_RELAY = 100


class PlanError(Exception):
    """The input cannot make a working control plane; args[0] lists every problem found."""


def _ip(text):
    try:
        return ipaddress.ip_address(str(text).strip())
    except ValueError:
        return None


def _net(text):
    try:
        return ipaddress.ip_network(str(text).strip(), strict=True)
    except ValueError:
        return None


def valid_preshared_key(text):
    """True when `text` is base64 of exactly 32 bytes (what `wg genpsk` prints)."""
    return is_wireguard_key(str(text).strip())


def tunnel_mtu_limit(path_mtu):
    return int(path_mtu) - WIREGUARD_OVERHEAD


# The narrowest path a WireGuard tunnel can cross: its MTU (path - overhead) is at least the IPv4
# minimum, the floor of every MTU this collection sets (the gradient-sync tunnel follows it too).
MIN_TUNNEL_PATH_MTU = MTU_MIN + WIREGUARD_OVERHEAD


def interface_name(peer_name, peer_id):
    """`wg-<peer>` when the inventory name fits an interface name, else `wg-id<N>`."""
    name = 'wg-%s' % peer_name
    if is_interface_name(name):
        return name
    return 'wg-id%d' % peer_id


def _int(value, default=None):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def bfd_multiplier_for(interval_ms, queue_delay_ms):
    """The smallest BFD multiplier whose detection time outlasts a full queue: a packet delayed by the
    path's whole queueing delay plus one packet lost, interval x multiplier >= delay + 2 x interval."""
    return max(2, -(-int(queue_delay_ms) // int(interval_ms)) + 2)


def bfd_timing_problems(settings):
    """BFD that declares a path dead sooner than a loaded path delays its packets takes load for a fault:
    the route flaps (and the rendezvous address with it) while the path only carries a full queue."""
    interval, multiplier = _int(settings.get('bfd_interval_ms')), _int(settings.get('bfd_multiplier'))
    delay = _int(settings.get('path_queue_delay_ms', 0))
    if delay is None or not 0 <= delay <= 10000:
        return ['control_plane_path_queue_delay_ms=%s is outside the allowed range 0-10000'
                % settings.get('path_queue_delay_ms')]
    if not delay or interval is None or multiplier is None or interval < 1 or multiplier < 2:
        return []
    needed = bfd_multiplier_for(interval, delay)
    if multiplier >= needed:
        return []
    return ['control_plane_bfd_interval_ms x control_plane_bfd_multiplier = %d ms is shorter than '
            'control_plane_path_queue_delay_ms=%d plus two intervals: a loaded path delays BFD packets that long and '
            'the session would go down with no fault; set control_plane_bfd_multiplier to %d or more (%d ms)'
            % (interval * multiplier, delay, needed, interval * needed)]


def check(hosts, settings):
    """Every problem with the input, each naming the variable and the host. [] when usable.

    hosts: list of {name, role ('master'|'anchor'), tunnel_address, endpoint, path_mtu,
    tunnel_mtu (0 = derived), site_prefixes, preshared_key ('' = none)}.
    settings: {tunnel_network, link_network, rendezvous_address, primary_anchor, listen_port_base,
    bfd_interval_ms, bfd_multiplier, bfd_idle_tx_ms, keepalive, path_queue_delay_ms (0 = unknown)}.
    """
    errors = []
    masters = [h for h in hosts if h['role'] == 'master']
    anchors = [h for h in hosts if h['role'] == 'anchor']
    if len(masters) != 1:
        errors.append('exactly one home master is needed (control_plane_master_group), found %d: %s'
                      % (len(masters), ', '.join(h['name'] for h in masters) or 'none'))
    if not anchors:
        errors.append('no anchor found (control_plane_anchor_group is empty)')

    tunnel_net = _net(settings.get('tunnel_network'))
    if tunnel_net is None or tunnel_net.version != 4:
        errors.append("control_plane_tunnel_network='%s' must be an IPv4 network in CIDR form, e.g. 10.254.0.0/24"
                      % settings.get('tunnel_network'))
    link_net = _net(settings.get('link_network'))
    if link_net is None or link_net.version != 4 or link_net.prefixlen != 16:
        errors.append("control_plane_link_network='%s' must be an IPv4 /16 (e.g. 169.254.0.0/16): each tunnel "
                      "end takes <net>.<own id>.<peer id>" % settings.get('link_network'))
        link_net = None

    for key, low, high in (('bfd_interval_ms', 1, 10000), ('bfd_multiplier', 2, 255),
                           ('bfd_idle_tx_ms', 1, 10000), ('keepalive', 0, 65535),
                           ('listen_port_base', 1024, 65535 - 255)):
        value = _int(settings.get(key))
        if value is None or not low <= value <= high:
            errors.append('control_plane_%s=%s is outside the allowed range %d-%d'
                          % (key, settings.get(key), low, high))
    errors += bfd_timing_problems(settings)

    rdv = _ip(settings.get('rendezvous_address'))
    if rdv is None or rdv.version != 4:
        errors.append("control_plane_rendezvous_address='%s' must be an IPv4 address"
                      % settings.get('rendezvous_address'))
    elif link_net is not None and rdv in link_net:
        errors.append('control_plane_rendezvous_address=%s lies inside control_plane_link_network=%s'
                      % (rdv, link_net))

    primary = settings.get('primary_anchor') or ''
    if anchors and primary not in [h['name'] for h in anchors]:
        errors.append("control_plane_primary_anchor='%s' must name a host of the anchor group (%s)"
                      % (primary, ', '.join(h['name'] for h in anchors)))

    seen_addresses = {}
    seen_ifnames = {}
    for host in hosts:
        name = host['name']
        if host['role'] == 'master' and host['name'] in [a['name'] for a in anchors]:
            errors.append('host %s is in both the master and the anchor group' % name)
        address = _ip(host.get('tunnel_address'))
        if address is None or address.version != 4:
            errors.append("control_plane_tunnel_address='%s' on host %s must be an IPv4 address"
                          % (host.get('tunnel_address', ''), name))
        else:
            if tunnel_net is not None:
                offset = int(address) - int(tunnel_net.network_address)
                if address not in tunnel_net or not 1 <= offset <= 254:
                    errors.append('control_plane_tunnel_address=%s on host %s must be one of the first 254 host '
                                  'addresses of control_plane_tunnel_network=%s (its offset is the tunnel id)'
                                  % (address, name, tunnel_net))
            if rdv is not None and address == rdv:
                errors.append('control_plane_tunnel_address=%s on host %s equals control_plane_rendezvous_address'
                              % (address, name))
            if str(address) in seen_addresses:
                errors.append('control_plane_tunnel_address=%s is set on two hosts: %s and %s'
                              % (address, seen_addresses[str(address)], name))
            else:
                seen_addresses[str(address)] = name

        endpoint = str(host.get('endpoint') or '').strip()
        if not endpoint:
            if host['role'] == 'anchor':
                errors.append('control_plane_endpoint is not set for anchor %s: peers need its underlay '
                              'address to reach it' % name)
        elif _ip(endpoint) is None:
            errors.append("control_plane_endpoint='%s' on host %s must be an IP address (nftables admits "
                          "WireGuard packets from peer endpoints only)" % (endpoint, name))

        path_mtu = _int(host.get('path_mtu'))
        tunnel_mtu = _int(host.get('tunnel_mtu'), -1)
        if path_mtu is None or not MTU_MIN <= path_mtu <= MTU_MAX:
            errors.append('control_plane_path_mtu=%s on host %s is outside the allowed range %d-%d'
                          % (host.get('path_mtu'), name, MTU_MIN, MTU_MAX))
        elif tunnel_mtu == 0 and path_mtu < MIN_TUNNEL_PATH_MTU:
            errors.append('control_plane_path_mtu=%d on host %s leaves a tunnel MTU of %d (minus WireGuard overhead %d): '
                          'a tunnel needs at least %d, a path MTU of at least %d'
                          % (path_mtu, name, tunnel_mtu_limit(path_mtu), WIREGUARD_OVERHEAD, MTU_MIN, MIN_TUNNEL_PATH_MTU))
        elif tunnel_mtu != 0:
            limit = tunnel_mtu_limit(path_mtu)
            if tunnel_mtu < MTU_MIN or tunnel_mtu > limit:
                errors.append('control_plane_tunnel_mtu=%s on host %s must be 0 (derived) or %d-%d: '
                              'control_plane_path_mtu %d minus WireGuard overhead %d'
                              % (host.get('tunnel_mtu'), name, MTU_MIN, limit, path_mtu, WIREGUARD_OVERHEAD))

        for prefix in host.get('site_prefixes') or []:
            net = _net(prefix)
            if net is None or net.version != 4:
                errors.append("control_plane_site_prefixes entry '%s' on host %s must be an IPv4 network in CIDR form"
                              % (prefix, name))
            elif rdv is not None and rdv in net:
                errors.append('control_plane_site_prefixes entry %s on host %s contains control_plane_rendezvous_address'
                              % (net, name))

        psk = host.get('preshared_key') or ''
        if psk and not valid_preshared_key(psk):
            # Never echo the value: it is a secret (and may be a typo of one).
            errors.append('control_plane_preshared_key on host %s is not valid base64 of 32 bytes '
                          '(generate one with `wg genpsk`)' % name)

    ids = {}
    if tunnel_net is not None:
        for host in hosts:
            address = _ip(host.get('tunnel_address'))
            if address is not None and address in tunnel_net:
                ids[host['name']] = int(address) - int(tunnel_net.network_address)
    for host in hosts:
        for peer in hosts:
            if peer is host or peer['name'] not in ids:
                continue
            ifname = interface_name(peer['name'], ids[peer['name']])
            owner = seen_ifnames.setdefault((host['name'], ifname), peer['name'])
            if owner != peer['name']:
                errors.append('hosts %s and %s both give interface %s on %s; rename one'
                              % (owner, peer['name'], ifname, host['name']))
    # A pre-shared key is per tunnel: both ends must hold the same one.
    for host in hosts:
        for peer in hosts:
            if host['name'] < peer['name'] and (host.get('preshared_key') or '') != (peer.get('preshared_key') or ''):
                errors.append('control_plane_preshared_key differs between %s and %s (a tunnel needs the same key '
                              'on both ends)' % (host['name'], peer['name']))
    return errors


def plan(hosts, settings, me):
    """What host `me` builds: its tunnels, BIRD static protocols and firewall sources.

    Raises PlanError listing every problem (see check()).
    """
    errors = check(hosts, settings)
    by_name = dict((h['name'], h) for h in hosts)
    if me not in by_name:
        errors.append('host %s is neither the home master nor an anchor' % me)
    if errors:
        raise PlanError(errors)

    tunnel_net = ipaddress.ip_network(settings['tunnel_network'])
    link_net = ipaddress.ip_network(settings['link_network'])
    ids = dict((h['name'], int(ipaddress.ip_address(h['tunnel_address'])) - int(tunnel_net.network_address))
               for h in hosts)
    base_port = int(settings['listen_port_base'])
    primary = settings['primary_anchor']
    rdv = str(ipaddress.ip_address(settings['rendezvous_address']))
    anchors = [h['name'] for h in hosts if h['role'] == 'anchor']

    def link_address(a, b):
        # Unique per ordered pair, so every tunnel end has its own address and next hop.
        return str(link_net.network_address + ids[a] * 256 + ids[b])

    def effective_mtu(host):
        value = int(host.get('tunnel_mtu') or 0)
        return value if value else tunnel_mtu_limit(host['path_mtu'])

    self_host = by_name[me]
    tunnels = []
    for peer in hosts:
        if peer['name'] == me:
            continue
        endpoint = str(peer.get('endpoint') or '').strip()
        endpoint_ip = ipaddress.ip_address(endpoint) if endpoint else None
        peer_port = base_port + ids[me]
        tunnels.append({
            'peer': peer['name'],
            'peer_role': peer['role'],
            'ifname': interface_name(peer['name'], ids[peer['name']]),
            'local': link_address(me, peer['name']),
            'remote': link_address(peer['name'], me),
            'peer_tunnel_address': str(ipaddress.ip_address(peer['tunnel_address'])),
            'listen_port': base_port + ids[peer['name']],
            'endpoint': ('' if endpoint_ip is None else
                         ('[%s]:%d' % (endpoint_ip, peer_port) if endpoint_ip.version == 6
                          else '%s:%d' % (endpoint_ip, peer_port))),
            'endpoint_address': '' if endpoint_ip is None else str(endpoint_ip),
            'endpoint_family': 0 if endpoint_ip is None else endpoint_ip.version,
            'mtu': min(effective_mtu(self_host), effective_mtu(peer)),
            'preshared_key': bool(self_host.get('preshared_key')),
        })
    via = dict((t['peer'], t['remote']) for t in tunnels)

    def destinations(owner):
        host = by_name[owner]
        prefixes = ['%s/32' % ipaddress.ip_address(host['tunnel_address'])]
        prefixes += [str(ipaddress.ip_network(p)) for p in host.get('site_prefixes') or []]
        if owner == primary:
            prefixes.append('%s/32' % rdv)
        return prefixes

    direct = []
    relays = dict((a, []) for a in anchors if a != me)
    for peer in hosts:
        if peer['name'] == me:
            continue
        for prefix in destinations(peer['name']):
            direct.append({'prefix': prefix, 'via': via[peer['name']], 'peer': peer['name']})
            # Backup: through another anchor (the anchors relay; the home master never does, the
            # pacific would be crossed twice).
            for relay in relays:
                if relay != peer['name']:
                    relays[relay].append({'prefix': prefix, 'via': via[relay], 'peer': peer['name']})
    protocols = [{'name': 'cp_direct', 'preference': PREFERENCE_DIRECT, 'routes': direct}]
    for index, relay in enumerate(sorted(relays)):
        if relays[relay]:
            protocols.append({'name': 'cp_via_%d' % ids[relay], 'preference': PREFERENCE_RELAY - index,
                              'relay': relay, 'routes': relays[relay]})

    return {
        'id': ids[me],
        'role': self_host['role'],
        'tunnel_address': str(ipaddress.ip_address(self_host['tunnel_address'])),
        'rendezvous_address': rdv,
        'rendezvous_local': me == primary,
        # Another anchor answers for the rendezvous address once BFD withdraws its route to the primary.
        'rendezvous_takeover': self_host['role'] == 'anchor' and me != primary,
        'primary_anchor': primary,
        # Anchors relay for each other; every control host forwards its site's training nodes into the tunnels.
        'forwarding': True,
        'tunnels': tunnels,
        'bird_protocols': protocols,
        'tunnel_network': str(tunnel_net),
        'link_network': str(link_net),
        'bfd_ports': list(BFD_PORTS),
    }


def check_training(nodes, training_sources):
    """Problems with the training nodes' control-plane input, each naming the variable and the host.

    nodes: list of {name, gateway ('' = the site routes the overlay), local_address ('' = none)}.
    training_sources: extra networks allowed to the rendezvous ports.
    """
    errors = []
    for node in nodes:
        gateway = str(node.get('gateway') or '').strip()
        address = _ip(gateway)
        if gateway and (address is None or address.version != 4):
            errors.append("control_plane_gateway='%s' on host %s must be the IPv4 address of its site's control host "
                          "(or empty)" % (gateway, node['name']))
        local = str(node.get('local_address') or '').strip()
        if local and _ip(local) is None:
            errors.append("control_plane_local_address='%s' on host %s must be an IP address (or empty)"
                          % (local, node['name']))
        elif local and gateway and _ip(local) == address:
            errors.append('control_plane_gateway=%s on host %s is the host itself' % (gateway, node['name']))
    for source in training_sources or []:
        net = _net(source)
        if net is None or net.version != 4:
            errors.append("control_plane_training_sources entry '%s' must be an IPv4 network in CIDR form" % source)
    return errors
