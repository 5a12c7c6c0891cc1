#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: wireguard_interface
short_description: Plan, apply in place, verify and roll back one WireGuard interface
version_added: 0.4.0
description:
  - Owns one WireGuard interface whole - its configuration file, its systemd unit and the live interface -
    for both tunnel roles of this collection (C(control_plane) has one interface per peer, C(sync_tunnel) one
    interface with many peers).
  - Plans first. The configuration file (C(wg setconf) format, C(NAME.conf) in O(config_dir), mode C(0600))
    holds the peers and their pre-shared keys but not the private key; the unit (C(trainnet-wg-NAME.service))
    builds the interface at boot from it, loading the private key from O(private_key_file). The live
    interface is compared with C(wg showconf), C(ip -j address) and its MTU; the keys are compared in
    memory and never returned or shown (a diff shows them as C((secret))).
  - Applies in place. A missing interface is started through its unit; an existing one gets only what
    differs, with C(wg syncconf) (the configuration reaches C(wg) on standard input, never in process
    arguments), C(ip address) and C(ip link) - no restart, so the peers that did not change keep their
    sessions. A peer whose pre-shared key changes is removed and added again, so that the new key is
    proven by a handshake now rather than at the next rekey.
  - Verifies after a change, when O(verify) names addresses - every one must answer a full-size ping
    (DF set, the interface MTU) through the interface within O(verify_timeout). When one does not, the
    previous files and the previous live state (or no interface, when there was none) are put back, the
    previous state is pinged again and the module fails naming what did not answer. The previous state comes
    back 5 s after the verify failed (at most O(verify_timeout)), so that peers verifying towards this end at
    the same time do not take its restored, smaller MTU (their echo replies fragmented on the way back) for
    success.
  - 'Several ends changing together (both ends of a tunnel, every node of a mesh): call it with O(verify) empty
    on every end first, then with O(state=verified) on every end. The first call records the state to go back
    to (C(.NAME.unverified.json) in O(config_dir), mode C(0600), without the private key); the second pings,
    and rolls back from that record. Verifying each end right after its own change would ping peers still on
    their old settings, whose echo replies (fragmented by their old, smaller MTU) hide a path that does not
    carry the new one. A change left unverified by an interrupted run is verified by the next one.'
  - O(state=absent) stops and disables the unit (the interface goes with it) and removes its files.
options:
  name:
    description: The interface name (1-15 characters).
    type: str
    required: true
  state:
    description:
      - V(present) applies (and verifies, when O(verify) is given); V(absent) removes; V(verified) verifies the
        change an earlier V(present) call without O(verify) recorded, and rolls it back when it fails (nothing to
        do when there is none).
    type: str
    choices: [present, absent, verified]
    default: present
  config_dir:
    description: Directory of the configuration file C(NAME.conf) (created C(0700)); the private key usually
      lives here too.
    type: path
    required: true
  private_key_file:
    description: The interface's private key (from M(longhaul.trainnet.wireguard_keypair)). Required with
      O(state=present).
    type: path
  listen_port:
    description: UDP port the interface listens on; V(0) lets the kernel choose.
    type: int
    default: 0
  addresses:
    description: Addresses of the interface, each C(ADDRESS/PREFIX) or C(LOCAL peer REMOTE) (a point-to-point
      pair). Addresses the interface has beyond these are removed.
    type: list
    elements: str
    default: []
  mtu:
    description: Interface MTU, 576-9000 (the path MTU minus WireGuard's 80 bytes).
    type: int
    default: 1420
  peers:
    description: The peers, in order. Peers the live interface has beyond these are removed.
    type: list
    elements: dict
    default: []
    suboptions:
      public_key:
        description: The peer's public key.
        type: str
        required: true
      comment:
        description: A name for the peer, shown in the configuration file, diffs and messages.
        type: str
        default: ''
      endpoint:
        description: C(HOST:PORT) or C([IPv6]:PORT); empty for a peer that connects to this one.
        type: str
        default: ''
      allowed_ips:
        description: Prefixes routed to the peer and accepted from it.
        type: list
        elements: str
        default: []
      keepalive:
        description: Persistent keepalive in seconds, 0-65535 (V(0) off).
        type: int
        default: 0
      preshared_key:
        description: The pre-shared key for this peer (from Ansible Vault; empty for none). Never logged.
        type: str
        default: ''
  implementation:
    description: V(kernel) (C(ip link add ... type wireguard)) or V(go) (C(wireguard-go) run by the unit);
      M(longhaul.trainnet.kernel_capability) says which one the host can run.
    type: str
    choices: [kernel, go]
    default: kernel
  description:
    description: The unit's description.
    type: str
    default: ''
  unit_after:
    description: Units the interface's unit starts after.
    type: list
    elements: str
    default: []
  unit_before:
    description: Units the interface's unit starts before.
    type: list
    elements: str
    default: []
  verify:
    description: Addresses that must answer a full-size ping (DF) through the interface after a change. With
      O(state=verified) and none (a run limited to this end), the change stays recorded as unverified for a
      later call.
    type: list
    elements: str
    default: []
  verify_timeout:
    description: Seconds (1-600) for every O(verify) address to answer; a first handshake that crossed the
      other end's own is retried by WireGuard after 5 s.
    type: int
    default: 30
  verify_together:
    description:
      - The peers named in O(verify) verify towards this end at the same time (every end of the tunnel changed
        in one run, as both tunnel roles do). For each of them the end with the higher tunnel address waits
        up to 2 s for the peer's first handshake before it pings (at once when there is one already).
      - Two first initiations sent at once cross on the path, each end drops the answer to its own, and
        WireGuard retries only after 5-5.33 s (often crossing again); one end waiting makes the first
        handshake one round trip.
    type: bool
    default: false
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - Reads the files and the live interface and reports what would change; starts, writes and pings nothing.
  diff_mode:
    support: full
    details:
      - The configuration file and unit before and after, secrets shown as C((secret)); what differs live.
  platform:
    platforms: posix
requirements:
  - C(wg) from wireguard-tools, C(ip) from iproute2, systemd, and C(wireguard-go) for O(implementation=go).
author:
  - longhaul.trainnet maintainers (@longhaul)
'''

EXAMPLES = r'''
- name: A point-to-point tunnel to one peer, verified through the tunnel and rolled back if it fails
  longhaul.trainnet.wireguard_interface:
    name: wg-usw
    config_dir: /etc/trainnet/wireguard
    private_key_file: /etc/trainnet/wireguard/private.key
    listen_port: 51822
    addresses: [10.255.1.2 peer 10.255.2.1]
    mtu: 1340
    peers:
      - public_key: Tt5uQ7S0vXbYkWmRl1Gd8mJqKq3b0r9E1a6bXcY2Z1A=
        comment: usw-anchor
        endpoint: 198.18.1.2:51821
        allowed_ips: [0.0.0.0/0]
        keepalive: 5
        preshared_key: "{{ vault_control_plane_preshared_key }}"
    implementation: go
    verify: [10.255.2.1]

- name: Remove a tunnel whose peer left the inventory
  longhaul.trainnet.wireguard_interface:
    name: wg-old
    config_dir: /etc/trainnet/wireguard
    state: absent
'''

RETURN = r'''
unit:
  description: The interface's systemd unit.
  returned: always
  type: str
  sample: trainnet-wg-wg-usw.service
created:
  description: Whether the interface was (or would be) started from nothing.
  returned: always
  type: bool
  sample: false
changes:
  description: What differs (or differed) between the live interface and its files and the wanted ones; keys
    are named, never shown.
  returned: always
  type: list
  elements: str
  sample: [peer Tt5uQ7S0vXbYkWmRl1Gd8mJqKq3b0r9E1a6bXcY2Z1A= added, mtu 1420 -> 1340]
verified:
  description: The O(verify) addresses that answered after the change (empty when nothing was verified).
  returned: always
  type: list
  elements: str
  sample: [10.255.2.1]
rolled_back:
  description: Whether a failed verify put the previous state back.
  returned: always
  type: bool
  sample: false
'''

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import run_bounded
from ansible_collections.longhaul.trainnet.plugins.module_utils.errors import describe_os_error
from ansible_collections.longhaul.trainnet.plugins.module_utils.textfile import write_atomic
from ansible_collections.longhaul.trainnet.plugins.module_utils.wireguard import (
    AWAIT_PEER_HANDSHAKE, IP, WG, WireGuardInputError, address_argv, awaits_peer, address_key, check_input, config_differences, live_addresses,
    describe_peers, parse_config, peer_handshakes, ping_argv, redact, render_config, render_unit, reset_peers, without_private_key)

LIMIT = 30      # seconds for one wg, ip or systemctl call
# Seconds a failed verify keeps the new state before putting the previous one back. The peers verify
# at the same time, each towards this end: an echo reply leaves through this end's tunnel, and once
# it has its old (smaller) MTU again the reply is fragmented and still arrives, so a peer still
# verifying would take the MTU its path does not carry for one it does. Peers start their verify
# within a second or two of each other; the hold lets theirs end first.
ROLLBACK_HOLD = 5
UNIT_DIR = '/etc/systemd/system'
SYS_NET = '/sys/class/net'


class Interface(object):
    def __init__(self, module):
        self.module = module
        params = module.params
        self.name = params['name']
        self.unit = 'trainnet-wg-%s.service' % self.name
        self.unit_path = os.path.join(UNIT_DIR, self.unit)
        self.config_path = os.path.join(params['config_dir'], '%s.conf' % self.name)
        self.result = dict(changed=False, unit=self.unit, created=False, changes=[], verified=[], rolled_back=False)

    def fail(self, msg):
        self.module.fail_json(msg=msg, **self.result)

    def run(self, argv, data=None, check=True):
        done = run_bounded(argv, LIMIT, data=data)
        if check and done.rc != 0:
            self.fail('%s failed (rc %s): %s' % (' '.join(argv[:4]), done.rc, (done.err or done.out).strip()[-400:]))
        return done

    @staticmethod
    def read(path):
        if not os.path.exists(path):
            return None
        with open(path) as handle:
            return handle.read()

    # --- the live interface -------------------------------------------------------------------
    def exists(self):
        return os.path.exists(os.path.join(SYS_NET, self.name))

    def live(self):
        """(wg showconf text with its secrets, addresses, mtu): held in memory for the comparison and a
        rollback, never returned."""
        shown = self.run([WG, 'showconf', self.name])
        addrs = self.run([IP, '-j', 'address', 'show', 'dev', self.name])
        with open(os.path.join(SYS_NET, self.name, 'mtu')) as handle:
            mtu = int(handle.read().strip())
        return shown.out, live_addresses(json.loads(addrs.out or '[]')), mtu

    def apply_live(self, config_text, addresses, mtu):
        """What differs, in place: peers and keys (wg syncconf from stdin), addresses, MTU."""
        for public_key in reset_peers(parse_config(config_text), parse_config(self.live()[0])):
            self.run([WG, 'set', self.name, 'peer', public_key, 'remove'])
        self.run([WG, 'syncconf', self.name, '/dev/stdin'], data=config_text)
        wanted = set(address_key(a) for a in addresses)
        for address in addresses:
            self.run(address_argv(address, self.name))
        for address in self.live()[1]:
            if address not in wanted:
                self.run([IP, 'address', 'del'] + address.split() + ['dev', self.name])
        self.run([IP, 'link', 'set', 'dev', self.name, 'mtu', str(mtu), 'up'])

    def systemctl(self, *args, **kwargs):
        return self.run(['systemctl'] + list(args), check=kwargs.get('check', True))

    def wait_for_interface(self, seconds=20):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.exists() and self.run([WG, 'show', self.name], check=False).rc == 0:
                return True
            time.sleep(0.1)
        return False

    def unanswered(self, targets, mtu, timeout):
        """The targets that did not answer a full-size DF ping through the interface within `timeout`.
        With verify_together, a target whose peer starts the first handshake (awaits_peer) is pinged once
        that handshake is there, or after AWAIT_PEER_HANDSHAKE at the latest."""
        start = time.time()
        deadline, await_until = start + timeout, start + min(AWAIT_PEER_HANDSHAKE, timeout)
        awaited = set()
        if self.module.params['verify_together']:
            own = live_addresses(json.loads(self.run([IP, '-j', 'address', 'show', 'dev', self.name], check=False).out or '[]'))
            awaited = set(t for t in targets if awaits_peer(own, t))
            allowed = self.run([WG, 'show', self.name, 'allowed-ips'], check=False).out if awaited else ''
        left = list(targets)
        while left:
            if awaited and time.time() < await_until:
                awaited -= set(peer_handshakes(allowed, self.run([WG, 'show', self.name, 'latest-handshakes'],
                                                                 check=False).out, awaited))
            else:
                awaited = set()
            left = [t for t in left if t in awaited or run_bounded(ping_argv(t, self.name, mtu), 5).rc != 0]
            if not left or time.time() >= deadline:
                break
            time.sleep(0.05 if awaited else 0.2)
        return left

    # --- the files -------------------------------------------------------------------------------
    def write_files(self, config_text, unit_text):
        directory = os.path.dirname(self.config_path)
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o700)
        if config_text is None:
            for path in (self.config_path, self.unit_path):
                if os.path.exists(path):
                    os.unlink(path)
        else:
            write_atomic(self.config_path, config_text, 0o600)
            write_atomic(self.unit_path, unit_text, 0o644)
        self.systemctl('daemon-reload')

    # --- state=absent ----------------------------------------------------------------------------
    def absent(self):
        have = (self.read(self.unit_path) is not None or self.read(self.config_path) is not None or self.exists()
                or os.path.exists(self.pending_path))
        if not have:
            return self.result
        self.result['changed'] = True
        self.result['changes'] = ['interface removed']
        if self.module._diff:
            self.result['diff'] = dict(before=redact(self.read(self.config_path) or ''), after='',
                                       before_header=self.config_path, after_header=self.config_path)
        if self.module.check_mode:
            return self.result
        self.systemctl('disable', '--now', self.unit, check=False)
        if self.exists():
            self.run([IP, 'link', 'delete', self.name])
        self.write_files(None, None)
        self.forget_pending()
        return self.result

    # --- state=present ---------------------------------------------------------------------------
    def private_key(self):
        """The private key, read on the host. In check mode a key file an earlier task of the run would
        make reads as absent (None)."""
        path = self.module.params['private_key_file']
        if not path:
            self.fail('private_key_file is required with state=present')
        if self.module.check_mode and not os.path.exists(path):
            return None
        try:
            with open(path) as handle:
                return handle.read().strip()
        except (IOError, OSError) as exc:
            self.fail('cannot read the key file %s: %s' % (path, describe_os_error(exc)))

    def present(self):
        params = self.module.params
        peers = params['peers']
        config_text = render_config(params['listen_port'], peers)
        unit_text = render_unit(self.name, self.config_path, params['implementation'], params['addresses'],
                                params['mtu'], params['private_key_file'], params['description'],
                                params['unit_after'], params['unit_before'])
        full_text = render_config(params['listen_port'], peers, self.private_key())
        old_config, old_unit = self.read(self.config_path), self.read(self.unit_path)
        existed = self.exists()
        previous = self.live() if existed else None
        changes = []
        if old_config != config_text:
            changes.append('configuration file %s' % ('created' if old_config is None else 'changed'))
        if old_unit != unit_text:
            changes.append('unit %s' % ('created' if old_unit is None else 'changed'))
        live_changes = []
        if previous is None:
            live_changes.append('interface created')
        else:
            live_changes += config_differences(parse_config(full_text), parse_config(previous[0]))
            wanted_addresses = sorted(address_key(a) for a in params['addresses'])
            if wanted_addresses != previous[1]:
                live_changes.append('addresses %s -> %s' % (', '.join(previous[1]) or 'none',
                                                            ', '.join(wanted_addresses) or 'none'))
            if previous[2] != params['mtu']:
                live_changes.append('mtu %d -> %d' % (previous[2], params['mtu']))
        enabled = self.systemctl('is-enabled', self.unit, check=False).out.strip() == 'enabled'
        if not enabled:
            changes.append('unit enabled')
        self.result.update(changed=bool(changes or live_changes), created=previous is None,
                           changes=live_changes + changes)
        if os.path.exists(self.pending_path):
            # Nothing for this call to change, but a state=verified call has something to verify.
            self.result['changes'].append('a change of an earlier run is not verified yet')
        if self.module._diff and self.result['changed']:
            self.result['diff'] = [
                dict(before_header=self.config_path, after_header=self.config_path,
                     before=redact(old_config or ''), after=redact(config_text)),
                dict(before_header=self.unit_path, after_header=self.unit_path, before=old_unit or '', after=unit_text),
                dict(before_header='%s (live)' % self.name, after_header='%s (live)' % self.name,
                     before='', after=''.join('%s\n' % c for c in live_changes))]
        if self.module.check_mode or not self.result['changed']:
            return self.result

        if old_config != config_text or old_unit != unit_text:
            self.write_files(config_text, unit_text)
        if not enabled:
            self.systemctl('enable', self.unit)
        before = dict(config=old_config, unit=old_unit, changes=live_changes, private_key_file=params['private_key_file'],
                      live=None if previous is None else dict(shown=without_private_key(previous[0]),
                                                              addresses=previous[1], mtu=previous[2]))
        if previous is None:
            # A unit left active by an earlier start (its interface since deleted) must run again.
            self.systemctl('restart', self.unit)
            if not self.wait_for_interface():
                self.rollback(before, 'the interface did not come up from its unit')
        elif live_changes:
            self.apply_live(full_text, params['addresses'], params['mtu'])
        if params['verify']:
            # Verified now: an unverified change of an earlier call is verified with this one.
            pending = self.load_pending()
            if live_changes or pending:
                self.verify_or_roll_back(pending or before, params['mtu'])
        elif live_changes and not self.load_pending():
            # Verified by a later call with state=verified (once every end has changed); the oldest
            # unverified state is the one to go back to.
            write_atomic(self.pending_path, json.dumps(before), 0o600)
        return self.result

    # --- verify and roll back --------------------------------------------------------------------
    @property
    def pending_path(self):
        return os.path.join(self.module.params['config_dir'], '.%s.unverified.json' % self.name)

    def forget_pending(self):
        if os.path.exists(self.pending_path):
            os.unlink(self.pending_path)

    def load_pending(self):
        text = self.read(self.pending_path)
        return json.loads(text) if text else None

    def verified(self):
        """state=verified: the change an earlier call made (and recorded as unverified) is verified now,
        or rolled back."""
        pending = self.load_pending()
        if pending is None:
            return self.result
        self.result['changes'] = ['unverified: %s' % '; '.join(pending.get('changes') or ['a change'])]
        if self.module.check_mode or not self.module.params['verify']:
            # No address to ask (a run limited to this end): the change stays unverified, and the state
            # to go back to stays the one before it, until a run with its peers verifies it.
            return self.result
        with open(os.path.join(SYS_NET, self.name, 'mtu')) as handle:
            mtu = int(handle.read().strip())
        self.verify_or_roll_back(pending, mtu)
        return self.result

    def verify_or_roll_back(self, before, mtu):
        params = self.module.params
        missing = self.unanswered(params['verify'], mtu, params['verify_timeout'])
        self.result['verified'] = [t for t in params['verify'] if t not in missing]
        if not missing:
            self.forget_pending()
            return
        diagnosis = self.diagnose(missing[0])
        time.sleep(min(ROLLBACK_HOLD, params['verify_timeout']))
        self.rollback(before, 'no answer from %s through %s within %d s with %d-byte packets (DF) (%s) after: %s'
                      % (', '.join(missing), self.name, params['verify_timeout'], mtu, diagnosis,
                         '; '.join(before.get('changes') or ['a change'])))

    def diagnose(self, target):
        """What the peers' handshakes and counters, and one small ping, say about an unanswered verify."""
        handshakes = self.run([WG, 'show', self.name, 'latest-handshakes'], check=False)
        transfer = self.run([WG, 'show', self.name, 'transfer'], check=False)
        small = run_bounded(ping_argv(target, self.name, 84), 5).rc == 0
        return describe_peers(handshakes.out, transfer.out, time.time(), small)

    def rollback(self, before, why):
        """Put the files and the live interface back as they were before the change (the private key
        stays the one of its file), check the previous state answers, and fail saying so."""
        params = self.module.params
        self.result['rolled_back'] = True
        if before['config'] is None or before['unit'] is None:
            self.write_files(None, None)
        else:
            self.write_files(before['config'], before['unit'])
        self.forget_pending()
        if before['live'] is None:
            self.systemctl('disable', '--now', self.unit, check=False)
            if self.exists():
                self.run([IP, 'link', 'delete', self.name], check=False)
            self.fail('%s: %s; the interface was removed again (it did not exist before)' % (self.name, why))
        live = before['live']
        # `wg syncconf` without a PrivateKey line would clear the key: the one of its file goes in.
        with open(before['private_key_file']) as handle:
            private_key = handle.read().strip()
        shown = live['shown'].replace('[Interface]\n', '[Interface]\nPrivateKey = %s\n' % private_key, 1)
        self.apply_live(shown, live['addresses'], live['mtu'])
        still = self.unanswered(params['verify'], live['mtu'], params['verify_timeout'])
        self.fail('%s: %s; the previous configuration was put back and %s' % (
            self.name, why, 'every address answers again' if not still
            else 'does not reach %s either' % ', '.join(still)))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type='str', required=True),
            state=dict(type='str', choices=['present', 'absent', 'verified'], default='present'),
            config_dir=dict(type='path', required=True),
            private_key_file=dict(type='path'),
            listen_port=dict(type='int', default=0),
            addresses=dict(type='list', elements='str', default=[]),
            mtu=dict(type='int', default=1420),
            peers=dict(type='list', elements='dict', default=[], options=dict(
                public_key=dict(type='str', required=True, no_log=False),
                comment=dict(type='str', default=''),
                endpoint=dict(type='str', default=''),
                allowed_ips=dict(type='list', elements='str', default=[]),
                keepalive=dict(type='int', default=0),
                preshared_key=dict(type='str', default='', no_log=True),
            )),
            implementation=dict(type='str', choices=['kernel', 'go'], default='kernel'),
            description=dict(type='str', default=''),
            unit_after=dict(type='list', elements='str', default=[]),
            unit_before=dict(type='list', elements='str', default=[]),
            verify=dict(type='list', elements='str', default=[]),
            verify_timeout=dict(type='int', default=30),
            verify_together=dict(type='bool', default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    interface = Interface(module)
    problems = check_input(params['name'], params['listen_port'], params['addresses'], params['mtu'],
                           params['peers'], params['implementation'], params['verify'])
    if not 1 <= params['verify_timeout'] <= 600:
        problems.append('verify_timeout %d must be 1-600' % params['verify_timeout'])
    if problems:
        interface.fail(str(WireGuardInputError(problems)))
    try:
        result = dict(present=interface.present, absent=interface.absent, verified=interface.verified)[params['state']]()
    except (IOError, OSError) as exc:
        interface.fail('%s: %s' % (params['name'], describe_os_error(exc)))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
