"""The training workload for real on loopback: several ranks, Gloo, DDP (needs torch)."""

import datetime
import glob
import hashlib
import json
import os
import socket
import sys

import pytest

from .conftest import WORKLOAD, clean_env, finish, free_port, needs_torch, run_ranks, start

pytestmark = needs_torch
HERE = os.path.dirname(__file__)


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_verify_allreduce_is_exact_on_three_ranks():
    # Three ranks: the ring's segments do not line up with the 8 chunks, odd sizes on top.
    results = run_ranks(["--verify-allreduce", "--verify-elements", "300007"], world=3)
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, "rank %d: %s" % (rank, err[-2000:])
        records = json_lines(out)
        cases = [r for r in records if r["event"] == "verify"]
        assert {(c["case"], c["groups"]) for c in cases} == {("default_group", 1), ("sync_groups", 8)}
        assert {c["elements"] for c in cases} == {1, 1000, 65537, 300007}
        assert all(c["ok"] and c["rank"] == rank for c in cases)
        assert records[-1] == dict(records[-1], event="verify_done", ok=True, bad_ranks=[])


@pytest.mark.parametrize("sites", [
    # b sums into rank 1 over its LAN group; the three leaders 0, 1, 3 reduce-scatter and all-gather
    # directly (site) or all-reduce (site-ring); rank 1 broadcasts back to rank 2 (in no chunk group).
    # Sizes 1 and 1000 over 4 groups x 3 owners leave some parts empty.
    {0: "a", 1: "b", 2: "b", 3: "c"},
    # Two leaders (0 and 1) exchange whole chunks; rank 2 gets its site's total from rank 0.
    {0: "a", 1: "b", 2: "a"},
], ids=["three-sites", "two-sites"])
def test_site_topologies_sum_exactly_with_sites_of_one_and_two_nodes(sites):
    results = run_ranks(["--verify-allreduce", "--verify-elements", "300007", "--sync-groups", "4"], world=len(sites),
                        per_rank_env={rank: {"TRAINNET_SITE": site} for rank, site in sites.items()},
                        TRAINNET_SYNC_TOPOLOGY="site")
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, "rank %d: %s" % (rank, err[-2000:])
        cases = [r for r in json_lines(out) if r["event"] == "verify"]
        assert {(c["case"], c["topology"], c["groups"]) for c in cases} == {
            ("default_group", "flat", 1), ("sync_groups", "flat", 4), ("site_ring_groups", "site-ring", 4),
            ("site_groups", "site", 4)}
        assert all(c["ok"] for c in cases) and len(cases) == 16


def test_site_topology_without_a_site_name_is_refused_before_torch():
    results = run_ranks(["--verify-allreduce"], world=1, TRAINNET_SYNC_TOPOLOGY="site")
    rc, _out, err = results[0]
    assert rc == 2 and "needs TRAINNET_SITE" in err, err
    results = run_ranks(["--verify-allreduce"], world=1, TRAINNET_SYNC_TOPOLOGY="ring")
    rc, _out, err = results[0]
    assert rc == 2 and "TRAINNET_SYNC_TOPOLOGY='ring' is not a sync topology (allowed: flat, site, site-ring)" in err, err


def test_verify_allreduce_names_the_rank_with_a_wrong_result():
    results = run_ranks(["--verify-allreduce", "--verify-elements", "1000", "--fault-inject-rank", "1"], world=2)
    for rank, (rc, _out, err) in enumerate(results):
        assert rc == 3, "rank %d exited %d: %s" % (rank, rc, err[-2000:])
        assert "verify-allreduce FAILED on rank(s) 1" in err
    assert "rank 1 (%s): all-reduce mismatch" % socket.gethostname() in results[1][2]
    assert "all-reduce mismatch" not in results[0][2]


def test_comm_hook_gives_the_same_parameters_as_plain_ddp():
    port = free_port()
    procs = [start([sys.executable, os.path.join(HERE, "ddp_equivalence_worker.py"), WORKLOAD, "5"],
                   clean_env(RANK=rank, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, GLOO_SOCKET_IFNAME="lo"))
             for rank in range(2)]
    for rank, (rc, out, err) in enumerate(finish(procs, timeout=90)):
        assert rc == 0, "rank %d: %s" % (rank, err[-2000:])
        (result,) = json_lines(out)
        assert result["plain_changed"], "training did not move the weights: the comparison would prove nothing"
        assert result["hook8_equal"] and result["hook8_max_abs_diff"] == 0.0, result
        assert result["hook1_equal"], result
        assert result["site_equal"] and result["site_bytes"] == result["hook8_bytes"], result
        assert result["exchange_equal"] and result["exchange_bytes"] == result["hook8_bytes"], result
        # Every gradient went through the hook: params x 4 bytes x 5 steps.
        assert result["hook8_bytes"] == result["params"] * 4 * 5
        # Control: a hook that sums instead of averaging changes the result, so equality is meaningful.
        assert not result["sum_equal"] and result["sum_max_abs_diff"] > 0


def run_training(tmp_path, name, extra):
    # A directory per node, as on real hosts: after a restart only rank 1 holds checkpoints.
    ckpt = tmp_path / "ckpt-1"
    log = str(tmp_path / (name + "-{rank}.jsonl"))
    # Two ranks as two nodes: only rank 1's node is a checkpoint writer (as US nodes are).
    results = run_ranks(["--steps", "6", "--width", "48", "--checkpoint-dir", str(tmp_path / "ckpt-{rank}"), "--checkpoint-every", "2",
                         "--log-file", log, "--sync-groups", "4"] + extra, world=2,
                        per_rank_env={0: {"TRAINNET_CHECKPOINT_WRITER": "0"}, 1: {"TRAINNET_CHECKPOINT_WRITER": "1"}})
    records = []
    for rank, (rc, out, err) in enumerate(results):
        assert rc == 0, "rank %d: %s" % (rank, err[-2000:])
        with open(log.format(rank=rank)) as handle:
            assert json_lines(handle.read()) == json_lines(out)
        records.append(json_lines(out))
    return ckpt, records


def read_manifest(path):
    with open(path) as handle:
        return json.load(handle)


def test_training_logs_steps_and_checkpoint_writers_write_manifests(tmp_path):
    started = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=1)
    ckpt, records = run_training(tmp_path, "first", [])
    for rank, lines in enumerate(records):
        done = lines[-1]
        assert done["event"] == "done" and done["steps"] == 6
        steps = [r for r in lines if r["event"] == "step"]
        assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]
        for s in steps:
            assert s["sync_groups"] == 4 and s["world_size"] == 2 and s["rank"] == rank
            assert s["allreduce_bytes"] == done["params"] * 4
            assert 0 < s["allreduce_time_s"] <= s["step_time_s"] + 0.001
            expected = 2 * (2 - 1) / 2 * s["allreduce_bytes"] * 8 / s["allreduce_time_s"] / 1e6
            assert abs(s["busbw_mbit_s"] - expected) <= 0.01 * expected + 0.01
        assert [r["step"] for r in lines if r["event"] == "checkpoint"] == ([2, 4, 6] if rank == 1 else [])
    manifests = sorted(glob.glob(str(ckpt / "*.manifest.json")))
    assert len(manifests) == 3
    for step, path in zip((2, 4, 6), manifests):
        manifest = read_manifest(path)
        data = (ckpt / manifest["file"]).read_bytes()
        assert manifest["step"] == step and manifest["rank"] == 1 and manifest["host"] == socket.gethostname()
        assert manifest["size"] == len(data)
        assert manifest["sha256"] == hashlib.sha256(data).hexdigest()
        assert datetime.datetime.fromisoformat(manifest["time"]) > started
    assert not (tmp_path / "ckpt-0").exists() or not os.listdir(tmp_path / "ckpt-0")
    # Atomic writes leave no temporary files behind.
    assert sorted(os.listdir(ckpt)) == sorted(os.path.basename(p) for p in manifests + glob.glob(str(ckpt / "*.pt")))

    # An elastic restart after step 5: the step-6 checkpoint never happened. --resume continues
    # from step 4 (held by rank 1 only) and reproduces the uninterrupted run exactly.
    last = read_manifest(manifests[-1])
    os.unlink(manifests[-1])
    os.unlink(ckpt / last["file"])
    _ckpt, resumed = run_training(tmp_path, "resumed", ["--resume"])
    for rank, lines in enumerate(resumed):
        assert lines[0] == dict(lines[0], event="resume", from_step=4, holder_rank=1)
        losses = {r["step"]: r["loss"] for r in lines if r["event"] == "step"}
        assert losses == {r["step"]: r["loss"] for r in records[rank] if r["event"] == "step" and r["step"] > 4}
    assert read_manifest(manifests[-1])["sha256"] == last["sha256"]
