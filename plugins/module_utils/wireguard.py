# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One WireGuard interface, planned and compared: the pure part of the wireguard_interface module.

Used by both tunnel roles (control_plane: one interface per peer; sync_tunnel: one interface, many
peers). Three texts describe an interface:
- its configuration file (`wg setconf` format, 0600; the peers' pre-shared keys are in it, the
  private key is not: it stays in its own file, born on the host, and is loaded from there);
- its systemd unit (creates the interface at boot, kernel or wireguard-go);
- the live state (`wg showconf`, which does hold the secrets: they are compared in memory and never
  returned, only named).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

from ansible_collections.longhaul.trainnet.plugins.module_utils.config_value import (
    is_interface_name, is_wireguard_key, systemd_quote)

IMPLEMENTATIONS = ('kernel', 'go')
# What a secret's value is shown as in a diff.
SECRET = '(secret)'
SECRET_KEYS = ('privatekey', 'presharedkey')
IP = '/usr/sbin/ip'
WG = '/usr/bin/wg'
WIREGUARD_GO = '/usr/bin/wireguard-go'
# wireguard-go makes its control socket after the TUN device: `wg` must reach it before it is set
# (bounded: 200 x 0.1 s).
WAIT_FOR_SOCKET = ("/bin/sh -c 'i=0; until %s show \"$$1\" >/dev/null 2>&1; do i=$$((i + 1)); "
                   "[ \"$$i\" -le 200 ] || exit 1; sleep 0.1; done' sh" % WG)   # $$: a $ systemd leaves to sh


class WireGuardInputError(ValueError):
    """Every problem with the input, one message each."""

    def __init__(self, problems):
        self.problems = list(problems)
        super(WireGuardInputError, self).__init__('; '.join(self.problems))


def _address_problem(text):
    """None, or why `text` is not "ADDR/LEN" or "ADDR[/LEN] peer ADDR[/LEN]"."""
    words = str(text).split()
    if len(words) not in (1, 3) or (len(words) == 3 and words[1] != 'peer'):
        return "address '%s' must be ADDRESS/PREFIX or 'LOCAL peer REMOTE'" % text
    for word in (words[0], words[-1]):
        try:
            ipaddress.ip_interface(word)
        except ValueError:
            return "address '%s': '%s' is not an IP address" % (text, word)
    return None


def check_input(name, listen_port, addresses, mtu, peers, implementation, verify):
    """The module's input problems (a list; empty when fine). peers: normalised dicts."""
    problems = []
    if not is_interface_name(name):
        problems.append("name '%s' must be an interface name (1-15 of A-Z a-z 0-9 . _ -)" % name)
    if not 0 <= int(listen_port or 0) <= 65535:
        problems.append('listen_port %s must be 0-65535' % listen_port)
    if not 576 <= int(mtu) <= 9000:
        problems.append('mtu %s must be 576-9000' % mtu)
    if implementation not in IMPLEMENTATIONS:
        problems.append("implementation '%s' must be one of %s" % (implementation, ', '.join(IMPLEMENTATIONS)))
    problems += [p for p in (_address_problem(a) for a in addresses) if p]
    seen = set()
    for index, peer in enumerate(peers):
        label = peer.get('comment') or 'peers[%d]' % index
        if not is_wireguard_key(peer['public_key']):
            problems.append('%s: public_key must be a WireGuard key (44 base64 characters ending in =)' % label)
        elif peer['public_key'] in seen:
            problems.append('%s: public_key is given twice' % label)
        seen.add(peer['public_key'])
        if any('\n' in (peer.get(field) or '') for field in ('comment', 'endpoint', 'preshared_key')):
            problems.append('%s: comment, endpoint and pre-shared key must be one line' % label)
        if peer.get('endpoint') and not re.match(r'^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):[0-9]{1,5}$', peer['endpoint']):
            problems.append("%s: endpoint '%s' must be HOST:PORT or [IPv6]:PORT" % (label, peer['endpoint']))
        for prefix in peer.get('allowed_ips', []):
            try:
                ipaddress.ip_network(prefix, strict=False)
            except ValueError:
                problems.append("%s: allowed_ips entry '%s' is not a prefix" % (label, prefix))
        if peer.get('preshared_key') and not is_wireguard_key(peer['preshared_key']):
            problems.append('%s: preshared_key must be a WireGuard key (44 base64 characters ending in =; not shown)' % label)
        if not 0 <= int(peer.get('keepalive', 0)) <= 65535:
            problems.append('%s: keepalive %s must be 0-65535' % (label, peer.get('keepalive')))
    for target in verify:
        try:
            ipaddress.ip_address(target)
        except ValueError:
            problems.append("verify target '%s' is not an IP address" % target)
    return problems


def render_config(listen_port, peers, private_key=None):
    """`wg setconf` text with the peers' pre-shared keys. Without private_key: the file on disk; with it:
    the text piped to `wg syncconf`."""
    lines = ['[Interface]']
    if private_key:
        lines.append('PrivateKey = %s' % private_key.strip())
    if listen_port:
        lines.append('ListenPort = %d' % int(listen_port))
    for peer in peers:
        lines += ['', '[Peer]']
        if peer.get('comment'):
            lines.append('# %s' % peer['comment'])
        lines.append('PublicKey = %s' % peer['public_key'])
        psk = peer.get('preshared_key')
        if psk:
            lines.append('PresharedKey = %s' % psk.strip())
        if peer.get('endpoint'):
            lines.append('Endpoint = %s' % peer['endpoint'])
        lines.append('AllowedIPs = %s' % ', '.join(peer.get('allowed_ips', [])))
        if int(peer.get('keepalive', 0)):
            lines.append('PersistentKeepalive = %d' % int(peer['keepalive']))
    return '\n'.join(lines) + '\n'


def parse_config(text):
    """A `wg setconf`/`wg showconf` text as {'interface': {key: value}, 'peers': {public key: {key: value}}}
    with lower-case keys; AllowedIPs as a sorted list of normalised prefixes."""
    out = {'interface': {}, 'peers': {}}
    section = None
    current = None
    for raw in text.splitlines():
        line = raw.split('#', 1)[0].strip()
        if not line:
            continue
        if line.lower() == '[interface]':
            section, current = 'interface', out['interface']
            continue
        if line.lower() == '[peer]':
            section, current = 'peer', {}
            continue
        if '=' not in line or section is None:
            continue
        key, value = (part.strip() for part in line.split('=', 1))
        key = key.lower()
        if section == 'peer' and key == 'publickey':
            out['peers'][value] = current
            continue
        if key == 'allowedips':
            value = sorted(str(ipaddress.ip_network(p.strip(), strict=False)) for p in value.split(',') if p.strip())
        current[key] = value
    for peer in out['peers'].values():
        peer.setdefault('allowedips', [])
    return out


def redact(text):
    """The text with every secret's value replaced (for a diff or a message)."""
    return re.sub(r'(?im)^(\s*(?:PrivateKey|PresharedKey)\s*=\s*).*$', r'\g<1>' + SECRET, text)


def reset_peers(wanted, live):
    """The peers whose pre-shared key changes: WireGuard keeps their current session (the key is used
    only in a handshake), so they are removed and added again, and the new key is proven by a new
    handshake now, not at the next rekey minutes later."""
    return sorted(key for key, peer in wanted['peers'].items()
                  if key in live['peers'] and (peer.get('presharedkey') or None) != (live['peers'][key].get('presharedkey') or None))


def without_private_key(text):
    """A `wg showconf` text without its PrivateKey line (kept on disk as the state to go back to; the
    private key stays the one of its file)."""
    return re.sub(r'(?im)^\s*PrivateKey\s*=.*(\n|$)', '', text)


def config_differences(wanted, live):
    """What the live configuration lacks of the wanted one (both parse_config() results, the wanted one
    with its secrets), one phrase each and never a secret. A peer's endpoint is compared only where the
    wanted one names it and the live one has none (a roaming peer's endpoint follows the peer)."""
    out = []
    want_if, live_if = wanted['interface'], live['interface']
    if want_if.get('privatekey') and want_if.get('privatekey') != live_if.get('privatekey'):
        out.append('private key')
    if want_if.get('listenport') and str(want_if.get('listenport')) != str(live_if.get('listenport')):
        out.append('listen port %s -> %s' % (live_if.get('listenport', 'none'), want_if['listenport']))
    for key in sorted(set(live['peers']) - set(wanted['peers'])):
        out.append('peer %s removed' % key)
    for key, peer in sorted(wanted['peers'].items()):
        have = live['peers'].get(key)
        if have is None:
            out.append('peer %s added' % key)
            continue
        if peer.get('allowedips') != have.get('allowedips'):
            out.append('peer %s allowed IPs %s -> %s'
                       % (key, ', '.join(have['allowedips']) or 'none', ', '.join(peer['allowedips']) or 'none'))
        if (peer.get('presharedkey') or None) != (have.get('presharedkey') or None):
            out.append('peer %s pre-shared key' % key)
        if str(peer.get('persistentkeepalive', 'off')) != str(have.get('persistentkeepalive', 'off')):
            out.append('peer %s keepalive %s -> %s'
                       % (key, have.get('persistentkeepalive', 'off'), peer.get('persistentkeepalive', 'off')))
        if peer.get('endpoint') and not have.get('endpoint'):
            out.append('peer %s endpoint %s' % (key, peer['endpoint']))
    return out


def address_argv(address, ifname):
    """`ip address replace` arguments for one address ("A/L" or "A peer B")."""
    return [IP, 'address', 'replace'] + str(address).split() + ['dev', ifname]


def address_key(address):
    """An address entry in the form live_addresses() reports it: 'A/L', or 'A peer B/L' for a
    point-to-point pair (both also valid `ip address` arguments)."""
    words = str(address).split()
    if len(words) == 3:
        remote = ipaddress.ip_interface(words[2])
        return '%s peer %s' % (ipaddress.ip_interface(words[0]).ip, remote.with_prefixlen)
    return ipaddress.ip_interface(words[0]).with_prefixlen


def live_addresses(ip_json):
    """The interface's addresses from `ip -j address show dev IF` (parsed JSON), in address_key() form."""
    out = []
    for link in ip_json or []:
        for info in link.get('addr_info', []):
            if info.get('family') not in ('inet', 'inet6') or info.get('scope') == 'link':
                continue
            if info.get('address') and info['address'] != info['local']:
                out.append('%s peer %s/%s' % (info['local'], info['address'], info['prefixlen']))
            else:
                out.append('%s/%s' % (info['local'], info['prefixlen']))
    return sorted(out)


def render_unit(name, config_path, implementation, addresses, mtu, private_key_file, description=None,
                after=(), before=()):
    """The systemd unit that builds the interface at boot from its files (the private key loaded from
    its file, never written into the unit)."""
    q = systemd_quote
    setup = [[WG, 'setconf', name, config_path], [WG, 'set', name, 'private-key', private_key_file]]
    setup += [address_argv(a, name) for a in addresses]
    setup.append([IP, 'link', 'set', 'dev', name, 'mtu', str(int(mtu)), 'up'])
    lines = ['# Written by longhaul.trainnet.wireguard_interface: the WireGuard interface %s from %s.' % (name, config_path),
             '[Unit]',
             'Description=%s' % (description or 'trainnet WireGuard interface %s' % name)
             + ' (%s)' % ('wireguard-go' if implementation == 'go' else 'kernel'),
             'After=%s' % ' '.join(['network-online.target'] + list(after)),
             'Wants=network-online.target']
    if before:
        lines.append('Before=%s' % ' '.join(before))
    lines += ['', '[Service]']
    delete = '-%s link delete %s' % (IP, q(name))
    if implementation == 'go':
        lines += ['Type=simple', 'Environment=WG_PROCESS_FOREGROUND=1', 'ExecStartPre=%s' % delete,
                  'ExecStart=%s -f %s' % (WIREGUARD_GO, q(name)),
                  'ExecStartPost=%s %s' % (WAIT_FOR_SOCKET, q(name))]
        lines += ['ExecStartPost=%s' % ' '.join(q(w) for w in argv) for argv in setup]
        lines += ['Restart=on-failure', 'RestartSec=2']
    else:
        lines += ['Type=oneshot', 'RemainAfterExit=yes', 'ExecStartPre=%s' % delete,
                  'ExecStart=%s link add %s type wireguard' % (IP, q(name))]
        lines += ['ExecStart=%s' % ' '.join(q(w) for w in argv) for argv in setup]
    lines += ['ExecStopPost=%s' % delete, '', '[Install]', 'WantedBy=multi-user.target']
    return '\n'.join(lines) + '\n'


def ping_argv(target, ifname, mtu):
    """One full-size ping through the interface with DF set: a tunnel MTU the path does not carry fails
    here. IPv4 header 20 + ICMP 8; IPv6 40 + 8."""
    overhead = 48 if ipaddress.ip_address(target).version == 6 else 28
    return ['ping', '-n', '-q', '-c', '1', '-W', '1', '-M', 'do', '-s', str(int(mtu) - overhead), '-I', ifname, target]


# Seconds an end that leaves the first handshake to its peer waits for it: far longer than an ocean
# path's one-way delay and the skew between two ends' module starts, shorter than WireGuard's 5 s retry.
AWAIT_PEER_HANDSHAKE = 2.0


def awaits_peer(own_addresses, target):
    """Whether this end leaves the first handshake towards `target` to the peer, when both ends verify at
    once: the end whose tunnel address (of the target's IP version) is the higher one waits. Two first
    initiations that cross on the path each replace the other end's own handshake, both answers are
    dropped, and WireGuard retries only after 5 s (5-5.33 s per round, often crossing again)."""
    wanted = ipaddress.ip_address(target)
    for entry in own_addresses:
        local = ipaddress.ip_interface(entry.split()[0]).ip
        if local.version == wanted.version and local != wanted:
            return local > wanted
    return False


def peer_handshakes(allowed_ips_text, handshakes_text, targets):
    """The targets whose peer (the one whose allowed IPs hold the target, from `wg show IFACE
    allowed-ips`) has completed a handshake (`wg show IFACE latest-handshakes`). A responder counts its
    handshake once the initiator's first data packet arrived: the session is then usable both ways."""
    last = dict(line.split('\t')[:2] for line in handshakes_text.splitlines() if '\t' in line)
    networks = []
    for line in allowed_ips_text.splitlines():
        key, _sep, allowed = line.partition('\t')
        for network in allowed.split():
            if network != '(none)':
                networks.append((ipaddress.ip_network(network, strict=False), key))
    done = []
    for target in targets:
        address = ipaddress.ip_address(target)
        owners = [(net.prefixlen, key) for net, key in networks if net.version == address.version and address in net]
        if owners and int(last.get(max(owners)[1], '0') or 0) > 0:
            done.append(target)
    return done


def _size(count):
    for unit in ('B', 'KiB', 'MiB'):
        if count < 1024 or unit == 'MiB':
            return ('%d %s' % (count, unit)) if unit == 'B' else ('%.1f %s' % (count, unit))
        count /= 1024.0


def describe_peers(handshakes_text, transfer_text, now, small_answered):
    """Why a verify got no answer, from `wg show IFACE latest-handshakes` and `wg show IFACE transfer`
    read when it gave up (neither holds a secret) and whether a small ping through the tunnel answered
    afterwards: no handshake (the peer is not running, has another key, the underlay drops its UDP, or,
    when its initiations arrive, both ends' initiations kept crossing), or a handshake whose full-size
    packets are lost (the path's MTU is below the tunnel's outer packet). wireguard-go and the kernel
    count a handshake message as received only once it was accepted."""
    handshakes = dict(line.split('\t')[:2] for line in handshakes_text.splitlines() if '\t' in line)
    notes, shaken = [], False
    for line in transfer_text.splitlines():
        fields = line.split('\t')
        if len(fields) < 3:
            continue
        key, received, sent = fields[0], int(fields[1]), int(fields[2])
        last = int(handshakes.get(key, '0') or 0)
        traffic = 'sent %s, received %s' % (_size(sent), _size(received))
        if last == 0:
            notes.append('peer %s...: no handshake (%s%s)' % (
                key[:8], traffic, '; its initiations arrive: the two ends\' first handshakes crossed' if received else ''))
        else:
            shaken = True
            notes.append('peer %s...: last handshake %d s ago (%s)' % (key[:8], max(0, int(now) - last), traffic))
    if small_answered and shaken:
        notes.append('small pings answer: the path does not carry the tunnel\'s full-size packets')
    elif small_answered:
        notes.append('a small ping answers now: the first handshake completed only after the verify time')
    elif small_answered is not None:
        notes.append('small pings get no answer either')
    return '; '.join(notes) or 'no peer configured'
