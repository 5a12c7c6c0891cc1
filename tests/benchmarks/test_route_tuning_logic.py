"""The per-route tuning benchmark's pure logic (benchmarks/trainnet_bench/route_tuning.py):
profiles, the per-profile route, summaries in RTTs, the table and the charts."""

from __future__ import annotations

from trainnet_bench import route_tuning as rt


def entry(mbps, retrans, deliveries):
    return {"bulk": [{"throughput_mbps": mbps, "retransmit_pct": retrans}],
            "transfers": [{"bytes": size, "delivered_ms": ms} if ms is not None else {"bytes": size, "error": "timed out"}
                          for size, ms in deliveries]}


def test_profiles_cover_both_rtts_losses_and_loss_models():
    full = rt.profiles()
    assert len(full) == 8 and len({s.id for s in full}) == 8
    bursty = [s for s in full if s.link.get("loss_model") == "gilbert_elliott"]
    assert len(bursty) == 4 and all(s.link["loss_burst_packets"] == rt.BURST_PACKETS for s in bursty)
    assert {s.rtt_ms for s in full} == {150, 200} and {s.loss for s in full} == {0.001, 0.01}
    assert [s.rtt_ms for s in rt.profiles(quick=True)] == [150, 150]


def test_route_carries_the_path_rate_and_rtt():
    scenario = rt.profiles()[0]
    assert rt.route_for(scenario, "198.18.201.0/24") == {
        "name": "bench " + scenario.id, "prefix": "198.18.201.0/24", "bandwidth_mbps": 50.0, "rtt_ms": 150.0}


def test_summary_in_rtts_table_and_charts():
    scenarios = [s.to_dict() for s in rt.profiles(quick=True)]
    sid = scenarios[0]["id"]
    results = {"untuned": {sid: entry(3.1, 2.5, [(1048576, 900.0), (1048576, 1000.0), (1048576, 950.0),
                                                  (16777216, None)])},
               "global": {sid: entry(44.0, 2.4, [(1048576, 600.0), (16777216, 3300.0)])},
               "per-route": {sid: entry(45.0, 1.1, [(1048576, 420.0), (16777216, 3000.0)])}}
    rows = rt.summarize(results, scenarios)
    row = rows[0]
    assert row["phases"]["untuned"]["delivery"]["1048576"] == {"ms": 950.0, "rtts": 6.33, "samples": 3, "failed": 0}
    assert row["phases"]["untuned"]["delivery"]["16777216"] == {"ms": None, "rtts": None, "samples": 0, "failed": 1}
    assert row["phases"]["per-route"]["delivery"]["1048576"]["rtts"] == 2.8
    # The second profile was not measured: its cells say so instead of inventing a figure.
    assert rows[1]["phases"] == {}
    table = rt.markdown(rows, {"default congestion control": "cubic"})
    assert "| 3.1 (2.50) | 44.0 (2.40) | 45.0 (1.10) | 1.30 % |" in table
    assert "420 ms (2.80 RTT)" in table and "| – | – | – |" in table
    # 1 MiB at 50 Mbit/s is 168 ms on the wire: with the handshake and one way, 2.62 RTT at 150 ms.
    assert "| 393 ms (2.62 RTT) |" in table
    assert "LAN inside the site (per-route phase): default congestion control cubic" in table
    svg = rt.chart(rows, "delivery-1048576")
    assert svg.startswith("<svg") and "per-route: 2.80 RTT" in svg and "untuned: n/a" in svg
    assert "45.0 Mbit/s" in rt.chart(rows, "throughput")
