# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""longhaul.trainnet.measure preflight through the real playbooks/measure.yml, on the controller
only: bad input fails before any host is contacted (the inventory's hosts do not exist)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLAYBOOK = os.path.join(ROOT, "playbooks", "measure.yml")
PLAYBOOK_BIN = shutil.which("ansible-playbook", path=os.path.dirname(sys.executable)) or shutil.which("ansible-playbook")

pytestmark = pytest.mark.skipif(
    PLAYBOOK_BIN is None or not os.path.isdir(os.path.join(ROOT, ".collections", "ansible_collections")),
    reason="needs ansible-playbook and .collections (source scripts/bootstrap.sh)")

INVENTORY = """
all:
  children:
    gpu_nodes:
      hosts:
        a-gpu: {ansible_host: 192.0.2.1, trainnet_site: a}
        b-gpu: {ansible_host: 192.0.2.2, trainnet_site: b}
"""


def run(tmp_path, extra):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default", ANSIBLE_LOCALHOST_WARNING="0")
    completed = subprocess.run([PLAYBOOK_BIN, "-i", str(inventory), PLAYBOOK, "-e", json.dumps(extra)],
                               capture_output=True, text=True, timeout=120, cwd=ROOT, env=env, check=False)
    return completed.returncode, completed.stdout + completed.stderr


def test_misspelt_and_retired_variables_are_named_with_the_closest_known(tmp_path):
    # Bug: -e trainnet_measure_output_dir=... was accepted and the results went elsewhere.
    rc, out = run(tmp_path, {"measure_output_dir": "/tmp/x", "trainnet_measure_duration": 3})
    assert rc != 0
    assert "measure_output_dir (did you mean measure_results_dir?)" in out
    assert "trainnet_measure_duration (did you mean measure_duration?)" in out
    assert "192.0.2" not in out.split("Unknown variable")[0]   # failed before any pair task


@pytest.mark.parametrize("extra, message", [
    ({"measure_duration": 0}, "measure_duration=0 is outside the allowed range 1-300"),
    ({"measure_tfo_port": 5201}, "measure_tfo_port=5201 must differ from measure_iperf3_port=5201"),
    ({"measure_timeout": 15}, "measure_timeout=15 must be 0 (measure_duration + 50) or at least measure_duration + 10 = 20"),
    ({"measure_server_user": "root"}, "measure_server_user='root' must name an unprivileged user (not root)"),
    ({"measure_thresholds": {"max_rtt": 3}}, "allowed keys are max_rtt_ms, max_loss_pct"),
    ({"measure_pair_thresholds": {"a-gpu->b-gpu": {"min_path_mtu": -1}}},
     "measure_pair_thresholds[a-gpu->b-gpu]={"),
    ({"measure_pairs": [{"source": "a-gpu", "peer": "nosuch"}]}, "source and peer must be two different inventory hosts"),
])
def test_bad_input_fails_in_preflight(tmp_path, extra, message):
    rc, out = run(tmp_path, extra)
    assert rc != 0
    assert message in out, out[-3000:]
    assert "Pair | " not in out


PLAN_INVENTORY = """
all:
  vars:
    ansible_connection: local
    # no host is contacted: every pair fails at its first task and is recorded as failed
    ansible_python_interpreter: /nonexistent/python3
  children:
    gpu_nodes:
      hosts:
        a-gpu: {trainnet_site: a}
        b-gpu: {trainnet_site: b}
    home_master:
      hosts:
        a-master: {trainnet_site: a}
    control_plane:
      hosts:
        b-anchor: {trainnet_site: b}
"""


@pytest.mark.parametrize("flag, pairs", [
    ("measure_anchor_pairs=false", [["a-gpu", "b-gpu"]]),
    ("measure_anchor_pairs=true", [["a-gpu", "b-gpu"], ["a-master", "b-anchor"]]),
])
def test_boolean_from_the_command_line_plans_the_pairs(tmp_path, flag, pairs):
    # Bug: -e measure_anchor_pairs=false (the string "false") still planned the anchor pairs.
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(PLAN_INVENTORY)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    completed = subprocess.run([PLAYBOOK_BIN, "-i", str(inventory), PLAYBOOK, "-e", flag,
                                "-e", "measure_results_dir=%s" % tmp_path, "-e", "measure_textfile_dir="],
                               capture_output=True, text=True, timeout=180, cwd=ROOT, env=env, check=False)
    results = list(tmp_path.glob("measure-*/results.json"))
    assert len(results) == 1, completed.stdout[-3000:]
    records = json.loads(results[0].read_text())["pairs"]
    assert [[r["source"], r["peer"]] for r in records] == pairs
    assert all(r["status"] == "failed" for r in records)
    assert completed.returncode != 0 and "pairs failed" in completed.stdout
