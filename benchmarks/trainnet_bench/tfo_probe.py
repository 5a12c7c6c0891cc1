"""Standalone TCP Fast Open probe, run inside the lab hosts with `python3 -c <this file> ...`.

    server PORT SECONDS            accept request/response connections until SECONDS pass
    client ADDRESS PORT COUNT      one priming connection, then COUNT timed repeat connections

The client uses sendto(MSG_FASTOPEN) on every connection, as a TFO-aware application does, and
prints one JSON line per connection: time from the send to the first byte of the answer, and
whether the server acknowledged the data in the SYN (TCP_INFO tcpi_options & TCPI_OPT_SYN_DATA,
as longhaul.trainnet.link_measure checks). Whether that saves a round trip depends on the hosts'
net.ipv4.tcp_fastopen: the client needs bit 1, the server bit 2 (Debian's default is 1).
The server sets the TCP_FASTOPEN socket option on its listener, which the kernel honours only with
the server bit set. Standard library only; every socket operation has a timeout.
"""

import json
import socket
import struct
import sys
import time

MSG_FASTOPEN = getattr(socket, "MSG_FASTOPEN", 0x20000000)
TCP_FASTOPEN = getattr(socket, "TCP_FASTOPEN", 23)
TCP_INFO = getattr(socket, "TCP_INFO", 11)
TCPI_OPT_SYN_DATA = 32
REQUEST = b"trainnet-bench-tfo\n"


def server(port, seconds):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.IPPROTO_TCP, TCP_FASTOPEN, 16)
    listener.bind(("0.0.0.0", port))
    listener.listen(16)
    deadline = time.monotonic() + seconds
    served = 0
    while time.monotonic() < deadline:
        listener.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            conn, _peer = listener.accept()
        except socket.timeout:
            break
        try:
            conn.settimeout(5)
            if conn.recv(256):
                conn.sendall(b"ok\n")
                served += 1
        except OSError:
            pass
        finally:
            conn.close()
    print(json.dumps({"served": served}))


def one_request(address, port, timeout):
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Kernel timeouts on a blocking socket (settimeout would make sendto(MSG_FASTOPEN)
    # non-blocking and fail with EINPROGRESS).
    seconds = int(timeout)
    timeval = struct.pack("ll", seconds, int((timeout - seconds) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    try:
        started = time.perf_counter()
        sock.sendto(REQUEST, MSG_FASTOPEN, (address, port))
        data = sock.recv(16)
        elapsed = (time.perf_counter() - started) * 1000.0
        info = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 104)
        acked = bool(bytearray(info)[5] & TCPI_OPT_SYN_DATA) if len(info) > 5 else None
        if not data:
            return {"error": "closed without an answer"}
        return {"ttfb_ms": round(elapsed, 3), "syn_data_acked": acked}
    except OSError as exc:
        return {"error": str(exc)}
    finally:
        sock.close()


def client(address, port, count, timeout=5.0):
    for index in range(count + 1):
        result = one_request(address, port, timeout)
        result.update(conn=index, priming=index == 0)
        print(json.dumps(result), flush=True)
        time.sleep(0.05)


def main(argv):
    if argv[:1] == ["server"]:
        server(int(argv[1]), float(argv[2]))
    elif argv[:1] == ["client"]:
        client(argv[1], int(argv[2]), int(argv[3]))
    else:
        sys.exit("usage: server PORT SECONDS | client ADDRESS PORT COUNT")


if __name__ == "__main__":
    main(sys.argv[1:])
