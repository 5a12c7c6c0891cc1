"""From a run's samples to the summary and the Markdown table (pure logic, no I/O)."""

from __future__ import annotations

import math

from ansible_collections.longhaul.trainnet.plugins.plugin_utils.bdp import bdp_bytes, window_limited_mbps

from .profiles import loss_label
from .stats import MSS_1500, link_times_delivery, mathis_mbps, ratio, summarize

PHASES = ("untuned", "tuned")
PUBLISHED_THROUGHPUT_SHORT = "CUBIC 17 vs BBR 2.8x (~48); retr 5.2% → 0.8%"
DEBIAN_WMEM_MAX = 4194304
DEBIAN_RMEM_MAX = 6291456


def _samples(data: dict, phase: str, scenario_id: str) -> list[dict]:
    return (data.get("phases", {}).get(phase, {}).get(scenario_id) or {}).get("samples", [])


def _phase_entry(data: dict, phase: str, scenario_id: str) -> dict:
    return data.get("phases", {}).get(phase, {}).get(scenario_id) or {}


def summarize_bulk(samples: list[dict]) -> dict:
    ccs = sorted({s["congestion_control"] for s in samples if s.get("congestion_control")})
    mss = [s["mss_bytes"] for s in samples if s.get("mss_bytes")]
    directions = [(s.get("emulator") or {}).get(d, {}) for s in samples
                  for d in (s.get("emulator") or {}) if "->" in d]
    queue_drops = sum(d.get("drop_queue", 0) for d in directions)
    loss_drops = sum(d.get("drop_loss", 0) for d in directions)
    overflow = sum(v.get("overflow_drops", 0) for s in samples
                   for k, v in (s.get("emulator") or {}).items() if k.startswith("tun-"))
    return {
        "throughput_mbps": summarize(s.get("throughput_mbps") for s in samples),
        "retransmit_pct": summarize(s.get("retransmit_pct") for s in samples),
        "congestion_control": ccs,
        "mss_bytes": max(mss) if mss else None,
        "errors": [s["error"] for s in samples if s.get("error")],
        "emulator_queue_drops": queue_drops,
        "emulator_random_drops": loss_drops,
        "tun_overflow_drops": overflow,
    }


def summarize_tfo(samples: list[dict], rtt_ms: float | None) -> dict:
    timed = [s for s in samples if not s.get("priming")]
    ttfb = summarize(s.get("ttfb_ms") for s in timed)
    acked = [s.get("syn_data_acked") for s in timed if s.get("ttfb_ms") is not None]
    in_rtt = None
    if rtt_ms and ttfb["n"]:
        in_rtt = summarize(s["ttfb_ms"] / rtt_ms for s in timed if s.get("ttfb_ms") is not None)
    return {"ttfb_ms": ttfb, "ttfb_rtts": in_rtt, "rtt_ms": rtt_ms,
            "syn_data_acked": sum(1 for a in acked if a), "connections": len(acked),
            "errors": [s["error"] for s in samples if s.get("error")]}


def summarize_run(data: dict) -> dict:
    """Per scenario: each phase's summary, the tuned/untuned ratio and the reference bounds."""
    summary = {}
    for scenario in data.get("scenarios", []):
        sid = scenario["id"]
        link = scenario["link"]
        rtt_ms = scenario.get("rtt_ms") or 2 * link["delay_ms"]
        loss = link.get("loss", 0.0)
        row = {"kind": scenario["kind"], "title": scenario["title"], "rtt_ms": rtt_ms,
               "loss": loss, "rate_mbit": link["rate_mbit"], "phases": {}}
        for phase in PHASES:
            samples = _samples(data, phase, sid)
            if scenario["kind"] == "tfo":
                measured_rtt = _phase_entry(data, phase, sid).get("ping_rtt_ms") or rtt_ms
                row["phases"][phase] = summarize_tfo(samples, measured_rtt)
            else:
                row["phases"][phase] = summarize_bulk(samples)
        if scenario["kind"] == "tfo":
            medians = [row["phases"][p]["ttfb_ms"]["median"] for p in PHASES]
        else:
            medians = [row["phases"][p]["throughput_mbps"]["median"] for p in PHASES]
        row["ratio_tuned_untuned"] = ratio(medians[1], medians[0])
        untuned_mss = row["phases"]["untuned"].get("mss_bytes") or MSS_1500
        row["mathis_mbps"] = mathis_mbps(untuned_mss, rtt_ms, loss)
        row["link_x_delivery_mbps"] = link_times_delivery(link["rate_mbit"], loss)
        if scenario["kind"] == "buffer":
            row["bdp_bytes"] = bdp_bytes(link["rate_mbit"], rtt_ms)
            row["untuned_wmem_cap_mbps"] = window_limited_mbps(DEBIAN_WMEM_MAX, rtt_ms)
            row["untuned_rmem_cap_mbps"] = window_limited_mbps(DEBIAN_RMEM_MAX, rtt_ms)
        summary[sid] = row
    return summary


# --- formatting ---------------------------------------------------------------------------------

def fmt(value, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float) and math.isinf(value):
        return "∞"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) < 1 and value != 0:
        return f"{value:.2f}"
    return f"{value:.{digits}f}"


def fmt_spread(stats: dict, digits: int = 1) -> str:
    """'12.3 [11.0–13.1]' (median [min–max]); '–' without samples."""
    if not stats or not stats.get("n"):
        return "–"
    if stats["n"] == 1:
        return fmt(stats["median"], digits)
    return f"{fmt(stats['median'], digits)} [{fmt(stats['min'], digits)}–{fmt(stats['max'], digits)}]"


def fmt_ratio(value) -> str:
    if value is None:
        return "–"
    if math.isinf(value):
        return "∞ (untuned 0)"
    return f"{value:.2f}x"


def fmt_pct(stats: dict) -> str:
    if not stats or not stats.get("n"):
        return "–"
    return f"{stats['median']:.2f}"


def throughput_table(summary: dict) -> list[str]:
    lines = ["| profile (50 Mbit/s) | untuned Mbit/s median [min–max] | tuned Mbit/s median [min–max] "
             "| tuned/untuned | retrans % untuned → tuned | Mathis bound Mbit/s | link × (1 − loss) "
             "| published |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in summary.values():
        if row["kind"] != "throughput":
            continue
        untuned, tuned = row["phases"]["untuned"], row["phases"]["tuned"]
        lines.append(
            f"| {row['rtt_ms']:g} ms RTT, loss {loss_label(row['loss'])} "
            f"| {fmt_spread(untuned['throughput_mbps'])} | {fmt_spread(tuned['throughput_mbps'])} "
            f"| {fmt_ratio(row['ratio_tuned_untuned'])} "
            f"| {fmt_pct(untuned['retransmit_pct'])} → {fmt_pct(tuned['retransmit_pct'])} "
            f"| {fmt(row['mathis_mbps'])} | {fmt(row['link_x_delivery_mbps'])} "
            f"| {PUBLISHED_THROUGHPUT_SHORT} |")
    return lines


def drops_table(summary: dict) -> list[str]:
    """Where the retransmissions come from: the emulator's random drops vs queue overflow."""
    lines = ["| profile (50 Mbit/s) | untuned drops: random / queue overflow "
             "| tuned drops: random / queue overflow |", "| --- | --- | --- |"]
    for row in summary.values():
        if row["kind"] != "throughput":
            continue
        cells = [f"{row['phases'][p].get('emulator_random_drops', 0)} / "
                 f"{row['phases'][p].get('emulator_queue_drops', 0)}" for p in PHASES]
        lines.append(f"| {row['rtt_ms']:g} ms RTT, loss {loss_label(row['loss'])} | {cells[0]} "
                     f"| {cells[1]} |")
    return lines


def scenario_table(summary: dict) -> list[str]:
    lines = ["| scenario | untuned median [min–max] | tuned median [min–max] | tuned/untuned "
             "| reference | published |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row in summary.values():
        untuned, tuned = row["phases"]["untuned"], row["phases"]["tuned"]
        if row["kind"] == "tfo":
            def ttfb(phase: dict) -> str:
                text = fmt_spread(phase["ttfb_ms"], 0) + " ms"
                if phase.get("ttfb_rtts") and phase["ttfb_rtts"]["n"]:
                    text += f" = {phase['ttfb_rtts']['median']:.2f} RTT"
                return text + f" (SYN data acked {phase['syn_data_acked']}/{phase['connections']})"
            rtt = untuned.get("rtt_ms") or row["rtt_ms"]
            lines.append(f"| TFO: TTFB of repeat request/response, {row['rtt_ms']:g} ms RTT "
                         f"| {ttfb(untuned)} | {ttfb(tuned)} | {fmt_ratio(row['ratio_tuned_untuned'])} "
                         f"| 1 RTT = {fmt(rtt, 0)} ms (the floor of any request/response) "
                         f"| TTFB > 200 ms → < 80 ms |")
        elif row["kind"] == "pmtu":
            lines.append(f"| PMTU black hole: bulk through a 1400-byte path, ICMP swallowed, "
                         f"{row['rtt_ms']:g} ms RTT (Mbit/s) "
                         f"| {fmt_spread(untuned['throughput_mbps'])} "
                         f"| {fmt_spread(tuned['throughput_mbps'])} "
                         f"| {fmt_ratio(row['ratio_tuned_untuned'])} "
                         f"| link × (1 − loss) = {fmt(row['link_x_delivery_mbps'])} "
                         f"| MTU 1400 avoids fragmentation |")
        elif row["kind"] == "buffer":
            lines.append(f"| Buffer ceiling: {row['rate_mbit']:g} Mbit/s, {row['rtt_ms']:g} ms RTT, "
                         f"0 loss, CUBIC both (Mbit/s) "
                         f"| {fmt_spread(untuned['throughput_mbps'])} "
                         f"| {fmt_spread(tuned['throughput_mbps'])} "
                         f"| {fmt_ratio(row['ratio_tuned_untuned'])} "
                         f"| BDP {row['bdp_bytes'] / 1e6:.1f} MB; Debian wmem max 4 MB / RTT = "
                         f"{fmt(row['untuned_wmem_cap_mbps'])} | – |")
    return lines


def conditions_lines(data: dict) -> list[str]:
    c = data.get("conditions", {})
    hosts = data.get("hosts", {})
    lines = [f"- run: {data.get('mode')} mode, started {data.get('started')}, "
             f"{data.get('seconds', '?')} s, {c.get('reps')} repetition(s) of "
             f"{c.get('duration_s')} s per row (iperf3 -O omits the first seconds, see JSON)",
             f"- kernel {c.get('kernel')} ({c.get('cpus')} CPUs), {c.get('iperf3')}; "
             f"load average at start {fmt_load(c.get('load_at_start'))}, at end "
             f"{fmt_load(c.get('load_at_end'))}",
             f"- congestion controls available: {c.get('available_congestion_control')}; "
             f"emulator seed base {c.get('seed_base')} (+ scenario index)"]
    for phase in PHASES:
        client = (hosts.get(phase) or {}).get("near1") or {}
        if client:
            lines.append(
                f"- {phase} hosts: cc {client.get('net.ipv4.tcp_congestion_control')}, "
                f"tcp_rmem {client.get('net.ipv4.tcp_rmem')}, tcp_wmem {client.get('net.ipv4.tcp_wmem')}, "
                f"tcp_fastopen {client.get('net.ipv4.tcp_fastopen')}, "
                f"tcp_mtu_probing {client.get('net.ipv4.tcp_mtu_probing')}, MTU {client.get('eth0_mtu')}")
    return lines


def fmt_load(load) -> str:
    if not load:
        return "?"
    return " ".join(f"{x:.2f}" for x in load)


def render_markdown(data: dict) -> str:
    summary = data.get("summary") or summarize_run(data)
    out = ["# longhaul.trainnet benchmark: untuned vs tuned on the ocean lab", ""]
    if data.get("error") or data.get("interrupted"):
        out += [f"**Incomplete run:** {data.get('error') or data.get('interrupted')}", ""]
    out += conditions_lines(data) + [""]
    if any(r["kind"] == "throughput" for r in summary.values()):
        out += ["## Single-stream throughput and retransmissions", ""]
        out += throughput_table(summary) + [""]
        out += ["Untuned = Debian 12 defaults (CUBIC, tcp_rmem max 6 MB, tcp_wmem max 4 MB, MTU 1500); "
                "tuned = the same two hosts after the `longhaul.trainnet.data_plane` role (BBR, "
                "BDP-sized buffers, MTU 1400, TFO 3, MTU probing). Mathis bound = MSS/RTT × 1.22/√p "
                "with the untuned MSS. iperf3 reports TCP payload (goodput): at MTU 1500 the payload "
                "ceiling of a 50 Mbit/s link is about 48.3 Mbit/s, at MTU 1400 about 48.1.", ""]
        out += ["Packets the emulator dropped during the samples (both directions, all repetitions, "
                "startup included):", ""]
        out += drops_table(summary) + [""]
    if any(r["kind"] != "throughput" for r in summary.values()):
        out += ["## TCP Fast Open, PMTU black hole, buffer ceiling", ""]
        out += scenario_table(summary) + [""]
    return "\n".join(out)
