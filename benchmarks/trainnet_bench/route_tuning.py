"""Per-route tuning benchmark (issue 12): the plan, the summaries, the table and the charts.

Three phases on the same two hosts, over the same emulated links:
  untuned    Debian 12 defaults (CUBIC, initcwnd 10, MTU 1500);
  global     the data_plane role as before issue 12: BBR as the host default, large buffers;
  per-route  the data_plane role with the host default congestion control left alone (the LAN keeps
             it) and the route to the far site carrying the path's tuning: congctl bbr, initcwnd and
             initrwnd for a 1 MiB first flight (at most the path's BDP), the congestion window capped
             at data_plane_path_route_cwnd_clamp_bdp BDPs.
Per link profile: iperf3 bulk throughput and retransmissions, and the time a new connection takes
to deliver 1 MiB and 16 MiB (first_transfer.py), in round trips of the path.
Pure logic: no lab, no processes (benchmarks/route_tuning_lab.py runs it).
"""

from __future__ import annotations

import statistics

from ansible_collections.longhaul.trainnet.plugins.plugin_utils import svg_chart

from .profiles import Scenario, loss_label

RATE_MBIT = 50
PHASES = ("untuned", "global", "per-route")
COLOURS = {"untuned": "#d62728", "global": "#1f77b4", "per-route": "#2ca02c"}
TRANSFERS = (1_048_576, 16_777_216)
# Gilbert-Elliott bursts: the mean number of packets lost in a row.
BURST_PACKETS = 4
# The per-route phase's role variables (besides the routes themselves).
PER_ROUTE_VARS = {
    "data_plane_manage_congestion_control": False,
    "data_plane_path_route_congestion_control": "bbr",
    "data_plane_path_route_first_flight_bytes": 1_048_576,
    "data_plane_path_route_cwnd_clamp_bdp": 1.5,
    "data_plane_tcp_rmem_default": 2_097_152,
}


def profiles(quick: bool = False) -> list[Scenario]:
    """The link profiles: 150 and 200 ms RTT, 0.1 % and 1 % loss, Bernoulli and bursty."""
    rtts = (150,) if quick else (150, 200)
    losses = (0.01,) if quick else (0.001, 0.01)
    models = ("bernoulli", "gilbert_elliott")
    out = []
    for rtt in rtts:
        for loss in losses:
            for model in models:
                link = {"delay_ms": rtt / 2, "rate_mbit": RATE_MBIT, "loss": loss}
                label = "Bernoulli"
                if model == "gilbert_elliott":
                    link.update(loss_model=model, loss_burst_packets=BURST_PACKETS)
                    label = f"bursts of {BURST_PACKETS}"
                out.append(Scenario(
                    id=f"route-{rtt}ms-{loss_label(loss)}-{model}", kind="throughput",
                    title=f"{RATE_MBIT} Mbit/s, {rtt} ms RTT, loss {loss_label(loss)} ({label})",
                    link=link))
    return out


def route_for(scenario: Scenario, prefix: str) -> dict:
    """The data_plane_path_routes entry of the far site for one profile: the path's rate and RTT."""
    return {"name": "bench " + scenario.id, "prefix": prefix, "bandwidth_mbps": float(RATE_MBIT),
            "rtt_ms": float(scenario.rtt_ms)}


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(results: dict, scenarios: list[dict]) -> list[dict]:
    """One row per profile: per phase the median throughput, retransmissions and delivery times
    (ms and in RTTs of the path)."""
    rows = []
    for scenario in scenarios:
        row = {"id": scenario["id"], "title": scenario["title"], "rtt_ms": scenario["rtt_ms"],
               "loss": scenario["link"].get("loss", 0.0), "phases": {}}
        for phase in PHASES:
            entry = results.get(phase, {}).get(scenario["id"])
            if not entry:
                continue
            bulk = entry.get("bulk", [])
            summary = {"throughput_mbps": median(s.get("throughput_mbps") for s in bulk),
                       "retransmit_pct": median(s.get("retransmit_pct") for s in bulk),
                       "delivery": {}}
            for size in TRANSFERS:
                timed = [t["delivered_ms"] for t in entry.get("transfers", [])
                         if t.get("bytes") == size and t.get("delivered_ms") is not None]
                failed = [t for t in entry.get("transfers", []) if t.get("bytes") == size and t.get("error")]
                ms = median(timed)
                summary["delivery"][str(size)] = {
                    "ms": ms, "rtts": round(ms / scenario["rtt_ms"], 2) if ms is not None else None,
                    "samples": len(timed), "failed": len(failed)}
            row["phases"][phase] = summary
        rows.append(row)
    return rows


def floor_ms(size: int, rtt_ms: float) -> float:
    """The fastest a new connection can deliver ``size`` bytes: handshake, one way, serialization."""
    return 1.5 * rtt_ms + size * 8 / (RATE_MBIT * 1e6) * 1000


def fmt(value, digits=1, suffix=""):
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def markdown(rows: list[dict], lan: dict | None = None) -> str:
    head = " | ".join(f"{p} Mbit/s (retrans %)" for p in PHASES)
    lines = [f"| profile | {head} | loss + 0.3 pp |", "| --- |" + " --- |" * (len(PHASES) + 1)]
    for row in rows:
        cells = []
        for phase in PHASES:
            s = row["phases"].get(phase)
            cells.append(f"{fmt(s['throughput_mbps'])} ({fmt(s['retransmit_pct'], 2)})" if s else "–")
        lines.append(f"| {row['title']} | " + " | ".join(cells) + f" | {row['loss'] * 100 + 0.3:.2f} % |")
    lines += ["", "Time to deliver on a new connection, from connect() to the last byte (median; RTTs of the path). "
              "Floor: the handshake (1 RTT), half an RTT of flight and the bytes at the link rate.", ""]
    head = " | ".join(PHASES)
    lines += [f"| profile | size | {head} | floor |", "| --- | --- |" + " --- |" * (len(PHASES) + 1)]
    for row in rows:
        for size in TRANSFERS:
            cells = []
            for phase in PHASES:
                d = (row["phases"].get(phase) or {}).get("delivery", {}).get(str(size))
                cells.append(f"{fmt(d['ms'], 0)} ms ({fmt(d['rtts'], 2)} RTT)" if d and d["ms"] is not None else "–")
            floor = floor_ms(size, row["rtt_ms"])
            lines.append(f"| {row['title']} | {size // 1048576} MiB | " + " | ".join(cells)
                         + f" | {floor:.0f} ms ({floor / row['rtt_ms']:.2f} RTT) |")
    if lan:
        lines += ["", "LAN inside the site (per-route phase): " + ", ".join(f"{k} {v}" for k, v in lan.items())]
    return "\n".join(lines) + "\n"


def chart(rows: list[dict], metric: str) -> str:
    """Grouped bars per profile, one bar per phase: 'throughput', 'retransmit' or 'delivery-<size>'."""
    groups = []
    for row in rows:
        bars = []
        for phase in PHASES:
            s = row["phases"].get(phase)
            if metric == "throughput":
                value = s["throughput_mbps"] if s else None
                shown = fmt(value, 1, " Mbit/s")
            elif metric == "retransmit":
                value = s["retransmit_pct"] if s else None
                shown = fmt(value, 2, " %")
            else:
                d = s["delivery"].get(metric.split("-", 1)[1]) if s else None
                value = d["rtts"] if d else None
                shown = fmt(value, 2, " RTT")
            bars.append({"name": phase, "value": value, "colour": COLOURS[phase], "text": shown})
        groups.append({"label": row["title"], "bars": bars})
    titles = {"throughput": f"Bulk throughput, {RATE_MBIT} Mbit/s link (higher is better)",
              "retransmit": "Retransmissions, % of segments (lower is better)"}
    title = titles.get(metric) or (f"Time to deliver {int(metric.split('-', 1)[1]) // 1048576} MiB on a new "
                                   "connection, in RTTs (lower is better)")
    return svg_chart.bar_chart(title, groups, label_width=330)
