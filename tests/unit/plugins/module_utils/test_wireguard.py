# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/wireguard.py: the input checks, the configuration file (no secret), the comparison
with `wg showconf` (secrets compared, never shown), the unit (arguments quoted for systemd), the
addresses as `ip -j address` reports them, and the DF ping."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible_collections.longhaul.trainnet.plugins.module_utils import wireguard as wg
from ansible_collections.longhaul.trainnet.tests.unit.plugins.module_utils.test_config_value import (
    INJECTED_KEY, REAL_KEYS, systemd_words,
)

PRIVATE = 'mF7c0cX8Yq5kWf6m2sDqfJk2Q4rZbq0sT1bq2b3c4d0='
PSK = 'q1w2e3r4t5y6u7i8o9p0a1s2d3f4g5h6j7k8l9z0x1c='
PEER = {'public_key': REAL_KEYS[0], 'comment': 'usw-anchor', 'endpoint': '198.18.1.2:51821',
        'allowed_ips': ['0.0.0.0/0'], 'keepalive': 5, 'preshared_key': PSK}
OTHER = {'public_key': REAL_KEYS[1], 'comment': 'use-anchor', 'endpoint': '', 'allowed_ips': ['10.1.0.0/16', '10.2.0.1/32'],
         'keepalive': 0, 'preshared_key': ''}

# `wg showconf` of the interface as the file above would make it (the secrets included, as wg prints them)
SHOWN = """[Interface]
ListenPort = 51822
PrivateKey = %s

[Peer]
PublicKey = %s
PresharedKey = %s
AllowedIPs = 0.0.0.0/0
Endpoint = 198.18.1.2:51821
PersistentKeepalive = 5

[Peer]
PublicKey = %s
AllowedIPs = 10.2.0.1/32, 10.1.0.0/16
Endpoint = 203.0.113.9:40000
""" % (PRIVATE, REAL_KEYS[0], PSK, REAL_KEYS[1])


def check(**changes):
    args = dict(name='wg-usw', listen_port=51822, addresses=['10.255.1.2 peer 10.255.2.1'], mtu=1340,
                peers=[PEER, OTHER], implementation='go', verify=['10.255.2.1'])
    args.update(changes)
    return wg.check_input(**args)


def test_good_input_has_no_problem():
    assert check() == []


def test_each_bad_input_is_named():
    assert check(name='wg-usw\nExecStart=/bin/sh') == [
        "name 'wg-usw\nExecStart=/bin/sh' must be an interface name (1-15 of A-Z a-z 0-9 . _ -)"]
    assert check(mtu=500) == ['mtu 500 must be 576-9000']
    assert check(listen_port=70000) == ['listen_port 70000 must be 0-65535']
    assert check(addresses=['10.0.0.1 via 10.0.0.2']) == [
        "address '10.0.0.1 via 10.0.0.2' must be ADDRESS/PREFIX or 'LOCAL peer REMOTE'"]
    assert check(addresses=['10.0.0.300/32']) == ["address '10.0.0.300/32': '10.0.0.300/32' is not an IP address"]
    assert check(verify=['wg-usw']) == ["verify target 'wg-usw' is not an IP address"]
    assert check(peers=[PEER, dict(PEER, comment='again')]) == ['again: public_key is given twice']


def test_a_key_with_lines_of_its_own_is_refused():
    problems = check(peers=[dict(PEER, public_key=INJECTED_KEY)])
    assert problems == ['usw-anchor: public_key must be a WireGuard key (44 base64 characters ending in =)']
    assert check(peers=[dict(PEER, endpoint='198.18.1.2:51821\n[Peer]')]) == [
        'usw-anchor: comment, endpoint and pre-shared key must be one line',
        "usw-anchor: endpoint '198.18.1.2:51821\n[Peer]' must be HOST:PORT or [IPv6]:PORT"]
    problems = check(peers=[dict(PEER, preshared_key=INJECTED_KEY)])
    assert problems == ['usw-anchor: comment, endpoint and pre-shared key must be one line',
                        'usw-anchor: preshared_key must be a WireGuard key (44 base64 characters ending in =; not shown)']


def test_the_file_holds_no_private_key_and_the_piped_text_does():
    on_disk = wg.render_config(51822, [PEER, OTHER])
    assert PRIVATE not in on_disk and 'PrivateKey' not in on_disk
    assert on_disk.startswith('[Interface]\nListenPort = 51822\n\n[Peer]\n# usw-anchor\nPublicKey = ')
    assert 'AllowedIPs = 10.1.0.0/16, 10.2.0.1/32\n' in on_disk and on_disk.count('PersistentKeepalive') == 1
    assert on_disk.count('PresharedKey = %s\n' % PSK) == 1     # only the peer that has one
    piped = wg.render_config(51822, [PEER, OTHER], PRIVATE)
    assert piped == on_disk.replace('[Interface]\n', '[Interface]\nPrivateKey = %s\n' % PRIVATE)


def test_the_live_interface_that_matches_has_no_difference():
    wanted = wg.parse_config(wg.render_config(51822, [PEER, OTHER], PRIVATE))
    # the second peer roamed (an endpoint the file does not name): not a difference
    assert wg.config_differences(wanted, wg.parse_config(SHOWN)) == []
    assert wg.reset_peers(wanted, wg.parse_config(SHOWN)) == []


def test_differences_name_what_changed_and_never_a_secret():
    wanted = wg.parse_config(wg.render_config(51823, [dict(PEER, keepalive=7, allowed_ips=['10.0.0.0/8'],
                                                           preshared_key='B' * 43 + '=')], 'A' * 43 + '='))
    diff = wg.config_differences(wanted, wg.parse_config(SHOWN))
    # a new pre-shared key is proven by a new handshake, not left to the next rekey
    assert wg.reset_peers(wanted, wg.parse_config(SHOWN)) == [REAL_KEYS[0]]
    assert diff == ['private key', 'listen port 51822 -> 51823', 'peer %s removed' % REAL_KEYS[1],
                    'peer %s allowed IPs 0.0.0.0/0 -> 10.0.0.0/8' % REAL_KEYS[0],
                    'peer %s pre-shared key' % REAL_KEYS[0], 'peer %s keepalive 5 -> 7' % REAL_KEYS[0]]
    assert not any(secret in ' '.join(diff) for secret in (PRIVATE, PSK, 'A' * 43, 'B' * 43))


def test_a_missing_endpoint_and_a_new_peer_are_differences():
    live = wg.parse_config(SHOWN.replace('Endpoint = 198.18.1.2:51821\n', ''))
    wanted = wg.parse_config(wg.render_config(51822, [PEER, OTHER, dict(OTHER, public_key=REAL_KEYS[2])], PRIVATE))
    assert wg.config_differences(wanted, live) == ['peer %s added' % REAL_KEYS[2],     # in key order
                                                   'peer %s endpoint 198.18.1.2:51821' % REAL_KEYS[0]]


def test_redact_hides_both_kinds_of_secret():
    shown = wg.redact(SHOWN)
    assert PRIVATE not in shown and PSK not in shown
    assert 'PrivateKey = (secret)' in shown and 'PresharedKey = (secret)' in shown


def test_addresses_compare_in_the_form_ip_reports_them():
    report = json.loads('[{"ifname": "wg-usw", "addr_info": ['
                        '{"family": "inet", "local": "10.255.1.2", "address": "10.255.2.1", "prefixlen": 32, "scope": "global"},'
                        '{"family": "inet", "local": "198.19.253.1", "prefixlen": 24, "scope": "global"},'
                        '{"family": "inet6", "local": "fe80::1", "prefixlen": 64, "scope": "link"}]}]')
    assert wg.live_addresses(report) == ['10.255.1.2 peer 10.255.2.1/32', '198.19.253.1/24']
    assert wg.address_key('10.255.1.2 peer 10.255.2.1') == '10.255.1.2 peer 10.255.2.1/32'
    assert wg.address_key('198.19.253.1/24') == '198.19.253.1/24'
    assert wg.address_argv('10.255.1.2 peer 10.255.2.1', 'wg-usw') == [
        '/usr/sbin/ip', 'address', 'replace', '10.255.1.2', 'peer', '10.255.2.1', 'dev', 'wg-usw']


def exec_lines(text):
    return [line.split('=', 1) for line in text.splitlines() if line.startswith('Exec')]


def test_the_kernel_unit_builds_the_interface_from_its_files():
    unit = wg.render_unit('wg-usw', '/etc/trainnet/wireguard/wg-usw.conf', 'kernel', ['10.255.1.2 peer 10.255.2.1'],
                          1340, '/etc/trainnet/wireguard/private.key',
                          after=['trainnet-control-plane-lo.service'], before=['bird.service'])
    assert 'Type=oneshot\nRemainAfterExit=yes\n' in unit and 'Before=bird.service\n' in unit
    assert 'After=network-online.target trainnet-control-plane-lo.service\n' in unit
    words = [(key, systemd_words(value.lstrip('-'))) for key, value in exec_lines(unit)]
    assert words == [
        ('ExecStartPre', ['/usr/sbin/ip', 'link', 'delete', 'wg-usw']),
        ('ExecStart', ['/usr/sbin/ip', 'link', 'add', 'wg-usw', 'type', 'wireguard']),
        ('ExecStart', ['/usr/bin/wg', 'setconf', 'wg-usw', '/etc/trainnet/wireguard/wg-usw.conf']),
        ('ExecStart', ['/usr/bin/wg', 'set', 'wg-usw', 'private-key', '/etc/trainnet/wireguard/private.key']),
        ('ExecStart', ['/usr/sbin/ip', 'address', 'replace', '10.255.1.2', 'peer', '10.255.2.1', 'dev', 'wg-usw']),
        ('ExecStart', ['/usr/sbin/ip', 'link', 'set', 'dev', 'wg-usw', 'mtu', '1340', 'up']),
        ('ExecStopPost', ['/usr/sbin/ip', 'link', 'delete', 'wg-usw'])]


def test_the_go_unit_waits_for_the_socket_and_quotes_hostile_paths():
    hostile = "/srv/train net/%h/$HOME/it's \"here\""
    unit = wg.render_unit('wgsync0', hostile + '/wgsync0.conf', 'go', ['198.19.253.1/24'], 1320, hostile + '/private.key')
    assert 'Type=simple\n' in unit and 'Restart=on-failure\n' in unit
    lines = exec_lines(unit)
    assert [key for key, value in lines] == ['ExecStartPre', 'ExecStart'] + ['ExecStartPost'] * 5 + ['ExecStopPost']
    assert systemd_words(lines[1][1]) == ['/usr/bin/wireguard-go', '-f', 'wgsync0']
    assert systemd_words(lines[2][1])[-1] == 'wgsync0' and 'until /usr/bin/wg show' in lines[2][1]
    assert systemd_words(lines[3][1]) == ['/usr/bin/wg', 'setconf', 'wgsync0', hostile + '/wgsync0.conf']
    assert systemd_words(lines[4][1]) == ['/usr/bin/wg', 'set', 'wgsync0', 'private-key', hostile + '/private.key']


def test_the_ping_fills_the_mtu_with_df_set():
    assert wg.ping_argv('10.255.2.1', 'wg-usw', 1340) == [
        'ping', '-n', '-q', '-c', '1', '-W', '1', '-M', 'do', '-s', '1312', '-I', 'wg-usw', '10.255.2.1']
    assert wg.ping_argv('fd00::2', 'wg-usw', 1340)[10] == '1292'


KEY_A = 'A' * 43 + '='
KEY_B = 'B' * 43 + '='


def test_describe_peers_tells_a_missing_handshake_from_a_path_too_small():
    never = wg.describe_peers('%s\t0\n' % KEY_A, '%s\t0\t4440\n' % KEY_A, 1000, False)
    assert never == 'peer AAAAAAAA...: no handshake (sent 4.3 KiB, received 0 B); small pings get no answer either'
    shaken = wg.describe_peers('%s\t990\n' % KEY_A, '%s\t2048\t96\n' % KEY_A, 1000, True)
    assert shaken == ("peer AAAAAAAA...: last handshake 10 s ago (sent 96 B, received 2.0 KiB); "
                      "small pings answer: the path does not carry the tunnel's full-size packets")


def test_describe_peers_names_every_peer_and_copes_with_nothing():
    text = wg.describe_peers('%s\t0\n%s\t5\n' % (KEY_A, KEY_B), '%s\t0\t0\n%s\t1\t2\n' % (KEY_A, KEY_B), 4, None)
    assert text == 'peer AAAAAAAA...: no handshake (sent 0 B, received 0 B); peer BBBBBBBB...: last handshake 0 s ago (sent 2 B, received 1 B)'
    assert wg.describe_peers('', '', 0, None) == 'no peer configured'


def test_describe_peers_tells_crossed_first_handshakes_from_a_path_too_small():
    # as the lab showed it: 4 initiations of the peer accepted (148 B each), none of its responses
    crossed = wg.describe_peers('%s\t0\n' % KEY_A, '%s\t592\t1108\n' % KEY_A, 1000, True)
    assert crossed == ("peer AAAAAAAA...: no handshake (sent 1.1 KiB, received 592 B; its initiations arrive: the two "
                       "ends' first handshakes crossed); a small ping answers now: the first handshake completed only "
                       "after the verify time")


def test_the_end_with_the_higher_tunnel_address_awaits_the_first_handshake():
    # control plane: one point-to-point interface per peer; sync tunnel: one interface, a mesh
    assert wg.awaits_peer(['198.19.254.2 peer 198.19.254.1/32'], '198.19.254.1') is True
    assert wg.awaits_peer(['198.19.254.1 peer 198.19.254.2/32'], '198.19.254.2') is False
    assert wg.awaits_peer(['10.255.2.3/24'], '10.255.2.1') is True
    assert wg.awaits_peer(['10.255.2.3/24'], '10.255.2.4') is False
    # an address of the other IP version decides nothing; no address: initiate
    assert wg.awaits_peer(['fd00::9/64', '10.255.2.3/24'], '10.255.2.1') is True
    assert wg.awaits_peer(['fd00::9/64'], '10.255.2.1') is False
    assert wg.awaits_peer([], '10.255.2.1') is False


def test_peer_handshakes_finds_each_targets_peer_by_its_allowed_ips():
    allowed = '%s\t10.255.2.1/32 198.18.1.0/24\n%s\t0.0.0.0/0\nC%s\t(none)\n' % (KEY_A, KEY_B, KEY_A[1:])
    handshakes = '%s\t0\n%s\t1700000000\nC%s\t0\n' % (KEY_A, KEY_B, KEY_A[1:])
    # 10.255.2.1 is KEY_A's (no handshake yet); 10.9.9.9 only falls in KEY_B's 0.0.0.0/0 (done)
    assert wg.peer_handshakes(allowed, handshakes, ['10.255.2.1', '10.9.9.9']) == ['10.9.9.9']
    # the most specific route decides, as in WireGuard's cryptokey routing
    assert wg.peer_handshakes(allowed, handshakes, ['198.18.1.7']) == []
    assert wg.peer_handshakes(allowed, handshakes.replace('%s\t0' % KEY_A, '%s\t5' % KEY_A, 1), ['10.255.2.1']) == ['10.255.2.1']
    assert wg.peer_handshakes('', '', ['10.255.2.1']) == []
