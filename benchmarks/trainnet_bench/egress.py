"""Egress-pool benchmark analysis: throughput from byte-counter samples, steady state as a
multiple of the per-path cap R, the recovery after an upstream is killed, and the chart. Pure."""

from __future__ import annotations

from ansible_collections.longhaul.trainnet.plugins.plugin_utils import svg_chart


def rate_series(samples: list[tuple[float, int]], window_s: float = 1.0) -> list[tuple[float, float]]:
    """(time, bytes) counter samples -> (time, Mbit/s over the preceding window_s)."""
    out = []
    start = 0
    for end in range(1, len(samples)):
        t_end, b_end = samples[end]
        while start < end - 1 and t_end - samples[start + 1][0] >= window_s:
            start += 1
        t_start, b_start = samples[start]
        if t_end - t_start >= window_s * 0.5:
            out.append((t_end, (b_end - b_start) * 8 / (t_end - t_start) / 1e6))
    return out


def mean_rate(samples: list[tuple[float, int]], start: float, end: float) -> float | None:
    """Mbit/s between the first sample at or after START and the last at or before END."""
    inside = [s for s in samples if start <= s[0] <= end]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) * 8 / (inside[-1][0] - inside[0][0]) / 1e6


def steady_rate(samples: list[tuple[float, int]], skip_s: float = 3.0, tail_s: float = 2.0) -> float | None:
    """Mean rate without the first skip_s (slow start, connection set-up) and the last tail_s
    (the last shards finishing)."""
    if len(samples) < 2:
        return None
    return mean_rate(samples, samples[0][0] + skip_s, samples[-1][0] - tail_s)


def recovery_s(samples: list[tuple[float, int]], kill_t: float, threshold_mbit: float,
               window_s: float = 2.0) -> float | None:
    """Seconds from the kill until the rate over window_s is back at threshold_mbit (None: never)."""
    for t, rate in rate_series([s for s in samples if s[0] >= kill_t], window_s):
        if rate >= threshold_mbit:
            return round(t - kill_t, 2)
    return None


def lowest_rate_after(samples, kill_t, seconds, window_s=1.0):
    rates = [r for t, r in rate_series(samples, window_s) if kill_t <= t <= kill_t + seconds]
    return min(rates) if rates else None


def full_pool_until(samples: list[tuple[float, int]], payload_bytes: int, busy_bytes: float) -> float:
    """The last sample time at which more than busy_bytes of the payload were still to come (the
    counters hold headers too: the remaining payload is taken in proportion)."""
    total = samples[-1][1] - samples[0][1]
    if total <= 0 or payload_bytes <= 0:
        return samples[-1][0]
    inside = [t for t, b in samples if (samples[-1][1] - b) / total * payload_bytes > busy_bytes]
    return inside[-1] if inside else samples[0][0]


def summarize(run: dict, rate_mbit: float, shard_bytes: int = 0) -> dict:
    """One run (samples, report of trainnet-fetch-shards, optional kill time) -> figures.

    After a kill, the settled rate is taken from 10 s after the kill until fewer shards remain than
    live paths (shard_bytes given): past that the job's own tail (the last shards, the one retried
    from the dead path) cannot fill the pool, whatever the pool can carry."""
    samples = [tuple(s) for s in run["samples"]]
    out = {"paths": run["paths"], "label": run["label"], "shards": run["report"]["shards"],
           "ok": run["report"]["ok"], "failed": len(run["report"]["failed"]),
           "corrupt_on_arrival": len(run["report"]["corrupt"]), "seconds": run["report"]["seconds"],
           "bytes": run["report"]["bytes"]}
    out["mean_mbit"] = round(run["report"]["bytes"] * 8 / run["report"]["seconds"] / 1e6, 2) if run["report"]["seconds"] else None
    kill_t = run.get("kill_t")
    if kill_t is None:
        steady = steady_rate(samples)
        out["steady_mbit"] = round(steady, 2) if steady is not None else None
    else:
        before = mean_rate(samples, samples[0][0] + 3.0, kill_t)
        settle = kill_t + 10.0
        end = samples[-1][0] - 2.0
        if shard_bytes:
            end = min(end, full_pool_until(samples, run["report"]["bytes"], (run["paths"] - 1) * shard_bytes))
        after = mean_rate(samples, settle, end)
        out["settled_window_s"] = [round(settle - samples[0][0], 1), round(end - samples[0][0], 1)]
        out["before_kill_mbit"] = round(before, 2) if before is not None else None
        out["after_kill_mbit"] = round(after, 2) if after is not None else None
        out["recovery_s_to_2.7R"] = recovery_s(samples, kill_t, 2.7 * rate_mbit)
        out["kill_at_s"] = round(kill_t - samples[0][0], 2)
    for key in ("steady_mbit", "before_kill_mbit", "after_kill_mbit"):
        if out.get(key) is not None:
            out[key.replace("_mbit", "_x_R")] = round(out[key] / rate_mbit, 2)
    return out


COLORS = ["#1f77b4", "#2ca02c", "#d62728", "#9467bd"]


def chart(runs: list[dict], rate_mbit: float, width: int = 760, height: int = 380) -> str:
    """Throughput over time (1 s windows) of each run, with R, 2.7R, 3R and 4R marked."""
    left, right, top, bottom = 60, 20, 40, 70
    series = []
    for run in runs:
        samples = [tuple(s) for s in run["samples"]]
        if len(samples) < 2:
            continue
        t0 = samples[0][0]
        series.append((run, [(t - t0, r) for t, r in rate_series(samples, 1.0)], (run.get("kill_t") or t0) - t0))
    t_max = max([p[0] for _, pts, _ in series for p in pts] + [1.0])
    y_max = max([p[1] for _, pts, _ in series for p in pts] + [4.4 * rate_mbit])
    plot_w, plot_h = width - left - right, height - top - bottom

    def x_of(t):
        return left + plot_w * t / t_max

    def y_of(v):
        return top + plot_h * (1 - v / y_max)

    parts = [svg_chart.open_svg(width, height, "Egress pool: download throughput over time"),
             svg_chart.text(width / 2, 22, "Shard download through the egress pool (each path capped at R = %g Mbit/s)"
                            % rate_mbit, 14, "middle")]
    parts.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>' % (left, top, plot_w, plot_h))
    for multiple, dash in ((1, "2,3"), (2.7, "1,4"), (3, "2,3"), (4, "2,3")):
        y = y_of(multiple * rate_mbit)
        parts.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#999" stroke-dasharray="%s"/>'
                     % (left, left + plot_w, y, y, dash))
        parts.append(svg_chart.text(left + plot_w - 4, y - 3, "%gR" % multiple, 10, "end", 'fill="#666"'))
    step = max(1, int(round(t_max / 8.0)))
    for t in range(0, int(t_max) + 1, step):
        parts.append(svg_chart.text(x_of(t), top + plot_h + 16, "%d" % t, 10, "middle"))
    for i in range(0, 6):
        v = y_max * i / 5
        parts.append(svg_chart.text(left - 6, y_of(v) + 4, "%.0f" % v, 10, "end"))
    parts.append(svg_chart.text(left + plot_w / 2, top + plot_h + 34, "seconds since the download started", 11, "middle"))
    parts.append(svg_chart.text(14, top + plot_h / 2, "Mbit/s", 11, "middle",
                                'transform="rotate(-90 14 %.1f)"' % (top + plot_h / 2)))
    for index, (run, pts, kill) in enumerate(series):
        color = COLORS[index % len(COLORS)]
        path = " ".join("%.1f,%.1f" % (x_of(t), y_of(v)) for t, v in pts)
        parts.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>' % (path, color))
        if run.get("kill_t") is not None:
            parts.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-dasharray="4,3"/>'
                         % (x_of(kill), x_of(kill), top, top + plot_h, color))
            parts.append(svg_chart.text(x_of(kill) + 3, top + 12, "one path killed", 10, "start", 'fill="%s"' % color))
        lx = left + 10 + index * 240
        parts.append('<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="3"/>'
                     % (lx, lx + 18, height - 14, height - 14, color))
        parts.append(svg_chart.text(lx + 24, height - 10, run["label"], 11))
    parts.append("</svg>")
    return "".join(parts)
