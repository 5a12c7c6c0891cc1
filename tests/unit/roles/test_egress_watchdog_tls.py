# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The watchdog's throughput probe through an upstream whose proxy port speaks TLS (tls: true):
on loopback, an HTTPS origin, a TLS proxy that checks basic authentication and tunnels CONNECT,
and a byte recorder in front of the proxy that keeps what crossed the "network". The credentials
must never be in the recording; a plain upstream shows the recorder does see them."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import http.server
import importlib.machinery
import importlib.util
import os
import select
import socket
import ssl
import subprocess
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
USER, PASSWORD = "trainnet", "s3cret-Proxy-Pass"
BODY = os.urandom(300000)
TIMEOUT = 10


def load_watchdog():
    path = os.path.join(ROOT, "roles", "egress_pool", "files", "trainnet-egress-watchdog")
    loader = importlib.machinery.SourceFileLoader("trainnet_egress_watchdog_tls", path)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


W = load_watchdog()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA and one certificate for localhost/127.0.0.1 (origin and proxy share it)."""
    d = tmp_path_factory.mktemp("pki")

    def run(*args):
        subprocess.run(["openssl"] + list(args), cwd=str(d), check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
        "-subj", "/CN=watchdog test CA")
    run("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", "host.key", "-out", "host.csr",
        "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1")
    run("x509", "-req", "-in", "host.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "1",
        "-out", "host.pem", "-copy_extensions", "copy")
    return {"ca": str(d / "ca.pem"), "cert": str(d / "host.pem"), "key": str(d / "host.key")}


def server_context(pki):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki["cert"], pki["key"])
    return context


def serve(listener, handle):
    """Accept connections on LISTENER in a daemon thread, one thread per connection."""
    def loop():
        while True:
            try:
                conn = listener.accept()[0]
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()


def relay(a, b):
    """Copy bytes both ways until either side closes (bounded by TIMEOUT per wait)."""
    sockets = [a, b]
    while True:
        ready = select.select(sockets, [], [], TIMEOUT)[0]
        if not ready:
            return
        for s in ready:
            try:
                data = s.recv(65536)
                if not data:
                    return
                (b if s is a else a).sendall(data)
            except OSError:  # ssl.SSLError too: a side that went away ends the relay
                return


class Origin(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture
def network(pki):
    """origin (HTTPS), proxy (TLS or plain, basic auth, CONNECT and absolute-URL GET), recorder."""
    started = []
    origin = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Origin)
    origin.socket = server_context(pki).wrap_socket(origin.socket, server_side=True)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    started.append(origin.shutdown)
    seen = {"auth": []}

    def make_proxy(tls):
        listener = socket.create_server(("127.0.0.1", 0))
        started.append(listener.close)
        context = server_context(pki)

        def handle(conn):
            conn.settimeout(TIMEOUT)
            try:
                if tls:
                    try:
                        conn = context.wrap_socket(conn, server_side=True)
                    except OSError:  # a client that does not trust this proxy hangs up in the handshake
                        return
                reader = conn.makefile("rb")
                request = reader.readline().decode()
                headers = {}
                while True:
                    line = reader.readline().decode().strip()
                    if not line:
                        break
                    key, value = (line.split(":", 1) + [""])[:2]
                    headers[key.strip().lower()] = value.strip()
                token = base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()).decode()
                seen["auth"].append(headers.get("proxy-authorization"))
                if headers.get("proxy-authorization") != "Basic " + token:
                    conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
                    return
                method, target = request.split()[:2]
                if method != "CONNECT":
                    conn.sendall(b"HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\n\r\n")
                    return
                host, port = target.rsplit(":", 1)
                upstream = socket.create_connection((host, int(port)), timeout=TIMEOUT)
                conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                relay(conn, upstream)
                upstream.close()
            finally:
                conn.close()
        serve(listener, handle)
        return listener.getsockname()[1]

    def make_recorder(port):
        listener = socket.create_server(("127.0.0.1", 0))
        started.append(listener.close)
        recorded = bytearray()

        def handle(conn):
            upstream = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)

            class Tap(object):
                """conn with every byte it receives recorded (the client's side of the wire)."""
                def __init__(self, sock):
                    self.sock = sock

                def recv(self, size):
                    data = self.sock.recv(size)
                    recorded.extend(data)
                    return data

                def __getattr__(self, name):
                    return getattr(self.sock, name)
            try:
                relay(Tap(conn), upstream)
            finally:
                conn.close()
                upstream.close()
        serve(listener, handle)
        return listener.getsockname()[1], recorded

    yield {"origin": "https://localhost:%d/shards/probe.bin" % origin.server_address[1],
           "proxy": make_proxy, "recorder": make_recorder, "seen": seen}
    for stop in reversed(started):
        stop()


def upstream(port, tls, **extra):
    up = {"name": "external", "host": "127.0.0.1", "port": port, "username": USER, "password": PASSWORD, "tls": tls}
    up.update(extra)
    return up


def test_credentials_reach_a_tls_upstream_only_encrypted(network, pki):
    port, recorded = network["recorder"](network["proxy"](True))
    mbps = W.throughput(upstream(port, True, tls_name="localhost"), network["origin"], pki["ca"])
    assert mbps and mbps > 0
    assert network["seen"]["auth"], "the proxy saw the request"
    token = base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode())
    assert recorded and PASSWORD.encode() not in recorded and token not in recorded
    assert b"CONNECT" not in recorded  # even the target stays inside TLS


def test_the_recorder_sees_a_plain_upstreams_credentials(network, pki):
    """The control: without TLS the same probe puts the credentials on the wire."""
    port, recorded = network["recorder"](network["proxy"](False))
    assert W.throughput(upstream(port, False), network["origin"], pki["ca"]) > 0
    assert base64.b64encode(("%s:%s" % (USER, PASSWORD)).encode()) in recorded


def test_a_tls_upstream_with_an_untrusted_certificate_fails_the_probe(network, pki, tmp_path):
    other_ca = tmp_path / "other.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "k"),
                    "-out", str(other_ca), "-days", "1", "-subj", "/CN=other"], check=True, capture_output=True,
                   timeout=60)
    port = network["proxy"](True)
    up = upstream(port, True, tls_name="localhost", tls_ca_file=str(other_ca))
    assert W.throughput(up, network["origin"], pki["ca"]) is None
    assert network["seen"]["auth"] == []  # nothing was sent to a proxy that could not prove who it is


def test_a_tls_upstream_that_refuses_the_credentials_fails_the_probe(network, pki):
    port = network["proxy"](True)
    up = upstream(port, True, tls_name="localhost", password="wrong")
    assert W.throughput(up, network["origin"], pki["ca"]) is None
