# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 23 finding 9 at the roles, on the controller only: preflight refuses names and paths that
would add lines to a unit (the hosts' Python does not exist: the first task that reaches a host
fails differently), control_plane refuses a peer's public key that is not a key, and the unit
templates quote their arguments for systemd."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from ansible_collections.longhaul.trainnet.tests.unit.plugins.module_utils.test_config_value import (
    INJECTED_KEY, INJECTED_NAME, REAL_KEYS, systemd_words,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLAYBOOK_BIN = shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) or shutil.which("ansible-playbook")

pytestmark = pytest.mark.skipif(
    PLAYBOOK_BIN is None or not os.path.isdir(os.path.join(ROOT, ".collections", "ansible_collections")),
    reason="needs ansible-playbook and .collections (source scripts/bootstrap.sh)")

INVENTORY = """
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: /nonexistent/python3
    trainnet_site: a
  children:
    gpu_nodes:
      hosts:
        a-gpu: {}
    control_plane:
      hosts:
        a-anchor: {}
"""
PREFLIGHT = """
- name: Preflight only
  hosts: a-gpu
  gather_facts: false
  tasks:
    - name: Run the role's preflight
      ansible.builtin.include_role:
        name: "longhaul.trainnet.{{ role }}"
        tasks_from: preflight
"""
NEWLINE_PATH = "/etc/trainnet\nExecStart=/bin/sh"
# training_job needs the store's address to get past its own checks
TRAINING = {"training_job_rendezvous_address": "10.255.0.1"}


def playbook(tmp_path, text, extra, inventory=INVENTORY):
    (tmp_path / "hosts.yml").write_text(inventory)
    (tmp_path / "play.yml").write_text(text)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_LOCALHOST_WARNING="0")
    completed = subprocess.run([PLAYBOOK_BIN, "-i", str(tmp_path / "hosts.yml"), str(tmp_path / "play.yml"),
                                "-e", json.dumps(extra)],
                               capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, check=False)
    return completed.returncode, completed.stdout + completed.stderr


def preflight(tmp_path, role, **extra):
    return playbook(tmp_path, PREFLIGHT, dict(extra, role=role))


def shown(value):
    """How a refused value appears in the message: repr(), inside the JSON of the result."""
    return json.dumps(repr(value))[1:-1]


@pytest.mark.parametrize("role, extra, message", [
    ("sync_tunnel", {"sync_tunnel_interface": INJECTED_NAME},
     "sync_tunnel_interface=%s is not an interface name" % shown(INJECTED_NAME)),
    ("sync_tunnel", {"sync_tunnel_interface": "wgsync0\n"}, "sync_tunnel_interface='wgsync0\\\\n' is not an interface name"),
    ("sync_tunnel", {"sync_tunnel_key_dir": "/etc/train net"}, "sync_tunnel_key_dir='/etc/train net' must be an absolute path"),
    ("data_plane", {"data_plane_interface": INJECTED_NAME},
     "data_plane_interface=%s is not an interface name" % shown(INJECTED_NAME)),
    ("data_plane", {"data_plane_socket_interface": "eth0\nExecStart=/bin/sh"}, "data_plane_socket_interface="),
    ("data_plane", {"data_plane_path_routes": [{"name": "cn<->us\nExecStart=/bin/sh", "prefix": "10.1.0.0/16", "mtu": 1400}]},
     "data_plane_path_routes[0].name='cn<->us\\\\nExecStart=/bin/sh' must be one line of text"),
    ("data_plane", {"data_plane_mss_clamp_file": NEWLINE_PATH}, "data_plane_mss_clamp_file=%s must be" % shown(NEWLINE_PATH)),
    ("control_plane", {"control_plane_textfile_dir": NEWLINE_PATH}, "control_plane_textfile_dir=%s must be" % shown(NEWLINE_PATH)),
    ("control_plane", {"control_plane_key_dir": "/etc/x y"}, "control_plane_key_dir='/etc/x y' must be an absolute path"),
    ("training_job", dict(TRAINING, training_job_install_dir=NEWLINE_PATH), "training_job_install_dir=%s must be" % shown(NEWLINE_PATH)),
    ("training_job", dict(TRAINING, training_job_python="/usr/bin/python3\n"), "training_job_python='/usr/bin/python3\\\\n' must be"),
    ("training_job", dict(TRAINING, training_job_pythonpath=["/opt/lib\nExecStart=/bin/sh"]), "training_job_pythonpath/training_job_env_files"),
])
def test_preflight_refuses_what_would_add_unit_lines(tmp_path, role, extra, message):
    rc, out = preflight(tmp_path, role, **extra)
    assert rc != 0
    assert message in out, out[-3000:]
    assert "/nonexistent/python3" not in out   # refused before any host task


@pytest.mark.parametrize("role, extra", [
    ("sync_tunnel", {"sync_tunnel_interface": "wgsync0", "sync_tunnel_key_dir": "/etc/trainnet/sync"}),
    ("data_plane", {"data_plane_interface": "enp1s0f0", "data_plane_socket_interface": "wgsync0",
                    "data_plane_path_routes": [{"name": "cn-home<->us-west (measured from usw-gpu1)",
                                                "prefix": "10.1.0.0/16", "mtu": 1400}]}),
    ("control_plane", {"control_plane_textfile_dir": "/var/lib/prometheus/node-exporter"}),
    ("training_job", dict(TRAINING, training_job_install_dir="/opt/trainnet-2.13", training_job_pythonpath=["/opt/lib"])),
])
def test_preflight_passes_real_names(tmp_path, role, extra):
    rc, out = preflight(tmp_path, role, **extra)
    assert "Invalid" not in out and "must be" not in out and "is not an interface name" not in out, out[-3000:]
    # either the preflight ends (training_job reads nothing from the host) or it reaches a host task
    assert rc == 0 or "/nonexistent/python3" in out, out[-3000:]


# --------------------------------------------------------------------------- control_plane keys

def key_check_play():
    """The role's own task, run alone with the peers' keys as keys.yml collected them."""
    with open(os.path.join(ROOT, "roles", "control_plane", "tasks", "keys.yml")) as handle:
        tasks = yaml.safe_load(handle)
    task = [t for t in tasks if t["name"] == "Keys | Check every peer has a public key and that each is a WireGuard key"]
    assert len(task) == 1
    return yaml.safe_dump([{"name": "Keys", "hosts": "all", "gather_facts": False, "tasks": task}])


def test_control_plane_refuses_a_peer_key_that_would_add_lines(tmp_path):
    inventory = """
all:
  vars: {ansible_connection: local, ansible_python_interpreter: /nonexistent/python3, control_plane_key_dir: /etc/trainnet/wireguard}
  hosts:
    good: {__control_plane_peer_keys: {usw-anchor: %s, use-anchor: %s, new-anchor: ''}, __control_plane_tunnel_peers: [usw-anchor, use-anchor]}
    bad: {__control_plane_peer_keys: {usw-anchor: %s, use-anchor: %s}, __control_plane_tunnel_peers: [usw-anchor, use-anchor]}
""" % (REAL_KEYS[1], REAL_KEYS[2], REAL_KEYS[1], json.dumps(INJECTED_KEY))
    rc, out = playbook(tmp_path, key_check_play(), {}, inventory=inventory)
    assert rc != 0
    assert "ok: [good]" in out, out
    assert "Refusing to write the tunnels of bad: host use-anchor: public key=%s is not a WireGuard key" % shown(INJECTED_KEY) in out, out
    assert "/etc/trainnet/wireguard/public.key" in out


# --------------------------------------------------------------------------- unit templates

RENDER = """
- name: Render the units
  hosts: localhost
  gather_facts: false
  vars:
    ansible_managed: managed by test
  tasks:
    - name: Render
      ansible.builtin.template:
        src: "{{ item.src }}"
        dest: "{{ out }}/{{ item.src | basename | regex_replace('\\\\.j2$', '') }}"
        mode: "0644"
      loop: "{{ units }}"
"""
HOSTILE_PATH = "/srv/train net/%h/$HOME/it's \"here\"\nExecStart=/bin/sh"


def render(tmp_path, units, **variables):
    inventory = "all:\n  hosts:\n    localhost: {ansible_connection: local, ansible_python_interpreter: %s}\n" % sys.executable
    extra = dict(variables, out=str(tmp_path), units=[{"src": os.path.join(ROOT, "roles", u)} for u in units])
    rc, out = playbook(tmp_path, RENDER, extra, inventory=inventory)
    assert rc == 0, out[-3000:]


def exec_lines(path):
    return [line for line in path.read_text().splitlines() if line.startswith("Exec")]


def test_unit_arguments_reach_the_program_whole(tmp_path):
    # Preflight refuses these values; the templates must still not split or extend a line with them.
    # (The WireGuard units are the wireguard_interface module's: tests/unit/plugins/module_utils/test_wireguard.py.)
    render(tmp_path, ["control_plane/templates/trainnet-control-plane-watchdog.service.j2",
                      "training_job/templates/trainnet-rendezvous-store.service.j2"],
           __control_plane_libexec="/usr/local/libexec/trainnet", control_plane_textfile_dir=HOSTILE_PATH,
           __control_plane_plan={"rendezvous_address": "10.255.0.1", "primary_anchor": "usw-anchor\nExecStart=/bin/sh"},
           control_plane_key_dir="/etc/trainnet/wireguard",
           __training_job_is_standby_store=False, __training_job_rdzv_address="10.255.0.1", __training_job_rdzv_port="29400",
           __training_job_pythonpath="", __training_job_python="/opt/venv/bin/python3", training_job_install_dir=HOSTILE_PATH,
           training_job_store_timeout_sec=3600)
    watchdog = exec_lines(tmp_path / "trainnet-control-plane-watchdog.service")
    assert len(watchdog) == 1
    assert systemd_words(watchdog[0].split("=", 1)[1]) == [
        "/usr/bin/python3", "-I", "/usr/local/libexec/trainnet/trainnet-control-plane-watchdog", HOSTILE_PATH,
        "10.255.0.1", "usw-anchor\nExecStart=/bin/sh", "/etc/trainnet/wireguard"]

    store = exec_lines(tmp_path / "trainnet-rendezvous-store.service")
    assert len(store) == 1
    assert systemd_words(store[0].split("=", 1)[1]) == [
        "/opt/venv/bin/python3", HOSTILE_PATH + "/trainnet_rendezvous_store.py", "--host", "10.255.0.1",
        "--port", "29400", "--timeout-sec", "3600"]
