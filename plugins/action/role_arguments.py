# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Check a role's variables against its argument spec from any task file, with a short message.

ansible-core validates a role's variables only when the role runs through an entry point that has
a spec (``main``): ``include_role`` with ``tasks_from: preflight`` checks nothing, and a failed
check prints the whole spec. This action reads the spec of the role's entry point and validates
each variable with ansible-core's own ``ArgumentSpecValidator`` (the same type conversions, choices
and required checks as the role's implicit validation task), one variable at a time so that every
error names the variable it belongs to; the result holds one line per error and not the spec.
With ``prefix`` it also refuses the variables with the role's prefix that no spec knows: Ansible
ignores a variable nobody reads, so a misspelt input would change nothing and say nothing.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.errors import (
    ArgumentTypeError,
    ArgumentValueError,
    ElementError,
    MutuallyExclusiveError,
    RequiredByError,
    RequiredError,
    RequiredIfError,
    RequiredOneOfError,
    RequiredTogetherError,
)
from ansible.plugins.action import ActionBase
from ansible_collections.longhaul.trainnet.plugins.filter.role_inputs import unknown_variables

# Where a role keeps its argument specs, in ansible-core's order: a file of its own, else meta/main.
SPEC_FILES = ('argument_specs.yml', 'argument_specs.yaml', 'argument_specs.json', 'argument_specs')
META_FILES = ('main.yml', 'main.yaml', 'main.json', 'main')

# Keys of an option's spec that are about its suboptions.
SUBOPTION_KEYS = ('options', 'apply_defaults', 'mutually_exclusive', 'required_together',
                  'required_one_of', 'required_if', 'required_by')
CROSS_ERRORS = (MutuallyExclusiveError, RequiredByError, RequiredIfError, RequiredOneOfError, RequiredTogetherError)

VALUE_WIDTH = 60
MASK = '********'


def _plain(value):
    """The value with Ansible's string, list and dict subclasses turned into the built-in types."""
    if isinstance(value, bytes):
        return to_text(value, errors='surrogate_or_strict')
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return dict((_plain(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    return value


def show(value):
    """A short one-line rendering of a value: 'text', 8, ['a', 'b'], cut at VALUE_WIDTH."""
    text = repr(_plain(value)).replace('\n', ' ')
    return text if len(text) <= VALUE_WIDTH else text[:VALUE_WIDTH - 3] + '...'


def has_no_log(spec):
    """Whether the option or any of its suboptions is no_log."""
    if spec.get('no_log'):
        return True
    return any(has_no_log(sub or {}) for sub in (spec.get('options') or {}).values())


def describe(path, spec, value, error):
    """One line for an error of the option at path itself (its type, elements, choices, presence)."""
    shown = '%s = %s' % (path, MASK if has_no_log(spec) else show(value))
    wanted = spec.get('type') or 'str'
    if isinstance(error, RequiredError):
        return '%s is required and not set' % path
    if isinstance(error, ElementError):
        return '%s is not a list of %s' % (shown, spec.get('elements'))
    if isinstance(error, ArgumentTypeError):
        return '%s is not of type %s' % (shown, wanted)
    if isinstance(error, ArgumentValueError) and spec.get('choices'):
        allowed = ', '.join(to_text(c) for c in spec['choices'])
        if wanted == 'list':
            return '%s has items that are not among: %s' % (shown, allowed)
        return '%s is not one of: %s' % (shown, allowed)
    return '%s: %s' % (path, to_text(error))


def describe_all(path, spec, value, error):
    """Lines for an error of the option at path: an item of a list that has the wrong type is named by its index."""
    if isinstance(error, ElementError) and isinstance(value, (list, tuple)):
        item_spec = {'type': spec.get('elements'), 'no_log': has_no_log(spec)}
        lines = []
        for index, item in enumerate(value):
            result = ArgumentSpecValidator({'item': {'type': spec.get('elements')}}).validate({'item': item})
            lines.extend(describe('%s[%d]' % (path, index), item_spec, item, e) for e in result.errors.errors)
        if lines:
            return lines
    return [describe(path, spec, value, error)]


def check_option(path, spec, present, value):
    """Error lines of one option (path names it: data_plane_links[1].rtt_ms); empty when it is valid.

    ansible-core's validator checks the option alone, without its suboptions, so that every error
    belongs to the option at path; a list or dict with suboptions is then checked item by item.
    """
    name = path.rsplit('.', 1)[-1]
    alone = dict((k, v) for k, v in spec.items() if k not in SUBOPTION_KEYS)
    result = ArgumentSpecValidator({name: alone}).validate({name: value} if present else {})
    if result.errors.errors:
        return [line for error in result.errors.errors for line in describe_all(path, spec, value, error)]
    if not spec.get('options'):
        return []
    converted = result.validated_parameters.get(name)
    if converted is None and spec.get('apply_defaults') and spec.get('type') == 'dict':
        converted = {}
    if converted is None:
        return []
    if isinstance(converted, list):
        items = [('%s[%d]' % (path, index), item) for index, item in enumerate(converted)]
    else:
        items = [(path, converted)]
    lines = []
    for where, item in items:
        lines.extend(check_suboptions(where, spec, item))
    return lines


def check_suboptions(path, spec, item):
    """Error lines of one dict (a dict option or one item of a list of dicts) against spec['options']."""
    options = spec['options']
    lines = []
    known = set(options)
    for sub in options.values():
        known.update((sub or {}).get('aliases') or [])
    unknown = sorted(to_text(k) for k in set(item) - known)
    if unknown:
        lines.append('%s has unknown key(s) %s; known: %s' % (path, ', '.join(unknown), ', '.join(sorted(options))))
    for name in sorted(options):
        sub = options[name] or {}
        key = next((k for k in [name] + list(sub.get('aliases') or []) if k in item), None)
        lines.extend(check_option('%s.%s' % (path, name), sub, key is not None, item.get(key)))
    # Rules between the suboptions (mutually_exclusive, required_if...), from ansible-core's validator.
    cross = ArgumentSpecValidator(
        options, mutually_exclusive=spec.get('mutually_exclusive'), required_together=spec.get('required_together'),
        required_one_of=spec.get('required_one_of'), required_if=spec.get('required_if'),
        required_by=spec.get('required_by')).validate(dict(item))
    hidden = cross._no_log_values
    lines.extend('%s: %s' % (path, remove_values(to_text(error), hidden))
                 for error in cross.errors.errors if isinstance(error, CROSS_ERRORS))
    return lines


class ActionModule(ActionBase):
    """Validate the calling role's variables against its argument spec; fail with one line per error."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def _role_and_path(self, role_path):
        """The role name used in messages and the role's directory."""
        role = getattr(self._task, '_role', None)
        own_path = getattr(role, '_role_path', None)
        if not role_path:
            if not own_path:
                raise AnsibleActionFail('role_arguments: the task is not in a role; set role_path')
            role_path = own_path
        if own_path and os.path.realpath(own_path) == os.path.realpath(role_path):
            return role.get_name(), role_path
        return os.path.basename(os.path.normpath(role_path)), role_path

    def _load_options(self, role_path, entry_point):
        """argument_specs[entry_point].options of the role, from the file ansible-core reads."""
        paths = [os.path.join(role_path, 'meta', name) for name in SPEC_FILES + META_FILES]
        path = next((p for p in paths if os.path.isfile(p)), None)
        if path is None:
            raise AnsibleActionFail('%s has no meta/argument_specs.yml' % role_path)
        specs = (self._loader.load_from_file(path) or {}).get('argument_specs')
        if not isinstance(specs, dict) or not isinstance(specs.get(entry_point), dict):
            raise AnsibleActionFail('%s has no argument spec for the entry point %s' % (path, entry_point))
        options = specs[entry_point].get('options') or {}
        if not isinstance(options, dict):
            raise AnsibleActionFail('%s: argument_specs.%s.options is not a dict' % (path, entry_point))
        return options

    def _unknown_lines(self, role, host, options, args, task_vars):
        """One line naming the prefixed variables no spec knows (each with the closest known name), or none."""
        prefixes = [args['prefix']] + list(args['also_prefixes'])
        known = set(options) | set(args['also_known'])
        for entry_point in args['known_entry_points']:
            known.update(self._load_options(self._role_and_path(args['role_path'])[1], entry_point))
        names = [to_text(n) for n in task_vars if any(to_text(n).startswith(p) for p in prefixes)]
        unknown = unknown_variables(names, sorted(known), args['prefix'])
        if not unknown:
            return []
        return ['Unknown variable(s) for %s on %s: %s. Known: %s' % (
            role, host, '; '.join(unknown), ', '.join(sorted(known)))]

    def _check_variable(self, name, spec, task_vars):
        """Error lines for one of the role's variables, its value as the task sees it (defaults included)."""
        if name not in task_vars:
            return check_option(name, spec, False, None)
        try:
            value = self._templar.template(task_vars[name])
        except AnsibleError as e:
            first = to_text(e).strip().splitlines()
            return ['%s cannot be evaluated: %s' % (name, first[0] if first else type(e).__name__)]
        return check_option(name, spec, True, value)

    def run(self, tmp=None, task_vars=None):
        if task_vars is None:
            task_vars = dict()
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect

        _validation, args = self.validate_argument_spec(argument_spec=dict(
            role_path=dict(type='path'),
            entry_point=dict(type='str', default='main'),
            prefix=dict(type='str'),
            also_prefixes=dict(type='list', elements='str', default=[]),
            known_entry_points=dict(type='list', elements='str', default=[]),
            also_known=dict(type='list', elements='str', default=[]),
        ))
        role, role_path = self._role_and_path(args['role_path'])
        options = self._load_options(role_path, args['entry_point'])

        host = task_vars.get('inventory_hostname', 'localhost')
        unknown = self._unknown_lines(role, host, options, args, task_vars) if args['prefix'] else []
        errors = []
        for name in sorted(options):
            errors.extend(self._check_variable(name, options[name] or {}, task_vars))

        result['changed'] = False
        if errors:
            # One line per error, each naming the role, the host and the variable: with several hosts
            # failing at once every line still says where it comes from.
            where = '%s on %s: ' % (role, host)
            result['failed'] = True
            result['msg'] = '\n'.join(unknown + [where + line for line in errors])
        elif unknown:
            result['failed'] = True
            result['msg'] = unknown[0]
        else:
            result['msg'] = '%s: all %d variables of entry point %s are valid' % (role, len(options), args['entry_point'])
        return result
