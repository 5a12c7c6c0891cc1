# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""One way to name an errno and to describe an OSError in a message. Pure."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os


def errno_name(err):
    """13 -> 'EACCES'; None -> None; an unknown number -> 'errno N'."""
    if err is None:
        return None
    return errno.errorcode.get(err, 'errno %s' % err)


def describe_os_error(exc):
    """An OSError (or any exception) as 'Permission denied [EACCES]'.

    The text first (what a reader wants), the symbolic name in brackets (what one searches for).
    """
    code = getattr(exc, 'errno', None)
    text = getattr(exc, 'strerror', None) or (os.strerror(code) if code else '') or str(exc) \
        or exc.__class__.__name__
    name = errno.errorcode.get(code) if code else None
    return '%s [%s]' % (text, name) if name else text
