# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The one TCP Fast Open request/response server and timed client of the collection.

Used by the tfo_server module (the server on the measured peer), by link_measure (the client)
and, run as a program, by the benchmarks:

    python3 -I tfo.py server ADDRESS PORT SECONDS [MAX_CONNECTIONS]
    python3 -I tfo.py client ADDRESS PORT COUNT [--no-fastopen]

The server binds the one address given (IPv4 or IPv6, the family follows the address), sets
TCP_FASTOPEN on the listener (honoured only when net.ipv4.tcp_fastopen has the server bit 2),
answers each connection's first bytes with one line and stops at its deadline or after
max_connections. The client times one request from the send (sendto(MSG_FASTOPEN), or connect)
to the first byte of the answer. Standard library only; every socket call has a time limit.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import json
import os
import socket
import struct
import sys
import time

TCP_FASTOPEN = getattr(socket, 'TCP_FASTOPEN', 23)
MSG_FASTOPEN = getattr(socket, 'MSG_FASTOPEN', 0x20000000)
TCP_INFO = getattr(socket, 'TCP_INFO', 11)
# struct tcp_info: u8 tcpi_options is byte 5; TCPI_OPT_SYN_DATA marks a SYN whose data the peer
# acknowledged (include/uapi/linux/tcp.h).
TCPI_OPTIONS_OFFSET = 5
TCPI_OPT_SYN_DATA = 32
TCP_INFO_LEN = 104
QUEUE = 64                  # listen backlog and TFO pending-request queue
REQUEST = b'trainnet-tfo\n'
REPLY = b'trainnet-tfo-ok\n'
CONNECTION_TIMEOUT = 5.0    # one slow client cannot hold the server longer than this

# A lost SYN is resent after the initial RTO of 1 s, then 2 s, 4 s (RFC 6298): a request that
# may lose two SYNs needs 1 + 2 s plus a few round trips before it is declared failed.
INITIAL_RTO = 1.0


def rto_budget(rtt_ms, losses=2):
    """Seconds to wait for one request/response when up to `losses` retransmission timeouts
    (1 s, doubling) may hit it, plus four round trips (handshake, request, reply, slack)."""
    rtt = (rtt_ms or 0.0) / 1000.0
    return round(sum(INITIAL_RTO * 2 ** i for i in range(losses)) + 4 * rtt + 0.5, 3)


def _sockaddr(address, port):
    """(family, sockaddr) of a numeric address, IPv4 or IPv6."""
    infos = socket.getaddrinfo(address, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0,
                               socket.AI_NUMERICHOST | socket.AI_PASSIVE)
    family, _type, _proto, _name, sockaddr = infos[0]
    return family, sockaddr


def listen(address, port):
    """A TFO listener bound to `address` (one address, not every interface)."""
    family, sockaddr = _sockaddr(address, port)
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN, QUEUE)
        listener.bind(sockaddr)
        listener.listen(QUEUE)
    except BaseException:
        listener.close()
        raise
    return listener


def serve_on(listener, deadline, max_connections=None, clock=time.monotonic):
    """Answer connections on `listener` until the monotonic `deadline` or `max_connections`
    accepted; returns the number answered. Closes the listener."""
    served = 0
    accepted = 0
    try:
        while max_connections is None or accepted < max_connections:
            left = deadline - clock()
            if left <= 0:
                break
            listener.settimeout(left)
            try:
                conn, _peer = listener.accept()
            except socket.timeout:
                break
            accepted += 1
            try:
                conn.settimeout(max(0.1, min(CONNECTION_TIMEOUT, deadline - clock())))
                if conn.recv(4096):
                    conn.sendall(REPLY)
                    served += 1
            except (OSError, socket.error):
                pass
            finally:
                conn.close()
    finally:
        listener.close()
    return served


def serve(address, port, deadline, max_connections=None):
    """listen() then serve_on(); `deadline` is a time.monotonic() value."""
    return serve_on(listen(address, port), deadline, max_connections)


def syn_data_acked(tcp_info):
    """Whether TCP_INFO bytes say the peer acknowledged data sent in the SYN."""
    if not tcp_info or len(tcp_info) <= TCPI_OPTIONS_OFFSET:
        return None
    return bool(bytearray(tcp_info)[TCPI_OPTIONS_OFFSET] & TCPI_OPT_SYN_DATA)


def describe(exc):
    """'Connection refused [ECONNREFUSED]' (errors.describe_os_error's format, kept here so the
    file also runs alone as a program)."""
    code = getattr(exc, 'errno', None)
    text = getattr(exc, 'strerror', None) or (os.strerror(code) if code else '') or str(exc) \
        or exc.__class__.__name__
    name = errno.errorcode.get(code) if code else None
    return '%s [%s]' % (text, name) if name else text


def request(address, port, fastopen, timeout, payload=REQUEST, clock=time.perf_counter):
    """Time one request/response: (ttfb_ms, syn_data_acked, None) or (None, None, why).

    Kernel time limits (SO_SNDTIMEO/SO_RCVTIMEO) on a blocking socket: settimeout() would make
    sendto(MSG_FASTOPEN) non-blocking and fail with EINPROGRESS.
    """
    try:
        family, sockaddr = _sockaddr(address, port)
    except (socket.gaierror, OSError) as exc:
        return None, None, 'bad address %s: %s' % (address, describe(exc))
    sock = socket.socket(family, socket.SOCK_STREAM)
    secs = int(timeout)
    timeval = struct.pack('ll', secs, int((timeout - secs) * 1e6))
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
        started = clock()
        if fastopen:
            sock.sendto(payload, MSG_FASTOPEN, sockaddr)
        else:
            sock.connect(sockaddr)
            sock.sendall(payload)
        data = sock.recv(1)
        elapsed = (clock() - started) * 1000.0
        if not data:
            return None, None, 'the server on port %s closed the connection without answering' % port
        acked = None
        if fastopen:
            acked = syn_data_acked(sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, TCP_INFO_LEN))
        return elapsed, acked, None
    except (OSError, socket.error) as exc:
        code = getattr(exc, 'errno', None)
        if code in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINPROGRESS) or isinstance(exc, socket.timeout):
            return None, None, 'no answer within %s s' % timeout
        return None, None, describe(exc)
    finally:
        sock.close()


def retriable(why):
    """A failure a lost packet can explain (worth another attempt); a refused connection or a
    disabled TFO client is not."""
    return why is not None and ('no answer within' in why or 'ETIMEDOUT' in why
                                or 'ECONNRESET' in why or 'EHOSTUNREACH' in why)


def client(address, port, count, fastopen=True, timeout=5.0, out=None):
    """One priming connection (it fetches the cookie), then `count` timed ones; one JSON line each."""
    out = out or sys.stdout
    for index in range(count + 1):
        ttfb, acked, why = request(address, port, fastopen, timeout)
        line = {'conn': index, 'priming': index == 0}
        if why:
            line['error'] = why
        else:
            line.update(ttfb_ms=round(ttfb, 3), syn_data_acked=acked)
        out.write(json.dumps(line) + '\n')
        out.flush()
        time.sleep(0.05)


USAGE = ('usage: tfo.py server ADDRESS PORT SECONDS [MAX_CONNECTIONS]\n'
         '       tfo.py client ADDRESS PORT COUNT [--no-fastopen]\n')


def main(argv):
    try:
        if len(argv) in (4, 5) and argv[0] == 'server':
            max_connections = int(argv[4]) if len(argv) == 5 else None
            served = serve(argv[1], int(argv[2]), time.monotonic() + float(argv[3]), max_connections)
            sys.stdout.write(json.dumps({'served': served}) + '\n')
            return 0
        if len(argv) in (4, 5) and argv[0] == 'client' and argv[4:] in ([], ['--no-fastopen']):
            client(argv[1], int(argv[2]), int(argv[3]), fastopen=not argv[4:])
            return 0
    except ValueError as exc:
        sys.stderr.write('tfo.py: %s\n%s' % (exc, USAGE))
        return 2
    sys.stderr.write(USAGE)
    return 2


if __name__ == '__main__':
    raise SystemExit(main(sys.argv[1:]))
