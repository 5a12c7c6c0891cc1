# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""wireguard_interface against a fake host (its wg, ip, systemctl and ping answer from one state; files in
tmp): check mode predicts and runs nothing that changes, a change is applied in place with the private key
only on stdin, apply-then-verify rolls a black-holed MTU back (files and live), a changed pre-shared key
re-adds its peer, absent removes everything."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re
import stat
import time

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import CommandResult
from ansible_collections.longhaul.trainnet.plugins.module_utils.wireguard import parse_config
from ansible_collections.longhaul.trainnet.plugins.modules import wireguard_interface
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    mock, module_patches, patch_module_args, run_main,
)

PRIVATE = 'mF7c0cX8Yq5kWf6m2sDqfJk2Q4rZbq0sT1bq2b3c4d0='
PEER_KEY = 'yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk='
PSK_A = 'YWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWE='
PSK_B = 'YmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmJiYmI='


class FakeHost(object):
    """The live side of one interface: what `wg showconf`, `ip -j address` and sysfs report."""

    def __init__(self, root, largest=9000):
        self.root = root
        self.largest = largest          # the biggest tunnel MTU the path carries
        self.config = None              # wg's view (parsed), None: no interface
        self.addresses = []
        self.calls = []                 # (argv, stdin)
        self.enabled = False
        self.handshake_reads = 0        # `wg show latest-handshakes` reads that found no handshake yet
        self.shaken_after = 0           # reads before the peer's first handshake is there (None: never)

    @property
    def sysfs(self):
        return os.path.join(self.root, 'sys', 'wgt0')

    def set_mtu(self, mtu):
        os.makedirs(self.sysfs, exist_ok=True)
        with open(os.path.join(self.sysfs, 'mtu'), 'w') as handle:
            handle.write('%d\n' % mtu)

    def remove(self):
        self.config = None
        if os.path.exists(self.sysfs):
            os.unlink(os.path.join(self.sysfs, 'mtu'))
            os.rmdir(self.sysfs)

    def mtu(self):
        with open(os.path.join(self.sysfs, 'mtu')) as handle:
            return int(handle.read())

    def showconf(self):
        lines = ['[Interface]', 'PrivateKey = %s' % self.config['interface'].get('privatekey', '')]
        if self.config['interface'].get('listenport'):
            lines.append('ListenPort = %s' % self.config['interface']['listenport'])
        for key, peer in self.config['peers'].items():
            lines += ['', '[Peer]', 'PublicKey = %s' % key]
            if peer.get('presharedkey'):
                lines.append('PresharedKey = %s' % peer['presharedkey'])
            lines.append('AllowedIPs = %s' % ', '.join(peer['allowedips']))
            if peer.get('endpoint'):
                lines.append('Endpoint = %s' % peer['endpoint'])
            if peer.get('persistentkeepalive'):
                lines.append('PersistentKeepalive = %s' % peer['persistentkeepalive'])
        return '\n'.join(lines) + '\n'

    def run(self, argv, limit=None, data=None, **kwargs):
        self.calls.append((list(argv), data))
        tool, args = os.path.basename(argv[0]), argv[1:]
        if tool == 'wg' and args[0] == 'showconf':
            return CommandResult(0, self.showconf(), '')
        if tool == 'wg' and args[0] == 'show' and args[2:] == ['latest-handshakes']:   # a peer that answered once
            shaken = self.shaken_after is not None and self.handshake_reads >= self.shaken_after
            self.handshake_reads += 0 if shaken else 1
            return CommandResult(0, ''.join('%s\t%d\n' % (key, int(time.time()) - 30 if shaken else 0)
                                            for key in self.config['peers']), '')
        if tool == 'wg' and args[0] == 'show' and args[2:] == ['allowed-ips']:
            return CommandResult(0, ''.join('%s\t%s\n' % (key, ' '.join(peer['allowedips']))
                                            for key, peer in self.config['peers'].items()), '')
        if tool == 'wg' and args[0] == 'show' and args[2:] == ['transfer']:
            return CommandResult(0, ''.join('%s\t3000\t5000\n' % key for key in self.config['peers']), '')
        if tool == 'wg' and args[0] == 'show':
            return CommandResult(0 if self.config is not None else 1, '', '')
        if tool == 'wg' and args[0] == 'syncconf':
            wanted = parse_config(data)
            if 'privatekey' not in wanted['interface']:
                wanted['interface']['privatekey'] = ''       # as wg does: no key line, no key
            self.config = wanted
            return CommandResult(0, '', '')
        if tool == 'wg' and args[0] == 'set' and args[-1] == 'remove':
            self.config['peers'].pop(args[3])
            return CommandResult(0, '', '')
        if tool == 'ip' and args[:2] == ['-j', 'address']:
            return CommandResult(0, json.dumps([{'addr_info': [
                {'family': 'inet', 'local': a.partition('/')[0], 'prefixlen': int(a.partition('/')[2]), 'scope': 'global'}
                for a in self.addresses]}]), '')
        if tool == 'ip' and args[:2] == ['address', 'replace']:
            if args[2] not in self.addresses:
                self.addresses.append(args[2])
            return CommandResult(0, '', '')
        if tool == 'ip' and args[:2] == ['address', 'del']:
            self.addresses.remove(args[2])
            return CommandResult(0, '', '')
        if tool == 'ip' and args[:2] == ['link', 'set']:
            self.set_mtu(int(args[args.index('mtu') + 1]))
            return CommandResult(0, '', '')
        if tool == 'ip' and args[:2] == ['link', 'delete']:
            self.remove()
            return CommandResult(0, '', '')
        if tool == 'systemctl':
            if args[0] == 'is-enabled':
                return CommandResult(0 if self.enabled else 1, 'enabled\n' if self.enabled else 'disabled\n', '')
            if args[0] == 'enable':
                self.enabled = True
            if args[:2] == ['disable', '--now']:   # ExecStopPost deletes the interface
                self.enabled = False
                self.remove()
            if args[0] == 'restart':   # the unit: wg setconf from the file, the key from its file
                with open(os.path.join(self.root, 'etc', 'wgt0.conf')) as handle:
                    self.config = parse_config(handle.read())
                self.config['interface']['privatekey'] = PRIVATE
                self.addresses = ['10.9.0.1/24']
                self.set_mtu(1420)
            return CommandResult(0, '', '')
        if tool == 'ping':
            size = int(args[args.index('-s') + 1]) + 28
            return CommandResult(0 if self.config is not None and size <= self.largest else 1, '', '')
        raise AssertionError('unexpected command %s' % argv)


@pytest.fixture(name='host')
def fixture_host(tmp_path):
    etc = tmp_path / 'etc'
    etc.mkdir(mode=0o700)
    (etc / 'private.key').write_text(PRIVATE + '\n')
    (tmp_path / 'units').mkdir()
    fake = FakeHost(str(tmp_path))
    with mock.patch.object(wireguard_interface, 'run_bounded', fake.run), \
            mock.patch.object(wireguard_interface, 'SYS_NET', str(tmp_path / 'sys')), \
            mock.patch.object(wireguard_interface, 'UNIT_DIR', str(tmp_path / 'units')), \
            mock.patch.object(wireguard_interface, 'ROLLBACK_HOLD', 0):
        yield fake


def call(host, check=False, diff=False, **args):
    params = dict(name='wgt0', config_dir=os.path.join(host.root, 'etc'),
                  private_key_file=os.path.join(host.root, 'etc', 'private.key'), listen_port=51820,
                  addresses=['10.9.0.1/24'], mtu=1420, implementation='go',
                  peers=[{'public_key': PEER_KEY, 'comment': 'peer-a', 'endpoint': '192.0.2.2:51820',
                          'allowed_ips': ['10.9.0.2/32'], 'keepalive': 25}])
    params.update(args)
    if check:
        params['_ansible_check_mode'] = True
    if diff:
        params['_ansible_diff'] = True
    with patch_module_args(params), module_patches():
        return run_main(wireguard_interface.main)


def changing_calls(host):
    return [argv for argv, data in host.calls
            if not (argv[1:2] in (['showconf'], ['show'], ['-j']) or argv[:2] == ['systemctl', 'is-enabled'])]


def test_check_mode_predicts_a_new_interface_and_changes_nothing(host):
    result = call(host, check=True, diff=True)
    assert result['changed'] is True and result['created'] is True
    assert result['changes'] == ['interface created', 'configuration file created', 'unit created', 'unit enabled']
    assert changing_calls(host) == [] and not os.path.exists(os.path.join(host.root, 'etc', 'wgt0.conf'))
    assert PRIVATE not in json.dumps(result)


def test_created_from_its_unit_then_nothing_to_do(host):
    result = call(host)
    assert result['changed'] is True and result['created'] is True and not result.get('failed')
    conf = os.path.join(host.root, 'etc', 'wgt0.conf')
    assert stat.S_IMODE(os.stat(conf).st_mode) == 0o600
    with open(conf) as handle:
        text = handle.read()
    assert PRIVATE not in text and '# peer-a\nPublicKey = %s\n' % PEER_KEY in text
    assert ['systemctl', 'restart', 'trainnet-wg-wgt0.service'] in changing_calls(host)
    again = call(host)
    # applied without verify: recorded for a state=verified call, which finds the peer answering
    assert again['changed'] is False and again['changes'] == ['a change of an earlier run is not verified yet']
    verified = call(host, state='verified', verify=['10.9.0.2'])
    assert verified['changed'] is False and verified['verified'] == ['10.9.0.2'] and not verified.get('failed')
    assert call(host)['changes'] == []


def verified(host, **args):
    return call(host, state='verified', verify=['10.9.0.2'], **args)


def test_a_new_mtu_is_applied_in_place_with_the_key_only_on_stdin(host):
    call(host, verify=['10.9.0.2'])
    host.calls = []
    result = call(host, mtu=1380, peers=[{'public_key': PEER_KEY, 'comment': 'peer-a', 'endpoint': '192.0.2.2:51820',
                                          'allowed_ips': ['10.9.0.2/32'], 'keepalive': 17}])
    assert result['changed'] is True and result['created'] is False
    assert result['changes'][:2] == ['peer %s keepalive 25 -> 17' % PEER_KEY, 'mtu 1420 -> 1380']
    assert host.mtu() == 1380 and host.config['peers'][PEER_KEY]['persistentkeepalive'] == '17'
    argvs = changing_calls(host)
    assert not any(argv[:2] == ['systemctl', 'restart'] for argv in argvs)      # in place
    assert not any(PRIVATE in ' '.join(argv) for argv in argvs)
    assert [data for argv, data in host.calls if 'syncconf' in argv][0].count(PRIVATE) == 1


def test_apply_then_verify_rolls_a_black_holed_mtu_back(host):
    call(host)
    verified(host)
    host.largest = 1430
    applied = call(host, mtu=1440)
    assert applied['changed'] is True and host.mtu() == 1440
    assert os.path.exists(os.path.join(host.root, 'etc', '.wgt0.unverified.json'))
    # no address to ask (a run limited to this end): still unverified, nothing rolled back
    unasked = call(host, state='verified', verify=[])
    assert unasked['changes'] == ['unverified: mtu 1420 -> 1440'] and host.mtu() == 1440
    failed = call(host, state='verified', verify=['10.9.0.2'], verify_timeout=1)
    assert failed['failed'] is True and failed['rolled_back'] is True
    # the handshake and the small ping tell a path too small from a peer that never answered
    assert re.fullmatch(re.escape('wgt0: no answer from 10.9.0.2 through wgt0 within 1 s with 1440-byte packets (DF) '
                                  '(peer %s...: last handshake ' % PEER_KEY[:8]) + r'(30|31)' + re.escape(
        " s ago (sent 4.9 KiB, received 2.9 KiB); small pings answer: the path does not carry the tunnel's full-size "
        'packets) after: mtu 1420 -> 1440; the previous configuration was put back and every address answers again'),
        failed['msg']), failed['msg']
    assert host.mtu() == 1420 and host.config['interface']['privatekey'] == PRIVATE
    with open(os.path.join(host.root, 'units', 'trainnet-wg-wgt0.service')) as handle:
        assert 'mtu 1420 up' in handle.read()
    assert not os.path.exists(os.path.join(host.root, 'etc', '.wgt0.unverified.json'))
    assert call(host, state='verified', verify=['10.9.0.2'])['changed'] is False     # nothing left to verify


def test_a_changed_preshared_key_re_adds_its_peer_and_is_never_shown(host):
    peer = {'public_key': PEER_KEY, 'comment': 'peer-a', 'endpoint': '192.0.2.2:51820', 'allowed_ips': ['10.9.0.2/32'],
            'keepalive': 25, 'preshared_key': PSK_A}
    call(host, peers=[peer], verify=['10.9.0.2'])
    host.calls = []
    result = call(host, diff=True, peers=[dict(peer, preshared_key=PSK_B)], verify=['10.9.0.2'])
    assert result['changes'][0] == 'peer %s pre-shared key' % PEER_KEY
    assert ['/usr/bin/wg', 'set', 'wgt0', 'peer', PEER_KEY, 'remove'] in changing_calls(host)
    assert host.config['peers'][PEER_KEY]['presharedkey'] == PSK_B
    shown = json.dumps(result)
    assert PSK_A not in shown and PSK_B not in shown and PRIVATE not in shown


def test_bad_input_is_refused_before_anything_runs(host):
    result = call(host, mtu=500, addresses=['10.9.0.1 via 10.9.0.2'])
    assert result['failed'] is True and host.calls == []
    assert "mtu 500 must be 576-9000" in result['msg'] and "'LOCAL peer REMOTE'" in result['msg']


def test_absent_removes_the_interface_its_files_and_its_record(host):
    call(host)
    result = call(host, state='absent')
    assert result['changed'] is True and host.config is None
    assert not os.path.exists(os.path.join(host.root, 'etc', 'wgt0.conf'))
    assert not os.path.exists(os.path.join(host.root, 'units', 'trainnet-wg-wgt0.service'))
    assert call(host, state='absent')['changed'] is False


def pings_and_reads(host):
    return [('ping' if argv[0] == 'ping' else 'handshakes') for argv, _data in host.calls
            if argv[0] == 'ping' or argv[-1] == 'latest-handshakes']


def test_verifying_together_the_higher_address_lets_the_peer_start_the_first_handshake(host):
    # this end 10.9.0.3, its peer 10.9.0.2 verifying at the same time: the peer initiates
    call(host, addresses=['10.9.0.3/24'])
    host.shaken_after = 3
    host.calls = []
    done = call(host, addresses=['10.9.0.3/24'], mtu=1380, verify=['10.9.0.2'], verify_together=True)
    assert done['verified'] == ['10.9.0.2'], done
    assert pings_and_reads(host) == ['handshakes'] * 4 + ['ping']      # no ping before the peer's handshake
    # the lower address pings at once
    host.shaken_after, host.handshake_reads, host.calls = None, 0, []
    done = call(host, mtu=1370, verify=['10.9.0.2'], verify_together=True)
    assert done['verified'] == ['10.9.0.2'] and pings_and_reads(host) == ['ping'], pings_and_reads(host)


def test_a_first_handshake_that_never_comes_is_started_here_after_the_wait(host):
    call(host, addresses=['10.9.0.3/24'])
    host.shaken_after, host.calls = None, []                # the peer is not verifying: nothing arrives
    with mock.patch.object(wireguard_interface, 'AWAIT_PEER_HANDSHAKE', 0.3):
        started = time.time()
        done = call(host, addresses=['10.9.0.3/24'], mtu=1380, verify=['10.9.0.2'], verify_together=True)
    assert done['verified'] == ['10.9.0.2'] and 0.3 <= time.time() - started < 5
    assert pings_and_reads(host)[-1] == 'ping' and pings_and_reads(host).count('ping') == 1
