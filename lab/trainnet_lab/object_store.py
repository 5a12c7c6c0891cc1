"""The lab's HTTPS object store: generated shards with known SHA-256 sums behind nginx, with a CA
made at `lab up`.

A host with `trainnet_lab_object_store: {shards: N, shard_kib: K}` gets, inside its container:
a lab CA and a server certificate for its name and address (/etc/trainnet-lab/tls), N shards of
K KiB (/srv/shards/shard-NNNN.bin, SHA256SUMS) and nginx serving them on 443. The shards are
derived from the lab seed (SHAKE-256), so the controller knows every sum without reading them back;
`lab up` checks the store's SHA256SUMS against that and writes, into the lab's state directory,
`object-store/<host>/ca.pem` and `object-store/<host>/shards.list` (`SHA256 URL` per line, the
format of trainnet-fetch-shards).
"""

from __future__ import annotations

import hashlib

SHARD_DIR = "/srv/shards"
TLS_DIR = "/etc/trainnet-lab/tls"
TRUSTED_CA = "/usr/local/share/ca-certificates/trainnet-lab-ca.crt"


def shard_name(index: int) -> str:
    return f"shard-{index:04d}.bin"


def shard_bytes(seed: int, index: int, kib: int) -> bytes:
    return hashlib.shake_256(f"trainnet-lab-shard-{seed}-{index}".encode()).digest(kib * 1024)


def shard_sums(seed: int, shards: int, kib: int) -> dict[str, str]:
    return {shard_name(i): hashlib.sha256(shard_bytes(seed, i, kib)).hexdigest() for i in range(shards)}


def shard_list(host: str, sums: dict[str, str]) -> str:
    return "".join(f"{digest} https://{host}/shards/{name}\n" for name, digest in sorted(sums.items()))


# Run inside the store's container as `python3 -c SETUP HOST ADDRESS SEED SHARDS KIB`: idempotent
# (keeps existing shards and certificates), prints SHA256SUMS. Standard library, openssl and nginx.
SETUP = r'''
import hashlib, os, subprocess, sys
host, address, seed, shards, kib = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
tls, root = "%(tls)s", "%(root)s"
os.makedirs(tls, exist_ok=True)
os.makedirs(root, exist_ok=True)
def run(*argv):
    subprocess.run(argv, check=True, capture_output=True)
if not os.path.exists(tls + "/store.pem"):
    run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", tls + "/ca.key", "-out",
        tls + "/ca.pem", "-days", "30", "-subj", "/CN=trainnet lab CA")
    run("openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", tls + "/store.key", "-out",
        tls + "/store.csr", "-subj", "/CN=" + host, "-addext", "subjectAltName=DNS:%%s,IP:%%s" %% (host, address))
    run("openssl", "x509", "-req", "-in", tls + "/store.csr", "-CA", tls + "/ca.pem", "-CAkey", tls + "/ca.key",
        "-CAcreateserial", "-days", "30", "-out", tls + "/store.pem", "-copy_extensions", "copy")
sums = []
for i in range(shards):
    name = "shard-%%04d.bin" %% i
    path = os.path.join(root, name)
    data = hashlib.shake_256(("trainnet-lab-shard-%%d-%%d" %% (seed, i)).encode()).digest(kib * 1024)
    if not os.path.exists(path) or os.path.getsize(path) != len(data):
        with open(path + ".tmp", "wb") as handle:
            handle.write(data)
        os.rename(path + ".tmp", path)
    sums.append("%%s  %%s\n" %% (hashlib.sha256(data).hexdigest(), name))
with open(os.path.join(root, "SHA256SUMS"), "w") as handle:
    handle.writelines(sums)
with open("/etc/nginx/sites-enabled/default", "w") as handle:
    handle.write("""server {
  listen 443 ssl;
  server_name %%s %%s;
  ssl_certificate %%s/store.pem;
  ssl_certificate_key %%s/store.key;
  location /shards/ { alias %%s/; }
  access_log /var/log/nginx/shards.log;
}
""" %% (host, address, tls, tls, root))
run("systemctl", "restart", "nginx.service")
sys.stdout.write("".join(sums))
''' % {"tls": TLS_DIR, "root": SHARD_DIR}


def parse_sums(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2:
            out[fields[1]] = fields[0]
    return out
