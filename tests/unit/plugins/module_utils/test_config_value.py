# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 23 finding 9: values written into line-based root configuration (WireGuard peers, systemd
units) are checked in module_utils/config_value.py, and unit arguments are quoted for systemd."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import os
import re
import shutil
import subprocess

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import config_value as cv
from ansible_collections.longhaul.trainnet.plugins.module_utils.control_plane import interface_name, valid_preshared_key

# Real keys: the examples of wg(8) and wg-quick(8) (wg pubkey accepts each).
REAL_KEYS = [
    'yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=',
    'xTIBA5rboUvnH4htodjb6e697QjLERt1NAB4mZqp8Dg=',
    'HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=',
    'TrMvSoP4jYQlY6RIzBgbssQqY3vxI2Pi+y71lOWWXX0=',
    'gN65BkIKy1eCE9pP1wdc8ROUtkHLF2PfAqYdyYBz6EA=',
]
KEY = REAL_KEYS[0]
INJECTED_KEY = KEY + '\n[Peer]\nPublicKey = %s\nAllowedIPs = 0.0.0.0/0' % REAL_KEYS[1]
INJECTED_NAME = 'wgsync0\nExecStart=/bin/sh -c "id > /tmp/pwned"'


def test_real_keys_pass():
    for key in REAL_KEYS:
        assert cv.is_wireguard_key(key), key
        assert cv.problem(key, 'wireguard_key', 'public key') == ''


def test_every_encoding_of_32_bytes_passes():
    for raw in [b'\0' * 32, b'\xff' * 32] + [os.urandom(32) for unused in range(200)]:
        assert cv.is_wireguard_key(base64.b64encode(raw).decode('ascii'))


@pytest.mark.skipif(shutil.which('wg') is None, reason='wireguard-tools (wg) not installed')
def test_keys_of_wg_itself_pass():
    private = subprocess.run(['wg', 'genkey'], capture_output=True, text=True, check=True, timeout=10).stdout.strip()
    public = subprocess.run(['wg', 'pubkey'], input=private + '\n', capture_output=True, text=True, check=True,
                            timeout=10).stdout.strip()
    assert cv.is_wireguard_key(private) and cv.is_wireguard_key(public)


@pytest.mark.parametrize('bad', [
    INJECTED_KEY,
    KEY + '\n',                        # re.match with $ accepted this one
    KEY + ' ', ' ' + KEY, KEY[:-2] + '=',
    'B' * 43 + '=',                    # 32 bytes but not canonical: wg refuses it
    KEY.replace('=', 'A'),             # 33 bytes' worth
    KEY[:-1],                          # no padding
    '(generated on the first run)', '', None, 42, b'yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=',
])
def test_keys_that_are_not_keys_are_refused(bad):
    assert not cv.is_wireguard_key(bad)
    message = cv.problem(bad, 'wireguard_key', 'public key of b-gpu')
    assert message.startswith('public key of b-gpu=%r is not a WireGuard key' % (bad,))
    assert '\n' not in message    # the value is shown escaped: the message is one line too


@pytest.mark.parametrize('name', ['eth0', 'enp1s0f0', 'wgsync0', 'wg-usw-anchor', 'bond0.100', 'br_lan', 'x' * 15, 'lo'])
def test_real_interface_names_pass(name):
    assert cv.problem(name, 'interface_name', 'sync_tunnel_interface') == ''


@pytest.mark.parametrize('name', [INJECTED_NAME, 'eth0\n', 'eth 0', 'x' * 16, '', '-eth0', '.', '..', 'eth0/1',
                                  'eth0:1', 'eth0;', 'wg$x', None])
def test_bad_interface_names_are_refused(name):
    message = cv.problem(name, 'interface_name', 'sync_tunnel_interface')
    assert message == 'sync_tunnel_interface=%r is not an interface name (1-15 of A-Z a-z 0-9 _ . -, not starting with -)' % (name,)


@pytest.mark.parametrize('text', ['cn-home<->us-east', 'cn-home<->us-east (measured from usw-gpu1)', 'measured 198.18.3.2',
                                  '198.18.3.0/24', 'Zürich', 42])
def test_unit_text_passes(text):
    assert cv.is_unit_text(text)


@pytest.mark.parametrize('text', ['x\nExecStart=/bin/sh', 'x\rExecStart=/bin/sh', 'x\x00', 'tab\there', 'joins the next line\\',
                                  None, ['x']])
def test_unit_text_refuses_line_breaks_and_continuations(text):
    assert cv.problem(text, 'unit_text', 'data_plane_path_routes[0].name').startswith(
        'data_plane_path_routes[0].name=%r must be one line' % (text,))


@pytest.mark.parametrize('path, ok', [
    ('/etc/trainnet/wireguard', True), ('/var/lib/prometheus/node-exporter', True), ('/opt/venv-2.13/bin/python3', True),
    ('etc/trainnet', False), ('/etc/train net', False), ('/etc/x\nExecStart=/bin/sh', False), ('/etc/x\n', False),
    ('/etc/x\\', False), ('/etc/\tx', False), ('', False), (None, False),
])
def test_unit_paths(path, ok):
    assert cv.is_unit_path(path) is ok
    assert (cv.problem(path, 'unit_path', 'control_plane_key_dir') == '') is ok


def test_unknown_kind_is_an_error():
    with pytest.raises(ValueError, match='kind must be one of interface_name, unit_path, unit_text, wireguard_key'):
        cv.problem('x', 'ifname', 'x')


def test_control_plane_uses_the_same_rules():
    # Bug: 'wg-' + a name with a trailing newline passed ^...$ and became an interface name.
    assert interface_name('usw-anchor', 3) == 'wg-usw-anchor'
    assert interface_name('usw-anchor\n', 3) == 'wg-id3'
    assert interface_name('usw-anchor\nExecStart=/bin/sh', 3) == 'wg-id3'
    assert interface_name('a-very-long-anchor-name', 4) == 'wg-id4'
    assert valid_preshared_key(KEY) and valid_preshared_key(KEY + '\n')   # a key file's newline is stripped
    assert not valid_preshared_key(INJECTED_KEY) and not valid_preshared_key('B' * 43 + '=')


# --------------------------------------------------------------------------- systemd quoting

def systemd_words(line):
    """How systemd 252 reads the arguments of an ExecStart= line: specifiers (%% -> %), then words
    split on white space with double/single quotes and C escapes, then $$ -> $ in each word."""
    line = re.sub(r'%(.)', lambda m: '%' if m.group(1) == '%' else pytest.fail('specifier %' + m.group(1)), line)
    escapes = {'n': '\n', 't': '\t', 'r': '\r', '\\': '\\', '"': '"', "'": "'", 'a': '\a', 'b': '\b', 'f': '\f',
               'v': '\v', 's': ' '}
    words, word, quote, started, i = [], [], None, False, 0
    while i < len(line):
        char = line[i]
        if char == '\\':
            nxt = line[i + 1]
            if nxt == 'x':
                word.append(chr(int(line[i + 2:i + 4], 16)))
                i += 4
            else:
                word.append(escapes[nxt])
                i += 2
            started = True
            continue
        if quote:
            if char == quote:
                quote = None
            else:
                word.append(char)
        elif char in '"\'':
            quote, started = char, True
        elif char in ' \t':
            if started:
                words.append(''.join(word))
            word, started = [], False
        else:
            word.append(char)
            started = True
        i += 1
    assert quote is None, 'unterminated quote in %r' % line
    if started:
        words.append(''.join(word))
    for w in words:
        assert not re.search(r'(?<!\$)\$(?!\$)', w.replace('$$', '')), 'unescaped $ in %r' % w
    return [w.replace('$$', '$') for w in words]


HOSTILE = ['/etc/train net/keys', '/tmp/x\nExecStart=/bin/sh', '100%h', 'a"b', "it's", 'back\\slash', '$HOME',
           '${PATH}', '; /bin/sh', '-rf', 'tab\tx', 'bell\x07', '', 'Zürich']


@pytest.mark.parametrize('word', HOSTILE)
def test_systemd_quote_gives_systemd_the_word_back(word):
    quoted = cv.systemd_quote(word)
    assert '\n' not in quoted and '\r' not in quoted
    assert systemd_words('/usr/bin/prog %s --end' % quoted) == ['/usr/bin/prog', word, '--end']


@pytest.mark.parametrize('word', ['/usr/local/libexec/trainnet/trainnet-wg-setup', '/etc/trainnet/wireguard', 'wgsync0',
                                  '10.255.0.1', 'usw-anchor', 'rsync://trainnet@10.0.0.1:873/manifests/a-gpu/', 29400])
def test_systemd_quote_leaves_plain_words_as_they_were(word):
    # Units of plain paths render as before: no restart of a running service for this change.
    assert cv.systemd_quote(word) == str(word)


@pytest.mark.skipif(shutil.which('systemd-analyze') is None, reason='systemd-analyze not installed')
def test_systemd_accepts_the_quoted_line(tmp_path):
    args = ' '.join(cv.systemd_quote(w) for w in HOSTILE if w)
    unit = tmp_path / 'quoted.service'
    unit.write_text('[Service]\nType=oneshot\nExecStart=/bin/true %s\n' % args)
    proc = subprocess.run(['systemd-analyze', 'verify', '--man=no', str(unit)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'quoted.service' not in proc.stdout + proc.stderr, proc.stdout + proc.stderr   # no warning about it
