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


def test_route_departures_count_each_switch_away_once():
    samples = [(0.0, "wg-usw"), (0.05, "wg-usw"), (0.1, "wg-use"), (0.15, "wg-use"), (0.2, "wg-usw"),
               (0.25, "wg-use"), (0.3, "wg-usw")]
    assert fo.route_departures(samples, "wg-usw") == [0.1, 0.25]
    # a poll that starts off primary is not a departure (nothing left the primary in the window)
    assert fo.route_departures([(0.0, "wg-use"), (0.1, "wg-usw")], "wg-usw") == []


BFD_BEFORE = """BIRD 2.0.12 ready.
cp_bfd:
IP address                Interface  State      Since         Interval  Timeout
169.254.2.1               wg-usw-anchor Up      02:10:07.123    0.050    0.150
169.254.3.1               wg-use-anchor Up      02:10:08.456    0.050    0.150
"""


def test_bfd_flaps_from_since_times():
    before = fo.bfd_by_interface(BFD_BEFORE)
    assert before == {"wg-usw-anchor": ("Up", "02:10:07.123"), "wg-use-anchor": ("Up", "02:10:08.456")}
    assert fo.bfd_flaps(before, before) == []
    flapped = BFD_BEFORE.replace("02:10:08.456", "02:15:31.002")
    assert fo.bfd_flaps(before, fo.bfd_by_interface(flapped)) == ["wg-use-anchor"]
    down = BFD_BEFORE.replace("wg-usw-anchor Up", "wg-usw-anchor Down")
    assert fo.bfd_flaps(before, fo.bfd_by_interface(down)) == ["wg-usw-anchor"]
    assert fo.bfd_flaps(before, {}) == ["wg-use-anchor", "wg-usw-anchor"]


def test_soak_counts_false_failovers_and_loss():
    samples = [(t / 20.0, "wg-usw") for t in range(200)]
    samples[100] = (5.0, "wg-use")
    replies = [{"send": t / 100.0, "recv": t / 100.0 + 0.15} for t in range(1000) if t not in range(400, 450)]
    soak = fo.analyze_soak(samples, "wg-usw", replies, 0.0, 10.0, 0.01)
    assert soak["false_failovers"] == 1 and soak["route_off_primary_samples"] == 1
    assert soak["probes_expected"] == 1000 and soak["probe_replies"] == 950
    assert round(soak["longest_reply_gap_ms"]) == 510


def test_parse_recap():
    text = """PLAY RECAP *********
cn-master                  : ok=75   changed=0    unreachable=0    failed=0    skipped=25   rescued=0    ignored=0
usw-gpu1                   : ok=44   changed=2    unreachable=0    failed=1    skipped=51   rescued=0    ignored=0
"""
    recap = fo.parse_recap(text)
    assert recap == {"cn-master": {"ok": 75, "changed": 0, "unreachable": 0, "failed": 0, "skipped": 25},
                     "usw-gpu1": {"ok": 44, "changed": 2, "unreachable": 0, "failed": 1, "skipped": 51}}
    assert fo.task_runs(recap) == 75 + 25 + 44 + 1 + 51


def _replies(times, rtt=0.15):
    return [{"recv": t, "send": t - rtt, "seq": i, "ttl": 64, "rtt_ms": rtt * 1000} for i, t in enumerate(times)]


def test_takeover_that_answers_to_the_end():
    stop, end = 10.0, 30.0
    replies = _replies([9.8, 9.9, 10.05] + [10.6 + 0.01 * i for i in range(1940)])
    samples = [(9.9, "wg-usw-anchor"), (10.2, "wg-usw-anchor"), (10.3, "wg-use-anchor"), (29.9, "wg-use-anchor")]
    res = fo.analyze_takeover(replies, samples, stop, end, "wg-usw-anchor")
    assert res["outage_ms"] == pytest.approx(550)
    assert res["answering_at_end"] is True
    assert res["master_route_switch_ms"] == pytest.approx(300)
    assert res["master_route_changes"] == ["wg-usw-anchor", "wg-use-anchor"]


def test_takeover_whose_secondary_falls_silent_is_an_outage_to_the_end():
    """The CI failure of stop 20: a few replies right after the stop, then nothing, and the master
    left without a tunnel route. The silence up to the window's end is the outage."""
    stop, end = 10.0, 30.0
    replies = _replies([9.9] + [10.0 + 0.01 * i for i in range(1, 17)])
    samples = [(10.05, "wg-usw-anchor"), (10.4, "eth0"), (29.9, "eth0")]
    res = fo.analyze_takeover(replies, samples, stop, end, "wg-usw-anchor")
    assert res["outage_ms"] == pytest.approx((end - 10.16) * 1000)
    assert res["answering_at_end"] is False
    assert res["master_route_switch_ms"] is None
    assert res["master_route_changes"] == ["wg-usw-anchor", "eth0"]


def test_takeover_with_no_answer_at_all():
    res = fo.analyze_takeover(_replies([9.0, 9.5]), [], 10.0, 30.0, "wg-usw-anchor")
    assert res["outage_ms"] is None and res["answered_after"] == 0 and res["answering_at_end"] is False
