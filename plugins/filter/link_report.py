# -*- coding: utf-8 -*-
# Copyright: (c) 2025, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Link measurement report filters used by playbooks/measure.yml.

Documentation of each filter is in the YAML file of the same name next to this one
(link_measure_pairs.yml, link_report_rows.yml, link_report_markdown.yml, link_report_html.yml,
link_report_compare_markdown.yml).

A pair record (what measure.yml stores per pair) is a dict with `source`, `peer`, `status`
(`ok` or `failed`), `msg` and `result` (the return value of longhaul.trainnet.link_measure,
possibly partial or empty when the measurement never ran). All rendering is done here, once.
"""

from __future__ import annotations

import html
import json

from ansible.errors import AnsibleFilterError
from ansible_collections.longhaul.trainnet.plugins.plugin_utils.svg_chart import bar_chart

COLUMNS = ("pair", "RTT avg ms", "RTT mdev ms", "loss %", "throughput Mbit/s", "retransmit %",
           "cc", "path MTU", "blackhole", "TFO saved ms", "status")


def _get(mapping, *keys):
    value = mapping
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _number(value):
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def link_measure_pairs(hostvars, groups, all_pairs=False, data_group="gpu_nodes",
                       master_group="home_master", anchor_group="control_plane",
                       site_var="trainnet_site"):
    """Default measurement pairs from the inventory, in a stable order.

    One data-plane host per site (the first by name) to the same of every other site, each site
    pair once; with all_pairs every cross-site data-plane pair. Then the first home master to
    every control anchor in another site (or any anchor when the master has no site).
    """
    if not isinstance(groups, dict):
        raise AnsibleFilterError("link_measure_pairs: groups must be a dict, got %r" % (groups,))

    def site_of(host):
        try:
            return hostvars[host].get(site_var)
        except (KeyError, AttributeError, TypeError):
            return None

    pairs = []
    seen = set()

    def add(source, peer):
        if source != peer and (source, peer) not in seen:
            seen.add((source, peer))
            pairs.append({"source": source, "peer": peer})

    data_hosts = sorted(groups.get(data_group) or [])
    by_site = {}
    for host in data_hosts:
        site = site_of(host)
        if site is None:
            raise AnsibleFilterError("link_measure_pairs: host %s in group %s has no %s"
                                     % (host, data_group, site_var))
        by_site.setdefault(site, []).append(host)
    sites = sorted(by_site)
    for i, site_a in enumerate(sites):
        for site_b in sites[i + 1:]:
            if all_pairs:
                for source in by_site[site_a]:
                    for peer in by_site[site_b]:
                        add(source, peer)
            else:
                add(by_site[site_a][0], by_site[site_b][0])
    masters = sorted(groups.get(master_group) or [])
    if masters:
        master = masters[0]
        master_site = site_of(master)
        for anchor in sorted(groups.get(anchor_group) or []):
            if master_site is None or site_of(anchor) != master_site:
                add(master, anchor)
    return pairs


def link_report_rows(records):
    """One flat dict per pair record, with the figures the report shows (None when missing)."""
    if not isinstance(records, (list, tuple)):
        raise AnsibleFilterError("link_report_rows: expected a list of pair records, got %s"
                                 % type(records).__name__)
    rows = []
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise AnsibleFilterError("link_report_rows: record %d is not a dict: %r"
                                     % (index, record))
        result = record.get("result") or {}
        if not isinstance(result, dict):
            result = {}
        source = record.get("source", "?")
        peer = record.get("peer", "?")
        rows.append({
            "pair": "%s -> %s" % (source, peer),
            "source": source,
            "peer": peer,
            "peer_address": result.get("peer_address") or record.get("peer_address"),
            "rtt_avg_ms": _number(_get(result, "rtt_ms", "avg")),
            "rtt_mdev_ms": _number(_get(result, "rtt_ms", "mdev")),
            "loss_pct": _number(result.get("loss_pct")),
            "throughput_mbps": _number(result.get("throughput_mbps")),
            "retransmit_pct": _number(result.get("retransmit_pct")),
            "congestion_control": result.get("congestion_control"),
            "path_mtu_bytes": result.get("path_mtu_bytes"),
            "pmtu_blackhole": result.get("pmtu_blackhole"),
            "tfo_saved_ms": _number(_get(result, "tfo", "saved_ms")),
            "status": record.get("status") or ("failed" if result.get("failed") else "ok"),
            "msg": record.get("msg") or result.get("msg") or "",
        })
    return rows


def _fmt(value, digits=2):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return ("%%.%df" % digits) % value
    return str(value)


def _md_cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def _cells(row):
    status = row["status"] if row["status"] == "ok" else "%s: %s" % (row["status"], row["msg"])
    return [row["pair"], _fmt(row["rtt_avg_ms"]), _fmt(row["rtt_mdev_ms"]),
            _fmt(row["loss_pct"]), _fmt(row["throughput_mbps"], 1),
            _fmt(row["retransmit_pct"]), _fmt(row["congestion_control"]),
            _fmt(row["path_mtu_bytes"]), _fmt(row["pmtu_blackhole"]),
            _fmt(row["tfo_saved_ms"], 1), status]


def link_report_markdown(records):
    """A Markdown table, one line per pair."""
    rows = link_report_rows(records)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for row in rows:
        lines.append("| " + " | ".join(_md_cell(c) for c in _cells(row)) + " |")
    return "\n".join(lines) + "\n"


# (row key, column title, digits) of the before/after table
COMPARE_COLUMNS = (("throughput_mbps", "throughput Mbit/s", 1), ("rtt_avg_ms", "RTT avg ms", 1),
                   ("retransmit_pct", "retransmit %", 2), ("loss_pct", "loss %", 2),
                   ("congestion_control", "cc", 0), ("path_mtu_bytes", "path MTU", 0),
                   ("tfo_saved_ms", "TFO saved ms", 1))


def _baseline_records(baseline, who):
    """The list of pair records of a baseline: a results document, its JSON text or a list."""
    if not baseline:
        return []
    if isinstance(baseline, str):
        try:
            baseline = json.loads(baseline)
        except ValueError as exc:
            raise AnsibleFilterError("%s: baseline is not JSON: %s" % (who, exc))
    if isinstance(baseline, dict):
        baseline = baseline.get("pairs", [])
    return baseline


def _change(old, new, digits):
    if digits:
        return "%s -> %s" % (_fmt(_number(old), digits), _fmt(_number(new), digits))
    return "%s -> %s" % (_fmt(old), _fmt(new))


def _status_text(label, row):
    if row is None:
        return "%s: not measured" % label
    if row["status"] == "ok":
        return None
    return "%s %s: %s" % (label, row["status"], row["msg"])


def link_report_compare_markdown(records, baseline):
    """A Markdown before/after table: one line per pair, each cell `before -> after`.

    `records` are this run's pair records (after), `baseline` an earlier results document
    (a dict with `pairs`), its JSON text or its list of records (before). Pairs are matched
    by `source -> peer`, in the baseline's order, then pairs only this run has.
    """
    before = link_report_rows(_baseline_records(baseline, "link_report_compare_markdown"))
    after = link_report_rows(records)
    before_by_pair = dict((row["pair"], row) for row in before)
    after_by_pair = dict((row["pair"], row) for row in after)
    order = [row["pair"] for row in before]
    order += [row["pair"] for row in after if row["pair"] not in before_by_pair]
    titles = ["pair"] + ["%s before -> after" % title for _k, title, _d in COMPARE_COLUMNS] + ["status"]
    lines = ["| " + " | ".join(titles) + " |", "|" + " --- |" * len(titles)]
    empty = dict.fromkeys(key for key, _t, _d in COMPARE_COLUMNS)
    for pair in order:
        old = before_by_pair.get(pair)
        new = after_by_pair.get(pair)
        cells = [pair]
        for key, _title, digits in COMPARE_COLUMNS:
            cells.append(_change((old or empty)[key], (new or empty)[key], digits))
        problems = [text for text in (_status_text("before", old), _status_text("after", new)) if text]
        cells.append("; ".join(problems) if problems else "ok")
        lines.append("| " + " | ".join(_md_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


CHARTS = (("rtt_avg_ms", "RTT (ms, average)"), ("throughput_mbps", "Throughput (Mbit/s)"),
          ("retransmit_pct", "Retransmissions (% of segments)"))


def _svg_chart(title, metric, rows, before):
    """Horizontal bar chart, one group per pair; with `before` a grey bar above each blue one."""
    groups = []
    for row in rows:
        bars = []
        if before is not None:
            bars.append({"name": "before", "colour": "#9e9e9e",
                         "value": before.get(row["pair"], {}).get(metric)})
        bars.append({"name": "now", "colour": "#1f77b4" if row["status"] == "ok" else "#d62728",
                     "value": row[metric]})
        for item in bars:
            item["text"] = _fmt(item["value"])
        groups.append({"label": row["pair"], "bars": bars})
    return bar_chart(title, groups)


def link_report_html(records, baseline=None, title="Link measurements"):
    """A self-contained HTML page: the table and inline SVG bar charts (no external assets).

    `baseline` is an earlier results document (a dict with `pairs`) or its list of records;
    its figures are drawn as grey "before" bars next to each pair's current one.
    """
    rows = link_report_rows(records)
    before = None
    if baseline:
        baseline = _baseline_records(baseline, "link_report_html")
        before = {row["pair"]: row for row in link_report_rows(baseline)}
    esc = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8"/>',
             "<title>%s</title>" % esc(title),
             "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:3px 6px;font-size:13px}"
             "tr.failed td{background:#fde0e0}svg{display:block;margin:1em 0}</style>",
             "</head><body>", "<h1>%s</h1>" % esc(title)]
    failed = [r for r in rows if r["status"] != "ok"]
    parts.append("<p>%d pairs, %d failed.%s</p>" % (
        len(rows), len(failed),
        " Grey bars: baseline, blue: this run." if before is not None else ""))
    parts.append("<table><tr>%s</tr>" % "".join("<th>%s</th>" % esc(c) for c in COLUMNS))
    for row in rows:
        parts.append('<tr class="%s">%s</tr>' % (
            "ok" if row["status"] == "ok" else "failed",
            "".join("<td>%s</td>" % esc(c) for c in _cells(row))))
    parts.append("</table>")
    for metric, chart_title in CHARTS:
        parts.append(_svg_chart(chart_title, metric, rows, before))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


class FilterModule(object):
    """Link measurement report filters."""

    def filters(self):
        return {
            "link_measure_pairs": link_measure_pairs,
            "link_report_rows": link_report_rows,
            "link_report_markdown": link_report_markdown,
            "link_report_html": link_report_html,
            "link_report_compare_markdown": link_report_compare_markdown,
        }
