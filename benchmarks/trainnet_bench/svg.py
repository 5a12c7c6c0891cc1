"""The benchmark charts (no dependencies, no external assets), on the collection's SVG code
(plugins/plugin_utils/svg_chart.py, shared with the link report filter).

throughput_chart(): throughput vs loss (log x axis) for one RTT, untuned vs tuned medians with
min-max whiskers, plus the Mathis bound and link x (1 - loss).
scenario_chart(): grouped bars, untuned vs tuned, for the TFO / PMTU / buffer scenarios.
"""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

from ansible_collections.longhaul.trainnet.plugins.plugin_utils.svg_chart import bar_chart, open_svg
from ansible_collections.longhaul.trainnet.plugins.plugin_utils.svg_chart import text as _text

from .profiles import loss_label

WIDTH, HEIGHT = 720, 400
MARGIN = {"left": 64, "right": 210, "top": 44, "bottom": 56}
COLORS = {"untuned": "#d62728", "tuned": "#1f77b4", "mathis": "#7f7f7f", "link": "#2ca02c"}


def nice_max(value: float) -> float:
    """A round axis maximum at or above value (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k)."""
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        candidate = step * 10 ** exponent
        if candidate >= value:
            return candidate
    return 10 ** (exponent + 1)


def ticks(maximum: float, count: int = 5) -> list[float]:
    return [maximum * i / count for i in range(count + 1)]


def throughput_chart(rtt_ms: float, points: list[dict], rate_mbit: float) -> str:
    """points: [{loss, untuned: {median,min,max}, tuned: {...}, mathis, link}] sorted by loss."""
    plot_w = WIDTH - MARGIN["left"] - MARGIN["right"]
    plot_h = HEIGHT - MARGIN["top"] - MARGIN["bottom"]
    losses = [p["loss"] for p in points if p["loss"] > 0] or [0.0001, 0.01]
    lo, hi = math.log10(min(losses)), math.log10(max(losses))
    if hi - lo < 1e-9:
        lo, hi = lo - 0.5, hi + 0.5
    pad = (hi - lo) * 0.08
    lo, hi = lo - pad, hi + pad
    y_max = nice_max(rate_mbit * 1.05)

    def x_of(loss):
        return MARGIN["left"] + (math.log10(loss) - lo) / (hi - lo) * plot_w

    def y_of(value):
        value = max(0.0, min(value, y_max))
        return MARGIN["top"] + plot_h - value / y_max * plot_h

    title = f"Single-stream throughput vs loss, {rate_mbit:g} Mbit/s, {rtt_ms:g} ms RTT"
    parts = [open_svg(WIDTH, HEIGHT, title),
             _text(MARGIN["left"], 24, title, 14, "start", 'font-weight="bold"')]
    for value in ticks(y_max):
        y = y_of(value)
        parts.append(f'<line x1="{MARGIN["left"]}" y1="{y:.1f}" x2="{MARGIN["left"] + plot_w}" '
                     f'y2="{y:.1f}" stroke="#e0e0e0"/>')
        parts.append(_text(MARGIN["left"] - 6, y + 4, f"{value:g}", 11, "end"))
    for loss in sorted({p["loss"] for p in points if p["loss"] > 0}):
        x = x_of(loss)
        parts.append(f'<line x1="{x:.1f}" y1="{MARGIN["top"]}" x2="{x:.1f}" '
                     f'y2="{MARGIN["top"] + plot_h}" stroke="#f0f0f0"/>')
        parts.append(_text(x, MARGIN["top"] + plot_h + 18, loss_label(loss), 11, "middle"))
    parts.append(f'<rect x="{MARGIN["left"]}" y="{MARGIN["top"]}" width="{plot_w}" '
                 f'height="{plot_h}" fill="none" stroke="#333"/>')
    parts.append(_text(MARGIN["left"] + plot_w / 2, HEIGHT - 12, "random loss (log scale)", 12,
                       "middle"))
    parts.append(_text(16, MARGIN["top"] + plot_h / 2, "Mbit/s (goodput)", 12, "middle",
                       f'transform="rotate(-90 16 {MARGIN["top"] + plot_h / 2:.1f})"'))

    def polyline(key, color, dash=""):
        coords = [(x_of(p["loss"]), y_of(p[key])) for p in points
                  if p["loss"] > 0 and p.get(key) is not None]
        if len(coords) < 1:
            return
        path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="1.5" '
                     f'{dash}/>')
        for x, y in coords:  # visible even with a single loss value
            parts.append(f'<rect x="{x - 3:.1f}" y="{y - 3:.1f}" width="6" height="6" fill="white" '
                         f'stroke="{color}" stroke-width="1.5"/>')

    polyline("link", COLORS["link"], 'stroke-dasharray="2,3"')
    polyline("mathis", COLORS["mathis"], 'stroke-dasharray="6,4"')
    for phase in ("untuned", "tuned"):
        color = COLORS[phase]
        coords = []
        for p in points:
            stats = p.get(phase) or {}
            if p["loss"] <= 0 or stats.get("median") is None:
                continue
            x = x_of(p["loss"])
            coords.append((x, y_of(stats["median"])))
            if stats.get("min") is not None and stats.get("max") is not None:
                y1, y2 = y_of(stats["min"]), y_of(stats["max"])
                parts.append(f'<line x1="{x:.1f}" y1="{y1:.1f}" x2="{x:.1f}" y2="{y2:.1f}" '
                             f'stroke="{color}" stroke-width="1.5"/>')
                for y in (y1, y2):
                    parts.append(f'<line x1="{x - 4:.1f}" y1="{y:.1f}" x2="{x + 4:.1f}" '
                                 f'y2="{y:.1f}" stroke="{color}" stroke-width="1.5"/>')
        if coords:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2.5"/>')
            for x, y in coords:
                parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}"/>')
    legend = [("untuned (Debian: CUBIC)", COLORS["untuned"], ""),
              ("tuned (data_plane: BBR)", COLORS["tuned"], ""),
              ("Mathis bound", COLORS["mathis"], 'stroke-dasharray="6,4"'),
              ("link × (1 − loss)", COLORS["link"], 'stroke-dasharray="2,3"')]
    lx = MARGIN["left"] + plot_w + 14
    for index, (label, color, dash) in enumerate(legend):
        y = MARGIN["top"] + 10 + index * 22
        parts.append(f'<line x1="{lx}" y1="{y}" x2="{lx + 24}" y2="{y}" stroke="{color}" '
                     f'stroke-width="2.5" {dash}/>')
        parts.append(_text(lx + 30, y + 4, label, 11))
    parts.append(_text(lx, MARGIN["top"] + 10 + len(legend) * 22 + 8,
                       "dots: median; bars: min–max", 10))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def scenario_chart(bars: list[dict], title: str) -> str:
    """bars: [{label, unit, untuned: float|None, tuned: float|None}] (each group scaled alone)."""
    groups = [{"label": bar["label"],
               "bars": [{"name": phase, "value": bar.get(phase), "colour": COLORS[phase],
                         "text": "" if bar.get(phase) is None else f"{bar[phase]:.3g} {bar['unit']}"}
                        for phase in ("untuned", "tuned")]}
              for bar in bars]
    return bar_chart(title, groups, scale="group", label_width=250, bar_width=340,
                     bar_height=22, gap=16) + "\n"


def chart_points(summary: dict, rtt_ms: float) -> list[dict]:
    points = []
    for row in summary.values():
        if row["kind"] != "throughput" or row["rtt_ms"] != rtt_ms:
            continue
        points.append({"loss": row["loss"],
                       "untuned": row["phases"]["untuned"]["throughput_mbps"],
                       "tuned": row["phases"]["tuned"]["throughput_mbps"],
                       "mathis": row["mathis_mbps"], "link": row["link_x_delivery_mbps"],
                       "rate": row["rate_mbit"]})
    return sorted(points, key=lambda p: p["loss"])


def scenario_bars(summary: dict) -> list[dict]:
    bars = []
    for row in summary.values():
        u, t = row["phases"]["untuned"], row["phases"]["tuned"]
        if row["kind"] == "tfo":
            bars.append({"label": "TFO: TTFB, lower is better", "unit": "ms",
                         "untuned": u["ttfb_ms"]["median"], "tuned": t["ttfb_ms"]["median"]})
        elif row["kind"] == "pmtu":
            bars.append({"label": "PMTU black hole (1400)", "unit": "Mbit/s",
                         "untuned": u["throughput_mbps"]["median"],
                         "tuned": t["throughput_mbps"]["median"]})
        elif row["kind"] == "buffer":
            bars.append({"label": "Buffer ceiling 200M x 300 ms", "unit": "Mbit/s",
                         "untuned": u["throughput_mbps"]["median"],
                         "tuned": t["throughput_mbps"]["median"]})
    return bars


def write_charts(data: dict, out_dir: Path) -> list[Path]:
    summary = data.get("summary") or {}
    written = []
    rtts = sorted({row["rtt_ms"] for row in summary.values() if row["kind"] == "throughput"})
    for rtt in rtts:
        points = chart_points(summary, rtt)
        path = Path(out_dir) / f"throughput-vs-loss-{rtt:g}ms.svg"
        path.write_text(throughput_chart(rtt, points, points[0]["rate"]))
        written.append(path)
    bars = scenario_bars(summary)
    if bars:
        path = Path(out_dir) / "scenarios.svg"
        path.write_text(scenario_chart(bars, "TFO, PMTU black hole, buffer ceiling: untuned vs tuned"))
        written.append(path)
    return written + write_pngs(written)


def write_pngs(svgs: list[Path]) -> list[Path]:
    """PNG copies with rsvg-convert (librsvg2-bin) when it is installed; none otherwise."""
    converter = shutil.which("rsvg-convert")
    if not converter:
        return []
    pngs = []
    for svg in svgs:
        png = svg.with_suffix(".png")
        result = subprocess.run([converter, "-o", str(png), str(svg)], capture_output=True,
                                timeout=60, check=False)
        if result.returncode == 0:
            pngs.append(png)
    return pngs
