# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import link_measure as lm

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures', 'link_measure')


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


# --------------------------------------------------------------------------- ping summary

@pytest.mark.parametrize('name, sent, received, errors, loss, rtt', [
    ('ping_q_ok.txt', 200, 200, 0, 0.0, {'min': 0.038, 'avg': 0.05, 'max': 0.072, 'mdev': 0.004}),
    ('ping_q_partial_loss.txt', 200, 188, 0, 6.0, {'min': 0.04, 'avg': 0.055, 'max': 0.128, 'mdev': 0.011}),
    ('ping_q_wan_150ms.txt', 200, 200, 0, 0.0, {'min': 150.342, 'avg': 151.095, 'max': 172.053, 'mdev': 2.412}),
    ('ping_q_total_loss.txt', 20, 0, 0, 100.0, None),
    ('ping_q_host_unreachable.txt', 10, 0, 6, 100.0, None),
    ('ping_df_c2_frag_needed.txt', 2, 0, 2, 100.0, None),
])
def test_parse_ping_summary_fixtures(name, sent, received, errors, loss, rtt):
    summary = lm.parse_ping_summary(fixture(name))
    assert summary['transmitted'] == sent
    assert summary['received'] == received
    assert summary['errors'] == errors
    assert summary['loss_pct'] == loss
    assert summary['rtt_ms'] == rtt


def test_parse_ping_summary_loss_is_computed_not_rounded():
    text = '3 packets transmitted, 2 received, 33% packet loss, time 2003ms\n' \
           'rtt min/avg/max/mdev = 1.000/2.000/3.000/0.500 ms\n'
    assert lm.parse_ping_summary(text)['loss_pct'] == 33.333


def test_parse_ping_summary_busybox_format():
    # busybox ping (written by hand in its format): no mdev
    text = '--- 10.0.0.1 ping statistics ---\n5 packets transmitted, 5 packets received, 0% packet loss\n' \
           'round-trip min/avg/max = 0.046/0.057/0.069 ms\n'
    summary = lm.parse_ping_summary(text)
    assert summary['received'] == 5
    assert summary['rtt_ms'] == {'min': 0.046, 'avg': 0.057, 'max': 0.069, 'mdev': None}


@pytest.mark.parametrize('name, expected', [
    ('ping_unknown_host.txt', 'ping: nosuchhost.invalid: Temporary failure in name resolution'),
    ('ping_unreachable.txt', 'ping: connect: Network is unreachable'),
])
def test_ping_errors_have_no_summary(name, expected):
    assert lm.parse_ping_summary(fixture(name)) is None
    assert lm.ping_error('', fixture(name)) == expected


def test_ping_error_none():
    assert lm.ping_error(fixture('ping_q_ok.txt'), '') is None


def test_ping_argv():
    assert lm.ping_argv('/usr/bin/ping', '198.18.250.2', 200, 0.005, 1) == [
        '/usr/bin/ping', '-n', '-q', '-c', '200', '-i', '0.005', '-W', '1', '198.18.250.2']


@pytest.mark.parametrize('size, ipv6, payload', [(1500, False, '1472'), (576, False, '548'), (1280, True, '1232')])
def test_ping_df_argv(size, ipv6, payload):
    argv = lm.ping_df_argv('/usr/bin/ping', 'peer', size, ipv6, 0.3)
    assert argv == ['/usr/bin/ping', '-n', '-M', 'do', '-s', payload, '-c', '2', '-i', '0.05', '-W', '0.3', 'peer']


def test_rtt_stats_like_ping():
    stats = lm.rtt_stats([150.0, 151.0, 152.0, 153.0])
    assert stats == {'min': 150.0, 'avg': 151.5, 'max': 153.0, 'mdev': 1.118}
    assert lm.rtt_stats([]) is None


# --------------------------------------------------------------------------- DF probes

@pytest.mark.parametrize('name, rc, outcome, hint', [
    ('ping_df_1472_ok.txt', 0, lm.OK, None),
    ('ping_df_c2_ok.txt', 0, lm.OK, None),
    ('ping_df_1372_ok_via_router.txt', 0, lm.OK, None),
    ('ping_df_frag_needed.txt', 1, lm.TOO_BIG, 1400),
    ('ping_df_c2_frag_needed.txt', 1, lm.TOO_BIG, 1400),
    ('ping_df_cached_pmtu.txt', 1, lm.TOO_BIG, 1400),
    ('ping_df_local_mtu1400.txt', 1, lm.TOO_BIG, 1400),
    ('ping_df_1473_local_emsgsize.txt', 1, lm.TOO_BIG, 1500),
    ('ping6_df_local_mtu1400.txt', 1, lm.TOO_BIG, 1400),
    ('ping_df_blackhole_timeout.txt', 1, lm.SILENT, None),
    ('ping_df_veth_peer_drop.txt', 1, lm.SILENT, None),
    ('ping_unreachable.txt', 2, lm.ERROR, None),
])
def test_classify_df_probe_fixtures(name, rc, outcome, hint):
    got, got_hint, detail = lm.classify_df_probe(rc, fixture(name), '')
    assert (got, got_hint) == (outcome, hint)
    assert detail


def test_classify_df_probe_details():
    assert lm.classify_df_probe(1, fixture('ping_df_frag_needed.txt'), '')[2] == 'Frag needed and DF set (mtu = 1400)'
    assert lm.classify_df_probe(1, fixture('ping_df_veth_peer_drop.txt'), '')[2] == \
        'ping: sendmsg: No buffer space available'
    assert lm.classify_df_probe(2, '', fixture('ping_unreachable.txt'))[2] == 'ping: connect: Network is unreachable'


def test_classify_df_probe_ipv6_packet_too_big():
    # iputils format for ICMPv6 type 2 (written by hand)
    text = 'PING fd00::2(fd00::2) 1452 data bytes\nFrom fd00::1 icmp_seq=1 Packet too big: mtu=1400\n\n' \
           '--- fd00::2 ping statistics ---\n1 packets transmitted, 0 received, +1 errors, 100% packet loss, time 0ms\n'
    assert lm.classify_df_probe(1, text, '')[:2] == (lm.TOO_BIG, 1400)


# --------------------------------------------------------------------------- PMTU search

def run_search(path_mtu, icmp=True, floor=576, ceiling=1500, local_mtu=None, blackhole_sizes=None):
    """Drive PmtuSearch against a simulated path; returns the search."""
    search = lm.PmtuSearch(floor, ceiling)
    hinted = set()
    while True:
        size = search.next_size()
        if size is None:
            return search
        if local_mtu and size > local_mtu:
            search.record(size, lm.TOO_BIG, local_mtu, 'message too long, mtu=%d' % local_mtu)
        elif size <= path_mtu and not (blackhole_sizes and size in blackhole_sizes):
            search.record(size, lm.OK)
        elif icmp:
            hinted.add(size)
            search.record(size, lm.TOO_BIG, path_mtu, 'Frag needed and DF set (mtu = %d)' % path_mtu)
        else:
            search.record(size, lm.SILENT)


def test_pmtu_all_fits_is_one_probe():
    search = run_search(1500)
    assert [p['size'] for p in search.probes] == [1500]
    assert search.path_mtu == 1500
    assert search.blackhole is False
    assert search.converged


def test_pmtu_icmp_hint_is_two_probes():
    search = run_search(1400)
    assert [(p['size'], p['outcome']) for p in search.probes] == [(1500, lm.TOO_BIG), (1400, lm.OK)]
    assert search.path_mtu == 1400
    assert search.blackhole is False


def test_pmtu_local_mtu_then_remote_icmp():
    search = run_search(1380, local_mtu=1420)
    assert [p['size'] for p in search.probes] == [1500, 1420, 1380]
    assert search.path_mtu == 1380


def test_pmtu_blackhole_sequence_matches_real_run():
    # the sequence the module produced in the lab with a silent drop above 1400 bytes
    search = run_search(1400, icmp=False)
    assert [p['size'] for p in search.probes] == [1500, 1038, 1269, 1384, 1442, 1413, 1398, 1405, 1401, 1399, 1400]
    assert search.path_mtu == 1400
    assert search.blackhole is True
    assert search.converged


@pytest.mark.parametrize('icmp', [True, False])
def test_pmtu_exact_for_every_mtu_within_budget(icmp):
    for mtu in range(576, 1501):
        search = run_search(mtu, icmp=icmp)
        assert search.path_mtu == mtu, mtu
        assert len(search.probes) <= search.max_probes == 12
        assert search.blackhole is (not icmp and mtu < 1500)


def test_pmtu_nothing_passes():
    search = run_search(500, icmp=False)
    assert search.path_mtu is None
    assert search.blackhole is True
    assert search.probes[-1]['size'] == 576
    assert len(search.probes) <= search.max_probes


def test_pmtu_jumbo_budget():
    search = run_search(8000, icmp=False, ceiling=9000)
    assert search.path_mtu == 8000
    assert len(search.probes) <= search.max_probes == 16


def test_pmtu_wrong_hint_falls_back_to_bisection():
    search = lm.PmtuSearch(576, 1500)
    assert search.next_size() == 1500
    search.record(1500, lm.TOO_BIG, 1450)
    assert search.next_size() == 1450
    search.record(1450, lm.SILENT)
    assert search.next_size() == (576 + 1450) // 2


def test_pmtu_error_stops():
    search = lm.PmtuSearch(576, 1500)
    search.record(search.next_size(), lm.ERROR, None, 'ping: connect: Network is unreachable')
    assert search.next_size() is None
    assert search.error == 'ping: connect: Network is unreachable'
    assert search.path_mtu is None


def test_pmtu_budget_is_a_hard_bound():
    search = lm.PmtuSearch(576, 1500, max_probes=3)
    while True:
        size = search.next_size()
        if size is None:
            break
        search.record(size, lm.SILENT if size > 1000 else lm.OK)
    assert len(search.probes) == 3
    assert search.converged is False
    assert search.path_mtu == 807


def test_pmtu_bad_range():
    with pytest.raises(ValueError):
        lm.PmtuSearch(1280, 1000)


@pytest.mark.parametrize('rtt, linger', [(None, 1.0), (0.05, 0.3), (100.0, 0.35), (600.0, 1.0)])
def test_pmtu_linger(rtt, linger):
    assert lm.pmtu_linger(rtt) == linger


# --------------------------------------------------------------------------- iperf3

def test_parse_iperf3_lan_default():
    result, error = lm.parse_iperf3(fixture('iperf3_default.json'))
    assert error is None
    assert result['throughput_mbps'] == 8029.529
    assert result['retransmits'] == 1035
    # 1035 / ceil(3015835648 / 1448) = 1035 / 2082760
    assert result['retransmit_pct'] == round(100.0 * 1035 / 2082760, 4)
    assert result['congestion_control'] == 'bbr'
    assert result['mean_rtt_ms'] == 0.362
    assert result['max_cwnd_bytes'] == 2224128
    assert result['mss_bytes'] == 1448


@pytest.mark.parametrize('name, cc, mbps, retr, pct, rtt, cwnd', [
    ('iperf3_wan_cubic.json', 'cubic', 39.755, 1349, 7.1645, 250.177, 1821584),
    ('iperf3_wan_bbr.json', 'bbr', 36.441, 2423, 13.1857, 212.82, 2794640),
    ('iperf3_cubic.json', 'cubic', 24268.929, 0, 0.0, 0.039, 4018200),
])
def test_parse_iperf3_fixtures(name, cc, mbps, retr, pct, rtt, cwnd):
    result, error = lm.parse_iperf3(fixture(name), requested_cc='ignored')
    assert error is None
    assert (result['congestion_control'], result['throughput_mbps'], result['retransmits'],
            result['retransmit_pct'], result['mean_rtt_ms'], result['max_cwnd_bytes']) == (cc, mbps, retr, pct, rtt, cwnd)


@pytest.mark.parametrize('name, error', [
    ('iperf3_refused.json', 'unable to connect to server: Connection refused'),
    ('iperf3_unreachable.json', 'unable to connect to server: Network is unreachable'),
    ('iperf3_connect_timeout.json', 'unable to connect to server: Connection timed out'),
    ('iperf3_busy.json', 'the server is busy running a test. try again later'),
    ('iperf3_bad_cc.json', 'unable to set TCP_CONGESTION: Supplied congestion control algorithm not supported on this host'),
    ('iperf3_killed_by_timeout.json', 'interrupt - the client has terminated'),
])
def test_parse_iperf3_errors(name, error):
    assert lm.parse_iperf3(fixture(name)) == (None, error)


def test_parse_iperf3_garbage():
    assert lm.parse_iperf3('') == (None, 'no output')
    assert lm.parse_iperf3('iperf3: error - unable to connect\n{')[1].startswith('output is not JSON: iperf3: error')
    assert lm.parse_iperf3('[]') == (None, 'unexpected JSON output')
    assert lm.parse_iperf3('{"start": {}, "end": {}}')[1].startswith('no end.sum_received')


def test_parse_iperf3_mss_option_and_cc_fallback():
    text = '{"start": {"tcp_mss": 1000, "tcp_mss_default": 1448}, "end": {"sum_sent": ' \
           '{"bytes": 100000, "bits_per_second": 8e6, "retransmits": 5}, ' \
           '"sum_received": {"bits_per_second": 7.5e6}}}'
    result, error = lm.parse_iperf3(text, requested_cc='cubic')
    assert error is None
    assert result['retransmit_pct'] == 5.0
    assert result['congestion_control'] == 'cubic'
    assert result['mean_rtt_ms'] is None and result['max_cwnd_bytes'] is None


def test_iperf3_argv():
    assert lm.iperf3_argv('/usr/bin/iperf3', '198.18.250.2', 5201, 10) == [
        '/usr/bin/iperf3', '-c', '198.18.250.2', '-p', '5201', '-t', '10', '-J', '--connect-timeout', '3000']
    assert lm.iperf3_argv('/usr/bin/iperf3', 'h', 5201, 3, 'bbr')[-2:] == ['-C', 'bbr']


def test_iperf3_error_messages():
    assert lm.iperf3_error_message('unable to connect to server: Connection refused', '198.18.2.10', 5201) == (
        'iperf3: unable to connect to server: Connection refused - is an iperf3 server running on 198.18.2.10:5201?')
    assert 'one test at a time' in lm.iperf3_error_message('the server is busy running a test. try again later', 'h', 1)
    msg = lm.iperf3_error_message('unable to set TCP_CONGESTION: Supplied congestion control algorithm not '
                                  'supported on this host', 'h', 1, 'nosuch', ['reno', 'bbr'])
    assert msg.endswith('(congestion_control=nosuch; available here: reno bbr)')
    assert lm.iperf3_error_message('interrupt - the client has terminated', 'h', 7) == \
        'iperf3 to h:7: interrupt - the client has terminated'


# --------------------------------------------------------------------------- netstat / TFO

def test_parse_netstat_fixture():
    stats = lm.parse_netstat(fixture('netstat_before.txt'))
    assert set(stats) >= {'TcpExt', 'IpExt'}
    assert 'TCPFastOpenActive' in stats['TcpExt']
    assert stats['IpExt']['InOctets'] > 0


def test_tfo_counter_deltas_fixture():
    deltas = lm.tfo_counter_deltas(lm.parse_netstat(fixture('netstat_before.txt')),
                                   lm.parse_netstat(fixture('netstat_after.txt')))
    # /tmp/lm-tfo-probe.py made 12 TFO connections with a cookie between the two snapshots
    assert deltas == {'active_delta': 12, 'active_fail_delta': 0, 'passive_delta': 0,
                      'passive_fail_delta': 0, 'cookie_reqd_delta': 0}


def test_tfo_counter_deltas_missing():
    assert lm.tfo_counter_deltas({}, None)['active_delta'] is None


def test_tfo_summary_real_figures():
    deltas = {'active_delta': 2, 'active_fail_delta': 0, 'passive_delta': 0, 'passive_fail_delta': 0,
              'cookie_reqd_delta': 0}
    tfo = lm.tfo_summary([150.735, 151.2], [301.418, 302.0], 150.708, [True, True], deltas, 1)
    assert tfo['ttfb_ms_with'] == 150.735
    assert tfo['ttfb_ms_without'] == 301.418
    assert tfo['saved_ms'] == 150.683
    assert tfo['saved_rtt_ratio'] == 1.0
    assert tfo['syn_data_acked'] is True
    assert tfo['samples'] == 2
    assert tfo['active_delta'] == 2
    assert tfo['sysctl'] == 1


def test_tfo_summary_not_timed():
    tfo = lm.tfo_summary([], [], 10.0, [], None, 1)
    assert tfo['ttfb_ms_with'] is None and tfo['saved_rtt_ratio'] is None
    assert tfo['syn_data_acked'] is False
    assert tfo['active_delta'] is None


# --------------------------------------------------------------------------- thresholds

@pytest.mark.parametrize('value, text', [
    (60.0, '60'), (48.2, '48.2'), (0.52, '0.52'), (0.5234, '0.523'), (0.0004, '0.0004'),
    (1400, '1400'), (None, 'none'), (True, 'true'),
])
def test_format_number(value, text):
    assert lm.format_number(value) == text


def test_failure_message_example_from_the_spec():
    limits = {'min_throughput_mbps': 60.0, 'max_loss_pct': 0.3, 'max_rtt_ms': 200.0}
    measured = {'throughput_mbps': 48.2, 'loss_pct': 0.52, 'rtt_avg_ms': 150.7}
    missed = lm.evaluate_thresholds(limits, measured)
    assert [m['name'] for m in missed] == ['min_throughput_mbps', 'max_loss_pct']
    assert lm.failure_message('198.18.2.10', missed, []) == (
        'thresholds missed for peer 198.18.2.10: min_throughput_mbps 60 > measured 48.2; '
        'max_loss_pct 0.3 < measured 0.52')
    assert missed[0] == {'name': 'min_throughput_mbps', 'limit': 60.0, 'measured': 48.2,
                         'message': 'min_throughput_mbps 60 > measured 48.2'}


def test_thresholds_boundaries_and_unmeasured():
    limits = {'max_rtt_ms': 150.0, 'min_path_mtu': 1400, 'max_retransmit_pct': 1.0}
    measured = {'rtt_avg_ms': 150.0, 'path_mtu_bytes': None, 'retransmit_pct': 1.5}
    missed = lm.evaluate_thresholds(limits, measured)
    assert [m['message'] for m in missed] == ['max_retransmit_pct 1 < measured 1.5', 'min_path_mtu 1400: not measured']


def test_thresholds_none_set():
    assert lm.evaluate_thresholds({}, {'loss_pct': 100.0}) == []
    assert lm.failure_message('p', [], []) is None


def test_failure_message_errors_and_thresholds():
    missed = [{'message': 'max_loss_pct 1 < measured 2'}]
    msg = lm.failure_message('p', missed, ['iperf3: boom'])
    assert msg == 'measurement failed for peer p: iperf3: boom / thresholds missed for peer p: max_loss_pct 1 < measured 2'


def test_success_message():
    result = {'rtt_ms': {'avg': 150.708}, 'rtt_source': 'icmp', 'loss_pct': 0.0, 'throughput_mbps': 42.245,
              'path_mtu_bytes': 1500}
    assert lm.success_message('p', result) == 'measured peer p: rtt 150.708 ms (icmp), loss 0%, 42.245 Mbit/s, path MTU 1500'
    assert lm.success_message('p', {}) == 'measured peer p: nothing'


def test_ping_time_limit_allows_for_iputils_real_rate():
    assert lm.ping_time_limit(200, 0.005, 1) == 9           # as before: 200 x 0.015 + 6
    assert lm.ping_time_limit(10, 1.0, 1) == 36              # slow pings: 3 x the interval
    assert lm.ping_time_limit(5000, 0.002, 1) == 81          # not 36: iputils needs ~43 s


def test_stopped_ping_loss_excludes_requests_in_flight():
    summary = lm.parse_ping_summary(
        "346 packets transmitted, 324 received, 6.35838% packet loss, time 2991ms\n"
        "rtt min/avg/max/mdev = 150.181/150.407/155.094/0.344 ms, pipe 20\n")
    assert summary['pipe'] == 20 and summary['loss_pct'] == 6.358
    assert lm.stopped_ping_loss(summary) == 0.613
    # never more in flight than unanswered, no pipe: ping's own figure
    assert lm.stopped_ping_loss(dict(summary, received=340)) == 0.0
    assert lm.stopped_ping_loss(dict(summary, pipe=None)) == 6.358
