"""The standalone TFO probe, on loopback only (no root): output shape and bounded run time."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

PROBE = Path(__file__).resolve().parents[2] / "benchmarks" / "trainnet_bench" / "tfo_probe.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_probe_times_repeat_connections_on_loopback():
    port = free_port()
    server = subprocess.Popen([sys.executable, str(PROBE), "server", str(port), "5"],
                              stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(50):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        client = subprocess.run([sys.executable, str(PROBE), "client", "127.0.0.1", str(port), "3"],
                                capture_output=True, text=True, timeout=30, check=True)
    finally:
        out, _ = server.communicate(timeout=15)
    lines = [json.loads(line) for line in client.stdout.splitlines()]
    assert [line["conn"] for line in lines] == [0, 1, 2, 3]
    assert lines[0]["priming"] and not any(line["priming"] for line in lines[1:])
    for line in lines:
        assert "error" not in line, line
        assert 0 <= line["ttfb_ms"] < 1000
        assert line["syn_data_acked"] in (True, False)
    served = json.loads(out.strip().splitlines()[-1])["served"]
    assert served >= 4  # the readiness probe connection may count too


def test_probe_usage_error():
    result = subprocess.run([sys.executable, str(PROBE), "nonsense"], capture_output=True,
                            text=True, timeout=10, check=False)
    assert result.returncode != 0 and "usage" in result.stderr
