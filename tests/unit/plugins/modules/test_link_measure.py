# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import errno
import os
import socket

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import tfo as tfo_utils
from ansible_collections.longhaul.trainnet.plugins.module_utils.command import CommandResult
from ansible_collections.longhaul.trainnet.plugins.modules import link_measure
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    capture_warnings, fake_get_bin_path, mock, module_patches, patch_module_args, read_fixture, run_main,
)

PEER = '198.18.250.2'
BINS = {
    'ping': '/usr/bin/ping',
    'iperf3': '/usr/bin/iperf3',
}


def fixture(name):
    return read_fixture('link_measure', name)


class FakeHost(object):
    """run_bounded answering from captured outputs.

    The DF probes behave like a path with MTU `mtu`: larger packets get the captured
    "Frag needed (mtu = 1400)" output when `icmp`, else the captured silent timeout.
    """

    def __init__(self, ping_q='ping_q_ok.txt', iperf3='iperf3_wan_bbr.json', mtu=1500, icmp=True,
                 ping_rc=None, iperf3_rc=0, killed=(), ping_stopped=None, silent_once=(), iperf3_first=None):
        self.ping_q = ping_q
        self.iperf3 = iperf3
        self.mtu = mtu
        self.icmp = icmp
        self.ping_rc = ping_rc
        self.iperf3_rc = iperf3_rc
        self.killed = killed
        self.ping_stopped = ping_stopped   # output of a ping stopped at its limit with SIGINT
        self.silent_once = set(silent_once)  # sizes whose first DF probe loses both echo requests
        self.iperf3_first = iperf3_first   # fixture of a first iperf3 run before `iperf3`
        self.calls = []
        self.limits = []
        self.signals = []

    def __call__(self, argv, limit=None, data=None, signal=None):  # pylint: disable=unused-argument
        assert isinstance(argv, list), 'run_bounded must get an argv list'
        self.calls.append(list(argv))
        self.limits.append(limit)
        self.signals.append(signal)
        return CommandResult(*self.answer(argv))

    def answer(self, argv):
        prog = argv[0]
        if prog == BINS['ping'] and '-q' in argv and self.ping_stopped is not None:
            return 124, self.ping_stopped, '', True
        if prog in self.killed:
            return 124, '', '', True
        if prog == BINS['ping'] and '-q' in argv:
            if self.ping_q.startswith('ping_unknown') or self.ping_q.startswith('ping_unreachable'):
                return 2, '', fixture(self.ping_q)
            return (self.ping_rc if self.ping_rc is not None else 0), fixture(self.ping_q), ''
        if prog == BINS['ping'] and '-M' in argv:
            size = int(argv[argv.index('-s') + 1]) + 28
            if size in self.silent_once:
                self.silent_once.discard(size)
                return 1, fixture('ping_df_blackhole_timeout.txt'), ''
            if size <= self.mtu:
                return 0, fixture('ping_df_c2_ok.txt'), ''
            if self.icmp:
                return 1, fixture('ping_df_c2_frag_needed.txt'), ''
            return 1, fixture('ping_df_blackhole_timeout.txt'), ''
        if prog == BINS['iperf3']:
            if self.iperf3_first:
                first, self.iperf3_first = self.iperf3_first, None
                return 1, fixture(first), ''
            return self.iperf3_rc, fixture(self.iperf3), ''
        raise AssertionError('unexpected command %r' % argv)

    def commands(self, prog):
        return [argv for argv in self.calls if argv[0] == BINS[prog]]


REAL_NET = link_measure.Net


class FakeNet(REAL_NET):
    """Sockets and clocks faked; file writes real (tmp_path), /proc reads from fixtures."""

    def __init__(self, resolve_error=None, tcp=None, tfo_error=None, tfo_acked=True, family=socket.AF_INET,
                 files=None, path_rtt_ms=0.05, tfo_lost=0):
        self.clock = 1000.0
        self.resolve_error = resolve_error
        self.tcp = tcp if tcp is not None else [(150.0 + i, None) for i in range(10)]
        self.tfo_error = tfo_error
        self.tfo_acked = tfo_acked
        self.path_rtt_ms = path_rtt_ms     # the fake path: TFO answers take 1 RTT, others 2
        self.tfo_lost = tfo_lost           # the first N requests lose their SYN and time out
        self.family = family
        self.tcp_calls = []
        self.tfo_calls = []
        self.netstat_reads = 0
        self.files = {
            link_measure.TFO_SYSCTL: '1\n',
            link_measure.CC_AVAILABLE: 'reno bbr cubic\n',
        }
        self.files.update(files or {})

    def monotonic(self):
        self.clock += 0.5
        return self.clock

    def now(self):
        return 1796019686.0

    def sleep(self, seconds):
        self.clock += seconds

    def hostname(self):
        return 'src-host'

    def resolve(self, peer):
        if self.resolve_error:
            raise socket.gaierror(-3, self.resolve_error)
        return self.family, PEER if peer in (PEER, 'peer.lab') else peer

    def read(self, path):
        if path == link_measure.NETSTAT:
            self.netstat_reads += 1
            return fixture('netstat_before.txt' if self.netstat_reads == 1 else 'netstat_after.txt')
        if path in self.files:
            return self.files[path]
        return REAL_NET.read(self, path)

    def tcp_connect(self, family, address, port, timeout):
        self.tcp_calls.append((family, address, port, timeout))
        index = len(self.tcp_calls) - 1
        return self.tcp[index] if index < len(self.tcp) else (None, 'timed out after 2.0 s')

    def tfo_request(self, address, port, fastopen, timeout):
        self.tfo_calls.append((address, port, fastopen, timeout))
        self.clock += 0.1
        if self.tfo_error:
            return None, None, self.tfo_error
        if len(self.tfo_calls) <= self.tfo_lost:
            self.clock += timeout
            return None, None, 'no answer within %s s' % timeout
        # the cookie-fetching TFO connection (no cookie yet) takes two round trips like a plain one
        cookie = fastopen and any(call[2] for call in self.tfo_calls[:-1])
        rtts = 1 if cookie else 2
        return rtts * self.path_rtt_ms + 0.4 + 0.1 * len(self.tfo_calls), \
            (self.tfo_acked if fastopen else None), None


def run_module(args, host=None, net=None, check_mode=False, bins=None):
    host = host or FakeHost()
    net = net or FakeNet()
    paths = BINS if bins is None else bins
    if check_mode:
        args = dict(args, _ansible_check_mode=True)

    def run_command(self, argv, **kwargs):  # pylint: disable=unused-argument
        raise AssertionError('commands must run through run_bounded, not run_command: %r' % argv)

    with patch_module_args(args):
        with module_patches(get_bin_path=fake_get_bin_path(paths), run_command=run_command):
            with mock.patch.object(link_measure, 'Net', return_value=net):
                with mock.patch.object(link_measure, 'run_bounded', host):
                    return run_main(link_measure.main)


RETURN_KEYS = {
    'peer', 'peer_address', 'rtt_ms', 'jitter_ms', 'loss_pct', 'rtt_source', 'probes_sent', 'throughput_mbps',
    'retransmits', 'retransmit_pct', 'congestion_control', 'mean_rtt_ms', 'max_cwnd_bytes', 'path_mtu_bytes',
    'pmtu_blackhole', 'pmtu_probes', 'tfo', 'thresholds_missed', 'errors', 'duration_s', 'prometheus_file',
    'msg', 'changed',
}


# --------------------------------------------------------------------------- success paths

def test_default_measurement():
    host = FakeHost()
    result = run_module({'peer': PEER}, host)
    assert 'failed' not in result, result['msg']
    assert set(result) == RETURN_KEYS
    assert result['changed'] is False
    assert result['rtt_source'] == 'icmp'
    assert result['rtt_ms'] == {'min': 0.038, 'avg': 0.05, 'max': 0.072, 'mdev': 0.004}
    assert result['jitter_ms'] == 0.004
    assert result['loss_pct'] == 0.0
    assert result['probes_sent'] == 200
    assert result['throughput_mbps'] == 36.441
    assert result['retransmits'] == 2423
    assert result['retransmit_pct'] == 13.1857
    assert result['congestion_control'] == 'bbr'
    assert result['mean_rtt_ms'] == 212.82
    assert result['max_cwnd_bytes'] == 2794640
    assert result['path_mtu_bytes'] == 1500
    assert result['pmtu_blackhole'] is False
    assert [p['size'] for p in result['pmtu_probes']] == [1500]
    assert result['thresholds_missed'] == [] and result['errors'] == []
    assert result['prometheus_file'] is None
    assert result['msg'] == 'measured peer 198.18.250.2: rtt 0.05 ms (icmp), loss 0%, 36.441 Mbit/s, path MTU 1500'
    # tfo=true, tfo_port=0: sysctl and counters only, no connections
    assert result['tfo']['port'] == 0
    assert result['tfo']['ttfb_ms_with'] is None
    assert result['tfo']['sysctl'] == 1
    # every command: argv list, bounded by the module itself (no coreutils `timeout` wrapper)
    assert all(limit is not None and limit >= 1 for limit in host.limits)
    assert host.commands('ping')[0] == ['/usr/bin/ping', '-n', '-q', '-c', '200', '-i', '0.005', '-W', '1', PEER]
    assert host.commands('iperf3') == [['/usr/bin/iperf3', '-c', PEER, '-p', '5201', '-t', '10', '-J',
                                        '--connect-timeout', '7500']]


def test_command_order_and_timeouts():
    host = FakeHost()
    run_module({'peer': PEER}, host)
    progs = [argv[0] for argv in host.calls]
    assert progs == ['/usr/bin/ping', '/usr/bin/ping', '/usr/bin/iperf3']
    ping_limit, _df_limit, iperf3_limit = host.limits
    assert ping_limit == 9           # 200 x max(0.005 x 3, 0.015) + 1 + 5
    assert iperf3_limit == 25        # duration + 10 + 5
    # the RTT ping is stopped with SIGINT, so it still prints its statistics
    assert host.signals == ['INT', None, None]


# A ping -c 5000 -i 0.002 stopped by SIGINT across a 150 ms RTT (captured on the lab)
PING_STOPPED = '''PING 198.18.2.11 (198.18.2.11) 56(84) bytes of data.

--- 198.18.2.11 ping statistics ---
346 packets transmitted, 324 received, 6.35838% packet loss, time 2991ms
rtt min/avg/max/mdev = 150.181/150.407/155.094/0.344 ms, pipe 20
'''


def test_fast_ping_gets_time_for_its_real_rate():
    # Bug: ping_count=5000 ping_interval=0.002 was stopped at 5000 x 0.002 x 3 + 6 = 36 s, but
    # iputils sends about one probe per 9 ms across a long RTT (43 s for 5000): killed without
    # statistics, the module fell back to TCP connects.
    host = FakeHost()
    run_module({'peer': PEER, 'ping_count': 5000, 'ping_interval': 0.002, 'timeout': 120}, host)
    assert (host.limits[0], host.signals[0]) == (81, 'INT')    # 5000 x 0.015 + 1 + 5
    # the overall timeout bounds it, leaving iperf3 its duration + 10 s
    host = FakeHost()
    run_module({'peer': PEER, 'ping_count': 5000, 'ping_interval': 0.002}, host)
    assert 35 <= host.limits[0] <= 60 - 20


def test_ping_stopped_at_its_limit_keeps_icmp_results(monkeypatch):
    warnings = capture_warnings(monkeypatch)
    net = FakeNet()
    result = run_module({'peer': PEER, 'ping_count': 5000, 'ping_interval': 0.002},
                        FakeHost(ping_stopped=PING_STOPPED), net)
    assert 'failed' not in result, result['msg']
    assert net.tcp_calls == []                       # no TCP-connect fallback
    assert result['rtt_source'] == 'icmp' and result['probes_sent'] == 346
    assert result['rtt_ms']['avg'] == 150.407
    # the 20 requests in flight when ping stopped are not counted as lost: 2 of 326
    assert result['loss_pct'] == 0.613
    assert any('ping: stopped after' in w and '346 of 5000' in w and 'raise timeout' in w
               for w in warnings), warnings
    assert result['path_mtu_bytes'] == 1500 and result['throughput_mbps'] == 36.441


def test_name_resolves_once():
    host = FakeHost()
    result = run_module({'peer': 'peer.lab', 'iperf3_port': 5999, 'congestion_control': 'cubic',
                         'duration': 3}, host)
    assert result['peer'] == 'peer.lab'
    assert result['peer_address'] == PEER
    assert host.commands('iperf3')[0] == ['/usr/bin/iperf3', '-c', PEER, '-p', '5999', '-t', '3', '-J',
                                          '--connect-timeout', '7500', '-C', 'cubic']


def test_pmtu_with_icmp_frag_needed():
    result = run_module({'peer': PEER, 'iperf3': False, 'min_path_mtu': 1400}, FakeHost(mtu=1400))
    assert 'failed' not in result
    assert result['path_mtu_bytes'] == 1400
    assert result['pmtu_blackhole'] is False
    assert [(p['size'], p['outcome'], p['mtu_hint']) for p in result['pmtu_probes']] == [
        (1500, 'too_big', 1400), (1400, 'ok', None)]


def test_pmtu_blackhole():
    host = FakeHost(mtu=1400, icmp=False)
    result = run_module({'peer': PEER, 'iperf3': False, 'min_path_mtu': 1500}, host)
    assert result['failed'] is True
    assert result['msg'] == 'thresholds missed for peer 198.18.250.2: min_path_mtu 1500 > measured 1400'
    assert result['path_mtu_bytes'] == 1400
    assert result['pmtu_blackhole'] is True
    # 11 probes; the 5 sizes above 1400 vanished and were each probed twice
    assert len(host.commands('ping')) == 1 + 11 + 5
    # linger from the measured rtt max 0.072 ms: the 0.3 s minimum
    assert host.commands('ping')[1][-2] == '0.3'


def test_tfo_timing_saves_one_rtt():
    # Bug: the fake answered 150.7/301.4 ms on a 0.05 ms ping path and the test asserted a
    # ratio of 3014. The fake path now has the ping fixture's RTT: TFO answers in one RTT.
    net = FakeNet(path_rtt_ms=151.095)
    result = run_module({'peer': PEER, 'tfo_port': 7007, 'iperf3': False},
                        FakeHost(ping_q='ping_q_wan_150ms.txt'), net)
    assert 'failed' not in result, result['msg']
    tfo = result['tfo']
    # the best (first) of each kind: without = 2 RTT + 0.5 (1st call), with = 1 RTT + 0.9 (5th call)
    assert tfo['ttfb_ms_without'] == round(2 * 151.095 + 0.5, 3)
    assert tfo["ttfb_ms_with"] == round(151.095 + 0.9, 3)
    assert tfo['saved_ms'] == round(tfo['ttfb_ms_without'] - tfo['ttfb_ms_with'], 3)
    assert 0.95 <= tfo['saved_rtt_ratio'] <= 1.05
    assert tfo['saved_rtt_ratio'] == round(tfo['saved_ms'] / 151.095, 2)
    assert tfo['syn_data_acked'] is True
    assert tfo['active_delta'] == 12
    assert tfo['error'] is None and tfo['retries'] == 0
    # 3 without, 1 priming with TFO, 3 timed with TFO
    assert [c[2] for c in net.tfo_calls] == [False] * 3 + [True] * 4
    assert all(c[1] == 7007 for c in net.tfo_calls)


def test_tfo_waits_for_retransmission_timeouts_at_long_rtt():
    # Bug: a fixed 2 s per request; one lost SYN (RTO 1 s) at 200 ms RTT plus the request
    # missed it. Now two RTOs (1 + 2 s) + 4 RTT + 0.5 s.
    net = FakeNet(path_rtt_ms=151.095)
    run_module({'peer': PEER, 'tfo_port': 7007, 'iperf3': False}, FakeHost(ping_q='ping_q_wan_150ms.txt'), net)
    assert {c[3] for c in net.tfo_calls} == {round(3 + 4 * 0.172053 + 0.5, 3)}


def test_tfo_lost_syn_is_retried_and_the_link_is_not_failed():
    # Bug: one lost SYN failed the TFO timing and with it the whole pair.
    net = FakeNet(path_rtt_ms=151.095, tfo_lost=1)
    result = run_module({'peer': PEER, 'tfo_port': 7007, 'iperf3': False},
                        FakeHost(ping_q='ping_q_wan_150ms.txt'), net)
    assert 'failed' not in result, result['msg']
    assert result['tfo']['error'] is None and result['tfo']['retries'] == 1
    assert len(net.tfo_calls) == 8 and result['tfo']['saved_rtt_ratio'] is not None


def test_tfo_failure_is_a_sub_measurement_failure(monkeypatch):
    warnings = capture_warnings(monkeypatch)
    net = FakeNet(path_rtt_ms=151.095, tfo_lost=100)
    result = run_module({'peer': PEER, 'tfo_port': 7007}, FakeHost(ping_q='ping_q_wan_150ms.txt'), net)
    assert 'failed' not in result, result['msg']
    assert result['errors'] == []
    assert result['tfo']['error'].startswith('no answer within')
    assert len(net.tfo_calls) == link_measure.TFO_ATTEMPTS
    assert result['throughput_mbps'] == 36.441 and result['path_mtu_bytes'] == 1500
    assert any(w.startswith('tfo: 198.18.250.2:7007: no answer within') for w in warnings), warnings


def test_tfo_refused_is_reported_with_hint_not_retried(monkeypatch):
    warnings = capture_warnings(monkeypatch)
    net = FakeNet(tfo_error='Connection refused [ECONNREFUSED]')
    result = run_module({'peer': PEER, 'tfo_port': 7007, 'iperf3': False}, net=net)
    assert 'failed' not in result
    assert result['tfo']['error'] == ('Connection refused [ECONNREFUSED] - is the TFO echo server running on '
                                      '198.18.250.2:7007?')
    assert len(net.tfo_calls) == 1
    assert len(warnings) == 1 and 'ECONNREFUSED' in warnings[0]


def test_tfo_client_disabled_hint():
    net = FakeNet(tfo_error='Operation not supported [EOPNOTSUPP]', files={link_measure.TFO_SYSCTL: '0\n'})
    result = run_module({'peer': PEER, 'tfo_port': 7007, 'iperf3': False}, net=net)
    assert 'client TFO is off here (net.ipv4.tcp_fastopen=0, needs bit 1)' in result['tfo']['error']


def test_tfo_false():
    result = run_module({'peer': PEER, 'tfo': False, 'iperf3': False})
    assert result['tfo'] is None


# --------------------------------------------------------------------------- RTT fallback

def test_icmp_filtered_falls_back_to_tcp_connect():
    net = FakeNet(tcp=[(150.0, None), (152.0, None), (None, 'timed out after 2.0 s')] + [(151.0, None)] * 7)
    host = FakeHost(ping_q='ping_q_total_loss.txt', ping_rc=1)
    result = run_module({'peer': PEER, 'iperf3': False}, host, net)
    assert 'failed' not in result, result['msg']
    assert result['rtt_source'] == 'tcp_connect'
    assert result['probes_sent'] == 10
    assert result['loss_pct'] == 10.0
    assert result['rtt_ms']['min'] == 150.0 and result['rtt_ms']['max'] == 152.0
    assert result['jitter_ms'] == result['rtt_ms']['mdev']
    assert all(call[2] == 22 for call in net.tcp_calls)
    # no path MTU probes without ICMP echo, and a warning says so
    assert result['path_mtu_bytes'] is None and result['pmtu_blackhole'] is None
    assert len(host.commands('ping')) == 1


def test_tcp_fallback_gives_up_and_fails():
    net = FakeNet(tcp=[(None, 'timed out after 2.0 s')] * 10)
    host = FakeHost(ping_q='ping_q_total_loss.txt', ping_rc=1)
    result = run_module({'peer': PEER, 'iperf3': False, 'tcp_port': 443}, host, net)
    assert result['failed'] is True
    assert len(net.tcp_calls) == 3
    assert result['loss_pct'] == 100.0
    assert result['rtt_ms'] is None
    assert result['msg'] == ('measurement failed for peer 198.18.250.2: peer 198.18.250.2 unreachable: no ICMP '
                             'echo reply to 20 requests, and no TCP answer on port 443 (timed out after 2.0 s)')


def test_ping_error_falls_back_with_its_message():
    net = FakeNet(tcp=[(None, 'Network is unreachable (ENETUNREACH)')] * 3)
    host = FakeHost(ping_q='ping_unreachable.txt')
    result = run_module({'peer': PEER, 'iperf3': False, 'pmtu': False, 'tfo': False}, host, net)
    assert 'ping: connect: Network is unreachable' in result['msg']
    assert 'ENETUNREACH' in result['msg']


def test_partial_loss_threshold_and_throughput_in_one_message():
    host = FakeHost(ping_q='ping_q_partial_loss.txt', iperf3='iperf3_wan_cubic.json')
    result = run_module({'peer': PEER, 'min_throughput_mbps': 60, 'max_loss_pct': 0.3, 'max_rtt_ms': 100,
                         'max_retransmit_pct': 10}, host)
    assert result['failed'] is True
    assert result['msg'] == ('thresholds missed for peer 198.18.250.2: min_throughput_mbps 60 > measured 39.755; '
                             'max_loss_pct 0.3 < measured 6')
    assert [m['name'] for m in result['thresholds_missed']] == ['min_throughput_mbps', 'max_loss_pct']
    # results come back with the failure
    assert result['throughput_mbps'] == 39.755 and result['loss_pct'] == 6.0


# --------------------------------------------------------------------------- iperf3 failures

@pytest.mark.parametrize('name, message', [
    ('iperf3_refused.json', 'iperf3: unable to connect to server: Connection refused - is an iperf3 server '
                            'running on 198.18.250.2:5201?'),
    ('iperf3_connect_timeout.json', 'iperf3: unable to connect to server: Connection timed out - is an iperf3 '
                                    'server running on 198.18.250.2:5201?'),
    ('iperf3_busy.json', 'iperf3: the server is busy running a test. try again later (the iperf3 server on '
                         '198.18.250.2:5201 runs one test at a time)'),
])
def test_iperf3_failures(name, message):
    result = run_module({'peer': PEER}, FakeHost(iperf3=name))
    assert result['failed'] is True
    assert result['errors'] == [message]
    assert result['msg'] == 'measurement failed for peer 198.18.250.2: ' + message
    # the other measurements still ran and are returned
    assert result['rtt_ms']['avg'] == 0.05 and result['path_mtu_bytes'] == 1500
    assert result['throughput_mbps'] is None


def test_iperf3_bad_congestion_control_lists_available():
    result = run_module({'peer': PEER, 'congestion_control': 'nosuchcc'}, FakeHost(iperf3='iperf3_bad_cc.json'))
    assert result['errors'] == ['iperf3: unable to set TCP_CONGESTION: Supplied congestion control algorithm not '
                                'supported on this host (congestion_control=nosuchcc; available here: reno bbr cubic)']


def test_iperf3_killed_by_timeout():
    result = run_module({'peer': PEER}, FakeHost(killed=('/usr/bin/iperf3',)))
    assert result['errors'] == ['iperf3 to 198.18.250.2:5201: no result within 25 s (killed): no output']


def test_iperf3_missing():
    bins = dict(BINS)
    del bins['iperf3']
    result = run_module({'peer': PEER}, bins=bins)
    assert result['errors'] == ['iperf3: not found on this host (install iperf3 or set iperf3=false)']


def test_commands_are_bounded_without_coreutils_timeout():
    # Bug: without coreutils `timeout` the commands ran with no time limit at all.
    host = FakeHost()
    result = run_module({'peer': PEER}, host, bins=dict(BINS))
    assert 'failed' not in result
    assert [argv[0] for argv in host.calls] == ['/usr/bin/ping', '/usr/bin/ping', '/usr/bin/iperf3']
    assert all(limit is not None and 1 <= limit <= 60 for limit in host.limits), host.limits


def test_pmtu_probe_that_lost_both_echoes_is_probed_again():
    # Bug: on a lossy link one DF probe losing both echo requests read as "too big" and a black hole.
    host = FakeHost(silent_once={1500})
    result = run_module({'peer': PEER, 'iperf3': False}, host)
    assert result['path_mtu_bytes'] == 1500 and result['pmtu_blackhole'] is False
    assert [p['size'] for p in result['pmtu_probes']] == [1500]
    assert len(host.commands('ping')) == 1 + 2


def test_iperf3_connect_timeout_is_tried_once_more(monkeypatch):
    warnings = capture_warnings(monkeypatch)
    host = FakeHost(iperf3_first='iperf3_connect_timeout.json')
    result = run_module({'peer': PEER}, host)
    assert 'failed' not in result, result['msg']
    assert result['throughput_mbps'] == 36.441
    assert len(host.commands('iperf3')) == 2
    assert any('trying once more' in w for w in warnings)


# --------------------------------------------------------------------------- textfile

def prom_samples(path):
    with open(path) as handle:
        return dict(line.rsplit(' ', 1) for line in handle.read().splitlines() if not line.startswith('#'))


def test_textfile_written_atomically(tmp_path):
    result = run_module({'peer': PEER, 'textfile_dir': str(tmp_path)})
    path = str(tmp_path / 'trainnet_link_198.18.250.2.prom')
    assert result['prometheus_file'] == path
    assert result['changed'] is False
    assert os.listdir(str(tmp_path)) == ['trainnet_link_198.18.250.2.prom']   # no temp file left
    assert oct(os.stat(path).st_mode & 0o777) == '0o644'
    samples = prom_samples(path)
    labels = '{peer="198.18.250.2",source="src-host"}'
    assert samples['trainnet_link_rtt_seconds' + labels] == '5e-05'
    assert samples['trainnet_link_throughput_bits_per_second' + labels] == '36441000'
    assert samples['trainnet_link_path_mtu_bytes' + labels] == '1500'
    assert samples['trainnet_link_last_success_timestamp_seconds' + labels] == '1796019686'


def test_textfile_keeps_last_success_on_failure(tmp_path):
    path = tmp_path / 'trainnet_link_198.18.250.2.prom'
    path.write_text(u'trainnet_link_last_success_timestamp_seconds{peer="198.18.250.2",source="src-host"} 1700000000\n')
    result = run_module({'peer': PEER, 'textfile_dir': str(tmp_path)}, FakeHost(iperf3='iperf3_refused.json'))
    assert result['failed'] is True
    samples = prom_samples(str(path))
    labels = '{peer="198.18.250.2",source="src-host"}'
    assert samples['trainnet_link_last_success_timestamp_seconds' + labels] == '1700000000'
    assert 'trainnet_link_throughput_bits_per_second' + labels not in samples
    assert samples['trainnet_link_rtt_seconds' + labels] == '5e-05'


def test_textfile_not_written_in_check_mode(tmp_path):
    host = FakeHost()
    result = run_module({'peer': PEER, 'textfile_dir': str(tmp_path)}, host, check_mode=True)
    assert 'failed' not in result
    assert result['changed'] is False
    assert os.listdir(str(tmp_path)) == []
    assert result['prometheus_file'] == str(tmp_path / 'trainnet_link_198.18.250.2.prom')
    assert result['msg'].endswith('(check mode: %s not written)' % result['prometheus_file'])
    # the measurement itself runs in check mode
    assert len(host.commands('iperf3')) == 1


def test_textfile_missing_dir_fails(tmp_path):
    result = run_module({'peer': PEER, 'textfile_dir': str(tmp_path / 'nope')})
    assert result['failed'] is True
    assert result['errors'] == ['textfile: directory %s does not exist' % (tmp_path / 'nope')]


def test_textfile_write_error(tmp_path):
    net = FakeNet()

    def refuse(directory, name, text):
        raise OSError(errno.EACCES, 'Permission denied')
    net.write_textfile = refuse
    result = run_module({'peer': PEER, 'textfile_dir': str(tmp_path)}, net=net)
    assert result['errors'] == ['textfile: cannot write %s: Permission denied [EACCES]' % (
        tmp_path / 'trainnet_link_198.18.250.2.prom')]


# --------------------------------------------------------------------------- options

def test_resolution_failure():
    host = FakeHost()
    result = run_module({'peer': 'nosuchhost.invalid'}, host, FakeNet(resolve_error='Temporary failure in name resolution'))
    assert result['failed'] is True
    assert result['msg'] == ('measurement failed for peer nosuchhost.invalid: cannot resolve peer nosuchhost.invalid: '
                             'Temporary failure in name resolution')
    assert host.calls == []
    assert result['peer_address'] is None


@pytest.mark.parametrize('args, message', [
    ({'iperf3': False, 'min_throughput_mbps': 5}, 'min_throughput_mbps needs iperf3=true'),
    ({'iperf3': False, 'max_retransmit_pct': 5}, 'max_retransmit_pct needs iperf3=true'),
    ({'pmtu': False, 'min_path_mtu': 1400}, 'min_path_mtu needs pmtu=true'),
    ({'timeout': 19}, 'timeout 19 is too short for iperf3 duration 10 (needs at least duration + 10 s)'),
    ({'ping_interval': 0.001}, 'ping_interval must be at least 0.002 s'),
    ({'pmtu_max': 500}, 'pmtu_max must be 576-65535'),
    ({'tcp_port': 0}, 'tcp_port must be 1-65535'),
    ({'max_loss_pct': -1}, 'max_loss_pct must not be negative'),
])
def test_invalid_options(args, message):
    host = FakeHost()
    result = run_module(dict(args, peer=PEER), host)
    assert result['failed'] is True
    assert result['msg'] == 'invalid options: ' + message
    assert host.calls == []


def test_wrong_type_is_a_clear_error():
    result = run_module({'peer': PEER, 'max_rtt_ms': 'fast'})
    assert result['failed'] is True
    assert "max_rtt_ms" in result['msg'] and 'float' in result['msg']


def test_overall_timeout_skips_steps():
    net = FakeNet()
    # each monotonic() call advances 0.5 s; a 20 s bound leaves no room for 10 s of iperf3 at the end
    result = run_module({'peer': PEER, 'timeout': 20, 'tfo_port': 7007}, FakeHost(), net)
    assert result['failed'] is True
    assert any(e.startswith('timeout: iperf3') for e in result['errors']), result['errors']


def test_ipv6_pmtu_floor():
    host = FakeHost()
    result = run_module({'peer': 'fd00::2', 'iperf3': False, 'pmtu_max': 1000}, host,
                        FakeNet(family=socket.AF_INET6))
    assert result['errors'] == ['pmtu: pmtu_max 1000 is below the minimum MTU 1280 of IPv6']


# --------------------------------------------------------------------------- the real Net on loopback only

@contextlib.contextmanager
def loopback_tfo_server(address):
    """The collection's own TFO server (module_utils/tfo.py) in a thread, bounded to 20 s."""
    import threading
    import time
    listener = tfo_utils.listen(address, 0)
    port = listener.getsockname()[1]
    served = []
    thread = threading.Thread(target=lambda: served.append(tfo_utils.serve_on(listener, time.monotonic() + 20, 12)))
    thread.daemon = True
    thread.start()
    try:
        yield port, served
    finally:
        # one connection each until max_connections ends it early
        for _i in range(12):
            if not thread.is_alive():
                break
            tfo_utils.request(address, port, False, 1.0)
        thread.join(5)
        assert not thread.is_alive()


def closed_loopback_port(address='127.0.0.1'):
    sock = socket.socket(socket.AF_INET6 if ':' in address else socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((address, 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def ipv6_loopback():
    try:
        closed_loopback_port('::1')
        return True
    except OSError:
        return False


LOOPBACKS = ['127.0.0.1', pytest.param('::1', marks=pytest.mark.skipif(not ipv6_loopback(), reason='no ::1'))]


@pytest.mark.parametrize('address', LOOPBACKS)
def test_real_tcp_connect_open_and_closed_port(address):
    net = REAL_NET()
    family = socket.AF_INET6 if ':' in address else socket.AF_INET
    with loopback_tfo_server(address) as (port, _served):
        rtt, why = net.tcp_connect(family, address, port, 2.0)
        assert why is None and 0 <= rtt < 1000
    rtt, why = net.tcp_connect(family, address, closed_loopback_port(address), 2.0)
    assert why is None and 0 <= rtt < 1000   # the RST is an answer too


@pytest.mark.parametrize('address', LOOPBACKS)
def test_real_tfo_request_with_and_without(address):
    net = REAL_NET()
    with loopback_tfo_server(address) as (port, served):
        ttfb, acked, why = net.tfo_request(address, port, False, 2.0)
        assert why is None and ttfb > 0 and acked is None
        ttfb, acked, why = net.tfo_request(address, port, True, 2.0)   # fetches the cookie
        assert why is None, why
        ttfb, acked, why = net.tfo_request(address, port, True, 2.0)
        assert why is None and ttfb > 0
        with open('/proc/sys/net/ipv4/tcp_fastopen') as handle:
            mode = int(handle.read())
        # client bit 1 and server bit 2 on: the second TFO request carried its data in the SYN
        assert acked is (mode & 3 == 3)
    assert served and served[0] >= 3


@pytest.mark.parametrize('address', LOOPBACKS)
def test_real_tfo_request_refused(address):
    ttfb, acked, why = REAL_NET().tfo_request(address, closed_loopback_port(address), False, 2.0)
    assert (ttfb, acked) == (None, None)
    assert 'ECONNREFUSED' in why


def test_real_write_textfile_replaces_atomically(tmp_path):
    net = REAL_NET()
    net.write_textfile(str(tmp_path), 'x.prom', 'a 1\n')
    net.write_textfile(str(tmp_path), 'x.prom', 'a 2\n')
    assert os.listdir(str(tmp_path)) == ['x.prom']
    assert (tmp_path / 'x.prom').read_text() == 'a 2\n'
    assert net.read(str(tmp_path / 'x.prom')) == 'a 2\n'
    assert net.read(str(tmp_path / 'missing')) is None


def test_real_write_textfile_cleans_up_on_error(tmp_path):
    os.mkdir(str(tmp_path / 'x.prom'))          # rename onto a directory fails
    with pytest.raises(OSError):
        REAL_NET().write_textfile(str(tmp_path), 'x.prom', 'a 1\n')
    assert os.listdir(str(tmp_path)) == ['x.prom']
