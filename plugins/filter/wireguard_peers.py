# -*- coding: utf-8 -*-
# Copyright: (c) 2026, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The peers' WireGuard public keys, collected and checked the same way for every tunnel role.

control_plane and sync_tunnel both learn each peer's public key from the peer's own
wireguard_keypair result in this run, or, for a peer outside the run (--limit), from its
public.key read on it. Documentation: wireguard_peer_keys.yml, wireguard_peer_key_problems.yml.
"""

from __future__ import annotations

import base64

from ansible.errors import AnsibleFilterError

from ansible_collections.longhaul.trainnet.plugins.module_utils.config_value import problem as value_problem


def wireguard_peer_keys(hostvars, peers, key_var, outside=None):
    """{peer: public key} for the peers that have one: from hostvars[peer][key_var].public_key (the
    peer's wireguard_keypair result in this run), else from the slurp results in `outside`."""
    if not isinstance(key_var, str) or not key_var:
        raise AnsibleFilterError('wireguard_peer_keys: key_var must name the registered wireguard_keypair result')
    out = {}
    for peer in peers or []:
        try:
            registered = hostvars[peer].get(key_var)
        except KeyError:
            registered = None
        key = registered.get('public_key') if isinstance(registered, dict) else None
        if key:
            out[peer] = str(key)
    for result in (outside or {}).get('results') or []:
        content = result.get('content') if isinstance(result, dict) else None
        if content and result.get('item') not in out:
            out[result['item']] = base64.b64decode(content).decode('utf-8', 'replace').strip()
    return out


def wireguard_peer_key_problems(peer_keys, peers, key_dir, host, check_missing=True):
    """Messages for keys that would break this host's tunnel files: a key that is not a WireGuard
    key (a newline in a tampered public.key would add lines of its own), and with check_missing a
    peer without one."""
    problems = []
    bad = []
    for peer in sorted(peer for peer, key in (peer_keys or {}).items() if key):
        problem = value_problem(str(peer_keys[peer]), 'wireguard_key', 'public key')
        if problem:
            bad.append('host %s: %s' % (peer, problem))
    if bad:
        problems.append('Refusing to write the tunnels of %s: %s (from the host\'s %s/public.key; regenerate it '
                        'there with wg pubkey).' % (host, '; '.join(bad), key_dir))
    missing = [peer for peer in peers or [] if not (peer_keys or {}).get(peer)]
    if check_missing and missing:
        problems.append('No WireGuard public key for %s (not in this run and no %s/public.key there): run the role '
                        'on those hosts first (without --limit).' % (', '.join(missing), key_dir))
    return problems


class FilterModule(object):
    """WireGuard peer key filters of longhaul.trainnet."""

    def filters(self):
        return {
            'wireguard_peer_keys': wireguard_peer_keys,
            'wireguard_peer_key_problems': wireguard_peer_key_problems,
        }
