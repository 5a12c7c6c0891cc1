# -*- coding: utf-8 -*-
# Copyright: (c) 2025, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.longhaul.trainnet.plugins.filter.link_report import (
    FilterModule, link_measure_pairs, link_report_compare_markdown, link_report_html, link_report_markdown,
    link_report_rows)

HOSTVARS = {
    "cn-master": {"trainnet_site": "cn-home"}, "cn-gpu1": {"trainnet_site": "cn-home"},
    "usw-anchor": {"trainnet_site": "us-west"}, "usw-gpu1": {"trainnet_site": "us-west"},
    "usw-gpu2": {"trainnet_site": "us-west"}, "use-anchor": {"trainnet_site": "us-east"},
    "use-gpu1": {"trainnet_site": "us-east"},
}
GROUPS = {"home_master": ["cn-master"], "control_plane": ["usw-anchor", "use-anchor"],
          "gpu_nodes": ["cn-gpu1", "usw-gpu2", "usw-gpu1", "use-gpu1"]}

OK_RESULT = {"peer_address": "198.18.2.11", "rtt_ms": {"avg": 150.42, "mdev": 0.31, "min": 150.1,
                                                       "max": 151.0},
             "loss_pct": 0.5, "throughput_mbps": 47.83, "retransmit_pct": 0.71,
             "congestion_control": "bbr", "path_mtu_bytes": 1400, "pmtu_blackhole": True,
             "tfo": {"saved_ms": 150.4}, "msg": "ok", "failed": False}


def record(source="cn-gpu1", peer="usw-gpu1", status="ok", msg="", result=None):
    return {"source": source, "peer": peer, "status": status, "msg": msg,
            "result": OK_RESULT if result is None else result}


def test_filters_registered():
    expected = {"link_measure_pairs", "link_report_rows", "link_report_markdown",
                "link_report_html", "link_report_compare_markdown"}
    assert set(FilterModule().filters()) == expected


def test_default_pairs_one_host_per_site_and_master_to_anchors():
    pairs = link_measure_pairs(HOSTVARS, GROUPS)
    assert pairs == [
        {"source": "cn-gpu1", "peer": "use-gpu1"},
        {"source": "cn-gpu1", "peer": "usw-gpu1"},
        {"source": "use-gpu1", "peer": "usw-gpu1"},
        {"source": "cn-master", "peer": "use-anchor"},
        {"source": "cn-master", "peer": "usw-anchor"},
    ]


def test_all_pairs_crosses_every_site_pair_and_never_within_a_site():
    pairs = link_measure_pairs(HOSTVARS, GROUPS, all_pairs=True)
    data = [p for p in pairs if p["source"] != "cn-master"]
    assert len(data) == 1 * 2 + 1 * 1 + 1 * 2  # cn-us-east, cn-us-west, us-east-us-west
    for pair in data:
        assert HOSTVARS[pair["source"]]["trainnet_site"] != HOSTVARS[pair["peer"]]["trainnet_site"]
    assert {"source": "cn-gpu1", "peer": "usw-gpu2"} in data


def test_pairs_master_skips_anchor_of_its_own_site_and_empty_groups():
    hostvars = dict(HOSTVARS, **{"cn-anchor": {"trainnet_site": "cn-home"}})
    groups = {"home_master": ["cn-master"], "control_plane": ["cn-anchor", "usw-anchor"]}
    assert link_measure_pairs(hostvars, groups) == [{"source": "cn-master", "peer": "usw-anchor"}]
    assert link_measure_pairs({}, {}) == []


def test_pairs_refuse_data_host_without_site():
    with pytest.raises(AnsibleFilterError, match="x1 in group gpu_nodes has no trainnet_site"):
        link_measure_pairs({"x1": {}}, {"gpu_nodes": ["x1"]})


def test_rows_flatten_and_tolerate_missing_results():
    rows = link_report_rows([record(), record(status="failed", msg="cn-gpu1 is unreachable",
                                              result={})])
    assert rows[0]["rtt_avg_ms"] == 150.42 and rows[0]["tfo_saved_ms"] == 150.4
    assert rows[0]["pmtu_blackhole"] is True and rows[0]["pair"] == "cn-gpu1 -> usw-gpu1"
    assert rows[1]["throughput_mbps"] is None and rows[1]["msg"] == "cn-gpu1 is unreachable"
    with pytest.raises(AnsibleFilterError, match="expected a list"):
        link_report_rows({"a": 1})
    with pytest.raises(AnsibleFilterError, match="record 0 is not a dict"):
        link_report_rows(["x"])


def test_markdown_table():
    text = link_report_markdown([
        record(),
        record(peer="use-gpu1", status="failed",
               msg="thresholds missed for peer 198.18.3.11: min_throughput_mbps 60 > measured 48.2 | x",
               result=dict(OK_RESULT, rtt_ms=None, tfo=None, pmtu_blackhole=False))])
    lines = text.splitlines()
    assert lines[0].startswith("| pair | RTT avg ms | RTT mdev ms | loss % | throughput Mbit/s |")
    assert len(lines) == 4
    assert lines[2] == ("| cn-gpu1 -> usw-gpu1 | 150.42 | 0.31 | 0.50 | 47.8 | 0.71 | bbr | 1400 "
                        "| yes | 150.4 | ok |")
    assert "| - | - |" in lines[3] and "| no |" in lines[3]
    assert "failed: thresholds missed for peer 198.18.3.11: min_throughput_mbps 60" in lines[3]
    assert "\\| x" in lines[3]  # a pipe in a message does not break the table
    for line in lines:
        assert len(re.findall(r"(?<!\\)\|", line)) == 12


def test_html_is_self_contained_and_well_formed():
    page = link_report_html([record(), record(peer="use-gpu1", status="failed", msg="<boom>",
                                              result={})], title="Lab & co")
    assert page.startswith("<!DOCTYPE html>")
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in page and "<script" not in page and "<link" not in page
    assert page.count("<svg") == 3 and "&lt;boom&gt;" in page and "Lab &amp; co" in page
    ET.fromstring(page.split("\n", 1)[1])  # the rest is well-formed XML
    assert "n/a" in page  # the failed pair has no figures


def test_html_baseline_draws_before_bars():
    before = {"pairs": [record(result=dict(OK_RESULT, throughput_mbps=1.0))]}
    page = link_report_html([record()], baseline=before)
    assert "Grey bars: baseline" in page
    assert "cn-gpu1 -&gt; usw-gpu1 before: 1.00" in page
    assert "cn-gpu1 -&gt; usw-gpu1 now: 47.83" in page
    # the baseline may be given as the JSON text of results.json
    assert link_report_html([record()], baseline=json.dumps(before)) == page
    with pytest.raises(AnsibleFilterError, match="baseline is not JSON"):
        link_report_html([record()], baseline="{nope")


def test_html_bar_lengths_scale_to_largest_value():
    a = record(result=dict(OK_RESULT, throughput_mbps=50.0))
    b = record(peer="use-gpu1", result=dict(OK_RESULT, throughput_mbps=25.0))
    page = link_report_html([a, b])
    widths = re.findall(r'<rect x="220" y="\d+" width="([0-9.]+)"[^>]*><title>[^<]*now: (25|50)\.00',
                        page)
    assert ("360.0", "50") in widths and ("180.0", "25") in widths


def test_compare_markdown_before_after_per_pair():
    before = {"pairs": [
        record(result=dict(OK_RESULT, throughput_mbps=0.0, retransmit_pct=12.5, congestion_control="cubic",
                           tfo={"saved_ms": 0.2})),
        record(source="cn-master", peer="use-anchor", status="failed", msg="iperf3: boom", result={}),
    ]}
    after = [record(), record(source="cn-master", peer="use-anchor"),
             record(source="use-gpu1", peer="usw-gpu1")]
    text = link_report_compare_markdown(after, before)
    lines = text.splitlines()
    assert text.endswith("\n") and len(lines) == 5
    assert lines[0] == ("| pair | throughput Mbit/s before -> after | RTT avg ms before -> after "
                        "| retransmit % before -> after | loss % before -> after | cc before -> after "
                        "| path MTU before -> after | TFO saved ms before -> after | status |")
    # a stalled transfer is 0.0, not missing
    assert lines[2] == ("| cn-gpu1 -> usw-gpu1 | 0.0 -> 47.8 | 150.4 -> 150.4 | 12.50 -> 0.71 "
                        "| 0.50 -> 0.50 | cubic -> bbr | 1400 -> 1400 | 0.2 -> 150.4 | ok |")
    assert lines[3].startswith("| cn-master -> use-anchor | - -> 47.8 | - -> 150.4 |")
    assert lines[3].endswith("| before failed: iperf3: boom |")
    # a pair only the current run has comes last
    assert lines[4].startswith("| use-gpu1 -> usw-gpu1 | - -> 47.8 |")
    assert lines[4].endswith("| before: not measured |")
    for line in lines:
        assert len(re.findall(r"(?<!\\)\|", line)) == 10


def test_compare_markdown_baseline_forms_and_after_failure():
    before = {"pairs": [record()]}
    after = [record(status="failed", msg="a | b", result=dict(OK_RESULT, throughput_mbps=None))]
    text = link_report_compare_markdown(after, before)
    assert link_report_compare_markdown(after, json.dumps(before)) == text
    assert link_report_compare_markdown(after, before["pairs"]) == text
    assert "| 47.8 -> - |" in text and "after failed: a \\| b |" in text
    # no baseline: every pair is "before: not measured"
    assert "before: not measured" in link_report_compare_markdown(after, None)
    with pytest.raises(AnsibleFilterError, match="link_report_compare_markdown: baseline is not JSON"):
        link_report_compare_markdown(after, "{nope")
    assert FilterModule().filters()["link_report_compare_markdown"] is link_report_compare_markdown
