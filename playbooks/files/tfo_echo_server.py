# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A tiny TCP Fast Open request/response server for longhaul.trainnet.link_measure (tfo_port).

Listens on PORT with TCP_FASTOPEN set on the listening socket, reads one request per
connection (the data may arrive in the SYN) and answers with one line, then closes.
Standard library only; playbooks/measure.yml copies it to the peer and runs it under
`timeout`, and stops it by pid when the pair is measured.

Whether the kernel accepts data in the SYN is the host's net.ipv4.tcp_fastopen: the server
bit (2) must be set. A Debian default (1, client only) accepts no TFO: the client then falls
back to a normal handshake, which is what a before/after comparison is meant to show.

Usage: python3 tfo_echo_server.py PORT [BIND_ADDRESS]
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket
import sys

TCP_FASTOPEN = getattr(socket, 'TCP_FASTOPEN', 23)
QUEUE = 64          # TFO pending-request queue length (the setsockopt value)
REPLY = b'trainnet-tfo-ok\n'


def serve(port, bind=''):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN, QUEUE)
    listener.bind((bind, port))
    listener.listen(QUEUE)
    while True:
        conn, _peer = listener.accept()
        try:
            conn.settimeout(5.0)
            if conn.recv(4096):
                conn.sendall(REPLY)
        except (OSError, socket.error):
            pass
        finally:
            conn.close()


def main(argv):
    if len(argv) not in (2, 3):
        sys.stderr.write('usage: tfo_echo_server.py PORT [BIND_ADDRESS]\n')
        return 2
    try:
        serve(int(argv[1]), argv[2] if len(argv) == 3 else '')
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
