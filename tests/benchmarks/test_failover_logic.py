"""Failover analysis on synthetic probe timestamps (no lab)."""

from __future__ import annotations

import pytest
from trainnet_bench import failover as fo

CUT, RESTORE = 103.0, 108.0


def synthetic_ping(switch_s=0.2, back_s=0.8, interval=0.01, start=100.0, end=116.0):
    """Probes every 10 ms: RTT 150 ms on the primary, 270 ms on the backup; probes sent in
    [cut - 150 ms, cut + switch) are lost (their replies meet the cut), then the backup answers
    until back_s after restore."""
    lines, seq, t = [], 0, start
    while t < end:
        if CUT - 0.15 <= t < CUT + switch_s:
            pass
        else:
            rtt = 0.27 if CUT + switch_s <= t < RESTORE + back_s else 0.15
            lines.append(f"[{t + rtt:.6f}] 64 bytes from 198.19.255.1: icmp_seq={seq} ttl=63 "
                         f"time={rtt * 1000:.1f} ms")
        seq += 1
        t += interval
    return "PING 198.19.255.1\n" + "\n".join(lines) + "\n--- statistics ---\n"


def test_parse_ping_send_time_is_arrival_minus_rtt():
    replies = fo.parse_ping("[100.500000] 64 bytes from 1.2.3.4: icmp_seq=7 ttl=63 time=150 ms\n"
                            "Request timeout for icmp_seq 8\n")
    assert len(replies) == 1
    assert replies[0]["seq"] == 7
    assert replies[0]["send"] == pytest.approx(100.35)


def test_outage_figures_of_a_cut():
    result = fo.analyze_ping(fo.parse_ping(synthetic_ping(switch_s=0.2)), CUT, RESTORE, 210.0)
    # Last answered probe sent at cut - 160 ms, first after at cut + 200 ms.
    assert result["loss_window_ms"] == pytest.approx(360, abs=11)
    assert result["since_cut_ms"] == pytest.approx(200, abs=11)
    # Last reply arrives at cut - 10 ms, first backup reply at cut + 200 + 270 ms.
    assert result["reply_gap_ms"] == pytest.approx(480, abs=11)
    assert result["back_on_primary_rtt_ms"] == pytest.approx(800, abs=11)


def test_longer_switch_gives_longer_outage():
    fast = fo.analyze_ping(fo.parse_ping(synthetic_ping(switch_s=0.1)), CUT, RESTORE, 210.0)
    slow = fo.analyze_ping(fo.parse_ping(synthetic_ping(switch_s=0.6)), CUT, RESTORE, 210.0)
    assert slow["reply_gap_ms"] - fast["reply_gap_ms"] == pytest.approx(500, abs=11)


def test_no_reply_after_cut_is_no_figure_not_zero():
    replies = [r for r in fo.parse_ping(synthetic_ping()) if r["recv"] < CUT]
    result = fo.analyze_ping(replies, CUT, RESTORE, 210.0)
    assert result["reply_gap_ms"] is None
    assert result["loss_window_ms"] is None
    assert result["back_on_primary_rtt_ms"] is None


def test_longest_gap_counts_a_gap_that_began_before_the_window():
    assert fo.longest_gap([1.0, 1.1, 2.5, 2.6], 2.0, 3.0) == pytest.approx(1400)
    assert fo.longest_gap([1.0, 1.1, 1.2], 5.0, 6.0) is None


def test_route_switch_and_settled_failback():
    samples = fo.parse_route_samples(
        "100.0 wg-usw\n103.05 wg-usw\n103.25 wg-use\n107.9 wg-use\n108.3 wg-usw\n"
        "108.4 wg-use\n108.9 wg-usw\n109.5 wg-usw\ngarbage line here\n")
    result = fo.analyze_route(samples, CUT, RESTORE, "wg-usw")
    assert result["route_switch_ms"] == pytest.approx(250)
    # A flap back to the backup at 108.4 means it settled only at 108.9.
    assert result["back_on_primary_ms"] == pytest.approx(900)


def test_route_never_back_on_primary():
    samples = [(100.0, "wg-usw"), (104.0, "wg-use"), (110.0, "wg-use")]
    assert fo.analyze_route(samples, CUT, RESTORE, "wg-usw")["back_on_primary_ms"] is None


def tcp_log(stop_echo_at=None, error="ok"):
    lines, n, t = [], 0, 100.0
    while t < 116.0:
        lines.append(f"S {t:.3f} {n}")
        echo = t + (0.27 if CUT <= t < RESTORE else 0.15)
        lost = CUT - 0.15 <= t < CUT + 0.4 or (stop_echo_at is not None and echo >= stop_echo_at)
        if not lost:
            lines.append(f"R {echo:.3f} {n}")
        n += 1
        t += 0.05
    return "\n".join(lines) + f"\nE {error}\n"


def test_tcp_survives_a_cut():
    log = fo.parse_tcp_log(tcp_log())
    cut = fo.analyze_tcp_cut(log, CUT, RESTORE, 116.0)
    assert cut["echo_gap_ms"] == pytest.approx(720, abs=51)
    assert cut["echoes_during_cut"] and cut["echoes_after_restore"]
    assert fo.tcp_survived(log, RESTORE)


def test_tcp_error_or_silence_after_restore_is_not_survival():
    assert not fo.tcp_survived(fo.parse_tcp_log(tcp_log(error="ConnectionResetError:x")), RESTORE)
    assert not fo.tcp_survived(fo.parse_tcp_log(tcp_log(stop_echo_at=CUT)), RESTORE)
    unterminated = fo.parse_tcp_log(tcp_log().replace("E ok\n", ""))
    assert not fo.tcp_survived(unterminated, RESTORE)


def test_median_skips_missing_figures():
    cuts = [{"x": 3.0}, {"x": None}, {"x": 1.0}, {"x": 2.0}]
    assert fo.median_of(cuts, "x") == 2.0
    assert fo.median_of([{"x": None}], "x") is None
