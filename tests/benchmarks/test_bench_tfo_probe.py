"""The benchmark's TFO probe commands (the collection's module_utils/tfo.py run as `python3 -I -c`),
on loopback only: output shape, bounded run time, and one copy of the TFO code."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from trainnet_bench import tfo_probe

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_probe_runs_the_collections_tfo_code():
    assert tfo_probe.TFO_PY == REPO / "plugins" / "module_utils" / "tfo.py"
    argv = tfo_probe.server_argv("198.18.201.10", 5300, 12)
    assert argv[:5] == ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
    assert argv[5:8] == ["python3", "-I", "-c"] and argv[8] == tfo_probe.TFO_PY.read_text()
    assert argv[9:] == ["server", "198.18.201.10", "5300", "12"]
    # no second copy of the server or client in the benchmarks
    for path in (REPO / "benchmarks").rglob("*.py"):
        text = path.read_text()
        assert "MSG_FASTOPEN" not in text and "TCP_FASTOPEN" not in text, path


def test_probe_times_repeat_connections_on_loopback():
    port = free_port()
    server = subprocess.Popen(tfo_probe.server_argv("127.0.0.1", port, 5, python=sys.executable,
                                                    unprivileged=False),
                              stdout=subprocess.PIPE, text=True)
    try:
        for _ in range(50):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        client = subprocess.run(tfo_probe.client_argv("127.0.0.1", port, 3, python=sys.executable),
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
    argv = tfo_probe.client_argv("127.0.0.1", 1, 1, python=sys.executable)[:4] + ["nonsense"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    assert result.returncode != 0 and "usage" in result.stderr
