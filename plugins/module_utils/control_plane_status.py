# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The control plane's live state on one host, read from `wg show all latest-handshakes`,
`birdc show bfd sessions`, `ip -j route get RENDEZVOUS` and `ip -j -4 address show dev lo`, and
the tunnels' configuration files (<interface>.conf, the peer named under [Peer]).

Used by the control_plane_status module (the structured status) and, run as a program, by the
watchdog timer the control_plane role installs (this very file, copied to the host):

    python3 -I control_plane_status.py TEXTFILE_DIR RENDEZVOUS_ADDRESS PRIMARY_ANCHOR [SETTINGS_DIR]

which writes trainnet_control_plane.prom (Prometheus text format) atomically into TEXTFILE_DIR
for node_exporter's textfile collector. Standard library only and no collection imports, so the
one file runs alone on the host. Reads only; the program writes only its metrics file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys
import tempfile
import time

FILE_NAME = 'trainnet_control_plane.prom'
DEFAULT_SETTINGS_DIR = '/etc/trainnet/wireguard'
LIMIT = 5  # seconds per command: a hung birdc must not pile up timer runs or stall a play
# WireGuard rekeys every 120 s while traffic flows (keepalives, BFD); a session whose last
# handshake is older than 180 s (REJECT_AFTER_TIME) carries no traffic.
HANDSHAKE_STALE = 180
BFD_STATES = ('Up', 'Down', 'Init', 'AdminDown')
USAGE = 'usage: control_plane_status.py TEXTFILE_DIR RENDEZVOUS_ADDRESS PRIMARY_ANCHOR [SETTINGS_DIR]\n'


def commands(rendezvous):
    """name -> argv of every command the status is read from."""
    return {
        'handshakes': ['wg', 'show', 'all', 'latest-handshakes'],
        'bfd': ['birdc', 'show', 'bfd', 'sessions'],
        'route': ['ip', '-j', 'route', 'get', rendezvous],
        'lo': ['ip', '-j', '-4', 'address', 'show', 'dev', 'lo'],
    }


def parse_handshakes(text):
    """`wg show all latest-handshakes` -> {interface: unix time of the last handshake (0 = never)}."""
    out = {}
    for line in (text or '').splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[2].isdigit():
            out[fields[0]] = int(fields[2])
    return out


def parse_bfd_sessions(text):
    """`birdc show bfd sessions` (BIRD 2) -> [{neighbor, interface, state, since}].

    `since` is BIRD's time of the last state change: a session that restarted shows a new one."""
    sessions = []
    for line in (text or '').splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0][:1].isdigit() and fields[2] in BFD_STATES:
            sessions.append({'neighbor': fields[0], 'interface': fields[1], 'state': fields[2],
                             'since': fields[3] if len(fields) > 3 else ''})
    return sessions


def parse_route(text):
    """`ip -j route get ADDR` -> {device, type, gateway, source}, or None (no route, bad output)."""
    try:
        routes = json.loads(text or '[]')
    except ValueError:
        return None
    if not isinstance(routes, list) or not routes or not isinstance(routes[0], dict):
        return None
    route = routes[0]
    return {'device': route.get('dev'), 'type': route.get('type', 'unicast'),
            'gateway': route.get('gateway'), 'source': route.get('prefsrc')}


def parse_addresses(text):
    """`ip -j -4 address show dev lo` -> the IPv4 addresses on it."""
    try:
        links = json.loads(text or '[]')
    except ValueError:
        return []
    found = []
    for link in links if isinstance(links, list) else []:
        for info in (link.get('addr_info') or []) if isinstance(link, dict) else []:
            if info.get('local'):
                found.append(info['local'])
    return found


def read_peers(settings_dir):
    """{interface: peer name} from the tunnels' configuration files (<interface>.conf, written by the
    wireguard_interface module: the comment line under [Peer] names the peer)."""
    peers = {}
    try:
        names = os.listdir(settings_dir)
    except OSError:
        return peers
    for name in sorted(names):
        if not name.endswith('.conf'):
            continue
        try:
            with open(os.path.join(settings_dir, name)) as handle:
                lines = [line.strip() for line in handle]
        except (OSError, UnicodeDecodeError):
            continue
        for before, line in zip(lines, lines[1:]):
            if before == '[Peer]' and line.startswith('# '):
                peers[name[:-5]] = line[2:].strip()
                break
    return peers


def build_status(now, handshakes, sessions, route, lo_addresses, peers, rendezvous, primary=''):
    """The structured status of one host.

    deployed: the role left tunnel settings here, or WireGuard interfaces exist. Every tunnel
    (settings file or interface) counts, so a tunnel whose process died is down, not missing; each
    is expected to carry one BFD session (the role runs BFD on every tunnel).
    """
    by_interface = dict((s['interface'], s) for s in sessions)
    tunnels = []
    for interface in sorted(set(peers) | set(handshakes)):
        stamp = handshakes.get(interface) or 0
        age = int(max(now - stamp, 0)) if stamp else None
        session = by_interface.get(interface)
        tunnels.append({
            'interface': interface,
            'peer': peers.get(interface, ''),
            'handshake_age': age,
            'up': age is not None and age <= HANDSHAKE_STALE,
            'bfd_state': session['state'] if session else None,
        })
    bfd = [dict(s, peer=peers.get(s['interface'], ''), up=s['state'] == 'Up') for s in sessions]
    tunnel_names = set(t['interface'] for t in tunnels)
    # Sessions on interfaces that are no tunnel of ours still count: BIRD runs them for us.
    bfd_total = len(tunnel_names | set(s['interface'] for s in sessions))
    ages = [t['handshake_age'] for t in tunnels if t['handshake_age'] is not None]

    route = route or {}
    device = route.get('device')
    local = route.get('type') == 'local'
    assigned = rendezvous in (lo_addresses or [])
    if local:
        active = 'local'
    else:
        active = peers.get(device or '') or None
    if local:
        # The address on lo: the primary anchor. A local route only: a takeover by a secondary.
        on_primary = assigned
    else:
        on_primary = bool(active) and active == primary
    return {
        'deployed': bool(tunnels),
        'tunnels': tunnels,
        'tunnels_up': sum(1 for t in tunnels if t['up']),
        'tunnels_total': len(tunnels),
        'oldest_handshake_age': max(ages) if ages else None,
        'bfd_sessions': bfd,
        'bfd_up': sum(1 for s in bfd if s['up']),
        'bfd_total': bfd_total,
        'rendezvous': {
            'address': rendezvous,
            'device': device,
            'gateway': route.get('gateway'),
            'source': route.get('source'),
            'local': local,
            'assigned': assigned,
            'active_anchor': active,
            'primary_anchor': primary or None,
            'on_primary': on_primary,
        },
    }


def run_local(argv):
    """(rc, stdout, stderr) of argv in the C locale within LIMIT seconds (the program's runner)."""
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=LIMIT, check=False, env=dict(os.environ, LANG='C', LC_ALL='C'))
    except OSError as exc:
        return 127, '', '%s: %s' % (argv[0], exc.strerror or exc)
    except subprocess.TimeoutExpired:
        return 124, '', '%s: no answer within %d s' % (argv[0], LIMIT)
    return proc.returncode, proc.stdout, proc.stderr


def collect(rendezvous, primary='', settings_dir=DEFAULT_SETTINGS_DIR, run=None, now=None):
    """Run the commands through `run(argv) -> (rc, out, err)` and build the status.

    A command that fails (not installed, daemon down, no route) contributes nothing and is named
    in status['errors']; the caller decides what a missing part means.
    """
    run = run or run_local
    outputs = {}
    errors = []
    for name, argv in sorted(commands(rendezvous).items()):
        rc, out, err = run(argv)
        if rc == 0:
            outputs[name] = out
        else:
            outputs[name] = ''
            lines = (err or out or '').strip().splitlines()
            errors.append('%s: rc %s: %s' % (' '.join(argv), rc, lines[-1] if lines else 'no output'))
    status = build_status(time.time() if now is None else now, parse_handshakes(outputs['handshakes']),
                          parse_bfd_sessions(outputs['bfd']), parse_route(outputs['route']),
                          parse_addresses(outputs['lo']), read_peers(settings_dir), rendezvous, primary)
    status['errors'] = errors
    return status


def _label(value):
    return str(value).replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def render_metrics(status, now):
    """Prometheus text exposition of a status (gauges only; the watchdog's run time last)."""
    lines = []

    def metric(name, help_text, samples):
        lines.append('# HELP %s %s' % (name, help_text))
        lines.append('# TYPE %s gauge' % name)
        for labels, value in samples:
            text = ','.join('%s="%s"' % (k, _label(v)) for k, v in sorted(labels.items()))
            lines.append('%s{%s} %s' % (name, text, int(value)) if text else '%s %s' % (name, int(value)))

    tunnels = status['tunnels']
    metric('trainnet_control_plane_handshake_age_seconds',
           'Seconds since the last WireGuard handshake on the tunnel (absent: never).',
           [({'interface': t['interface'], 'peer': t['peer']}, t['handshake_age'])
            for t in tunnels if t['handshake_age'] is not None])
    metric('trainnet_control_plane_tunnel_up',
           '1 when the tunnel had a handshake within %d s.' % HANDSHAKE_STALE,
           [({'interface': t['interface'], 'peer': t['peer']}, t['up']) for t in tunnels])
    metric('trainnet_control_plane_bfd_session_up', '1 when the BFD session on the tunnel is Up.',
           [({'interface': s['interface'], 'neighbor': s['neighbor'], 'peer': s['peer'], 'state': s['state']},
             s['up']) for s in status['bfd_sessions']])
    rdv = status['rendezvous']
    metric('trainnet_control_plane_active_anchor',
           'Where the rendezvous address is routed: the anchor behind the tunnel, or local (this host serves it).',
           [({'anchor': rdv['active_anchor'] or 'none', 'interface': rdv['device'] or 'none',
              'rendezvous': rdv['address']}, 1)])
    metric('trainnet_control_plane_rendezvous_on_primary',
           '1 while the rendezvous address is reached through (or served by) the primary anchor.',
           [({'primary': rdv['primary_anchor'] or ''}, rdv['on_primary'])])
    metric('trainnet_control_plane_watchdog_timestamp_seconds', 'Unix time of this watchdog run.',
           [({}, now)])
    return '\n'.join(lines) + '\n'


# A copy of module_utils/textfile.py's write_atomic (this file runs alone on the host); tests
# keep the two identical.
def write_atomic(path, text, mode):
    """Replace `path` with `text` (str or bytes), permissions `mode`, atomically.

    mkstemp picks an unpredictable name with O_EXCL (a symlink planted there is never opened);
    the mode is set on the descriptor, never by path; os.replace swaps the name, so a symlink
    at `path` is replaced, not followed. The temporary file is removed on any error."""
    fd, tmp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), suffix='.tmp',
                               dir=os.path.dirname(path) or '.')
    try:
        with os.fdopen(fd, 'wb') as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(text.encode('utf-8') if isinstance(text, str) else text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def write_textfile(directory, text):
    return write_atomic(os.path.join(directory, FILE_NAME), text, 0o644)


def main(argv):
    if len(argv) not in (3, 4):
        sys.stderr.write(USAGE)
        return 2
    textfile_dir, rendezvous, primary = argv[0], argv[1], argv[2]
    settings_dir = argv[3] if len(argv) > 3 else DEFAULT_SETTINGS_DIR
    now = time.time()
    status = collect(rendezvous, primary, settings_dir, now=now)
    write_textfile(textfile_dir, render_metrics(status, now))
    return 0


if __name__ == '__main__':
    raise SystemExit(main(sys.argv[1:]))
