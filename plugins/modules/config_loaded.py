#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: config_loaded
short_description: Make a service run the configuration files it has on disk (a reload that is never lost)
version_added: 0.5.0
description:
  - Reloads a service when its configuration files differ from the ones it last loaded, and
    remembers what it loaded. It replaces a handler notified by the task that writes the files.
    A handler is lost when a later task fails (the play stops, the next run finds the file
    unchanged and never reloads); this module is not, because it compares the files with a
    record on the host instead of with the previous run.
  - It hashes O(paths) (sha256 over each path and its content, in the given order) and compares
    the digest with the one recorded the last time a reload succeeded, in the file
    C(NAME.sha256) of O(state_dir) (NAME is O(name)). When they differ, or there is no record, it runs O(argv)
    (no shell, C(LANG=C), at most O(timeout) seconds) and checks that it exits 0 and, with
    O(expect), that its standard output matches. Only then is the digest recorded (a temporary
    file in O(state_dir), mode C(0600), renamed over the record). A reload that fails, or prints
    something else than O(expect), fails the task with the command's output and records nothing,
    so the next run tries again.
  - With O(loaded_by_start=true) (the service was started or restarted in this run, after the
    files were written) the digest is recorded without a reload; the service read these files
    when it started.
  - 'What it reads: O(paths) and the record. What it writes, outside check mode only: the record
    (and O(state_dir), created C(0700) when missing). What it runs, outside check mode only: O(argv),
    when the digest differs from the record and O(loaded_by_start) is false.'
  - 'Check mode runs nothing and writes nothing; it reports C(changed) when a real run would reload
    or record. The files a skipped write left as they were are covered by O(files_changed); a file
    of O(paths) that does not exist counts as changed in check mode (the task that writes it did
    not run); outside check mode a missing file fails the module before anything runs.'
author:
  - longhaul.trainnet maintainers (@longhaul)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
    details:
      - Shows the recorded digest (before) and the files' digest (after).
  platform:
    platforms: posix
options:
  name:
    description:
      - Names the record, for example the service, C(bird) or C(squid). Letters, digits, C(_),
        C(.), C(@) and C(-), at most 128 characters.
      - Two tasks with the same O(name) share one record; give each service its own.
    type: str
    required: true
  paths:
    description:
      - The configuration files the service reads, absolute paths. Include every file that it
        reads and that a play writes (an C(include)d file too); leave out files that another
        program changes and reloads the service for itself.
      - The order is part of the digest.
    type: list
    elements: path
    required: true
  argv:
    description:
      - The reload command and its arguments, run without a shell, for example
        V([birdc, configure]) or V([systemctl, reload, squid.service]).
      - A command name without C(/) is looked up in the C(PATH) and the C(sbin) directories.
    type: list
    elements: str
    required: true
  expect:
    description:
      - A Python regular expression the command's standard output must match (searched, C(^) and
        C($) match at each line), for a command that exits 0 when it did not reload; C(birdc configure)
        prints its error and exits 0.
      - Omit to judge by the exit status only.
    type: str
  loaded_by_start:
    description:
      - The service started or restarted in this run after the files were written, so it runs
        them already; record the digest without reloading. Pass the start task's result, for
        example V("{{ started is changed }}").
      - Ignored when the record already holds the files' digest.
    type: bool
    default: false
  files_changed:
    description:
      - Whether a task of this run changed the files, for example V("{{ rendered is changed }}")
        of the template task. Used in check mode only, where that task wrote nothing and the files
        still hold their old content; V(true) then predicts a reload (a record with
        O(loaded_by_start=true)) even when the old content is what the service runs.
      - A real run judges by the files' digest alone and ignores it.
    type: bool
    default: false
  state_dir:
    description:
      - The directory of the records, created with mode C(0700) when missing.
    type: path
    default: /var/lib/trainnet/config-loaded
  timeout:
    description:
      - Seconds O(argv) may take before it is stopped (SIGTERM, then SIGKILL) and the task fails.
    type: int
    default: 60
notes:
  - Needs root (or write access to O(state_dir) and the right to reload the service).
  - Uses only the Python standard library on the managed host.
  - A service that is reloaded by other means (by hand, or by a program of its own) with the same
    files needs no reload; one reloaded with other files is reloaded again when the record differs
    from the files, which is what makes the running configuration match them.
  - A host without a record (the first run, or a record removed) gets one reload, unless
    O(loaded_by_start=true).
seealso:
  - module: ansible.builtin.systemd_service
  - name: Ansible handlers
    description: Why a notified handler is lost when the play stops first.
    link: https://docs.ansible.com/ansible/latest/playbook_guide/playbooks_handlers.html
"""

EXAMPLES = r"""
- name: Render bird.conf, checked by BIRD first
  ansible.builtin.template:
    src: bird.conf.j2
    dest: /etc/bird/bird.conf
    mode: "0640"
    validate: bird -p -c %s
  register: bird_conf

- name: Run BIRD now and at boot
  ansible.builtin.systemd_service:
    name: bird.service
    enabled: true
    state: started
  register: bird_started

- name: BIRD runs bird.conf (birdc configure when the file changed since its last reload)
  longhaul.trainnet.config_loaded:
    name: bird
    paths: [/etc/bird/bird.conf]
    argv: [birdc, configure]
    expect: '^Reconfigur(ed|ation (already )?in progress)'
    loaded_by_start: "{{ bird_started is changed }}"
    files_changed: "{{ bird_conf is changed }}"   # check mode: predict the reload of the new file

- name: Squid runs its main file and the included peers
  longhaul.trainnet.config_loaded:
    name: squid
    paths: [/etc/squid/squid.conf, /etc/squid/peers.conf]
    argv: [systemctl, reload, squid.service]

- name: Is a reload pending? Asked in check mode, which runs and writes nothing
  longhaul.trainnet.config_loaded:
    name: squid
    paths: [/etc/squid/squid.conf, /etc/squid/peers.conf]
    argv: [systemctl, reload, squid.service]
  check_mode: true
  changed_when: false
  register: squid_pending

- name: Check the new upstreams before Squid takes them
  ansible.builtin.command:
    argv: [/usr/local/libexec/check-upstreams]
  changed_when: false
  when: squid_pending.action != 'none'
"""

RETURN = r"""
name:
  description: The record's name (O(name)).
  returned: always
  type: str
  sample: bird
state_file:
  description: The record file.
  returned: always
  type: str
  sample: /var/lib/trainnet/config-loaded/bird.sha256
checksum:
  description:
    - HMAC-SHA256 of O(paths) now (paths and contents, in order), keyed by a random per-host key in
      O(state_dir) (C(.key), 0600), so that a digest of files holding credentials reveals nothing.
  returned: when the files could be read
  type: str
  sample: 9f2c4e0d6f0b5d1f3b8a4c6e2d7a1b0c9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b
previous_checksum:
  description: The digest recorded before this run; null when there was no record.
  returned: when the files could be read
  type: str
  sample: null
action:
  description:
    - What was (in check mode, would be) done. V(none) the service runs these files already;
      V(record) it started with them in this run, recorded without a reload; V(reload) reloaded
      and recorded.
  returned: when the files could be read
  type: str
  choices: [none, record, reload]
  sample: reload
reloaded:
  description: Whether O(argv) ran and succeeded (in check mode, would run).
  returned: always
  type: bool
  sample: true
recorded:
  description: Whether the digest was (in check mode, would be) recorded.
  returned: always
  type: bool
  sample: true
missing:
  description: Files of O(paths) that do not exist (check mode only; a real run fails on them).
  returned: always
  type: list
  elements: str
  sample: []
cmd:
  description: The reload command; once it ran, with its first word as found on the host.
  returned: always
  type: list
  elements: str
  sample: [/usr/sbin/birdc, configure]
rc:
  description: Exit status of the command (124 when O(timeout) stopped it).
  returned: when the command ran
  type: int
  sample: 0
stdout:
  description: Standard output of the command.
  returned: when the command ran
  type: str
  sample: "Reading configuration from /etc/bird/bird.conf\nReconfigured\n"
stderr:
  description: Standard error of the command.
  returned: when the command ran
  type: str
  sample: ""
"""

import os
import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import run_bounded
from ansible_collections.longhaul.trainnet.plugins.module_utils.config_loaded import (
    ACTION_NONE, ACTION_RELOAD, build_diff, config_digest, ensure_state_dir, load_key, plan,
    read_record, record_path, reload_problem, validate_name, write_record,
)
from ansible_collections.longhaul.trainnet.plugins.module_utils.errors import describe_os_error


def input_problems(params):
    """Every problem of the arguments, as one list (nothing has been read yet)."""
    problems = []
    name_problem = validate_name(params['name'])
    if name_problem:
        problems.append(name_problem)
    if not params['paths']:
        problems.append('paths must name at least one file')
    relative = [p for p in params['paths'] if not os.path.isabs(p)]
    if relative:
        problems.append('paths must be absolute: %s' % ', '.join(relative))
    if not params['argv'] or not params['argv'][0]:
        problems.append('argv must hold the reload command')
    if params['timeout'] < 1:
        problems.append('timeout must be at least 1 second, not %d' % params['timeout'])
    if params['expect'] is not None:
        try:
            re.compile(params['expect'])
        except re.error as exc:
            problems.append('expect is not a regular expression: %s' % exc)
    return problems


def resolve(module, argv):
    """argv with its first word as a path (PATH and the sbin directories), when it can be found."""
    if '/' in argv[0]:
        return list(argv)
    found = module.get_bin_path(argv[0])
    return [found or argv[0]] + list(argv[1:])


def run(module):
    p = module.params
    result = dict(changed=False, name=p['name'], reloaded=False, recorded=False, missing=[],
                  cmd=list(p['argv'] or []), state_file=record_path(p['state_dir'], p['name']))
    problems = input_problems(p)
    if problems:
        module.fail_json(msg='config_loaded: ' + '; '.join(problems), **result)
    state_file = result['state_file']

    try:
        # Keyed by a host secret: the digest reaches results and diffs, the files may hold credentials.
        digest, missing = config_digest(p['paths'], load_key(p['state_dir'], create=not module.check_mode))
    except (IOError, OSError) as exc:
        module.fail_json(msg='config_loaded %s: cannot read %s: %s'
                         % (p['name'], exc.filename, describe_os_error(exc)), **result)
    result['missing'] = missing
    if missing and not module.check_mode:
        module.fail_json(msg='config_loaded %s: %s does not exist; nothing was reloaded'
                         % (p['name'], ', '.join(missing)), **result)
    try:
        recorded = read_record(state_file)
    except (IOError, OSError) as exc:
        module.fail_json(msg='config_loaded %s: cannot read the record %s: %s'
                         % (p['name'], state_file, describe_os_error(exc)), **result)

    # In check mode a task that would write the files did not: they still hold the old content.
    rewritten = module.check_mode and p['files_changed']
    action = plan(digest, recorded, p['loaded_by_start'], rewritten)
    result.update(checksum=digest, previous_checksum=recorded, action=action,
                  changed=action != ACTION_NONE, recorded=action != ACTION_NONE,
                  reloaded=action == ACTION_RELOAD)
    if module._diff:
        result['diff'] = build_diff(p['name'], state_file, recorded, digest, p['paths'], rewritten)
    if action == ACTION_NONE:
        result['msg'] = '%s runs these files already' % p['name']
        module.exit_json(**result)
    if module.check_mode:
        result['msg'] = ('%s would be reloaded' % p['name'] if action == ACTION_RELOAD
                         else '%s started with these files: they would be recorded' % p['name'])
        module.exit_json(**result)

    if action == ACTION_RELOAD:
        argv = resolve(module, p['argv'])
        result['cmd'] = argv
        res = run_bounded(argv, p['timeout'])
        result.update(rc=res.rc, stdout=res.out, stderr=res.err)
        expect = re.compile(p['expect'], re.MULTILINE) if p['expect'] is not None else None
        problem = reload_problem(res.rc, res.out, res.err, res.timed_out, expect, p['timeout'])
        if problem:
            # The command ran and may have done part of its work; the record stays as it was, so
            # the next run reloads again.
            result.update(reloaded=False, recorded=False)
            module.fail_json(msg='config_loaded %s: %s %s; the files are not recorded as loaded'
                             % (p['name'], ' '.join(argv), problem), **result)

    try:
        ensure_state_dir(p['state_dir'])
        write_record(state_file, digest)
    except (IOError, OSError) as exc:
        result['recorded'] = False
        module.fail_json(msg='config_loaded %s: %s, but the record %s cannot be written: %s'
                         % (p['name'], 'reloaded' if action == ACTION_RELOAD else 'started with these files',
                            state_file, describe_os_error(exc)), **result)
    result['msg'] = ('%s reloaded' % p['name'] if action == ACTION_RELOAD
                     else '%s started with these files: recorded without a reload' % p['name'])
    module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type='str', required=True),
            paths=dict(type='list', elements='path', required=True),
            argv=dict(type='list', elements='str', required=True),
            expect=dict(type='str'),
            loaded_by_start=dict(type='bool', default=False),
            files_changed=dict(type='bool', default=False),
            state_dir=dict(type='path', default='/var/lib/trainnet/config-loaded'),
            timeout=dict(type='int', default=60),
        ),
        supports_check_mode=True,
    )
    run(module)


if __name__ == '__main__':
    main()
