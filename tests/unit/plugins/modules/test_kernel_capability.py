# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import builtins
import errno
import os

import pytest

from ansible.module_utils.common.text.converters import to_bytes

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import CommandResult
from ansible_collections.longhaul.trainnet.plugins.modules import kernel_capability
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    fake_get_bin_path, mock, module_patches, patch_module_args, run_main,
)

HOST_INO = 0xEFFFFFF9
NETNS_INO = 4026532177

BIN_PATHS = {
    'unshare': '/usr/bin/unshare',
    'tc': '/usr/sbin/tc',
    'ip': '/usr/sbin/ip',
    'nft': '/usr/sbin/nft',
    'wg': '/usr/bin/wg',
    'wireguard-go': '/usr/bin/wireguard-go',
}

UNKNOWN_QDISC = (2, '', 'Error: Specified qdisc kind is unknown.\n')


class FakeIO(object):
    """In-memory stand-in for kernel_capability.HostIO."""

    def __init__(self, files, netns_ino=HOST_INO, cookie=3, write_errors=None, read_errors=None,
                 modes=None, tun_errno=None, release='6.18.44-fc-v657', writable=True, ro_mount=False):
        self.files = dict((path, to_bytes(value)) for path, value in files.items())
        self.netns_ino = netns_ino
        self.cookie = cookie
        self.write_errors = write_errors or {}
        self.read_errors = read_errors or {}
        self.modes = modes or {}
        self.tun_errno = tun_errno
        self.kernel_release = release
        self.is_writable = writable
        self.ro_mount = ro_mount
        self.writes = []

    def release(self):
        return self.kernel_release

    def read(self, path):
        if path in self.read_errors:
            return None, self.read_errors[path]
        if path in self.files:
            return self.files[path], None
        return None, errno.ENOENT

    def exists(self, path):
        if path in self.files or path in self.read_errors:
            return True
        prefix = path.rstrip('/') + '/'
        return any(name.startswith(prefix) for name in self.files)

    def listdir(self, path):
        prefix = path.rstrip('/') + '/'
        return sorted(set(name[len(prefix):].split('/')[0] for name in self.files if name.startswith(prefix)))

    def stat_ino(self, path):
        return self.netns_ino if path == '/proc/self/ns/net' else None

    def stat_mode(self, path):
        return self.modes.get(path, 0o644 if path in self.files else None)

    def writable(self, path):
        return self.is_writable and path in self.files

    def read_only_mount(self, path):
        return self.ro_mount and path.startswith('/proc/sys/')

    def write_back(self, path, data):
        # The old HostIO interface: recorded so a test can prove the module no longer writes.
        self.writes.append((path, data))
        return self.write_errors.get(path)

    def open_rdwr(self, path):
        return self.tun_errno

    def netns_cookie(self):
        return self.cookie


def base_files(allowed='reno bbr', netns=False):
    files = {
        '/proc/sys/net/ipv4/tcp_available_congestion_control': 'reno bbr cubic\n',
        '/proc/sys/net/ipv4/tcp_allowed_congestion_control': allowed + '\n',
        '/proc/sys/net/ipv4/tcp_congestion_control': 'bbr\n',
        '/proc/sys/net/ipv4/tcp_fastopen': '1\n',
        '/proc/sys/net/core/rmem_max': '4194304\n',
        '/proc/sys/net/core/wmem_max': '4194304\n',
        '/proc/sys/net/core/rmem_default': '212992\n',
        '/proc/sys/net/core/wmem_default': '212992\n',
        '/proc/1/cgroup': '0::/\n',
        '/sys/class/net/lo/mtu': '65536\n',
        '/sys/class/net/lo/operstate': 'unknown\n',
    }
    if not netns:
        files.update({
            '/proc/sys/net/core/default_qdisc': 'pfifo_fast\n',
            '/proc/sys/net/core/netdev_max_backlog': '1000\n',
            '/sys/class/net/eth0/mtu': '1400\n',
            '/sys/class/net/eth0/operstate': 'up\n',
            '/sys/class/net/bonding_masters': 'x\n',
            '/.dockerenv': '',
        })
    return files


def host_io(**kwargs):
    return FakeIO(base_files(), read_errors={'/proc/1/environ': errno.EACCES}, **kwargs)


def netns_io(allowed='reno bbr', core_mode=0o444):
    files = base_files(allowed=allowed, netns=True)
    modes = dict((path, core_mode) for path in files if path.startswith('/proc/sys/net/core/'))
    modes['/proc/sys/net/ipv4/tcp_allowed_congestion_control'] = 0o444
    return FakeIO(files, netns_ino=NETNS_INO, cookie=4148, modes=modes)


def fake_run_bounded(calls, overrides=None):
    """run_bounded answering like the 6.18 host: no fq/fq_codel/netem/cake, no wireguard, nft ok."""
    answers = {'fq': UNKNOWN_QDISC, 'fq_codel': UNKNOWN_QDISC, 'netem': UNKNOWN_QDISC, 'cake': UNKNOWN_QDISC,
               'wireguard': (2, '', 'Error: Unknown device type.\n')}
    answers.update(overrides or {})

    def run_bounded(argv, limit=None, **kwargs):
        calls.append((list(argv), dict(kwargs, limit=limit)))
        assert argv[:3] == ['/usr/bin/unshare', '--net', '--']
        if argv[3] == '/usr/sbin/tc':
            key = argv[9]
        elif argv[3] == '/usr/sbin/ip':
            key = 'wireguard'
        else:
            key = 'nft'
        answer = answers.get(key, (0, '', ''))
        return answer if isinstance(answer, CommandResult) else CommandResult(*answer)
    return run_bounded


def refuse_run_command(self, *args, **kwargs):  # pylint: disable=unused-argument
    raise AssertionError('kernel_capability must run commands through run_bounded')


def run_module(args, io, calls=None, run_overrides=None, bin_paths=None):
    calls = [] if calls is None else calls
    paths = BIN_PATHS if bin_paths is None else bin_paths
    with patch_module_args(args):
        with module_patches(get_bin_path=fake_get_bin_path(paths), run_command=refuse_run_command):
            with mock.patch.object(kernel_capability, 'HostIO', return_value=io), \
                    mock.patch.object(kernel_capability, 'run_bounded', fake_run_bounded(calls, run_overrides)):
                return run_main(kernel_capability.main)


TOP_KEYS = {
    'kernel_release', 'init_netns', 'init_netns_evidence', 'container', 'congestion_control', 'bbr', 'tfo',
    'qdiscs', 'global_sysctl', 'global_sysctl_writable', 'interfaces', 'wireguard', 'nftables', 'tun',
    'missing', 'evidence', 'probed', 'cached',
}


def test_host_facts_structure():
    calls = []
    result = run_module({}, host_io(), calls)
    assert result['changed'] is False
    assert 'failed' not in result
    facts = result['kernel']
    assert result['ansible_facts'] == {'trainnet_kernel': facts}
    assert set(facts) == TOP_KEYS
    assert facts['kernel_release'] == '6.18.44-fc-v657'
    assert facts['init_netns'] is True
    assert 'NET_NS_INIT_INO' in facts['init_netns_evidence']
    assert facts['container'] == {'detected': True, 'type': 'docker', 'evidence': '/.dockerenv exists'}
    assert facts['congestion_control'] == {'available': ['reno', 'bbr', 'cubic'], 'allowed': ['reno', 'bbr'],
                                           'current': 'bbr', 'settable_default': ['reno', 'bbr', 'cubic'],
                                           'loadable': []}
    assert facts['bbr'] == {'available': True, 'builtin': True, 'module_loaded': False, 'module_loadable': False}
    assert facts['tfo'] == {'value': 1, 'client': True, 'server': False, 'writable': True}
    assert facts['probed'] is True and facts['cached'] is False
    assert facts['qdiscs'] == {'probed': True, 'fq': False, 'fq_codel': False, 'netem': False, 'cake': False,
                               'tbf': True, 'htb': True, 'pfifo_fast': True}
    assert facts['global_sysctl_writable'] is True
    assert set(facts['global_sysctl']) == set(kernel_capability.GLOBAL_SYSCTL_KEYS)
    assert all(set(v) == {'exists', 'writable', 'reason'} for v in facts['global_sysctl'].values())
    assert facts['interfaces'] == {'eth0': {'mtu': 1400, 'operstate': 'up'},
                                   'lo': {'mtu': 65536, 'operstate': 'unknown'}}
    assert facts['wireguard'] == {'kernel': False, 'go': True, 'go_path': '/usr/bin/wireguard-go', 'tools': True}
    assert facts['nftables'] == {'available': True, 'path': '/usr/sbin/nft', 'kernel': True}
    assert facts['tun'] is True
    assert facts['missing'] == []
    # one unshare call per qdisc kind, one for wireguard, one for nftables, each time-bounded
    # (run_bounded sets LANG=C itself)
    assert len(calls) == len(kernel_capability.QDISC_KINDS) + 2
    assert all(kw['limit'] == kernel_capability.PROBE_LIMIT for _args, kw in calls)
    tbf = [args for args, _kw in calls if 'tbf' in args][0]
    assert tbf[4:] == ['qdisc', 'add', 'dev', 'lo', 'root', 'tbf', 'rate', '1mbit', 'burst', '32kbit', 'latency', '400ms']


@pytest.mark.parametrize('check', [False, True])
def test_never_writes_to_proc_sys(check):
    # Was: the current value of each global key written back to it, also in check mode.
    io = host_io()
    facts = run_module({'_ansible_check_mode': check}, io)['kernel']
    assert io.writes == []
    assert facts['global_sysctl_writable'] is True
    assert facts['global_sysctl']['net.core.rmem_max']['reason'].endswith('(judged without writing)')


def test_real_hostio_opens_nothing_for_writing(monkeypatch):
    """The real HostIO on this machine (probe=false): no open(2) of a /proc/sys path for writing."""
    opened = []
    real_os_open, real_open = os.open, builtins.open

    def os_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR) and str(path).startswith('/proc/sys'):
            opened.append(path)
        return real_os_open(path, flags, *args, **kwargs)

    def py_open(path, mode='r', *args, **kwargs):
        if any(c in mode for c in 'wa+') and str(path).startswith('/proc/sys'):
            opened.append(path)
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, 'open', os_open)
    monkeypatch.setattr(builtins, 'open', py_open)
    with patch_module_args({'probe': False, '_ansible_check_mode': True}):
        with module_patches(get_bin_path=fake_get_bin_path(BIN_PATHS), run_command=refuse_run_command):
            result = run_main(kernel_capability.main)
    assert opened == []
    assert set(result['kernel']['global_sysctl']) == set(kernel_capability.GLOBAL_SYSCTL_KEYS)


def test_check_mode_is_identical():
    normal = run_module({}, host_io())
    checked = run_module({'_ansible_check_mode': True}, host_io())
    assert normal['kernel'] == checked['kernel']
    assert checked['changed'] is False


def test_global_keys_writable_by_mode_in_a_netns_are_not_writable():
    # A privileged container: the net.core keys are 0644, but a non-init netns cannot set them.
    facts = run_module({'require': ['global_sysctl']}, netns_io(core_mode=0o644))['kernel']
    assert facts['global_sysctl_writable'] is False
    assert 'not the init netns' in facts['global_sysctl']['net.core.rmem_max']['reason']
    assert facts['missing'] == ['global_sysctl']


def test_probe_timeout_is_inconclusive():
    hung = CommandResult(124, '', '', timed_out=True)
    result = run_module({'require': ['tbf']}, host_io(), run_overrides={'tbf': hung})
    assert result['kernel']['qdiscs']['tbf'] is None
    assert 'probe timed out after 10 s' in result['msg']


def test_host_requirements_pass():
    result = run_module({'require': ['bbr', 'tfo', 'tun', 'init_netns', 'congestion_control', 'nftables',
                                     'wireguard', 'global_sysctl', 'htb', 'tbf'],
                         'congestion_control': 'cubic'}, host_io())
    assert 'failed' not in result
    assert result['msg'].startswith('all required capabilities present: bbr, tfo')


def test_host_fq_missing_fails_with_facts():
    result = run_module({'require': ['fq', 'fq_codel', 'bbr']}, host_io())
    assert result['failed'] is True
    assert result['kernel']['missing'] == ['fq', 'fq_codel']
    assert result['msg'] == (
        "missing capabilities: fq (tc qdisc add dev lo root fq in a throwaway netns: "
        "'Error: Specified qdisc kind is unknown.'; fix: enable CONFIG_NET_SCH_FQ or load sch_fq); "
        "fq_codel (tc qdisc add dev lo root fq_codel in a throwaway netns: "
        "'Error: Specified qdisc kind is unknown.'; fix: enable CONFIG_NET_SCH_FQ_CODEL or load sch_fq_codel)")
    assert result['ansible_facts']['trainnet_kernel']['qdiscs']['fq'] is False


def test_netns_cubic_requirement_fails():
    result = run_module({'require': ['congestion_control'], 'congestion_control': 'cubic'}, netns_io())
    facts = result['kernel']
    assert result['failed'] is True
    assert facts['init_netns'] is False
    assert facts['congestion_control']['settable_default'] == ['reno', 'bbr']
    assert facts['global_sysctl_writable'] is False
    assert facts['global_sysctl']['net.core.default_qdisc']['exists'] is False
    assert facts['global_sysctl']['net.core.rmem_max']['reason'] == \
        '/proc/sys/net/core/rmem_max: mode 0444: read-only here (non-init netns)'
    assert facts['missing'] == ['congestion_control']
    assert result['msg'].startswith("missing capabilities: congestion_control cubic "
                                    "(/proc/sys/net/ipv4/tcp_allowed_congestion_control = 'reno bbr'")
    assert 'sysctl -w net.ipv4.tcp_allowed_congestion_control="reno bbr cubic"' in result['msg']
    assert facts['container']['detected'] is False


def test_netns_cubic_after_allowed_list_change():
    result = run_module({'require': ['congestion_control'], 'congestion_control': 'cubic'},
                        netns_io(allowed='reno bbr cubic'))
    assert 'failed' not in result
    assert result['kernel']['congestion_control']['settable_default'] == ['reno', 'bbr', 'cubic']


def test_netns_global_sysctl_and_init_netns_in_one_message():
    result = run_module({'require': ['global_sysctl', 'init_netns']}, netns_io())
    assert result['kernel']['missing'] == ['global_sysctl', 'init_netns']
    assert result['msg'].count('missing capabilities:') == 1
    assert '; init_netns (netns inode 4026532177 != NET_NS_INIT_INO' in result['msg']


def test_read_only_proc_sys():
    io = FakeIO(base_files(), writable=False, ro_mount=True)
    result = run_module({'require': ['global_sysctl', 'tfo']}, io)
    facts = result['kernel']
    assert facts['global_sysctl']['net.core.rmem_max']['reason'] == \
        '/proc/sys/net/core/rmem_max: EROFS: /proc/sys is mounted read-only'
    assert facts['missing'] == ['global_sysctl', 'tfo']
    assert 'make /proc/sys writable' in result['msg']


def test_probe_false_runs_no_command():
    calls = []
    result = run_module({'probe': False, 'require': ['fq']}, host_io(), calls)
    facts = result['kernel']
    assert calls == []
    assert facts['qdiscs'] == dict([(kind, None) for kind in kernel_capability.QDISC_KINDS] + [('probed', False)])
    assert facts['wireguard']['kernel'] is False
    assert facts['nftables']['kernel'] is False
    assert facts['evidence']['qdisc.fq'] == 'not probed (probe=false)'
    assert result['msg'] == 'missing capabilities: fq (not probed (probe=false); fix: run with probe=true)'


def test_probe_false_wireguard_go_with_tun_is_enough():
    result = run_module({'probe': False, 'require': ['wireguard', 'tun']}, host_io())
    assert 'failed' not in result


def test_unshare_not_permitted():
    eperm = (1, '', 'unshare: unshare failed: Operation not permitted\n')
    overrides = dict((kind, eperm) for kind in kernel_capability.QDISC_KINDS)
    overrides.update({'wireguard': eperm, 'nft': eperm})
    result = run_module({'require': ['fq']}, host_io(), run_overrides=overrides)
    facts = result['kernel']
    assert facts['qdiscs']['probed'] is False
    assert facts['qdiscs']['tbf'] is None
    assert facts['nftables']['kernel'] is False
    assert 'unshare: unshare failed: Operation not permitted; fix: run as root' in result['msg']


def test_no_unshare_binary():
    calls = []
    paths = dict(BIN_PATHS)
    del paths['unshare']
    result = run_module({}, host_io(), calls, bin_paths=paths)
    assert calls == []
    assert result['kernel']['qdiscs']['probed'] is False
    assert result['kernel']['evidence']['qdisc.fq'] == 'not probed: unshare not found'


def test_tun_unusable():
    result = run_module({'require': ['tun']}, host_io(tun_errno=errno.ENODEV))
    assert result['kernel']['tun'] is False
    assert '/dev/net/tun ENODEV: no tun driver in the kernel' in result['msg']


def test_invalid_requirement_rejected():
    result = run_module({'require': ['teleport']}, host_io())
    assert result['failed'] is True
    assert 'teleport' in result['msg']


def test_hostio_reads_this_machine():
    io = kernel_capability.HostIO()
    assert io.release()
    data, err = io.read('/proc/self/status')
    assert data and err is None
    assert io.read('/nonexistent/kc')[1] == errno.ENOENT
    assert not hasattr(io, 'write_back')
    assert io.read_only_mount('/nonexistent/kc') is False
    assert io.open_rdwr('/nonexistent/kc') == errno.ENOENT
    assert io.stat_ino('/nonexistent/kc') is None
    assert io.stat_mode('/nonexistent/kc') is None
    assert io.listdir('/nonexistent/kc') == []
    cookie = io.netns_cookie()
    assert cookie is None or cookie > 0


@pytest.mark.parametrize('release', ['5.4.0-1-generic', '6.18.44-fc-v657'])
def test_old_kernel_cookie_path(release):
    # Linux 5.x with cookie 1 and a dynamic init inode: decided by the cookie
    io = FakeIO(base_files(), netns_ino=4026531992, cookie=1, release=release)
    facts = run_module({}, io)['kernel']
    if release.startswith('5.'):
        assert facts['init_netns'] is True
        assert facts['init_netns_evidence'].startswith('SO_NETNS_COOKIE=1')
    else:
        assert facts['init_netns'] is False
