#!/usr/bin/env python3
"""Egress pool on the ocean lab (issue 11 item 3): shard downloads through one egress path versus
the pool of four, each path capped at R by the lab, then one path killed mid-run.

Run as root from the checkout, holding the lab lock:
  flock /tmp/trainnet-lab.lock bash -c 'source scripts/bootstrap.sh >/dev/null; \
      python benchmarks/egress_pool.py'
Brings the default lab up (four egress nodes capped at trainnet_lab_rate_mbit, the object store
usw-store with generated shards), deploys playbooks/site.yml (the data plane tunes the loader and
the egress nodes, the egress pool comes last), stops the qualification timer (the benchmark picks
the upstreams itself, through the role's drain file), then on cn-loader runs
`trainnet-fetch-shards` over N shards: (1) through one path, (2) through the pool of four,
(3) through the pool of four with one egress node's LAN link taken down silently at KILL_S.
The loader's received bytes are sampled every 0.25 s. Every shard is checked against its SHA-256.
Writes benchmarks/results/egress/results.{json,md} and throughput.svg; always brings the lab down
(unless --keep-lab).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

from trainnet_bench import egress
from trainnet_lab.inventory import read_inventory
from trainnet_lab.lab import Lab

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "egress"
LAB = "trainnet-lab"
LOADER = "cn-loader"
NODES = ["usw-egress1", "use-egress1", "usw-egress2", "use-egress2"]
KILLED = "use-egress1"
STORE = "usw-store"
DEST = "/var/tmp/trainnet-bench-shards"

def sh(argv, limit, check=True, data=None):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=limit, check=False, input=data, cwd=ROOT)
    if check and proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (" ".join(argv[:6]), proc.returncode,
                                                   (proc.stderr or proc.stdout)[-2000:]))
    return proc


def pexec(host, *argv, limit=60, check=True, data=None):
    return sh(["podman", "exec", "-i", "%s-%s" % (LAB, host), *argv], limit, check, data)


def rx_bytes(netns):
    out = sh(["ip", "netns", "exec", netns, "cat", "/sys/class/net/eth0/statistics/rx_bytes"], 5, check=False)
    return int(out.stdout.strip() or 0)


def select_paths(names):
    """Admit only NAMES in the loader's Squid, through the role's drain file."""
    lines = ["# benchmark: only %s" % ", ".join(names)]
    lines += ["cache_peer_access %s deny all" % n for n in NODES if n not in names]
    pexec(LOADER, "sh", "-c", "cat > /var/lib/trainnet/egress_pool/drain.conf && squid -k reconfigure",
          data="\n".join(lines) + "\n")
    time.sleep(2)


def run_once(label, paths, shard_list, kill_s=None, lab=None):
    select_paths(paths)
    pexec(LOADER, "sh", "-c", "cat > /var/tmp/trainnet-bench.list", data=shard_list)
    pexec(LOADER, "rm", "-rf", DEST)
    samples, stop = [], threading.Event()
    netns = "%s-%s" % (LAB, LOADER)

    def sample():
        deadline = time.monotonic() + 900
        while not stop.is_set() and time.monotonic() < deadline:
            samples.append((time.time(), rx_bytes(netns)))
            time.sleep(0.25)

    sampler = threading.Thread(target=sample)
    sampler.start()
    kill_t, killer = None, None
    router = lab.spec.router_netns(lab.spec.hosts[KILLED].site) if lab else None
    veth = lab.spec.router_veth(KILLED) if lab else None
    if kill_s is not None:
        def kill():
            nonlocal kill_t
            time.sleep(kill_s)
            kill_t = time.time()
            # silent: the node's LAN link goes down in its site router, packets vanish, no RST
            sh(["ip", "-n", router, "link", "set", veth, "down"], 10)
        killer = threading.Thread(target=kill)
        killer.start()
    try:
        proc = pexec(LOADER, "trainnet-fetch-shards", "--json", "/var/tmp/trainnet-bench.list", DEST, limit=900,
                     check=False)
    finally:
        if killer:
            killer.join()
        stop.set()
        sampler.join()
        if kill_s is not None:
            sh(["ip", "-n", router, "link", "set", veth, "up"], 10)
    held = pexec(LOADER, "head", "-n", "1", "/var/lib/trainnet/egress_pool/drain.conf").stdout.strip()
    if held != "# benchmark: only %s" % ", ".join(paths):
        raise RuntimeError("%s: the path selection did not hold during the run (drain file: %r)" % (label, held))
    report = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {
        "shards": 0, "ok": 0, "failed": ["(no report)"], "corrupt": [], "seconds": 0, "bytes": 0}
    # Independent of the downloader's own check: hash what landed on the loader.
    sums = pexec(LOADER, "sh", "-c", "cd %s && sha256sum *.bin 2>/dev/null || true" % DEST).stdout
    got = dict((line.split()[1], line.split()[0]) for line in sums.splitlines() if len(line.split()) == 2)
    want = dict((line.split()[1].rsplit("/", 1)[1], line.split()[0]) for line in shard_list.splitlines() if line.strip())
    report["verified_by_benchmark"] = sum(1 for name, digest in want.items() if got.get(name) == digest)
    report["wrong_on_disk"] = sorted(name for name in got if want.get(name) != got[name])
    print("%s: %s" % (label, {k: report[k] for k in ("ok", "failed", "seconds", "bytes", "verified_by_benchmark")}),
          flush=True)
    return {"label": label, "paths": len(paths), "samples": samples, "report": report, "kill_t": kill_t,
            "stderr": proc.stderr[-2000:]}


def write(results):
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=1))
    (OUT / "throughput.svg").write_text(egress.chart(results["runs"], results["rate_mbit"]))
    r = results["rate_mbit"]
    lines = ["# Egress pool on the ocean lab", "",
             "cn-loader (cn-home) downloads %d shards of %d KiB from usw-store (us-west, HTTPS) with "
             "`trainnet-fetch-shards` (aria2, %s at once) through its Squid; each egress node capped at R = %g Mbit/s "
             "(tbf in the lab); loader and egress nodes tuned by data_plane. Command: `%s`." % (
                 results["shards"], results["shard_kib"], results["concurrency"], r, results["command"]), "",
             "| run | paths | shards ok | failed | corrupt on arrival (retried) | seconds | steady / before kill | after kill (from +10 s) | back to 2.7R after kill |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in results["summary"]:
        first = s.get("steady_mbit", s.get("before_kill_mbit"))
        first_x = s.get("steady_x_R", s.get("before_kill_x_R"))
        lines.append("| %s | %d | %d/%d | %d | %d | %.1f | %s Mbit/s (%s R) | %s | %s |" % (
            s["label"], s["paths"], s["ok"], s["shards"], s["failed"], s["corrupt_on_arrival"], s["seconds"],
            first, first_x,
            ("%s Mbit/s (%s R)" % (s["after_kill_mbit"], s["after_kill_x_R"])) if "after_kill_mbit" in s else "-",
            ("%s s" % s["recovery_s_to_2.7R"]) if "recovery_s_to_2.7R" in s else "-"))
    lines += ["", "![throughput](throughput.svg)", ""]
    (OUT / "results.md").write_text("\n".join(lines))
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep-lab", action="store_true", help="do not run lab up/down (lab already up)")
    ap.add_argument("--site-runs", type=int, choices=(0, 1), default=1,
                    help="site.yml runs before measuring (0: the lab is already deployed)")
    ap.add_argument("--shards", type=int, default=48, help="shards per run (default 48, all of them)")
    ap.add_argument("--one-path-shards", type=int, default=None,
                    help="shards of the one-path run (default: --shards; 16 carry it well past steady state)")
    ap.add_argument("--kill-at", type=float, default=6.0, help="seconds into run 3 when one path dies")
    ap.add_argument("--smoke", action="store_true", help="8 shards, runs 1 and 2 only (pipeline check)")
    ap.add_argument("--out", type=Path, default=None, help="results directory (default benchmarks/results/egress)")
    args = ap.parse_args()
    global OUT
    if args.out:
        OUT = args.out
    rate = float(read_inventory(ROOT / "inventories" / "lab").hosts[NODES[0]]["trainnet_lab_rate_mbit"])
    shards = 8 if args.smoke else args.shards
    if not args.keep_lab and (Path("/run/trainnet-lab") / LAB / "state.json").exists():
        print("lab %s is already up: take it down first, or pass --keep-lab to use it as it is" % LAB, file=sys.stderr)
        return 2
    try:
        if not args.keep_lab:
            print("lab up", flush=True)
            sh([sys.executable, "lab/lab.py", "up"], 1500)
        lab = Lab.from_state(LAB)
        if args.site_runs:
            print("deploy: site.yml", flush=True)
            sh(["ansible-playbook", "-i", "inventories/lab", "playbooks/site.yml"], 2400)
        # The timer, and a qualification run it may have just started: either would rewrite the
        # drain file the benchmark selects paths with.
        pexec(LOADER, "systemctl", "stop", "trainnet-egress-watchdog.timer", "trainnet-egress-watchdog.service",
              limit=120)
        full_list = (lab.state_dir / "object-store" / STORE / "shards.list").read_text()
        shard_list = "".join(full_list.splitlines(True)[:shards])
        concurrency = pexec(LOADER, "sh", "-c", "grep ^max-concurrent-downloads /etc/trainnet/egress_pool/aria2.conf").stdout
        one_path_list = "".join(shard_list.splitlines(True)[:args.one_path_shards or shards])
        runs = [run_once("1 path (%s)" % NODES[0], NODES[:1], one_path_list, lab=lab),
                run_once("pool of 4", NODES, shard_list, lab=lab)]
        if not args.smoke:
            runs.append(run_once("pool of 4, %s killed at %g s" % (KILLED, args.kill_at), NODES, shard_list,
                                 kill_s=args.kill_at, lab=lab))
        store = dict(lab.spec.hosts[STORE].object_store)
        results = {"rate_mbit": rate, "shards": shards, "shard_kib": store["shard_kib"],
                   "concurrency": concurrency.strip().split("=")[-1],
                   "command": " ".join(["python", "benchmarks/egress_pool.py", *sys.argv[1:]]),
                   "runs": runs, "summary": [egress.summarize(run, rate, store["shard_kib"] * 1024) for run in runs]}
        write(results)
        return 0
    finally:
        if args.keep_lab:
            # Give the pool back to qualification: it rewrites the drain file and keeps its timer.
            pexec(LOADER, "systemctl", "start", "trainnet-egress-watchdog.service", "trainnet-egress-watchdog.timer",
                  limit=300, check=False)
        else:
            print("lab down", flush=True)
            sh([sys.executable, "lab/lab.py", "down"], 600, check=False)


if __name__ == "__main__":
    sys.exit(main())
