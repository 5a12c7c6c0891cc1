"""The all-reduce benchmark's analysis on fixtures laid out as train.yml collects runs."""

import xml.etree.ElementTree as ET

from trainnet_bench import allreduce


def verify(rank, case, elements, busbw, ok=True, groups=8):
    return {"event": "verify", "rank": rank, "world_size": 4, "host": "h%d" % rank, "case": case, "groups": groups,
            "elements": elements, "bytes": elements * 4, "seconds": 1.0 + rank, "busbw_mbit_s": busbw, "ok": ok}


def done(rank, ok=True):
    return {"event": "verify_done", "rank": rank, "world_size": 4, "ok": ok, "bad_ranks": [] if ok else [rank]}


def verify_events(ok=True):
    events = {}
    for rank in range(4):
        events["h%d" % rank] = [verify(rank, "default_group", 1000, 0.1, groups=1),
                                verify(rank, "default_group", 4096, 10.0 + rank, groups=1),
                                verify(rank, "site_groups", 4096, 40.0 + rank, ok=ok or rank != 2),
                                done(rank, ok=ok or rank != 2)]
    return events


def test_verify_cases_use_the_largest_tensor_only():
    cases = allreduce.verify_cases(verify_events())
    assert set(cases) == {"default_group", "site_groups"}
    assert cases["default_group"] == {"busbw_mbit_s": 11.5, "busbw_min": 10.0, "busbw_max": 13.0, "seconds": 2.5,
                                      "groups": 1, "bytes": 16384, "samples": 4, "ok": True}
    assert cases["site_groups"]["busbw_mbit_s"] == 41.5 and cases["site_groups"]["groups"] == 8
    assert not allreduce.verify_cases(verify_events(ok=False))["site_groups"]["ok"]
    assert allreduce.verify_cases({}) == {}
    # A run that stalled before the tensor asked for has no figures (not the small tensors' ones).
    assert allreduce.verify_cases(verify_events(), elements=8192) == {}


def step(rank, n, t, busbw):
    # Plain DDP (no hook) logs no all-reduce figures.
    return {"event": "step", "rank": rank, "world_size": 4, "host": "h%d" % rank, "step": n, "loss": 1.0,
            "step_time_s": t, "allreduce_time_s": None if busbw is None else t / 2,
            "allreduce_bytes": None if busbw is None else 1000, "busbw_mbit_s": busbw}


def results():
    runs = [allreduce.run_record("tuned", "default", "verify", 0, 60.0, verify_events()),
            dict(allreduce.run_record("untuned", "default", "verify", 2, 200.0, {}), tensor_mib=2),
            allreduce.run_record("tuned", "default", "site_hook", 0, 70.0,
                                 {"h%d" % r: [step(r, 1, 9.0, 1.0), step(r, 2, 2.0, 30.0), step(r, 3, 2.2, 32.0)]
                                  for r in range(4)}),
            allreduce.run_record("tuned", "default", "plain_ddp", 0, 70.0,
                                 {"h%d" % r: [step(r, 1, 9.0, None), step(r, 2, 3.0, None)] for r in range(4)})]
    return {"bottleneck_mbit": 50.0, "tensor_mib": 16, "steps": 3, "runs": runs}


def test_table_gives_fractions_of_the_link_and_names_stalled_runs():
    lines = allreduce.table(results())
    text = "\n".join(lines)
    assert "| tuned | default | 16 MiB | 11.5 (0.23; 10.0-13.0) | - | - | 41.5 (0.83; 40.0-43.0) | yes |" in text
    assert "| untuned | default | 2 MiB | - | - | - | - | did not finish (rc 2) |" in text
    site = [line for line in lines if "exchange directly" in line and "| tuned |" in line]
    assert site == ["| tuned | default | DDP, WAN hook, site (site sums, leaders exchange directly) | 0 | 2.10 | 1.05 | 31.0 | 0.62 |"]
    plain = [line for line in lines if "built-in" in line]
    assert plain == ["| tuned | default | DDP, built-in all-reduce (no hook) | 0 | 3.00 | - | - | - |"]


def test_charts_are_valid_svg_with_every_case():
    data = results()
    svg = allreduce.chart(data)
    root = ET.fromstring(svg)
    titles = [t.text for t in root.iter("{http://www.w3.org/2000/svg}title")]
    assert any("tuned, default, 16 MiB sync groups, site: 41.5 Mbit/s = 0.83 x link" in t for t in titles), titles
    assert "untuned, default, 2 MiB" in svg and "n/a" in svg
    steps = ET.fromstring(allreduce.step_chart(data))
    texts = [t.text for t in steps.iter("{http://www.w3.org/2000/svg}text")]
    assert "WAN hook, site (site sums, leaders exchange directly): 2.10 s" in texts, texts


def test_group_sweep_table_and_chart_order_runs_by_group_count():
    data = results()
    for groups, bw in ((1, 20.0), (16, 44.0)):
        run = allreduce.run_record("tuned", "default", "verify", 0, 60.0, {
            "h%d" % r: [verify(r, "site_groups", 4096, bw, groups=groups), done(r)] for r in range(4)})
        data["runs"].append(dict(run, sync_groups=groups, sweep=True))
    data["runs"][0]["sync_groups"] = 8
    lines = allreduce.sweep_table(data)
    rows = [line for line in lines if line.startswith("| 1") or line.startswith("| 8") or line.startswith("| 16")]
    assert rows == ["| 1 | - | - | 20.0 (0.40) |", "| 8 | - | - | 41.5 (0.83) |", "| 16 | - | - | 44.0 (0.88) |"]
    # The main table keeps one row per (phase, profile): sweep runs stay out of it.
    assert sum(1 for line in allreduce.table(data) if line.startswith("| tuned | default | 16 MiB | 11.5")) == 1
    root = ET.fromstring(allreduce.sweep_chart(data))
    labels = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text and t.text.endswith("sync groups")]
    assert labels == ["1 sync groups", "8 sync groups", "16 sync groups"]
    assert allreduce.sweep_table(results()) == []
