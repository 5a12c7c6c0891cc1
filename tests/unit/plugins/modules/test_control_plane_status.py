# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""control_plane_status: commands through run_bounded with a time limit, the structured status,
never changed, the same in check mode, and a failure only on bad arguments."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import control_plane_status as status_utils
from ansible_collections.longhaul.trainnet.plugins.module_utils.command import CommandResult
from ansible_collections.longhaul.trainnet.plugins.modules import control_plane_status
from ansible_collections.longhaul.trainnet.plugins.module_utils.wireguard import render_config
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import (
    mock, module_patches, patch_module_args, read_fixture, run_main,
)

RDV = '10.255.0.1'
# The handshakes in the fixture are 5 s old at this time.
NOW = 1796092337


def fixture(name):
    return read_fixture('control_plane_status', name)


class FakeHost(object):
    """run_bounded answering from real captured outputs; records argv and limit of each call."""

    def __init__(self, bird_running=True, route='ip_route_get_via_tunnel.json'):
        self.calls = []
        self.bird_running = bird_running
        self.route = route

    def __call__(self, argv, limit=None, data=None, signal=None, env_update=None):
        assert isinstance(argv, list)
        self.calls.append((list(argv), limit))
        if argv[0] == 'wg':
            return CommandResult(0, fixture('wg_show_all_latest_handshakes.txt'), '')
        if argv[0] == 'birdc':
            if not self.bird_running:
                return CommandResult(1, '', 'Unable to connect to server control socket (/run/bird/bird.ctl): '
                                            'No such file or directory\n')
            return CommandResult(0, fixture('birdc_show_bfd_sessions_up.txt'), '')
        if 'route' in argv:
            return CommandResult(0, fixture(self.route), '')
        return CommandResult(0, fixture('ip_address_show_lo_secondary.json'), '')


def run(params, host, check_mode=False):
    if check_mode:
        params = dict(params, _ansible_check_mode=True)
    with patch_module_args(params), module_patches(), \
            mock.patch.object(control_plane_status, 'run_bounded', host), \
            mock.patch.object(status_utils.time, 'time', return_value=NOW):
        return run_main(control_plane_status.main)


@pytest.fixture(name='settings')
def fixture_settings(tmp_path):
    for peer in ('usw-anchor', 'use-anchor'):
        (tmp_path / ('wg-%s.conf' % peer)).write_text(render_config(0, [{'public_key': 'yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=', 'comment': peer}]))
    return str(tmp_path)


@pytest.mark.parametrize('check_mode', [False, True])
def test_status_from_the_host(settings, check_mode):
    host = FakeHost()
    result = run({'rendezvous_address': RDV, 'primary_anchor': 'usw-anchor', 'settings_dir': settings}, host,
                 check_mode=check_mode)
    assert result['changed'] is False and not result.get('failed')
    status = result['status']
    assert status['deployed'] is True
    assert (status['tunnels_up'], status['tunnels_total'], status['bfd_up'], status['bfd_total']) == (2, 2, 2, 2)
    assert status['rendezvous']['active_anchor'] == 'usw-anchor' and status['rendezvous']['on_primary'] is True
    assert status['errors'] == [] and status['oldest_handshake_age'] == 5
    # every command through run_bounded, bounded in time, the rendezvous address as given
    assert all(limit == control_plane_status.LIMIT for _argv, limit in host.calls)
    assert ['ip', '-j', 'route', 'get', RDV] in [argv for argv, _limit in host.calls]
    assert len(host.calls) == 4


def test_bird_down_is_reported_not_failed(settings):
    result = run({'rendezvous_address': RDV, 'settings_dir': settings}, FakeHost(bird_running=False))
    assert not result.get('failed') and result['changed'] is False
    assert (result['status']['bfd_up'], result['status']['bfd_total']) == (0, 2)
    assert result['status']['errors'][0].startswith('birdc show bfd sessions: rc 1: Unable to connect')


def test_primary_reports_local(settings):
    result = run({'rendezvous_address': RDV, 'primary_anchor': 'usw-anchor', 'settings_dir': settings},
                 FakeHost(route='ip_route_get_local.json'))
    assert result['status']['rendezvous']['active_anchor'] == 'local'


def test_not_deployed(tmp_path):
    class Bare(FakeHost):
        def __call__(self, argv, limit=None, data=None, signal=None, env_update=None):
            self.calls.append((list(argv), limit))
            return CommandResult(127, '', '%s: No such file or directory' % argv[0]) if argv[0] in ('wg', 'birdc') \
                else CommandResult(0, fixture('ip_route_get_via_tunnel.json'), '')
    result = run({'rendezvous_address': RDV, 'settings_dir': str(tmp_path / 'absent')}, Bare())
    assert result['status']['deployed'] is False and not result.get('failed')


@pytest.mark.parametrize('address', ['10.255.0.300', 'rendezvous', 'fd00::1', ''])
def test_bad_rendezvous_address_fails_without_running_anything(address):
    host = FakeHost()
    result = run({'rendezvous_address': address}, host)
    assert result['failed'] is True
    assert "rendezvous_address='%s' must be an IPv4 address" % address in result['msg']
    assert host.calls == []
