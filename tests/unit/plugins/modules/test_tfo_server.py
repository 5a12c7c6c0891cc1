# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tfo_server: option checks, and the real server on 127.0.0.1 (as nobody when run as root)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import tfo
from ansible_collections.longhaul.trainnet.plugins.modules import tfo_server
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    module_patches, patch_module_args, run_main,
)

MODULE = os.path.abspath(tfo_server.__file__.replace('.pyc', '.py'))


def free_port():
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


@pytest.mark.parametrize('args, message', [
    ({'address': '0.0.0.0'}, "address='0.0.0.0' must name the one measured address, not a wildcard"),
    ({'address': '::'}, "address='::' must name the one measured address, not a wildcard"),
    ({'address': '127.0.0.1', 'port': 0}, 'port=0 must be 1-65535'),
    ({'address': '127.0.0.1', 'seconds': 0}, 'seconds=0 must be 1-3600'),
    ({'address': '127.0.0.1', 'max_connections': -1}, 'max_connections=-1 must be 0 (no limit) or more'),
])
def test_invalid_options(args, message):
    with patch_module_args(args):
        with module_patches():
            result = run_main(tfo_server.main)
    assert result['failed'] is True
    assert message in result['msg']


@pytest.mark.skipif(os.geteuid() != 0, reason='the user checks apply when run as root')
def test_root_user_refused():
    with patch_module_args({'address': '127.0.0.1', 'user': 'root'}):
        with module_patches():
            result = run_main(tfo_server.main)
    assert 'user=root is root; the server must run unprivileged' in result['msg']


def test_busy_port_is_a_clear_error():
    holder = tfo.listen('127.0.0.1', 0)
    try:
        port = holder.getsockname()[1]
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 0)
        with patch_module_args({'address': '127.0.0.1', 'port': port, 'seconds': 1}):
            with module_patches():
                result = run_main(tfo_server.main)
    finally:
        holder.close()
    assert result['failed'] is True
    assert result['msg'].startswith('cannot listen on 127.0.0.1 port %d: ' % port)
    assert 'EADDRINUSE' in result['msg']


def test_serves_bound_to_the_address_unprivileged_and_stops():
    """The real module as a program: it listens on 127.0.0.1 only, the process holding the socket
    runs as nobody when started as root, and it returns after max_connections."""
    port = free_port()
    args = {'ANSIBLE_MODULE_ARGS': {'address': '127.0.0.1', 'port': port, 'seconds': 20, 'max_connections': 3}}
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    proc.stdin.write(json.dumps(args).encode())
    proc.stdin.close()
    try:
        import pwd
        serving_uid = pwd.getpwnam('nobody').pw_uid if os.geteuid() == 0 else os.geteuid()
        owners = None
        # The root parent listens, then forks the child that drops to nobody and closes its own copy:
        # for a moment both hold the socket. Wait (bounded) until only the serving child holds it.
        for _i in range(100):
            listening = subprocess.run(['ss', '-Hltnp', 'sport = :%d' % port], capture_output=True, text=True,
                                       check=False).stdout
            if 'pid=' in listening:
                assert '127.0.0.1:%d' % port in listening     # not 0.0.0.0 or [::]
                pids = [int(part.split(',')[0]) for part in listening.split('pid=')[1:]]
                try:
                    owners = set(os.stat('/proc/%d' % pid).st_uid for pid in pids)
                except FileNotFoundError:
                    owners = None
                if owners == {serving_uid}:
                    break
            time.sleep(0.05)
        assert owners == {serving_uid}, 'the socket is held by uids %s, not only %d' % (owners, serving_uid)
        answers = [tfo.request('127.0.0.1', port, fastopen, 2.0) for fastopen in (False, True, True)]
        out = proc.stdout.read()
        assert proc.wait(10) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert all(why is None for _t, _a, why in answers), answers
    result = json.loads(out.decode())
    assert result['served'] == 3 and result['port'] == port and result['changed'] is False
    assert result['user'] == ('nobody' if os.geteuid() == 0 else result['user'])
