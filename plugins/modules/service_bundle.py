#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: service_bundle
short_description: A role's directories, files and systemd units in one call, verified, rolled back on failure
version_added: 0.9.0
description:
  - Applies the whole set of directories, files and systemd units one part of a role needs on a
    host - a program, its settings, its unit and timer - in one module call, where separate
    C(file), C(template), C(copy) and C(systemd_service) tasks cost one module run each.
  - 'It plans first, then acts, from one plan: it reads every directory and file (content, mode,
    owner) and, in one C(systemctl show) call, every listed unit; it decides what to create, write,
    remove, enable, disable, start, restart or stop; in check mode it returns that plan (and the
    diff) and changes nothing.'
  - 'Files are written whole and atomically: a temporary file in the same directory with the wanted
    mode and owner, checked with O(files[].validate) when given, then renamed over the old one. A
    file whose check fails is never installed, and the module fails before anything else changes:
    every file is written and checked before any is renamed into place.'
  - 'Units: C(systemctl daemon-reload) once when a unit file or drop-in (a file below a systemd unit
    directory) was written or removed, or when systemd reports C(NeedDaemonReload=yes) for a
    listed unit; then C(enable)/C(disable) as O(units[].enabled) says; a unit with
    O(units[].state=started) is started when it is not running, and restarted when it runs and
    its own unit file or drop-in, or a file of O(units[].restart_on), changed in this run.'
  - 'Verification: each unit this run started or restarted must be up within O(verify_timeout)
    seconds: active, or for C(Type=oneshot) a finished run with C(Result=success). When one is
    not, and O(rollback=true), every file of this run is put back as it was (removed when it was
    new, its old content, mode and owner otherwise), systemd is reloaded, the units this run
    restarted are restarted on their old files and the units it started are stopped; then the
    module fails naming the unit, its state and the last lines of its journal.'
  - Directories are created with their parents (parents get C(0755) root) and keep existing after
    a rollback (they are harmless and may hold other files).
  - Not for secrets - file content is a module argument and the diff shows it. Write key or
    credential files with a C(no_log) task of their own.
  - 'What it runs: C(systemctl show), C(daemon-reload), C(enable), C(disable), C(start), C(restart),
    C(stop) (C(LANG=C), each bounded in time), the O(files[].validate) commands (argv split
    shell-like, no shell), and C(journalctl -u UNIT -n 20) when a unit fails.'
author:
  - longhaul.trainnet maintainers (@longhaul)
requirements:
  - systemd (C(systemctl)) when O(units) is not empty.
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - The plan of a real run; a unit whose unit file is still to be written shows as not found,
        so it is predicted to be enabled and started.
  diff_mode:
    support: full
    details:
      - One diff per file created, changed (content, mode or owner) or removed, and one for the
        units whose state changes.
  platform:
    platforms: linux
options:
  directories:
    description: Directories to exist, with their mode and owner.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute, normalised path.
        type: path
        required: true
      mode:
        description: Octal mode as a string, for example V('0755').
        type: str
        required: true
      owner:
        description: User name or numeric UID.
        type: str
        default: root
      group:
        description: Group name or numeric GID.
        type: str
        default: root
  files:
    description:
      - Files to hold exactly O(files[].content), with their mode and owner. The parent directory is
        created (C(0755) root) when missing.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute, normalised path; not also a directory or a O(remove) entry.
        type: path
        required: true
      content:
        description: The whole content (text, written as UTF-8).
        type: str
        required: true
      mode:
        description: Octal mode as a string, for example V('0644').
        type: str
        required: true
      owner:
        description: User name or numeric UID.
        type: str
        default: root
      group:
        description: Group name or numeric GID.
        type: str
        default: root
      validate:
        description:
          - Command that checks new content before it is installed, C(%s) standing for the
            temporary file, for example V(nft -c -f %s). A non-zero exit fails the module before
            any file is renamed into place. Not run when only mode or owner change.
        type: str
  remove:
    description:
      - Paths that must not exist (a file or an empty directory); for example the unit of a
        feature that was turned off. Units configured by them are reloaded out of systemd.
    type: list
    elements: path
    default: []
  units:
    description: systemd units, handled after the files, in the given order.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Unit name with its suffix, for example V(trainnet-watchdog.timer).
        type: str
        required: true
      enabled:
        description:
          - Enabled at boot (V(true)) or disabled (V(false)). A static unit (no C([Install]) section,
            for example the service a timer starts) counts as enabled and is left as it is.
        type: bool
        default: true
      state:
        description:
          - V(started) running (started when not, restarted when its files changed);
            V(stopped) not running; V(present) the run state is left alone (a oneshot unit run
            at boot or by its timer).
          - A C(Type=oneshot) unit without C(RemainAfterExit) is inactive after each run; give
            it V(present), or V(started) would start it on every run.
        type: str
        choices: [started, stopped, present]
        default: started
      restart_on:
        description:
          - Paths of O(files) whose change restarts this unit (its own unit file and drop-ins
            always do). Only with O(units[].state=started).
        type: list
        elements: path
        default: []
      restart:
        description:
          - Restart it in this run even when no file of it changed (started when not running), for
            example when a check found what it sets up missing from the live system. Only with
            O(units[].state=started).
        type: bool
        default: false
  rollback:
    description: Put the files back and the units as they were when a started or restarted unit is not up.
    type: bool
    default: true
  verify_timeout:
    description: Seconds (1 to 120) a started or restarted unit has to come up.
    type: int
    default: 15
notes:
  - Uses only the Python standard library and C(systemctl)/C(journalctl).
seealso:
  - module: ansible.builtin.template
  - module: ansible.builtin.systemd_service
"""

EXAMPLES = r"""
- name: Watchdog | Install the program, its service and timer, and run the timer
  longhaul.trainnet.service_bundle:
    directories:
      - {path: /var/lib/prometheus/node-exporter, mode: "0755"}
    files:
      - path: /usr/local/libexec/trainnet/watchdog
        content: "{{ lookup('ansible.builtin.file', 'watchdog.py', rstrip=false) }}"
        mode: "0755"
      - path: /etc/systemd/system/trainnet-watchdog.service
        content: "{{ lookup('ansible.builtin.template', 'trainnet-watchdog.service.j2') }}"
        mode: "0644"
      - path: /etc/systemd/system/trainnet-watchdog.timer
        content: "{{ lookup('ansible.builtin.template', 'trainnet-watchdog.timer.j2') }}"
        mode: "0644"
    units:
      - {name: trainnet-watchdog.timer, state: started}

- name: A daemon restarted when its configuration changes, the configuration checked first
  longhaul.trainnet.service_bundle:
    files:
      - path: /etc/trainnet/table.nft
        content: "{{ lookup('ansible.builtin.template', 'table.nft.j2') }}"
        mode: "0600"
        validate: nft -c -f %s
    units:
      - name: trainnet-table.service
        restart_on: [/etc/trainnet/table.nft]
"""

RETURN = r"""
changed_paths:
  description: Directories and files created, written or removed (or, in check mode, that would be).
  returned: always
  type: list
  elements: str
  sample: [/etc/systemd/system/trainnet-watchdog.timer]
files:
  description: Per directory, file and O(remove) entry, its status.
  returned: always
  type: dict
  sample:
    /etc/systemd/system/trainnet-watchdog.timer: updated
    /etc/trainnet: unchanged
units:
  description: Per unit, its state before the run and the systemctl actions run (or planned).
  returned: always
  type: dict
  sample:
    trainnet-watchdog.timer:
      before: {ActiveState: active, UnitFileState: enabled}
      actions: [restart]
daemon_reload:
  description: Whether systemd was (or would be) reloaded.
  returned: always
  type: bool
  sample: true
rolled_back:
  description: Whether a failed unit made the module put the files back (the module then fails).
  returned: always
  type: bool
  sample: false
"""

import grp
import os
import pwd
import shlex
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import run_bounded
from ansible_collections.longhaul.trainnet.plugins.module_utils.service_bundle import (
    SHOW_PROPERTIES,
    BundleInputError,
    check_input,
    describe_mode,
    needs_daemon_reload,
    parse_mode,
    parse_show,
    plan_directory,
    plan_file,
    plan_unit,
    unit_is_up,
    unit_of_path,
)

LIMIT_SYSTEMCTL = 90
LIMIT_VALIDATE = 60


def resolve_id(name, database, what):
    text = str(name)
    if text.isdigit():
        return int(text)
    try:
        return database.getpwnam(text).pw_uid if database is pwd else database.getgrnam(text).gr_gid
    except KeyError:
        raise BundleInputError('%s: no such %s on this host' % (text, what))


def read_current(path, with_content):
    """None when PATH does not exist, else dict(content, mode, uid, gid, regular, directory)."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    current = {'mode': info.st_mode & 0o7777, 'uid': info.st_uid, 'gid': info.st_gid,
               'regular': os.path.isfile(path) and not os.path.islink(path),
               'directory': os.path.isdir(path) and not os.path.islink(path), 'content': None}
    if with_content and current['regular']:
        with open(path, 'rb') as handle:
            current['content'] = handle.read()
    return current


class ServiceBundle(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.check = module.check_mode
        self.systemctl = None
        self.written = []      # (path, previous current-or-None), in the order they were installed

    def fail(self, msg, **extra):
        self.module.fail_json(msg=msg, **extra)

    def run(self, argv, limit=LIMIT_SYSTEMCTL):
        res = run_bounded(argv, limit)
        if res.timed_out:
            return 124, res.out, '%s did not finish within %d s' % (' '.join(argv), limit)
        return res.rc, res.out, res.err

    # ---- reading and planning -------------------------------------------------------------
    def wanted(self):
        directories, files = [], []
        for entry in self.params['directories']:
            directories.append(dict(entry, mode_value=parse_mode(entry['mode'], entry['path']),
                                    uid=resolve_id(entry['owner'], pwd, 'user'),
                                    gid=resolve_id(entry['group'], grp, 'group')))
        for entry in self.params['files']:
            files.append(dict(entry, mode_value=parse_mode(entry['mode'], entry['path']),
                              data=entry['content'].encode('utf-8'),
                              uid=resolve_id(entry['owner'], pwd, 'user'),
                              gid=resolve_id(entry['group'], grp, 'group')))
        return directories, files

    def show_units(self):
        names = [unit['name'] for unit in self.params['units']]
        if not names:
            return {}
        rc, out, err = self.run([self.systemctl, 'show', '--property=' + ','.join(SHOW_PROPERTIES)] + names)
        if rc != 0:
            self.fail('systemctl show %s exited %d: %s' % (' '.join(names), rc, (err or out).strip()))
        try:
            return parse_show(out, names)
        except ValueError as exc:
            self.fail('cannot read systemctl show: %s' % exc)

    def plan(self, directories, files):
        plan = {'directories': [], 'files': [], 'remove': []}
        for entry in directories:
            current = read_current(entry['path'], with_content=False)
            if current is not None and not current['directory']:
                self.fail('%s: exists and is not a directory' % entry['path'])
            status = plan_directory(entry['mode_value'], entry['uid'], entry['gid'], current)
            plan['directories'].append((entry, current, status))
        for entry in files:
            current = read_current(entry['path'], with_content=True)
            if current is not None and current['directory']:
                self.fail('%s: is a directory, not a file' % entry['path'])
            status, attributes_only = plan_file(entry['data'], entry['mode_value'], entry['uid'], entry['gid'], current)
            plan['files'].append((entry, current, status, attributes_only))
        for path in self.params['remove']:
            current = read_current(path, with_content=True)
            if current is not None and current['directory'] and os.listdir(path):
                self.fail('%s: listed in remove but is a directory that is not empty' % path)
            plan['remove'].append((path, current, 'removed' if current is not None else 'absent'))
        return plan

    # ---- applying -------------------------------------------------------------------------
    def make_directory(self, entry, current):
        # Staging a file may already have made it (as the parent of that file).
        if not os.path.isdir(entry['path']):
            os.makedirs(entry['path'], 0o755)
        os.chown(entry['path'], entry['uid'], entry['gid'])
        os.chmod(entry['path'], entry['mode_value'])

    def stage_file(self, entry, attributes_only):
        """The new file as a temporary file next to the old one, validated; its path."""
        directory = os.path.dirname(entry['path'])
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        if attributes_only:
            return None
        handle, tmp = tempfile.mkstemp(dir=directory, prefix='.%s.' % os.path.basename(entry['path']))
        with os.fdopen(handle, 'wb') as out:
            out.write(entry['data'])
            out.flush()
            os.fsync(out.fileno())
        os.chown(tmp, entry['uid'], entry['gid'])
        os.chmod(tmp, entry['mode_value'])
        if entry.get('validate'):
            argv = [part.replace('%s', tmp) for part in shlex.split(entry['validate'])]
            res = run_bounded(argv, LIMIT_VALIDATE)
            if res.rc != 0:
                os.unlink(tmp)
                raise BundleInputError('%s: the new content does not pass "%s" (exit %d): %s'
                                       % (entry['path'], entry['validate'], res.rc, (res.err or res.out).strip()[-2000:]))
        return tmp

    def restore(self):
        """Put every path this run installed or removed back as it was, last first."""
        for path, previous in reversed(self.written):
            try:
                if previous is None:
                    if os.path.isdir(path) and not os.path.islink(path):
                        os.rmdir(path)
                    elif os.path.lexists(path):
                        os.unlink(path)
                elif previous['directory']:
                    if not os.path.isdir(path):
                        os.mkdir(path, previous['mode'])
                    os.chown(path, previous['uid'], previous['gid'])
                    os.chmod(path, previous['mode'])
                else:
                    handle, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix='.restore.')
                    with os.fdopen(handle, 'wb') as out:
                        out.write(previous['content'] or b'')
                    os.chown(tmp, previous['uid'], previous['gid'])
                    os.chmod(tmp, previous['mode'])
                    os.replace(tmp, path)
            except OSError as exc:
                self.module.warn('rollback of %s failed: %s' % (path, exc))

    def systemctl_action(self, action, name=None):
        rc, out, err = self.run([self.systemctl, action] + ([name] if name else []))
        return rc, (err or out).strip()

    def journal(self, name):
        journalctl = self.module.get_bin_path('journalctl')
        if not journalctl:
            return ''
        res = run_bounded([journalctl, '--no-pager', '-n', '20', '-u', name], 20)
        return res.out.strip()

    def wait_up(self, names):
        """{name: props} of the units among NAMES not up by the deadline. The first look is a
        second after the actions, so a daemon that dies right after starting is caught."""
        deadline = time.time() + self.params['verify_timeout']
        pending = list(names)
        while pending:
            time.sleep(1 if pending == list(names) else 0.5)
            rc, out, _err = self.run([self.systemctl, 'show', '--property=' + ','.join(SHOW_PROPERTIES)] + pending)
            try:
                props = parse_show(out, pending) if rc == 0 else {}
            except ValueError:
                props = {}
            down = dict((name, props.get(name, {})) for name in pending if not unit_is_up(props.get(name, {})))
            if not down or time.time() >= deadline:
                return down
            pending = list(down)
        return {}

    def execute(self):
        try:
            check_input(self.params['directories'], self.params['files'], self.params['remove'], self.params['units'])
            directories, files = self.wanted()
        except BundleInputError as exc:
            self.fail(str(exc))
        plan = self.plan(directories, files)
        statuses = {}
        changed_paths = []
        diffs = []
        for entry, current, status in plan['directories']:
            statuses[entry['path']] = status
            if status != 'unchanged':
                changed_paths.append(entry['path'])
                diffs.append({'before_header': entry['path'], 'after_header': entry['path'],
                              'before': self.attributes_text(current, directory=True),
                              'after': self.attributes_text(entry, directory=True)})
        for entry, current, status, _attributes_only in plan['files']:
            statuses[entry['path']] = status
            if status != 'unchanged':
                changed_paths.append(entry['path'])
                before = '' if current is None or current['content'] is None else current['content'].decode('utf-8', 'replace')
                diffs.append({'before_header': '%s (%s)' % (entry['path'], self.attributes_text(current)),
                              'after_header': '%s (%s)' % (entry['path'], self.attributes_text(entry)),
                              'before': before, 'after': entry['content']})
        for path, current, status in plan['remove']:
            statuses[path] = status
            if status == 'removed':
                changed_paths.append(path)
                before = current['content'].decode('utf-8', 'replace') if current.get('content') else ''
                diffs.append({'before_header': path, 'after_header': '%s (removed)' % path, 'before': before, 'after': ''})
        if self.params['units'] or any(unit_of_path(path) for path in changed_paths):
            self.systemctl = self.module.get_bin_path('systemctl', required=True)
        unit_props = self.show_units()
        reload_needed = needs_daemon_reload(changed_paths, unit_props)
        unit_plans = [(unit, plan_unit(unit, unit_props.get(unit['name'], {}), changed_paths))
                      for unit in self.params['units']]
        units_result = dict((unit['name'], {'before': dict((key, unit_props.get(unit['name'], {}).get(key))
                                                           for key in ('ActiveState', 'UnitFileState')),
                                            'actions': actions}) for unit, actions in unit_plans)
        unit_lines = ['%s: %s' % (unit['name'], ', '.join(actions)) for unit, actions in unit_plans if actions]
        if unit_lines:
            diffs.append({'before_header': 'units', 'after_header': 'units', 'before': '',
                          'after': '\n'.join(unit_lines) + '\n'})
        changed = bool(changed_paths) or reload_needed or bool(unit_lines)
        result = {'changed': changed, 'changed_paths': changed_paths, 'files': statuses, 'units': units_result,
                  'daemon_reload': reload_needed, 'rolled_back': False}
        if self.module._diff:
            result['diff'] = diffs
        if self.check or not changed:
            return result
        self.apply(plan, unit_plans, reload_needed, result)
        return result

    def apply(self, plan, unit_plans, reload_needed, result):
        # Every new file is staged and validated before anything changes.
        staged = []
        try:
            for entry, current, status, attributes_only in plan['files']:
                if status != 'unchanged':
                    staged.append((entry, current, self.stage_file(entry, attributes_only)))
        except (OSError, BundleInputError) as exc:
            # Nothing is installed yet: the files staged before the one that failed go too.
            for _entry, _current, tmp in staged:
                if tmp:
                    os.unlink(tmp)
            self.fail(str(exc) if isinstance(exc, BundleInputError) else 'cannot stage the files: %s' % exc, **result)
        # Stopping and disabling come first: a unit whose file this run removes is still known.
        failure = self.run_actions(unit_plans, ('stop', 'disable'), [])
        if failure:
            for _entry, _current, tmp in staged:
                if tmp:
                    os.unlink(tmp)
            self.fail(failure[0], **result)
        try:
            for entry, current, status in plan['directories']:
                if status != 'unchanged':
                    self.make_directory(entry, current)
            for entry, current, tmp in staged:
                self.written.append((entry['path'], current))
                if tmp is None:
                    os.chown(entry['path'], entry['uid'], entry['gid'])
                    os.chmod(entry['path'], entry['mode_value'])
                else:
                    os.replace(tmp, entry['path'])
            for path, current, status in plan['remove']:
                if status == 'removed':
                    self.written.append((path, current))
                    if current['directory']:
                        os.rmdir(path)
                    else:
                        os.unlink(path)
        except OSError as exc:
            self.restore()
            self.fail('cannot install the files (put back as they were): %s' % exc, **result)

        touched = []
        failure = None
        if reload_needed:
            rc, text = self.systemctl_action('daemon-reload')
            if rc != 0:
                failure = ('systemctl daemon-reload exited %d: %s' % (rc, text), None)
        if not failure:
            failure = self.run_actions(unit_plans, ('enable', 'start', 'restart'), touched)
        started = [name for name, action in touched if action != 'enable']
        if not failure and started:
            down = self.wait_up(started)
            if down:
                name = sorted(down)[0]
                failure = ('%s is not up %d s after this run started it: ActiveState=%s SubState=%s Result=%s'
                           % (name, self.params['verify_timeout'], down[name].get('ActiveState'),
                              down[name].get('SubState'), down[name].get('Result')), name)
        if not failure:
            return
        msg, failed_unit = failure
        if failed_unit:
            result['journal'] = self.journal(failed_unit)
        if self.params['rollback']:
            # Units this run started or enabled are stopped or disabled while their files still
            # exist; then the files go back and the units it restarted restart on the old ones.
            for name, action in reversed(touched):
                if action in ('start', 'enable'):
                    self.systemctl_action('stop' if action == 'start' else 'disable', name)
            self.restore()
            result['rolled_back'] = True
            self.systemctl_action('daemon-reload')
            for name, action in reversed(touched):
                if action == 'restart':
                    self.systemctl_action('restart', name)
            msg += ('; the files of this run were put back and the units restarted on them'
                    ' (or stopped when this run started them)')
        self.fail(msg, **result)

    def run_actions(self, unit_plans, kinds, touched):
        """Run the planned actions of KINDS unit by unit; (message, unit) of the first failure."""
        for unit, actions in unit_plans:
            for action in actions:
                if action not in kinds:
                    continue
                rc, text = self.systemctl_action(action, unit['name'])
                if action in ('start', 'restart', 'enable'):
                    touched.append((unit['name'], action))
                if rc != 0:
                    return ('systemctl %s %s exited %d: %s' % (action, unit['name'], rc, text), unit['name'])
        return None

    @staticmethod
    def attributes_text(state, directory=False):
        if state is None:
            return 'absent'
        mode = state.get('mode_value', state.get('mode'))
        if isinstance(mode, str):
            mode = parse_mode(mode, 'mode')
        owner = '%s:%s' % (state.get('uid'), state.get('gid'))
        text = 'mode %s, owner %s' % (describe_mode(mode), owner)
        return text + '\n' if directory else text


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directories=dict(type='list', elements='dict', default=[], options=dict(
                path=dict(type='path', required=True),
                mode=dict(type='str', required=True),
                owner=dict(type='str', default='root'),
                group=dict(type='str', default='root'),
            )),
            files=dict(type='list', elements='dict', default=[], options=dict(
                path=dict(type='path', required=True),
                content=dict(type='str', required=True),
                mode=dict(type='str', required=True),
                owner=dict(type='str', default='root'),
                group=dict(type='str', default='root'),
                validate=dict(type='str'),
            )),
            remove=dict(type='list', elements='path', default=[]),
            units=dict(type='list', elements='dict', default=[], options=dict(
                name=dict(type='str', required=True),
                enabled=dict(type='bool', default=True),
                state=dict(type='str', choices=['started', 'stopped', 'present'], default='started'),
                restart_on=dict(type='list', elements='path', default=[]),
                restart=dict(type='bool', default=False),
            )),
            rollback=dict(type='bool', default=True),
            verify_timeout=dict(type='int', default=15),
        ),
        supports_check_mode=True,
    )
    if not 1 <= module.params['verify_timeout'] <= 120:
        module.fail_json(msg='verify_timeout must be 1 to 120 seconds, not %d' % module.params['verify_timeout'])
    module.exit_json(**ServiceBundle(module).execute())


if __name__ == '__main__':
    main()
