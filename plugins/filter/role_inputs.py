# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Filters that check a role's inputs. Documentation: unknown_variables.yml and mtu_problem.yml next to this file."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.collections import is_sequence

from ansible_collections.longhaul.trainnet.plugins.module_utils.mtu import MTU_MAX, MTU_MIN


def _names(value, what):
    if not is_sequence(value) or any(not isinstance(v, str) for v in value):
        raise AnsibleFilterError('%s must be a list of variable names, got %r' % (what, value))
    return list(value)


def unknown_variables(names, known, prefix=''):
    """Each name that is not in `known`, with the closest known name: sorted list of strings.

    'data_plane_mtu_verfy_hosts (did you mean data_plane_mtu_verify_hosts?)'. Names are compared
    without the role prefix, so a prefix shared by every name does not make them all look alike.
    """
    names = _names(names, 'the input')
    known = _names(known, 'known')
    if not isinstance(prefix, str):
        raise AnsibleFilterError('prefix must be a string, got %r' % (prefix,))

    def tail(name):
        # also after an older prefix: trainnet_measure_duration -> duration
        return name.split(prefix, 1)[1] if prefix and prefix in name else name

    tails = {}
    for name in known:
        tails.setdefault(tail(name), name)
    out = []
    for name in sorted(set(names) - set(known)):
        close = difflib.get_close_matches(tail(name), list(tails), n=1, cutoff=0.5)
        out.append('%s (did you mean %s?)' % (name, tails[close[0]]) if close else name)
    return out


def mtu_problem(value, name):
    """'' when `value` is an MTU the collection may set, else '<name>=<value> is outside ...'."""
    try:
        ok = not isinstance(value, bool) and MTU_MIN <= int(str(value)) <= MTU_MAX
    except ValueError:
        ok = False
    if ok:
        return ''
    return '%s=%s is outside the allowed range %d-%d' % (name, value, MTU_MIN, MTU_MAX)


class FilterModule(object):
    """Role input checks of longhaul.trainnet."""

    def filters(self):
        return {'mtu_problem': mtu_problem, 'unknown_variables': unknown_variables}
