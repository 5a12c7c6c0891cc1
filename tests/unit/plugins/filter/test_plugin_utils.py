# -*- coding: utf-8 -*-
# Copyright: (c) 2025, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller-side shared code the filters stand on: plugin_utils/bdp.py and svg_chart.py."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from fractions import Fraction

import pytest

from ansible_collections.longhaul.trainnet.plugins.filter import buffer_sizing, link_report
from ansible_collections.longhaul.trainnet.plugins.plugin_utils import bdp, svg_chart

SVG = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize("bandwidth, rtt, expected", [
    (1000, 200, 25000000), (10000, "70", 87500000), (50, 150.0, 937500),
    (1, 524.8, 65600),      # float arithmetic gives 65599.99999999999
    (0.1, 0.3, 4),          # 3.75 bytes, rounded up
])
def test_bdp_bytes_is_exact_and_rounds_up(bandwidth, rtt, expected):
    assert bdp.bdp_bytes(bandwidth, rtt) == expected
    assert isinstance(bdp.bdp_bytes(bandwidth, rtt), int)
    assert bdp.bdp(bandwidth, rtt) == Fraction(str(bandwidth)) * Fraction(str(rtt)) * 125


@pytest.mark.parametrize("value, error, text", [
    (True, TypeError, "boolean"), (None, TypeError, "NoneType"), ([1], TypeError, "list"),
    ("fast", ValueError, "'fast'"), (float("nan"), ValueError, "finite"),
    (float("inf"), ValueError, "finite"),
])
def test_exact_refuses_what_is_not_a_number(value, error, text):
    with pytest.raises(error, match=text):
        bdp.exact(value)


def test_window_limited_rate_is_the_inverse_of_the_bdp():
    # Debian's tcp_wmem max (4 MiB) over 300 ms carries at most ~111.8 Mbit/s.
    assert bdp.window_limited_mbps(4194304, 300) == pytest.approx(111.848, abs=0.001)
    assert bdp.window_limited_mbps(bdp.bdp_bytes(200, 300), 300) == 200.0
    with pytest.raises(ValueError, match="greater than 0"):
        bdp.window_limited_mbps(1000, 0)


def test_filter_messages_name_the_argument_for_shared_errors():
    from ansible.errors import AnsibleFilterError
    with pytest.raises(AnsibleFilterError, match=r"bdp_bytes: rtt_ms must be a number, got a boolean"):
        buffer_sizing.bdp_bytes(100, True)
    with pytest.raises(AnsibleFilterError, match=r"bdp_bytes: bandwidth_mbps must be a finite number"):
        buffer_sizing.bdp_bytes(float("nan"), 10)


def _chart(**kwargs):
    groups = [{"label": "a <&> b", "bars": [
        {"name": "before", "value": 10.0, "colour": "#9e9e9e", "text": "10 ms"},
        {"name": "now", "value": None, "colour": "#1f77b4"}]},
        {"label": "c", "bars": [{"name": "now", "value": 0.5, "colour": "#1f77b4"}]}]
    return ET.fromstring(svg_chart.bar_chart("T & t", groups, **kwargs))


def test_bar_chart_is_self_contained_escaped_and_labelled():
    root = _chart()
    assert root.tag == SVG + "svg" and root.get("role") == "img"
    assert root.find(SVG + "title").text == "T & t"
    texts = [t.text for t in root.iter(SVG + "text")]
    assert "a <&> b" in texts and "now: n/a" in texts and "before: 10 ms" in texts
    assert "now: 0.5" in texts  # default text: the value as is
    tooltips = [r.find(SVG + "title").text for r in root.iter(SVG + "rect") if r.find(SVG + "title") is not None]
    assert tooltips == ["a <&> b before: 10 ms", "c now: 0.5"]


def test_bar_chart_scales_per_chart_or_per_group():
    def widths(root):
        return [float(r.get("width")) for r in root.iter(SVG + "rect") if r.find(SVG + "title") is not None]
    assert widths(_chart(bar_width=200)) == [200.0, 10.0]            # 0.5 of 10
    assert widths(_chart(bar_width=200, scale="group")) == [200.0, 200.0]
    with pytest.raises(ValueError, match="scale"):
        _chart(scale="log")


def test_link_report_charts_are_drawn_by_the_shared_renderer(monkeypatch):
    calls = []

    def fake_bar_chart(title, groups, **kwargs):
        calls.append((title, groups))
        return "<svg/>"
    monkeypatch.setattr(link_report, "bar_chart", fake_bar_chart)
    record = {"source": "a", "peer": "b", "status": "ok", "result": {"throughput_mbps": 40.0}}
    page = link_report.link_report_html([record])
    assert page.count("<svg/>") == 3
    titles = [title for title, _groups in calls]
    assert titles == [title for _metric, title in link_report.CHARTS]
    throughput = dict(calls)["Throughput (Mbit/s)"]
    assert throughput == [{"label": "a -> b", "bars": [
        {"name": "now", "colour": "#1f77b4", "value": 40.0, "text": "40.00"}]}]
