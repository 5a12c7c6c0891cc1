# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The built collection carries collection content only, and its metadata agrees with itself."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys
import tarfile

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..', '..'))
NOT_SHIPPED = ('lab/', 'benchmarks/', 'tests/', 'molecule/', 'scripts/', 'docs/', 'results/',
               'inventories/lab/', 'changelogs/fragments/', '.config/', '.ci/', '.venv/', '.collections/')
SHIPPED = ('galaxy.yml', 'MANIFEST.json', 'meta/runtime.yml', 'README.md', 'COPYING',
           'plugins/modules/link_measure.py', 'roles/data_plane/meta/argument_specs.yml',
           'playbooks/site.yml', 'changelogs/changelog.yaml', 'inventories/example/hosts.yml')


def load(path):
    with open(os.path.join(REPO, path)) as handle:
        return yaml.safe_load(handle)


def test_build_ships_collection_content_only(tmp_path):
    galaxy = os.path.join(os.path.dirname(sys.executable), 'ansible-galaxy')
    subprocess.run([galaxy, 'collection', 'build', '--output-path', str(tmp_path), REPO],
                   check=True, capture_output=True, text=True, timeout=120)
    (artifact,) = tmp_path.glob('longhaul-trainnet-*.tar.gz')
    with tarfile.open(str(artifact)) as tar:
        names = [n[2:] if n.startswith('./') else n for n in tar.getnames()]
    leaked = [n for n in names if n.startswith(NOT_SHIPPED) or '__pycache__' in n]
    assert leaked == []
    missing = [n for n in SHIPPED if n not in names and n != 'galaxy.yml']
    assert missing == []


def test_dependency_bounds_agree():
    galaxy = load('galaxy.yml')
    wanted = {c['name']: c['version'] for c in load('requirements.yml')['collections']}
    for name, bound in galaxy['dependencies'].items():
        assert wanted.get(name) == bound, '%s: galaxy.yml %s, requirements.yml %s' % (name, bound, wanted.get(name))


def test_metadata_is_real():
    galaxy = load('galaxy.yml')
    for key in ('repository', 'documentation', 'homepage', 'issues'):
        assert galaxy.get(key, '').startswith('https://'), key
        assert 'example' not in galaxy[key], key
    runtime = load('meta/runtime.yml')
    assert runtime['requires_ansible'].startswith('>=')
