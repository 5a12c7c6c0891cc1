"""Read what playbooks/train.yml collected: <results dir>/<run id>/<host>/*.jsonl (one JSON event per
line, from training/trainnet_workload.py) into a summary per run. Pure logic: the lab test, the demo
and the all-reduce benchmark read runs the same way."""

from __future__ import annotations

import json
import statistics
from pathlib import Path


def run_events(run_dir: Path) -> dict[str, list[dict]]:
    """{host: its ranks' events in log order} for one run directory."""
    out = {}
    for host_dir in sorted(p for p in Path(run_dir).iterdir() if p.is_dir()):
        out[host_dir.name] = [json.loads(line) for log in sorted(host_dir.glob("*.jsonl"))
                              for line in log.read_text().splitlines() if line.strip()]
    return out


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def step_times(steps: list[dict]) -> dict[int, float]:
    """{step: its time}: the median across ranks (all-reduce keeps the ranks in lockstep)."""
    by_step: dict[int, list[float]] = {}
    for e in steps:
        by_step.setdefault(e["step"], []).append(e["step_time_s"])
    return {step: statistics.median(times) for step, times in sorted(by_step.items())}


def summarize(events: dict[str, list[dict]]) -> dict:
    """Ranks and hosts, verify results, and per-step medians across ranks (the first step, which
    includes connection setup, is left out of the medians when there are more)."""
    flat = [e for evs in events.values() for e in evs]
    ranks = sorted({e["rank"] for e in flat if "rank" in e})
    world = sorted({e["world_size"] for e in flat if "world_size" in e})
    steps = [e for e in flat if e.get("event") == "step"]
    first = min((e["step"] for e in steps), default=None)
    steady = [e for e in steps if e["step"] != first] or steps
    verify_done = [e for e in flat if e.get("event") == "verify_done"]
    verify = [e for e in flat if e.get("event") == "verify"]
    # Bus bandwidth of the largest tensor only: the small ones measure latency, not bandwidth.
    largest = max((e["elements"] for e in verify), default=None)
    verify = [e for e in verify if e["elements"] == largest]
    per_step = step_times(steady)
    typical = _median(per_step.values())
    slowest = max(per_step, key=per_step.get, default=None)
    return {
        "hosts": sorted(events),
        "ranks": ranks,
        "world_size": world[0] if len(world) == 1 else world,
        "verify_ok": bool(verify_done) and len(verify_done) == len(ranks) and all(e["ok"] for e in verify_done),
        "bad_ranks": sorted({r for e in verify_done for r in e.get("bad_ranks", [])}),
        "verify_busbw_mbit_s": {case: _median([e["busbw_mbit_s"] for e in verify if e["case"] == case])
                                for case in sorted({e["case"] for e in verify})},
        "steps": max((e["step"] for e in steps), default=0),
        "median_step_time_s": _median([e["step_time_s"] for e in steady]),
        # What steps slower than the typical one cost together (a stall, a cut link): seconds.
        "time_lost_s": round(sum(max(0.0, t - typical) for t in per_step.values()), 3) if per_step else None,
        "slowest_step": {"step": slowest, "step_time_s": per_step[slowest]} if slowest is not None else None,
        "median_allreduce_time_s": _median([e.get("allreduce_time_s") for e in steady]),
        "median_busbw_mbit_s": _median([e.get("busbw_mbit_s") for e in steady]),
        "checkpoints": sorted({(e["host"], e["step"]) for e in flat if e.get("event") == "checkpoint"}),
        "final_loss": {e["rank"]: e["loss"] for e in steps if e["step"] == max(s["step"] for s in steps)},
    }


def summary_lines(summary: dict) -> list[str]:
    """A few human-readable lines for the demo."""
    lines = [f"{len(summary['ranks'])} ranks on {', '.join(summary['hosts'])}"]
    if summary["verify_busbw_mbit_s"]:
        lines.append("all-reduce sums exact on every rank: %s; bus bandwidth %s" % (
            summary["verify_ok"], ", ".join(f"{case} {bw:.1f} Mbit/s" for case, bw in summary["verify_busbw_mbit_s"].items())))
    if summary["steps"]:
        bw = summary["median_busbw_mbit_s"]
        lines.append(f"{summary['steps']} DDP steps: median step {summary['median_step_time_s']:.2f} s, "
                     f"all-reduce {summary['median_allreduce_time_s'] or 0:.2f} s"
                     + (f" ({bw:.1f} Mbit/s bus bandwidth)" if bw else ""))
        lines.append(f"checkpoints written: {len(summary['checkpoints'])} "
                     f"({', '.join(sorted({h for h, _ in summary['checkpoints']})) or 'none'})")
    return lines
