# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The data-plane env file is sourced by shells: values must come back verbatim, never run."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

try:  # ansible-core >= 2.19 renders only strings marked as trusted templates
    from ansible.template import trust_as_template
except ImportError:  # older cores render every string
    def trust_as_template(value):
        return value

ROLE = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'roles', 'data_plane')

HOSTILE = {
    'TRAINNET_SPACES': 'a value with  spaces',
    'TRAINNET_SUBST': '$(touch {canary})',
    'TRAINNET_BACKTICK': '`touch {canary}`',
    'TRAINNET_QUOTES': "it's \"quoted\"; touch {canary}",
    'TRAINNET_NEWLINE': 'line1\ntouch {canary}',
    'TRAINNET_NUMBER': 42,
}


def render(extra):
    with open(os.path.join(ROLE, 'templates', 'data_plane.env.j2')) as handle:
        source = handle.read()
    templar = Templar(loader=DataLoader(), variables={
        'ansible_managed': 'managed by test',
        'data_plane_env_file': '/etc/trainnet/data_plane.env',
        '__data_plane_iface': 'sync0',
        '__data_plane_socket_iface': 'sync0',
        '__data_plane_nccl_env': {'GLOO_SOCKET_IFNAME': 'sync0', 'NCCL_SOCKET_IFNAME': '=sync0'},
        'data_plane_env_extra': extra,
    })
    return templar.template(trust_as_template(source))


def test_sourcing_assigns_values_verbatim_and_runs_nothing(tmp_path):
    canary = tmp_path / 'ran'
    extra = {k: (v.format(canary=canary) if isinstance(v, str) else v) for k, v in HOSTILE.items()}
    env_file = tmp_path / 'data_plane.env'
    env_file.write_text(render(extra))
    names = ['GLOO_SOCKET_IFNAME', 'NCCL_SOCKET_IFNAME'] + sorted(extra)
    script = 'set -a; . "$1"; set +a; ' + '; '.join('printf "%%s\\0" "$%s"' % n for n in names)
    out = subprocess.run(['bash', '-c', script, 'bash', str(env_file)], check=True,
                         capture_output=True, text=True, env={'PATH': os.environ['PATH']}).stdout
    got = dict(zip(names, out.split('\0')))
    assert not canary.exists(), 'sourcing the env file ran a command'
    assert got['GLOO_SOCKET_IFNAME'] == 'sync0' and got['NCCL_SOCKET_IFNAME'] == '=sync0'
    for name, value in extra.items():
        assert got[name] == str(value)
