# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Which network namespace is this process in? (the initial one or another)

Touches: reads the inode of /proc/self/ns/net, stats two /proc/sys files and opens (and closes)
one unconnected datagram socket to read SO_NETNS_COOKIE. Writes nothing. decide_init_netns()
is the pure judgement, unit-tested on recorded evidence; kernel_capability, sysctl_profile and
interface_link all ask detect_init_netns(), so they judge alike.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import socket
import struct

# Fixed inode number of the initial network namespace (include/uapi/linux/nsfs.h,
# NET_NS_INIT_INO). Dynamic namespace inodes are allocated from 0xF0000000 up, so
# only init_net can carry this number. Since Linux 6.18 init_net always has it, so
# any other number there means "not the init netns"; on older kernels the init
# netns got a dynamic number and the inode proves nothing either way.
NET_NS_INIT_INO = 0xEFFFFFF9
NET_NS_FIXED_INO_SINCE = (6, 18)

# SO_NETNS_COOKIE (Linux >= 5.14). On 5.14-6.17 the first network namespace,
# init_net, gets cookie 1. Linux 6.18 draws cookies from the shared namespace id
# space, so the value of init_net differs there (3 was observed on 6.18); the
# fixed inode above is used instead on those kernels.
SO_NETNS_COOKIE = 71
NETNS_COOKIE_SINCE = (5, 14)
INIT_NET_COOKIE = 1

SYSCTL_ROOT = '/proc/sys'
CC_ALLOWED = '/proc/sys/net/ipv4/tcp_allowed_congestion_control'
NETDEV_MAX_BACKLOG = '/proc/sys/net/core/netdev_max_backlog'


def parse_kernel_version(release):
    """'6.18.44-fc-v657' -> (6, 18); None when it does not start with N.N."""
    match = re.match(r'^(\d+)\.(\d+)', release or '')
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2)))


def read_netns_cookie():
    """SO_NETNS_COOKIE of a fresh socket (no traffic), None when unsupported."""
    for family in (getattr(socket, 'AF_UNIX', None), socket.AF_INET):
        if family is None:
            continue
        try:
            sock = socket.socket(family, socket.SOCK_DGRAM)
        except (socket.error, OSError):
            continue
        try:
            raw = sock.getsockopt(socket.SOL_SOCKET, SO_NETNS_COOKIE, 8)
            return struct.unpack('=Q', raw)[0]
        except (socket.error, OSError, struct.error):
            return None
        finally:
            sock.close()
    return None


def detect_init_netns(netns_path='/proc/self/ns/net'):
    """decide_init_netns() on this process's own evidence: (bool or None, evidence).

    Read-only; shared by kernel_capability and sysctl_profile so both judge alike.
    """
    def stat(path):
        try:
            return os.stat(path)
        except OSError:
            return None

    ns = stat(netns_path)
    allowed = stat(CC_ALLOWED)
    return decide_init_netns(
        parse_kernel_version(os.uname()[2]),
        netns_ino=ns.st_ino if ns else None,
        cookie=read_netns_cookie(),
        netdev_backlog_exists=os.path.exists(NETDEV_MAX_BACKLOG) if os.path.isdir(SYSCTL_ROOT + '/net/core') else None,
        allowed_cc_mode=allowed.st_mode if allowed else None,
    )


def decide_init_netns(kernel_version, netns_ino=None, cookie=None,
                      netdev_backlog_exists=None, allowed_cc_mode=None):
    """Decide whether we run in the initial network namespace.

    Returns (bool or None, evidence). Order of proof:
    1. the netns inode equals NET_NS_INIT_INO -> init (any kernel);
    2. Linux >= 6.18 and a different inode -> not init (init_net's inode is fixed there);
    3. SO_NETNS_COOKIE on 5.14-6.17: 1 -> init, anything else -> not init;
    4. heuristics: net.core.netdev_max_backlog exists only in the init netns and
       tcp_allowed_congestion_control is writable (mode 0644) only there.
    """
    notes = []
    if netns_ino is not None:
        notes.append('netns inode %d' % netns_ino)
    if cookie is not None:
        notes.append('SO_NETNS_COOKIE=%d' % cookie)
    seen = '; '.join(notes)

    if netns_ino == NET_NS_INIT_INO:
        return True, 'netns inode %d == NET_NS_INIT_INO 0x%X (only init_net has it)%s' % (
            netns_ino, NET_NS_INIT_INO, '; SO_NETNS_COOKIE=%d' % cookie if cookie is not None else '')
    fixed_ino = kernel_version is not None and kernel_version >= NET_NS_FIXED_INO_SINCE
    if netns_ino is not None and fixed_ino:
        return False, 'netns inode %d != NET_NS_INIT_INO 0x%X (init_net has that fixed inode since Linux 6.18)%s' % (
            netns_ino, NET_NS_INIT_INO, '; SO_NETNS_COOKIE=%d' % cookie if cookie is not None else '')
    if cookie is not None and not fixed_ino:
        if cookie == INIT_NET_COOKIE:
            return True, 'SO_NETNS_COOKIE=1 (init_net has cookie 1 on Linux 5.14-6.17)'
        return False, 'SO_NETNS_COOKIE=%d (init_net has cookie 1 on Linux 5.14-6.17)' % cookie

    hints = []
    verdicts = []
    if netdev_backlog_exists is not None:
        hints.append('%s %s' % (NETDEV_MAX_BACKLOG, 'exists' if netdev_backlog_exists else 'missing'))
        verdicts.append(bool(netdev_backlog_exists))
    if allowed_cc_mode is not None:
        hints.append('%s mode %04o' % (CC_ALLOWED, allowed_cc_mode & 0o7777))
        verdicts.append(bool(allowed_cc_mode & 0o200))
    prefix = 'heuristic: '
    if seen:
        prefix = seen + ' (inconclusive on this kernel); heuristic: '
    if verdicts and all(verdicts):
        return True, prefix + ', '.join(hints) + ' (init netns only)'
    if verdicts and not any(verdicts):
        return False, prefix + ', '.join(hints) + ' (a non-init netns lacks or cannot write these)'
    if verdicts:
        return None, prefix + ', '.join(hints) + ' (contradictory)'
    return None, (seen + '; ' if seen else '') + 'no netns inode, cookie or sysctl evidence readable'
