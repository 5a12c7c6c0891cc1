# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""service_bundle planning: unit files recognised, unit actions, verification, input rules."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils.service_bundle import (
    BundleInputError, check_input, needs_daemon_reload, parse_mode, parse_show, plan_file, plan_unit,
    unit_is_up, unit_of_path,
)

SHOW = """Id=a.service
LoadState=loaded
ActiveState=active
SubState=running
Result=success
Type=simple
UnitFileState=enabled
NeedDaemonReload=no

Id=b.timer
LoadState=not-found
ActiveState=inactive
SubState=dead
Result=success
Type=
UnitFileState=
NeedDaemonReload=no
"""


def unit(name, **extra):
    return dict({'name': name, 'enabled': True, 'state': 'started', 'restart_on': []}, **extra)


def test_unit_files_and_dropins_are_recognised_only_in_systemd_directories():
    assert unit_of_path('/etc/systemd/system/a.service') == 'a.service'
    assert unit_of_path('/etc/systemd/system/a.service.d/10-x.conf') == 'a.service'
    assert unit_of_path('/lib/systemd/system/b.timer') == 'b.timer'
    assert unit_of_path('/etc/trainnet/a.service') is None
    assert unit_of_path('/etc/systemd/system/a.service.d/notes.txt') is None
    assert unit_of_path('/etc/systemd/system/readme') is None


def test_show_output_is_split_per_unit_in_order():
    props = parse_show(SHOW, ['a.service', 'b.timer'])
    assert props['a.service']['ActiveState'] == 'active'
    assert props['b.timer']['LoadState'] == 'not-found'
    with pytest.raises(ValueError):
        parse_show(SHOW, ['a.service'])


def test_a_new_unit_is_enabled_and_started_a_running_one_restarted_only_when_its_files_changed():
    props = parse_show(SHOW, ['a.service', 'b.timer'])
    assert plan_unit(unit('b.timer'), props['b.timer'], []) == ['enable', 'start']
    assert plan_unit(unit('a.service'), props['a.service'], []) == []
    assert plan_unit(unit('a.service'), props['a.service'], ['/etc/systemd/system/a.service']) == ['restart']
    assert plan_unit(unit('a.service'), props['a.service'], ['/etc/systemd/system/a.service.d/1.conf']) == ['restart']
    # Another unit's file, or a file the unit does not name in restart_on, restarts nothing.
    assert plan_unit(unit('a.service'), props['a.service'], ['/etc/systemd/system/b.timer', '/etc/x']) == []
    assert plan_unit(unit('a.service', restart_on=['/etc/x']), props['a.service'], ['/etc/x']) == ['restart']
    assert plan_unit(unit('a.service', restart=True), props['a.service'], []) == ['restart']
    assert plan_unit(unit('b.timer', restart=True), props['b.timer'], []) == ['enable', 'start']


def test_present_and_stopped_units_and_enablement():
    props = parse_show(SHOW, ['a.service', 'b.timer'])
    assert plan_unit(unit('a.service', state='present'), props['a.service'], ['/etc/systemd/system/a.service']) == []
    assert plan_unit(unit('a.service', state='stopped', enabled=False), props['a.service'], []) == ['disable', 'stop']
    static = dict(props['a.service'], UnitFileState='static')
    assert plan_unit(unit('a.service'), static, []) == []


def test_verification_accepts_active_units_and_finished_oneshots_only():
    assert unit_is_up({'ActiveState': 'active'})
    assert unit_is_up({'ActiveState': 'inactive', 'Type': 'oneshot', 'Result': 'success'})
    assert not unit_is_up({'ActiveState': 'inactive', 'Type': 'simple', 'Result': 'success'})
    assert not unit_is_up({'ActiveState': 'failed', 'Type': 'oneshot', 'Result': 'exit-code'})
    assert not unit_is_up({'ActiveState': 'activating', 'SubState': 'auto-restart'})
    assert not unit_is_up({})


def test_daemon_reload_when_a_unit_file_changed_or_systemd_asks_for_it():
    assert needs_daemon_reload(['/etc/systemd/system/a.service'], {})
    assert not needs_daemon_reload(['/etc/trainnet/x.env'], {'a.service': {'NeedDaemonReload': 'no'}})
    assert needs_daemon_reload([], {'a.service': {'NeedDaemonReload': 'yes'}})


def test_file_plan_tells_content_from_attribute_changes():
    current = {'content': b'x', 'mode': 0o644, 'uid': 0, 'gid': 0, 'regular': True}
    assert plan_file(b'x', 0o644, 0, 0, current) == ('unchanged', False)
    assert plan_file(b'x', 0o600, 0, 0, current) == ('updated', True)
    assert plan_file(b'y', 0o644, 0, 0, current) == ('updated', False)
    assert plan_file(b'y', 0o644, 0, 0, None) == ('created', False)


def test_modes_are_octal_strings():
    assert parse_mode('0644', 'f') == 0o644
    assert parse_mode('755', 'f') == 0o755
    assert parse_mode('0o600', 'f') == 0o600
    for bad in ('0999', 'rw-r--r--', '', '012345'):
        with pytest.raises(BundleInputError, match="f: mode must be an octal string"):
            parse_mode(bad, 'f')


@pytest.mark.parametrize('directories,files,remove,units,message', [
    ([], [{'path': 'etc/x', 'mode': '0644'}], [], [], r'files\[0\] \(etc/x\): path must be absolute'),
    ([{'path': '/etc/x', 'mode': '0755'}], [{'path': '/etc/x', 'mode': '0644'}], [], [],
     r'files\[0\] \(/etc/x\): path is also directories\[0\]'),
    ([], [{'path': '/etc/x', 'mode': '0644'}], ['/etc/x'], [], r'remove\[0\] \(/etc/x\): path is also files\[0\]'),
    ([], [{'path': '/etc/x', 'mode': '0644', 'validate': 'nft -c -f'}], [], [], 'validate must contain %s'),
    ([], [], [], [unit('a')], r'units\[0\] \(a\): name must be a unit name'),
    ([], [], [], [unit('a.service'), unit('a.service')], 'unit listed twice'),
    ([], [], [], [unit('a.service', restart_on=['/etc/x'])], 'restart_on path /etc/x is not one of the bundle files'),
    ([], [{'path': '/etc/x', 'mode': '0644'}], [], [unit('a.service', state='present', restart_on=['/etc/x'])],
     'restart_on and restart need state started'),
])
def test_bad_input_is_refused_naming_the_entry(directories, files, remove, units, message):
    with pytest.raises(BundleInputError, match=message):
        check_input(directories, files, remove, units)
