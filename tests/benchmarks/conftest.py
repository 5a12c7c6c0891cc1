"""Benchmarks tests: pure logic (no root) and the smoke run (root, podman, the lab image).

trainnet_bench, trainnet_lab and the collection are imported as installed in .venv
(scripts/bootstrap.sh).
"""

from __future__ import annotations

import pytest
from trainnet_bench.profiles import plan
from trainnet_bench.report import summarize_run


def pytest_configure(config):
    config.addinivalue_line("markers", "lab: builds a real lab (root, podman, the lab image)")


def bulk_sample(mbps, retrans=0.5, cc="cubic", mss=1448, rep=0):
    return {"throughput_mbps": mbps, "retransmit_pct": retrans, "congestion_control": cc,
            "mss_bytes": mss, "rep": rep,
            "emulator": {"near->far": {"drop_queue": 0}, "tun-near": {"overflow_drops": 0}}}


def tfo_samples(ttfb_ms, acked, count=3):
    samples = [{"conn": 0, "priming": True, "ttfb_ms": ttfb_ms * 1.5, "syn_data_acked": False}]
    samples += [{"conn": i, "priming": False, "ttfb_ms": ttfb_ms + i, "syn_data_acked": acked}
                for i in range(1, count + 1)]
    return samples


@pytest.fixture
def full_run() -> dict:
    """A synthetic full run: every scenario of the real plan, three samples per phase."""
    scenarios = plan(smoke=False)
    phases = {"untuned": {}, "tuned": {}}
    for scenario in scenarios:
        loss = scenario.loss
        if scenario.kind == "tfo":
            phases["untuned"][scenario.id] = {"ping_rtt_ms": 150.0, "samples": tfo_samples(300, False)}
            phases["tuned"][scenario.id] = {"ping_rtt_ms": 150.0, "samples": tfo_samples(150, True)}
            continue
        if scenario.kind == "pmtu":
            untuned, tuned = [0.0, 0.0, 0.0], [46.0, 47.0, 45.0]
        elif scenario.kind == "buffer":
            untuned, tuned = [70.0, 72.0, 71.0], [180.0, 185.0, 190.0]
        else:
            base = 1.0 / (loss ** 0.5) / 10 * (150 / scenario.rtt_ms)
            untuned = [base * f for f in (0.9, 1.0, 1.1)]
            tuned = [47.0 * (1 - loss) * f for f in (0.98, 1.0, 0.99)]
        phases["untuned"][scenario.id] = {"samples": [bulk_sample(v, 1.0, rep=i)
                                                       for i, v in enumerate(untuned)]}
        phases["tuned"][scenario.id] = {"samples": [bulk_sample(v, 0.8, "bbr", 1348, rep=i)
                                                     for i, v in enumerate(tuned)]}
    data = {"schema": 1, "mode": "full", "started": "2026-01-01T00:00:00Z", "seconds": 1200,
            "conditions": {"kernel": "6.18", "cpus": 2, "iperf3": "iperf 3.12", "reps": 3,
                           "duration_s": 20, "load_at_start": [0.5, 0.6, 0.7],
                           "load_at_end": [1.0, 0.9, 0.8], "available_congestion_control":
                           "reno bbr cubic", "seed_base": 42},
            "scenarios": [s.to_dict() for s in scenarios], "phases": phases,
            "hosts": {"untuned": {"near1": {"net.ipv4.tcp_congestion_control": "cubic",
                                            "eth0_mtu": 1500}},
                      "tuned": {"near1": {"net.ipv4.tcp_congestion_control": "bbr",
                                          "eth0_mtu": 1400}}}}
    data["summary"] = summarize_run(data)
    return data
