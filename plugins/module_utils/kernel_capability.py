# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure logic behind the kernel_capability module.

Everything here works on values that were already read (file contents, file modes,
command results, errno values); the module does the I/O. That keeps the parsers and the
requirement -> message logic unit-testable on fixtures. Touches nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


SYSCTL_ROOT = '/proc/sys'
CC_AVAILABLE = '/proc/sys/net/ipv4/tcp_available_congestion_control'
CC_ALLOWED = '/proc/sys/net/ipv4/tcp_allowed_congestion_control'
CC_CURRENT = '/proc/sys/net/ipv4/tcp_congestion_control'
TFO_PATH = '/proc/sys/net/ipv4/tcp_fastopen'
NETDEV_MAX_BACKLOG = '/proc/sys/net/core/netdev_max_backlog'

GLOBAL_SYSCTL_KEYS = (
    'net.core.rmem_max',
    'net.core.wmem_max',
    'net.core.rmem_default',
    'net.core.wmem_default',
    'net.core.default_qdisc',
    'net.core.netdev_max_backlog',
)

# Qdisc kinds probed with `tc qdisc add dev lo root KIND ARGS` in a throwaway netns.
# tbf refuses to parse without parameters (a tc error, not a kernel verdict).
QDISC_PROBE_ARGS = {
    'fq': [],
    'fq_codel': [],
    'netem': [],
    'cake': [],
    'tbf': ['rate', '1mbit', 'burst', '32kbit', 'latency', '400ms'],
    'htb': [],
    'pfifo_fast': [],
}
QDISC_KINDS = ('fq', 'fq_codel', 'netem', 'cake', 'tbf', 'htb', 'pfifo_fast')

QDISC_KCONFIG = {
    'fq': ('CONFIG_NET_SCH_FQ', 'sch_fq'),
    'fq_codel': ('CONFIG_NET_SCH_FQ_CODEL', 'sch_fq_codel'),
    'netem': ('CONFIG_NET_SCH_NETEM', 'sch_netem'),
    'cake': ('CONFIG_NET_SCH_CAKE', 'sch_cake'),
    'tbf': ('CONFIG_NET_SCH_TBF', 'sch_tbf'),
    'htb': ('CONFIG_NET_SCH_HTB', 'sch_htb'),
    'pfifo_fast': ('CONFIG_NET_SCHED', None),
}

REQUIREMENTS = (
    'bbr', 'fq', 'fq_codel', 'netem', 'cake', 'tbf', 'htb', 'pfifo_fast', 'tfo',
    'wireguard', 'nftables', 'global_sysctl', 'tun', 'init_netns', 'congestion_control',
)

NOT_PROBED = 'not probed (probe=false)'

_MODULE_SUFFIX_RE = re.compile(r'\.ko(\.(gz|xz|zst|bz2|lz4))?$')


# --------------------------------------------------------------------------- parsers

def to_text_value(data):
    """Decode bytes (or pass str through) and strip surrounding whitespace."""
    if data is None:
        return None
    if isinstance(data, bytes):
        data = data.decode('utf-8', 'replace')
    return data.strip()


def parse_word_list(text):
    """'reno bbr cubic\\n' -> ['reno', 'bbr', 'cubic']; None -> []."""
    if not text:
        return []
    return to_text_value(text).split()


def parse_int(text):
    """Integer value of a sysctl file, None when missing or not an integer."""
    text = to_text_value(text)
    if not text:
        return None
    try:
        return int(text.split()[0])
    except ValueError:
        return None


def sysctl_path(key):
    """'net.core.rmem_max' -> '/proc/sys/net/core/rmem_max'."""
    return SYSCTL_ROOT + '/' + key.replace('.', '/')


def module_name(path):
    """'kernel/net/ipv4/tcp_bbr.ko.zst' -> 'tcp_bbr' (dashes normalised to underscores)."""
    base = path.strip().rsplit('/', 1)[-1]
    base = _MODULE_SUFFIX_RE.sub('', base)
    return base.replace('-', '_')


def parse_proc_modules(text):
    """Names of loaded modules from /proc/modules ('tcp_bbr 20480 3 - Live 0x0')."""
    names = set()
    for line in (text or '').splitlines():
        fields = line.split()
        if fields:
            names.add(fields[0].replace('-', '_'))
    return names


def parse_modules_builtin(text):
    """Names of built-in modules from modules.builtin (one .ko path per line)."""
    names = set()
    for line in (text or '').splitlines():
        line = line.strip()
        if line and not line.startswith('#'):
            names.add(module_name(line))
    return names


def parse_modules_dep(text):
    """Names of loadable modules from modules.dep ('path.ko: dep.ko dep2.ko')."""
    names = set()
    for line in (text or '').splitlines():
        if ':' not in line:
            continue
        path = line.split(':', 1)[0].strip()
        if path:
            names.add(module_name(path))
    return names


def tfo_facts(value):
    """net.ipv4.tcp_fastopen bits: 0x1 client, 0x2 server."""
    if value is None:
        return {'value': None, 'client': False, 'server': False}
    return {'value': value, 'client': bool(value & 0x1), 'server': bool(value & 0x2)}


def interface_facts(mtu_text, operstate_text):
    """One /sys/class/net/NAME entry."""
    return {'mtu': parse_int(mtu_text), 'operstate': to_text_value(operstate_text) or 'unknown'}


# --------------------------------------------------------------------------- container

_CGROUP_PATTERNS = (
    ('libpod', 'podman'),
    ('docker', 'docker'),
    ('kubepods', 'kubernetes'),
    ('containerd', 'containerd'),
    ('/lxc/', 'lxc'),
    ('lxc.payload', 'lxc'),
    ('machine.slice/machine-', 'systemd-nspawn'),
)


def parse_environ(data):
    """NUL-separated /proc/PID/environ -> dict."""
    if data is None:
        return {}
    if isinstance(data, bytes):
        data = data.decode('utf-8', 'replace')
    env = {}
    for item in data.split('\0'):
        if '=' in item:
            key, value = item.split('=', 1)
            env[key] = value
    return env


def cgroup_container_type(text):
    """Container engine named by a /proc/1/cgroup path, or (None, None)."""
    for line in (text or '').splitlines():
        path = line.split(':', 2)[-1]
        for needle, kind in _CGROUP_PATTERNS:
            if needle in path:
                return kind, line.strip()
    return None, None


def detect_container(containerenv=None, dockerenv=False, pid1_environ=None,
                     pid1_environ_error=None, pid1_cgroup=None):
    """Container detection from the usual markers.

    containerenv: text of /run/.containerenv ('' when present but empty, None when absent).
    dockerenv: /.dockerenv exists.
    pid1_environ: raw /proc/1/environ (None when unreadable; then pid1_environ_error says why).
    pid1_cgroup: text of /proc/1/cgroup.
    """
    found = []
    if containerenv is not None:
        engine = re.search(r'^engine="?([^"\n]+)"?', containerenv, re.MULTILINE)
        found.append(('podman', '/run/.containerenv exists' + (
            ' (engine=%s)' % engine.group(1) if engine else '')))
    env_value = parse_environ(pid1_environ).get('container')
    if env_value:
        found.append((env_value, '/proc/1/environ container=%s' % env_value))
    if dockerenv:
        found.append(('docker', '/.dockerenv exists'))
    kind, line = cgroup_container_type(pid1_cgroup)
    if kind:
        found.append((kind, '/proc/1/cgroup %s' % line))
    if found:
        return {'detected': True, 'type': found[0][0], 'evidence': '; '.join(e for _k, e in found)}
    checked = ['no /run/.containerenv', 'no /.dockerenv']
    if pid1_environ is None:
        checked.append('/proc/1/environ unreadable (%s)' % (pid1_environ_error or 'missing'))
    else:
        checked.append('/proc/1/environ has no container=')
    checked.append('/proc/1/cgroup has no container path' if pid1_cgroup is not None
                   else '/proc/1/cgroup unreadable')
    return {'detected': False, 'type': None, 'evidence': ', '.join(checked)}


# --------------------------------------------------------------------------- congestion control

def congestion_facts(available, allowed, current, init_netns):
    """congestion_control facts; settable_default follows the netns rules.

    The init netns (as root) may make any available algorithm the default. A
    non-init netns may only pick algorithms listed in the global, read-only (there)
    tcp_allowed_congestion_control (tcp_set_default_congestion_control: EPERM).
    When the netns is unknown, assume the stricter rule.
    """
    if init_netns:
        settable = list(available)
    else:
        settable = [name for name in allowed if name in available]
    return {
        'available': list(available),
        'allowed': list(allowed),
        'current': current or '',
        'settable_default': settable,
    }


def bbr_facts(available, proc_modules=None, builtin=None, dep=None):
    """bbr facts and their evidence.

    proc_modules: text of /proc/modules, None when the file does not exist
    (CONFIG_MODULES=n). builtin/dep: text of modules.builtin / modules.dep, None
    when missing. An algorithm that is registered (available) without its module
    being loaded must be built in.
    """
    is_available = 'bbr' in available
    loaded_set = parse_proc_modules(proc_modules)
    loaded = 'tcp_bbr' in loaded_set
    in_builtin = 'tcp_bbr' in parse_modules_builtin(builtin)
    loadable = 'tcp_bbr' in parse_modules_dep(dep)
    notes = ['%s lists %s' % (CC_AVAILABLE, 'bbr' if is_available else 'no bbr')]
    if in_builtin:
        builtin_flag = True
        notes.append('modules.builtin lists tcp_bbr')
    elif proc_modules is None and is_available:
        builtin_flag = True
        notes.append('no /proc/modules (CONFIG_MODULES=n), so bbr is built in')
    elif proc_modules is not None and is_available and not loaded:
        builtin_flag = True
        notes.append('registered without tcp_bbr in /proc/modules, so built in')
    else:
        builtin_flag = False
    if loaded:
        notes.append('/proc/modules lists tcp_bbr')
    if loadable:
        notes.append('modules.dep lists tcp_bbr')
    elif dep is None:
        notes.append('no modules.dep')
    facts = {
        'available': is_available,
        'builtin': builtin_flag,
        'module_loaded': loaded,
        'module_loadable': loadable,
    }
    return facts, '; '.join(notes)


# --------------------------------------------------------------------------- sysctl writability

def classify_sysctl_writability(key, exists, mode=None, access=True, read_only_mount=False,
                                init_netns=None):
    """Whether a global sysctl can be written here, judged without writing to it.

    exists: the /proc/sys path exists. mode: its permission bits. access: os.access(W_OK).
    read_only_mount: /proc/sys is mounted read-only. init_netns: netns.detect_init_netns verdict.
    A global key can only be set from the initial network namespace: elsewhere it is missing,
    read-only (0444) or refuses writes with EINVAL even when its mode says 0644.
    """
    path = sysctl_path(key)
    if not exists:
        return {'exists': False, 'writable': False,
                'reason': '%s missing (global key: only the init netns has it)' % path}
    mode_text = 'mode %04o' % mode if mode is not None else 'mode unknown'
    if read_only_mount:
        why = 'EROFS: /proc/sys is mounted read-only'
    elif mode is not None and not mode & 0o222:
        why = '%s: read-only here (non-init netns)' % mode_text
    elif not access:
        why = 'EACCES: %s but no write access for this user (not root?)' % mode_text
    elif init_netns is False:
        why = ('EINVAL expected: global key and this is not the init netns (writes from a '
               'non-init netns are refused)')
    elif init_netns is None:
        why = ('%s and writable by this user, but the network namespace is undecided and '
               'a non-init netns refuses writes to global keys' % mode_text)
    else:
        return {'exists': True, 'writable': True,
                'reason': '%s, writable by this user, init netns (judged without writing)' % mode_text}
    return {'exists': True, 'writable': False, 'reason': '%s: %s' % (path, why)}


# --------------------------------------------------------------------------- requirements

def _qdisc_requirement(kind, facts, evidence):
    qdiscs = facts['qdiscs']
    if qdiscs.get(kind):
        return None
    detail = evidence.get('qdisc.' + kind, NOT_PROBED)
    config, module = QDISC_KCONFIG[kind]
    if not qdiscs.get('probed') or qdiscs.get(kind) is None:
        if detail == NOT_PROBED:
            fix = 'run with probe=true'
        else:
            fix = 'run as root where unshare and tc (iproute2) work, or check %s by hand' % config
        return (kind, kind, '%s; fix: %s' % (detail, fix))
    args = ' '.join([kind] + QDISC_PROBE_ARGS[kind])
    fix = 'enable %s' % config + (' or load %s' % module if module else '')
    return (kind, kind, "tc qdisc add dev lo root %s in a throwaway netns: '%s'; fix: %s" % (args, detail, fix))


def _cc_requirement(facts, context, evidence):
    name = context.get('congestion_control') or 'bbr'
    label = 'congestion_control %s' % name
    cc = facts['congestion_control']
    if name in cc['settable_default']:
        return None
    if facts['init_netns'] and name in context.get('cc_loadable', ()):
        return None
    available = ' '.join(cc['available'])
    allowed = ' '.join(cc['allowed'])
    if name not in cc['available'] and name not in context.get('cc_loadable', ()):
        return ('congestion_control', label,
                "%s = '%s'; fix: enable CONFIG_TCP_CONG_%s or load tcp_%s" % (
                    CC_AVAILABLE, available, name.upper(), name))
    wanted = ' '.join(cc['allowed'] + [name])
    netns = facts.get('init_netns_evidence') or ''
    where = 'not the init netns' if facts['init_netns'] is False else 'init netns unknown'
    return ('congestion_control', label,
            "%s = '%s' and this is %s (%s): a non-init netns can only make an allowed algorithm "
            "the default; fix: sysctl -w net.ipv4.tcp_allowed_congestion_control=\"%s\" in the init netns "
            "(or set net.ipv4.tcp_congestion_control=%s there), or select %s per socket "
            "(TCP_CONGESTION, e.g. iperf3 -C %s)" % (
                CC_ALLOWED, allowed, where, netns, wanted, name, name, name))


def context_from_facts(facts, congestion_control):
    """The evaluate_requirements context rebuilt from facts the module returned (a later call in the
    same run evaluates its own requirements against them without probing again)."""
    return {
        'congestion_control': congestion_control,
        'cc_loadable': list(facts.get('congestion_control', {}).get('loadable') or []),
        'tfo_writable': bool(facts.get('tfo', {}).get('writable')),
    }


def facts_serve(facts, probe, run_id):
    """Whether facts of an earlier call can answer a call with PROBE in controller run RUN_ID: they
    must come from this run (a persistent fact cache carries them into later runs, when the kernel
    may have changed), be complete (from this module version) and probed when the call wants the
    probes."""
    if not isinstance(facts, dict) or 'probed' not in facts or facts.get('run') != run_id:
        return False
    if 'loadable' not in facts.get('congestion_control', {}) or 'writable' not in facts.get('tfo', {}):
        return False
    return bool(facts['probed']) or not probe


def evaluate_requirements(facts, require, context=None):
    """Missing requirements as a list of (name, label, 'evidence; fix: ...').

    facts: the trainnet_kernel facts. context: extra internal state:
    congestion_control (wanted algorithm), cc_loadable (algorithms with a
    loadable tcp_* module), tfo_writable (bool), evidence (dict of evidence
    strings by fact, e.g. 'qdisc.fq', 'wireguard.kernel').
    """
    context = context or {}
    evidence = facts.get('evidence') or context.get('evidence') or {}
    missing = []
    seen = set()
    for req in require:
        if req in seen:
            continue
        seen.add(req)
        item = None
        if req in QDISC_KCONFIG:
            item = _qdisc_requirement(req, facts, evidence)
        elif req == 'congestion_control':
            item = _cc_requirement(facts, context, evidence)
        elif req == 'bbr':
            bbr = facts['bbr']
            if not (bbr['available'] or bbr['module_loadable']):
                item = ('bbr', 'bbr', '%s; fix: enable CONFIG_TCP_CONG_BBR or load tcp_bbr' % evidence.get('bbr', ''))
        elif req == 'tfo':
            tfo = facts['tfo']
            if tfo['value'] is None:
                item = ('tfo', 'tfo', '%s missing; fix: a kernel with TCP Fast Open (Linux >= 3.7)' % TFO_PATH)
            elif (tfo['value'] & 0x3) != 0x3 and not context.get('tfo_writable', False):
                item = ('tfo', 'tfo', '%s = %d and not writable; fix: set net.ipv4.tcp_fastopen=3 where /proc/sys '
                        'is writable (host or privileged container)' % (TFO_PATH, tfo['value']))
        elif req == 'wireguard':
            wg = facts['wireguard']
            if not (wg['kernel'] or (wg['go'] and facts['tun'])):
                item = ('wireguard', 'wireguard',
                        "ip link add wgprobe type wireguard in a throwaway netns: '%s'; wireguard-go: %s; "
                        "/dev/net/tun: %s; fix: enable CONFIG_WIREGUARD, or install wireguard-go and make "
                        "/dev/net/tun usable" % (
                            evidence.get('wireguard.kernel', NOT_PROBED),
                            wg['go_path'] or 'not on PATH', evidence.get('tun', 'unusable')))
        elif req == 'nftables':
            nft = facts['nftables']
            if not nft['available']:
                item = ('nftables', 'nftables', 'nft not on PATH; fix: install the nftables package')
            elif not nft['kernel']:
                detail = evidence.get('nftables.kernel', NOT_PROBED)
                fix = 'run with probe=true' if detail == NOT_PROBED else \
                    'enable CONFIG_NF_TABLES and CONFIG_NF_TABLES_INET or load nf_tables'
                item = ('nftables', 'nftables', "nft add table inet trainnet_probe in a throwaway netns: '%s'; "
                        "fix: %s" % (detail, fix))
        elif req == 'global_sysctl':
            if not facts['global_sysctl_writable']:
                bad = ['%s: %s' % (key, val['reason']) for key, val in sorted(facts['global_sysctl'].items())
                       if not (val['exists'] and val['writable'])]
                if any('EROFS' in entry for entry in bad):
                    fix = 'make /proc/sys writable (privileged container) or set them on the host'
                else:
                    fix = 'set these keys in the init netns (on the host); a network namespace cannot change them'
                item = ('global_sysctl', 'global_sysctl', '%s; fix: %s' % (', '.join(bad), fix))
        elif req == 'tun':
            if not facts['tun']:
                item = ('tun', 'tun', '%s; fix: enable CONFIG_TUN or load tun; in a container pass '
                        '--device /dev/net/tun' % evidence.get('tun', '/dev/net/tun unusable'))
        elif req == 'init_netns':
            if facts['init_netns'] is not True:
                item = ('init_netns', 'init_netns', '%s; fix: run on the host itself, not inside a network '
                        'namespace or a container with its own network' % (facts.get('init_netns_evidence') or 'undecided'))
        if item:
            missing.append(item)
    return missing


WIREGUARD_IMPLEMENTATIONS = ('auto', 'kernel', 'go')


def choose_wireguard(facts, wanted, go_installable, variable='wireguard_implementation'):
    """(implementation, problem) for a role's WireGuard choice: V(auto) takes the kernel's WireGuard
    when the probe found it, else wireguard-go. problem is '' when the choice can run here: kernel
    WireGuard needs the kernel's; wireguard-go needs /dev/net/tun and the binary, or a role that
    installs it (go_installable)."""
    wg = facts['wireguard']
    chosen = wanted if wanted != 'auto' else ('kernel' if wg['kernel'] else 'go')
    ok = wg['kernel'] if chosen == 'kernel' else bool(facts.get('tun')) and (wg['go'] or go_installable)
    if ok:
        return chosen, ''
    return chosen, ('%s=%s cannot run on this host: kernel WireGuard %s, /dev/net/tun %s, wireguard-go installed %s '
                    '(the role installs it: %s)' % (variable, wanted, wg['kernel'], bool(facts.get('tun')),
                                                    wg['go'], go_installable))


def missing_message(missing):
    """One message naming each missing capability, its evidence and fix."""
    if not missing:
        return ''
    return 'missing capabilities: ' + '; '.join('%s (%s)' % (label, detail) for _name, label, detail in missing)
