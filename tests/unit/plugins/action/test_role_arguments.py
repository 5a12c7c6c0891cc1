# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""role_arguments action: a role's variables against its argument spec, one short line per error.

The action runs with the real DataLoader and Templar; the task is a stand-in carrying what the
action reads from it (its arguments, check mode, the role it belongs to).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
from unittest.mock import MagicMock

import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.template import Templar

from ansible_collections.longhaul.trainnet.plugins.action.role_arguments import VALUE_WIDTH, ActionModule

try:  # ansible-core >= 2.19 templates only trusted strings (inventory, playbooks, -e)
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover - older ansible-core templates every string
    def trust_as_template(value):
        return value

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
ROLES = sorted(d for d in os.listdir(os.path.join(ROOT, 'roles'))
               if os.path.isfile(os.path.join(ROOT, 'roles', d, 'meta', 'argument_specs.yml')))

DEMO_SPECS = {
    'argument_specs': {
        'main': {
            'short_description': 'demo',
            'options': {
                'demo_mode': {'type': 'str', 'choices': ['proxy', 'multihomed'], 'default': 'proxy',
                              'description': 'x'},
                'demo_port': {'type': 'int', 'default': 3128, 'description': 'x'},
                'demo_enabled': {'type': 'bool', 'default': True, 'description': 'x'},
                'demo_ports': {'type': 'list', 'elements': 'int', 'default': [], 'description': 'x'},
                'demo_features': {'type': 'list', 'elements': 'str', 'choices': ['tfo', 'bbr'], 'default': [],
                                  'description': 'x'},
                'demo_name': {'type': 'str', 'required': True, 'description': 'x'},
                'demo_token': {'type': 'int', 'default': 0, 'no_log': True, 'description': 'x'},
                'demo_links': {
                    'type': 'list', 'elements': 'dict', 'default': [], 'description': 'x',
                    'mutually_exclusive': [['rtt_ms', 'rtt_auto']],
                    'options': {
                        'name': {'type': 'str', 'required': True, 'description': 'x'},
                        'rtt_ms': {'type': 'float', 'description': 'x'},
                        'rtt_auto': {'type': 'bool', 'description': 'x'},
                        'password': {'type': 'int', 'no_log': True, 'description': 'x'},
                    },
                },
            },
        },
        'launch': {
            'options': {
                'demo_action': {'type': 'str', 'choices': ['train', 'verify'], 'default': 'train',
                                'description': 'x'},
            },
        },
    },
}


@pytest.fixture
def demo_role(tmp_path):
    role = tmp_path / 'demo'
    (role / 'meta').mkdir(parents=True)
    (role / 'meta' / 'argument_specs.yml').write_text(yaml.safe_dump(DEMO_SPECS))
    return str(role)


def role_stub(path, name):
    role = MagicMock()
    role._role_path = path
    role.get_name.return_value = name
    return role


def run(task_vars, args=None, role=None, check_mode=False):
    """The action's result for one task on one host (task_vars as the executor passes them)."""
    task = MagicMock()
    task.args = dict(args or {})
    task.async_val = 0
    task.check_mode = check_mode
    task.action = 'longhaul.trainnet.role_arguments'
    task._role = role
    connection = MagicMock()
    connection._shell.tmpdir = None
    loader = DataLoader()
    action = ActionModule(task, connection, PlayContext(), loader, Templar(loader=loader, variables=task_vars), None)
    return action.run(task_vars=task_vars)


def demo(demo_role, check_mode=False, **variables):
    """Run against the demo role as its own task would, on host cn-loader."""
    task_vars = dict(inventory_hostname='cn-loader', demo_name='loader', **variables)
    return run(task_vars, role=role_stub(demo_role, 'longhaul.trainnet.demo'), check_mode=check_mode)


def role_defaults(role):
    with open(os.path.join(ROOT, 'roles', role, 'defaults', 'main.yml')) as handle:
        return yaml.safe_load(handle) or {}


def test_the_example_of_the_issue_is_one_line_without_the_spec():
    """egress_pool_mode=multihome, the typo of issue 23, checked against the real egress_pool role."""
    path = os.path.join(ROOT, 'roles', 'egress_pool')
    task_vars = dict(role_defaults('egress_pool'), inventory_hostname='cn-loader', egress_pool_mode='multihome')
    result = run(task_vars, args={'role_path': path},
                 role=role_stub(path, 'longhaul.trainnet.egress_pool'))
    assert result['failed'] is True
    assert result['msg'] == ("longhaul.trainnet.egress_pool on cn-loader: "
                             "egress_pool_mode = 'multihome' is not one of: proxy, multihomed")
    assert set(result) <= {'changed', 'failed', 'msg'}, sorted(result)
    assert 'argument_spec_data' not in result


@pytest.mark.parametrize('role', ROLES)
def test_every_role_passes_with_its_defaults(role):
    path = os.path.join(ROOT, 'roles', role)
    task_vars = dict(role_defaults(role), inventory_hostname='cn-master')
    result = run(task_vars, args={'role_path': path}, role=role_stub(path, 'longhaul.trainnet.' + role))
    assert not result.get('failed'), result['msg']
    assert result['changed'] is False


def test_valid_variables_pass_with_their_conversions(demo_role):
    # as -e passes them: strings that convert to the option's type
    result = demo(demo_role, demo_mode='multihomed', demo_port='8080', demo_enabled='yes', demo_ports='1,2',
                  demo_features=['tfo'], demo_links=[{'name': 'a', 'rtt_ms': '12.5'}])
    assert not result.get('failed'), result['msg']
    assert result['msg'] == 'longhaul.trainnet.demo: all 8 variables of entry point main are valid'


def test_each_error_is_one_line_naming_role_host_variable_and_what_is_allowed(demo_role):
    result = demo(demo_role, demo_mode='multihome', demo_port='big', demo_enabled='maybe',
                  demo_ports=[1, 'two'], demo_features=['tfo', 'ecn'])
    assert result['failed'] is True
    prefix = 'longhaul.trainnet.demo on cn-loader: '
    assert result['msg'].split('\n') == [
        prefix + "demo_enabled = 'maybe' is not of type bool",
        prefix + "demo_features = ['tfo', 'ecn'] has items that are not among: tfo, bbr",
        prefix + "demo_mode = 'multihome' is not one of: proxy, multihomed",
        prefix + "demo_port = 'big' is not of type int",
        prefix + "demo_ports[1] = 'two' is not of type int",
    ]


def test_a_required_variable_that_is_not_set(demo_role):
    result = run({'inventory_hostname': 'h1'}, role=role_stub(demo_role, 'longhaul.trainnet.demo'))
    assert result['msg'] == 'longhaul.trainnet.demo on h1: demo_name is required and not set'


def test_suboptions_are_named_by_their_path(demo_role):
    result = demo(demo_role, demo_links=[
        {'name': 'a', 'rtt_ms': 'slow'},
        {'rtt_ms': 5, 'bogus': 1},
        {'name': 'c', 'rtt_ms': 5, 'rtt_auto': True},
        'not-a-dict',
    ])
    lines = [line.split(': ', 1)[1] for line in result['msg'].split('\n')]
    # the list's items are checked first: the item that is not a dict (password is no_log: no value shown)
    assert lines == ['demo_links[3] = ******** is not of type dict']
    result = demo(demo_role, demo_links=[
        {'name': 'a', 'rtt_ms': 'slow'},
        {'rtt_ms': 5, 'bogus': 1},
        {'name': 'c', 'rtt_ms': 5, 'rtt_auto': True},
    ])
    lines = [line.split(': ', 1)[1] for line in result['msg'].split('\n')]
    assert lines == [
        "demo_links[0].rtt_ms = 'slow' is not of type float",
        'demo_links[1] has unknown key(s) bogus; known: name, password, rtt_auto, rtt_ms',
        'demo_links[1].name is required and not set',
        'demo_links[2]: parameters are mutually exclusive: rtt_ms|rtt_auto',
    ]


def test_no_log_values_are_never_shown(demo_role):
    result = demo(demo_role, demo_token='s3cr3t', demo_links=[{'name': 'a', 'password': 'hunter2'}])
    assert 's3cr3t' not in result['msg'] and 'hunter2' not in result['msg']
    assert result['msg'].split('\n') == [
        'longhaul.trainnet.demo on cn-loader: demo_links[0].password = ******** is not of type int',
        'longhaul.trainnet.demo on cn-loader: demo_token = ******** is not of type int',
    ]


def test_a_long_value_is_cut_to_keep_the_line_short(demo_role):
    result = demo(demo_role, demo_mode='x' * 500)
    assert len(result['msg']) < len('longhaul.trainnet.demo on cn-loader: ') + VALUE_WIDTH + 60
    assert "demo_mode = 'xxx" in result['msg'] and '...' in result['msg']


def test_check_mode_gives_the_same_answer(demo_role):
    assert demo(demo_role, check_mode=True, demo_port='big') == demo(demo_role, demo_port='big')
    assert not demo(demo_role, check_mode=True).get('failed')


def test_a_value_that_cannot_be_templated_is_an_error(demo_role):
    result = demo(demo_role, demo_port=trust_as_template('{{ no_such_variable }}'))
    assert result['failed'] is True
    assert result['msg'].startswith('longhaul.trainnet.demo on cn-loader: demo_port cannot be evaluated: ')
    assert 'no_such_variable' in result['msg'] and '\n' not in result['msg']


def test_templated_values_are_checked_after_templating(demo_role):
    result = demo(demo_role, demo_port=trust_as_template('{{ base + 1 }}'), base=3127)
    assert not result.get('failed'), result['msg']
    result = demo(demo_role, demo_mode=trust_as_template('{{ "multi" ~ "home" }}'))
    assert result['msg'].endswith("demo_mode = 'multihome' is not one of: proxy, multihomed")


def test_another_entry_point(demo_role):
    result = run({'inventory_hostname': 'h1', 'demo_action': 'fly'}, args={'entry_point': 'launch'},
                 role=role_stub(demo_role, 'longhaul.trainnet.demo'))
    assert result['msg'] == "longhaul.trainnet.demo on h1: demo_action = 'fly' is not one of: train, verify"


def unknown_run(demo_role, args, **variables):
    task_vars = dict(inventory_hostname='cn-loader', demo_name='loader', **variables)
    return run(task_vars, args=dict(args, prefix='demo_'), role=role_stub(demo_role, 'longhaul.trainnet.demo'))


def test_a_misspelt_variable_is_refused_with_the_closest_known_name(demo_role):
    result = unknown_run(demo_role, {}, demo_prot=3128, other_var=1)
    assert result['failed'] is True
    assert result['msg'].startswith('Unknown variable(s) for longhaul.trainnet.demo on cn-loader: '
                                    'demo_prot (did you mean demo_port?). Known: ')
    assert 'other_var' not in result['msg']   # not the role's prefix


def test_known_names_of_other_entry_points_also_prefixes_and_also_known(demo_role):
    assert not unknown_run(demo_role, {}, demo_port=1).get('failed')
    assert unknown_run(demo_role, {}, demo_action='train')['failed']
    assert not unknown_run(demo_role, {'known_entry_points': ['launch']}, demo_action='train').get('failed')
    assert not unknown_run(demo_role, {'also_known': ['demo_drift']}, demo_drift=[]).get('failed')
    result = unknown_run(demo_role, {'also_prefixes': ['old_demo_']}, old_demo_port=1)
    assert 'old_demo_port (did you mean demo_port?)' in result['msg']
    # without prefix nothing is refused for its name
    assert not demo(demo_role, demo_prot=3128).get('failed')


def test_unknown_names_and_bad_values_are_reported_together(demo_role):
    result = unknown_run(demo_role, {}, demo_prot=1, demo_mode='multihome')
    lines = result['msg'].splitlines()
    assert lines[0].startswith('Unknown variable(s) for longhaul.trainnet.demo on cn-loader: demo_prot')
    assert lines[1] == "longhaul.trainnet.demo on cn-loader: demo_mode = 'multihome' is not one of: proxy, multihomed"


def test_role_path_of_another_role_is_named_by_its_directory(demo_role, tmp_path):
    other = role_stub(str(tmp_path / 'elsewhere'), 'longhaul.trainnet.elsewhere')
    result = run({'inventory_hostname': 'h1'}, args={'role_path': demo_role}, role=other)
    assert result['msg'] == 'demo on h1: demo_name is required and not set'
    result = run({'inventory_hostname': 'h1'}, args={'role_path': demo_role}, role=None)
    assert result['msg'] == 'demo on h1: demo_name is required and not set'


def test_meta_main_argument_specs_are_read_when_there_is_no_spec_file(tmp_path):
    role = tmp_path / 'old'
    (role / 'meta').mkdir(parents=True)
    (role / 'meta' / 'main.yml').write_text(yaml.safe_dump(dict(DEMO_SPECS, galaxy_info={})))
    result = run({'inventory_hostname': 'h1', 'demo_name': 'n', 'demo_port': 'x'}, role=role_stub(str(role), 'old'))
    assert result['msg'] == "old on h1: demo_port = 'x' is not of type int"


@pytest.mark.parametrize('args, role, message', [
    ({}, None, 'not in a role'),
    ({'role_path': '/nonexistent/role'}, None, 'has no meta/argument_specs.yml'),
    ({'entry_point': 'nope'}, 'demo', 'has no argument spec for the entry point nope'),
    ({'argument_spec': {}}, 'demo', 'argument_spec'),
])
def test_bad_use_fails_the_task(demo_role, args, role, message):
    with pytest.raises(AnsibleActionFail, match=message):
        run({'inventory_hostname': 'h1'}, args=args,
            role=role_stub(demo_role, 'longhaul.trainnet.demo') if role else None)
