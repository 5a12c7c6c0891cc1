# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import errors
from ansible_collections.longhaul.trainnet.plugins.module_utils import kernel_capability as kp
from ansible_collections.longhaul.trainnet.plugins.module_utils import netns
from ansible_collections.longhaul.trainnet.plugins.module_utils import probe_result

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures', 'kernel_capability')


def fixture(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


# --------------------------------------------------------------------------- parsers

@pytest.mark.parametrize('text, expected', [
    ('reno bbr cubic\n', ['reno', 'bbr', 'cubic']),
    (b'reno\tbbr\n', ['reno', 'bbr']),
    ('', []),
    (None, []),
])
def test_parse_word_list(text, expected):
    assert kp.parse_word_list(text) == expected


@pytest.mark.parametrize('text, expected', [
    ('4194304\n', 4194304),
    (b'1\n', 1),
    ('4096\t131072\t6291456\n', 4096),
    ('pfifo_fast\n', None),
    ('', None),
    (None, None),
])
def test_parse_int(text, expected):
    assert kp.parse_int(text) == expected


@pytest.mark.parametrize('release, expected', [
    ('6.18.44-fc-v657', (6, 18)),
    ('5.15.0-119-generic', (5, 15)),
    ('6.1.0-28-amd64', (6, 1)),
    ('garbage', None),
    ('', None),
])
def test_parse_kernel_version(release, expected):
    assert netns.parse_kernel_version(release) == expected


def test_sysctl_path():
    assert kp.sysctl_path('net.core.rmem_max') == '/proc/sys/net/core/rmem_max'


@pytest.mark.parametrize('path, expected', [
    ('kernel/net/ipv4/tcp_bbr.ko', 'tcp_bbr'),
    ('kernel/net/ipv4/tcp_bbr.ko.zst', 'tcp_bbr'),
    ('kernel/net/sched/sch_netem.ko.gz', 'sch_netem'),
    ('kernel/net/netfilter/nf-tables.ko.xz', 'nf_tables'),
])
def test_module_name(path, expected):
    assert kp.module_name(path) == expected


def test_parse_modules_builtin_fixture():
    names = kp.parse_modules_builtin(fixture('modules.builtin'))
    assert {'tcp_bbr', 'tcp_cubic', 'sch_fq_codel', 'tun', 'crc32c_intel'} == names


def test_parse_modules_dep_fixture():
    names = kp.parse_modules_dep(fixture('modules.dep'))
    assert {'tcp_bbr', 'tcp_htcp', 'sch_fq', 'sch_netem', 'wireguard', 'nf_tables'} == names
    # dependencies on the right of the colon are not modules of their own line
    assert 'libchacha20poly1305' not in names


def test_parse_proc_modules_fixture():
    assert kp.parse_proc_modules(fixture('proc_modules')) == {'tcp_bbr', 'sch_fq', 'wireguard', 'libchacha20poly1305'}
    assert kp.parse_proc_modules(None) == set()


@pytest.mark.parametrize('value, client, server', [
    (0, False, False),
    (1, True, False),
    (2, False, True),
    (3, True, True),
    (0x403, True, True),
])
def test_tfo_facts(value, client, server):
    assert kp.tfo_facts(value) == {'value': value, 'client': client, 'server': server}


def test_tfo_facts_missing():
    assert kp.tfo_facts(None) == {'value': None, 'client': False, 'server': False}


def test_interface_facts():
    assert kp.interface_facts('1500\n', 'up\n') == {'mtu': 1500, 'operstate': 'up'}
    assert kp.interface_facts(None, None) == {'mtu': None, 'operstate': 'unknown'}


def test_errno_name():
    assert errors.errno_name(errno.EROFS) == 'EROFS'
    assert errors.errno_name(None) is None
    assert errors.errno_name(99999) == 'errno 99999'


# --------------------------------------------------------------------------- init netns

def test_init_netns_fixed_inode_any_kernel():
    verdict, evidence = netns.decide_init_netns((5, 10), netns_ino=0xEFFFFFF9)
    assert verdict is True
    assert 'NET_NS_INIT_INO' in evidence


def test_init_netns_618_host_observed():
    # measured on Linux 6.18.44: init_net has inode 4026531833 and cookie 3
    verdict, evidence = netns.decide_init_netns((6, 18), netns_ino=4026531833, cookie=3)
    assert verdict is True
    assert evidence.startswith('netns inode 4026531833 == NET_NS_INIT_INO 0xEFFFFFF9')
    assert 'SO_NETNS_COOKIE=3' in evidence


def test_init_netns_618_netns_observed():
    verdict, evidence = netns.decide_init_netns((6, 18), netns_ino=4026532177, cookie=4148,
                                                netdev_backlog_exists=False, allowed_cc_mode=0o444)
    assert verdict is False
    assert '4026532177 != NET_NS_INIT_INO' in evidence


def test_init_netns_cookie_one_before_618():
    verdict, evidence = netns.decide_init_netns((6, 1), netns_ino=4026531992, cookie=1)
    assert verdict is True
    assert evidence.startswith('SO_NETNS_COOKIE=1')


def test_init_netns_cookie_other_before_618():
    verdict, evidence = netns.decide_init_netns((5, 15), netns_ino=4026532300, cookie=4097)
    assert verdict is False
    assert 'SO_NETNS_COOKIE=4097' in evidence


@pytest.mark.parametrize('backlog, mode, expected', [
    (True, 0o644, True),
    (False, 0o444, False),
    (True, 0o444, None),
    (None, 0o644, True),
])
def test_init_netns_heuristics_without_cookie(backlog, mode, expected):
    # Linux 5.10: no SO_NETNS_COOKIE, dynamic init inode
    verdict, evidence = netns.decide_init_netns((5, 10), netns_ino=4026531992, cookie=None,
                                                netdev_backlog_exists=backlog, allowed_cc_mode=mode)
    assert verdict is expected
    assert 'heuristic' in evidence


def test_init_netns_nothing_known():
    verdict, evidence = netns.decide_init_netns(None)
    assert verdict is None
    assert 'no netns inode' in evidence


# --------------------------------------------------------------------------- container

def test_container_host():
    result = kp.detect_container(pid1_environ=b'HOME=/\0TERM=linux\0', pid1_cgroup=fixture('cgroup_host_v1'))
    assert result == {'detected': False, 'type': None,
                      'evidence': 'no /run/.containerenv, no /.dockerenv, /proc/1/environ has no container=, '
                                  '/proc/1/cgroup has no container path'}


def test_container_podman_containerenv():
    result = kp.detect_container(containerenv=fixture('containerenv_podman'),
                                 pid1_environ=b'container=podman\0HOME=/root\0',
                                 pid1_cgroup=fixture('cgroup_podman_v2'))
    assert result['detected'] is True
    assert result['type'] == 'podman'
    assert '/run/.containerenv exists (engine=podman-4.3.1)' in result['evidence']
    assert '/proc/1/environ container=podman' in result['evidence']
    assert 'libpod-' in result['evidence']


def test_container_dockerenv():
    result = kp.detect_container(dockerenv=True, pid1_environ=None, pid1_environ_error='EACCES')
    assert result == {'detected': True, 'type': 'docker', 'evidence': '/.dockerenv exists'}


def test_container_environ_only():
    result = kp.detect_container(pid1_environ=b'container=systemd-nspawn\0')
    assert result['type'] == 'systemd-nspawn'


@pytest.mark.parametrize('name, kind', [
    ('cgroup_docker_v1', 'docker'),
    ('cgroup_podman_v2', 'podman'),
    ('cgroup_kubepods_v2', 'kubernetes'),
    ('cgroup_host_v1', None),
])
def test_cgroup_container_type(name, kind):
    assert kp.cgroup_container_type(fixture(name))[0] == kind


def test_container_unreadable_environ_reported():
    result = kp.detect_container(pid1_environ=None, pid1_environ_error='EACCES', pid1_cgroup=None)
    assert result['detected'] is False
    assert '/proc/1/environ unreadable (EACCES)' in result['evidence']
    assert '/proc/1/cgroup unreadable' in result['evidence']


# --------------------------------------------------------------------------- congestion control, bbr

def test_congestion_init_netns_can_set_every_available():
    cc = kp.congestion_facts(['reno', 'bbr', 'cubic'], ['reno', 'bbr'], 'bbr', True)
    assert cc['settable_default'] == ['reno', 'bbr', 'cubic']


def test_congestion_non_init_netns_only_allowed():
    cc = kp.congestion_facts(['reno', 'bbr', 'cubic'], ['reno', 'bbr'], 'bbr', False)
    assert cc == {'available': ['reno', 'bbr', 'cubic'], 'allowed': ['reno', 'bbr'],
                  'current': 'bbr', 'settable_default': ['reno', 'bbr']}


def test_congestion_unknown_netns_is_strict():
    cc = kp.congestion_facts(['reno', 'cubic'], ['reno', 'bbr'], None, None)
    assert cc['settable_default'] == ['reno']
    assert cc['current'] == ''


def test_bbr_no_module_support_means_builtin():
    facts, evidence = kp.bbr_facts(['reno', 'bbr', 'cubic'], proc_modules=None, builtin=None, dep=None)
    assert facts == {'available': True, 'builtin': True, 'module_loaded': False, 'module_loadable': False}
    assert 'CONFIG_MODULES=n' in evidence


def test_bbr_builtin_from_modules_builtin():
    facts, evidence = kp.bbr_facts(['reno', 'bbr'], proc_modules='', builtin=fixture('modules.builtin'), dep='')
    assert facts['builtin'] is True
    assert 'modules.builtin lists tcp_bbr' in evidence


def test_bbr_loaded_module():
    facts, _evidence = kp.bbr_facts(['reno', 'cubic', 'bbr'], proc_modules=fixture('proc_modules'),
                                    builtin=fixture('modules.builtin.no_bbr'), dep=fixture('modules.dep'))
    assert facts == {'available': True, 'builtin': False, 'module_loaded': True, 'module_loadable': True}


def test_bbr_loadable_not_loaded():
    facts, _evidence = kp.bbr_facts(['reno', 'cubic'], proc_modules='', builtin=fixture('modules.builtin.no_bbr'),
                                    dep=fixture('modules.dep'))
    assert facts == {'available': False, 'builtin': False, 'module_loaded': False, 'module_loadable': True}


def test_bbr_absent():
    facts, evidence = kp.bbr_facts(['reno', 'cubic'], proc_modules=None, builtin=None, dep=None)
    assert facts == {'available': False, 'builtin': False, 'module_loaded': False, 'module_loadable': False}
    assert 'no bbr' in evidence


# --------------------------------------------------------------------------- sysctl writability

def test_writability_in_init_netns():
    result = kp.classify_sysctl_writability('net.core.rmem_max', True, 0o644, True, False, True)
    assert result['exists'] is True and result['writable'] is True
    assert 'mode 0644' in result['reason'] and 'without writing' in result['reason']


def test_writability_missing():
    result = kp.classify_sysctl_writability('net.core.netdev_max_backlog', False)
    assert result == {'exists': False, 'writable': False,
                      'reason': '/proc/sys/net/core/netdev_max_backlog missing (global key: only the init netns has it)'}


@pytest.mark.parametrize('kwargs, text', [
    (dict(read_only_mount=True, init_netns=True), 'EROFS: /proc/sys is mounted read-only'),
    (dict(mode=0o444, init_netns=False), 'mode 0444: read-only here (non-init netns)'),
    (dict(mode=0o644, access=False, init_netns=True), 'EACCES: mode 0644 but no write access'),
    (dict(mode=0o644, init_netns=False), 'EINVAL expected: global key and this is not the init netns'),
    (dict(mode=0o644, init_netns=None), 'mode 0644 and writable by this user, but the network namespace is undecided'),
])
def test_writability_refusals(kwargs, text):
    result = kp.classify_sysctl_writability('net.core.rmem_max', True, **kwargs)
    assert result['exists'] is True and result['writable'] is False
    assert result['reason'].startswith('/proc/sys/net/core/rmem_max: ' + text)


# --------------------------------------------------------------------------- probes

def test_qdisc_probe_accepted():
    assert probe_result.classify_qdisc_probe(0, '', '') == (True, 'accepted')


@pytest.mark.parametrize('name, expected', [
    ('tc_unknown_qdisc.stderr', (False, 'Error: Specified qdisc kind is unknown.')),
    ('tc_old_rtnetlink.stderr', (False, 'RTNETLINK answers: No such file or directory')),
    ('unshare_eperm.stderr', (None, 'unshare: unshare failed: Operation not permitted')),
])
def test_qdisc_probe_errors(name, expected):
    assert probe_result.classify_qdisc_probe(2, '', fixture(name)) == expected


def test_qdisc_probe_tc_side_error_is_inconclusive():
    stderr = 'tbf: the "rate" parameter is mandatory.\n'
    assert probe_result.classify_qdisc_probe(1, '', stderr) == (None, 'tbf: the "rate" parameter is mandatory.')


def test_wireguard_probe():
    assert probe_result.classify_wireguard_probe(2, '', fixture('ip_link_wireguard_unknown.stderr')) == \
        (False, 'Error: Unknown device type.')
    assert probe_result.classify_wireguard_probe(0, '', '') == (True, 'accepted')
    assert probe_result.classify_wireguard_probe(1, '', fixture('unshare_eperm.stderr'))[0] is None


def test_nft_probe():
    assert probe_result.classify_nft_probe(0, '', '') == (True, 'accepted')
    assert probe_result.classify_nft_probe(1, '', fixture('nft_unsupported.stderr')) == \
        (False, 'Error: Could not process rule: Operation not supported')
    assert probe_result.classify_nft_probe(1, '', 'Error: Could not process rule: Operation not permitted\n')[0] is None


# --------------------------------------------------------------------------- requirements

def host_facts(**overrides):
    """Facts as measured on the 6.18 development host (init netns)."""
    facts = {
        'kernel_release': '6.18.44-fc-v657',
        'init_netns': True,
        'init_netns_evidence': 'netns inode 4026531833 == NET_NS_INIT_INO 0xEFFFFFF9 (only init_net has it)',
        'container': {'detected': False, 'type': None, 'evidence': ''},
        'congestion_control': kp.congestion_facts(['reno', 'bbr', 'cubic'], ['reno', 'bbr'], 'bbr', True),
        'bbr': {'available': True, 'builtin': True, 'module_loaded': False, 'module_loadable': False},
        'tfo': kp.tfo_facts(1),
        'qdiscs': {'probed': True, 'fq': False, 'fq_codel': False, 'netem': False, 'cake': False,
                   'tbf': True, 'htb': True, 'pfifo_fast': True},
        'global_sysctl': dict((key, kp.classify_sysctl_writability(key, True, 0o644, True, False, True)) for key in kp.GLOBAL_SYSCTL_KEYS),
        'global_sysctl_writable': True,
        'interfaces': {'lo': {'mtu': 65536, 'operstate': 'unknown'}},
        'wireguard': {'kernel': False, 'go': True, 'go_path': '/usr/bin/wireguard-go', 'tools': True},
        'nftables': {'available': True, 'path': '/usr/sbin/nft', 'kernel': True},
        'tun': True,
        'missing': [],
        'evidence': {
            'qdisc.fq': 'Error: Specified qdisc kind is unknown.',
            'qdisc.fq_codel': 'Error: Specified qdisc kind is unknown.',
            'qdisc.netem': 'Error: Specified qdisc kind is unknown.',
            'qdisc.cake': 'Error: Specified qdisc kind is unknown.',
            'wireguard.kernel': 'Error: Unknown device type.',
            'nftables.kernel': 'accepted',
            'tun': '/dev/net/tun opened read-write',
            'bbr': 'tcp_available_congestion_control lists bbr',
        },
    }
    facts.update(overrides)
    return facts


def netns_facts(allowed=('reno', 'bbr')):
    facts = host_facts(
        init_netns=False,
        init_netns_evidence='netns inode 4026532177 != NET_NS_INIT_INO 0xEFFFFFF9',
        congestion_control=kp.congestion_facts(['reno', 'bbr', 'cubic'], list(allowed), 'bbr', False),
        global_sysctl={
            'net.core.rmem_max': kp.classify_sysctl_writability('net.core.rmem_max', True, 0o444, True, False, False),
            'net.core.default_qdisc': kp.classify_sysctl_writability('net.core.default_qdisc', False),
        },
        global_sysctl_writable=False,
    )
    return facts


def test_host_satisfies_what_it_has():
    require = ['bbr', 'tfo', 'tun', 'init_netns', 'congestion_control', 'nftables', 'wireguard',
               'global_sysctl', 'tbf', 'htb', 'pfifo_fast']
    assert kp.evaluate_requirements(host_facts(), require, {'congestion_control': 'cubic', 'tfo_writable': True}) == []


def test_missing_fq_message():
    missing = kp.evaluate_requirements(host_facts(), ['fq'], {})
    assert missing == [('fq', 'fq', "tc qdisc add dev lo root fq in a throwaway netns: "
                        "'Error: Specified qdisc kind is unknown.'; fix: enable CONFIG_NET_SCH_FQ or load sch_fq")]
    assert kp.missing_message(missing) == (
        "missing capabilities: fq (tc qdisc add dev lo root fq in a throwaway netns: "
        "'Error: Specified qdisc kind is unknown.'; fix: enable CONFIG_NET_SCH_FQ or load sch_fq)")


def test_netns_cubic_not_allowed():
    missing = kp.evaluate_requirements(netns_facts(), ['congestion_control'], {'congestion_control': 'cubic'})
    assert len(missing) == 1
    name, label, detail = missing[0]
    assert (name, label) == ('congestion_control', 'congestion_control cubic')
    assert "/proc/sys/net/ipv4/tcp_allowed_congestion_control = 'reno bbr'" in detail
    assert 'not the init netns' in detail
    assert 'sysctl -w net.ipv4.tcp_allowed_congestion_control="reno bbr cubic" in the init netns' in detail
    assert 'iperf3 -C cubic' in detail


def test_netns_cubic_allowed_after_host_change():
    facts = netns_facts(allowed=('reno', 'bbr', 'cubic'))
    assert kp.evaluate_requirements(facts, ['congestion_control'], {'congestion_control': 'cubic'}) == []


def test_netns_bbr_allowed():
    assert kp.evaluate_requirements(netns_facts(), ['congestion_control'], {'congestion_control': 'bbr'}) == []


def test_congestion_control_not_available():
    missing = kp.evaluate_requirements(host_facts(), ['congestion_control'], {'congestion_control': 'htcp'})
    assert missing[0][1] == 'congestion_control htcp'
    assert "tcp_available_congestion_control = 'reno bbr cubic'" in missing[0][2]
    assert 'CONFIG_TCP_CONG_HTCP or load tcp_htcp' in missing[0][2]


def test_congestion_control_loadable_in_init_netns():
    context = {'congestion_control': 'htcp', 'cc_loadable': ['htcp']}
    assert kp.evaluate_requirements(host_facts(), ['congestion_control'], context) == []


def test_default_congestion_control_is_bbr():
    assert kp.evaluate_requirements(netns_facts(), ['congestion_control'], {}) == []


def test_global_sysctl_in_netns():
    missing = kp.evaluate_requirements(netns_facts(), ['global_sysctl'], {})
    detail = missing[0][2]
    assert 'net.core.default_qdisc: /proc/sys/net/core/default_qdisc missing' in detail
    assert 'net.core.rmem_max: /proc/sys/net/core/rmem_max: mode 0444: read-only here' in detail
    assert 'set these keys in the init netns' in detail


def test_global_sysctl_read_only_proc():
    facts = host_facts(global_sysctl={'net.core.rmem_max': kp.classify_sysctl_writability(
        'net.core.rmem_max', True, 0o644, False, True, True)}, global_sysctl_writable=False)
    detail = kp.evaluate_requirements(facts, ['global_sysctl'], {})[0][2]
    assert 'EROFS' in detail and 'make /proc/sys writable' in detail


def test_init_netns_requirement():
    missing = kp.evaluate_requirements(netns_facts(), ['init_netns'], {})
    assert missing[0][0] == 'init_netns'
    assert '4026532177' in missing[0][2]


def test_bbr_requirement_loadable_counts():
    facts = host_facts(bbr={'available': False, 'builtin': False, 'module_loaded': False, 'module_loadable': True})
    assert kp.evaluate_requirements(facts, ['bbr'], {}) == []
    facts['bbr']['module_loadable'] = False
    missing = kp.evaluate_requirements(facts, ['bbr'], {})
    assert 'CONFIG_TCP_CONG_BBR or load tcp_bbr' in missing[0][2]


@pytest.mark.parametrize('value, writable, ok', [
    (3, False, True),
    (1, True, True),
    (1, False, False),
    (None, True, False),
])
def test_tfo_requirement(value, writable, ok):
    facts = host_facts(tfo=kp.tfo_facts(value))
    missing = kp.evaluate_requirements(facts, ['tfo'], {'tfo_writable': writable})
    assert (missing == []) is ok


def test_wireguard_requirement():
    facts = host_facts()
    assert kp.evaluate_requirements(facts, ['wireguard'], {}) == []
    facts['wireguard'] = {'kernel': False, 'go': False, 'go_path': None, 'tools': False}
    detail = kp.evaluate_requirements(facts, ['wireguard'], {})[0][2]
    assert "'Error: Unknown device type.'" in detail
    assert 'wireguard-go: not on PATH' in detail
    facts['wireguard'] = {'kernel': False, 'go': True, 'go_path': '/usr/bin/wireguard-go', 'tools': True}
    facts['tun'] = False
    assert kp.evaluate_requirements(facts, ['wireguard'], {})[0][0] == 'wireguard'


def test_nftables_requirement():
    facts = host_facts(nftables={'available': False, 'path': None, 'kernel': False})
    assert 'install the nftables package' in kp.evaluate_requirements(facts, ['nftables'], {})[0][2]
    facts = host_facts(nftables={'available': True, 'path': '/usr/sbin/nft', 'kernel': False})
    facts['evidence']['nftables.kernel'] = 'Error: Could not process rule: Operation not supported'
    assert 'CONFIG_NF_TABLES' in kp.evaluate_requirements(facts, ['nftables'], {})[0][2]


def test_tun_requirement():
    facts = host_facts(tun=False)
    facts['evidence']['tun'] = '/dev/net/tun ENODEV: no tun driver in the kernel'
    detail = kp.evaluate_requirements(facts, ['tun'], {})[0][2]
    assert detail.startswith('/dev/net/tun ENODEV')
    assert '--device /dev/net/tun' in detail


def test_not_probed_requirements():
    qdiscs = dict((kind, None) for kind in kp.QDISC_KINDS)
    qdiscs['probed'] = False
    evidence = dict(('qdisc.' + kind, kp.NOT_PROBED) for kind in kp.QDISC_KINDS)
    evidence['nftables.kernel'] = kp.NOT_PROBED
    facts = host_facts(qdiscs=qdiscs, evidence=evidence,
                       nftables={'available': True, 'path': '/usr/sbin/nft', 'kernel': False})
    missing = kp.evaluate_requirements(facts, ['fq', 'nftables'], {})
    assert [m[0] for m in missing] == ['fq', 'nftables']
    assert missing[0][2] == 'not probed (probe=false); fix: run with probe=true'
    assert 'not probed (probe=false)' in missing[1][2]


def test_inconclusive_probe():
    qdiscs = dict((kind, None) for kind in kp.QDISC_KINDS)
    qdiscs['probed'] = False
    evidence = {'qdisc.fq': 'unshare: unshare failed: Operation not permitted'}
    missing = kp.evaluate_requirements(host_facts(qdiscs=qdiscs, evidence=evidence), ['fq'], {})
    assert missing[0][2].startswith('unshare: unshare failed: Operation not permitted; fix: run as root')


def test_message_lists_each_missing_once_in_order():
    missing = kp.evaluate_requirements(netns_facts(), ['fq', 'congestion_control', 'fq', 'init_netns'],
                                       {'congestion_control': 'cubic'})
    assert [m[0] for m in missing] == ['fq', 'congestion_control', 'init_netns']
    message = kp.missing_message(missing)
    assert message.startswith('missing capabilities: fq (tc qdisc add dev lo root fq')
    assert '; congestion_control cubic (' in message
    assert '; init_netns (' in message
    assert kp.missing_message([]) == ''


def test_requirement_names_cover_every_choice():
    # every choice is evaluated (no silent pass for an unknown branch): an empty fact set fails each
    facts = host_facts(
        init_netns=False,
        congestion_control=kp.congestion_facts([], [], '', False),
        bbr={'available': False, 'builtin': False, 'module_loaded': False, 'module_loadable': False},
        tfo=kp.tfo_facts(None),
        qdiscs=dict([(kind, False) for kind in kp.QDISC_KINDS] + [('probed', True)]),
        global_sysctl={}, global_sysctl_writable=False,
        wireguard={'kernel': False, 'go': False, 'go_path': None, 'tools': False},
        nftables={'available': False, 'path': None, 'kernel': False},
        tun=False,
    )
    missing = kp.evaluate_requirements(facts, list(kp.REQUIREMENTS), {})
    assert [m[0] for m in missing] == list(kp.REQUIREMENTS)


def wg_facts(kernel, go, tun):
    return {'wireguard': {'kernel': kernel, 'go': go, 'go_path': '/usr/bin/wireguard-go' if go else None}, 'tun': tun}


@pytest.mark.parametrize('facts, wanted, installable, chosen, runs', [
    (wg_facts(True, False, False), 'auto', False, 'kernel', True),
    (wg_facts(False, True, True), 'auto', False, 'go', True),
    (wg_facts(False, False, True), 'auto', True, 'go', True),        # the role installs wireguard-go
    (wg_facts(False, False, True), 'auto', False, 'go', False),       # nobody installs it
    (wg_facts(False, True, False), 'auto', False, 'go', False),       # no /dev/net/tun
    (wg_facts(False, True, True), 'kernel', True, 'kernel', False),   # asked for the kernel's, absent
    (wg_facts(True, True, True), 'go', False, 'go', True),            # go asked for although the kernel has it
])
def test_choose_wireguard(facts, wanted, installable, chosen, runs):
    implementation, problem = kp.choose_wireguard(facts, wanted, installable, 'sync_tunnel_wireguard_implementation')
    assert implementation == chosen
    assert (problem == '') is runs
    if not runs:
        assert problem.startswith('sync_tunnel_wireguard_implementation=%s cannot run on this host: kernel WireGuard %s, '
                                  '/dev/net/tun %s' % (wanted, facts['wireguard']['kernel'], facts['tun']))
