# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Verdicts on probe commands run in a throwaway network namespace (`unshare --net -- CMD`).

Pure: works on (rc, stdout, stderr) that the caller already has. Shared by kernel_capability
(qdiscs, WireGuard, nftables) and interface_link (the qdisc it is asked to install).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_UNSHARE_FAIL_RE = re.compile(r'^unshare: ', re.MULTILINE)

# Lower-case stderr fragments that mean "this kernel lacks the feature" for each probe.
_QDISC_ABSENT = ('qdisc kind is unknown', 'rtnetlink answers: no such file or directory')
_WIREGUARD_ABSENT = ('unknown device type', 'operation not supported')
_NFT_ABSENT = ('operation not supported', 'no such file or directory',
               'protocol not supported', 'address family not supported')


def _first_line(text):
    for line in (text or '').splitlines():
        if line.strip():
            return line.strip()
    return ''


def _probe_error(stdout, stderr):
    return _first_line(stderr) or _first_line(stdout)


def unshare_failed(stderr):
    """True when unshare itself failed (no netns could be made), e.g. EPERM."""
    return bool(_UNSHARE_FAIL_RE.search(stderr or ''))


# Lower-case stderr fragments that mean "this kernel lacks the feature" for each probe.


def _classify_probe(rc, stdout, stderr, absent_markers):
    """(True/False/None, message) from a probe run under `unshare --net --`.

    rc 0 means the kernel accepted it (True); unshare itself failing is inconclusive (None);
    stderr containing one of the lower-case `absent_markers` means unsupported (False);
    any other error is inconclusive (None).
    """
    if rc == 0:
        return True, 'accepted'
    msg = _probe_error(stdout, stderr)
    if unshare_failed(stderr):
        return None, msg
    low = (stderr or '').lower()
    if any(marker in low for marker in absent_markers):
        return False, msg
    return None, msg


def classify_qdisc_probe(rc, stdout, stderr):
    """(True/False/None, message) from `unshare --net -- tc qdisc add dev lo root KIND`."""
    return _classify_probe(rc, stdout, stderr, _QDISC_ABSENT)


def classify_wireguard_probe(rc, stdout, stderr):
    """(True/False/None, message) from `unshare --net -- ip link add wgprobe type wireguard`."""
    return _classify_probe(rc, stdout, stderr, _WIREGUARD_ABSENT)


def classify_nft_probe(rc, stdout, stderr):
    """(True/False/None, message) from `unshare --net -- nft add table inet trainnet_probe`."""
    return _classify_probe(rc, stdout, stderr, _NFT_ABSENT)
