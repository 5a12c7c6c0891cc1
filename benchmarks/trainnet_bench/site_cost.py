"""site.yml's cost against the number of hosts: the fit of time against task runs, the prediction for a
bigger cluster and the report (benchmarks/site_cost.py runs the lab)."""

from __future__ import annotations

from ansible_collections.longhaul.trainnet.plugins.plugin_utils import svg_chart

# The cluster issue 24 asks about: 3 sites x 64 training nodes, one anchor per US site, a home master,
# and the lab's ratio of loaders and egress nodes (one loader, two egress nodes per US site).
BIG_CLUSTER = {"home_master": 1, "control_plane": 2, "gpu_nodes": 192, "loaders": 1, "egress_nodes": 4}
CLASSES = ["home_master", "control_plane", "gpu_nodes", "loaders", "egress_nodes"]



def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least squares y = a + b x."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    b = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx if sxx else 0.0
    return mean_y - b * mean_x, b


def predict(results: list[dict]) -> dict:
    """Task runs per host of each class (from the largest size), the cluster's task runs, and the time
    the fit of time against task runs gives for them, first run and re-run."""
    largest = max(results, key=lambda r: r["size"])
    per_class = {}
    for cls in CLASSES:
        runs = [largest["first"]["recap"][h]["ok"] + largest["first"]["recap"][h]["skipped"]
                for h, classes in largest["classes"].items() if classes[0] == cls and h in largest["first"]["recap"]]
        rerun = [largest["second"]["recap"][h]["ok"] + largest["second"]["recap"][h]["skipped"]
                 for h, classes in largest["classes"].items() if classes[0] == cls and h in largest["second"]["recap"]]
        if runs:
            per_class[cls] = {"first": sum(runs) / len(runs), "second": sum(rerun) / len(rerun)}
    out = {"cluster": BIG_CLUSTER, "per_class_task_runs": per_class}
    for phase in ("first", "second"):
        a, b = fit([(r[phase]["task_runs"], r[phase]["seconds"]) for r in results])
        runs = sum(BIG_CLUSTER[cls] * per_class[cls][phase] for cls in per_class)
        out[phase] = {"fit_seconds": round(a, 1), "fit_seconds_per_task_run": round(b, 4),
                      "task_runs": round(runs), "seconds": round(a + b * runs)}
    return out


def markdown(results: list[dict], model: dict, commit: str) -> str:
    lines = ["# site.yml against the number of hosts", "",
             f"Commit {commit}; the ocean lab on this machine (2 cores), `forks` from ansible.cfg, the "
             "podman_nsenter connection. Command: `python benchmarks/site_cost.py`.", "",
             "| deployed hosts | first run, s | task runs (skipped) | changed | no-change re-run, s | task runs | changed |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        f, s = r["first"], r["second"]
        lines.append(f"| {r['size']} | {f['seconds']:.0f} | {f['task_runs']} ({f['skipped']}) | {f['changed']} | "
                     f"{s['seconds']:.0f} | {s['task_runs']} | {s['changed']} |")
    per = model["per_class_task_runs"]
    lines += ["", "Task runs per host of each class (12-host lab, first run / re-run): "
              + "; ".join(f"{cls} {v['first']:.0f} / {v['second']:.0f}" for cls, v in per.items()) + ".", "",
              "Prediction for " + ", ".join(f"{n} {cls}" for cls, n in model["cluster"].items())
              + " (3 sites x 64 training nodes), from a least-squares fit of time against task runs on this "
              "2-core controller:"]
    for phase, label in (("first", "first run"), ("second", "no-change re-run")):
        m = model[phase]
        lines.append(f"- {label}: {m['task_runs']} task runs, {m['fit_seconds']} s + "
                     f"{m['fit_seconds_per_task_run']} s per task run = **{m['seconds']} s** "
                     f"({m['seconds'] / 60:.0f} min)")
    lines += ["", "The controller's CPU is the bottleneck here (Ansible forks one worker per task and host); a "
              "controller with more cores and forks 50 divides the per-task-run term by about the number of "
              "cores it can keep busy, not by 50. ![cost](cost.svg)", ""]
    return "\n".join(lines)


def chart(results: list[dict]) -> str:
    groups = [{"label": f"{r['size']} hosts", "bars": [
        {"name": "first run", "value": r["first"]["seconds"], "colour": "#4e79a7",
         "text": f"{r['first']['seconds']:.0f} s, {r['first']['task_runs']} runs"},
        {"name": "re-run", "value": r["second"]["seconds"], "colour": "#59a14f",
         "text": f"{r['second']['seconds']:.0f} s, {r['second']['task_runs']} runs"}]} for r in results]
    return svg_chart.bar_chart("site.yml time against deployed hosts (lab, 2 cores)", groups, value_width=170)
