"""Statistics and reference bounds of the benchmark report."""

from __future__ import annotations

import math

import pytest
from ansible_collections.longhaul.trainnet.plugins.filter.buffer_sizing import bdp_bytes as bdp_filter
from ansible_collections.longhaul.trainnet.plugins.plugin_utils.bdp import window_limited_mbps
from trainnet_bench.profiles import buffer_scenario, loss_label, plan
from trainnet_bench.report import summarize_run
from trainnet_bench.stats import link_times_delivery, mathis_mbps, ratio, summarize


def test_summarize_median_and_spread():
    result = summarize([3.0, 1.0, 2.0, None])
    assert result["n"] == 3
    assert result["median"] == 2.0
    assert (result["min"], result["max"]) == (1.0, 3.0)
    assert result["stdev"] == pytest.approx(1.0)


def test_summarize_even_count_and_single_and_empty():
    assert summarize([1, 2, 3, 4])["median"] == 2.5
    assert summarize([5])["stdev"] == 0.0
    empty = summarize([])
    assert empty["n"] == 0 and empty["median"] is None


def test_mathis_matches_the_prototype_figure():
    # ENVIRONMENT.md: MSS 1448, 150 ms, 1 % loss -> 0.94 Mbit/s
    assert mathis_mbps(1448, 150, 0.01) == pytest.approx(0.942, abs=0.001)
    # scales with 1/sqrt(p) and 1/RTT
    assert mathis_mbps(1448, 150, 0.0001) == pytest.approx(10 * mathis_mbps(1448, 150, 0.01))
    assert mathis_mbps(1448, 300, 0.01) == pytest.approx(mathis_mbps(1448, 150, 0.01) / 2)
    assert mathis_mbps(1448, 150, 0) is None


def _buffer_row(**link):
    scenario = buffer_scenario(omit_s=0)
    scenario.link.update(link)
    data = {"scenarios": [scenario.to_dict()], "phases": {}}
    return summarize_run(data)[scenario.id]


def test_report_bdp_and_window_caps_are_the_collections_arithmetic():
    assert link_times_delivery(50, 0.01) == pytest.approx(49.5)
    row = _buffer_row()
    assert row["bdp_bytes"] == 7500000 == bdp_filter(200, 300)
    # the issue's example: 4 MB / 0.3 s ~ 107 Mbit/s (MB = 2^20 here: Debian's 4194304)
    assert row["untuned_wmem_cap_mbps"] == pytest.approx(111.8, abs=0.1)
    assert row["untuned_rmem_cap_mbps"] == pytest.approx(167.8, abs=0.1)
    # Exact, like the role's buffer sizing: float arithmetic made 1 Mbit/s x 524.8 ms 65599.99...
    odd = _buffer_row(rate_mbit=1, delay_ms=262.4)
    assert odd["bdp_bytes"] == 65600 == bdp_filter(1, 524.8)


def test_ratio_edge_cases():
    assert ratio(2.8, 1.0) == pytest.approx(2.8)
    assert ratio(None, 1.0) is None
    assert math.isinf(ratio(40.0, 0.0))
    assert ratio(0.0, 0.0) is None


def test_loss_labels():
    assert [loss_label(x) for x in (0.0001, 0.001, 0.01, 0)] == ["0.01%", "0.1%", "1%", "0%"]


def test_full_plan_covers_the_issue():
    scenarios = plan(smoke=False)
    throughput = [s for s in scenarios if s.kind == "throughput"]
    assert {(s.rtt_ms, s.loss) for s in throughput} == {
        (rtt, loss) for rtt in (150, 200) for loss in (0.0001, 0.001, 0.01)}
    assert all(s.link["rate_mbit"] == 50 for s in throughput)
    kinds = [s.kind for s in scenarios]
    assert {"tfo", "pmtu", "buffer"} <= set(kinds)
    pmtu = next(s for s in scenarios if s.kind == "pmtu")
    assert pmtu.link["mtu"] == 1400 and pmtu.link["icmp_blackhole"] is True
    buffer = next(s for s in scenarios if s.kind == "buffer")
    # default buffers must cap the flow below the link: 4 MB / RTT < rate
    assert window_limited_mbps(4194304, buffer.rtt_ms) < buffer.link["rate_mbit"]
    assert len({s.id for s in scenarios}) == len(scenarios)


def test_smoke_plan_is_one_lossy_profile():
    (scenario,) = plan(smoke=True)
    assert scenario.kind == "throughput" and scenario.rtt_ms == 150 and scenario.loss == 0.01
