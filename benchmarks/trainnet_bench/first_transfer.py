"""Time to deliver N bytes on a new TCP connection, from connect() to the last byte's arrival.

Run on two lab hosts with `python3 -I -c <this file's source>` (see argv helpers below), so the
hosts need no copy of the repository:

    server ADDRESS PORT SECONDS [MAX]   accept connections until SECONDS pass (or MAX were
                                  served); for each, read until the client closes its side, then
                                  answer one JSON line {"bytes": n, "last_byte_at": unix time}
    client ADDRESS PORT BYTES COUNT   COUNT connections one after another, each sending BYTES;
                                  one JSON line per connection {"conn", "bytes", "delivered_ms",
                                  "connect_ms"} or {"conn", "error"}

The lab's hosts share one kernel clock (containers on one machine), so the server's arrival time
minus the client's start is the delivery time without clock skew: the handshake, slow start and
the bottleneck's serialization, exactly what a rendezvous message or a first gradient bucket pays.
Every socket has a timeout and the server a deadline: nothing outlives its run.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path

CHUNK = 65536
TIMEOUT_S = 30.0


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
                received, last = 0, None
                try:
                    while True:
                        data = conn.recv(CHUNK)
                        if not data:
                            break
                        received += len(data)
                        last = time.time()
                    conn.sendall((json.dumps({"bytes": received, "last_byte_at": last}) + "\n").encode())
                except OSError:
                    continue
            served += 1
    print(json.dumps({"served": served}), flush=True)
    return 0


def send_one(address: str, port: int, size: int) -> dict:
    payload = b"\0" * min(size, CHUNK)
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    start = time.time()
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.settimeout(TIMEOUT_S)
        sock.connect((address, port))
        connected = time.time()
        left = size
        while left > 0:
            sent = sock.send(payload[:min(left, len(payload))])
            left -= sent
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
    return {"bytes": size, "delivered_ms": round((reply["last_byte_at"] - start) * 1000, 2),
            "connect_ms": round((connected - start) * 1000, 2)}


def client(address: str, port: int, size: int, count: int) -> int:
    for conn in range(count):
        try:
            record = dict(send_one(address, port, size), conn=conn)
        except (OSError, ValueError) as exc:
            record = {"conn": conn, "error": str(exc)}
        print(json.dumps(record), flush=True)
        time.sleep(0.2)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) in (4, 5) and argv[0] == "server":
        return serve(argv[1], int(argv[2]), float(argv[3]), int(argv[4]) if len(argv) == 5 else 0)
    if len(argv) == 5 and argv[0] == "client":
        return client(argv[1], int(argv[2]), int(argv[3]), int(argv[4]))
    print("usage: server ADDRESS PORT SECONDS [MAX] | client ADDRESS PORT BYTES COUNT", file=sys.stderr)
    return 2


def source() -> str:
    return Path(__file__).read_text()


def server_argv(address: str, port: int, seconds: float, python: str = "python3",
                max_connections: int = 0) -> list[str]:
    return [python, "-I", "-c", source(), "server", address, str(port), str(seconds), str(max_connections)]


def client_argv(address: str, port: int, size: int, count: int, python: str = "python3") -> list[str]:
    return [python, "-I", "-c", source(), "client", address, str(port), str(size), str(count)]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
