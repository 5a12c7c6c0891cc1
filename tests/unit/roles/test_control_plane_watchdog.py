# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The control-plane watchdog script: parsing wg/birdc/ip output and the metrics it renders."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import importlib.machinery
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "roles", "control_plane", "files", "trainnet-control-plane-watchdog")


def load():
    loader = importlib.machinery.SourceFileLoader("cp_watchdog", SCRIPT)
    spec = importlib.util.spec_from_loader("cp_watchdog", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


W = load()

BIRDC = """BIRD 2.0.12 ready.
cp_bfd:
IP address                Interface  State      Since         Interval  Timeout
169.254.2.1               wg-usw-anchor Up         00:01:02.345    0.050    0.150
169.254.3.1               wg-use-anchor Down       00:01:09.001    1.000    0.000
"""


def test_parse_handshakes():
    text = "wg-usw-anchor\tPUBA=\t1700000000\nwg-use-anchor\tPUBB=\t0\n"
    assert W.parse_handshakes(text) == {"wg-usw-anchor": 1700000000, "wg-use-anchor": 0}
    assert W.parse_handshakes(None) == {}


def test_parse_bfd_sessions():
    assert W.parse_bfd_sessions(BIRDC) == [
        {"address": "169.254.2.1", "interface": "wg-usw-anchor", "state": "Up"},
        {"address": "169.254.3.1", "interface": "wg-use-anchor", "state": "Down"},
    ]


def test_parse_route_dev():
    assert W.parse_route_dev('[{"dst":"10.255.0.1","dev":"wg-use-anchor","prefsrc":"10.254.0.1"}]') == "wg-use-anchor"
    assert W.parse_route_dev("garbage") is None
    assert W.parse_route_dev(None) is None


def test_render_on_master_after_failover():
    peers = {"wg-usw-anchor": "usw-anchor", "wg-use-anchor": "use-anchor"}
    text = W.render(1700000100, {"wg-usw-anchor": 1700000000, "wg-use-anchor": 0},
                    W.parse_bfd_sessions(BIRDC), "wg-use-anchor", peers, "usw-anchor", "10.255.0.1")
    assert 'trainnet_control_plane_handshake_age_seconds{interface="wg-usw-anchor",peer="usw-anchor"} 100' in text
    # never handshaken: no age sample, tunnel down
    assert 'handshake_age_seconds{interface="wg-use-anchor"' not in text
    assert 'trainnet_control_plane_tunnel_up{interface="wg-use-anchor",peer="use-anchor"} 0' in text
    assert 'trainnet_control_plane_tunnel_up{interface="wg-usw-anchor",peer="usw-anchor"} 1' in text
    assert ('trainnet_control_plane_bfd_session_up{interface="wg-use-anchor",neighbor="169.254.3.1",'
            'peer="use-anchor",state="Down"} 0') in text
    assert 'trainnet_control_plane_active_anchor{anchor="use-anchor",interface="wg-use-anchor"' in text
    assert 'trainnet_control_plane_rendezvous_on_primary{primary="usw-anchor"} 0' in text


def test_render_on_primary_serving_itself():
    text = W.render(10, {}, [], "lo", {}, "usw-anchor", "10.255.0.1")
    assert 'trainnet_control_plane_rendezvous_on_primary{primary="usw-anchor"} 1' in text


def test_stale_handshake_is_down():
    text = W.render(1000, {"wg-x": 1000 - 181}, [], None, {"wg-x": "x"}, "p", "10.255.0.1")
    assert 'trainnet_control_plane_tunnel_up{interface="wg-x",peer="x"} 0' in text
    assert 'trainnet_control_plane_active_anchor{anchor="none",interface="none"' in text


def test_read_peers(tmp_path):
    (tmp_path / "wg-a.env").write_text("PEER='usw-anchor'\nMTU=1320\n")
    (tmp_path / "other.txt").write_text("PEER=x\n")
    assert W.read_peers(str(tmp_path)) == {"wg-a": "usw-anchor"}
