#!/usr/bin/env python3
"""All-reduce across the ocean lab (issue 13 item 5): Gloo all-reduce bus bandwidth and DDP step
time of the shipped workload on the four training nodes of the three sites, per lab profile, for
plain DDP, the WAN hook flat, and the WAN hook with the site topology; untuned hosts versus tuned.

Run as root from the checkout, holding the lab lock:
  flock /tmp/trainnet-lab.lock bash -c 'source scripts/bootstrap.sh >/dev/null; \
      python benchmarks/allreduce_lab.py'
Phases (--phases, in this order):
  untuned  a fresh lab; site.yml with the data plane left off the training nodes (Debian defaults:
           CUBIC, MTU 1500, slow start after idle; the launcher sources control_plane.env only);
  tuned    site.yml as the README runs it (the data plane on every host).
For each profile (--profiles; trainnet_bench/allreduce.py:PROFILES; the ocean links changed at run
time) it runs playbooks/train.yml once in verify mode (every sum checked, the largest tensor
--tensor-mib) and once per DDP variant (--steps steps). A run that stalls (the untuned hosts on the
black-holed 1400-byte path) ends at the process-group timeout and counts as stalled.
Writes results.json, results.md, allreduce.svg and steps.svg to --out (default
benchmarks/results/allreduce); always brings the lab down unless --keep-lab.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from trainnet_bench import allreduce, training
from trainnet_lab.lab import Lab
from trainnet_lab.spec import RUNTIME_FIELDS

ROOT = Path(__file__).resolve().parent.parent
LAB = "trainnet-lab"
UNTUNED_DATA_PLANE_HOSTS = "home_master:control_plane:loaders:egress_nodes"


def sh(argv, limit, check=True):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=limit, check=False, cwd=ROOT)
    if check and proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv[:6]), proc.returncode,
                                                   (proc.stderr or proc.stdout)[-3000:]))
    return proc


def deploy(phase, log_dir):
    argv = ["ansible-playbook", "-i", "inventories/lab", "playbooks/site.yml"]
    if phase == "untuned":
        argv += ["-e", "trainnet_data_plane_hosts=" + UNTUNED_DATA_PLANE_HOSTS,
                 "-e", '{"training_job_env_files": ["/etc/trainnet/control_plane.env"]}']
    start = time.monotonic()
    proc = sh(argv, 2400, check=False)
    (log_dir / ("site-%s.log" % phase)).write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError("site.yml (%s) failed: see %s" % (phase, log_dir / ("site-%s.log" % phase)))
    return round(time.monotonic() - start, 1)


def set_profile(lab, name, inventory_links):
    """The ocean links as the profile says, from the inventory's settings (so profiles do not add up)."""
    for a, b in allreduce.OCEAN_LINKS:
        settings = dict(inventory_links[lab.link_name(a, b)], **allreduce.PROFILES[name]["links"].get((a, b), {}))
        lab.set_link(a, b, down=False, **settings)


def train(phase, profile, kind, args, out_dir, groups=None):
    spec = allreduce.RUNS[kind]
    groups = groups or args.sync_groups
    run_id = "bench-%s-%s-%s-g%d-%s" % (phase, profile, kind.replace("_", "-"), groups, time.strftime("%H%M%S"))
    workload = spec["args"] + ["--pg-timeout-sec", str(args.pg_timeout), "--sync-groups", str(groups)]
    if spec["mode"] == "verify":
        workload += ["--verify-rounds", str(args.rounds), "--sync-topology", "site"]
    extra = {"training_job_run_id": run_id, "training_job_results_dir": str(out_dir / "runs"),
             "training_job_mode": spec["mode"], "training_job_steps": args.steps, "training_job_checkpoint_every": 0,
             "training_job_verify_elements": args.tensor_mib * 262144, "training_job_max_restarts": 0,
             "training_job_timeout_sec": args.pg_timeout + 240, "training_job_workload_args": workload}
    start = time.monotonic()
    proc = sh(["ansible-playbook", "-i", "inventories/lab", "playbooks/train.yml", "-e", json.dumps(extra)],
              args.pg_timeout + 600, check=False)
    seconds = time.monotonic() - start
    run_dir = out_dir / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "train-yml.log").write_text(proc.stdout + proc.stderr)
    events = training.run_events(run_dir)
    record = allreduce.run_record(phase, profile, kind, proc.returncode, seconds, events,
                                  elements=args.tensor_mib * 262144 if spec["mode"] == "verify" else None)
    record.update(run_id=run_id, sync_groups=groups, sweep=groups != args.sync_groups or None,
                  tensor_mib=args.tensor_mib if spec["mode"] == "verify" else None,
                  steps=args.steps if spec["mode"] == "train" else None)
    print("  %-8s %-10s %-10s rc %d %5.0f s %s" % (phase, profile, kind, proc.returncode, seconds, {
        case: round(fig["busbw_mbit_s"], 1) for case, fig in record["cases"].items()} or
        "step %s s" % allreduce._fmt(record["median_step_time_s"], 2)), flush=True)
    return record


def write(results, out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1))
    (out_dir / "allreduce.svg").write_text(allreduce.chart(results))
    (out_dir / "steps.svg").write_text(allreduce.step_chart(results))
    if any(run.get("sweep") for run in results["runs"]):
        (out_dir / "groups.svg").write_text(allreduce.sweep_chart(results))
    lines = ["# All-reduce across the ocean lab", "",
             "4 ranks (cn-gpu1; usw-gpu1, usw-gpu2; use-gpu1), torch %s CPU, Gloo on eth0, %d sync groups, "
             "one worker per node (OMP 1 thread), two cores for the whole lab. Command: `%s`." % (
                 results["torch"], results["sync_groups"], results["command"]), "",
             "Profiles: " + "; ".join("**%s**: %s" % (k, allreduce.PROFILES[k]["title"]) for k in results["profiles"]), ""]
    lines += allreduce.table(results)
    lines += ["", "![all-reduce bus bandwidth](allreduce.svg)", "", "![DDP step time](steps.svg)", ""]
    if any(run.get("sweep") for run in results["runs"]):
        lines += allreduce.sweep_table(results) + ["", "![bus bandwidth by sync groups](groups.svg)", ""]
    (out_dir / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))


def report_only(out_dir):
    """Recompute every run's figures from its logs under out_dir/runs (after a change to the analysis)."""
    results = json.loads((out_dir / "results.json").read_text())
    for index, run in enumerate(results["runs"]):
        events = training.run_events(out_dir / "runs" / run["run_id"])
        elements = run["tensor_mib"] * 262144 if run.get("tensor_mib") else None
        fresh = allreduce.run_record(run["phase"], run["profile"], run["run"], run["rc"], run["seconds"], events, elements=elements)
        results["runs"][index] = dict(run, **fresh)
    write(results, out_dir)
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phases", default="untuned,tuned", help="comma-separated, in order: untuned, tuned")
    ap.add_argument("--profiles", default="default,loss-1pct", help="comma-separated: " + ", ".join(allreduce.PROFILES))
    ap.add_argument("--runs", default=",".join(allreduce.RUNS), help="comma-separated: " + ", ".join(allreduce.RUNS))
    ap.add_argument("--tensor-mib", type=int, default=16, help="largest verify tensor, MiB (default 16)")
    ap.add_argument("--rounds", type=int, default=2, help="verify rounds (default 2)")
    ap.add_argument("--steps", type=int, default=8, help="DDP steps per run (default 8)")
    ap.add_argument("--sync-groups", type=int, default=8)
    ap.add_argument("--sweep-groups", default="",
                    help="comma-separated group counts: extra verify runs on the tuned phase's first profile")
    ap.add_argument("--pg-timeout", type=int, default=150, help="process-group timeout, s: a stalled run ends here")
    ap.add_argument("--keep-lab", action="store_true", help="use the lab that is up, as deployed (tuned phase only)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "allreduce")
    ap.add_argument("--report-only", action="store_true",
                    help="no lab: re-read --out/results.json and each run's logs, rewrite the table and charts")
    ap.add_argument("--append", action="store_true",
                    help="add this invocation's runs to --out/results.json (e.g. another phase, tensor size or profile)")
    args = ap.parse_args()
    phases = [p for p in args.phases.split(",") if p]
    profiles = [p for p in args.profiles.split(",") if p]
    kinds = [k for k in args.runs.split(",") if k]
    bad = ([p for p in phases if p not in ("untuned", "tuned")] + [p for p in profiles if p not in allreduce.PROFILES]
           + [k for k in kinds if k not in allreduce.RUNS])
    if bad or not phases or not profiles or not kinds:
        ap.error("unknown or missing phase/profile/run: %s" % (", ".join(bad) or "none given"))
    try:
        sweep = [int(g) for g in args.sweep_groups.split(",") if g]
    except ValueError:
        ap.error("--sweep-groups takes comma-separated integers")
    if any(not 1 <= g <= 64 for g in sweep):
        ap.error("--sweep-groups: each count must be 1..64")
    if args.keep_lab and phases != ["tuned"]:
        ap.error("--keep-lab measures the lab as deployed: use it with --phases tuned")
    if args.report_only:
        return report_only(args.out)
    up = (Path("/run/trainnet-lab") / LAB / "state.json").exists()
    if up and not args.keep_lab:
        print("lab %s is already up: take it down first, or pass --keep-lab --phases tuned" % LAB, file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    # The torch tree the lab mounts into its containers (scripts/bootstrap.sh), as the jobs import it.
    torch_version = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                   text=True, timeout=120, check=False, cwd=ROOT,
                                   env=dict(os.environ, PYTHONPATH="/opt/trainnet-torch")).stdout.strip()
    results = {"command": " ".join(["python", "benchmarks/allreduce_lab.py", *sys.argv[1:]]),
               "kernel": platform.release(), "torch": torch_version or "?", "sync_groups": args.sync_groups,
               "steps": args.steps, "tensor_mib": args.tensor_mib, "rounds": args.rounds, "profiles": profiles,
               "bottleneck_mbit": None, "deploy_s": {}, "runs": [], "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    if args.append and (args.out / "results.json").exists():
        earlier = json.loads((args.out / "results.json").read_text())
        results["runs"] = earlier["runs"]
        results["deploy_s"] = earlier.get("deploy_s", {})
        results["command"] = "; ".join([earlier["command"], results["command"]])
        results["profiles"] = list(dict.fromkeys(earlier["profiles"] + profiles))
    try:
        for phase in phases:
            if not args.keep_lab:
                if (Path("/run/trainnet-lab") / LAB / "state.json").exists():
                    sh([sys.executable, "lab/lab.py", "down"], 600)
                print("%s: lab up" % phase, flush=True)
                sh([sys.executable, "lab/lab.py", "up"], 1500)
                print("%s: site.yml" % phase, flush=True)
                results["deploy_s"][phase] = deploy(phase, args.out)
            lab = Lab.from_state(LAB)
            inventory_links = {lab.link_name(*pair): {k: v for k, v in lab.link_settings(*pair).items() if k in RUNTIME_FIELDS}
                               for pair in allreduce.OCEAN_LINKS}
            results["bottleneck_mbit"] = min(s["rate_mbit"] for s in inventory_links.values())
            for profile in profiles:
                set_profile(lab, profile, inventory_links)
                for kind in kinds:
                    results["runs"].append(train(phase, profile, kind, args, args.out))
                    write(results, args.out)
                if phase == "tuned" and profile == profiles[0]:
                    for groups in sweep:
                        results["runs"].append(train(phase, profile, "verify", args, args.out, groups=groups))
                        write(results, args.out)
            set_profile(lab, "default", inventory_links)
        return 0
    finally:
        if not args.keep_lab:
            print("lab down", flush=True)
            sh([sys.executable, "lab/lab.py", "down"], 600, check=False)


if __name__ == "__main__":
    sys.exit(main())
