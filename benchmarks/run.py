#!/usr/bin/env python3
"""Benchmark the data_plane role on the ocean lab: untuned vs tuned in one run.

    python3 benchmarks/run.py [--smoke] [--reps N] [--duration S] [--out DIR] [--publish]

Run as root after `source scripts/bootstrap.sh` (benchmarks/run.sh does that for you). Writes
results.json (every sample and the conditions), results.md (the table) and SVG charts to
results/bench-<timestamp>/, and with --publish also to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import sys
import time
from pathlib import Path

# trainnet_bench is this script's folder (Python puts it first on sys.path); trainnet_lab and the
# collection come from .venv, where scripts/bootstrap.sh installs them (benchmarks/run.sh sources it).
HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LOCK_FILE = Path("/run/lock/trainnet-labbench.lock")
EXIT_BUSY = 3


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true",
                        help="one profile (150 ms, 1%% loss), 1 repetition, short duration")
    parser.add_argument("--reps", type=int, default=None,
                        help="repetitions per scenario and phase (default 3; smoke 1)")
    parser.add_argument("--duration", type=int, default=None,
                        help="iperf3 seconds per sample, after the omitted startup (default 20; smoke 8)")
    parser.add_argument("--tfo-count", type=int, default=5,
                        help="timed repeat connections per TFO repetition (default 5)")
    parser.add_argument("--seed", type=int, default=42, help="emulator seed base (default 42)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default results/bench-<timestamp>)")
    parser.add_argument("--publish", action="store_true",
                        help="also copy the outputs to benchmarks/results/")
    args = parser.parse_args(argv)
    if args.reps is None:
        args.reps = 1 if args.smoke else 3
    if args.duration is None:
        args.duration = 8 if args.smoke else 20
    if args.reps < 1 or args.duration < 3:
        parser.error("--reps must be >= 1 and --duration >= 3")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("run.py: needs root (network namespaces, TUN, privileged containers)", file=sys.stderr)
        return 2
    from trainnet_bench.runner import Runner, install_signal_handlers
    out = args.out or REPO / "results" / time.strftime("bench-%Y%m%d-%H%M%S")
    load = os.getloadavg()
    print(f"benchmark: {'smoke' if args.smoke else 'full'}, {args.reps} rep(s) x {args.duration} s, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, output {out}")
    if not args.smoke and load[0] > os.cpu_count():
        print(f"benchmark: warning: load {load[0]:.2f} > {os.cpu_count()} CPUs; figures may suffer "
              "(the load is recorded in the output)")
    # One run at a time: a second run would tear down the first one's lab (same name).
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    lock = open(LOCK_FILE, "w")  # noqa: SIM115 - held until the process exits
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"run.py: another benchmark run holds {LOCK_FILE} (lab trainnet-labbench is in "
              "use); try again when it has finished", file=sys.stderr)
        return EXIT_BUSY
    install_signal_handlers()
    runner = Runner(out, smoke=args.smoke, reps=args.reps, duration=args.duration,
                    seed=args.seed, tfo_count=args.tfo_count,
                    log=lambda message: print(message, flush=True))
    try:
        data = runner.run()
    except BaseException as error:  # the runner has written what it measured and torn down
        print(f"benchmark: failed: {error}; partial results in {out}", file=sys.stderr)
        return 1
    print((out / "results.md").read_text())
    if data.get("leftovers_after_down"):
        print(f"benchmark: lab down left: {data['leftovers_after_down']}", file=sys.stderr)
        return 1
    if args.publish:
        target = HERE / "results"
        target.mkdir(exist_ok=True)
        for path in out.iterdir():
            if path.suffix in (".json", ".md", ".svg", ".png", ".log"):
                shutil.copy2(path, target / path.name)
        print(f"benchmark: published to {target}")
    print(f"benchmark: done in {data['seconds']} s; outputs in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
