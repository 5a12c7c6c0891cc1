# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""config_loaded with real (fake) reload commands: shell scripts in tmp_path that log each call."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import stat

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils.config_loaded import KEY_NAME, config_digest
from ansible_collections.longhaul.trainnet.plugins.modules import config_loaded
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    fake_get_bin_path, patch_module, run_with_args,
)

BIRD_EXPECT = r'^Reconfigur(ed|ation (already )?in progress)'


class Host(object):
    """A service's files, a reload command that logs its calls, and the record directory."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.conf = tmp_path / 'etc' / 'svc.conf'
        self.include = tmp_path / 'etc' / 'svc-peers.conf'
        self.conf.parent.mkdir()
        self.conf.write_text('protocol bfd {}\n')
        self.include.write_text('cache_peer a\n')
        self.log = tmp_path / 'reloads.log'
        self.state_dir = tmp_path / 'var' / 'lib' / 'trainnet' / 'config-loaded'
        self.command = tmp_path / 'reload'
        self.reload_says(0, 'Reading configuration\nReconfigured')

    def reload_says(self, rc, out='', err='', sleep=0):
        """The reload command logs 'LANG LC_ALL args' per call, prints out/err, exits rc."""
        self.command.write_text(
            '#!/bin/sh\n'
            'echo "$LANG $LC_ALL $*" >> "%s"\n'
            'sleep %s\n'
            'printf "%%s\\n" "%s"\n'
            'printf "%%s\\n" "%s" >&2\n'
            'exit %d\n' % (self.log, sleep, out, err, rc))
        os.chmod(str(self.command), 0o755)

    def reloads(self):
        return self.log.read_text().splitlines() if self.log.exists() else []

    def record(self):
        path = self.state_dir / 'svc.sha256'
        return path.read_text().strip() if path.exists() else None

    def args(self, **extra):
        args = {'name': 'svc', 'paths': [str(self.conf), str(self.include)],
                'argv': [str(self.command), 'configure'], 'state_dir': str(self.state_dir)}
        args.update(extra)
        return args

    def digest(self):
        """The keyed digest the module records (the host key it created in the state directory)."""
        key = (self.state_dir / KEY_NAME).read_bytes()
        return config_digest([str(self.conf), str(self.include)], key)[0]


@pytest.fixture
def host(tmp_path, monkeypatch):
    patch_module(monkeypatch, get_bin_path=fake_get_bin_path({}))
    return Host(tmp_path)


def run_module(args, check_mode=False, diff=False):
    return run_with_args(config_loaded.main, args, check_mode, diff)


def test_no_record_reloads_then_records_and_the_second_run_changes_nothing(host):
    ok, result = run_module(host.args(expect=BIRD_EXPECT))
    assert ok, result
    assert result['changed'] is True and result['reloaded'] is True and result['recorded'] is True
    assert result['action'] == 'reload' and result['previous_checksum'] is None
    assert result['checksum'] == host.digest() == host.record()
    assert host.reloads() == ['C C configure']          # once, with LANG=C, argv without a shell
    assert result['rc'] == 0 and 'Reconfigured' in result['stdout']
    assert stat.S_IMODE(os.stat(str(host.state_dir)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(str(host.state_dir / 'svc.sha256')).st_mode) == 0o600

    ok, again = run_module(host.args(expect=BIRD_EXPECT))
    assert ok and again['changed'] is False and again['reloaded'] is False and again['action'] == 'none'
    assert again['previous_checksum'] == again['checksum'] == result['checksum']
    assert host.reloads() == ['C C configure']          # no second reload
    assert 'rc' not in again


def test_a_changed_file_is_reloaded_even_when_the_run_that_wrote_it_stopped_before(host):
    assert run_module(host.args())[0]
    # The run that changes the include stops before the reload (the old handler was lost here).
    host.include.write_text('cache_peer a\ncache_peer b\n')
    # The next run finds the file as the previous one left it, and still reloads.
    ok, result = run_module(host.args())
    assert ok and result['changed'] is True and result['reloaded'] is True
    assert len(host.reloads()) == 2 and host.record() == host.digest()


def test_failed_reload_fails_with_stderr_and_records_nothing(host):
    host.reload_says(1, 'partial', 'Job for svc.service failed because the control process exited')
    ok, result = run_module(host.args())
    assert not ok
    assert 'Job for svc.service failed' in result['msg'] and 'exited 1' in result['msg']
    assert result['rc'] == 1 and 'Job for svc.service failed' in result['stderr']
    assert result['stdout'] == 'partial\n'
    assert result['recorded'] is False and result['reloaded'] is False
    assert host.record() is None
    # Fixed: the next run reloads (the record still says nothing was loaded).
    host.reload_says(0)
    ok, result = run_module(host.args())
    assert ok and result['reloaded'] is True and len(host.reloads()) == 2


def test_failed_reload_keeps_the_previous_record(host):
    assert run_module(host.args())[0]
    before = host.record()
    host.conf.write_text('broken\n')
    host.reload_says(2, '', 'parse error')
    ok, result = run_module(host.args())
    assert not ok and host.record() == before
    assert result['previous_checksum'] == before and result['checksum'] != before


def test_output_not_matching_expect_fails_and_records_nothing(host):
    host.reload_says(0, 'Reading configuration from /etc/bird/bird.conf\n/etc/bird/bird.conf:1:1 syntax error')
    ok, result = run_module(host.args(expect=BIRD_EXPECT))
    assert not ok and 'syntax error' in result['msg'] and 'does not match' in result['msg']
    assert host.record() is None


def test_check_mode_predicts_a_reload_and_runs_nothing(host):
    ok, result = run_module(host.args(), check_mode=True)
    assert ok and result['changed'] is True and result['reloaded'] is True and result['action'] == 'reload'
    assert host.reloads() == [] and not host.state_dir.exists()
    assert 'rc' not in result
    # The real run does what check mode said; then check mode predicts nothing.
    assert run_module(host.args())[1]['changed'] is True
    ok, result = run_module(host.args(), check_mode=True)
    assert ok and result['changed'] is False and len(host.reloads()) == 1
    # A changed template in check mode: a reload is predicted, still nothing runs.
    host.conf.write_text('protocol bfd { interval 50 ms; }\n')
    ok, result = run_module(host.args(), check_mode=True)
    assert ok and result['changed'] is True and result['reloaded'] is True and len(host.reloads()) == 1
    assert host.record() != host.digest()


def test_check_mode_learns_of_a_template_it_did_not_write_from_files_changed(host):
    """In check mode the template task writes nothing: the file still holds what the service runs,
    so only files_changed tells the module that the real run would reload."""
    assert run_module(host.args())[0]
    ok, result = run_module(host.args(files_changed=True), check_mode=True, diff=True)
    assert ok and result['changed'] is True and result['reloaded'] is True and result['action'] == 'reload'
    assert 'not known in check mode' in result['diff']['after']
    assert len(host.reloads()) == 1
    ok, result = run_module(host.args(files_changed=True, loaded_by_start=True), check_mode=True)
    assert ok and result['action'] == 'record'
    # A real run judges by the digest: the files are what the service runs, nothing to do.
    ok, result = run_module(host.args(files_changed=True))
    assert ok and result['changed'] is False and len(host.reloads()) == 1


def test_check_mode_with_a_file_not_written_yet_predicts_a_reload(host):
    host.include.unlink()
    ok, result = run_module(host.args(), check_mode=True)
    assert ok and result['changed'] is True and result['missing'] == [str(host.include)]


def test_missing_file_fails_outside_check_mode_before_anything_runs(host):
    host.include.unlink()
    ok, result = run_module(host.args())
    assert not ok and str(host.include) in result['msg'] and 'does not exist' in result['msg']
    assert host.reloads() == [] and host.record() is None


def test_loaded_by_start_records_without_a_reload(host):
    ok, result = run_module(host.args(loaded_by_start=True))
    assert ok and result['changed'] is True and result['action'] == 'record'
    assert result['reloaded'] is False and result['recorded'] is True
    assert host.reloads() == [] and host.record() == host.digest()
    # Second run (the service is running already: the start task reports no change).
    ok, result = run_module(host.args(loaded_by_start=False))
    assert ok and result['changed'] is False and host.reloads() == []
    # Check mode of a start: predicts the record, runs and writes nothing.
    host.conf.write_text('changed\n')
    ok, result = run_module(host.args(loaded_by_start=True), check_mode=True)
    assert ok and result['changed'] is True and result['action'] == 'record'
    assert host.record() != host.digest()


def test_diff_shows_the_recorded_and_the_new_digest(host):
    ok, result = run_module(host.args(), check_mode=True, diff=True)
    assert ok and result['diff']['before'] == ''
    # No host key yet, and check mode creates none: the digest is under a throwaway key.
    assert re.match(r'sha256 [0-9a-f]{64}\n$', result['diff']['after']), result['diff']
    assert not (host.state_dir / KEY_NAME).exists()
    assert str(host.conf) in result['diff']['before_header']
    run_module(host.args())
    recorded = host.record()
    host.conf.write_text('new\n')
    ok, result = run_module(host.args(), diff=True)
    assert result['diff']['before'] == 'sha256 %s\n' % recorded
    assert result['diff']['after'] == 'sha256 %s\n' % host.digest()


def test_timeout_stops_the_command_and_fails(host):
    host.reload_says(0, 'Reconfigured', sleep=30)
    ok, result = run_module(host.args(timeout=1))
    assert not ok and 'did not finish within 1 s' in result['msg'] and result['rc'] == 124
    assert host.record() is None


def test_command_name_is_resolved_like_the_command_module(host, monkeypatch):
    patch_module(monkeypatch, get_bin_path=fake_get_bin_path({'birdc': str(host.command)}))
    ok, result = run_module(host.args(argv=['birdc', 'configure']))
    assert ok and result['cmd'] == [str(host.command), 'configure'] and len(host.reloads()) == 1


def test_missing_command_fails_and_records_nothing(host):
    ok, result = run_module(host.args(argv=['trainnet-no-such-reload']))
    assert not ok and result['rc'] == 127 and host.record() is None


@pytest.mark.parametrize('extra, fragment', [
    ({'name': '../svc'}, 'name'),
    ({'paths': ['etc/svc.conf']}, 'must be absolute'),
    ({'paths': []}, 'at least one file'),
    ({'argv': []}, 'reload command'),
    ({'expect': '(unclosed'}, 'not a regular expression'),
    ({'timeout': 0}, 'timeout'),
])
def test_bad_input_fails_before_anything_is_read_or_run(host, extra, fragment):
    ok, result = run_module(host.args(**extra))
    assert not ok and fragment in result['msg']
    assert host.reloads() == [] and not host.state_dir.exists()


def test_unreadable_record_fails(host):
    host.state_dir.mkdir(parents=True)
    (host.state_dir / 'svc.sha256').mkdir()
    ok, result = run_module(host.args())
    assert not ok and 'cannot read the record' in result['msg'] and host.reloads() == []


def test_the_digest_is_keyed_by_a_host_secret(host):
    """The loader's files hold proxy credentials: the digest in results and diffs is an HMAC under a
    random per-host key (0600), not a plain hash a weak password could be checked against."""
    ok, result = run_module(host.args())
    assert ok, result
    key_file = host.state_dir / KEY_NAME
    assert stat.S_IMODE(os.stat(str(key_file)).st_mode) == 0o600 and len(key_file.read_bytes()) == 32
    assert result['checksum'] != config_digest([str(host.conf), str(host.include)])[0]
    assert result['checksum'] == host.digest()
