"""Statistics and reference bounds used by the report: median and spread, Mathis, link x (1 - p)."""

from __future__ import annotations

import math
import statistics

from ansible_collections.longhaul.trainnet.plugins.plugin_utils.bdp import window_limited_mbps

# TCP payload per segment at MTU 1500 with the timestamp option (20 IP + 20 TCP + 12 options).
MSS_1500 = 1448
MATHIS_C = 1.22  # sqrt(3/2), Mathis, Semke, Mahdavi, Ott, CCR 1997


def summarize(values) -> dict:
    """{n, median, min, max, mean, stdev} of the numbers in values (None entries are ignored).

    Empty input gives n = 0 and None everywhere else, so a failed scenario still renders.
    """
    numbers = [float(v) for v in values if v is not None]
    if not numbers:
        return {"n": 0, "median": None, "min": None, "max": None, "mean": None, "stdev": None}
    return {
        "n": len(numbers),
        "median": statistics.median(numbers),
        "min": min(numbers),
        "max": max(numbers),
        "mean": statistics.fmean(numbers),
        "stdev": statistics.stdev(numbers) if len(numbers) > 1 else 0.0,
    }


def mathis_mbps(mss_bytes: float, rtt_ms: float, loss: float) -> float | None:
    """Mathis bound MSS/RTT x 1.22/sqrt(p) in Mbit/s; None without loss (no bound)."""
    if not loss or loss <= 0 or rtt_ms <= 0:
        return None
    return window_limited_mbps(mss_bytes, rtt_ms) * MATHIS_C / math.sqrt(loss)


def link_times_delivery(rate_mbit: float, loss: float) -> float:
    """Google's BBR expectation: the link rate x (1 - loss), in Mbit/s."""
    return rate_mbit * (1.0 - loss)


def ratio(tuned: float | None, untuned: float | None) -> float | None:
    """tuned / untuned; None when either is missing; inf when only untuned is zero."""
    if tuned is None or untuned is None:
        return None
    if untuned == 0:
        return math.inf if tuned > 0 else None
    return tuned / untuned
