#!/usr/bin/env python3
"""Gloo all-reduce over 1 vs N process groups on loopback: proves the WAN sync mechanism runs.

Loopback has no RTT and no loss, so this shows the cost of the split (more messages, more
threads), not its benefit; the benefit (issue 13: 21-27 -> 32-39 Mbit/s at 150 ms, 50 Mbit/s)
needs the lab's long path. Uses the shipped workload's own `chunked_allreduce` and
`make_sync_groups` (training/trainnet_workload.py), so it measures the code
DDP's hook runs.

    .venv/bin/python benchmarks/allreduce_loopback.py [--ranks 2] [--mbytes 16] [--groups 1,8] [--repeats 5]

Prints one JSON line per (groups) with the median, min and max seconds and the bus bandwidth
(2(n-1)/n x bytes / time). Starts its ranks as child processes on 127.0.0.1 and reaps them.
"""

import argparse
import datetime
import importlib.util
import json
import os
import socket
import statistics
import subprocess
import sys
import time

WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "training", "trainnet_workload.py")


def load_workload():
    spec = importlib.util.spec_from_file_location("trainnet_workload", WORKLOAD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rank_main(args):
    wl = load_workload()
    torch, dist = wl._import_torch()
    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    counts = [int(g) for g in args.groups.split(",")]
    groups = wl.make_sync_groups(dist, list(range(world)), max(counts), datetime.timedelta(seconds=120))
    elements = int(args.mbytes * 1024 * 1024) // 4
    tensor = torch.ones(elements, dtype=torch.float32)
    for count in counts:
        times = []
        for repeat in range(args.repeats + 1):
            tensor.fill_(1.0)
            dist.barrier()
            start = time.perf_counter()
            wl.chunked_allreduce(tensor, groups[:count]).wait()
            elapsed = time.perf_counter() - start
            if repeat:  # the first one sets up connections' buffers: warm-up
                times.append(elapsed)
            if float(tensor[0]) != world or float(tensor[-1]) != world:
                raise SystemExit("rank %d: wrong all-reduce result" % rank)
        if rank == 0:
            median = statistics.median(times)
            print(json.dumps({"groups": count, "ranks": world, "bytes": elements * 4, "repeats": args.repeats,
                              "median_s": round(median, 6), "min_s": round(min(times), 6), "max_s": round(max(times), 6),
                              "busbw_mbit_s": round(wl.bus_bandwidth_bps(elements * 4, median, world) / 1e6, 1)}), flush=True)
    dist.destroy_process_group()
    return 0


def launch(args):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    procs = []
    try:
        for rank in range(args.ranks):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(args.ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank-worker"] + sys.argv[1:], env=env))
        deadline = time.monotonic() + args.timeout_sec
        rcs = [proc.wait(timeout=max(1.0, deadline - time.monotonic())) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if any(rcs):
        print("rank exit codes: %s" % rcs, file=sys.stderr)
    return 0 if all(rc == 0 for rc in rcs) else 1


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--mbytes", type=float, default=16.0)
    p.add_argument("--groups", default="1,8")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--timeout-sec", type=float, default=300.0)
    p.add_argument("--rank-worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    return rank_main(args) if args.rank_worker else launch(args)


if __name__ == "__main__":
    EXIT_CODE = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # As the workload: skip the teardown where torch 2.13 may abort on a Gloo worker thread.
    os._exit(EXIT_CODE)
