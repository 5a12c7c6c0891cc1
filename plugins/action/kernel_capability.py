# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kernel_capability probes each host once per run.

The module returns its facts as the host fact ``trainnet_kernel``. A later call in the same run
(site.yml's validation play, then the preflight of each role that needs the kernel) finds them here
on the controller and evaluates its own ``require`` list against them, without running anything on
the host. ``refresh: true``, facts from an older module version, or a call that wants the probes
when the facts were gathered without them run the module again.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import os

from ansible.plugins.action import ActionBase
from ansible_collections.longhaul.trainnet.plugins.module_utils.kernel_capability import (
    REQUIREMENTS,
    WIREGUARD_IMPLEMENTATIONS,
    choose_wireguard,
    context_from_facts,
    evaluate_requirements,
    facts_serve,
    missing_message,
)


def controller_run_id():
    """This ansible-playbook (or ansible) run: the workers that run actions are forked from it, so
    its PID and start time (PIDs are reused, start times within a boot are not) name it."""
    parent = os.getppid()
    try:
        with open('/proc/%d/stat' % parent) as stat:
            started = stat.read().rsplit(')', 1)[1].split()[19]
    except (OSError, IndexError):  # a controller without /proc
        started = ''
    return '%d-%s' % (parent, started)


class ActionModule(ActionBase):

    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        if task_vars is None:
            task_vars = dict()
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp  # tmp no longer has any effect

        _validation, args = self.validate_argument_spec(argument_spec=dict(
            require=dict(type='list', elements='str', default=[], choices=list(REQUIREMENTS)),
            congestion_control=dict(type='str', default='bbr'),
            probe=dict(type='bool', default=True),
            refresh=dict(type='bool', default=False),
            wireguard_implementation=dict(type='str', choices=list(WIREGUARD_IMPLEMENTATIONS)),
            wireguard_go_installable=dict(type='bool', default=False),
            wireguard_variable=dict(type='str', default='wireguard_implementation'),
        ))
        run_id = controller_run_id()
        facts = (task_vars.get('ansible_facts') or {}).get('trainnet_kernel')
        if args['refresh'] or not facts_serve(facts, args['probe'], run_id):
            result.update(self._execute_module(module_name='longhaul.trainnet.kernel_capability',
                                               module_args=self._task.args, task_vars=task_vars))
            for probed in (result.get('kernel'), (result.get('ansible_facts') or {}).get('trainnet_kernel')):
                if isinstance(probed, dict):
                    probed['run'] = run_id
            return result

        facts = copy.deepcopy(facts)
        missing = evaluate_requirements(facts, args['require'],
                                        context_from_facts(facts, args['congestion_control']))
        facts['missing'] = [name for name, _label, _detail in missing]
        facts['cached'] = True
        result.update(changed=False, kernel=facts)
        problem = ''
        if args['wireguard_implementation']:
            result['wireguard_implementation'], problem = choose_wireguard(
                facts, args['wireguard_implementation'], args['wireguard_go_installable'], args['wireguard_variable'])
        if missing or problem:
            result.update(failed=True, msg='; '.join(m for m in (missing_message(missing), problem) if m))
        elif args['require']:
            result['msg'] = 'all required capabilities present: %s (facts of this run)' % ', '.join(args['require'])
        else:
            result['msg'] = 'kernel capabilities of this run'
        return result
