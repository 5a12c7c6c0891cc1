# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 23 finding 8: root wrote metrics and state through a predictable `<name>.tmp` and chmodded
it by path, so a link planted there sent the text (and mode 0644) to any file. write_atomic of
module_utils/textfile.py, and the copies in the two programs that run alone on hosts (the control
plane watchdog, the egress watchdog), each checked here on the same cases."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.machinery
import importlib.util
import inspect
import os
import stat

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import config_loaded, control_plane_status, textfile
from ansible_collections.longhaul.trainnet.plugins.modules import link_measure

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
WATCHDOG = os.path.join(ROOT, 'roles', 'egress_pool', 'files', 'trainnet-egress-watchdog')


def load_watchdog():
    loader = importlib.machinery.SourceFileLoader('trainnet_egress_watchdog_textfile', WATCHDOG)
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


WRITERS = {
    'module_utils': textfile.write_atomic,
    'control_plane_status': control_plane_status.write_atomic,
    'egress_watchdog': load_watchdog().write_atomic,
}
VICTIM_TEXT = 'root:x:0:0:root:/root:/bin/bash\n'


@pytest.fixture(params=sorted(WRITERS))
def write_atomic(request):
    return WRITERS[request.param]


def mode(path):
    return stat.S_IMODE(os.lstat(str(path)).st_mode)


def victim(tmp_path):
    path = tmp_path / 'elsewhere' / 'shadow'
    path.parent.mkdir()
    path.write_text(VICTIM_TEXT)
    os.chmod(str(path), 0o600)
    return path


def test_the_programs_copies_are_the_module_utils_function():
    # The watchdogs run alone on hosts (no collection to import): their copy must not drift.
    reference = inspect.getsource(textfile.write_atomic)
    for name, function in sorted(WRITERS.items()):
        assert inspect.getsource(function) == reference, '%s: write_atomic differs from module_utils/textfile.py' % name


def test_link_at_the_old_predictable_temporary_name_is_not_written_through(tmp_path, write_atomic):
    target = tmp_path / 'trainnet.prom'
    shadow = victim(tmp_path)
    os.symlink(str(shadow), str(tmp_path / 'trainnet.prom.tmp'))
    write_atomic(str(target), 'metric 1\n', 0o644)
    assert shadow.read_text() == VICTIM_TEXT
    assert mode(shadow) == 0o600
    assert target.read_text() == 'metric 1\n' and mode(target) == 0o644
    assert not target.is_symlink()


def test_link_at_the_target_is_replaced_not_followed(tmp_path, write_atomic):
    target = tmp_path / 'state.json'
    shadow = victim(tmp_path)
    os.symlink(str(shadow), str(target))
    write_atomic(str(target), '{}', 0o644)
    assert shadow.read_text() == VICTIM_TEXT and mode(shadow) == 0o600
    assert not target.is_symlink() and target.read_text() == '{}'


@pytest.mark.parametrize('wanted', [0o644, 0o600, 0o640])
def test_file_ends_with_the_requested_mode_whatever_the_umask(tmp_path, write_atomic, wanted):
    target = tmp_path / 'f'
    target.write_text('old')
    os.chmod(str(target), 0o666 if wanted != 0o666 else 0o600)
    old = os.umask(0o077)
    try:
        write_atomic(str(target), 'new', wanted)
    finally:
        os.umask(old)
    assert mode(target) == wanted and target.read_text() == 'new'


def test_replaces_whole_and_leaves_no_temporary(tmp_path, write_atomic):
    target = tmp_path / 'x.prom'
    write_atomic(str(target), 'a 1\n', 0o644)
    write_atomic(str(target), b'a 2\n', 0o644)
    assert os.listdir(str(tmp_path)) == ['x.prom']
    assert target.read_bytes() == b'a 2\n'


def test_failed_rename_leaves_no_temporary(tmp_path, write_atomic):
    (tmp_path / 'x.prom').mkdir()               # a directory cannot be replaced by a file
    with pytest.raises(OSError):
        write_atomic(str(tmp_path / 'x.prom'), 'a 1\n', 0o644)
    assert os.listdir(str(tmp_path)) == ['x.prom']


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, write_atomic, monkeypatch):
    target = tmp_path / 'x.prom'
    target.write_text('old\n')

    def full(fd):
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(os, 'fsync', full)
    with pytest.raises(OSError, match='No space left'):
        write_atomic(str(target), 'new\n', 0o644)
    assert os.listdir(str(tmp_path)) == ['x.prom']
    assert target.read_text() == 'old\n'


# --------------------------------------------------------------------------- the writers use it

def test_control_plane_watchdog_metrics_not_written_through_a_planted_link(tmp_path):
    shadow = victim(tmp_path)
    os.symlink(str(shadow), str(tmp_path / (control_plane_status.FILE_NAME + '.tmp')))
    target = control_plane_status.write_textfile(str(tmp_path), 'up 1\n')
    assert target == str(tmp_path / control_plane_status.FILE_NAME)
    assert shadow.read_text() == VICTIM_TEXT and mode(shadow) == 0o600
    assert mode(target) == 0o644


def test_link_measure_metrics_not_written_through_a_planted_link(tmp_path):
    shadow = victim(tmp_path)
    os.symlink(str(shadow), str(tmp_path / 'x.prom.tmp'))
    link_measure.Net().write_textfile(str(tmp_path), 'x.prom', 'a 1\n')
    assert shadow.read_text() == VICTIM_TEXT and mode(shadow) == 0o600
    assert (tmp_path / 'x.prom').read_text() == 'a 1\n' and mode(tmp_path / 'x.prom') == 0o644


def test_config_loaded_records_stay_private(tmp_path):
    path = str(tmp_path / 'bird.sha256')
    config_loaded.write_record(path, 'ab' * 32)
    assert mode(path) == config_loaded.RECORD_MODE == 0o600
    assert os.listdir(str(tmp_path)) == ['bird.sha256']
