# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""train.yml's launch logic without PyTorch: two training nodes on a local connection whose
launcher is a stand-in script. A node refusing preflight stops the job before any part starts, a
failed part fails the play naming that node with its exit code and last line, a site without
training nodes is refused, and each node's log is collected under the run id."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))

INVENTORY = """\
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: {python}
    training_job_launcher: {tmp}/{{{{ inventory_hostname }}}}/trainnet-train
    training_job_log_dir: {tmp}/{{{{ inventory_hostname }}}}/logs
  children:
    gpu_nodes:
      hosts:
        alpha:
          trainnet_site: cn-home
        beta:
          trainnet_site: us-west
"""

# The stand-in launcher: --preflight refuses on the host named in $REFUSE; a run writes one JSON
# line where the real launcher's workload would, and fails on the host named in $FAIL.
LAUNCHER = """#!/bin/sh
here="$(dirname "$0")"
host="$(basename "$here")"
if [ "$1" = "--preflight" ]; then
    [ "$host" = "$REFUSE" ] && {{ echo "GLOO_SOCKET_IFNAME='^lo' uses NCCL's exclusion-list syntax" >&2; exit 2; }}
    exit 0
fi
mkdir -p "$here/logs/$1"
echo "{{\\"event\\": \\"verify_done\\", \\"ok\\": true, \\"rank\\": 0, \\"args\\": \\"$*\\"}}" > "$here/logs/$1/$host-0.jsonl"
[ "$host" = "$FAIL" ] && {{ echo "torchrun: worker exited with 3" >&2; exit 3; }}
exit 0
"""


def train(tmp_path, *extra, refuse='', fail=''):
    for host in ('alpha', 'beta'):
        (tmp_path / host).mkdir(exist_ok=True)
        launcher = tmp_path / host / 'trainnet-train'
        launcher.write_text(LAUNCHER.format())
        launcher.chmod(0o755)
    inventory = tmp_path / 'hosts.yml'
    inventory.write_text(INVENTORY.format(python=sys.executable, tmp=tmp_path))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_FORCE_COLOR='0', ANSIBLE_STDOUT_CALLBACK='default', REFUSE=refuse, FAIL=fail)
    # Both hosts run on this machine: each has its own launcher, which takes its name from its directory.
    cmd = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', str(inventory),
           os.path.join(REPO, 'playbooks', 'train.yml'), '-e', 'training_job_run_id=t1',
           '-e', 'training_job_results_dir=%s' % (tmp_path / 'results'),
           '-e', '{"training_job_timeout_sec": 60}', *extra]
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason='the play uses become; run as root (CI does)')


def test_every_node_runs_its_part_and_logs_are_collected(tmp_path):
    rc, out = train(tmp_path, '-e', 'training_job_mode=verify')
    assert rc == 0, out
    for host in ('alpha', 'beta'):
        event = json.loads((tmp_path / 'results' / 't1' / host / ('%s-0.jsonl' % host)).read_text())
        assert event['args'].startswith('t1 2 --verify-allreduce --verify-elements 1048576'), event
        assert json.loads((tmp_path / 'results' / 't1' / host / 'torchrun.json').read_text())['rc'] == 0


def test_a_refused_node_stops_the_job_before_any_part_starts(tmp_path):
    rc, out = train(tmp_path, refuse='beta')
    assert rc != 0
    assert 'Preflight refused the job on 1 node(s), nothing was started: beta:' in out, out
    assert "exclusion-list" in out, out
    assert not (tmp_path / 'alpha' / 'logs').exists() and not (tmp_path / 'beta' / 'logs').exists()


def test_a_failed_part_fails_the_play_naming_the_node(tmp_path):
    rc, out = train(tmp_path, fail='alpha')
    assert rc != 0
    assert 'Run t1 failed on alpha' in out and 'alpha: exit 3 torchrun: worker exited with 3' in out, out
    # Both nodes' logs are collected, the failed one's too.
    assert (tmp_path / 'results' / 't1' / 'alpha' / 'alpha-0.jsonl').exists()
    assert (tmp_path / 'results' / 't1' / 'beta' / 'beta-0.jsonl').exists()


def test_a_site_without_training_nodes_is_refused(tmp_path):
    rc, out = train(tmp_path, '-e', '{"training_job_sites": ["us-west", "eu-central"]}')
    assert rc != 0
    assert 'training_job_sites names eu-central, which has no host in gpu_nodes' in out, out
    assert 'cn-home, us-west' in out, out
    assert not (tmp_path / 'alpha' / 'logs').exists() and not (tmp_path / 'beta' / 'logs').exists()


def test_only_the_named_sites_join(tmp_path):
    rc, out = train(tmp_path, '-e', '{"training_job_sites": ["us-west"]}')
    assert rc == 0, out
    event = json.loads((tmp_path / 'results' / 't1' / 'beta' / 'beta-0.jsonl').read_text())
    assert event['args'].startswith('t1 1 --steps 20'), event
    assert not (tmp_path / 'results' / 't1' / 'alpha').exists()
