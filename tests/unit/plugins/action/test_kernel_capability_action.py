# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kernel_capability action: one probe per host and run.

The facts come from the module itself (run on the fake hosts of its own unit tests); a later call
with other requirements must give the answer the module would have given, without running it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from unittest.mock import MagicMock

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.template import Templar

from ansible_collections.longhaul.trainnet.plugins.action.kernel_capability import ActionModule, controller_run_id
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.test_kernel_capability import (
    FakeIO,
    base_files,
    host_io,
    netns_io,
    run_module,
)

REQUIREMENT_SETS = [
    [],
    ['tfo'],
    ['bbr', 'tfo', 'nftables'],
    ['congestion_control'],
    ['global_sysctl', 'fq'],
    ['wireguard', 'tun'],
    ['init_netns', 'fq_codel', 'tbf'],
]


def tfo_read_only_io():
    """A host whose tcp_fastopen (1) cannot be written: the tfo requirement fails there."""
    return FakeIO(base_files(), writable=False)


def of_this_run(facts):
    """FACTS as the action leaves them after the module probed: stamped with this run."""
    return dict(facts, run=controller_run_id())


def run_action(args, facts, module_result=None):
    """The action's result with FACTS as this host's trainnet_kernel fact; the module call is recorded."""
    task = MagicMock()
    task.args = dict(args)
    task.async_val = 0
    task.check_mode = False
    connection = MagicMock()
    connection._shell.tmpdir = None
    loader = DataLoader()
    task_vars = {'inventory_hostname': 'cn-gpu1', 'ansible_facts': {} if facts is None else {'trainnet_kernel': facts}}
    action = ActionModule(task, connection, PlayContext(), loader, Templar(loader=loader, variables=task_vars), None)
    action._execute_module = MagicMock(return_value=module_result or {'changed': False, 'kernel': {'probed': 'module'}})
    return action.run(task_vars=task_vars), action._execute_module


@pytest.mark.parametrize('io_name', ['host', 'netns', 'netns_cubic_allowed', 'tfo_read_only'])
@pytest.mark.parametrize('require', REQUIREMENT_SETS)
@pytest.mark.parametrize('congestion_control', ['bbr', 'cubic'])
def test_a_later_call_answers_as_the_module_would_without_running_it(io_name, require, congestion_control):
    io = {'host': host_io, 'netns': netns_io, 'netns_cubic_allowed': lambda: netns_io(allowed='reno bbr cubic'),
          'tfo_read_only': tfo_read_only_io}[io_name]
    first = of_this_run(run_module({}, io())['kernel'])
    direct = run_module({'require': require, 'congestion_control': congestion_control}, io())
    result, module = run_action({'require': require, 'congestion_control': congestion_control}, first)
    module.assert_not_called()
    assert result['kernel']['cached'] is True
    assert result['kernel']['missing'] == direct['kernel']['missing']
    assert result.get('failed', False) == direct.get('failed', False)
    if direct.get('failed'):
        assert result['msg'] == direct['msg']
    # Everything but the per-call fields is the first call's facts.
    strip = ('missing', 'cached')
    assert {k: v for k, v in result['kernel'].items() if k not in strip} == \
        {k: v for k, v in first.items() if k not in strip}


def test_the_first_call_of_a_run_probes():
    _result, module = run_action({'require': ['tfo']}, None)
    module.assert_called_once()
    assert module.call_args.kwargs['module_name'] == 'longhaul.trainnet.kernel_capability'


def test_facts_gathered_without_probes_do_not_answer_a_call_that_wants_them():
    unprobed = of_this_run(run_module({'probe': False}, host_io())['kernel'])
    _result, module = run_action({'require': ['fq']}, unprobed)
    module.assert_called_once()
    result, module = run_action({'require': ['tfo'], 'probe': False}, unprobed)
    module.assert_not_called()
    assert result['kernel']['missing'] == []


def test_refresh_probes_again():
    facts = of_this_run(run_module({}, host_io())['kernel'])
    _result, module = run_action({'refresh': True}, facts)
    module.assert_called_once()


def test_facts_of_an_older_module_version_are_not_trusted():
    facts = of_this_run(run_module({}, host_io())['kernel'])
    del facts['probed']
    _result, module = run_action({}, facts)
    module.assert_called_once()


def test_facts_of_an_earlier_run_are_probed_again_and_stamped_with_this_one():
    """A persistent fact cache brings facts of an earlier run: the kernel may have changed since."""
    facts = run_module({}, host_io())['kernel']
    for earlier in (facts, dict(facts, run='1-1')):
        _result, module = run_action({'require': ['tfo']}, earlier)
        module.assert_called_once()
    probed = run_module({}, host_io())
    result, _module = run_action({}, None, module_result=probed)
    assert result['kernel']['run'] == controller_run_id()
    assert result['ansible_facts']['trainnet_kernel']['run'] == controller_run_id()
    again, module = run_action({'require': ['tfo']}, result['ansible_facts']['trainnet_kernel'])
    module.assert_not_called()
    assert again['kernel']['cached'] is True
