# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""service_bundle on files in tmp_path and a fake systemctl (a script keeping unit states in JSON)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import stat
import sys

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import service_bundle as logic
from ansible_collections.longhaul.trainnet.plugins.modules import service_bundle
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    fake_get_bin_path, patch_module, run_with_args,
)

# Units: {name: {"active": bool, "enabled": bool, "fails": bool}}; a unit whose file is missing
# from UNIT_DIR is not-found. Every call is logged as one line.
FAKE_SYSTEMCTL = r'''#!%s
import json, os, sys
state_path, log_path, unit_dir = os.environ["FAKE_STATE"], os.environ["FAKE_LOG"], os.environ["FAKE_UNIT_DIR"]
state = json.load(open(state_path))
args = sys.argv[1:]
open(log_path, "a").write(" ".join(args) + "\n")
if args[0] == "show":
    blocks = []
    for name in args[2:]:
        unit = state.get(name, {})
        found = os.path.exists(os.path.join(unit_dir, name))
        blocks.append("\n".join([
            "Id=" + name, "LoadState=" + ("loaded" if found else "not-found"),
            "ActiveState=" + ("active" if unit.get("active") else ("failed" if unit.get("failed") else "inactive")),
            "SubState=x", "Result=" + ("exit-code" if unit.get("failed") else "success"), "Type=simple",
            "UnitFileState=" + (("enabled" if unit.get("enabled") else "disabled") if found else ""),
            "NeedDaemonReload=no"]))
    print("\n\n".join(blocks))
    sys.exit(0)
if args[0] == "daemon-reload":
    sys.exit(0)
action, name = args
unit = state.setdefault(name, {})
if action in ("start", "restart"):
    fails = open(os.path.join(unit_dir, name)).read().find("FAIL") >= 0 if os.path.exists(os.path.join(unit_dir, name)) else True
    unit["active"], unit["failed"] = not fails, fails
elif action == "stop":
    unit["active"] = False
elif action in ("enable", "disable"):
    unit["enabled"] = action == "enable"
json.dump(state, open(state_path, "w"))
'''


class Host(object):
    def __init__(self, tmp_path, monkeypatch):
        self.root = tmp_path
        self.unit_dir = tmp_path / 'systemd'
        self.unit_dir.mkdir()
        self.state = tmp_path / 'units.json'
        self.state.write_text('{}')
        self.log = tmp_path / 'systemctl.log'
        self.systemctl = tmp_path / 'systemctl'
        self.systemctl.write_text(FAKE_SYSTEMCTL % sys.executable)
        self.systemctl.chmod(0o755)
        for name, value in (('FAKE_STATE', self.state), ('FAKE_LOG', self.log), ('FAKE_UNIT_DIR', self.unit_dir)):
            monkeypatch.setenv(name, str(value))
        monkeypatch.setattr(logic, 'UNIT_DIRS', (str(self.unit_dir),))
        patch_module(monkeypatch, get_bin_path=fake_get_bin_path({'systemctl': str(self.systemctl), 'journalctl': None}))
        self.owner = str(os.getuid())
        self.group = str(os.getgid())

    def calls(self):
        return self.log.read_text().splitlines() if self.log.exists() else []

    def units(self):
        return json.loads(self.state.read_text())

    def args(self, unit_text='[Service]\nExecStart=/bin/true\n', conf='a = 1\n', **extra):
        args = {
            'directories': [{'path': str(self.root / 'etc'), 'mode': '0750', 'owner': self.owner, 'group': self.group}],
            'files': [
                {'path': str(self.root / 'etc' / 'app.conf'), 'content': conf, 'mode': '0640',
                 'owner': self.owner, 'group': self.group},
                {'path': str(self.unit_dir / 'app.service'), 'content': unit_text, 'mode': '0644',
                 'owner': self.owner, 'group': self.group},
            ],
            'units': [{'name': 'app.service', 'restart_on': [str(self.root / 'etc' / 'app.conf')]}],
            'verify_timeout': 2,
        }
        args.update(extra)
        return args


@pytest.fixture
def host(tmp_path, monkeypatch):
    return Host(tmp_path, monkeypatch)


def test_check_mode_predicts_and_changes_nothing_then_the_run_does_it_then_nothing_to_do(host):
    ok, planned = run_with_args(service_bundle.main, host.args(), check_mode=True, diff=True)
    assert ok and planned['changed'] and planned['daemon_reload']
    assert planned['units']['app.service']['actions'] == ['enable', 'start']
    assert not (host.root / 'etc').exists() and [c for c in host.calls() if not c.startswith('show')] == []
    assert planned['diff'][-1] == {'before_header': 'units', 'after_header': 'units', 'before': '',
                                   'after': 'app.service: enable, start\n'}

    ok, done = run_with_args(service_bundle.main, host.args())
    assert ok and done['changed'] and done['units'] == planned['units'] and done['files'] == planned['files']
    assert (host.root / 'etc' / 'app.conf').read_text() == 'a = 1\n'
    assert stat.S_IMODE(os.stat(str(host.root / 'etc' / 'app.conf')).st_mode) == 0o640
    assert stat.S_IMODE(os.stat(str(host.root / 'etc')).st_mode) == 0o750
    assert host.units()['app.service'] == {'active': True, 'failed': False, 'enabled': True}
    assert [c for c in host.calls() if not c.startswith('show')] == ['daemon-reload', 'enable app.service', 'start app.service']

    before = len(host.calls())
    ok, again = run_with_args(service_bundle.main, host.args())
    assert ok and not again['changed'] and again['changed_paths'] == []
    assert len(host.calls()) == before + 1      # one systemctl show, nothing else


def test_a_changed_setting_restarts_its_unit_without_a_daemon_reload(host):
    run_with_args(service_bundle.main, host.args())
    start = len(host.calls())
    ok, done = run_with_args(service_bundle.main, host.args(conf='a = 2\n'))
    assert ok and done['changed_paths'] == [str(host.root / 'etc' / 'app.conf')] and not done['daemon_reload']
    assert [c for c in host.calls()[start:] if not c.startswith('show')] == ['restart app.service']


def test_a_mode_change_alone_is_a_change_without_rewriting(host):
    run_with_args(service_bundle.main, host.args())
    args = host.args()
    args['files'][0]['mode'] = '0600'
    ok, done = run_with_args(service_bundle.main, args)
    assert ok and done['files'][str(host.root / 'etc' / 'app.conf')] == 'updated'
    assert stat.S_IMODE(os.stat(str(host.root / 'etc' / 'app.conf')).st_mode) == 0o600


def test_a_unit_that_does_not_come_up_puts_the_old_files_back(host):
    run_with_args(service_bundle.main, host.args())
    ok, failed = run_with_args(service_bundle.main, host.args(unit_text='[Service]\nExecStart=FAIL\n', conf='a = 3\n'))
    assert not ok and failed['rolled_back']
    assert 'app.service is not up 2 s after this run started it: ActiveState=failed' in failed['msg']
    assert (host.root / 'etc' / 'app.conf').read_text() == 'a = 1\n'
    assert (host.unit_dir / 'app.service').read_text() == '[Service]\nExecStart=/bin/true\n'
    actions = [c for c in host.calls() if not c.startswith('show')]
    assert actions[-4:] == ['daemon-reload', 'restart app.service', 'daemon-reload', 'restart app.service']
    assert host.units()['app.service']['active'] is True


def test_a_new_unit_that_fails_is_stopped_disabled_and_its_files_removed(host):
    ok, failed = run_with_args(service_bundle.main, host.args(unit_text='[Service]\nExecStart=FAIL\n'))
    assert not ok and failed['rolled_back']
    assert not (host.unit_dir / 'app.service').exists() and not (host.root / 'etc' / 'app.conf').exists()
    assert [c for c in host.calls() if not c.startswith('show')][-3:] == ['stop app.service', 'disable app.service', 'daemon-reload']
    assert host.units()['app.service']['enabled'] is False


def test_content_that_fails_validation_is_never_installed_and_nothing_else_changes(host, tmp_path):
    run_with_args(service_bundle.main, host.args())
    args = host.args(conf='broken\n')
    args['files'][0]['validate'] = '%s %%s' % (tmp_path / 'check')
    (tmp_path / 'check').write_text('#!/bin/sh\ngrep -q "^a = " "$1" || { echo "line 1: syntax error" >&2; exit 1; }\n')
    (tmp_path / 'check').chmod(0o755)
    ok, failed = run_with_args(service_bundle.main, args)
    assert not ok and 'does not pass' in failed['msg'] and 'line 1: syntax error' in failed['msg']
    assert (host.root / 'etc' / 'app.conf').read_text() == 'a = 1\n'
    assert [name for name in os.listdir(str(host.root / 'etc')) if name.startswith('.')] == []   # no staged leftovers
    # A later file failing its check takes the earlier staged ones with it.
    args = host.args(conf='a = 4\n', unit_text='[Service]\nExecStart=/bin/false\n')
    args['files'][1]['validate'] = '%s %%s' % (tmp_path / 'check')
    ok, failed = run_with_args(service_bundle.main, args)
    assert not ok and 'app.service: the new content does not pass' in failed['msg']
    assert (host.root / 'etc' / 'app.conf').read_text() == 'a = 1\n'
    assert [name for name in os.listdir(str(host.root / 'etc')) if name.startswith('.')] == []
    assert [name for name in os.listdir(str(host.unit_dir)) if name.startswith('.')] == []
    args = host.args(conf='a = 5\n')
    args['files'][0]['validate'] = '%s %%s' % (tmp_path / 'check')
    ok, done = run_with_args(service_bundle.main, args)
    assert ok and (host.root / 'etc' / 'app.conf').read_text() == 'a = 5\n'


def test_removing_a_unit_stops_and_disables_it_first(host):
    run_with_args(service_bundle.main, host.args())
    unit_path = str(host.unit_dir / 'app.service')
    start = len(host.calls())
    ok, done = run_with_args(service_bundle.main, {'remove': [unit_path],
                                                   'units': [{'name': 'app.service', 'state': 'stopped', 'enabled': False}]})
    assert ok and done['changed_paths'] == [unit_path] and done['daemon_reload']
    actions = [c for c in host.calls()[start:] if not c.startswith('show')]
    assert actions == ['disable app.service', 'stop app.service', 'daemon-reload']
    assert not os.path.exists(unit_path)


def test_bad_input_fails_before_anything_is_read(host):
    args = host.args()
    args['units'][0]['restart_on'] = ['/nowhere']
    ok, failed = run_with_args(service_bundle.main, args)
    assert not ok and 'restart_on path /nowhere is not one of the bundle files' in failed['msg']
    assert host.calls() == [] and not (host.root / 'etc').exists()
