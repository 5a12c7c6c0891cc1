# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""site.yml promises that a failed validation on any host stops every host before one is changed.

Two inventory hosts on a local connection, run with --check (nothing is written even if the
promise breaks): `alpha` asks for a capability that does not exist, `beta` is fine. The data
plane play must not start on `beta`.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

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
  children:
    gpu_nodes:
      hosts:
        alpha:
{alpha}
        beta:
          trainnet_validate_require: []
"""


ALPHA = {
    # a capability that does not exist: the probe fails with a clear error
    'bad_input': ('          trainnet_validate_require: [bogus]', 'bogus'),
    # nothing listens on loopback port 9 (discard): the host is unreachable
    'unreachable': ('          ansible_connection: ssh\n          ansible_host: 127.0.0.1\n'
                    '          ansible_port: 9', 'UNREACHABLE'),
}


@pytest.mark.skipif(os.geteuid() != 0, reason='the plays use become; run as root (CI does)')
@pytest.mark.parametrize('case', sorted(ALPHA))
def test_failed_validation_on_one_host_stops_every_host(tmp_path, case):
    alpha, evidence = ALPHA[case]
    inventory = tmp_path / 'hosts.yml'
    inventory.write_text(INVENTORY.format(python=sys.executable, alpha=alpha))
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(REPO, 'ansible.cfg'), ANSIBLE_NOCOLOR='1',
               ANSIBLE_FORCE_COLOR='0', ANSIBLE_STDOUT_CALLBACK='default')
    proc = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), 'ansible-playbook'), '-i', str(inventory),
         os.path.join(REPO, 'playbooks', 'site.yml'), '--check'],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert evidence in out, out
    # The data plane play runs no task at all, on either host.
    assert 'TASK [longhaul.trainnet.data_plane' not in out, out
    recap = out[out.index('PLAY RECAP'):]
    assert 'beta' in recap, out
