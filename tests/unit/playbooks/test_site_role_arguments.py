# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""site.yml stops in the role's preflight play on a variable of the wrong type or value (issue 23).

Each preflight play imports its role's preflight with tasks_from, where Ansible checks no argument spec:
the first task of every preflight (longhaul.trainnet.role_arguments) does. One bad value per role,
on an inventory of local-connection hosts, run with --check (nothing is written even if the
promise breaks); each inventory has just the groups that bring the play to that role's preflight.
The run must fail at that task, before any later play, with a short message per host naming the
variable, the host and what is allowed.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..', '..'))
# site.yml's preflight plays, one per role, before any play that changes a host.
PREFLIGHT_PLAYS = {
    'control_plane': "PLAY [Check the control-plane topology and inputs]",
    'sync_tunnel': "PLAY [Check the gradient-sync tunnel's topology and inputs]",
    'data_plane': "PLAY [Check the data-plane inputs and kernel]",
    'egress_pool': "PLAY [Check the egress pool's upstreams, thresholds and credentials]",
    'training_job': "PLAY [Check the training job inputs]",
}
CHECK_TASK = "Preflight | Check every variable against the argument spec and refuse unknown ones"

INVENTORY = """\
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: {python}
    trainnet_validate_require: []
  children:
{groups}
"""

# role: (inventory groups and host variables, extra vars, variable, hosts that fail, what the message
# says of the value). Before this change the egress_pool, data_plane and training_job values passed the
# whole preflight play on these inventories (every later play ran, then the role's main failed with
# the argument spec dump); control_plane and sync_tunnel would fail later in their preflight here, on
# the topology this minimal inventory lacks, but their argument check comes first.
SITE = {'trainnet_site': 'a'}
CASES = {
    # a host variable on one host only: the other host stops too, unchanged
    'control_plane': (
        {'control_plane': {'delta': {'control_plane_wireguard_implementation': 'kernal'}}, 'gpu_nodes': {'alpha': SITE}},
        [], 'control_plane_wireguard_implementation', ['delta'],
        "control_plane_wireguard_implementation = 'kernal' is not one of: auto, kernel, go"),
    'sync_tunnel': (
        {'gpu_nodes': {'alpha': SITE}},
        ['sync_tunnel_network=10.99.0.0/24', 'sync_tunnel_manage_packages=perhaps'],
        'sync_tunnel_manage_packages', ['alpha'], "sync_tunnel_manage_packages = 'perhaps' is not of type bool"),
    'data_plane': (
        {'gpu_nodes': {'alpha': SITE}},
        ['data_plane_env_extra=NCCL_DEBUG'], 'data_plane_env_extra', ['alpha'],
        "data_plane_env_extra = 'NCCL_DEBUG' is not of type dict"),
    # the command line of the issue; with a good mode this egress node passes the whole preflight
    'egress_pool': (
        {'egress_nodes': {'gamma': {'egress_pool_node_address': '127.0.0.1',
                                    'egress_pool_node_allowed_sources': '[127.0.0.0/8]'}}},
        ['egress_pool_mode=multihome'], 'egress_pool_mode', ['gamma'],
        "egress_pool_mode = 'multihome' is not one of: proxy, multihomed"),
    'training_job': (
        {'gpu_nodes': {'alpha': SITE}},
        ['training_job_manifest_sync=perhaps'], 'training_job_manifest_sync', ['alpha'],
        "training_job_manifest_sync = 'perhaps' is not of type bool"),
}


def inventory_text(groups):
    lines = []
    for group, hosts in groups.items():
        lines += ['    %s:' % group, '      hosts:']
        for host, variables in hosts.items():
            lines.append('        %s:%s' % (host, '' if variables else ' {}'))
            lines += ['          %s: %s' % item for item in variables.items()]
    return INVENTORY.format(python=sys.executable, groups='\n'.join(lines))


@pytest.mark.skipif(os.geteuid() != 0, reason='the plays use become; run as root (CI does)')
@pytest.mark.parametrize('role', sorted(CASES))
def test_a_bad_value_stops_site_in_the_preflight_play(tmp_path, role):
    groups, extra, variable, failing, says = CASES[role]
    inventory = tmp_path / 'hosts.yml'
    inventory.write_text(inventory_text(groups))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_FORCE_COLOR='0', ANSIBLE_STDOUT_CALLBACK='default')
    argv = [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', str(inventory),
            os.path.join(REPO, 'playbooks', 'site.yml'), '--check']
    for item in extra:
        argv += ['-e', item]
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out

    # No play after the role's preflight play starts.
    plays = re.findall(r'^PLAY \[.*\]', out, re.M)
    assert plays[-1] == PREFLIGHT_PLAYS[role], plays

    # The first failure is the role's argument check, on the hosts with the bad value.
    start = out.rindex('TASK [', 0, out.index('fatal: ['))
    task_output = out[start:out.index('PLAY RECAP')]
    failed_task = task_output[len('TASK ['):].split(']', 1)[0]
    assert failed_task == 'longhaul.trainnet.%s : %s' % (role, CHECK_TASK), out
    assert sorted(re.findall(r'^fatal: \[([^\]]+)\]', out, re.M)) == failing, out

    # Each host's error names the role, the host, the variable and what is allowed, and takes at
    # most two lines of the output (no dump of the argument spec).
    assert 'argument_spec_data' not in out
    for host in failing:
        line = 'longhaul.trainnet.%s on %s: %s' % (role, host, says)
        assert line in out, out
        mentions = [text for text in out.splitlines() if line in text]
        assert 1 <= len(mentions) <= 2, mentions
    assert task_output.count(variable) <= 2 * len(failing), task_output
    # what is left is ansible-core's own framing (the task's origin in the file): no spec, no kilobytes
    assert len(task_output) <= 1500 * len(failing), task_output

    # Every host of the play is stopped, including those whose values are fine.
    recap = out[out.index('PLAY RECAP'):]
    for hosts in groups.values():
        for host in hosts:
            assert host in recap, recap
