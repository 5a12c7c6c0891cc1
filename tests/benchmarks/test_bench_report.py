"""Summary and Markdown table of a benchmark run."""

from __future__ import annotations

import json
import math

from trainnet_bench.report import fmt_ratio, fmt_spread, render_markdown, summarize_run


def test_summary_ratios_and_bounds(full_run):
    summary = full_run["summary"]
    row = summary["throughput-150ms-1%"]
    untuned = row["phases"]["untuned"]
    assert untuned["throughput_mbps"]["n"] == 3
    assert row["ratio_tuned_untuned"] > 1
    assert row["mathis_mbps"] > 0.9 and row["mathis_mbps"] < 1.0
    assert row["link_x_delivery_mbps"] == 49.5
    assert untuned["congestion_control"] == ["cubic"]
    assert row["phases"]["tuned"]["congestion_control"] == ["bbr"]
    pmtu = summary["pmtu-blackhole-1400"]
    assert math.isinf(pmtu["ratio_tuned_untuned"])
    tfo = summary["tfo-150ms"]
    assert tfo["phases"]["untuned"]["ttfb_rtts"]["median"] == 302 / 150
    assert tfo["phases"]["tuned"]["syn_data_acked"] == 3
    assert tfo["ratio_tuned_untuned"] < 0.6
    # the priming connection is not a repeat connection
    assert tfo["phases"]["untuned"]["connections"] == 3


def test_markdown_has_one_row_per_profile_and_the_published_figures(full_run):
    text = render_markdown(full_run)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "CUBIC 17 vs" in line]
    assert len(rows) == 6
    assert all(line.count("|") == 9 for line in rows)
    assert "CUBIC 17 vs BBR 2.8x" in text and "5.2% → 0.8%" in text
    assert "TTFB > 200 ms → < 80 ms" in text
    assert "PMTU black hole" in text and "∞ (untuned 0)" in text
    assert "Buffer ceiling" in text and "BDP 7.5 MB" in text
    assert "load average at start 0.50 0.60 0.70" in text


def test_markdown_of_a_smoke_run_and_an_incomplete_run(full_run):
    smoke = {**full_run, "scenarios": full_run["scenarios"][:1], "summary": None}
    smoke["summary"] = summarize_run(smoke)
    text = render_markdown(smoke)
    assert "TCP Fast Open" not in text
    broken = {**smoke, "error": "RuntimeError: boom", "phases": {"untuned": smoke["phases"]["untuned"]}}
    broken["summary"] = summarize_run(broken)
    text = render_markdown(broken)
    assert "Incomplete run" in text and "boom" in text
    assert "| – |" in text  # no tuned figures: shown as missing, not as zero


def test_summary_is_json_serialisable(full_run):
    json.dumps(full_run["summary"])


def test_formatting():
    assert fmt_spread({"n": 3, "median": 12.34, "min": 11.0, "max": 13.06}) == "12.3 [11.0–13.1]"
    assert fmt_spread({"n": 1, "median": 0.944, "min": 0.944, "max": 0.944}) == "0.94"
    assert fmt_spread({"n": 0}) == "–"
    assert fmt_ratio(2.8) == "2.80x" and fmt_ratio(None) == "–"
