#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: role_arguments
short_description: Check a role's variables against its argument spec from any of its task files
version_added: 0.6.0
description:
  - Validates the variables of a role (as the task sees them - inventory, extra vars, the role's defaults)
    against C(argument_specs.<entry_point>.options) of the role's C(meta/argument_specs.yml), with the
    type conversions, choices and required checks of M(ansible.builtin.validate_argument_spec).
  - Ansible validates a role's argument spec only when the role runs through an entry point that has
    one; a role's C(preflight) task file included with C(tasks_from) is checked by nothing. This action
    lets such a task file check the C(main) entry point's variables itself.
  - >-
    On failure the message has one line per error, naming the role, the host, the variable, its
    value and the allowed values or type, for example
    C(longhaul.trainnet.egress_pool on cn-loader: egress_pool_mode = 'multihome' is not one of: proxy, multihomed).
    The result does not carry the argument spec (M(ansible.builtin.validate_argument_spec) returns it
    as C(argument_spec_data), which buries the error).
  - Values of options with C(no_log), or with C(no_log) suboptions, are not shown.
  - Runs on the controller only and reads nothing from the host.
options:
  role_path:
    description:
      - Directory of the role whose argument spec is read.
      - Defaults to the role the task belongs to; pass C({{ role_path }}) to say so explicitly.
      - Messages name the role by its fully qualified name when this is the task's own role, else by
        the directory's name.
    type: path
  entry_point:
    description:
      - Entry point of the role's argument spec whose options are checked.
    type: str
    default: main
  prefix:
    description:
      - The role's variable prefix (C(data_plane_)). When set, every variable starting with it (or with
        one of O(also_prefixes)) that no option of the checked entry point, of O(known_entry_points)
        or O(also_known) names is refused, each with the closest known name
        (C(data_plane_mtu_verfy_hosts (did you mean data_plane_mtu_verify_hosts?))).
      - Ansible ignores a variable nobody reads, so a misspelt input would otherwise change nothing and say nothing.
    type: str
  also_prefixes:
    description:
      - More prefixes whose variables count as the role's (an older name, C(trainnet_measure_)).
    type: list
    elements: str
    default: []
  known_entry_points:
    description:
      - Other entry points whose options are known names too (not checked here).
    type: list
    elements: str
    default: []
  also_known:
    description:
      - Names with the prefix that the role sets itself and are not inputs (C(data_plane_drift)).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - action_common_attributes
  - action_common_attributes.conn
  - action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  become:
    support: none
  bypass_host_loop:
    support: none
  connection:
    support: none
  check_mode:
    support: full
    details:
      - Reads the role's files and the task's variables only; behaves the same in check mode.
  delegation:
    support: none
  diff_mode:
    support: none
  platform:
    platforms: all
seealso:
  - module: ansible.builtin.validate_argument_spec
notes:
  - Only the options of the entry point are checked, as Ansible's own role argument validation does;
    ranges and rules across variables are for the role's own checks.
author:
  - longhaul.trainnet maintainers (@longhaul)
'''

EXAMPLES = r'''
# roles/egress_pool/tasks/preflight.yml, included by a play with tasks_from: preflight
- name: Preflight | Check every variable against the argument spec and refuse unknown ones
  longhaul.trainnet.role_arguments:
    role_path: "{{ role_path }}"
    prefix: egress_pool_
  any_errors_fatal: true

- name: Check the variables of training_job's launch entry point
  longhaul.trainnet.role_arguments:
    entry_point: launch
'''

RETURN = r'''
msg:
  description:
    - "On failure one line per error, each C(<role> on <host>: <message>), after a line naming the unknown
      variables when there are any; on success a summary."
  returned: always
  type: str
  sample: "longhaul.trainnet.egress_pool on cn-loader: egress_pool_mode = 'multihome' is not one of: proxy, multihomed"
'''
