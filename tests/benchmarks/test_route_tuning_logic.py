"""The per-route tuning benchmark's pure logic (benchmarks/trainnet_bench/route_tuning.py):
profiles, the per-profile route, queue drops from the emulator's counters, floors, summaries in
RTTs, the table and the charts."""

from __future__ import annotations

import pytest

from trainnet_bench import route_tuning as rt

MIB = 1_048_576


def entry(mbps, retrans, deliveries, link=None):
    return {"bulk": [{"throughput_mbps": mbps, "retransmit_pct": retrans, "link": link or {}}],
            "transfers": [{"bytes": size, "mode": mode, "delivered_ms": ms} if ms is not None
                          else {"bytes": size, "mode": mode, "error": "timed out"}
                          for mode, size, ms in deliveries]}


def test_profiles_cover_both_rtts_losses_and_loss_models_and_a_clean_delivery_profile():
    full = rt.profiles()
    lossy = [s for s in full if s.kind == "throughput"]
    assert len(lossy) == 8 and len({s.id for s in full}) == 9
    bursty = [s for s in lossy if s.link.get("loss_model") == "gilbert_elliott"]
    assert len(bursty) == 4 and all(s.link["loss_burst_packets"] == rt.BURST_PACKETS for s in bursty)
    assert {s.rtt_ms for s in lossy} == {150, 200} and {s.loss for s in lossy} == {0.001, 0.01}
    delivery = [s for s in full if s.kind == "delivery"]
    assert [(s.rtt_ms, s.loss, s.link["rate_mbit"]) for s in delivery] == [(150, 0.0, rt.DELIVERY_RATE_MBIT)]
    assert [s.rtt_ms for s in rt.profiles(quick=True)] == [150, 150, 150]


def test_route_carries_the_path_rate_and_rtt():
    scenario = rt.profiles()[0]
    assert rt.route_for(scenario, "198.18.201.0/24") == {
        "name": "bench " + scenario.id, "prefix": "198.18.201.0/24", "bandwidth_mbps": 50.0, "rtt_ms": 150.0}
    clean = rt.profiles()[-1]
    assert rt.route_for(clean, "198.18.201.0/24")["bandwidth_mbps"] == 100.0


def test_queue_drops_are_the_share_of_offered_packets_the_queue_dropped():
    assert rt.queue_drop_pct({"link": {"rx_packets": 80_000, "drop_queue": 800, "drop_loss": 790}}) == 1.0
    assert rt.queue_drop_pct({"link": {"rx_packets": 80_000, "drop_loss": 790}}) == 0.0
    assert rt.queue_drop_pct({"link": {}}) is None and rt.queue_drop_pct({}) is None


@pytest.mark.parametrize("size, rate, mode, expected_rtts", [
    # 1 MiB at 50 Mbit/s is 168 ms on the wire; a push waits a second round trip for the rest
    # beyond the SYN-ACK's 64 KB: 2.5 RTT + 157 ms.
    (MIB, 50, "push", 3.55),
    # A pull: handshake, the request one way, the answer one way, 168 ms of bytes.
    (MIB, 50, "pull", 3.12),
    # At 100 Mbit/s a pull fits in 3 RTTs, a push does not quite.
    (MIB, 100, "pull", 2.56),
    (MIB, 100, "push", 3.02),
    # Within the SYN-ACK's window a push needs no second round trip.
    (60_000, 100, "push", 1.53),
])
def test_floors_follow_what_tcp_allows(size, rate, mode, expected_rtts):
    assert round(rt.floor_ms(size, 150.0, rate, mode) / 150.0, 2) == expected_rtts


def test_summary_in_rtts_table_and_charts():
    scenarios = [s.to_dict() for s in rt.profiles(quick=True)]
    sid, clean = scenarios[0]["id"], scenarios[-1]["id"]
    results = {"untuned": {sid: entry(3.1, 2.5, [("push", MIB, 900.0), ("push", MIB, 1000.0), ("push", MIB, 950.0),
                                                  ("push", 16 * MIB, None)])},
               "global": {sid: entry(44.0, 2.4, [("push", MIB, 600.0), ("push", 16 * MIB, 3300.0)],
                                     link={"rx_packets": 1000, "drop_queue": 12})},
               "per-route": {sid: entry(45.0, 1.1, [("push", MIB, 420.0), ("pull", MIB, 480.0), ("push", 16 * MIB, 3000.0)],
                                        link={"rx_packets": 1000, "drop_queue": 0}),
                             clean: {"bulk": [], "transfers": [{"bytes": MIB, "mode": "pull", "delivered_ms": 400.0}]}}}
    rows = rt.summarize(results, scenarios)
    row = rows[0]
    assert row["phases"]["untuned"]["delivery"]["push-1048576"] == {"ms": 950.0, "rtts": 6.33, "samples": 3, "failed": 0}
    assert row["phases"]["untuned"]["delivery"]["push-16777216"] == {"ms": None, "rtts": None, "samples": 0, "failed": 1}
    assert "pull-1048576" not in row["phases"]["untuned"]["delivery"]
    assert row["phases"]["per-route"]["delivery"]["push-1048576"]["rtts"] == 2.8
    assert row["phases"]["global"]["queue_drop_pct"] == 1.2 and row["phases"]["per-route"]["queue_drop_pct"] == 0.0
    # The second lossy profile was not measured: its cells say so instead of inventing a figure.
    assert rows[1]["phases"] == {}
    table = rt.markdown(rows, {"default congestion control": "cubic"})
    assert "| 3.1 (2.50, –) | 44.0 (2.40, 1.20) | 45.0 (1.10, 0.00) | 1.30 % |" in table
    assert "420 ms (2.80 RTT)" in table and "| – | – | – |" in table
    assert "| 1 MiB push | 950 ms (6.33 RTT) | 600 ms (4.00 RTT) | 420 ms (2.80 RTT) | 532 ms (3.55 RTT) |" in table
    # The clean profile has no bulk row, only its delivery.
    assert "no loss | 1 MiB pull | – | – | 400 ms (2.67 RTT) | 384 ms (2.56 RTT) |" in table
    assert table.count("no loss |") == 1
    assert "LAN inside the site (per-route phase): default congestion control cubic" in table
    svg = rt.chart(rows, "delivery-push-1048576")
    assert svg.startswith("<svg") and "per-route: 2.80 RTT" in svg and "untuned: n/a" in svg
    assert "no loss" not in svg and "no loss" in rt.chart(rows, "delivery-pull-1048576")
    assert "45.0 Mbit/s" in rt.chart(rows, "throughput") and "no loss" not in rt.chart(rows, "throughput")
    assert "global: 1.20 %" in rt.chart(rows, "queue-drops")
    assert set(rt.CHARTS) >= {"throughput", "retransmit", "queue-drops", "delivery-pull-1048576"}
