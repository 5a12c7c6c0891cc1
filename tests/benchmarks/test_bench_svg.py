"""The SVG charts: well-formed, self-contained, one per RTT, values where they belong."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from trainnet_bench.svg import chart_points, nice_max, scenario_chart, throughput_chart, write_charts

SVG = "{http://www.w3.org/2000/svg}"


def test_write_charts_one_per_rtt_plus_scenarios(full_run, tmp_path):
    written = [p for p in write_charts(full_run, tmp_path) if p.suffix == ".svg"]
    names = sorted(p.name for p in written)
    assert names == ["scenarios.svg", "throughput-vs-loss-150ms.svg", "throughput-vs-loss-200ms.svg"]
    for path in written:
        text = path.read_text()
        root = ET.fromstring(text)  # well-formed XML
        assert root.tag == SVG + "svg"
        assert "http" not in text.replace("http://www.w3.org/2000/svg", "")  # no external assets


def test_throughput_chart_plots_medians_and_whiskers(full_run):
    points = chart_points(full_run["summary"], 150)
    assert [p["loss"] for p in points] == [0.0001, 0.001, 0.01]
    root = ET.fromstring(throughput_chart(150, points, 50))
    circles = root.findall(f"{SVG}circle")
    assert len(circles) == 6  # untuned and tuned median per loss
    # tuned (blue) dots sit higher (smaller y) than untuned (red) at 1 % loss
    by_color = {}
    for circle in circles:
        by_color.setdefault(circle.get("fill"), []).append(float(circle.get("cy")))
    assert max(by_color["#1f77b4"]) < min(by_color["#d62728"][-1:])
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "1%" in texts and "0.01%" in texts
    assert any("150 ms RTT" in t for t in texts)


def test_missing_phase_still_renders(full_run):
    points = chart_points(full_run["summary"], 200)
    for p in points:
        p["tuned"] = {"n": 0, "median": None, "min": None, "max": None}
    root = ET.fromstring(throughput_chart(200, points, 50))
    assert len(root.findall(f"{SVG}circle")) == 3


def test_scenario_chart_and_escaping():
    text = scenario_chart([{"label": "a <&> b", "unit": "ms", "untuned": 300.0, "tuned": None}], "t")
    root = ET.fromstring(text)
    assert any(t.text == "a <&> b" for t in root.iter(f"{SVG}text"))


def test_scenario_chart_is_the_collections_bar_chart():
    """Drawn by plugins/plugin_utils/svg_chart.py (as the link report's charts): each group
    scaled alone, a tooltip per bar, n/a for a missing phase."""
    bars = [{"label": "TFO", "unit": "ms", "untuned": 300.0, "tuned": 150.0},
            {"label": "PMTU", "unit": "Mbit/s", "untuned": None, "tuned": 46.0}]
    root = ET.fromstring(scenario_chart(bars, "t"))
    drawn = [(r.find(f"{SVG}title").text, float(r.get("width")), r.get("fill"))
             for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert drawn == [("TFO untuned: 300 ms", 340.0, "#d62728"), ("TFO tuned: 150 ms", 170.0, "#1f77b4"),
                     ("PMTU tuned: 46 Mbit/s", 340.0, "#1f77b4")]
    assert "untuned: n/a" in [t.text for t in root.iter(f"{SVG}text")]


def test_nice_max():
    assert nice_max(52.5) == 60
    assert nice_max(210) == 250
    assert nice_max(48) == 50
    assert nice_max(0) == 1.0
