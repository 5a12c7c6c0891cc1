"""Egress-pool benchmark analysis: rates from byte counters, steady state as a multiple of R, the
recovery after a path is killed, the summary of a run and its chart."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from trainnet_bench import egress

MBIT = 1e6 / 8  # bytes per second at 1 Mbit/s


def counter(rates, step=0.25, t0=1000.0):
    """Byte-counter samples for a piecewise rate: [(seconds, Mbit/s), ...]."""
    samples, total, t = [(t0, 0)], 0.0, 0.0
    for seconds, mbit in rates:
        for _ in range(int(seconds / step)):
            t += step
            total += mbit * MBIT * step
            samples.append((t0 + t, int(total)))
    return samples


def test_rate_series_and_mean_rate():
    samples = counter([(4, 10), (4, 30)])
    series = egress.rate_series(samples, 1.0)
    assert abs(series[2][1] - 10) < 0.01 and abs(series[-1][1] - 30) < 0.01
    assert abs(egress.mean_rate(samples, 1000.0, 1004.0) - 10) < 0.01
    assert egress.mean_rate(samples, 2000, 2001) is None


def test_steady_rate_skips_ramp_and_tail():
    samples = counter([(3, 5), (10, 38), (2, 4)])
    assert abs(egress.steady_rate(samples) - 38) < 0.01


def test_recovery_after_a_kill():
    # 40 Mbit/s, a kill at 5 s: 3 s at 20, then 30 Mbit/s
    samples = counter([(5, 40), (3, 20), (10, 30)])
    kill_t = samples[0][0] + 5
    # 2 s windows: back at 27 Mbit/s once the window holds mostly the 30 Mbit/s part
    rec = egress.recovery_s(samples, kill_t, 27.0, window_s=2.0)
    assert 4.0 <= rec <= 5.0, rec
    assert egress.recovery_s(samples, kill_t, 35.0) is None


def run(label, paths, rates, kill_at=None, ok=32, failed=(), corrupt=()):
    samples = counter(rates)
    seconds = samples[-1][0] - samples[0][0]
    return {"label": label, "paths": paths, "samples": samples,
            "kill_t": None if kill_at is None else samples[0][0] + kill_at,
            "report": {"shards": 32, "ok": ok, "failed": list(failed), "corrupt": list(corrupt),
                       "seconds": seconds, "bytes": samples[-1][1]}}


def test_summarize_pool_and_kill():
    pool = egress.summarize(run("pool of 4", 4, [(3, 10), (12, 37), (2, 5)]), 10.0)
    assert pool["steady_mbit"] == 37.0 and pool["steady_x_R"] == 3.7
    killed = egress.summarize(run("kill", 4, [(3, 10), (6, 37), (2, 15), (14, 29), (2, 5)], kill_at=9,
                                  corrupt=["shard-0003.bin"]), 10.0)
    assert killed["before_kill_x_R"] == 3.7
    assert 2.8 <= killed["after_kill_x_R"] <= 2.95
    assert killed["recovery_s_to_2.7R"] is not None and killed["recovery_s_to_2.7R"] < 5
    assert killed["corrupt_on_arrival"] == 1 and killed["failed"] == 0


def test_chart_is_valid_svg_with_one_line_per_run():
    runs = [run("1 path", 1, [(10, 9.5)]), run("pool of 4", 4, [(10, 37)]),
            run("pool of 4, killed", 4, [(5, 37), (5, 28)], kill_at=5)]
    svg = egress.chart(runs, 10.0)
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert len(root.findall(ns + "polyline")) == 3
    texts = [t.text for t in root.iter(ns + "text")]
    assert "one path killed" in texts and "4R" in texts and "pool of 4" in texts


def test_settled_rate_after_a_kill_ends_where_fewer_shards_than_live_paths_remain():
    """Measured on the lab (CI): about 2.9 R after the cut, then the last 2 MiB shards alone at about
    1 R for 3 s (the one retried from the dead path). Ending 2 s before the end gave 2.63 R; ending
    when fewer shards than live paths remain measures the pool: about 2.9 R."""
    rates = [(6, 38), (2, 15), (16, 29), (1, 25), (4, 10)]
    data = run("kill", 4, rates, kill_at=6)
    shard = 2 * 2**20
    data["report"]["bytes"] = data["samples"][-1][1]
    tail_included = egress.summarize(data, 10.0)
    settled = egress.summarize(data, 10.0, shard_bytes=shard)
    assert tail_included["after_kill_x_R"] < 2.7
    assert 2.85 <= settled["after_kill_x_R"] <= 2.95, settled
    # the window ends once fewer than 3 (live paths) x 2 MiB were still to come
    end = settled["settled_window_s"][1]
    remaining = data["samples"][-1][1] - [b for t, b in data["samples"] if t - data["samples"][0][0] <= end][-1]
    assert 3 * shard < remaining <= 3 * shard + 29 * MBIT * 0.25
