#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: control_plane_plan
short_description: Check the control-plane topology and plan one host's tunnels and routes
version_added: 0.3.0
description:
  - Checks the whole control-plane input (every control host's tunnel address, endpoint, path MTU,
    tunnel MTU, site prefixes and pre-shared key, plus the shared settings) and fails listing every
    problem, each naming the variable and the host, so the role stops before any host is changed.
  - Returns what O(host) builds - one WireGuard tunnel per other control host with its interface
    name, link addresses, listen port, peer endpoint and MTU (path MTU minus 80 bytes of WireGuard
    overhead unless set lower), and the BIRD static protocols (direct tunnel preferred, another
    anchor as the backup) whose routes BFD switches.
  - Pure computation; reads and changes nothing on the host.
options:
  host:
    description: Inventory name of the host to plan for; one of O(hosts).
    type: str
    required: true
  hosts:
    description: Every control host (the home master and the anchors).
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Inventory name.
        type: str
        required: true
      role:
        description: V(master) or V(anchor).
        type: str
        required: true
        choices: [master, anchor]
      tunnel_address:
        description: The host's stable overlay address (on C(lo)); its offset in O(tunnel_network) is its id.
        type: str
        default: ''
      endpoint:
        description: Underlay IP address peers send WireGuard packets to; required for anchors.
        type: str
        default: ''
      path_mtu:
        description: MTU of the underlay path from this host.
        type: int
        default: 1500
      tunnel_mtu:
        description: Tunnel MTU; V(0) derives O(hosts[].path_mtu) minus 80.
        type: int
        default: 0
      site_prefixes:
        description: Networks behind this host that the others route to over the tunnels.
        type: list
        elements: str
        default: []
      preshared_key:
        description: WireGuard pre-shared key (base64 of 32 bytes), empty for none. Only checked, never returned or logged.
        type: str
        default: ''
  tunnel_network:
    description: Network holding every tunnel address.
    type: str
    required: true
  link_network:
    description: IPv4 /16 for the tunnel ends (C(<net>.<own id>.<peer id>)).
    type: str
    default: 169.254.0.0/16
  rendezvous_address:
    description: The rendezvous /32, served by O(primary_anchor).
    type: str
    required: true
  primary_anchor:
    description: Anchor that serves O(rendezvous_address).
    type: str
    required: true
  listen_port_base:
    description: The tunnel towards the host with id N listens on this port plus N.
    type: int
    default: 51800
  bfd_interval_ms:
    description: BFD transmit and receive interval in milliseconds (checked here, used by the BIRD template).
    type: int
    default: 50
  bfd_multiplier:
    description: Missed BFD packets before a session goes down, 2-255.
    type: int
    default: 3
  bfd_idle_tx_ms:
    description: BFD interval while a session is down, in milliseconds.
    type: int
    default: 1000
  path_queue_delay_ms:
    description:
      - The most queueing delay a loaded path between control hosts adds, in milliseconds (0-10000; 0 = unknown,
        not checked). O(bfd_interval_ms) x O(bfd_multiplier) must be at least this plus two intervals.
    type: int
    default: 0
  keepalive:
    description: WireGuard PersistentKeepalive in seconds (0 disables).
    type: int
    default: 25
  training_nodes:
    description: The training nodes, checked with the rest (their routes and env files depend on it).
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Inventory name.
        type: str
        required: true
      gateway:
        description: IPv4 address of the site's control host that forwards the node's overlay traffic; empty for none.
        type: str
        default: ''
      local_address:
        description: Address torchrun advertises for the node; empty for none.
        type: str
        default: ''
  training_sources:
    description: Extra IPv4 networks allowed to the rendezvous ports.
    type: list
    elements: str
    default: []
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
- name: Plan this host's tunnels and routes
  longhaul.trainnet.control_plane_plan:
    host: "{{ inventory_hostname }}"
    hosts:
      - {name: cn-master, role: master, tunnel_address: 10.254.0.1, endpoint: 198.18.1.10, path_mtu: 1400}
      - {name: usw-anchor, role: anchor, tunnel_address: 10.254.0.2, endpoint: 198.18.2.10, path_mtu: 1400}
      - {name: use-anchor, role: anchor, tunnel_address: 10.254.0.3, endpoint: 198.18.3.10}
    tunnel_network: 10.254.0.0/24
    rendezvous_address: 10.255.0.1
    primary_anchor: usw-anchor
  register: plan
'''

RETURN = r'''
plan:
  description: What the host builds.
  returned: success
  type: dict
  contains:
    id:
      description: The host's id (offset of its tunnel address in the tunnel network).
      type: int
      sample: 1
    role:
      description: V(master) or V(anchor).
      type: str
      sample: master
    tunnel_address:
      description: The host's overlay address (router id, source of its routes).
      type: str
      sample: 10.254.0.1
    rendezvous_address:
      description: The rendezvous address.
      type: str
      sample: 10.255.0.1
    rendezvous_local:
      description: Whether this host serves the rendezvous address (the primary anchor).
      type: bool
      sample: false
    primary_anchor:
      description: The anchor serving the rendezvous address.
      type: str
      sample: usw-anchor
    rendezvous_takeover:
      description: Whether this host answers for the rendezvous address once BFD withdraws its route to the
        primary anchor (every other anchor).
      type: bool
      sample: false
    forwarding:
      description: Whether the host forwards IPv4 (every control host - anchors relay for each other, and each
        forwards its own site's training nodes into the tunnels).
      type: bool
      sample: true
    tunnels:
      description: One entry per peer - peer, peer_role, ifname, local, remote, peer_tunnel_address, listen_port,
        endpoint (host:port or empty), endpoint_address, endpoint_family, mtu, preshared_key (bool).
      type: list
      elements: dict
      sample:
        - {peer: usw-anchor, peer_role: anchor, ifname: wg-usw-anchor, local: 169.254.1.2, remote: 169.254.2.1,
           peer_tunnel_address: 10.254.0.2, listen_port: 51802, endpoint: '198.18.2.10:51801',
           endpoint_address: 198.18.2.10, endpoint_family: 4, mtu: 1320, preshared_key: false}
    bird_protocols:
      description: BIRD static protocols - name, preference, routes (prefix, via, peer) and, for backups, relay.
      type: list
      elements: dict
      sample:
        - {name: cp_direct, preference: 200, routes: [{prefix: 10.255.0.1/32, via: 169.254.2.1, peer: usw-anchor}]}
    tunnel_network:
      description: The tunnel network.
      type: str
      sample: 10.254.0.0/24
    link_network:
      description: The network of the tunnel ends.
      type: str
      sample: 169.254.0.0/16
    bfd_ports:
      description: UDP ports BFD uses.
      type: list
      elements: int
      sample: [3784, 3785, 4784]
'''

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.longhaul.trainnet.plugins.module_utils.control_plane import PlanError, check_training, plan

SETTINGS = ('tunnel_network', 'link_network', 'rendezvous_address', 'primary_anchor', 'listen_port_base',
            'bfd_interval_ms', 'bfd_multiplier', 'bfd_idle_tx_ms', 'keepalive', 'path_queue_delay_ms')


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host=dict(type='str', required=True),
            hosts=dict(type='list', elements='dict', required=True, options=dict(
                name=dict(type='str', required=True),
                role=dict(type='str', required=True, choices=['master', 'anchor']),
                tunnel_address=dict(type='str', default=''),
                endpoint=dict(type='str', default=''),
                path_mtu=dict(type='int', default=1500),
                tunnel_mtu=dict(type='int', default=0),
                site_prefixes=dict(type='list', elements='str', default=[]),
                preshared_key=dict(type='str', default='', no_log=True),
            )),
            tunnel_network=dict(type='str', required=True),
            link_network=dict(type='str', default='169.254.0.0/16'),
            rendezvous_address=dict(type='str', required=True),
            primary_anchor=dict(type='str', required=True),
            listen_port_base=dict(type='int', default=51800),
            bfd_interval_ms=dict(type='int', default=50),
            bfd_multiplier=dict(type='int', default=3),
            bfd_idle_tx_ms=dict(type='int', default=1000),
            path_queue_delay_ms=dict(type='int', default=0),
            keepalive=dict(type='int', default=25),
            training_nodes=dict(type='list', elements='dict', default=[], options=dict(
                name=dict(type='str', required=True),
                gateway=dict(type='str', default=''),
                local_address=dict(type='str', default=''),
            )),
            training_sources=dict(type='list', elements='str', default=[]),
        ),
        supports_check_mode=True,
    )
    settings = dict((key, module.params[key]) for key in SETTINGS)
    errors = check_training(module.params['training_nodes'], module.params['training_sources'])
    try:
        result = plan(module.params['hosts'], settings, module.params['host'])
    except PlanError as exc:
        errors = exc.args[0] + errors
    if errors:
        module.fail_json(msg='Invalid control-plane input (nothing was changed): %s' % '; '.join(errors),
                         errors=errors)
    module.exit_json(changed=False, plan=result)


if __name__ == '__main__':
    main()
