"""Traffic helpers for the lab tests: bounded ping and iperf3 runs between lab hosts."""

from __future__ import annotations

import json
import re
import statistics

from ansible_collections.longhaul.trainnet.plugins.module_utils.link_measure import parse_ping_summary
from trainnet_lab.lab import Lab

IPERF3_PORT = 5401


def ping(lab: Lab, source: str, destination: str, *, count: int, interval: float) -> dict:
    address = lab.spec.hosts[destination].address
    # Warm up ARP on both LANs so the first reply does not carry a resolution delay.
    lab.run_on(source, ["ping", "-n", "-q", "-c", "2", "-W", "2", address], timeout=15)
    # No -w: with a deadline ping stops at the count-th reply and counts the echo requests
    # still in flight as lost.
    result = lab.run_on(source, ["ping", "-n", "-c", str(count), "-i", str(interval),
                                 "-W", "2", address], timeout=count * interval + 20)
    summary = parse_ping_summary(result.stdout) or {}
    rtt = summary.get("rtt_ms") or {}
    # The median of the replies: a short check's mean moves by a whole host scheduling stall
    # (one reply 20 ms late shifts the mean of 10 by 2 ms), which is not the emulated delay.
    replies = sorted(float(m.group(1)) for m in re.finditer(r"time=([0-9.]+) ms", result.stdout))
    median = statistics.median(replies) if replies else None
    return {"rtt_min_ms": rtt.get("min"), "rtt_avg_ms": rtt.get("avg"), "rtt_max_ms": rtt.get("max"),
            "rtt_median_ms": median, "loss_pct": summary.get("loss_pct")}


def iperf3(lab: Lab, client: str, server: str, *args: str, duration: float, port: int = IPERF3_PORT,
           timeout_extra: int = 25) -> dict:
    """Run iperf3 -J from client to server (both bounded by `timeout`); return the JSON."""
    address = lab.spec.hosts[server].address
    with lab.serving(server, ["iperf3", "-s", "-1", "-p", str(port)], port,
                     seconds=int(duration) + timeout_extra + 10):
        completed = lab.run_on(
            client, ["timeout", str(int(duration) + timeout_extra), "iperf3", "-c", address,
                     "-p", str(port), "-J", *args], timeout=duration + timeout_extra + 15)
    try:
        return json.loads(completed.stdout)
    except ValueError:
        return {"error": completed.stdout + completed.stderr}


def received_mbit(result: dict) -> float:
    end = result.get("end", {})
    summary = end.get("sum_received") or end.get("sum") or {}
    return summary.get("bits_per_second", 0.0) / 1e6


def set_sysctls(lab: Lab, host: str, settings: dict[str, str]) -> None:
    lab.run_on(host, ["sysctl", "-q", "-w", *[f"{k}={v}" for k, v in settings.items()]],
               check=True)


def emulator_counters(lab: Lab, direction: str) -> dict:
    for link in lab.status()["links"]:
        if direction in link["directions"]:
            return link["directions"][direction]
    raise KeyError(direction)
