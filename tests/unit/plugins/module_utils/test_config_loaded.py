# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""config_loaded's logic on files in tmp_path: the digest, the record and the decision."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import re
import stat

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import config_loaded as cl


def write(path, text):
    path.write_bytes(text.encode('utf-8'))
    return str(path)


def test_digest_is_sha256_over_paths_and_contents_in_order(tmp_path):
    a = write(tmp_path / 'a.conf', 'one\n')
    b = write(tmp_path / 'b.conf', 'two\n')
    digest, missing = cl.config_digest([a, b])
    expected = hashlib.sha256()
    for path, content in ((a, b'one\n'), (b, b'two\n')):
        expected.update(path.encode() + b'\0' + str(len(content)).encode() + b'\0' + content)
    assert (digest, missing) == (expected.hexdigest(), [])
    assert cl.config_digest([a, b]) == (digest, [])               # stable
    assert cl.config_digest([b, a])[0] != digest                  # order counts


def test_digest_sees_content_moved_between_files_and_a_renamed_file(tmp_path):
    a = write(tmp_path / 'a.conf', 'one\ntwo\n')
    b = write(tmp_path / 'b.conf', '')
    before = cl.config_digest([a, b])[0]
    write(tmp_path / 'a.conf', 'one\n')
    write(tmp_path / 'b.conf', 'two\n')
    assert cl.config_digest([a, b])[0] != before
    c = write(tmp_path / 'c.conf', 'two\n')
    assert cl.config_digest([a, c])[0] != cl.config_digest([a, b])[0]


def test_missing_file_is_reported_and_changes_the_digest(tmp_path):
    a = write(tmp_path / 'a.conf', '')
    gone = str(tmp_path / 'gone.conf')
    digest, missing = cl.config_digest([a, gone])
    assert missing == [gone]
    assert digest != cl.config_digest([a])[0]
    write(tmp_path / 'gone.conf', '')   # an empty file is not a missing one
    assert cl.config_digest([a, gone]) != (digest, missing)


def test_unreadable_path_raises(tmp_path):
    with pytest.raises(OSError):
        cl.config_digest([str(tmp_path)])   # a directory


def test_record_round_trip_atomic_0600(tmp_path):
    state = tmp_path / 'state' / 'config-loaded'
    assert cl.ensure_state_dir(str(state)) is True
    assert stat.S_IMODE(os.stat(str(state)).st_mode) == 0o700
    assert cl.ensure_state_dir(str(state)) is False
    path = cl.record_path(str(state), 'bird')
    assert path == os.path.join(str(state), 'bird.sha256')
    assert cl.read_record(path) is None
    digest = 'ab' * 32
    cl.write_record(path, digest)
    assert cl.read_record(path) == digest
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    cl.write_record(path, 'cd' * 32)
    assert cl.read_record(path) == 'cd' * 32
    assert os.listdir(str(state)) == ['bird.sha256']   # no temporary file left behind


def test_torn_or_foreign_record_reads_as_none(tmp_path):
    path = tmp_path / 'squid.sha256'
    for text in ('', 'ab' * 31 + '\n', 'not a digest\n', 'AB' * 32):
        path.write_text(text)
        assert cl.read_record(str(path)) is None, text


def test_failed_write_keeps_the_old_record_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = cl.record_path(str(tmp_path), 'bird')
    cl.write_record(path, 'ab' * 32)

    def refuse(src, dst):
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(cl.os, 'replace', refuse)   # the rename of textfile.write_atomic
    with pytest.raises(OSError):
        cl.write_record(path, 'cd' * 32)
    assert cl.read_record(path) == 'ab' * 32
    assert os.listdir(str(tmp_path)) == ['bird.sha256']


@pytest.mark.parametrize('recorded, started, action', [
    (None, False, cl.ACTION_RELOAD),            # no record: reload
    ('old', False, cl.ACTION_RELOAD),           # files changed since the last reload
    ('new', False, cl.ACTION_NONE),             # the service runs these files
    ('new', True, cl.ACTION_NONE),
    (None, True, cl.ACTION_RECORD),             # it just started with them: no reload
    ('old', True, cl.ACTION_RECORD),
])
def test_plan(recorded, started, action):
    assert cl.plan('new', recorded, started) == action


def test_plan_in_check_mode_with_files_a_task_would_have_written():
    assert cl.plan('new', 'new', False, files_changed=True) == cl.ACTION_RELOAD
    assert cl.plan('new', 'new', True, files_changed=True) == cl.ACTION_RECORD
    assert cl.plan('new', None, False, files_changed=True) == cl.ACTION_RELOAD


def test_reload_problem():
    expect = re.compile(r'^Reconfigur(ed|ation (already )?in progress)', re.MULTILINE)
    ok = 'Reading configuration from /etc/bird/bird.conf\nReconfigured\n'
    assert cl.reload_problem(0, ok, '', expect=expect) is None
    assert cl.reload_problem(0, 'Reconfiguration in progress\n', '', expect=expect) is None
    assert cl.reload_problem(0, '', '') is None
    refused = 'Reading configuration from /etc/bird/bird.conf\n/etc/bird/bird.conf:3:1 syntax error\n'
    problem = cl.reload_problem(0, refused, '', expect=expect)
    assert 'does not match' in problem and 'syntax error' in problem
    assert 'shutting down' in cl.reload_problem(0, 'Reconfiguration ignored, shutting down\n', '', expect=expect)
    assert cl.reload_problem(1, 'out\n', 'Job for squid.service failed.\n') == \
        'exited 1: Job for squid.service failed.'
    assert cl.reload_problem(3, 'only stdout\n', '') == 'exited 3: only stdout'
    assert cl.reload_problem(124, '', '', timed_out=True, limit=5) == 'did not finish within 5 s'


@pytest.mark.parametrize('name, good', [
    ('bird', True), ('squid', True), ('trainnet-wg@peer.1', True), ('a' * 128, True),
    ('', False), ('../etc/passwd', False), ('a/b', False), ('-x', False), ('a' * 129, False), ('sp ace', False),
])
def test_validate_name(name, good):
    assert (cl.validate_name(name) is None) is good


def test_diff_shows_recorded_and_new_digest():
    diff = cl.build_diff('bird', '/var/lib/trainnet/config-loaded/bird.sha256', None, 'ab' * 32, ['/etc/bird/bird.conf'])
    assert diff['before'] == '' and diff['after'] == 'sha256 %s\n' % ('ab' * 32)
    assert '/etc/bird/bird.conf' in diff['before_header'] and diff['before_header'] == diff['after_header']
    diff = cl.build_diff('bird', '/x/bird.sha256', 'cd' * 32, 'ab' * 32, ['/etc/bird/bird.conf'])
    assert diff['before'] == 'sha256 %s\n' % ('cd' * 32)
    diff = cl.build_diff('bird', '/x/bird.sha256', 'cd' * 32, 'cd' * 32, ['/etc/bird/bird.conf'], rewritten=True)
    assert diff['before'] != diff['after'] and 'not known in check mode' in diff['after']
