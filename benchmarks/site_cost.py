#!/usr/bin/env python3
"""What site.yml costs against the number of hosts (issue 24, item 7): the lab with 4, 8 and 12 deployed
hosts, each deployed by site.yml and then deployed again with nothing to change; time and task runs
of both, and what a linear fit of time against task runs predicts for a bigger cluster.

Run as root from the checkout, with no default lab up (it builds and removes its own):
  flock /tmp/trainnet-lab.lock bash -c 'source scripts/bootstrap.sh >/dev/null; python benchmarks/site_cost.py'
Each size is a subset of inventories/lab (same group_vars, same WAN; usw-store, the lab's object
store, is always there and never deployed). Writes benchmarks/results/site_cost/results.{json,md} and
cost.svg; the lab is always taken down.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from trainnet_bench import failover as fo  # parse_recap, task_runs
from trainnet_bench.site_cost import CLASSES, chart, markdown, predict

REPO = Path(__file__).resolve().parent.parent

LAB_INVENTORY = REPO / "inventories" / "lab"
# Deployed hosts per size: each size adds hosts of every class, so the classes keep their proportions.
SUBSETS = {
    4: ["cn-master", "cn-gpu1", "usw-anchor", "usw-gpu1"],
    8: ["cn-master", "cn-gpu1", "cn-loader", "usw-anchor", "usw-gpu1", "usw-egress1", "use-anchor", "use-gpu1"],
}
ALWAYS = ["usw-store"]   # the lab's object store, not a host the roles deploy


def subset_inventory(hosts: list[str], directory: Path) -> Path:
    """inventories/lab with only HOSTS (and the object store), its group_vars linked."""
    data = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())
    keep = set(hosts) | set(ALWAYS)

    def prune(group: dict) -> None:
        if group.get("hosts"):
            group["hosts"] = {name: value for name, value in group["hosts"].items() if name in keep}
        for child in (group.get("children") or {}).values():
            prune(child)
    prune(data["all"])
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text(yaml.safe_dump(data, sort_keys=False))
    os.symlink(LAB_INVENTORY / "group_vars", directory / "group_vars")
    return directory


def run(argv: list[str], timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)


def deploy(inventory: Path) -> dict:
    start = time.monotonic()
    proc = run(["ansible-playbook", "-i", str(inventory), "playbooks/site.yml"], 3600)
    recap = fo.parse_recap(proc.stdout)
    return {"rc": proc.returncode, "seconds": round(time.monotonic() - start, 1), "hosts": len(recap),
            "task_runs": fo.task_runs(recap), "skipped": sum(h["skipped"] for h in recap.values()),
            "changed": sum(h["changed"] for h in recap.values()), "recap": recap,
            "tail": "" if proc.returncode == 0 else (proc.stdout + proc.stderr)[-3000:]}


def host_classes(inventory: Path) -> dict:
    """{host: [its classes]} from ansible-inventory."""
    listing = json.loads(run(["ansible-inventory", "-i", str(inventory), "--list"], 120).stdout)
    out = {}
    for group in CLASSES:
        for host in listing.get(group, {}).get("hosts", []):
            out.setdefault(host, []).append(group)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4,8,12", help="comma separated, from 4, 8 and 12")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "site_cost")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    commit = run(["git", "rev-parse", "--short", "HEAD"], 30).stdout.strip()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            inventory = LAB_INVENTORY if size == 12 else subset_inventory(SUBSETS[size], Path(tmp) / f"lab-{size}")
            run([sys.executable, "lab/lab.py", "down"], 600)
            try:
                up = run([sys.executable, "lab/lab.py", "up", "-i", str(inventory)], 1500)
                if up.returncode != 0:
                    raise SystemExit(f"lab up ({size} hosts) failed: {(up.stdout + up.stderr)[-2000:]}")
                first = deploy(inventory)
                second = deploy(inventory) if first["rc"] == 0 else None
            finally:
                run([sys.executable, "lab/lab.py", "down"], 600)
            print(f"{size} hosts: first {first['seconds']} s, {first['task_runs']} task runs, rc {first['rc']}"
                  + (f"; re-run {second['seconds']} s, {second['task_runs']} task runs, {second['changed']} changed"
                     if second else ""), flush=True)
            if first["rc"] != 0 or second["rc"] != 0:
                raise SystemExit(f"site.yml failed on {size} hosts:\n{first['tail'] or second['tail']}")
            results.append({"size": size, "classes": host_classes(inventory), "first": first, "second": second})
    model = predict(results)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = [{k: v for k, v in r.items()} for r in results]
    (args.out / "results.json").write_text(json.dumps(
        {"commit": commit, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cores": os.cpu_count(),
         "results": summary, "model": model}, indent=1) + "\n")
    (args.out / "results.md").write_text(markdown(results, model, commit))
    (args.out / "cost.svg").write_text(chart(results))
    print(markdown(results, model, commit))
    return 0


if __name__ == "__main__":
    sys.exit(main())
