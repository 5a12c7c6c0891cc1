# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""control_plane_status: parsers on real command output (wireguard-go, BIRD 2.0.12, iproute2), the
structured status on the master, the primary and a secondary anchor, the watchdog's metrics, and
the file run alone as the watchdog program (python3 -I, no collection on the path)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat
import subprocess
import sys

import pytest

from ansible_collections.longhaul.trainnet.plugins.module_utils import control_plane_status as S
from ansible_collections.longhaul.trainnet.plugins.module_utils.wireguard import render_config
from ansible_collections.longhaul.trainnet.tests.unit.plugins.modules.utils import FIXTURES, read_fixture

RDV = '10.255.0.1'
# wg_show_all_latest_handshakes.txt was captured 5 s after both handshakes (1796092332).
NOW = 1796092337
PEERS = {'wg-usw-anchor': 'usw-anchor', 'wg-use-anchor': 'use-anchor'}


def tunnel_config(peer):
    """A tunnel's configuration file as the wireguard_interface module writes it."""
    return render_config(51821, [{'public_key': 'yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=', 'comment': peer,
                                  'endpoint': '198.18.1.2:51821', 'allowed_ips': ['0.0.0.0/0'], 'keepalive': 25}])


def fixture(name):
    return read_fixture('control_plane_status', name)


def status(handshakes='wg_show_all_latest_handshakes.txt', bfd='birdc_show_bfd_sessions_up.txt',
           route='ip_route_get_via_tunnel.json', lo='ip_address_show_lo_secondary.json', peers=None,
           primary='usw-anchor', now=NOW):
    return S.build_status(now, S.parse_handshakes(fixture(handshakes)), S.parse_bfd_sessions(fixture(bfd)),
                          S.parse_route(fixture(route)), S.parse_addresses(fixture(lo)),
                          PEERS if peers is None else peers, RDV, primary)


def test_parse_handshakes_real_output():
    assert S.parse_handshakes(fixture('wg_show_all_latest_handshakes.txt')) == {
        'wg-usw-anchor': 1796092332, 'wg-use-anchor': 1796092332}
    assert S.parse_handshakes(fixture('wg_show_all_latest_handshakes_never.txt')) == {
        'wg-usw-anchor': 0, 'wg-use-anchor': 0}
    assert S.parse_handshakes(None) == {}
    assert S.parse_handshakes('Unable to access interface: Protocol not supported\n') == {}


def test_parse_bfd_sessions_real_output():
    assert S.parse_bfd_sessions(fixture('birdc_show_bfd_sessions_up.txt')) == [
        {'neighbor': '169.254.2.1', 'interface': 'wg-usw-anchor', 'state': 'Up', 'since': '01:06:31.341'},
        {'neighbor': '169.254.3.1', 'interface': 'wg-use-anchor', 'state': 'Up', 'since': '01:06:33.926'},
    ]
    assert [s['state'] for s in S.parse_bfd_sessions(fixture('birdc_show_bfd_sessions_down.txt'))] == ['Down', 'Down']
    # header, banner and protocol lines are no sessions
    assert S.parse_bfd_sessions('BIRD 2.0.12 ready.\ncp_bfd:\nIP address  Interface  State\n') == []


def test_parse_route_real_output():
    assert S.parse_route(fixture('ip_route_get_via_tunnel.json')) == {
        'device': 'wg-usw-anchor', 'type': 'unicast', 'gateway': '169.254.2.1', 'source': '10.254.0.1'}
    assert S.parse_route(fixture('ip_route_get_local.json'))['type'] == 'local'
    assert S.parse_route('') is None
    assert S.parse_route('RTNETLINK answers: Network is unreachable') is None
    assert S.parse_route('{"dev": "x"}') is None


def test_parse_addresses_real_output():
    assert S.parse_addresses(fixture('ip_address_show_lo_primary.json')) == ['127.0.0.1', '10.254.0.2', RDV]
    assert RDV not in S.parse_addresses(fixture('ip_address_show_lo_secondary.json'))
    assert S.parse_addresses('garbage') == []


def test_master_with_everything_up():
    got = status()
    assert got['deployed'] is True
    assert (got['tunnels_up'], got['tunnels_total'], got['bfd_up'], got['bfd_total']) == (2, 2, 2, 2)
    assert got['oldest_handshake_age'] == 5
    assert got['tunnels'][1] == {'interface': 'wg-usw-anchor', 'peer': 'usw-anchor', 'handshake_age': 5,
                                 'up': True, 'bfd_state': 'Up'}
    rdv = got['rendezvous']
    assert rdv['active_anchor'] == 'usw-anchor' and rdv['device'] == 'wg-usw-anchor'
    assert rdv['on_primary'] is True and rdv['local'] is False


def test_bfd_down_and_route_on_the_secondary():
    got = status(bfd='birdc_show_bfd_sessions_down.txt', primary='use-anchor')
    assert (got['bfd_up'], got['bfd_total']) == (0, 2)
    assert [t['bfd_state'] for t in got['tunnels']] == ['Down', 'Down']
    assert got['rendezvous']['on_primary'] is False  # routed to usw-anchor, primary is use-anchor


def test_never_handshaken_and_stale_tunnels_are_down():
    never = status(handshakes='wg_show_all_latest_handshakes_never.txt')
    assert never['tunnels_up'] == 0 and never['oldest_handshake_age'] is None
    assert all(t['handshake_age'] is None for t in never['tunnels'])
    stale = status(now=1796092332 + S.HANDSHAKE_STALE + 1)
    assert stale['tunnels_up'] == 0 and stale['oldest_handshake_age'] == S.HANDSHAKE_STALE + 1
    edge = status(now=1796092332 + S.HANDSHAKE_STALE)
    assert edge['tunnels_up'] == 2


def test_tunnel_without_interface_or_bfd_session_counts_as_down():
    # wireguard-go died on one tunnel: its settings file remains, wg lists only the other one,
    # BIRD lists no session for it.
    peers = dict(PEERS, **{'wg-id4': 'extra-anchor'})
    got = status(peers=peers)
    assert (got['tunnels_up'], got['tunnels_total'], got['bfd_up'], got['bfd_total']) == (2, 3, 2, 3)
    extra = [t for t in got['tunnels'] if t['interface'] == 'wg-id4'][0]
    assert extra == {'interface': 'wg-id4', 'peer': 'extra-anchor', 'handshake_age': None, 'up': False,
                     'bfd_state': None}


def test_bird_not_running_leaves_bfd_expected_per_tunnel():
    got = S.build_status(NOW, S.parse_handshakes(fixture('wg_show_all_latest_handshakes.txt')), [], None, [],
                         PEERS, RDV, 'usw-anchor')
    assert (got['bfd_up'], got['bfd_total']) == (0, 2)
    assert got['rendezvous']['active_anchor'] is None and got['rendezvous']['on_primary'] is False


def test_primary_serves_the_address_itself():
    got = status(route='ip_route_get_local.json', lo='ip_address_show_lo_primary.json')
    rdv = got['rendezvous']
    assert rdv['local'] is True and rdv['assigned'] is True
    assert rdv['active_anchor'] == 'local' and rdv['on_primary'] is True


def test_secondary_took_the_address_over():
    got = status(route='ip_route_get_takeover.json', lo='ip_address_show_lo_secondary.json')
    rdv = got['rendezvous']
    assert rdv['local'] is True and rdv['assigned'] is False
    assert rdv['active_anchor'] == 'local' and rdv['on_primary'] is False


def test_not_deployed():
    got = S.build_status(NOW, {}, [], None, [], {}, RDV, '')
    assert got['deployed'] is False and got['tunnels_total'] == 0 and got['bfd_total'] == 0


def test_read_peers(tmp_path):
    (tmp_path / 'wg-a.conf').write_text(tunnel_config('usw-anchor'))
    (tmp_path / 'wg-b.conf').write_text(tunnel_config('use-anchor'))
    (tmp_path / 'wg-c.env').write_text("PEER='an earlier version'\n")   # not a tunnel's configuration
    (tmp_path / 'other.txt').write_text('[Peer]\n# x\n')
    assert S.read_peers(str(tmp_path)) == {'wg-a': 'usw-anchor', 'wg-b': 'use-anchor'}
    assert S.read_peers(str(tmp_path / 'missing')) == {}


def fake_runner(outputs):
    """run(argv) answering from {first word: (rc, out, err)}; records the calls."""
    calls = []

    def run(argv):
        calls.append(list(argv))
        key = argv[0] if argv[0] != 'ip' else ('ip route' if 'route' in argv else 'ip address')
        return outputs[key]
    run.calls = calls
    return run


def test_collect_runs_each_command_and_names_the_failures(tmp_path):
    (tmp_path / 'wg-usw-anchor.conf').write_text(tunnel_config('usw-anchor'))
    run = fake_runner({
        'wg': (0, fixture('wg_show_all_latest_handshakes.txt'), ''),
        'birdc': (1, '', 'Unable to connect to server control socket (/run/bird/bird.ctl): No such file or directory\n'),
        'ip route': (0, fixture('ip_route_get_via_tunnel.json'), ''),
        'ip address': (0, fixture('ip_address_show_lo_secondary.json'), ''),
    })
    got = S.collect(RDV, 'usw-anchor', str(tmp_path), run=run, now=NOW)
    assert sorted(run.calls) == sorted(S.commands(RDV).values())
    assert ['ip', '-j', 'route', 'get', RDV] in run.calls
    assert got['errors'] == ['birdc show bfd sessions: rc 1: Unable to connect to server control socket '
                             '(/run/bird/bird.ctl): No such file or directory']
    assert got['tunnels'][1]['peer'] == 'usw-anchor' and got['tunnels'][0]['peer'] == ''
    assert got['bfd_sessions'] == [] and got['rendezvous']['active_anchor'] == 'usw-anchor'


def test_run_local_c_locale_and_missing_binary():
    rc, out, _err = S.run_local([sys.executable, '-c', 'import os; print(os.environ["LC_ALL"])'])
    assert (rc, out) == (0, 'C\n')
    rc, _out, err = S.run_local(['/nonexistent/wg'])
    assert rc == 127 and 'nonexistent' in err


def test_metrics_on_master_after_failover():
    got = status(handshakes='wg_show_all_latest_handshakes.txt', bfd='birdc_show_bfd_sessions_down.txt',
                 route='ip_route_get_via_tunnel.json')
    got['rendezvous']['active_anchor'] = 'use-anchor'  # as after the route moved
    got['rendezvous']['device'] = 'wg-use-anchor'
    got['rendezvous']['on_primary'] = False
    text = S.render_metrics(got, NOW)
    assert 'trainnet_control_plane_handshake_age_seconds{interface="wg-usw-anchor",peer="usw-anchor"} 5' in text
    assert 'trainnet_control_plane_tunnel_up{interface="wg-use-anchor",peer="use-anchor"} 1' in text
    assert ('trainnet_control_plane_bfd_session_up{interface="wg-use-anchor",neighbor="169.254.3.1",'
            'peer="use-anchor",state="Down"} 0') in text
    assert ('trainnet_control_plane_active_anchor{anchor="use-anchor",interface="wg-use-anchor",'
            'rendezvous="10.255.0.1"} 1') in text
    assert 'trainnet_control_plane_rendezvous_on_primary{primary="usw-anchor"} 0' in text
    assert 'trainnet_control_plane_watchdog_timestamp_seconds %d' % NOW in text


def test_metrics_never_handshaken_and_no_route():
    got = S.build_status(NOW, S.parse_handshakes(fixture('wg_show_all_latest_handshakes_never.txt')), [], None,
                         [], PEERS, RDV, 'usw-anchor')
    text = S.render_metrics(got, NOW)
    assert 'handshake_age_seconds{' not in text  # never: no age sample
    assert 'trainnet_control_plane_tunnel_up{interface="wg-usw-anchor",peer="usw-anchor"} 0' in text
    assert 'trainnet_control_plane_active_anchor{anchor="none",interface="none"' in text
    assert 'trainnet_control_plane_rendezvous_on_primary{primary="usw-anchor"} 0' in text


def test_metrics_label_escaping():
    got = S.build_status(NOW, {'wg-x': NOW}, [], None, [], {'wg-x': 'a"b\\c'}, RDV, '')
    assert 'peer="a\\"b\\\\c"' in S.render_metrics(got, NOW)


def fake_bin(directory, name, fixture_name, rc=0):
    path = directory / name
    path.write_text('#!/bin/sh\n/bin/cat %s\nexit %d\n' % (os.path.join(FIXTURES, 'control_plane_status', fixture_name), rc))
    path.chmod(stat.S_IRWXU)


def test_runs_alone_as_the_watchdog(tmp_path):
    """The file itself, isolated (-I: no collection, no PYTHONPATH), with wg/birdc/ip answering from
    the fixtures, writes the metrics file the textfile collector reads."""
    bins = tmp_path / 'bin'
    bins.mkdir()
    fake_bin(bins, 'wg', 'wg_show_all_latest_handshakes.txt')
    fake_bin(bins, 'birdc', 'birdc_show_bfd_sessions_up.txt')
    # ip: route get -> the tunnel route; address show -> lo without the rendezvous address
    (bins / 'ip').write_text('#!/bin/sh\ncase "$*" in *route*) /bin/cat %s;; *) /bin/cat %s;; esac\n' % (
        os.path.join(FIXTURES, 'control_plane_status', 'ip_route_get_via_tunnel.json'),
        os.path.join(FIXTURES, 'control_plane_status', 'ip_address_show_lo_secondary.json')))
    (bins / 'ip').chmod(stat.S_IRWXU)
    settings = tmp_path / 'settings'
    settings.mkdir()
    (settings / 'wg-usw-anchor.conf').write_text(tunnel_config('usw-anchor'))
    textfiles = tmp_path / 'textfiles'
    textfiles.mkdir()
    proc = subprocess.run([sys.executable, '-I', S.__file__, str(textfiles), RDV, 'usw-anchor', str(settings)],
                          env={'PATH': str(bins)}, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    text = (textfiles / S.FILE_NAME).read_text()
    assert 'trainnet_control_plane_active_anchor{anchor="usw-anchor",interface="wg-usw-anchor"' in text
    assert 'trainnet_control_plane_rendezvous_on_primary{primary="usw-anchor"} 1' in text
    assert 'bfd_session_up{interface="wg-usw-anchor",neighbor="169.254.2.1",peer="usw-anchor",state="Up"} 1' in text
    assert oct((textfiles / S.FILE_NAME).stat().st_mode & 0o777) == '0o644'
    assert not (textfiles / (S.FILE_NAME + '.tmp')).exists()


@pytest.mark.parametrize('argv', [[], ['dir', RDV], ['a', 'b', 'c', 'd', 'e']])
def test_usage(argv, capsys):
    assert S.main(argv) == 2
    assert 'usage:' in capsys.readouterr().err
