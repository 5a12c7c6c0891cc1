#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: control_plane_status
short_description: Report the live state of the control plane on a host (tunnels, BFD, rendezvous route)
version_added: 0.3.0
description:
  - Reads the WireGuard handshake times (C(wg show all latest-handshakes)), the BFD sessions
    (C(birdc show bfd sessions)), the route to O(rendezvous_address) (C(ip -j route get)) and the
    tunnel settings files the P(longhaul.trainnet.control_plane#role) role writes, and returns one
    structured status - the same one the role's watchdog exports as Prometheus metrics.
  - A tunnel is up when its last handshake is at most 180 s old (WireGuard drops a session's keys after that).
  - A command that fails (not installed, BIRD not running, no route) leaves its part empty and is listed in
    RV(status.errors); the module fails only on bad arguments. On a host without the control plane,
    RV(status.deployed) is false.
  - Commands run in the C locale with a time limit of 5 s each.
options:
  rendezvous_address:
    description: The rendezvous address (an IPv4 address) whose route shows the active anchor.
    type: str
    required: true
  primary_anchor:
    description: Inventory name of the primary anchor, to report whether the rendezvous address is reached through it.
    type: str
    default: ''
  settings_dir:
    description: Directory of the tunnels' configuration files (C(<interface>.conf), the peer named in the comment
      under C([Peer])).
    type: path
    default: /etc/trainnet/wireguard
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - Only reads; runs and reports the same in check mode.
  diff_mode:
    support: none
  platform:
    platforms: linux
notes:
  - Needs root for C(wg) and C(birdc) (C(become)).
seealso:
  - module: longhaul.trainnet.control_plane_plan
author:
  - longhaul.trainnet maintainers (@longhaul)
'''

EXAMPLES = r'''
- name: Read the control-plane state
  longhaul.trainnet.control_plane_status:
    rendezvous_address: 10.255.0.1
    primary_anchor: usw-anchor
  become: true
  register: cp

- name: Show tunnels and BFD sessions up
  ansible.builtin.debug:
    msg: "tunnels {{ cp.status.tunnels_up }}/{{ cp.status.tunnels_total }}, BFD {{ cp.status.bfd_up }}/{{ cp.status.bfd_total }}"
'''

RETURN = r'''
status:
  description: The control plane's state on the host.
  returned: success
  type: dict
  contains:
    deployed:
      description: Whether the host has control-plane tunnels (settings files or WireGuard interfaces).
      type: bool
      sample: true
    tunnels:
      description: One entry per tunnel - interface, peer (inventory name, empty when unknown), handshake_age
        (seconds, null when never), up (handshake within 180 s), bfd_state (V(Up), V(Down), V(Init), V(AdminDown),
        or null without a session).
      type: list
      elements: dict
      sample:
        - {interface: wg-usw-anchor, peer: usw-anchor, handshake_age: 12, up: true, bfd_state: Up}
    tunnels_up:
      description: Tunnels with a handshake within 180 s.
      type: int
      sample: 2
    tunnels_total:
      description: Tunnels on the host.
      type: int
      sample: 2
    oldest_handshake_age:
      description: Age in seconds of the oldest handshake among the tunnels that had one, null when none had.
      type: int
      sample: 97
    bfd_sessions:
      description: BIRD's BFD sessions - neighbor, interface, peer, state, up, and since (BIRD's time of the last state change).
      type: list
      elements: dict
      sample:
        - {neighbor: 169.254.2.1, interface: wg-usw-anchor, peer: usw-anchor, state: Up, up: true, since: "01:06:31.341"}
    bfd_up:
      description: BFD sessions in state Up.
      type: int
      sample: 2
    bfd_total:
      description: BFD sessions expected - one per tunnel, plus any session on another interface.
      type: int
      sample: 2
    rendezvous:
      description: The route to the rendezvous address - address, device, gateway, source, local (this host
        serves it), assigned (the address is on C(lo), as on the primary anchor), active_anchor (the peer behind
        the route's tunnel, V(local), or null), primary_anchor, on_primary.
      type: dict
      sample: {address: 10.255.0.1, device: wg-usw-anchor, gateway: 169.254.2.1, source: 10.254.0.1, local: false,
               assigned: false, active_anchor: usw-anchor, primary_anchor: usw-anchor, on_primary: true}
    errors:
      description: Commands that failed, with their exit code and last line of output.
      type: list
      elements: str
      sample: ["birdc show bfd sessions: rc 1: Unable to connect to server control socket (/run/bird/bird.ctl)"]
'''

import ipaddress

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import run_bounded
from ansible_collections.longhaul.trainnet.plugins.module_utils.control_plane_status import LIMIT, collect


def bounded(argv):
    result = run_bounded(argv, LIMIT)
    return result.rc, result.out, result.err


def main():
    module = AnsibleModule(
        argument_spec=dict(
            rendezvous_address=dict(type='str', required=True),
            primary_anchor=dict(type='str', default=''),
            settings_dir=dict(type='path', default='/etc/trainnet/wireguard'),
        ),
        supports_check_mode=True,
    )
    address = module.params['rendezvous_address']
    try:
        parsed = ipaddress.ip_address(address.strip())
    except ValueError:
        parsed = None
    if parsed is None or parsed.version != 4:
        module.fail_json(msg="rendezvous_address='%s' must be an IPv4 address, e.g. 10.255.0.1" % address)
    status = collect(str(parsed), module.params['primary_anchor'], module.params['settings_dir'], run=bounded)
    module.exit_json(changed=False, status=status)


if __name__ == '__main__':
    main()
