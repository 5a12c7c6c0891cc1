# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""longhaul.trainnet.egress_pool preflight through playbooks/egress.yml, on the controller only: every
bad input of issue 11 fails naming the variable before any host is contacted (the hosts' Python
does not exist, so the first task that reaches a host fails differently)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLAYBOOK = os.path.join(ROOT, "playbooks", "egress.yml")
PLAYBOOK_BIN = shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) or shutil.which("ansible-playbook")
VAULT_BIN = shutil.which("ansible-vault", path=os.path.dirname(sys.executable)) or shutil.which("ansible-vault")

pytestmark = pytest.mark.skipif(
    PLAYBOOK_BIN is None or not os.path.isdir(os.path.join(ROOT, ".collections", "ansible_collections")),
    reason="needs ansible-playbook and .collections (source scripts/bootstrap.sh)")

INVENTORY = """
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: /nonexistent/python3
    egress_pool_node_allowed_sources: [192.0.2.1/32]
  children:
    loaders:
      hosts:
        loader1: {}
    egress_nodes:
      hosts:
        egress1: {egress_pool_node_address: 192.0.2.11}
        egress2: {egress_pool_node_address: 192.0.2.12}
"""
SECRET = "pa55-not-shown"


def run(tmp_path, extra, inventory=INVENTORY, vars_file=None):
    (tmp_path / "hosts.yml").write_text(inventory)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_LOCALHOST_WARNING="0")
    argv = [PLAYBOOK_BIN, "-i", str(tmp_path / "hosts.yml"), PLAYBOOK, "-e", json.dumps(extra)]
    if vars_file:
        argv += ["-e", "@" + vars_file, "--vault-password-file", str(tmp_path / "vault-pass")]
    completed = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, check=False)
    return completed.returncode, completed.stdout + completed.stderr


def reached_a_host(out):
    """True when a task after preflight ran (it fails on the missing interpreter)."""
    return "Packages | " in out or "/nonexistent/python3" in out


def up(**fields):
    base = {"name": "ext1", "host": "proxy.example.net", "port": 8080}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize("extra, message", [
    ({"egress_pool_upstreams": [up(host=None)]}, "egress_pool_upstreams[0] has no host"),
    ({"egress_pool_upstreams": [up(host="")]}, "egress_pool_upstreams[0] has no host"),
    ({"egress_pool_upstreams": [up(port=None)]}, "egress_pool_upstreams[0] has no port (1-65535)"),
    ({"egress_pool_upstreams": [up(port=70000)]}, "egress_pool_upstreams[0].port=70000 is outside the allowed range 1-65535"),
    ({"egress_pool_upstreams": [up(port=0)]}, "egress_pool_upstreams[0].port=0 is outside the allowed range 1-65535"),
    ({"egress_pool_upstreams": [up(name="egress1")]}, "egress_pool_upstreams[0].name=egress1 is used twice in the pool"),
    ({"egress_pool_upstreams": [up(name="bad name")]}, "egress_pool_upstreams[0].name=bad name must be set"),
    ({"egress_pool_upstreams": [up(username="u", password=SECRET, tls=True)]},
     "egress_pool_upstreams[0].password is given in clear text; egress_pool_require_vaulted_credentials requires"),
    # Issue 23 finding 5: credentials to an upstream whose proxy port is plain HTTP would cross the ocean in clear.
    ({"egress_pool_upstreams": [up(username="u", password=SECRET)], "egress_pool_require_vaulted_credentials": False},
     "egress_pool_upstreams[0] (ext1) has credentials but not tls: true, so they would cross the network in clear"),
    ({"egress_pool_upstreams": [up(username="u", tls=True, tls_name="a b")]},
     "egress_pool_upstreams[0].tls_name=a b contains white space"),
    ({"egress_pool_max_loss_pct": -1}, "egress_pool_max_loss_pct=-1 is outside the allowed range 0-100 (a threshold cannot be negative)"),
    ({"egress_pool_min_throughput_mbps": -5}, "egress_pool_min_throughput_mbps=-5 is outside the allowed range"),
    ({"egress_pool_max_rtt_factor": -2}, "egress_pool_max_rtt_factor=-2 is outside the allowed range 1-1000"),
    ({"egress_pool_qualify_pings": 0}, "egress_pool_qualify_pings=0 is outside the allowed range 10-10000"),
    ({"egress_pool_listen_port": 65536}, "egress_pool_listen_port=65536 is outside the allowed range 1-65535"),
    ({"egress_pool_node_allowed_sources": []}, "egress_pool_node_allowed_sources is empty"),
    ({"egress_pool_qualify_url": "ftp://x/y"}, "egress_pool_qualify_url=ftp://x/y must be an http:// or https:// URL"),
    ({"egress_pool_mode": "multihomed", "egress_pool_source_addresses": ["192.0.2.1"]},
     "egress_pool_source_addresses needs at least two IPv4 addresses"),
    ({"egress_pool_mode": "multihomed", "egress_pool_source_addresses": ["192.0.2.1", "192.0.2.2"]},
     "egress_pool_multihomed_interface must name the outgoing interface"),
    ({"egress_pool_max_los_pct": 1}, "egress_pool_max_los_pct (did you mean egress_pool_max_loss_pct?)"),
])
def test_bad_input_fails_in_preflight_naming_the_variable(tmp_path, extra, message):
    rc, out = run(tmp_path, extra)
    assert rc != 0
    assert message in out, out[-3000:]
    assert not reached_a_host(out), out[-3000:]
    assert SECRET not in out


def test_empty_pool_in_exclusive_mode(tmp_path):
    inventory = INVENTORY.split("    egress_nodes:", maxsplit=1)[0]
    rc, out = run(tmp_path, {}, inventory=inventory)
    assert rc != 0
    assert "the pool is empty (no hosts in group egress_nodes and egress_pool_upstreams is empty)" in out, out[-3000:]
    assert not reached_a_host(out)
    # Not exclusive: an empty pool is allowed (the proxy goes direct).
    rc, out = run(tmp_path, {"egress_pool_exclusive": False}, inventory=inventory)
    assert "the pool is empty" not in out and reached_a_host(out), out[-3000:]


def test_egress_node_without_address(tmp_path):
    rc, out = run(tmp_path, {}, inventory=INVENTORY.replace("egress2: {egress_pool_node_address: 192.0.2.12}", "egress2: {}"))
    assert rc != 0
    assert "egress node egress2 (egress_pool_node_address/egress_pool_node_port) has no host" in out, out[-3000:]
    assert not reached_a_host(out)


def test_good_input_passes_preflight(tmp_path):
    rc, out = run(tmp_path, {})
    assert rc != 0 and reached_a_host(out), out[-3000:]   # preflight passed, then the fake host failed
    assert "Invalid longhaul.trainnet.egress_pool input" not in out


@pytest.mark.skipif(VAULT_BIN is None, reason="needs ansible-vault")
def test_vaulted_password_passes_and_is_never_shown(tmp_path):
    (tmp_path / "vault-pass").write_text("unit-test-vault-password\n")
    encrypted = subprocess.run([VAULT_BIN, "encrypt_string", "--vault-password-file", str(tmp_path / "vault-pass"),
                                SECRET, "--name", "unit_egress_password"], capture_output=True, text=True,
                               check=True, timeout=60).stdout
    vars_file = tmp_path / "vault.yml"
    vars_file.write_text(encrypted + "egress_pool_upstreams:\n  - {name: ext1, host: proxy.example.net, port: 8080,"
                         " username: u, password: '{{ unit_egress_password }}', tls: true}\n")
    rc, out = run(tmp_path, {}, vars_file=str(vars_file))
    assert reached_a_host(out) and "clear text" not in out, out[-3000:]
    assert SECRET not in out
    # The same value in clear text is refused, and still not shown.
    rc, out = run(tmp_path, {"egress_pool_upstreams": [up(username="u", password=SECRET, tls=True)]})
    assert "clear text" in out and SECRET not in out
    # Unless the check is switched off.
    rc, out = run(tmp_path, {"egress_pool_upstreams": [up(username="u", password=SECRET, tls=True)],
                             "egress_pool_require_vaulted_credentials": False})
    assert "clear text" not in out and reached_a_host(out) and SECRET not in out, out[-3000:]
