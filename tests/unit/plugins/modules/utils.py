# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Shared harness for the module unit tests: module args, exit/fail_json and get_bin_path fakes."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import json
import os

from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes

try:
    from unittest import mock
except ImportError:  # pragma: no cover
    import mock  # type: ignore[no-redef]

try:
    from ansible.module_utils.testing import patch_module_args  # pylint: disable=unused-import  # ansible-core >= 2.19
except ImportError:  # pragma: no cover - older ansible-core
    @contextlib.contextmanager
    def patch_module_args(args=None):
        serialized = to_bytes(json.dumps({'ANSIBLE_MODULE_ARGS': args or {}}))
        with mock.patch.object(basic, '_ANSIBLE_ARGS', serialized):
            yield

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'fixtures')


def read_fixture(*parts):
    """Text of tests/unit/plugins/fixtures/<parts...>."""
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return handle.read()


class AnsibleExitJson(Exception):
    """Raised by the patched AnsibleModule.exit_json; args[0] is the result dict."""


class AnsibleFailJson(Exception):
    """Raised by the patched AnsibleModule.fail_json; args[0] is the result dict (failed=True)."""


def exit_json(self, **kwargs):  # pylint: disable=unused-argument
    raise AnsibleExitJson(kwargs)


def fail_json(self, **kwargs):  # pylint: disable=unused-argument
    kwargs['failed'] = True
    raise AnsibleFailJson(kwargs)


def fake_get_bin_path(paths):
    """AnsibleModule.get_bin_path stand-in answering from the dict `paths` (None when absent)."""
    def get_bin_path(self, name, *args, **kwargs):  # pylint: disable=unused-argument
        return paths.get(name)
    return get_bin_path


def patch_module(monkeypatch, **methods):
    """monkeypatch AnsibleModule.exit_json/fail_json, plus any other `methods` given by name."""
    methods.setdefault('exit_json', exit_json)
    methods.setdefault('fail_json', fail_json)
    for name, func in methods.items():
        monkeypatch.setattr(basic.AnsibleModule, name, func)


def capture_warnings(monkeypatch):
    """monkeypatch AnsibleModule.warn to collect messages; returns the (live) list."""
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, 'warn', lambda self, msg: warnings.append(msg))
    return warnings


def module_patches(**methods):
    """mock.patch.multiple of AnsibleModule with exit_json/fail_json plus the given `methods`."""
    methods.setdefault('exit_json', exit_json)
    methods.setdefault('fail_json', fail_json)
    return mock.patch.multiple(basic.AnsibleModule, **methods)


def run_main(main):
    """Call a module's main() with exit/fail_json patched; return its result dict."""
    try:
        main()
    except (AnsibleExitJson, AnsibleFailJson) as exc:
        return exc.args[0]
    raise AssertionError('module did not exit')  # pragma: no cover


def run_with_args(main, args, check_mode=False, diff=False):
    """Call a module's main() with `args` (and check/diff mode) as Ansible passes them; return
    (succeeded, result dict). exit_json/fail_json must already be patched (patch_module)."""
    args = dict(args)
    if check_mode:
        args['_ansible_check_mode'] = True
    if diff:
        args['_ansible_diff'] = True
    with patch_module_args(args):
        try:
            main()
        except AnsibleExitJson as exc:
            return True, exc.args[0]
        except AnsibleFailJson as exc:
            return False, exc.args[0]
    raise AssertionError('module did not exit')  # pragma: no cover
