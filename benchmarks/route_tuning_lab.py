#!/usr/bin/env python3
"""Per-route tuning on the lab (issue 12 items 1 and 3): untuned vs global tuning vs per-route
tuning, same run, same two hosts, same emulated links.

Run as root from the checkout, holding the lab lock:
  flock /tmp/trainnet-lab.lock bash -c 'source scripts/bootstrap.sh >/dev/null; \\
      python benchmarks/route_tuning_lab.py'
Builds the benchmark's two-site lab (trainnet-labbench: near1 sends, far1 receives), then for each
phase (trainnet_bench/route_tuning.py: untuned, per-route, global, in that order: the per-route
phase starts from the Debian default congestion control, which it leaves to the LAN) and each link
profile (50 Mbit/s; 150 and 200 ms; 0.1 % and 1 % loss; Bernoulli and bursty): iperf3 bulk
(--reps x --duration s) with the emulator's queue drops, and new-connection deliveries of 1 MiB
(pushed x3, pulled x3) and 16 MiB (pushed x1); on a clean 100 Mbit/s profile only the
deliveries. Each sample starts from flushed TCP metrics and one small connection. The per-route
phase applies the data_plane role once per profile, with that path's rate and RTT on the route to
far1's site. Writes results.json, results.md and the charts to --out (default
benchmarks/results/route_tuning); the lab always comes down.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from trainnet_bench import first_transfer, route_tuning
from trainnet_bench.runner import CLIENT, SERVER, SITES, Runner

ROOT = Path(__file__).resolve().parent.parent
TRANSFER_PORT = 7010
WARM_UP_PORT = 7011
# A slow untuned flow at 1 % loss moves 16 MiB in about a minute; nothing runs longer than this.
TRANSFER_LIMIT_S = 240


def fresh_start(runner: Runner) -> None:
    """Each sample starts from empty TCP metrics, then one small connection, as every connection
    to a peer but the first after boot: a route's cwnd cap reaches a connection only through
    the TCP metrics entry of its destination (tcp_init_metrics), which a closed connection
    leaves behind when metrics saving is on. Cached ssthresh is off by default since Linux 5.7
    (tcp_no_ssthresh_metrics_save)."""
    runner.flush_tcp_metrics()
    server = runner.address(SERVER)
    with runner.lab.serving(SERVER, first_transfer.server_argv(server, WARM_UP_PORT, 20, max_connections=1),
                            WARM_UP_PORT, seconds=25):
        runner.run_on(CLIENT, ["timeout", "15", *first_transfer.client_argv(server, WARM_UP_PORT, 1000, 1)],
                      timeout=20)
    time.sleep(0.3)  # the TIME_WAIT side writes its metrics as it closes


def transfers(runner: Runner) -> list[dict]:
    server = runner.address(SERVER)
    count = sum(times for _mode, _size, times in route_tuning.TRANSFERS)
    out = []
    for mode, size, times in route_tuning.TRANSFERS:
        fresh_start(runner)
        with runner.lab.serving(SERVER, first_transfer.server_argv(server, TRANSFER_PORT, TRANSFER_LIMIT_S + 10,
                                                                   max_connections=times),
                                TRANSFER_PORT, seconds=TRANSFER_LIMIT_S + 15):
            done = runner.run_on(CLIENT, ["timeout", str(TRANSFER_LIMIT_S),
                                          *first_transfer.client_argv(server, TRANSFER_PORT, size, times, mode=mode)],
                                 timeout=TRANSFER_LIMIT_S + 10)
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if len(lines) < times:
            lines += [{"mode": mode, "error": f"no answer (rc {done.returncode})"}] * (times - len(lines))
        out += [dict(record, bytes=size, mode=mode) for record in lines]
    assert len(out) == count
    return out


def measure(runner: Runner, scenario, index: int, phase: str, reps: int) -> dict:
    runner.log(f"[{phase}] {scenario.title}")
    entry = {"bulk": [], "transfers": [], "load_before": os.getloadavg()}
    for rep in range(reps if scenario.kind == "throughput" else 0):
        fresh_start(runner)
        before = runner.counters()
        sample = runner.iperf3(scenario)
        # near1 sends: the near->far direction's emulator counters over the sample.
        sample["link"] = runner.counter_delta(before, runner.counters()).get("near->far", {})
        sample["rep"] = rep
        entry["bulk"].append(sample)
        runner.log(f"  bulk {sample.get('throughput_mbps')} Mbit/s, retrans {sample.get('retransmit_pct')} %, "
                   f"queue drops {route_tuning.queue_drop_pct(sample)} %, cc {sample.get('congestion_control')}")
    entry["transfers"] = transfers(runner)
    runner.log("  deliveries: " + ", ".join(f"{t['mode']} {t['bytes'] // 1048576} MiB "
                                            f"{t.get('delivered_ms', t.get('error'))}" for t in entry["transfers"]))
    entry["routes"] = runner.run_on(CLIENT, ["ip", "route", "show", "proto", "250"], timeout=15).stdout
    entry["host"] = runner.host_conditions(CLIENT)
    return entry


def lan_evidence(runner: Runner) -> dict:
    """What a LAN flow of the sending host gets: its route (no attributes) and the default cc."""
    lan_peer = SITES["near"]["lan"].rsplit(".", 1)[0] + ".1"
    route = runner.run_on(CLIENT, ["ip", "-j", "route", "get", lan_peer], timeout=15).stdout
    metrics = (json.loads(route or "[{}]")[0] or {}).get("metrics", [])
    host = runner.host_conditions(CLIENT)
    return {"route to " + lan_peer: "no TCP attributes" if not metrics else json.dumps(metrics),
            "default congestion control": host.get("net.ipv4.tcp_congestion_control"),
            "tcp_rmem": host.get("net.ipv4.tcp_rmem")}


def write(data: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = route_tuning.summarize(data["phases"], data["scenarios"])
    data["summary"] = rows
    (out / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    header = ["# Per-route tuning on the ocean lab: untuned vs global vs per-route", "",
              f"Run {data['started']} - {data.get('finished', '?')}, {data.get('seconds', '?')} s, "
              f"commit {data.get('commit', '?')}, load {data.get('load_at_start')}, reps {data['reps']}, "
              f"iperf3 {data['duration_s']} s. Per-route variables: `{json.dumps(route_tuning.PER_ROUTE_VARS)}`.", ""]
    for phase, run in (data.get("kept_phases") or {}).items():
        header += [f"The {phase} phase comes from the run started {run['started']} (commit {run['commit']}), same "
                   "profiles, repetitions and duration.", ""]
    if data.get("error"):
        header += [f"**Stopped early: {data['error']}**", ""]
    (out / "results.md").write_text("\n".join(header) + "\n" + route_tuning.markdown(rows, data.get("lan")))
    for old in out.glob("*.svg"):
        old.unlink()
    for metric in route_tuning.CHARTS:
        (out / f"{metric}.svg").write_text(route_tuning.chart(rows, metric))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="150 ms, 1 %% loss only (Bernoulli and bursty), and the clean delivery profile")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--duration", type=int, default=20, help="iperf3 seconds per sample (default 20)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "route_tuning")
    parser.add_argument("--phases", default=",".join(route_tuning.PHASES),
                        help="comma-separated phases to measure (default all three)")
    parser.add_argument("--keep-from", type=Path, metavar="RESULTS_JSON",
                        help="take the phases not measured from this earlier run's results.json (same profiles, "
                             "reps and duration); the table names the run each phase came from")
    args = parser.parse_args()
    phases = [p for p in ("untuned", "per-route", "global") if p in args.phases.split(",")]
    if not phases or set(args.phases.split(",")) - set(route_tuning.PHASES):
        parser.error(f"--phases takes a comma-separated subset of {', '.join(route_tuning.PHASES)}")
    runner = Runner(args.out, smoke=False, reps=args.reps, duration=args.duration, seed=args.seed)
    scenarios = route_tuning.profiles(args.quick)
    runner.scenarios = scenarios
    started = time.time()
    commit = os.popen(f"git -C {ROOT} rev-parse --short HEAD").read().strip()
    data = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), "commit": commit,
            "load_at_start": os.getloadavg()[0], "reps": args.reps, "duration_s": args.duration,
            "scenarios": [s.to_dict() for s in scenarios], "phases": {p: {} for p in route_tuning.PHASES},
            "roles": []}
    if args.keep_from:
        earlier = json.loads(args.keep_from.read_text())
        same = (earlier.get("scenarios") == data["scenarios"] and earlier.get("reps") == args.reps
                and earlier.get("duration_s") == args.duration)
        if not same:
            parser.error(f"{args.keep_from} measured other profiles, reps or duration")
        data["kept_phases"] = {}
        for phase in route_tuning.PHASES:
            if phase not in phases and earlier["phases"].get(phase):
                data["phases"][phase] = earlier["phases"][phase]
                # A phase the earlier run itself kept keeps naming the run that measured it.
                data["kept_phases"][phase] = (earlier.get("kept_phases") or {}).get(phase) or {
                    "started": earlier["started"], "commit": earlier.get("commit")}
    far_prefix, near_prefix = SITES["far"]["lan"], SITES["near"]["lan"]
    try:
        left = runner.teardown()
        if left:
            raise RuntimeError(f"a previous benchmark lab could not be removed: {left}")
        for phase in phases:
            if phase == "global":
                data["roles"].append(runner.apply_role({"data_plane_path_routes": []}))
            for index, scenario in enumerate(scenarios):
                runner.set_link(scenario, index)
                if phase == "per-route":
                    # Each host gets the route to the other site (its own LAN is connected).
                    variables = dict(route_tuning.PER_ROUTE_VARS,
                                     bench_routes={CLIENT: [route_tuning.route_for(scenario, far_prefix)],
                                                   SERVER: [route_tuning.route_for(scenario, near_prefix)]},
                                     data_plane_path_routes="{{ bench_routes[inventory_hostname] }}")
                    data["roles"].append(runner.apply_role(variables))
                    if index == 0:
                        data["lan"] = lan_evidence(runner)
                data["phases"][phase][scenario.id] = measure(runner, scenario, index, phase, args.reps)
                write(data, args.out)
    except Exception as error:  # keep what was measured
        data["error"] = f"{type(error).__name__}: {error}"
        raise
    finally:
        data["leftovers_after_down"] = runner.teardown()
        data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        data["seconds"] = round(time.time() - started)
        write(data, args.out)
        print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
