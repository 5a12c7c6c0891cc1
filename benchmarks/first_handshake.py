#!/usr/bin/env python3
"""How long a new WireGuard tunnel takes to verify when both ends create and verify it at once, with and
without `wireguard_interface`'s verify_together (one end waits for the other's first handshake instead
of crossing it with its own): alternating trials on the deployed lab, each a new tunnel between two hosts
across an ocean path, created, verified and removed (benchmarks/first_handshake/tunnel.yml).

Run as root from the checkout on a lab deployed by site.yml (the hosts' control-plane keys are used):
  source scripts/bootstrap.sh >/dev/null; python benchmarks/first_handshake.py --trials 8 --out /tmp/fh
Writes results.json (every trial) and results.md (the table) into --out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PLAYBOOK = REPO / "benchmarks" / "first_handshake" / "tunnel.yml"


def trial(ends: list[str], together: bool, timeout: int) -> dict:
    extra = json.dumps({"first_handshake_ends": ends, "first_handshake_together": together,
                        "first_handshake_timeout": timeout})
    env = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks", "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(["ansible-playbook", "-i", "inventories/lab", str(PLAYBOOK), "-e", extra], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout + 120, check=False,
                          env={**os.environ, **env})
    # profile_tasks: "Create the tunnel and verify it towards the other end ---- 1.26s"
    took = re.findall(r"Create the tunnel and verify it towards the other end -+ ([0-9.]+)s", proc.stdout)
    verified = [int(v) for v in re.findall(r"trial \S+ verified=(\d+)", proc.stdout)]
    return {"together": together, "seconds": float(took[-1]) if took else None,
            "verified_both": len(verified) == 2 and all(verified), "rc": proc.returncode}


def summary(trials: list[dict], together: bool) -> dict:
    mine = [t for t in trials if t["together"] == together]
    good = sorted(t["seconds"] for t in mine if t["verified_both"])
    return {"trials": len(mine), "verified": len(good), "median_s": statistics.median(good) if good else None,
            "min_s": good[0] if good else None, "max_s": good[-1] if good else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ends", default="cn-master,usw-anchor", help="two deployed lab hosts")
    parser.add_argument("--trials", type=int, default=8, help="trials of each kind (alternating)")
    parser.add_argument("--timeout", type=int, default=60, help="verify timeout per trial, seconds")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    ends = args.ends.split(",")
    trials = []
    for _ in range(args.trials):
        for together in (False, True):
            trials.append(trial(ends, together, args.timeout))
            print(json.dumps(trials[-1]), flush=True)
    results = {"ends": ends, "timeout_s": args.timeout, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                        text=True, check=False).stdout.strip(),
               "trials": trials, "without": summary(trials, False), "with": summary(trials, True)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    rows = ["| both ends verify at once | verified | median | range |", "| --- | --- | --- | --- |"]
    for label, key in (("both initiate (verify_together false)", "without"), ("one waits (verify_together)", "with")):
        s = results[key]
        rows.append("| %s | %d of %d within %d s | %s | %s |" % (
            label, s["verified"], s["trials"], args.timeout, "%.2f s" % s["median_s"] if s["median_s"] else "-",
            "%.2f-%.2f s" % (s["min_s"], s["max_s"]) if s["min_s"] else "-"))
    (args.out / "results.md").write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
