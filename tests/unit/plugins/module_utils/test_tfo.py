# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils/tfo.py: the real server and client on loopback (127.0.0.1 and ::1) only."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import tfo

TFO_PY = os.path.abspath(tfo.__file__)


def has_ipv6_loopback():
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        sock.bind(('::1', 0))
        sock.close()
        return True
    except OSError:
        return False


ADDRESSES = ['127.0.0.1', pytest.param('::1', marks=pytest.mark.skipif(not has_ipv6_loopback(), reason='no ::1'))]


def fastopen_mode():
    with open('/proc/sys/net/ipv4/tcp_fastopen') as handle:
        return int(handle.read())


def start(address, seconds=10, max_connections=None):
    listener = tfo.listen(address, 0)
    port = listener.getsockname()[1]
    served = []
    thread = threading.Thread(target=lambda: served.append(
        tfo.serve_on(listener, time.monotonic() + seconds, max_connections)))
    thread.daemon = True
    thread.start()
    return port, served, thread


def test_syn_data_acked():
    info = struct.pack('8B', 1, 0, 0, 0, 0, 0x20 | 0x07, 0x77, 0) + b'\0' * 96
    assert tfo.syn_data_acked(info) is True
    assert tfo.syn_data_acked(struct.pack('8B', 1, 0, 0, 0, 0, 0x07, 0, 0)) is False
    assert tfo.syn_data_acked(b'') is None


@pytest.mark.parametrize('address', ADDRESSES)
def test_listener_binds_only_the_given_address(address):
    listener = tfo.listen(address, 0)
    try:
        assert listener.getsockname()[0] == address
        assert listener.family == (socket.AF_INET6 if ':' in address else socket.AF_INET)
        assert listener.getsockopt(socket.IPPROTO_TCP, tfo.TCP_FASTOPEN) > 0
    finally:
        listener.close()


@pytest.mark.parametrize('address', ADDRESSES)
def test_client_and_server_on_loopback(address):
    port, served, thread = start(address, max_connections=4)
    plain = tfo.request(address, port, False, 2.0)
    priming = tfo.request(address, port, True, 2.0)
    timed = [tfo.request(address, port, True, 2.0) for _i in range(2)]
    thread.join(5)
    assert not thread.is_alive(), 'max_connections=4 must end the server'
    assert served == [4]
    assert plain[2] is None and 0 < plain[0] < 1000 and plain[1] is None
    assert priming[2] is None
    # data in the SYN is acknowledged only with client (1) and server (2) bits both on
    assert [t[1] for t in timed] == [fastopen_mode() & 3 == 3] * 2
    assert all(t[2] is None and 0 < t[0] < 1000 for t in timed)


@pytest.mark.parametrize('address', ADDRESSES)
def test_server_stops_at_its_deadline(address):
    started = time.monotonic()
    port, served, thread = start(address, seconds=0.5)
    thread.join(5)
    assert served == [0] and time.monotonic() - started < 3
    assert 'ECONNREFUSED' in tfo.request(address, port, False, 1.0)[2]


def test_silent_client_cannot_hold_the_server_past_its_deadline():
    port, served, thread = start('127.0.0.1', seconds=1.0)
    idle = socket.create_connection(('127.0.0.1', port), timeout=2)
    try:
        thread.join(4)
        assert not thread.is_alive() and served == [0]
    finally:
        idle.close()


def test_request_times_out_without_an_answer():
    # a listener that never accepts answers the handshake (backlog) but never the request
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(('127.0.0.1', 0))
    listener.listen(1)
    try:
        started = time.monotonic()
        ttfb, acked, why = tfo.request('127.0.0.1', listener.getsockname()[1], False, 0.3)
        assert (ttfb, acked) == (None, None) and why == 'no answer within 0.3 s'
        assert tfo.retriable(why)
        assert time.monotonic() - started < 2
    finally:
        listener.close()


def test_refused_and_disabled_are_not_retriable():
    assert not tfo.retriable('Connection refused [ECONNREFUSED]')
    assert not tfo.retriable('Operation not supported [EOPNOTSUPP]')
    assert not tfo.retriable(None)
    assert tfo.retriable('Connection reset by peer [ECONNRESET]')


@pytest.mark.parametrize('rtt_ms, budget', [(None, 3.5), (0.05, 3.5), (150, 4.1), (200, 4.3)])
def test_rto_budget_covers_two_lost_syns(rtt_ms, budget):
    assert tfo.rto_budget(rtt_ms) == budget
    # the old fixed 2 s did not cover one lost SYN (1 s RTO) plus three round trips at 200 ms
    assert tfo.rto_budget(rtt_ms) > 1.0 + 3 * (rtt_ms or 0) / 1000.0


def test_program_runs_isolated_from_its_directory(tmp_path):
    # `python3 -I tfo.py` ignores PYTHONPATH and does not import from the script's directory:
    # a planted socket.py next to a copy of the script is not imported.
    copy = tmp_path / 'tfo.py'
    copy.write_text(open(TFO_PY).read())
    (tmp_path / 'socket.py').write_text(u'raise SystemExit("planted module imported")\n')
    port_sock = socket.socket()
    port_sock.bind(('127.0.0.1', 0))
    port = port_sock.getsockname()[1]
    port_sock.close()
    server = subprocess.Popen([sys.executable, '-I', str(copy), 'server', '127.0.0.1', str(port), '10', '4'],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=str(tmp_path))
    try:
        for _i in range(100):
            probe = socket.socket()
            ready = probe.connect_ex(('127.0.0.1', port)) == 0
            probe.close()
            if ready:
                break
            time.sleep(0.05)
        client = subprocess.run([sys.executable, '-I', str(copy), 'client', '127.0.0.1', str(port), '2'],
                                capture_output=True, timeout=20, check=True, cwd=str(tmp_path))
    finally:
        out, err = server.communicate(timeout=15)
    lines = [json.loads(line) for line in client.stdout.decode().splitlines()]
    assert [line['conn'] for line in lines] == [0, 1, 2]
    assert all('error' not in line and 0 <= line['ttfb_ms'] < 1000 for line in lines), lines
    assert server.returncode == 0, err
    assert json.loads(out.decode().splitlines()[-1]) == {'served': 3}   # + the readiness probe = 4


def test_program_usage_error():
    result = subprocess.run([sys.executable, '-I', TFO_PY, 'nonsense'], capture_output=True, timeout=10, check=False)
    assert result.returncode == 2 and b'usage' in result.stderr
