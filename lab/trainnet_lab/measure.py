"""Parsing of ping summaries for the lab tests (tests/lab/lab_traffic.py).

Measuring the lab's WAN links (ping, path MTU, TFO, iperf3) and the before/after report are the
collection's job: playbooks/measure.yml with longhaul.trainnet.link_measure and the
longhaul.trainnet.link_report_* filters (lab/demo.sh uses them).
"""

from __future__ import annotations

import re

_PING_RTT = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")
_PING_LOSS = re.compile(r"([\d.]+)% packet loss")


def parse_ping(output: str) -> dict:
    rtt = _PING_RTT.search(output)
    loss = _PING_LOSS.search(output)
    return {
        "rtt_min_ms": float(rtt.group(1)) if rtt else None,
        "rtt_avg_ms": float(rtt.group(2)) if rtt else None,
        "rtt_max_ms": float(rtt.group(3)) if rtt else None,
        "loss_pct": float(loss.group(1)) if loss else None,
    }
