# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Prometheus text exposition for the node_exporter textfile collector: the link metrics of a
link_measure result, the file name per peer, and the last-success timestamp read back from the
previous file. Pure: the module writes the file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


PROM_PREFIX = 'trainnet_link_'

# (metric, help, function of the module result -> value or None)
PROM_METRICS = (
    ('trainnet_link_rtt_seconds', 'Average round-trip time to the peer (ICMP echo, or TCP connect).',
     lambda r: _scale((r.get('rtt_ms') or {}).get('avg'), 1e-3)),
    ('trainnet_link_rtt_min_seconds', 'Minimum round-trip time to the peer.',
     lambda r: _scale((r.get('rtt_ms') or {}).get('min'), 1e-3)),
    ('trainnet_link_jitter_seconds', 'Round-trip time mean deviation (ping mdev).',
     lambda r: _scale(r.get('jitter_ms'), 1e-3)),
    ('trainnet_link_loss_ratio', 'Fraction of RTT probes without an answer.',
     lambda r: _scale(r.get('loss_pct'), 1e-2)),
    ('trainnet_link_throughput_bits_per_second', 'TCP goodput received by the peer (iperf3).',
     lambda r: _scale(r.get('throughput_mbps'), 1e6)),
    ('trainnet_link_retransmit_ratio', 'Retransmitted TCP segments per segment sent (iperf3).',
     lambda r: _scale(r.get('retransmit_pct'), 1e-2)),
    ('trainnet_link_path_mtu_bytes', 'Largest IP packet that crossed the path with DF set.',
     lambda r: r.get('path_mtu_bytes')),
    ('trainnet_link_pmtu_blackhole', '1 when a packet above the path MTU vanished without an ICMP error.',
     lambda r: None if r.get('pmtu_blackhole') is None else int(bool(r['pmtu_blackhole']))),
)
LAST_SUCCESS = 'trainnet_link_last_success_timestamp_seconds'
LAST_SUCCESS_HELP = 'Unix time of the last measurement without errors and without missed thresholds.'


def _scale(value, factor):
    return None if value is None else value * factor


def sanitize_peer(peer):
    """File-name safe form of the peer: anything but [A-Za-z0-9_.-] becomes '_'."""
    name = re.sub(r'[^A-Za-z0-9_.-]', '_', peer or '')
    return name.lstrip('.') or '_'


def prom_file_name(peer):
    return 'trainnet_link_%s.prom' % sanitize_peer(peer)


def _escape_label(value):
    return str(value).replace('\\', '\\\\').replace('\n', '\\n').replace('"', '\\"')


def _prom_value(value):
    if isinstance(value, bool):
        return '1' if value else '0'
    if isinstance(value, int):
        return str(value)
    value = float(value)
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return '%.10g' % value


def parse_last_success(text):
    """The last-success timestamp from a previously written textfile, or None."""
    for line in (text or '').splitlines():
        if line.startswith(LAST_SUCCESS + '{') or line.startswith(LAST_SUCCESS + ' '):
            try:
                return float(line.rsplit(None, 1)[1])
            except (IndexError, ValueError):
                return None
    return None


def render_prometheus(result, peer, source, last_success=None):
    """Text exposition format for the node_exporter textfile collector.

    Metrics whose value was not measured are left out. last_success is written as given
    (the module passes now on success and the previous file's value otherwise).
    """
    labels = '{peer="%s",source="%s"}' % (_escape_label(peer), _escape_label(source))
    lines = []
    rows = [(name, text, fn(result)) for name, text, fn in PROM_METRICS]
    rows.append((LAST_SUCCESS, LAST_SUCCESS_HELP, last_success))
    for name, text, value in rows:
        if value is None:
            continue
        lines.append('# HELP %s %s' % (name, text))
        lines.append('# TYPE %s gauge' % name)
        lines.append('%s%s %s' % (name, labels, _prom_value(value)))
    return '\n'.join(lines) + '\n'
