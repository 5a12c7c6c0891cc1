"""The new-connection delivery probe (benchmarks/trainnet_bench/first_transfer.py) run as the lab
runs it, `python3 -I -c <source>`, on loopback only: every byte arrives, the delivery time is
measured from connect() to the last byte, and both sides end by themselves."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time

import pytest

from trainnet_bench import first_transfer


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("mode", first_transfer.MODES)
def test_delivers_every_byte_and_times_it(mode):
    port = free_port()
    server = subprocess.Popen(first_transfer.server_argv("127.0.0.1", port, 20, python=sys.executable,
                                                         max_connections=2),
                              stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.5)
        client = subprocess.run(first_transfer.client_argv("127.0.0.1", port, 1_048_576, 2, python=sys.executable,
                                                           mode=mode),
                                capture_output=True, text=True, timeout=60, check=True)
        records = [json.loads(line) for line in client.stdout.splitlines()]
        # The server stops by itself after its two connections and says how many it served.
        served = json.loads(server.communicate(timeout=20)[0])
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=10)
    assert served == {"served": 2}
    assert [r["conn"] for r in records] == [0, 1]
    for record in records:
        assert "error" not in record, record
        assert record["bytes"] == 1_048_576 and record["mode"] == mode
        assert 0 <= record["connect_ms"] <= record["delivered_ms"] < 10_000


def test_a_refused_connection_is_reported_not_raised():
    client = subprocess.run(first_transfer.client_argv("127.0.0.1", free_port(), 1000, 1, python=sys.executable),
                            capture_output=True, text=True, timeout=60, check=True)
    record = json.loads(client.stdout)
    assert record["conn"] == 0 and "refused" in record["error"].lower()
