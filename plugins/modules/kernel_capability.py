#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: kernel_capability
short_description: Report what the running Linux kernel can do for a long fat lossy network path
version_added: 0.1.0
description:
  - Validates, before anything changes, what the kernel of the target can do - congestion control
    algorithms and which of them this network namespace may make the default, BBR, TCP Fast Open,
    queueing disciplines, global C(net.core) sysctls, WireGuard, nftables and TUN - and whether the
    target runs in the initial network namespace or in a container.
  - Returns the facts as RV(kernel) and as the fact C(trainnet_kernel).
  - C(changed) is always C(false). It never writes a file, in check mode or not; in particular
    it never writes to C(/proc/sys).
  - 'What it reads: C(/proc/sys/net/ipv4/tcp_available_congestion_control),
    C(tcp_allowed_congestion_control), C(tcp_congestion_control) and C(tcp_fastopen); the content,
    mode and write access (C(access(2))) of the global C(net.core) keys listed in
    RV(kernel.global_sysctl); the mount flags of C(/proc/sys) (C(statvfs)); C(/proc/modules) and
    C(modules.builtin)/C(modules.dep) of the running kernel; C(/run/.containerenv), C(/.dockerenv),
    C(/proc/1/environ) and C(/proc/1/cgroup); C(/sys/class/net/*/mtu) and C(operstate); the inode of
    C(/proc/self/ns/net). It opens C(/dev/net/tun) read-write and closes it at once (no device is
    created) and reads C(SO_NETNS_COOKIE) of one unconnected socket.'
  - Writability of a global sysctl is judged without writing - the key exists, its mode has a
    write bit, this user has write access, C(/proc/sys) is not mounted read-only, and the target
    runs in the initial network namespace (a non-init namespace cannot set global keys).
  - 'With O(probe=true) (also in check mode) it runs, each time-bounded and with C(LANG=C), inside
    C(unshare --net) - a new, empty, anonymous network namespace that is destroyed when the command
    exits, so the host''s interfaces, qdiscs and rule sets are never touched:
    C(tc qdisc add dev lo root KIND) for each qdisc kind, C(ip link add wgprobe type wireguard) and
    C(nft add table inet trainnet_probe). These requests reach the kernel like any other, so on a
    kernel with loadable modules they can make it B(autoload a module) (C(request_module): for
    example C(sch_fq), C(sch_netem), C(wireguard), C(nf_tables)), which stays loaded afterwards and
    shows in C(/proc/modules). Use O(probe=false) to avoid that; nothing else in the module can load
    a module.'
  - Whether the target runs in the initial network namespace is decided from the inode of
    C(/proc/self/ns/net) (C(0xEFFFFFF9), fixed for the initial namespace since Linux 6.18), from
    C(SO_NETNS_COOKIE) on Linux 5.14 to 6.17 (the initial namespace has cookie 1 there), and
    otherwise from sysctl heuristics (C(net.core.netdev_max_backlog) and a writable
    C(tcp_allowed_congestion_control) exist only in the initial namespace).
  - If a capability listed in O(require) is missing, the module fails with one message naming each
    missing capability, the evidence read and the fix; the result still carries all facts.
options:
  require:
    description:
      - Capabilities that must be present. The module fails if any is missing.
      - V(bbr) - the bbr congestion control is registered, or C(tcp_bbr) is a loadable module.
      - V(fq), V(fq_codel), V(netem), V(cake), V(tbf), V(htb), V(pfifo_fast) - the qdisc can be
        attached (needs O(probe=true)).
      - V(tfo) - C(net.ipv4.tcp_fastopen) exists and is either already 3 (client and server) or
        writable.
      - V(wireguard) - WireGuard in the kernel (needs O(probe=true)), or C(wireguard-go) on the
        PATH together with a usable C(/dev/net/tun).
      - V(nftables) - C(nft) is on the PATH and the kernel accepts an inet table (needs O(probe=true)).
      - V(global_sysctl) - every key in RV(kernel.global_sysctl) exists and is writable.
      - V(tun) - C(/dev/net/tun) can be opened read-write.
      - V(init_netns) - the target runs in the initial network namespace.
      - V(congestion_control) - the algorithm O(congestion_control) can be made the default here.
    type: list
    elements: str
    default: []
    choices:
      - bbr
      - fq
      - fq_codel
      - netem
      - cake
      - tbf
      - htb
      - pfifo_fast
      - tfo
      - wireguard
      - nftables
      - global_sysctl
      - tun
      - init_netns
      - congestion_control
  congestion_control:
    description:
      - The algorithm the V(congestion_control) requirement checks can be made the default
        (C(net.ipv4.tcp_congestion_control)) in this network namespace.
      - In a non-init network namespace only algorithms listed in the global
        C(net.ipv4.tcp_allowed_congestion_control) qualify.
    type: str
    default: bbr
  probe:
    description:
      - Run the throwaway-netns probes (qdiscs, WireGuard in the kernel, nftables in the kernel).
        They may make the kernel autoload modules (see the description).
      - When V(false), no command is run and no module can be loaded; RV(kernel.qdiscs) kinds are
        V(null), RV(kernel.wireguard.kernel) and RV(kernel.nftables.kernel) are V(false), and their
        evidence is C(not probed).
    type: bool
    default: true
  refresh:
    description:
      - Probe again even when this host already has RV(kernel) facts from an earlier call in the same
        run (the fact C(trainnet_kernel)).
      - When V(false) (the default), a call finds those facts on the controller and evaluates O(require)
        against them without running anything on the host, so a playbook that checks the kernel in
        several roles probes each host once. Facts gathered with O(probe=false) do not serve a call
        that asks for O(probe=true).
      - A new run (C(ansible -m), a new C(ansible-playbook)) probes again, also when a persistent fact
        cache (C(fact_caching) other than C(memory)) brings C(trainnet_kernel) from an earlier run (the
        facts carry the run that probed them, RV(kernel.run)).
    type: bool
    default: false
  wireguard_implementation:
    description:
      - A role's WireGuard choice to decide and check here. V(auto) takes WireGuard in the kernel when
        the probe finds it (needs O(probe=true)), else C(wireguard-go); RV(wireguard_implementation) is
        the result.
      - The module fails when the choice cannot run - kernel WireGuard without the kernel's, or
        C(wireguard-go) without a usable C(/dev/net/tun), or not installed and not O(wireguard_go_installable).
      - Not set, nothing is chosen.
    type: str
    choices: [auto, kernel, go]
  wireguard_go_installable:
    description:
      - The caller installs C(wireguard-go) when it is missing (its package management is on).
    type: bool
    default: false
  wireguard_variable:
    description:
      - The name the failure message gives the choice (the role's variable, C(sync_tunnel_wireguard_implementation)).
    type: str
    default: wireguard_implementation
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: linux
notes:
  - Needs root for the probes (C(unshare --net)) and to see the global sysctls as writable;
    without root they report the failure as evidence instead.
  - Uses C(unshare) (util-linux), C(tc) and C(ip) (iproute2) and C(nft) when present; each probe
    command is stopped after 10 seconds and then counts as inconclusive.
seealso:
  - name: Kernel documentation of the IP sysctls
    description: tcp_allowed_congestion_control, tcp_fastopen and friends.
    link: https://docs.kernel.org/networking/ip-sysctl.html
author:
  - longhaul.trainnet maintainers (@longhaul)
'''

EXAMPLES = r'''
- name: Read the kernel capabilities (facts only)
  longhaul.trainnet.kernel_capability:
  register: kc

- name: Show which congestion controls this netns can make the default
  ansible.builtin.debug:
    msg: "{{ ansible_facts.trainnet_kernel.congestion_control.settable_default }}"

- name: Fail early unless BBR with fq pacing and writable global buffers are possible here
  longhaul.trainnet.kernel_capability:
    require:
      - bbr
      - fq
      - global_sysctl
      - congestion_control
    congestion_control: bbr

- name: Check for WireGuard (kernel or wireguard-go with TUN) without the netns probes
  longhaul.trainnet.kernel_capability:
    require: [wireguard, tun]
    probe: false
'''

RETURN = r'''
kernel:
  description: The kernel capability facts (also returned as the fact C(trainnet_kernel)).
  returned: always
  type: dict
  contains:
    kernel_release:
      description: Release of the running kernel (C(uname -r)).
      type: str
      returned: always
      sample: 6.18.44-fc-v657
    init_netns:
      description: Whether the module runs in the initial network namespace; V(null) when undecided.
      type: bool
      returned: always
      sample: true
    init_netns_evidence:
      description: What decided RV(kernel.init_netns).
      type: str
      returned: always
      sample: netns inode 4026531833 == NET_NS_INIT_INO 0xEFFFFFF9 (only init_net has it); SO_NETNS_COOKIE=3
    container:
      description: Container detection.
      type: dict
      returned: always
      contains:
        detected:
          description: Whether a container marker was found.
          type: bool
          returned: always
          sample: true
        type:
          description: Container engine (C(podman), C(docker), C(kubernetes), C(lxc), ...), V(null) when none.
          type: str
          returned: always
          sample: podman
        evidence:
          description: Markers found or checked (C(/run/.containerenv), C(/.dockerenv), C(/proc/1/environ), C(/proc/1/cgroup)).
          type: str
          returned: always
          sample: /run/.containerenv exists (engine=podman-4.3.1)
    congestion_control:
      description: TCP congestion control algorithms.
      type: dict
      returned: always
      contains:
        available:
          description: C(net.ipv4.tcp_available_congestion_control).
          type: list
          elements: str
          returned: always
          sample: [reno, bbr, cubic]
        allowed:
          description: C(net.ipv4.tcp_allowed_congestion_control) (global; read-only in a non-init netns).
          type: list
          elements: str
          returned: always
          sample: [reno, bbr]
        current:
          description: C(net.ipv4.tcp_congestion_control) of this network namespace.
          type: str
          returned: always
          sample: bbr
        settable_default:
          description:
            - Algorithms this network namespace can make the default. In the initial netns every
              available one; otherwise those both allowed and available.
          type: list
          elements: str
          returned: always
          sample: [reno, bbr]
        loadable:
          description: Algorithms with a loadable C(tcp_*) module in C(modules.dep) of the running kernel.
          type: list
          elements: str
          returned: always
          sample: []
    bbr:
      description: BBR support.
      type: dict
      returned: always
      contains:
        available:
          description: bbr is listed in C(tcp_available_congestion_control).
          type: bool
          returned: always
          sample: true
        builtin:
          description:
            - bbr is built into the kernel (C(modules.builtin) lists C(tcp_bbr), or it is available
              without a loaded C(tcp_bbr) module, for example with C(CONFIG_MODULES=n)).
          type: bool
          returned: always
          sample: true
        module_loaded:
          description: C(/proc/modules) lists C(tcp_bbr).
          type: bool
          returned: always
          sample: false
        module_loadable:
          description: C(modules.dep) of the running kernel lists C(tcp_bbr).
          type: bool
          returned: always
          sample: false
    tfo:
      description: TCP Fast Open (C(net.ipv4.tcp_fastopen)).
      type: dict
      returned: always
      contains:
        value:
          description: The sysctl value, V(null) when the key is missing.
          type: int
          returned: always
          sample: 1
        client:
          description: Bit 0x1, client side enabled.
          type: bool
          returned: always
          sample: true
        server:
          description: Bit 0x2, server side enabled.
          type: bool
          returned: always
          sample: false
        writable:
          description: C(net.ipv4.tcp_fastopen) can be written here.
          type: bool
          returned: always
          sample: true
    qdiscs:
      description:
        - Queueing disciplines the kernel accepts, probed with C(tc qdisc add dev lo root KIND) in
          a throwaway network namespace. Each kind is V(true), V(false), or V(null) when not
          probed or inconclusive.
      type: dict
      returned: always
      contains:
        probed:
          description: Whether the probe ran and gave at least one kernel verdict.
          type: bool
          returned: always
          sample: true
        fq:
          description: fq can be attached.
          type: bool
          returned: always
          sample: false
        fq_codel:
          description: fq_codel can be attached.
          type: bool
          returned: always
          sample: false
        netem:
          description: netem can be attached.
          type: bool
          returned: always
          sample: false
        cake:
          description: cake can be attached.
          type: bool
          returned: always
          sample: false
        tbf:
          description: tbf can be attached.
          type: bool
          returned: always
          sample: true
        htb:
          description: htb can be attached.
          type: bool
          returned: always
          sample: true
        pfifo_fast:
          description: pfifo_fast can be attached.
          type: bool
          returned: always
          sample: true
    global_sysctl:
      description:
        - Global C(net.core) keys (C(rmem_max), C(wmem_max), C(rmem_default), C(wmem_default),
          C(default_qdisc), C(netdev_max_backlog)), each with C(exists), C(writable) and C(reason).
        - Writability is judged without writing (mode, write access, read-only mount, initial
          network namespace).
      type: dict
      returned: always
      sample:
        net.core.rmem_max:
          exists: true
          writable: false
          reason: "/proc/sys/net/core/rmem_max: mode 0444: read-only here (non-init netns)"
        net.core.netdev_max_backlog:
          exists: false
          writable: false
          reason: "/proc/sys/net/core/netdev_max_backlog missing (global key: only the init netns has it)"
    global_sysctl_writable:
      description: Every key of RV(kernel.global_sysctl) exists and is writable.
      type: bool
      returned: always
      sample: true
    interfaces:
      description: Network interfaces from C(/sys/class/net), each with C(mtu) (int) and C(operstate) (str).
      type: dict
      returned: always
      sample:
        lo:
          mtu: 65536
          operstate: unknown
        eth0:
          mtu: 1500
          operstate: up
    wireguard:
      description: WireGuard support.
      type: dict
      returned: always
      contains:
        kernel:
          description: The kernel accepts C(ip link add wgprobe type wireguard) in a throwaway netns.
          type: bool
          returned: always
          sample: false
        go:
          description: C(wireguard-go) is on the PATH.
          type: bool
          returned: always
          sample: true
        go_path:
          description: Path of C(wireguard-go), V(null) when absent.
          type: str
          returned: always
          sample: /usr/bin/wireguard-go
        tools:
          description: C(wg) is on the PATH.
          type: bool
          returned: always
          sample: true
    nftables:
      description: nftables support.
      type: dict
      returned: always
      contains:
        available:
          description: C(nft) is on the PATH.
          type: bool
          returned: always
          sample: true
        path:
          description: Path of C(nft), V(null) when absent.
          type: str
          returned: always
          sample: /usr/sbin/nft
        kernel:
          description: The kernel accepts C(nft add table inet trainnet_probe) in a throwaway netns.
          type: bool
          returned: always
          sample: true
    tun:
      description: C(/dev/net/tun) can be opened read-write.
      type: bool
      returned: always
      sample: true
    probed:
      description: Whether the throwaway-netns probes ran (O(probe)).
      type: bool
      returned: always
      sample: true
    cached:
      description: V(true) when this call evaluated O(require) against facts of an earlier call in this run.
      type: bool
      returned: always
      sample: false
    run:
      description:
        - The controller run that probed these facts (its process ID and start time), set by the
          action plugin. Facts of another run, as a persistent fact cache keeps them, are probed again.
      type: str
      returned: always
      sample: "41532-8812345"
    missing:
      description: Names of the O(require) entries that are missing.
      type: list
      elements: str
      returned: always
      sample: [fq, congestion_control]
    evidence:
      description:
        - Evidence behind the probed and derived facts, keyed C(congestion_control), C(bbr), C(tfo),
          C(qdisc.KIND), C(wireguard.kernel), C(wireguard.go), C(nftables.kernel) and C(tun).
      type: dict
      returned: always
      sample:
        qdisc.fq: "Error: Specified qdisc kind is unknown."
        tun: /dev/net/tun opened read-write
ansible_facts:
  description: Facts to add to the host.
  returned: always
  type: dict
  contains:
    trainnet_kernel:
      description: The same dictionary as RV(kernel).
      type: dict
      returned: always
      sample: {}
wireguard_implementation:
  description: The WireGuard implementation chosen for O(wireguard_implementation) (V(auto) resolved).
  returned: when O(wireguard_implementation) is set
  type: str
  sample: go
msg:
  description: Summary, or on failure the message naming each missing capability, its evidence and fix.
  returned: always
  type: str
  sample: >-
    missing capabilities: fq (tc qdisc add dev lo root fq in a throwaway netns:
    'Error: Specified qdisc kind is unknown.'; fix: enable CONFIG_NET_SCH_FQ or load sch_fq)
'''

import errno
import os
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import run_bounded
from ansible_collections.longhaul.trainnet.plugins.module_utils.errors import errno_name
from ansible_collections.longhaul.trainnet.plugins.module_utils.netns import decide_init_netns, parse_kernel_version, read_netns_cookie
from ansible_collections.longhaul.trainnet.plugins.module_utils.probe_result import (
    classify_nft_probe,
    classify_qdisc_probe,
    classify_wireguard_probe,
)
from ansible_collections.longhaul.trainnet.plugins.module_utils.kernel_capability import (
    CC_ALLOWED,
    CC_AVAILABLE,
    CC_CURRENT,
    GLOBAL_SYSCTL_KEYS,
    NETDEV_MAX_BACKLOG,
    NOT_PROBED,
    QDISC_KINDS,
    QDISC_PROBE_ARGS,
    REQUIREMENTS,
    TFO_PATH,
    WIREGUARD_IMPLEMENTATIONS,
    bbr_facts,
    choose_wireguard,
    classify_sysctl_writability,
    congestion_facts,
    detect_container,
    evaluate_requirements,
    interface_facts,
    missing_message,
    parse_int,
    parse_modules_dep,
    parse_word_list,
    sysctl_path,
    tfo_facts,
    to_text_value,
)

# Seconds one probe command may take (tc/ip/nft normally answer in milliseconds).
PROBE_LIMIT = 10


class HostIO(object):
    """All file-system and socket access of the module (replaced in unit tests)."""

    def release(self):
        return os.uname()[2]

    def read(self, path):
        """(bytes, None) or (None, errno)."""
        try:
            with open(path, 'rb') as handle:
                return handle.read(), None
        except (IOError, OSError) as exc:
            return None, exc.errno

    def exists(self, path):
        return os.path.exists(path)

    def listdir(self, path):
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def stat_ino(self, path):
        try:
            return os.stat(path).st_ino
        except OSError:
            return None

    def stat_mode(self, path):
        try:
            return stat.S_IMODE(os.stat(path).st_mode)
        except OSError:
            return None

    def writable(self, path):
        """access(2) W_OK: a permission check, nothing is written."""
        return os.access(path, os.W_OK)

    def read_only_mount(self, path):
        """True when the file system holding path is mounted read-only (statvfs ST_RDONLY)."""
        try:
            return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
        except OSError:
            return False

    def open_rdwr(self, path):
        """None when path opens read-write, else the errno."""
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as exc:
            return exc.errno
        os.close(fd)
        return None

    def netns_cookie(self):
        """SO_NETNS_COOKIE of a fresh socket (no traffic), None when unsupported."""
        return read_netns_cookie()


def _text(io, path):
    data, _err = io.read(path)
    return to_text_value(data) if data is not None else None


def gather_global_sysctl(io, init_netns):
    """Writability of the global keys, judged without writing (see classify_sysctl_writability)."""
    result = {}
    for key in GLOBAL_SYSCTL_KEYS:
        path = sysctl_path(key)
        if not io.exists(path):
            result[key] = classify_sysctl_writability(key, False)
            continue
        result[key] = classify_sysctl_writability(
            key, True, mode=io.stat_mode(path), access=io.writable(path),
            read_only_mount=io.read_only_mount(path), init_netns=init_netns)
    return result


def key_writable(io, path):
    """A per-namespace key is writable when it has a write bit, access and a writable mount."""
    mode = io.stat_mode(path)
    return (mode is not None and bool(mode & 0o222) and io.writable(path)
            and not io.read_only_mount(path))


def gather_interfaces(io):
    result = {}
    for name in io.listdir('/sys/class/net'):
        base = '/sys/class/net/' + name
        if not io.exists(base + '/mtu'):
            continue
        result[name] = interface_facts(_text(io, base + '/mtu'), _text(io, base + '/operstate'))
    return result


def gather_tun(io):
    err = io.open_rdwr('/dev/net/tun')
    if err is None:
        return True, '/dev/net/tun opened read-write'
    why = {errno.ENOENT: 'missing', errno.ENODEV: 'no tun driver in the kernel',
           errno.ENXIO: 'no tun driver in the kernel',
           errno.EPERM: 'not permitted (device cgroup or no privileges)',
           errno.EACCES: 'permission denied'}.get(err, 'open failed')
    return False, '/dev/net/tun %s: %s' % (errno_name(err), why)


class Prober(object):
    """Runs commands inside `unshare --net`: a throwaway anonymous network namespace.

    Each command runs with LANG=C (its stderr is classified) and is stopped after PROBE_LIMIT
    seconds (rc 124, inconclusive).
    """

    def __init__(self, module):
        self.module = module
        self.unshare = module.get_bin_path('unshare')

    def run(self, argv):
        if not self.unshare:
            return None
        result = run_bounded([self.unshare, '--net', '--'] + argv, PROBE_LIMIT)
        err = result.err
        if result.timed_out:
            err = 'probe timed out after %d s (inconclusive)\n%s' % (PROBE_LIMIT, err)
        return result.rc, result.out, err


def probe_qdiscs(prober, tc_path, evidence):
    qdiscs = dict((kind, None) for kind in QDISC_KINDS)
    qdiscs['probed'] = False
    if not prober.unshare or not tc_path:
        why = 'unshare not found' if not prober.unshare else 'tc (iproute2) not found'
        for kind in QDISC_KINDS:
            evidence['qdisc.' + kind] = 'not probed: ' + why
        return qdiscs
    for kind in QDISC_KINDS:
        rc, out, err = prober.run([tc_path, 'qdisc', 'add', 'dev', 'lo', 'root', kind] + QDISC_PROBE_ARGS[kind])
        verdict, msg = classify_qdisc_probe(rc, out, err)
        qdiscs[kind] = verdict
        evidence['qdisc.' + kind] = msg
        if verdict is not None:
            qdiscs['probed'] = True
    return qdiscs


def probe_wireguard(prober, ip_path):
    if not prober.unshare:
        return False, 'not probed: unshare not found'
    if not ip_path:
        return False, 'not probed: ip (iproute2) not found'
    rc, out, err = prober.run([ip_path, 'link', 'add', 'wgprobe', 'type', 'wireguard'])
    verdict, msg = classify_wireguard_probe(rc, out, err)
    return bool(verdict), msg


def probe_nftables(prober, nft_path):
    if not prober.unshare:
        return False, 'not probed: unshare not found'
    if not nft_path:
        return False, 'not probed: nft not found'
    rc, out, err = prober.run([nft_path, 'add', 'table', 'inet', 'trainnet_probe'])
    verdict, msg = classify_nft_probe(rc, out, err)
    return bool(verdict), msg


def gather(module, io, probe, wanted_cc):
    evidence = {}
    release = io.release()
    version = parse_kernel_version(release)

    allowed_raw, _err = io.read(CC_ALLOWED)
    init_netns, netns_evidence = decide_init_netns(
        version,
        netns_ino=io.stat_ino('/proc/self/ns/net'),
        cookie=io.netns_cookie(),
        netdev_backlog_exists=io.exists(NETDEV_MAX_BACKLOG) if io.exists('/proc/sys/net/core') else None,
        allowed_cc_mode=io.stat_mode(CC_ALLOWED),
    )

    containerenv = None
    if io.exists('/run/.containerenv'):
        containerenv = _text(io, '/run/.containerenv') or ''
    pid1_environ, environ_err = io.read('/proc/1/environ')
    container = detect_container(
        containerenv=containerenv,
        dockerenv=io.exists('/.dockerenv'),
        pid1_environ=pid1_environ,
        pid1_environ_error=errno_name(environ_err) if environ_err else None,
        pid1_cgroup=_text(io, '/proc/1/cgroup'),
    )

    available = parse_word_list(_text(io, CC_AVAILABLE))
    allowed = parse_word_list(to_text_value(allowed_raw))
    current = _text(io, CC_CURRENT)
    cc = congestion_facts(available, allowed, current, init_netns)
    evidence['congestion_control'] = "%s = '%s'; %s = '%s'; %s = '%s'" % (
        CC_AVAILABLE, ' '.join(available), CC_ALLOWED, ' '.join(allowed), CC_CURRENT, current or '')

    moddir = '/lib/modules/%s' % release
    proc_modules = _text(io, '/proc/modules') if io.exists('/proc/modules') else None
    builtin = _text(io, moddir + '/modules.builtin')
    dep = _text(io, moddir + '/modules.dep')
    bbr, evidence['bbr'] = bbr_facts(available, proc_modules, builtin, dep)
    loadable = parse_modules_dep(dep)
    cc_loadable = sorted(name[4:] for name in loadable if name.startswith('tcp_'))

    tfo_value = parse_int(_text(io, TFO_PATH))
    tfo = tfo_facts(tfo_value)
    tfo_writable = tfo_value is not None and key_writable(io, TFO_PATH)
    evidence['tfo'] = '%s = %s (%s)' % (TFO_PATH, tfo_value, 'writable' if tfo_writable else 'not writable')

    global_sysctl = gather_global_sysctl(io, init_netns)

    tun, evidence['tun'] = gather_tun(io)

    tc_path = module.get_bin_path('tc')
    ip_path = module.get_bin_path('ip')
    nft_path = module.get_bin_path('nft')
    wg_path = module.get_bin_path('wg')
    go_path = module.get_bin_path('wireguard-go')
    evidence['wireguard.go'] = go_path or 'wireguard-go not on PATH'

    if probe:
        prober = Prober(module)
        qdiscs = probe_qdiscs(prober, tc_path, evidence)
        wg_kernel, evidence['wireguard.kernel'] = probe_wireguard(prober, ip_path)
        nft_kernel, evidence['nftables.kernel'] = probe_nftables(prober, nft_path)
    else:
        qdiscs = dict((kind, None) for kind in QDISC_KINDS)
        qdiscs['probed'] = False
        for kind in QDISC_KINDS:
            evidence['qdisc.' + kind] = NOT_PROBED
        wg_kernel, evidence['wireguard.kernel'] = False, NOT_PROBED
        nft_kernel, evidence['nftables.kernel'] = False, NOT_PROBED

    facts = {
        'kernel_release': release,
        'init_netns': init_netns,
        'init_netns_evidence': netns_evidence,
        'container': container,
        'congestion_control': cc,
        'bbr': bbr,
        'tfo': tfo,
        'qdiscs': qdiscs,
        'global_sysctl': global_sysctl,
        'global_sysctl_writable': all(v['exists'] and v['writable'] for v in global_sysctl.values()),
        'interfaces': gather_interfaces(io),
        'wireguard': {'kernel': wg_kernel, 'go': bool(go_path), 'go_path': go_path, 'tools': bool(wg_path)},
        'nftables': {'available': bool(nft_path), 'path': nft_path, 'kernel': nft_kernel},
        'tun': tun,
        'missing': [],
        'evidence': evidence,
    }
    context = {
        'congestion_control': wanted_cc,
        'cc_loadable': cc_loadable,
        'tfo_writable': tfo_writable,
    }
    return facts, context


def main():
    module = AnsibleModule(
        argument_spec=dict(
            require=dict(type='list', elements='str', default=[], choices=list(REQUIREMENTS)),
            congestion_control=dict(type='str', default='bbr'),
            probe=dict(type='bool', default=True),
            refresh=dict(type='bool', default=False),   # read by the action plugin only
            wireguard_implementation=dict(type='str', choices=list(WIREGUARD_IMPLEMENTATIONS)),
            wireguard_go_installable=dict(type='bool', default=False),
            wireguard_variable=dict(type='str', default='wireguard_implementation'),
        ),
        supports_check_mode=True,
    )
    facts, context = gather(module, HostIO(), module.params['probe'], module.params['congestion_control'])
    # What a later call in this run needs to evaluate requirements from the facts alone (the action plugin).
    facts['probed'] = bool(module.params['probe'])
    facts['cached'] = False
    facts['congestion_control']['loadable'] = context['cc_loadable']
    facts['tfo']['writable'] = context['tfo_writable']
    missing = evaluate_requirements(facts, module.params['require'], context)
    facts['missing'] = [name for name, _label, _detail in missing]
    result = dict(changed=False, kernel=facts, ansible_facts={'trainnet_kernel': facts})
    problem = ''
    if module.params['wireguard_implementation']:
        result['wireguard_implementation'], problem = choose_wireguard(
            facts, module.params['wireguard_implementation'], module.params['wireguard_go_installable'],
            module.params['wireguard_variable'])
    if missing or problem:
        module.fail_json(msg='; '.join(m for m in (missing_message(missing), problem) if m), **result)
    required = module.params['require']
    result['msg'] = 'all required capabilities present: %s' % ', '.join(required) if required else \
        'kernel capabilities gathered'
    module.exit_json(**result)


if __name__ == '__main__':
    main()
