"""site_cost: the fit of site.yml's time against task runs and the prediction for a bigger cluster."""

from __future__ import annotations

import pytest
from trainnet_bench import site_cost


def recap(hosts: dict) -> dict:
    return {h: {"ok": ok, "changed": 0, "unreachable": 0, "failed": 0, "skipped": skipped}
            for h, (ok, skipped) in hosts.items()}


def result(size, seconds, rerun_seconds, hosts, classes):
    first = recap(hosts)
    runs = sum(ok + skipped for ok, skipped in hosts.values())
    return {"size": size, "classes": classes,
            "first": {"seconds": seconds, "task_runs": runs, "skipped": 0, "changed": 5, "recap": first},
            "second": {"seconds": rerun_seconds, "task_runs": runs, "skipped": 0, "changed": 0, "recap": first}}


def test_fit_recovers_a_line():
    a, b = site_cost.fit([(100, 20.0), (200, 30.0), (400, 50.0)])
    assert a == pytest.approx(10.0) and b == pytest.approx(0.1)


def test_prediction_scales_task_runs_per_class_and_uses_the_fit():
    classes = {"m": ["home_master"], "a": ["control_plane"], "g1": ["gpu_nodes"], "g2": ["gpu_nodes"],
               "l": ["loaders"], "e": ["egress_nodes"]}
    small = result(4, 30.0, 20.0, {"m": (50, 10), "a": (40, 10), "g1": (30, 10), "g2": (30, 10)},
                   {h: classes[h] for h in ("m", "a", "g1", "g2")})
    big = result(6, 40.0, 25.0, {"m": (50, 10), "a": (40, 10), "g1": (30, 10), "g2": (30, 10),
                                 "l": (20, 0), "e": (25, 5)}, classes)
    model = site_cost.predict([small, big])
    assert model["per_class_task_runs"]["gpu_nodes"] == {"first": 40, "second": 40}
    cluster = site_cost.BIG_CLUSTER
    runs = 60 * cluster["home_master"] + 50 * cluster["control_plane"] + 40 * cluster["gpu_nodes"] \
        + 20 * cluster["loaders"] + 30 * cluster["egress_nodes"]
    assert model["first"]["task_runs"] == runs
    # Two points: 190 runs -> 30 s, 240 runs -> 40 s: 0.2 s per run.
    assert model["first"]["fit_seconds_per_task_run"] == pytest.approx(0.2)
    assert model["first"]["seconds"] == round(30 + 0.2 * (runs - 190))
    text = site_cost.markdown([small, big], model, "abc1234")
    assert "| 6 | 40 | 240 (0) | 5 | 25 | 240 | 0 |" in text and f"{runs} task runs" in text
    assert site_cost.chart([small, big]).startswith("<svg")
