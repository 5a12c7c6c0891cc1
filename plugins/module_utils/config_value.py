# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Values that end up in line-based configuration written as root (WireGuard configuration,
shell env files, systemd units), checked in one place for the modules, the filters (role
preflights) and the templates. A newline in a peer key or a route name would otherwise add lines
of its own: a [Peer] to every tunnel, an ExecStart= to a boot unit. Pure functions.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# base64 of 32 bytes, canonical (the last character before '=' carries 2 zero bits): what
# `wg genkey`/`wg pubkey`/`wg genpsk` print and what wg accepts.
WIREGUARD_KEY = re.compile(r'[A-Za-z0-9+/]{42}[AEIMQUYcgkosw480]=')
# Linux IFNAMSIZ leaves 15 characters; the set iproute2, systemd and nftables take without quoting,
# and no leading - (ip would read the name as an option).
INTERFACE_NAME = re.compile(r'[A-Za-z0-9_.][A-Za-z0-9_.-]{0,14}')
# Control characters end or break a line (systemd also ends one at \r); a backslash at the end of a
# unit line joins the next line to it.
_NOT_ONE_LINE = re.compile(r'[\x00-\x1f\x7f\\]')
_NOT_IN_PATH = re.compile(r'[\x00-\x20\x7f\\]')
# Characters systemd passes through unquoted in an ExecStart= argument.
_SYSTEMD_PLAIN = re.compile(r'[A-Za-z0-9_@+=:,./-]+')

KINDS = {
    'wireguard_key': 'is not a WireGuard key (44 characters: base64 of 32 bytes, as wg genkey/pubkey print)',
    'interface_name': 'is not an interface name (1-15 of A-Z a-z 0-9 _ . -, not starting with -)',
    'unit_path': 'must be an absolute path without white space, control characters or backslash',
    'unit_text': 'must be one line of text without control characters or backslash',
}


def is_wireguard_key(value):
    return isinstance(value, str) and WIREGUARD_KEY.fullmatch(value) is not None


def is_interface_name(value):
    return (isinstance(value, str) and INTERFACE_NAME.fullmatch(value) is not None
            and value not in ('.', '..'))


def is_unit_path(value):
    return isinstance(value, str) and value.startswith('/') and not _NOT_IN_PATH.search(value)


def is_unit_text(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True   # a number prints as one plain line
    return isinstance(value, str) and not _NOT_ONE_LINE.search(value)


_CHECKS = {'wireguard_key': is_wireguard_key, 'interface_name': is_interface_name,
           'unit_path': is_unit_path, 'unit_text': is_unit_text}


def problem(value, kind, name):
    """'' when `value` is a valid `kind` (one of KINDS), else "<name>=<value, quoted> <what it must be>".
    The value is shown with repr(), so a newline in it reads as \\n."""
    if kind not in KINDS:
        raise ValueError('kind must be one of %s, got %r' % (', '.join(sorted(KINDS)), kind))
    if _CHECKS[kind](value):
        return ''
    return '%s=%r %s' % (name, value, KINDS[kind])


def systemd_quote(word):
    """`word` as one ExecStart= argument that systemd hands to the program unchanged.

    systemd expands %-specifiers in the whole line, then splits it into words (double quotes,
    C escapes), then substitutes $VARIABLES in each word: % is doubled, $ is doubled, and a word
    with anything but plain characters goes in double quotes with \\, " and control characters
    escaped."""
    word = str(word)
    if _SYSTEMD_PLAIN.fullmatch(word):
        return word
    out = []
    for char in word.replace('%', '%%').replace('$', '$$'):
        if char in '\\"':
            out.append('\\' + char)
        elif ord(char) < 0x20 or ord(char) == 0x7f:
            out.append('\\x%02x' % ord(char))
        else:
            out.append(char)
    return '"%s"' % ''.join(out)
