# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure planning logic of the service_bundle module: what a role's set of directories, files and
systemd units needs on this host, given what is there now. No I/O here: the module reads the
host, these functions decide, the module acts (so check mode and a real run share one plan)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import posixpath

# Directories systemd loads unit files (and their drop-in directories) from, system instance.
UNIT_DIRS = ('/etc/systemd/system', '/run/systemd/system', '/usr/local/lib/systemd/system',
             '/usr/lib/systemd/system', '/lib/systemd/system')
UNIT_SUFFIXES = ('.service', '.socket', '.timer', '.path', '.mount', '.target', '.slice')
# UnitFileState values that need no `systemctl enable` (static units cannot be enabled at all).
ENABLED_STATES = ('enabled', 'enabled-runtime', 'static', 'generated', 'alias', 'indirect', 'linked',
                  'transient')
UNIT_STATES = ('started', 'stopped', 'present')
SHOW_PROPERTIES = ('Id', 'LoadState', 'ActiveState', 'SubState', 'Result', 'Type', 'UnitFileState',
                   'NeedDaemonReload')


class BundleInputError(ValueError):
    """The input describes something that cannot be applied; raised before anything is read."""


def parse_mode(text, what):
    """An octal mode string ('0644', '644', '0o644') as an int, or BundleInputError naming WHAT."""
    value = str(text).strip().lower()
    if value.startswith('0o'):
        value = value[2:]
    if not value or len(value) > 4 or any(char not in '01234567' for char in value):
        raise BundleInputError("%s: mode must be an octal string such as '0644', not %r" % (what, text))
    return int(value, 8)


def unit_of_path(path):
    """The unit a unit file or drop-in configures (`/etc/systemd/system/x.service` and
    `/etc/systemd/system/x.service.d/10-a.conf` both give x.service), else None."""
    directory, name = posixpath.split(posixpath.normpath(path))
    if directory in UNIT_DIRS and name.endswith(UNIT_SUFFIXES):
        return name
    parent, dropin_dir = posixpath.split(directory)
    if parent in UNIT_DIRS and dropin_dir.endswith('.d') and name.endswith('.conf'):
        unit = dropin_dir[:-2]
        return unit if unit.endswith(UNIT_SUFFIXES) else None
    return None


def check_input(directories, files, remove, units):
    """Cross-field rules of one bundle; BundleInputError names the first entry that breaks one."""
    seen = {}
    for kind, entries in (('directories', directories), ('files', files)):
        for index, entry in enumerate(entries):
            path = entry['path']
            what = '%s[%d] (%s)' % (kind, index, path)
            if not posixpath.isabs(path) or posixpath.normpath(path) != path or path == '/':
                raise BundleInputError('%s: path must be absolute and normalised, not the root' % what)
            if path in seen:
                raise BundleInputError('%s: path is also %s' % (what, seen[path]))
            seen[path] = what
            parse_mode(entry['mode'], what)
            if kind == 'files' and entry.get('validate') and '%s' not in entry['validate']:
                raise BundleInputError('%s: validate must contain %%s (the file to check)' % what)
    for index, path in enumerate(remove):
        if not posixpath.isabs(path) or posixpath.normpath(path) != path:
            raise BundleInputError('remove[%d] (%s): path must be absolute and normalised' % (index, path))
        if path in seen:
            raise BundleInputError('remove[%d] (%s): path is also %s' % (index, path, seen[path]))
    names = set()
    for index, unit in enumerate(units):
        name = unit['name']
        what = 'units[%d] (%s)' % (index, name)
        if '/' in name or not name.endswith(UNIT_SUFFIXES):
            raise BundleInputError('%s: name must be a unit name ending in one of %s'
                                   % (what, ', '.join(UNIT_SUFFIXES)))
        if name in names:
            raise BundleInputError('%s: unit listed twice' % what)
        names.add(name)
        if unit['state'] not in UNIT_STATES:
            raise BundleInputError('%s: state must be one of %s, not %r' % (what, ', '.join(UNIT_STATES), unit['state']))
        for path in unit.get('restart_on') or []:
            if path not in seen or not seen[path].startswith('files'):
                raise BundleInputError('%s: restart_on path %s is not one of the bundle files' % (what, path))
        if unit['state'] != 'started' and (unit.get('restart_on') or unit.get('restart')):
            raise BundleInputError('%s: restart_on and restart need state started' % what)


def plan_file(wanted_content, wanted_mode, wanted_uid, wanted_gid, current):
    """What writing one file means. CURRENT is None (absent) or dict(content=bytes, mode, uid, gid,
    regular). Returns (status, attributes_only): status 'created', 'updated' or 'unchanged';
    attributes_only when only mode or owner differ (no new content, nothing to validate)."""
    if current is None or not current.get('regular', True):
        return 'created' if current is None else 'updated', False
    if current['content'] != wanted_content:
        return 'updated', False
    if (current['mode'], current['uid'], current['gid']) != (wanted_mode, wanted_uid, wanted_gid):
        return 'updated', True
    return 'unchanged', False


def plan_directory(wanted_mode, wanted_uid, wanted_gid, current):
    """'created', 'updated' (mode or owner) or 'unchanged' for one directory; CURRENT as in plan_file
    (content ignored), with regular=False meaning the path is a directory."""
    if current is None:
        return 'created'
    if (current['mode'], current['uid'], current['gid']) != (wanted_mode, wanted_uid, wanted_gid):
        return 'updated'
    return 'unchanged'


def parse_show(text, names):
    """`systemctl show --property=... NAME...` output (blocks in the order of NAMES, separated by a
    blank line) as {name: {property: value}}."""
    blocks, block = [], {}
    for line in text.splitlines():
        if not line.strip():
            if block:
                blocks.append(block)
                block = {}
            continue
        key, sep, value = line.partition('=')
        if sep:
            block[key] = value
    if block:
        blocks.append(block)
    if len(blocks) != len(names):
        raise ValueError('systemctl show gave %d blocks for %d units' % (len(blocks), len(names)))
    return dict(zip(names, blocks))


def is_running(props):
    """Whether a unit counts as running: active, reloading, or activating (starting)."""
    return props.get('ActiveState') in ('active', 'reloading', 'activating')


def plan_unit(unit, props, changed_paths):
    """The systemctl actions one unit needs, in order: a subset of enable, disable, start, restart,
    stop. PROPS from parse_show (a unit not loaded yet, whose file this run writes, has
    LoadState=not-found); CHANGED_PATHS the bundle files this run writes, removes or would."""
    actions = []
    file_state = props.get('UnitFileState', '')
    if unit['enabled'] is True and file_state not in ENABLED_STATES:
        actions.append('enable')
    elif unit['enabled'] is False and file_state in ('enabled', 'enabled-runtime', 'linked'):
        actions.append('disable')
    if unit['state'] == 'started':
        own = [path for path in changed_paths if unit_of_path(path) == unit['name']]
        triggers = own + [path for path in unit.get('restart_on') or [] if path in changed_paths]
        if not is_running(props):
            actions.append('start')
        elif triggers or unit.get('restart'):
            actions.append('restart')
    elif unit['state'] == 'stopped' and is_running(props):
        actions.append('stop')
    return actions


def unit_is_up(props):
    """Verification after starting: active (a oneshot unit with RemainAfterExit stays active), or a
    oneshot unit that ran to success."""
    if props.get('ActiveState') == 'active':
        return True
    return props.get('Type') == 'oneshot' and props.get('ActiveState') == 'inactive' and props.get('Result') == 'success'


def needs_daemon_reload(changed_paths, unit_props):
    """Whether systemd must reload: a unit file or drop-in was written or removed, or systemd
    itself says a listed unit's files changed on disk since it loaded them."""
    if any(unit_of_path(path) for path in changed_paths):
        return True
    return any(props.get('NeedDaemonReload') == 'yes' for props in unit_props.values())


def describe_mode(mode):
    return '%04o' % mode if mode is not None else None
