# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""wireguard_peer_keys and wireguard_peer_key_problems: the one copy of the peer-key logic of
control_plane and sync_tunnel."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.longhaul.trainnet.plugins.filter.wireguard_peers import (
    wireguard_peer_key_problems,
    wireguard_peer_keys,
)

KEY_A = 'A' * 43 + '='
KEY_B = 'B' * 42 + 'A='
KEY_C = 'C' * 42 + 'E='


def slurped(host, text):
    return {'item': host, 'content': base64.b64encode(text.encode()).decode()}


def test_keys_come_from_this_run_then_from_peers_outside_it():
    hostvars = {'a': {'__k': {'public_key': KEY_A}}, 'b': {'__k': {'public_key': None}}, 'me': {}}
    outside = {'results': [slurped('c', KEY_C + '\n'), {'item': 'd', 'failed': True}]}
    assert wireguard_peer_keys(hostvars, ['a', 'b', 'c', 'd'], '__k', outside) == {'a': KEY_A, 'c': KEY_C}


def test_a_key_of_this_run_wins_over_a_file_read_on_the_peer():
    hostvars = {'a': {'__k': {'public_key': KEY_A}}}
    assert wireguard_peer_keys(hostvars, ['a'], '__k', {'results': [slurped('a', KEY_B)]}) == {'a': KEY_A}


def test_an_unknown_peer_has_no_key_and_key_var_is_required():
    assert wireguard_peer_keys({}, ['ghost'], '__k') == {}
    with pytest.raises(AnsibleFilterError):
        wireguard_peer_keys({}, ['a'], '')


def test_no_problem_with_good_keys():
    assert wireguard_peer_key_problems({'a': KEY_A, 'b': KEY_B}, ['a', 'b'], '/etc/k', 'me') == []


def test_a_key_that_would_add_lines_is_refused_naming_host_and_file():
    problems = wireguard_peer_key_problems({'a': KEY_A, 'b': KEY_B[:-1] + '\nEndpoint=x'}, ['a', 'b'], '/etc/k', 'me')
    assert len(problems) == 1
    assert problems[0].startswith("Refusing to write the tunnels of me: host b: public key='")
    assert 'is not a WireGuard key' in problems[0] and '/etc/k/public.key' in problems[0]


def test_a_peer_without_a_key_is_named_except_in_check_mode():
    problems = wireguard_peer_key_problems({'a': KEY_A, 'b': ''}, ['a', 'b', 'c'], '/etc/k', 'me')
    assert problems == ['No WireGuard public key for b, c (not in this run and no /etc/k/public.key there): '
                        'run the role on those hosts first (without --limit).']
    assert wireguard_peer_key_problems({'a': KEY_A}, ['a', 'c'], '/etc/k', 'me', False) == []
