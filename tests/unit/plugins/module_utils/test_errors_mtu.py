# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The shared errno formatting and MTU arithmetic."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno

from ansible_collections.longhaul.trainnet.plugins.module_utils import errors, mtu


def test_errno_name():
    assert errors.errno_name(errno.EROFS) == 'EROFS'
    assert errors.errno_name(None) is None
    assert errors.errno_name(99999) == 'errno 99999'


def test_describe_os_error():
    assert errors.describe_os_error(OSError(errno.EACCES, 'Permission denied')) == 'Permission denied [EACCES]'
    assert errors.describe_os_error(OSError(errno.EINVAL, '')) == 'Invalid argument [EINVAL]'
    assert errors.describe_os_error(ValueError('bad')) == 'bad'
    assert errors.describe_os_error(RuntimeError()) == 'RuntimeError'


def test_icmp_payload_per_family():
    assert mtu.icmp_payload(1400) == 1372
    assert mtu.icmp_payload(1400, ipv6=True) == 1352
    assert mtu.mtu_floor() == 576 and mtu.mtu_floor(ipv6=True) == 1280
    assert mtu.mtu_range_text() == '576-9000'
