#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: sync_tunnel_plan
short_description: Plan the gradient-sync WireGuard tunnel of one training node, or of a whole cluster's scale
version_added: 0.5.0
description:
  - Gloo and NCCL's socket transport send gradients in clear TCP; across sites they go through one
    WireGuard interface per training node. This module checks the whole input (every node's site,
    tunnel address and endpoint, the path MTUs) and fails listing every problem, each naming the node
    or the field, before any host is changed.
  - Returns what O(host) builds - the shape (a full V(mesh) while every node has at most
    O(mesh_peer_limit) peers, else V(gateways) - nodes peer within their site and one gateway per
    site peers with the other sites' gateways), the tunnel MTU (the narrowest path a packet on the
    tunnel can cross, minus 80 bytes of WireGuard overhead), the peers with their allowed IPs, and
    the peers' configuration text in C(wg setconf) format (the private key is set apart, on the host).
  - With O(site_sizes) instead of O(host), returns the peers and configuration bytes per host of a
    cluster of that shape, computed by the same code (how the design scales).
  - Pure computation; reads and changes nothing on the host.
options:
  host:
    description: Inventory name of the node to plan for; one of O(nodes). Mutually exclusive with O(site_sizes).
    type: str
  nodes:
    description: Every training node of every site.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Inventory name.
        type: str
        required: true
      site:
        description: The node's site (a name of the link matrix).
        type: str
        required: true
      address:
        description: The node's IPv4 address on the tunnel (unique).
        type: str
        required: true
      endpoint:
        description: Underlay IP address the other nodes send its WireGuard packets to.
        type: str
        required: true
      gateway:
        description: Whether this node is its site's gateway in the V(gateways) shape (at most one per site;
          default the site's first node by name).
        type: bool
        default: false
  network:
    description: IPv4 network holding every node's tunnel address (at most /30); each address must be a host
      address in it, and the interface gets its prefix. Not checked when omitted (the interface then gets a /32).
    type: str
  path_mtus:
    description: Path MTU between two sites, C(sites) (two names) and C(mtu) (576-9000, 1280-9000 when a node's
      endpoint is IPv6; other keys of a WAN model link are ignored); a pair not listed, and a node's own site, use
      O(default_path_mtu).
    type: list
    elements: dict
    default: []
  default_path_mtu:
    description: Path MTU of pairs not in O(path_mtus), 576-9000 (1280-9000 when a node's endpoint is IPv6).
    type: int
    default: 1500
  mesh_peer_limit:
    description: Most peers per node in a full mesh (1-4096); a larger cluster switches to site gateways.
    type: int
    default: 64
  listen_port:
    description: UDP port of the tunnel on every node.
    type: int
    default: 52200
  keepalive:
    description: WireGuard PersistentKeepalive in seconds (0 disables).
    type: int
    default: 25
  public_keys:
    description: Public keys by node name, filled into the configuration text (a placeholder of a key's length otherwise).
    type: dict
    default: {}
  site_sizes:
    description: Nodes per site of a cluster to size ("site -> count"); mutually exclusive with O(host).
    type: dict
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - Computes only; behaves the same in check mode.
  diff_mode:
    support: none
  platform:
    platforms: posix
author:
  - longhaul.trainnet maintainers (@longhaul)
'''

EXAMPLES = r'''
- name: Plan this node's gradient-sync tunnel
  longhaul.trainnet.sync_tunnel_plan:
    host: "{{ inventory_hostname }}"
    network: 10.97.0.0/24
    nodes:
      - {name: cn-gpu1, site: cn-home, address: 10.97.0.1, endpoint: 198.18.1.21}
      - {name: usw-gpu1, site: us-west, address: 10.97.0.2, endpoint: 198.18.2.21}
      - {name: use-gpu1, site: us-east, address: 10.97.0.3, endpoint: 198.18.3.21}
    path_mtus:
      - {sites: [cn-home, us-west], mtu: 1400}
  register: sync_plan

- name: How the design scales to 3 sites of 64 nodes
  longhaul.trainnet.sync_tunnel_plan:
    site_sizes: {cn-home: 64, us-west: 64, us-east: 64}
  register: sync_scale
'''

RETURN = r'''
plan:
  description: What O(host) builds (with O(host)).
  returned: when O(host) is given
  type: dict
  contains:
    mode:
      description: V(mesh) or V(gateways).
      type: str
      sample: mesh
    address:
      description: The node's tunnel address.
      type: str
      sample: 10.97.0.1
    prefixlen:
      description: Prefix length of the address on the interface (O(network)'s, else 32).
      type: int
      sample: 24
    gateway:
      description: Whether the node is its site's gateway (V(gateways) shape only).
      type: bool
      sample: false
    forwarding:
      description: Whether the node forwards between tunnel peers (gateways).
      type: bool
      sample: false
    mtu:
      description: Tunnel MTU.
      type: int
      sample: 1320
    listen_port:
      description: UDP port of the tunnel.
      type: int
      sample: 52200
    peers:
      description: One entry per peer - name, site, address (its tunnel address), endpoint (host:port), allowed_ips, keepalive.
      type: list
      elements: dict
      sample:
        - {name: usw-gpu1, site: us-west, address: 10.97.0.2, endpoint: '198.18.2.21:52200', allowed_ips: [10.97.0.2/32],
           keepalive: 25}
    peer_count:
      description: Number of peers.
      type: int
      sample: 2
    config:
      description: The peers' sections of the tunnel configuration (C(wg setconf) format, no private key).
      type: str
      sample: "[Peer]\n# usw-gpu1 (us-west)\nPublicKey = ...\n"
    keys_complete:
      description: Whether O(public_keys) held every peer's key.
      type: bool
      sample: true
scale:
  description: Peers and configuration bytes per host for O(site_sizes).
  returned: when O(site_sizes) is given
  type: dict
  contains:
    mode:
      description: V(mesh) or V(gateways).
      type: str
      sample: gateways
    nodes:
      description: Nodes in the cluster.
      type: int
      sample: 192
    hosts:
      description: Per kind of host (V(node), V(gateway)) - the most peers and configuration bytes.
      type: dict
      sample: {node: {peers: 63, config_bytes: 11091}, gateway: {peers: 65, config_bytes: 11481}}
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.longhaul.trainnet.plugins.module_utils.sync_tunnel import SyncPlanError, plan, scaling


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host=dict(type='str'),
            nodes=dict(type='list', elements='dict', default=[], options=dict(
                name=dict(type='str', required=True),
                site=dict(type='str', required=True),
                address=dict(type='str', required=True),
                endpoint=dict(type='str', required=True),
                gateway=dict(type='bool', default=False),
            )),
            network=dict(type='str'),
            path_mtus=dict(type='list', elements='dict', default=[]),
            default_path_mtu=dict(type='int', default=1500),
            mesh_peer_limit=dict(type='int', default=64),
            listen_port=dict(type='int', default=52200),
            keepalive=dict(type='int', default=25),
            public_keys=dict(type='dict', default={}),
            site_sizes=dict(type='dict'),
        ),
        mutually_exclusive=[('host', 'site_sizes')],
        required_one_of=[('host', 'site_sizes')],
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p['site_sizes'] is not None:
            sizes = dict((str(site), int(count)) for site, count in p['site_sizes'].items())
            if not sizes or min(sizes.values()) < 1:
                raise SyncPlanError(['site_sizes needs at least one site, each with at least 1 node: %r' % (p['site_sizes'],)])
            module.exit_json(changed=False, scale=scaling(sizes, p['mesh_peer_limit'], default_mtu=p['default_path_mtu']))
        result = plan(p['nodes'], p['host'], links=p['path_mtus'], default_mtu=p['default_path_mtu'],
                      mesh_peer_limit=p['mesh_peer_limit'], listen_port=p['listen_port'], keepalive=p['keepalive'],
                      public_keys=p['public_keys'], network=p['network'])
    except (SyncPlanError, ValueError) as exc:
        errors = exc.args[0] if isinstance(exc, SyncPlanError) else [str(exc)]
        module.fail_json(msg='Invalid gradient-sync tunnel input (nothing was changed): %s' % '; '.join(errors),
                         errors=errors)
    module.exit_json(changed=False, plan=result)


if __name__ == '__main__':
    main()
