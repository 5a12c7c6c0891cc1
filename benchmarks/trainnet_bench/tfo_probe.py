"""TCP Fast Open probe commands for the lab hosts: the collection's own server and client
(plugins/module_utils/tfo.py, the code link_measure and the tfo_server module run), shipped as
`python3 -I -c <source>` so the hosts need no copy of the repository and nothing runs from a
shared path; the server runs as nobody (setpriv), bound to the server host's lab address.

    server: accept request/response connections until SECONDS pass, then print {"served": N}
    client: one priming connection, then COUNT timed repeat connections, one JSON line each:
            {"conn", "priming", "ttfb_ms", "syn_data_acked"} or {"conn", "priming", "error"}

Whether TFO saves a round trip depends on the hosts' net.ipv4.tcp_fastopen: the client needs
bit 1, the server bit 2 (Debian's default is 1).
"""

from __future__ import annotations

from pathlib import Path

TFO_PY = Path(__file__).resolve().parents[2] / "plugins" / "module_utils" / "tfo.py"
UNPRIVILEGED = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


def source() -> str:
    return TFO_PY.read_text()


def server_argv(address: str, port: int, seconds: float, python: str = "python3",
                unprivileged: bool = True) -> list[str]:
    argv = [python, "-I", "-c", source(), "server", address, str(port), str(seconds)]
    return UNPRIVILEGED + argv if unprivileged else argv


def client_argv(address: str, port: int, count: int, python: str = "python3") -> list[str]:
    return [python, "-I", "-c", source(), "client", address, str(port), str(count)]
