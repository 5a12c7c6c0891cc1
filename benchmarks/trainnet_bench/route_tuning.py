"""Per-route tuning benchmark (issue 12): the plan, the summaries, the table and the charts.

Three phases on the same two hosts, over the same emulated links:
  untuned    Debian 12 defaults (CUBIC, initcwnd 10, MTU 1500);
  global     the data_plane role as before issue 12: BBR as the host default, large buffers;
  per-route  the data_plane role with the host default congestion control left alone (the LAN keeps
             it) and the route to the far site carrying the path's tuning: congctl bbr, initcwnd and
             initrwnd for a 1 MiB first flight (at most the path's BDP), the congestion window capped
             at data_plane_path_route_cwnd_clamp_bdp BDPs.
Per lossy link profile: iperf3 bulk throughput, retransmissions and the emulator's own count of
packets its bottleneck queue dropped (self-inflicted loss, apart from the link's random loss).
Per profile, and on a clean 100 Mbit/s profile where 1 MiB in 3 RTTs is physically possible: the
time a new connection takes to deliver 1 MiB (pushed by the initiator and pulled from the
acceptor) and 16 MiB (pushed), in round trips of the path, beside the floor TCP allows.
Pure logic: no lab, no processes (benchmarks/route_tuning_lab.py runs it).
"""

from __future__ import annotations

import statistics

from ansible_collections.longhaul.trainnet.plugins.plugin_utils import svg_chart

from .profiles import Scenario, loss_label

RATE_MBIT = 50
PHASES = ("untuned", "global", "per-route")
COLOURS = {"untuned": "#d62728", "global": "#1f77b4", "per-route": "#2ca02c"}
# (mode, bytes, connections): a rendezvous message or first gradient bucket pushed by the
# initiator, the same pulled from the acceptor (a shard read), and a 16 MiB bucket.
TRANSFERS = (("push", 1_048_576, 3), ("pull", 1_048_576, 3), ("push", 16_777_216, 1))
# The window of a SYN-ACK is never scaled (RFC 7323): an initiator's first flight is at most this.
SYN_WINDOW_BYTES = 65_535
# The clean profile for the new-connection target: at 50 Mbit/s 1 MiB alone takes 1.12 RTTs of
# 150 ms on the wire, so no TCP can deliver it within 3 RTTs of connect(); at 100 Mbit/s it can.
DELIVERY_RATE_MBIT = 100
# Gilbert-Elliott bursts: the mean number of packets lost in a row.
BURST_PACKETS = 4
# The per-route phase's role variables (besides the routes themselves).
PER_ROUTE_VARS = {
    "data_plane_manage_congestion_control": False,
    "data_plane_path_route_congestion_control": "bbr",
    "data_plane_path_route_first_flight_bytes": 1_048_576,
    "data_plane_path_route_cwnd_clamp_bdp": 1.5,
    # At least 2 x (first flight + one MTU): the first window is half the buffer in whole segments.
    "data_plane_tcp_rmem_default": 3_145_728,
    # The route's cwnd cap reaches a connection through the TCP metrics cache (tcp_init_metrics):
    # with metrics saving off it never applies.
    "data_plane_tcp_no_metrics_save": 0,
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
    out.append(Scenario(id="delivery-150ms-clean", kind="delivery",
                        title=f"{DELIVERY_RATE_MBIT} Mbit/s, 150 ms RTT, no loss",
                        link={"delay_ms": 75.0, "rate_mbit": DELIVERY_RATE_MBIT, "loss": 0.0}))
    return out


def transfer_key(mode: str, size: int) -> str:
    return f"{mode}-{size}"


def route_for(scenario: Scenario, prefix: str) -> dict:
    """The data_plane_path_routes entry of the far site for one profile: the path's rate and RTT."""
    return {"name": "bench " + scenario.id, "prefix": prefix, "bandwidth_mbps": float(scenario.link["rate_mbit"]),
            "rtt_ms": float(scenario.rtt_ms)}


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def queue_drop_pct(sample: dict) -> float | None:
    """Packets the bottleneck queue dropped, % of the packets offered to the link (the emulator's
    counters over the sample): loss the sender inflicted on itself, apart from the random loss."""
    link = sample.get("link") or {}
    offered = link.get("rx_packets")
    if not offered:
        return None
    return round(100.0 * link.get("drop_queue", 0) / offered, 3)


def summarize(results: dict, scenarios: list[dict]) -> list[dict]:
    """One row per profile: per phase the median throughput, retransmissions, queue drops and
    delivery times (ms and in RTTs of the path)."""
    rows = []
    for scenario in scenarios:
        row = {"id": scenario["id"], "kind": scenario.get("kind", "throughput"), "title": scenario["title"],
               "rtt_ms": scenario["rtt_ms"], "rate_mbit": scenario["link"].get("rate_mbit", RATE_MBIT),
               "loss": scenario["link"].get("loss", 0.0), "phases": {}}
        for phase in PHASES:
            entry = results.get(phase, {}).get(scenario["id"])
            if not entry:
                continue
            bulk = entry.get("bulk", [])
            summary = {"throughput_mbps": median(s.get("throughput_mbps") for s in bulk),
                       "retransmit_pct": median(s.get("retransmit_pct") for s in bulk),
                       "queue_drop_pct": median(queue_drop_pct(s) for s in bulk),
                       "delivery": {}}
            for mode, size, _count in TRANSFERS:
                done = [t for t in entry.get("transfers", [])
                        if t.get("bytes") == size and t.get("mode", "push") == mode]
                timed = [t["delivered_ms"] for t in done if t.get("delivered_ms") is not None]
                if not done:
                    continue
                ms = median(timed)
                summary["delivery"][transfer_key(mode, size)] = {
                    "ms": ms, "rtts": round(ms / scenario["rtt_ms"], 2) if ms is not None else None,
                    "samples": len(timed), "failed": len([t for t in done if t.get("error")])}
            row["phases"][phase] = summary
        rows.append(row)
    return rows


def floor_ms(size: int, rtt_ms: float, rate_mbit: float = RATE_MBIT, mode: str = "push") -> float:
    """The fastest any TCP can deliver ``size`` bytes on a new connection, from connect():
    push: the handshake (1 RTT), then the initiator's first flight, at most the SYN-ACK's unscaled
    window; the rest waits for the first ACK (+1 RTT); then one way and the bytes at the link rate.
    pull: the handshake, the request one way, the answer one way and the bytes at the link rate."""
    def wire_ms(nbytes):
        return nbytes * 8 / (rate_mbit * 1e6) * 1000
    if mode == "pull":
        return 2 * rtt_ms + wire_ms(size)
    if size <= SYN_WINDOW_BYTES:
        return 1.5 * rtt_ms + wire_ms(size)
    return 2.5 * rtt_ms + wire_ms(size - SYN_WINDOW_BYTES)


def fmt(value, digits=1, suffix=""):
    return "–" if value is None else f"{value:.{digits}f}{suffix}"


def size_label(size: int) -> str:
    return f"{size // 1048576} MiB"


def markdown(rows: list[dict], lan: dict | None = None) -> str:
    head = " | ".join(f"{p} Mbit/s (retrans %, queue drops %)" for p in PHASES)
    lines = [f"| profile | {head} | loss + 0.3 pp |", "| --- |" + " --- |" * (len(PHASES) + 1)]
    for row in rows:
        if row["kind"] != "throughput":
            continue
        cells = []
        for phase in PHASES:
            s = row["phases"].get(phase)
            cells.append(f"{fmt(s['throughput_mbps'])} ({fmt(s['retransmit_pct'], 2)}, {fmt(s['queue_drop_pct'], 2)})"
                         if s else "–")
        lines.append(f"| {row['title']} | " + " | ".join(cells) + f" | {row['loss'] * 100 + 0.3:.2f} % |")
    lines += ["", "Time to deliver on a new connection, from connect() to the last byte (median; RTTs of the path). "
              "push: the initiator sends; pull: it sends a request line and the acceptor answers. Floor: what any TCP "
              "needs (the handshake, a push's second round trip past the SYN-ACK's unscaled 64 KB window, a pull's "
              "request, one way, the bytes at the link rate).", ""]
    head = " | ".join(PHASES)
    lines += [f"| profile | transfer | {head} | floor |", "| --- | --- |" + " --- |" * (len(PHASES) + 1)]
    for row in rows:
        for mode, size, _count in TRANSFERS:
            key = transfer_key(mode, size)
            cells = []
            for phase in PHASES:
                d = (row["phases"].get(phase) or {}).get("delivery", {}).get(key)
                cells.append(f"{fmt(d['ms'], 0)} ms ({fmt(d['rtts'], 2)} RTT)" if d and d["ms"] is not None else "–")
            if not any(c != "–" for c in cells) and row["phases"]:
                continue
            floor = floor_ms(size, row["rtt_ms"], row["rate_mbit"], mode)
            lines.append(f"| {row['title']} | {size_label(size)} {mode} | " + " | ".join(cells)
                         + f" | {floor:.0f} ms ({floor / row['rtt_ms']:.2f} RTT) |")
    if lan:
        lines += ["", "LAN inside the site (per-route phase): " + ", ".join(f"{k} {v}" for k, v in lan.items())]
    return "\n".join(lines) + "\n"


CHARTS = ("throughput", "retransmit", "queue-drops") + tuple(
    "delivery-" + transfer_key(mode, size) for mode, size, _count in TRANSFERS)


def chart(rows: list[dict], metric: str) -> str:
    """Grouped bars per profile, one bar per phase: 'throughput', 'retransmit', 'queue-drops' (the
    lossy profiles) or 'delivery-<mode>-<bytes>' (every profile that measured it)."""
    groups = []
    for row in rows:
        if metric.startswith("delivery-"):
            key = metric.split("-", 1)[1]
            if row["phases"] and not any(key in s.get("delivery", {}) for s in row["phases"].values()):
                continue  # measured without this transfer (an unmeasured profile still shows n/a)
        elif row["kind"] != "throughput":
            continue
        bars = []
        for phase in PHASES:
            s = row["phases"].get(phase)
            if metric == "throughput":
                value = s["throughput_mbps"] if s else None
                shown = fmt(value, 1, " Mbit/s")
            elif metric == "retransmit":
                value = s["retransmit_pct"] if s else None
                shown = fmt(value, 2, " %")
            elif metric == "queue-drops":
                value = s.get("queue_drop_pct") if s else None
                shown = fmt(value, 2, " %")
            else:
                d = s["delivery"].get(metric.split("-", 1)[1]) if s else None
                value = d["rtts"] if d else None
                shown = fmt(value, 2, " RTT")
            bars.append({"name": phase, "value": value, "colour": COLOURS[phase], "text": shown})
        groups.append({"label": row["title"], "bars": bars})
    titles = {"throughput": f"Bulk throughput, {RATE_MBIT} Mbit/s link (higher is better)",
              "retransmit": "Retransmissions, % of segments (lower is better)",
              "queue-drops": "Packets dropped by the bottleneck queue, % (self-inflicted loss; lower is better)"}
    if metric in titles:
        title = titles[metric]
    else:
        _kind, mode, size = metric.split("-")
        title = f"Time to deliver {size_label(int(size))} on a new connection ({mode}), in RTTs (lower is better)"
    return svg_chart.bar_chart(title, groups, label_width=330)
