# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one way the collection's root programs replace a file (metrics for node_exporter's textfile
collector, state files, public keys): readers see the old file or the new one, never half of one,
and nothing planted in the directory is written through.

Two programs run alone on hosts and cannot import this file: module_utils/control_plane_status.py
(the control-plane watchdog) and roles/egress_pool/files/trainnet-egress-watchdog. Each holds a
copy of write_atomic that tests/unit/plugins/module_utils/test_textfile.py keeps identical to this one.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import tempfile


def write_atomic(path, text, mode):
    """Replace `path` with `text` (str or bytes), permissions `mode`, atomically.

    mkstemp picks an unpredictable name with O_EXCL (a symlink planted there is never opened);
    the mode is set on the descriptor, never by path; os.replace swaps the name, so a symlink
    at `path` is replaced, not followed. The temporary file is removed on any error."""
    fd, tmp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), suffix='.tmp',
                               dir=os.path.dirname(path) or '.')
    try:
        with os.fdopen(fd, 'wb') as handle:
            os.fchmod(handle.fileno(), mode)
            handle.write(text.encode('utf-8') if isinstance(text, str) else text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path
