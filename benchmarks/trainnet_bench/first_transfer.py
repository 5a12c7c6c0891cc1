"""Time to deliver N bytes on a new TCP connection, from connect() to the last byte's arrival.

Run on two lab hosts with `python3 -I -c <this file's source>` (see argv helpers below), so the
hosts need no copy of the repository:

    server ADDRESS PORT SECONDS [MAX]   accept connections until SECONDS pass (or MAX were
                                  served); each starts with one request line "push N" or "pull N"
    client ADDRESS PORT BYTES COUNT [MODE]   COUNT connections one after another; one JSON line
                                  per connection {"conn", "mode", "bytes", "delivered_ms",
                                  "connect_ms"} or {"conn", "mode", "error"}

Two directions, because TCP treats them differently on a new connection:
  push (default): the client (the initiator) sends N bytes and the server answers one JSON line
      {"bytes": n, "last_byte_at": unix time}. A gradient bucket or a checkpoint upload. Its first
      flight is bounded by the window of the server's SYN-ACK, which is never scaled (RFC 7323:
      at most 65535 bytes), so a bigger initial window only helps from the second round trip on.
  pull: the client sends the request line and the server answers N bytes. A rendezvous answer or
      a shard read. The server's first flight is bounded by the client's scaled window, so the
      route's initcwnd (server) and initrwnd (client) decide it.
The lab's hosts share one kernel clock (containers on one machine), so the server's arrival time
minus the client's start is the push delivery time without clock skew. Every socket has a timeout
and the server a deadline: nothing outlives its run.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

CHUNK = 65536
TIMEOUT_S = 30.0
MODES = ("push", "pull")


def serve(address: str, port: int, seconds: float, max_connections: int = 0) -> int:
    deadline = time.monotonic() + seconds
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((address, port))
        listener.listen(8)
        served = 0
        while time.monotonic() < deadline and not (max_connections and served >= max_connections):
            listener.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                conn, _peer = listener.accept()
            except socket.timeout:
                break
            with conn:
                conn.settimeout(TIMEOUT_S)
                try:
                    answer_one(conn)
                except (OSError, ValueError):
                    continue
            served += 1
    print(json.dumps({"served": served}), flush=True)
    return 0


def read_line(sock: socket.socket) -> bytes:
    """Bytes up to the first newline, one byte at a time (the request is a few bytes): nothing
    after it is consumed, so a push's payload is counted whole."""
    line = b""
    while not line.endswith(b"\n"):
        data = sock.recv(1)
        if not data:
            raise ValueError("connection closed before the request line")
        line += data
        if len(line) > 64:
            raise ValueError("request line too long")
    return line


def send_bytes(sock: socket.socket, size: int) -> None:
    payload = b"\0" * min(size, CHUNK)
    left = size
    while left > 0:
        left -= sock.send(payload[:min(left, len(payload))])


def answer_one(conn: socket.socket) -> None:
    mode, _sep, size = read_line(conn).decode().strip().partition(" ")
    if mode == "pull":
        send_bytes(conn, int(size))
        conn.shutdown(socket.SHUT_WR)
        conn.recv(1)  # the client closes once it has every byte
        return
    received, last = 0, None
    while True:
        data = conn.recv(CHUNK)
        if not data:
            break
        received += len(data)
        last = time.time()
    conn.sendall((json.dumps({"bytes": received, "last_byte_at": last}) + "\n").encode())


def transfer_one(address: str, port: int, size: int, mode: str = "push") -> dict:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    start = time.time()
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT_S)
        sock.connect((address, port))
        connected = time.time()
        sock.sendall(f"{mode} {size}\n".encode())
        if mode == "pull":
            received = 0
            while received < size:
                data = sock.recv(CHUNK)
                if not data:
                    raise OSError("server sent %d of %d bytes" % (received, size))
                received += len(data)
            last_byte_at = time.time()
        else:
            send_bytes(sock, size)
            sock.shutdown(socket.SHUT_WR)
            answer = b""
            while not answer.endswith(b"\n"):
                data = sock.recv(4096)
                if not data:
                    break
                answer += data
            reply = json.loads(answer.decode() or "{}")
            if reply.get("bytes") != size or reply.get("last_byte_at") is None:
                raise OSError("server received %r of %d bytes" % (reply.get("bytes"), size))
            last_byte_at = reply["last_byte_at"]
    return {"bytes": size, "delivered_ms": round((last_byte_at - start) * 1000, 2),
            "connect_ms": round((connected - start) * 1000, 2)}


def client(address: str, port: int, size: int, count: int, mode: str = "push") -> int:
    for conn in range(count):
        try:
            record = dict(transfer_one(address, port, size, mode), conn=conn, mode=mode)
        except (OSError, ValueError) as exc:
            record = {"conn": conn, "mode": mode, "error": str(exc)}
        print(json.dumps(record), flush=True)
        time.sleep(0.2)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) in (4, 5) and argv[0] == "server":
        return serve(argv[1], int(argv[2]), float(argv[3]), int(argv[4]) if len(argv) == 5 else 0)
    if len(argv) in (5, 6) and argv[0] == "client" and (len(argv) == 5 or argv[5] in MODES):
        return client(argv[1], int(argv[2]), int(argv[3]), int(argv[4]), *argv[5:])
    print("usage: server ADDRESS PORT SECONDS [MAX] | client ADDRESS PORT BYTES COUNT [push|pull]",
          file=sys.stderr)
    return 2


def source() -> str:
    return Path(__file__).read_text()


def server_argv(address: str, port: int, seconds: float, python: str = "python3",
                max_connections: int = 0) -> list[str]:
    return [python, "-I", "-c", source(), "server", address, str(port), str(seconds), str(max_connections)]


def client_argv(address: str, port: int, size: int, count: int, python: str = "python3",
                mode: str = "push") -> list[str]:
    return [python, "-I", "-c", source(), "client", address, str(port), str(size), str(count), mode]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
