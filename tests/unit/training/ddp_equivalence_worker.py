"""One rank of the hook-versus-plain-DDP comparison (started by test_workload_loopback.py).

Trains the workload's model K steps three times from the same initial weights and batches:
DDP's built-in all-reduce (no hook), the WAN hook over 8 groups, the WAN hook over 1 group, the
WAN hook with both ranks in one site (sum into the leader, broadcast back, on the sync thread), the
WAN hook with the ranks in two sites (the leaders exchange their sums), and
as a control a hook that sums without averaging (must differ, or the comparison proves nothing).
Prints one JSON line with the comparisons."""

import datetime
import importlib.util
import json
import os
import sys


def main(workload_path, steps):
    spec = importlib.util.spec_from_file_location("trainnet_workload", workload_path)
    wl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wl)
    torch, dist = wl._import_torch()
    from torch.nn.parallel import DistributedDataParallel
    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    timeout = datetime.timedelta(seconds=60)
    groups = wl.make_sync_groups(dist, list(range(world)), 8, timeout)
    one_site = wl.make_sync_plan(dist, {"sync_topology": "site", "sync_groups": 8, "site": "lan"}, timeout)
    two_sites = wl.make_sync_plan(dist, {"sync_topology": "site", "sync_groups": 8, "site": "s%d" % rank}, timeout)
    plans = {"hook8": wl.SyncPlan("flat", groups, 8), "hook1": wl.SyncPlan("flat", groups[:1], 1), "site": one_site,
             "exchange": two_sites}

    def sum_hook(_state, bucket):
        return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda fut: fut.value()[0])

    def run(variant):
        model = wl.build_model(torch, 64, 7)
        initial = [p.detach().clone() for p in model.parameters()]
        # Small buckets: several per step, sizes not multiples of 8, so chunking is exercised.
        ddp = DistributedDataParallel(model, bucket_cap_mb=0.01)
        state = None
        if variant in plans:
            state = wl.WanSync(plans[variant], world)
            ddp.register_comm_hook(state, wl.wan_allreduce_hook)
        elif variant == "sum":
            ddp.register_comm_hook(None, sum_hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
        hook_bytes = 0
        for step in range(1, steps + 1):
            if state:
                state.reset()
            inputs, target = wl.batch_for(torch, 7, rank, step, 16)
            optimizer.zero_grad(set_to_none=True)
            torch.nn.functional.mse_loss(ddp(inputs), target).backward()
            optimizer.step()
            hook_bytes += state.bytes if state else 0
        params = [p.detach().clone() for p in model.parameters()]
        changed = any(not torch.equal(a, b) for a, b in zip(initial, params))
        return params, changed, hook_bytes

    plain, plain_changed = run("plain")[:2]
    results = {"rank": rank, "world_size": world, "plain_changed": plain_changed,
               "params": sum(p.numel() for p in plain)}
    for variant in ("hook8", "hook1", "site", "exchange", "sum"):
        params, hook_bytes = run(variant)[::2]
        results[variant + "_equal"] = all(torch.equal(a, b) for a, b in zip(plain, params))
        results[variant + "_max_abs_diff"] = max(float((a - b).abs().max()) for a, b in zip(plain, params))
        results[variant + "_bytes"] = hook_bytes
    print(json.dumps(results, sort_keys=True), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    EXIT_CODE = main(sys.argv[1], int(sys.argv[2]))
    sys.stdout.flush()
    sys.stderr.flush()
    # As the workload: skip the teardown where torch 2.13 may abort on a Gloo worker thread.
    os._exit(EXIT_CODE)
