# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import prometheus as lm

RESULT = {
    'rtt_ms': {'min': 150.296, 'avg': 150.519, 'max': 151.0, 'mdev': 0.7},
    'jitter_ms': 0.7,
    'loss_pct': 0.5,
    'throughput_mbps': 31.474,
    'retransmit_pct': 11.0085,
    'path_mtu_bytes': 1500,
    'pmtu_blackhole': False,
}


def test_render_prometheus():
    text = lm.render_prometheus(RESULT, '198.18.250.2', 'vm', last_success=1796019686.25)
    samples = dict(line.rsplit(' ', 1) for line in text.splitlines() if not line.startswith('#'))
    labels = '{peer="198.18.250.2",source="vm"}'
    assert samples == {
        'trainnet_link_rtt_seconds' + labels: '0.150519',
        'trainnet_link_rtt_min_seconds' + labels: '0.150296',
        'trainnet_link_jitter_seconds' + labels: '0.0007',
        'trainnet_link_loss_ratio' + labels: '0.005',
        'trainnet_link_throughput_bits_per_second' + labels: '31474000',
        'trainnet_link_retransmit_ratio' + labels: '0.110085',
        'trainnet_link_path_mtu_bytes' + labels: '1500',
        'trainnet_link_pmtu_blackhole' + labels: '0',
        'trainnet_link_last_success_timestamp_seconds' + labels: '1796019686',
    }
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not line.startswith('#'):
            name = line.split('{')[0]
            assert lines[index - 2].startswith('# HELP %s ' % name)
            assert lines[index - 1] == '# TYPE %s gauge' % name
    assert text.endswith('\n')


def test_render_prometheus_leaves_out_unmeasured():
    text = lm.render_prometheus({'rtt_ms': None, 'pmtu_blackhole': True}, 'p', 's')
    assert text == ('# HELP trainnet_link_pmtu_blackhole 1 when a packet above the path MTU vanished without an '
                    'ICMP error.\n# TYPE trainnet_link_pmtu_blackhole gauge\n'
                    'trainnet_link_pmtu_blackhole{peer="p",source="s"} 1\n')


def test_render_prometheus_escapes_labels():
    text = lm.render_prometheus({'path_mtu_bytes': 1400}, 'a"b\\c\nd', 'h')
    assert 'peer="a\\"b\\\\c\\nd"' in text


def test_parse_last_success_roundtrip():
    text = lm.render_prometheus(RESULT, 'p', 's', last_success=1796019686)
    assert lm.parse_last_success(text) == 1796019686.0
    assert lm.parse_last_success(lm.render_prometheus(RESULT, 'p', 's')) is None
    assert lm.parse_last_success(None) is None
    assert lm.parse_last_success('trainnet_link_last_success_timestamp_seconds{a="b"} x\n') is None


@pytest.mark.parametrize('peer, name', [
    ('198.18.250.2', 'trainnet_link_198.18.250.2.prom'),
    ('fd00::2', 'trainnet_link_fd00__2.prom'),
    ('use-anchor.lab', 'trainnet_link_use-anchor.lab.prom'),
    ('../etc/x', 'trainnet_link__etc_x.prom'),
    ('', 'trainnet_link__.prom'),
])
def test_prom_file_name(peer, name):
    assert lm.prom_file_name(peer) == name
