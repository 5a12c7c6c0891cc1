# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure logic behind the link_measure module.

Parsers for ping (iputils) and ``iperf3 -J`` output and for /proc/net/netstat, the
path-MTU binary search plan, threshold evaluation with its failure message (the Prometheus
textfile is rendered by prometheus.py, TCP Fast Open timed by tfo.py). Nothing here runs a command or opens a socket; the
module does the I/O, so everything below is unit-tested on captured outputs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import math
import re

from ansible_collections.longhaul.trainnet.plugins.module_utils.mtu import icmp_payload

# ---------------------------------------------------------------------------------------------
# ping


_STATS_RE = re.compile(r'^(\d+) packets transmitted, (\d+) (?:packets )?received(.*)$', re.M)
_ERRORS_RE = re.compile(r'\+(\d+) errors?')
_RTT_RE = re.compile(
    r'^(?:rtt|round-trip) min/avg/max(?:/(?:mdev|stddev))? = '
    r'([0-9.]+)/([0-9.]+)/([0-9.]+)(?:/([0-9.]+))? ?ms', re.M)
_PING_ERROR_RE = re.compile(r'^(ping6?: .+)$', re.M)
_PIPE_RE = re.compile(r', pipe (\d+)')
# iputils ping does not keep up with intervals below about 10 ms once replies come back after a
# long RTT: measured -c 5000 -i 0.002 took 42-44 s (8.7 ms per probe) across 70-150 ms RTT on the
# lab, 10 s on a LAN. The time limit of a ping run therefore allows at least this per probe.
PING_SLOW_PROBE_S = 0.015
# "From 198.18.250.6 icmp_seq=1 Frag needed and DF set (mtu = 1400)"
# "ping: local error: message too long, mtu=1400"
# "From fd00::1 icmp_seq=1 Packet too big: mtu=1400"
_TOO_BIG_RE = re.compile(
    r'(?:Frag(?:mentation)? needed[^\n]*?|message too long[^\n]*?|Packet too big[^\n]*?)'
    r'(?:mtu ?[=:]? ?(\d+))?\)?$', re.M | re.I)


def _num(value):
    return None if value is None else float(value)


def parse_ping_summary(text):
    """Summary of an iputils (or busybox) ping run, None when it printed no statistics.

    loss_pct is computed from the packet counts (ping itself rounds it); replies that
    are errors ("+N errors") are not received packets.
    """
    text = text or ''
    stats = _STATS_RE.search(text)
    if not stats:
        return None
    transmitted = int(stats.group(1))
    received = int(stats.group(2))
    errors = _ERRORS_RE.search(stats.group(3))
    result = {
        'transmitted': transmitted,
        'received': received,
        'errors': int(errors.group(1)) if errors else 0,
        'loss_pct': round(100.0 * (transmitted - received) / transmitted, 3) if transmitted else None,
        'rtt_ms': None,
        'pipe': None,
    }
    pipe = _PIPE_RE.search(text)
    if pipe:
        result['pipe'] = int(pipe.group(1))
    rtt = _RTT_RE.search(text)
    if rtt:
        result['rtt_ms'] = {
            'min': _num(rtt.group(1)),
            'avg': _num(rtt.group(2)),
            'max': _num(rtt.group(3)),
            'mdev': _num(rtt.group(4)),
        }
    return result


def ping_error(out, err):
    """The first "ping: ..." line of the output (errors such as unknown host), or None."""
    for text in (err, out):
        match = _PING_ERROR_RE.search(text or '')
        if match:
            return match.group(1).strip()
    return None


def ping_argv(ping, address, count, interval, linger):
    """argv of the RTT/loss measurement (quiet: only the summary is printed)."""
    return [ping, '-n', '-q', '-c', str(count), '-i', format_number(interval), '-W',
            format_number(linger), address]


def ping_time_limit(count, interval, linger):
    """Seconds a `ping -c count -i interval -W linger` run may take before it is stopped.

    Three times the nominal interval per probe, but at least PING_SLOW_PROBE_S: below about
    10 ms iputils sends slower than asked across a long RTT (the nominal count * interval * 3
    stopped a healthy -c 5000 -i 0.002 run after 36 s, before it had sent all its probes).
    """
    return count * max(3 * interval, PING_SLOW_PROBE_S) + linger + 5


def stopped_ping_loss(summary):
    """Loss (percent) of a ping run stopped early (SIGINT), not counting the echo requests
    still in flight when it stopped (at most `pipe`, ping's largest number outstanding)."""
    in_flight = min(summary.get('pipe') or 0, summary['transmitted'] - summary['received'])
    answered_or_lost = summary['transmitted'] - in_flight
    if answered_or_lost <= 0:
        return summary['loss_pct']
    return round(100.0 * (answered_or_lost - summary['received']) / answered_or_lost, 3)


def ping_df_argv(ping, address, size, ipv6, linger, count=2):
    """argv of one path-MTU probe: IP packet of `size` bytes with DF set (no fragmentation)."""
    payload = icmp_payload(size, ipv6)
    return [ping, '-n', '-M', 'do', '-s', str(payload), '-c', str(count), '-i', '0.05',
            '-W', format_number(linger), address]


def rtt_stats(samples_ms):
    """min/avg/max/mdev of RTT samples in ms, mdev as ping computes it (population std dev)."""
    if not samples_ms:
        return None
    count = len(samples_ms)
    avg = sum(samples_ms) / count
    var = max(0.0, sum(x * x for x in samples_ms) / count - avg * avg)
    return {
        'min': round(min(samples_ms), 3),
        'avg': round(avg, 3),
        'max': round(max(samples_ms), 3),
        'mdev': round(math.sqrt(var), 3),
    }


# ---------------------------------------------------------------------------------------------
# path MTU

OK = 'ok'
TOO_BIG = 'too_big'
SILENT = 'silent'
ERROR = 'error'


def classify_df_probe(rc, out, err):
    """Outcome of one DF ping probe: (outcome, mtu_hint, detail).

    ok       - at least one echo reply came back
    too_big  - an ICMP "fragmentation needed"/"packet too big" arrived, or the local stack
               refused the size ("message too long"); mtu_hint is the MTU it named
    silent   - no reply and no ICMP error: the packet vanished (a black hole when larger
               packets got through before) - also when the local device dropped it
               ("No buffer space available", e.g. a veth whose peer has a smaller MTU)
    error    - ping could not run the probe at all (no statistics printed)
    """
    text = '%s\n%s' % (out or '', err or '')
    summary = parse_ping_summary(text)
    too_big = _TOO_BIG_RE.search(text)
    hint = None
    if too_big:
        hints = [int(m.group(1)) for m in _TOO_BIG_RE.finditer(text) if m.group(1)]
        hint = min(hints) if hints else None
    if summary is None:
        if too_big:
            return TOO_BIG, hint, too_big.group(0).strip()
        return ERROR, None, ping_error(out, err) or 'ping rc=%s without statistics' % rc
    if summary['received'] > 0:
        return OK, None, '%d/%d replies' % (summary['received'], summary['transmitted'])
    if too_big:
        return TOO_BIG, hint, too_big.group(0).strip()
    detail = ping_error(out, err)
    return SILENT, None, detail or 'no reply, no ICMP error'


class PmtuSearch(object):
    """Binary search for the largest IP packet that crosses the path with DF set.

    The first probe is `ceiling` (the common case: it fits, one probe). After a failure the
    search bisects between the largest size that got a reply (initially `floor`, assumed
    good and confirmed at the end if nothing else got through) and the smallest size that
    failed; an MTU named by an ICMP error is tried next when it lies in that interval, which
    usually ends the search after three probes. The probe count is bounded by
    2 + ceil(log2(ceiling - floor + 1)) (12 for 576..1500).
    """

    def __init__(self, floor, ceiling, max_probes=None):
        if ceiling < floor:
            raise ValueError('pmtu ceiling %d below floor %d' % (ceiling, floor))
        self.floor = floor
        self.ceiling = ceiling
        self.max_probes = max_probes or 2 + int(math.ceil(math.log(ceiling - floor + 1, 2)))
        self.good = None          # largest size that got a reply
        self.bad = ceiling + 1    # smallest size known not to pass
        self.hint = None
        self.probes = []
        self.error = None

    def _tried(self, size):
        return any(p['size'] == size for p in self.probes)

    def next_size(self):
        """The next size to probe, or None when the search is over."""
        if self.error or len(self.probes) >= self.max_probes:
            return None
        if not self.probes:
            return self.ceiling
        if self.good == self.ceiling:
            return None
        low = self.good if self.good is not None else self.floor
        if self.hint is not None and low < self.hint < self.bad and not self._tried(self.hint):
            return self.hint
        if self.bad - low > 1:
            return (low + self.bad) // 2
        if self.good is None and self.floor < self.bad and not self._tried(self.floor):
            return self.floor
        return None

    def record(self, size, outcome, mtu_hint=None, detail=None):
        self.probes.append({'size': size, 'outcome': outcome, 'mtu_hint': mtu_hint, 'detail': detail})
        if outcome == OK:
            if self.good is None or size > self.good:
                self.good = size
        elif outcome == ERROR:
            self.error = detail or 'probe failed'
        else:
            if size < self.bad:
                self.bad = size
            if outcome == TOO_BIG and mtu_hint:
                # nothing above the MTU an ICMP error (or the local stack) names can pass
                if mtu_hint + 1 < self.bad:
                    self.bad = mtu_hint + 1
                self.hint = mtu_hint

    @property
    def path_mtu(self):
        return self.good

    @property
    def blackhole(self):
        """A size above the path MTU vanished without an ICMP error (or nothing passed at all)."""
        limit = self.good if self.good is not None else 0
        return any(p['outcome'] == SILENT and p['size'] > limit for p in self.probes)

    @property
    def converged(self):
        return self.good == self.ceiling or (self.good is not None and self.bad - self.good <= 1)


def pmtu_linger(rtt_max_ms):
    """Seconds a DF probe waits for a reply: 0.2 s + 1.5 x the worst RTT seen, within 0.3..1 s."""
    if rtt_max_ms is None:
        return 1.0
    return round(min(1.0, max(0.3, 0.2 + 1.5 * rtt_max_ms / 1000.0)), 2)


# ---------------------------------------------------------------------------------------------
# iperf3

DEFAULT_MSS = 1448


def iperf3_argv(iperf3, address, port, duration, congestion_control=None, connect_timeout_ms=3000):
    argv = [iperf3, '-c', address, '-p', str(port), '-t', str(duration), '-J',
            '--connect-timeout', str(connect_timeout_ms)]
    if congestion_control:
        argv += ['-C', congestion_control]
    return argv


def parse_iperf3(text, requested_cc=None):
    """(result, error) from the output of ``iperf3 -c ... -J`` (iperf3 3.x TCP test).

    throughput_mbps   end.sum_received.bits_per_second / 1e6 (what the receiver got)
    retransmits       end.sum_sent.retransmits (TCP segments the sender retransmitted)
    retransmit_pct    100 * retransmits / segments sent, segments = ceil(sum_sent.bytes / MSS),
                      MSS = start.tcp_mss if set (-M) else start.tcp_mss_default
    congestion_control end.sender_tcp_congestion (falls back to the -C value)
    mean_rtt_ms       mean of end.streams[].sender.mean_rtt (usec, kernel srtt samples) / 1000
    max_cwnd_bytes    max of end.streams[].sender.max_snd_cwnd
    """
    text = (text or '').strip()
    if not text:
        return None, 'no output'
    try:
        data = json.loads(text)
    except ValueError:
        # iperf3 killed mid-run, or a non-JSON error line before the document
        first = text.splitlines()[0].strip()
        return None, 'output is not JSON: %s' % first[:200]
    if not isinstance(data, dict):
        return None, 'unexpected JSON output'
    if data.get('error'):
        return None, str(data['error'])
    start = data.get('start') or {}
    end = data.get('end') or {}
    sent = end.get('sum_sent') or {}
    received = end.get('sum_received') or {}
    if 'bits_per_second' not in received:
        return None, 'no end.sum_received in the JSON output (UDP test or interrupted run)'
    mss = start.get('tcp_mss') or start.get('tcp_mss_default') or DEFAULT_MSS
    retransmits = sent.get('retransmits')
    bytes_sent = sent.get('bytes') or 0
    segments = int(math.ceil(float(bytes_sent) / mss)) if bytes_sent else 0
    retransmit_pct = None
    if retransmits is not None and segments:
        retransmit_pct = round(100.0 * retransmits / segments, 4)
    senders = [s.get('sender') or {} for s in end.get('streams') or []]
    rtts = [s['mean_rtt'] for s in senders if s.get('mean_rtt') is not None]
    cwnds = [s['max_snd_cwnd'] for s in senders if s.get('max_snd_cwnd') is not None]
    result = {
        'throughput_mbps': round(received['bits_per_second'] / 1e6, 3),
        'sent_mbps': round(sent['bits_per_second'] / 1e6, 3) if 'bits_per_second' in sent else None,
        'retransmits': retransmits,
        'retransmit_pct': retransmit_pct,
        'bytes_sent': bytes_sent,
        'mss_bytes': mss,
        'congestion_control': end.get('sender_tcp_congestion') or requested_cc,
        'mean_rtt_ms': round(sum(rtts) / len(rtts) / 1000.0, 3) if rtts else None,
        'max_cwnd_bytes': max(cwnds) if cwnds else None,
        'seconds': sent.get('seconds'),
        'version': start.get('version'),
    }
    return result, None


def iperf3_error_message(error, address, port, congestion_control=None, available_cc=None):
    """A message for an iperf3 failure that says what to check."""
    where = '%s:%s' % (address, port)
    low = error.lower()
    if 'unable to connect' in low or 'connection refused' in low or 'control socket' in low:
        return 'iperf3: %s - is an iperf3 server running on %s?' % (error, where)
    if 'busy' in low:
        return 'iperf3: %s (the iperf3 server on %s runs one test at a time)' % (error, where)
    if 'tcp_congestion' in low or 'congestion control' in low:
        msg = 'iperf3: %s (congestion_control=%s' % (error, congestion_control)
        if available_cc:
            msg += '; available here: %s' % ' '.join(available_cc)
        return msg + ')'
    return 'iperf3 to %s: %s' % (where, error)


# ---------------------------------------------------------------------------------------------
# /proc/net/netstat and TCP Fast Open

TFO_COUNTERS = (
    ('TCPFastOpenActive', 'active_delta'),
    ('TCPFastOpenActiveFail', 'active_fail_delta'),
    ('TCPFastOpenPassive', 'passive_delta'),
    ('TCPFastOpenPassiveFail', 'passive_fail_delta'),
    ('TCPFastOpenCookieReqd', 'cookie_reqd_delta'),
)


def parse_netstat(text):
    """{'TcpExt': {'TCPFastOpenActive': 3, ...}, 'IpExt': {...}} from /proc/net/netstat."""
    result = {}
    header = None
    for line in (text or '').splitlines():
        if ':' not in line:
            continue
        prefix, _sep, rest = line.partition(':')
        fields = rest.split()
        if header is not None and header[0] == prefix:
            values = {}
            for name, value in zip(header[1], fields):
                try:
                    values[name] = int(value)
                except ValueError:
                    continue
            result[prefix] = values
            header = None
        else:
            header = (prefix, fields)
    return result


def tfo_counter_deltas(before, after):
    """TcpExt Fast Open counter deltas (after - before) keyed as in the module's return."""
    old = (before or {}).get('TcpExt', {})
    new = (after or {}).get('TcpExt', {})
    deltas = {}
    for counter, key in TFO_COUNTERS:
        if counter in old and counter in new:
            deltas[key] = new[counter] - old[counter]
        else:
            deltas[key] = None
    return deltas


def tfo_summary(with_ms, without_ms, rtt_avg_ms, acked, deltas, sysctl_value):
    """TFO result: best (min) time to first byte of each kind and the saving in RTTs.

    saved_rtt_ratio = (ttfb_ms_without - ttfb_ms_with) / RTT (ping avg, else the TCP-connect
    avg): about 1.0 when TFO saved the full handshake round trip, about 0 when it did not.
    """
    best_with = round(min(with_ms), 3) if with_ms else None
    best_without = round(min(without_ms), 3) if without_ms else None
    saved = None
    ratio = None
    if best_with is not None and best_without is not None:
        saved = round(best_without - best_with, 3)
        if rtt_avg_ms:
            ratio = round(saved / rtt_avg_ms, 2)
    result = {
        'ttfb_ms_with': best_with,
        'ttfb_ms_without': best_without,
        'saved_ms': saved,
        'saved_rtt_ratio': ratio,
        'samples': len(with_ms or []),
        'syn_data_acked': bool(acked) and all(acked),
        'sysctl': sysctl_value,
    }
    result.update(deltas or dict((key, None) for _c, key in TFO_COUNTERS))
    return result


# ---------------------------------------------------------------------------------------------
# thresholds

# (option, key of the measured value, kind): 'max' misses when measured > limit,
# 'min' misses when measured < limit. The order is the order of the failure message.
THRESHOLDS = (
    ('min_throughput_mbps', 'throughput_mbps', 'min'),
    ('max_loss_pct', 'loss_pct', 'max'),
    ('max_rtt_ms', 'rtt_avg_ms', 'max'),
    ('max_retransmit_pct', 'retransmit_pct', 'max'),
    ('min_path_mtu', 'path_mtu_bytes', 'min'),
)


def format_number(value):
    """60 -> '60', 48.2 -> '48.2', 0.5234 -> '0.523', None -> 'none'."""
    if value is None:
        return 'none'
    if isinstance(value, bool):
        return str(value).lower()
    if float(value) == int(value):
        return str(int(value))
    text = '%.3f' % value
    text = text.rstrip('0').rstrip('.')
    if text in ('0', '-0'):
        return '%.3g' % value
    return text


def evaluate_thresholds(limits, measured):
    """List of missed thresholds, each {name, limit, measured, message}.

    limits: option -> number or None (unset). measured: key -> number or None (None means
    the value could not be measured: that misses every threshold set on it).
    """
    missed = []
    for name, key, kind in THRESHOLDS:
        limit = limits.get(name)
        if limit is None:
            continue
        value = measured.get(key)
        if value is None:
            message = '%s %s: not measured' % (name, format_number(limit))
        elif kind == 'max' and value > limit:
            message = '%s %s < measured %s' % (name, format_number(limit), format_number(value))
        elif kind == 'min' and value < limit:
            message = '%s %s > measured %s' % (name, format_number(limit), format_number(value))
        else:
            continue
        missed.append({'name': name, 'limit': limit, 'measured': value, 'message': message})
    return missed


def failure_message(peer, missed, errors):
    """One message for everything that went wrong; None when nothing did."""
    parts = []
    if errors:
        parts.append('measurement failed for peer %s: %s' % (peer, '; '.join(errors)))
    if missed:
        parts.append('thresholds missed for peer %s: %s' % (peer, '; '.join(m['message'] for m in missed)))
    return ' / '.join(parts) if parts else None


def success_message(peer, result):
    bits = []
    if result.get('rtt_ms'):
        bits.append('rtt %s ms (%s)' % (format_number(result['rtt_ms']['avg']), result.get('rtt_source')))
    if result.get('loss_pct') is not None:
        bits.append('loss %s%%' % format_number(result['loss_pct']))
    if result.get('throughput_mbps') is not None:
        bits.append('%s Mbit/s' % format_number(result['throughput_mbps']))
    if result.get('path_mtu_bytes') is not None:
        bits.append('path MTU %s' % result['path_mtu_bytes'])
    return 'measured peer %s: %s' % (peer, ', '.join(bits) if bits else 'nothing')
