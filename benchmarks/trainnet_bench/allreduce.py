"""All-reduce benchmark analysis (benchmarks/allreduce_lab.py): the lab profiles, the figures of
each train.yml run, the table and the charts. Pure logic: tests/benchmarks/test_allreduce_logic.py.

Bus bandwidth is the nccl-tests definition over the whole job (n = 4 ranks):
2(n-1)/n x bytes / time. It is what a flat ring puts on every link; a site-aware sum sends less
across the ocean than that, so its bus bandwidth can exceed the link rate (the table shows the
fraction of the bottleneck link as measured, and says so)."""

from __future__ import annotations

import statistics

from ansible_collections.longhaul.trainnet.plugins.plugin_utils import svg_chart

from . import training

# The ocean links of the default lab, changed per profile at run time (Lab.set_link); the
# us-west<->us-east link stays as the inventory has it.
OCEAN_LINKS = (("cn-home", "us-west"), ("cn-home", "us-east"))
PROFILES = {
    "default": {"title": "default lab (150/200 ms, 0.5 %/1 % loss, 1400-byte path to us-west without ICMP)",
                "links": {}},
    "loss-1pct": {"title": "1 % loss on both ocean links (150/200 ms, 1500-byte paths, as the TCP benchmark's lossy profile)",
                  "links": {pair: {"loss": 0.01, "loss_model": "bernoulli", "mtu": 1500, "icmp_blackhole": False}
                            for pair in OCEAN_LINKS}},
    "clean": {"title": "no loss on the ocean links (150/200 ms, 1500-byte paths)",
              "links": {pair: {"loss": 0.0, "loss_model": "bernoulli", "mtu": 1500, "icmp_blackhole": False}
                        for pair in OCEAN_LINKS}},
}
# What each train.yml run of a profile is: the workload arguments that make it so.
RUNS = {
    "verify": {"title": "all-reduce of known tensors (verify mode)", "mode": "verify", "args": []},
    "plain_ddp": {"title": "DDP, built-in all-reduce (no hook)", "mode": "train", "args": ["--no-comm-hook"]},
    "flat_hook": {"title": "DDP, WAN hook, flat (every rank in every chunk's ring)", "mode": "train",
                  "args": ["--sync-topology", "flat"]},
    "site_ring_hook": {"title": "DDP, WAN hook, site-ring (site sums, ring between the site leaders)", "mode": "train",
                       "args": ["--sync-topology", "site-ring"]},
    "site_hook": {"title": "DDP, WAN hook, site (site sums, leaders exchange directly)", "mode": "train",
                  "args": ["--sync-topology", "site"]},
}
# Verify cases, as the workload names them, and how the table calls them.
CASES = {"default_group": "1 group, flat (plain DDP's all-reduce)", "sync_groups": "sync groups, flat",
         "site_ring_groups": "sync groups, site-ring", "site_groups": "sync groups, site"}
COLOURS = {"default_group": "#9e9e9e", "sync_groups": "#1f77b4", "site_ring_groups": "#ff7f0e", "site_groups": "#2ca02c",
           "plain_ddp": "#9e9e9e", "flat_hook": "#1f77b4", "site_ring_hook": "#ff7f0e", "site_hook": "#2ca02c"}


def verify_cases(events: dict[str, list[dict]], elements: int | None = None) -> dict[str, dict]:
    """{case: figures of the tensor of `elements` (default: the largest logged)}: bus bandwidth
    (median, min, max over ranks and rounds), seconds (median), groups, bytes, and whether every
    sum was exact. A run that stalled before that tensor has no figures: {}."""
    flat = [e for evs in events.values() for e in evs if e.get("event") == "verify"]
    if not flat:
        return {}
    largest = elements or max(e["elements"] for e in flat)
    out = {}
    for case in sorted({e["case"] for e in flat if e["elements"] == largest}):
        rows = [e for e in flat if e["case"] == case and e["elements"] == largest]
        bws = [e["busbw_mbit_s"] for e in rows]
        out[case] = {"busbw_mbit_s": statistics.median(bws), "busbw_min": min(bws), "busbw_max": max(bws),
                     "seconds": statistics.median(e["seconds"] for e in rows), "groups": rows[0]["groups"],
                     "bytes": rows[0]["bytes"], "samples": len(rows), "ok": all(e["ok"] for e in rows)}
    return out


def run_record(phase: str, profile: str, kind: str, rc: int, seconds: float,
               events: dict[str, list[dict]], elements: int | None = None) -> dict:
    """One train.yml run, reduced to what the table and charts need (the events stay on disk).
    elements: the verify tensor asked for (figures of smaller ones measure latency, not bandwidth)."""
    summary = training.summarize(events) if events else {}
    return {"phase": phase, "profile": profile, "run": kind, "rc": rc, "seconds": round(seconds, 1),
            "ranks": summary.get("ranks", []), "hosts": summary.get("hosts", []),
            "verify_ok": summary.get("verify_ok"), "cases": verify_cases(events, elements),
            "steps": summary.get("steps", 0), "median_step_time_s": summary.get("median_step_time_s"),
            "median_allreduce_time_s": summary.get("median_allreduce_time_s"),
            "median_busbw_mbit_s": summary.get("median_busbw_mbit_s")}


def _tensor(results, run):
    return run.get("tensor_mib") or results.get("tensor_mib")


def _fmt(value, digits=1, unit=""):
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def _frac(value, link):
    return "-" if value is None or not link else f"{value / link:.2f}"


def table(results: dict) -> list[str]:
    """Markdown: one row per (phase, profile) for the collective, one for the DDP steps."""
    link = results["bottleneck_mbit"]
    lines = ["### All-reduce (verify mode): bus bandwidth, Mbit/s (fraction of the %g Mbit/s bottleneck; min-max over ranks and rounds)"
             % link, "",
             "| phase | profile | tensor | " + " | ".join(CASES.values()) + " | sums exact |",
             "| --- | --- | --- | " + " | ".join(["---"] * len(CASES)) + " | --- |"]
    for run in results["runs"]:
        if run["run"] != "verify" or run.get("sweep"):
            continue
        cells = []
        for case in CASES:
            fig = run["cases"].get(case)
            cells.append("-" if not fig else "%s (%s; %s-%s)" % (
                _fmt(fig["busbw_mbit_s"]), _frac(fig["busbw_mbit_s"], link), _fmt(fig["busbw_min"]), _fmt(fig["busbw_max"])))
        if any(not fig["ok"] for fig in run["cases"].values()):
            exact = "NO (rc %d)" % run["rc"]
        elif run["rc"] != 0:
            exact = "did not finish (rc %d)" % run["rc"]
        else:
            exact = "yes" if run["verify_ok"] else "NO"
        lines.append("| %s | %s | %s MiB | %s | %s |" % (run["phase"], run["profile"], _fmt(_tensor(results, run), 0),
                                                         " | ".join(cells), exact))
    lines += ["", "### DDP training steps (%s steps, the first left out): median step time, s; all-reduce bus "
              "bandwidth from the hook's span, Mbit/s" % results.get("steps", "?"), "",
              "| phase | profile | run | rc | median step, s | all-reduce span, s | bus bandwidth | fraction of link |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for run in results["runs"]:
        if run["run"] == "verify":
            continue
        lines.append("| %s | %s | %s | %d | %s | %s | %s | %s |" % (
            run["phase"], run["profile"], RUNS[run["run"]]["title"], run["rc"], _fmt(run["median_step_time_s"], 2),
            _fmt(run["median_allreduce_time_s"], 2), _fmt(run["median_busbw_mbit_s"]),
            _frac(run["median_busbw_mbit_s"], link)))
    return lines


def chart(results: dict) -> str:
    """Bars: the all-reduce bus bandwidth of each case, grouped by (phase, profile), on one scale."""
    link = results["bottleneck_mbit"]
    groups = []
    for run in results["runs"]:
        if run["run"] != "verify" or run.get("sweep"):
            continue
        bars = []
        for case, title in CASES.items():
            fig = run["cases"].get(case)
            value = fig["busbw_mbit_s"] if fig else None
            bars.append({"name": title, "value": value, "colour": COLOURS[case],
                         "text": "" if value is None else "%.1f Mbit/s = %.2f x link" % (value, value / link)})
        groups.append({"label": "%s, %s, %s MiB" % (run["phase"], run["profile"], _fmt(_tensor(results, run), 0)), "bars": bars})
    return svg_chart.bar_chart("All-reduce bus bandwidth, 4 ranks in 3 sites (bottleneck link %g Mbit/s)"
                               % link, groups, label_width=200,
                               bar_width=300, value_width=420, bar_height=18) + "\n"


def step_chart(results: dict) -> str:
    """Bars: DDP median step time per run kind, grouped by (phase, profile)."""
    groups = {}
    for run in results["runs"]:
        if run["run"] == "verify":
            continue
        label = "%s, %s" % (run["phase"], run["profile"])
        value = run["median_step_time_s"] if run["rc"] == 0 else None
        groups.setdefault(label, []).append({"name": RUNS[run["run"]]["title"].replace("DDP, ", ""), "value": value,
                                              "colour": COLOURS[run["run"]],
                                              "text": "" if value is None else "%.2f s" % value})
    return svg_chart.bar_chart("DDP median step time (lower is better), 4 ranks in 3 sites",
                               [{"label": k, "bars": v} for k, v in groups.items()], label_width=170,
                               bar_width=300, value_width=420, bar_height=18) + "\n"


def _sweep_runs(results: dict) -> list[dict]:
    """The verify runs of one (phase, profile) by sync-group count: the sweep and the main run."""
    sweep = [run for run in results["runs"] if run["run"] == "verify" and run.get("sweep")]
    if not sweep:
        return []
    key = (sweep[0]["phase"], sweep[0]["profile"])
    same = [run for run in results["runs"] if run["run"] == "verify" and (run["phase"], run["profile"]) == key]
    return sorted(same, key=lambda run: run.get("sync_groups") or 0)


def sweep_table(results: dict) -> list[str]:
    """Markdown: bus bandwidth of each case by number of sync groups."""
    runs = _sweep_runs(results)
    if not runs:
        return []
    link = results["bottleneck_mbit"]
    cases = [case for case in CASES if case != "default_group"]
    lines = ["### Sync groups (%s, %s): bus bandwidth, Mbit/s (fraction of the link)" % (runs[0]["phase"], runs[0]["profile"]), "",
             "| sync groups | " + " | ".join(CASES[c] for c in cases) + " |", "| --- | " + " | ".join(["---"] * len(cases)) + " |"]
    for run in runs:
        cells = []
        for case in cases:
            fig = run["cases"].get(case)
            cells.append("-" if not fig else "%s (%s)" % (_fmt(fig["busbw_mbit_s"]), _frac(fig["busbw_mbit_s"], link)))
        lines.append("| %s | %s |" % (run.get("sync_groups"), " | ".join(cells)))
    return lines


def sweep_chart(results: dict) -> str:
    """Bars: bus bandwidth per case, grouped by number of sync groups."""
    link = results["bottleneck_mbit"]
    groups = []
    for run in _sweep_runs(results):
        bars = []
        for case in (c for c in CASES if c != "default_group"):
            fig = run["cases"].get(case)
            value = fig["busbw_mbit_s"] if fig else None
            bars.append({"name": CASES[case], "value": value, "colour": COLOURS[case],
                         "text": "" if value is None else "%.1f Mbit/s = %.2f x link" % (value, value / link)})
        groups.append({"label": "%s sync groups" % run.get("sync_groups"), "bars": bars})
    return svg_chart.bar_chart("All-reduce bus bandwidth by number of sync groups, %s MiB (bottleneck link %g Mbit/s)"
                               % (_fmt(results.get("tensor_mib"), 0), link), groups, label_width=170,
                               bar_width=300, value_width=420, bar_height=18) + "\n"
