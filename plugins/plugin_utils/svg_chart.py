# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""SVG charts written once for the link report filter (the charts of measure.yml's report.html)
and the benchmarks (scenarios.svg and the primitives of its line charts). Controller side, pure,
standard library only.

The output is self-contained (no scripts, fonts, stylesheets or links), so it can be inlined in
an HTML page, opened from a file or converted to PNG, and every text is XML-escaped.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

FONT_FAMILY = "DejaVu Sans, Arial, sans-serif"


def text(x, y, content, size=12, anchor="start", extra=""):
    """One escaped <text> element; `extra` holds further attributes (already valid XML)."""
    return ('<text x="%.1f" y="%.1f" font-size="%s" text-anchor="%s"%s>%s</text>'
            % (x, y, size, anchor, (" " + extra) if extra else "", escape(str(content))))


def open_svg(width, height, title):
    """The root element with a <title> (what screen readers announce) and a white background
    (PNG converters would otherwise make it transparent). Close it with "</svg>"."""
    return ('<svg xmlns="http://www.w3.org/2000/svg" role="img" width="%d" height="%d" '
            'viewBox="0 0 %d %d" font-family="%s"><title>%s</title>'
            '<rect width="%d" height="%d" fill="white"/>'
            % (width, height, width, height, FONT_FAMILY, escape(str(title)), width, height))


def _scale(values):
    """The value a full-length bar stands for: the largest one, or 1 when none is positive."""
    values = [v for v in values if v is not None]
    return max(values) if values and max(values) > 0 else 1.0


def bar_chart(title, groups, scale="chart", label_width=220, bar_width=360, bar_height=14,
              gap=10, value_width=130):
    """Horizontal bars in labelled groups, one bar per line.

    groups: [{"label": str, "bars": [{"name": str, "value": number or None, "colour": str,
    "text": str}]}]; "text" is how the value is written (default: the value as is).
    scale: "chart" draws every bar against the chart's largest value (comparable lengths);
    "group" scales each group to its own largest value (groups in different units).
    A bar with a value is drawn at least 1 px long (a zero stays visible), with a tooltip
    "<label> <name>: <text>" and "<name>: <text>" to its right; a bar without one is written
    "<name>: n/a".
    """
    if scale not in ("chart", "group"):
        raise ValueError("scale must be 'chart' or 'group', got %r" % (scale,))
    rows = sum(max(len(group["bars"]), 1) for group in groups)
    height = 30 + rows * bar_height + max(len(groups), 1) * gap
    width = label_width + bar_width + value_width
    chart_scale = _scale(item["value"] for group in groups for item in group["bars"])
    out = [open_svg(width, height, title), text(0, 16, title, 14, extra='font-weight="bold"')]
    y = 28
    for group in groups:
        group_scale = (chart_scale if scale == "chart"
                       else _scale(item["value"] for item in group["bars"]))
        out.append(text(0, y + bar_height - 2, group["label"], 12))
        for item in group["bars"]:
            value = item["value"]
            if value is None:
                out.append(text(label_width, y + bar_height - 3, "%s: n/a" % item["name"], 11,
                                extra='fill="#666"'))
            else:
                shown = item.get("text", str(value))
                length = max(1.0, bar_width * value / group_scale)
                out.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"><title>%s</title></rect>'
                           % (label_width, y, length, bar_height - 2, item["colour"],
                              escape("%s %s: %s" % (group["label"], item["name"], shown))))
                out.append(text(label_width + length + 4, y + bar_height - 3,
                                "%s: %s" % (item["name"], shown), 11))
            y += bar_height
        y += gap
    out.append("</svg>")
    return "".join(out)
