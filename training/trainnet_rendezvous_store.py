"""longhaul.trainnet rendezvous store: the c10d TCPStore that torchrun's c10d rendezvous talks to.

Why a process of its own: torchrun's c10d backend (torch/distributed/elastic/rendezvous/
c10d_rendezvous_backend.py, `_create_tcp_store`) makes an agent host the store only when the
endpoint is one of its own addresses (`_matches_machine_hostname`) or `is_host=true`; every
other agent connects as a client. The rendezvous address lives on the control anchor, which
is not a training node, so without this server no agent hosts the store and all of them time
out. Run it there under systemd; training nodes should set `is_host=false` in PET_RDZV_CONF so
that none of them ever starts a second store of its own.

TCPStore binds its server to every address (`*:port`) when given a port; this server binds a
socket to the rendezvous address only and hands it over (`master_listen_fd`), as the project's
helpers are bound to the address they serve.

Modes
  serve (default)  --host ADDR --port PORT: serve until SIGTERM/SIGINT, then close and exit 0.
                   Tells systemd READY=1 / STOPPING=1 when NOTIFY_SOCKET is set (Type=notify).
  --check          connect as a client to ADDR:PORT, set and read back a key, exit 0 / 1:
                   the launch preflight's "rendezvous is reachable".
Touches: one listening TCP socket on ADDR:PORT (serve), one TCP connection (check).
Exit codes: 0 ok, 1 cannot bind / not reachable, 2 bad arguments.
"""

import argparse
import datetime
import ipaddress
import os
import signal
import socket
import sys
import threading
import time


def _port(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a TCP port 1..65535, got %r" % text) from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError("expected a TCP port 1..65535, got %r" % text)
    return value


def _address(text):
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise argparse.ArgumentTypeError("expected an IP address (the rendezvous address), got %r" % text) from None


def _seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected seconds > 0, got %r" % text) from None
    if value <= 0:
        raise argparse.ArgumentTypeError("expected seconds > 0, got %r" % text)
    return value


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--host", type=_address, required=True, help="the rendezvous address (IP) to bind or to check")
    p.add_argument("--port", type=_port, default=29400, help="default 29400 (torchrun's c10d default)")
    p.add_argument("--timeout-sec", type=_seconds, default=300.0,
                   help="store operation timeout (serve) or connect timeout (check); default 300")
    p.add_argument("--check", action="store_true", help="probe a running store instead of serving")
    p.add_argument("--freebind", action="store_true",
                   help="serve: bind the address even while it is not local here (IP_FREEBIND): a standby store on "
                        "an anchor that takes the rendezvous address over")
    return p


def _log(message):
    print("trainnet_rendezvous_store: %s" % message, file=sys.stderr, flush=True)


def sd_notify(state, environ=None):
    """systemd notification without libsystemd: one datagram to $NOTIFY_SOCKET (no-op without it)."""
    path = (environ or os.environ).get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(path)
            sock.sendall(state.encode())
        except OSError:
            return False
    return True


def _torch_store():
    import warnings
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    try:
        from torch.distributed import TCPStore
    except ImportError as exc:
        _log("cannot import torch.distributed (%s): install torch on this host (pip install torch==2.13.0)" % exc)
        return None
    return TCPStore


# Linux's IP_FREEBIND (include/uapi/linux/in.h); Python exposes it only on some builds.
IP_FREEBIND = getattr(socket, "IP_FREEBIND", 15)


def bind_listener(host, port, freebind=False):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # A restart right after a stop must not wait out TIME_WAIT of the old connections.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if freebind:
            sock.setsockopt(socket.SOL_IP, IP_FREEBIND, 1)
        sock.bind((host, port))
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


def serve(args):
    stop = threading.Event()

    def on_signal(signum, _frame):
        _log("signal %s: stopping" % signal.Signals(signum).name)
        stop.set()
    # Installed before the (slow) torch import so an early SIGTERM still ends in a clean exit.
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        listener = bind_listener(args.host, args.port, freebind=args.freebind)
    except OSError as exc:
        _log("cannot listen on %s:%d: %s (is the rendezvous address assigned here, is the port free?)"
             % (args.host, args.port, exc.strerror or exc))
        return 1
    TCPStore = _torch_store()
    if TCPStore is None or stop.is_set():
        listener.close()
        return 1 if TCPStore is None else 0
    try:
        store = TCPStore(args.host, args.port, is_master=True, wait_for_workers=False,
                         timeout=datetime.timedelta(seconds=args.timeout_sec), master_listen_fd=listener.fileno())
    except (RuntimeError, ValueError) as exc:
        listener.close()
        _log("cannot start the store on %s:%d: %s" % (args.host, args.port, exc))
        return 1
    # The store owns the descriptor now and closes it when it is destroyed.
    listener.detach()
    _log("serving the c10d rendezvous store on %s:%d (pid %d)" % (args.host, args.port, os.getpid()))
    sd_notify("READY=1\nSTATUS=serving %s:%d" % (args.host, args.port))
    while not stop.wait(0.5):
        pass
    sd_notify("STOPPING=1")
    del store
    _log("stopped")
    return 0


def check(args):
    TCPStore = _torch_store()
    if TCPStore is None:
        return 1
    deadline = time.monotonic() + args.timeout_sec
    try:
        store = TCPStore(args.host, args.port, is_master=False,
                         timeout=datetime.timedelta(seconds=args.timeout_sec))
        key = "trainnet/check/%s/%d" % (socket.gethostname(), os.getpid())
        store.set(key, "ok")
        value = store.get(key)
        store.delete_key(key)
    except (RuntimeError, ValueError, TimeoutError) as exc:
        _log("rendezvous store %s:%d is not reachable: %s" % (args.host, args.port, str(exc).splitlines()[0] if str(exc) else exc))
        return 1
    if value != b"ok":
        _log("rendezvous store %s:%d answered %r instead of the value just set" % (args.host, args.port, value))
        return 1
    print("rendezvous store %s:%d reachable in %.3f s" % (args.host, args.port, args.timeout_sec - (deadline - time.monotonic())), flush=True)
    return 0


def main(argv=None):
    args = build_parser().parse_args(argv)
    return check(args) if args.check else serve(args)


if __name__ == "__main__":
    sys.exit(main())
