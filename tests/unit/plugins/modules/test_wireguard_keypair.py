# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""wireguard_keypair with the real wg: key created 0600, only the public key returned, check mode writes nothing."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import stat

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import run_bounded
from ansible_collections.longhaul.trainnet.plugins.modules import wireguard_keypair
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    module_patches, patch_module_args, run_main,
)

pytestmark = pytest.mark.skipif(shutil.which('wg') is None, reason='wireguard-tools (wg) not installed')


def run(tmp_path, check=False, **args):
    params = {'path': str(tmp_path / 'wg' / 'private.key'), 'public_path': str(tmp_path / 'wg' / 'public.key')}
    params.update(args)
    if check:
        params['_ansible_check_mode'] = True
    with patch_module_args(params), module_patches():
        return run_main(wireguard_keypair.main)


def test_check_mode_predicts_and_writes_nothing(tmp_path):
    result = run(tmp_path, check=True)
    assert result['changed'] is True and result['created'] is True and result['public_key'] is None
    assert not (tmp_path / 'wg').exists()


def test_creates_private_key_0600_and_returns_only_public(tmp_path):
    result = run(tmp_path)
    key_path = tmp_path / 'wg' / 'private.key'
    private = key_path.read_text().strip()
    assert stat.S_IMODE(os.stat(str(key_path)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(str(tmp_path / 'wg')).st_mode) == 0o700
    assert result['changed'] is True and result['created'] is True
    expected = run_bounded(['wg', 'pubkey'], 5, data=private + '\n').out.strip()
    assert result['public_key'] == expected
    assert (tmp_path / 'wg' / 'public.key').read_text().strip() == expected
    assert private not in json.dumps(result)


def test_rerun_changes_nothing_and_keeps_key(tmp_path):
    first = run(tmp_path)
    private = (tmp_path / 'wg' / 'private.key').read_text()
    second = run(tmp_path)
    assert second['changed'] is False and second['public_key'] == first['public_key']
    assert (tmp_path / 'wg' / 'private.key').read_text() == private


def test_wide_mode_is_narrowed(tmp_path):
    run(tmp_path)
    key_path = str(tmp_path / 'wg' / 'private.key')
    os.chmod(key_path, 0o644)
    predicted = run(tmp_path, check=True)
    assert predicted['changed'] is True
    assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o644
    if os.geteuid() == 0:
        assert run(tmp_path)['changed'] is True
        assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600


def test_invalid_key_fails_without_echoing_it(tmp_path):
    (tmp_path / 'wg').mkdir()
    (tmp_path / 'wg' / 'private.key').write_text('secret-garbage\n')
    os.chmod(str(tmp_path / 'wg' / 'private.key'), 0o600)
    result = run(tmp_path)
    assert result['failed'] is True
    assert 'does not hold a valid WireGuard private key' in result['msg']
    assert 'secret-garbage' not in json.dumps(result)
