"""The train.yml run reader on a fixture laid out as train.yml collects it."""

import json

from trainnet_bench import training


def write(run_dir, host, events):
    (run_dir / host).mkdir(parents=True)
    (run_dir / host / f"{host}-0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))


def step(rank, host, n, t, busbw):
    return {"event": "step", "rank": rank, "world_size": 2, "host": host, "step": n, "loss": 1.0 / n,
            "step_time_s": t, "allreduce_time_s": t / 2, "allreduce_bytes": 1000, "busbw_mbit_s": busbw}


def test_training_run(tmp_path):
    write(tmp_path, "a", [step(0, "a", 1, 9.0, 1.0), step(0, "a", 2, 1.0, 10.0), step(0, "a", 3, 3.0, 30.0)])
    write(tmp_path, "b", [step(1, "b", 1, 9.0, 1.0), step(1, "b", 2, 2.0, 20.0), step(1, "b", 3, 4.0, 40.0),
                          {"event": "checkpoint", "rank": 1, "host": "b", "step": 2}])
    s = training.summarize(training.run_events(tmp_path))
    assert s["hosts"] == ["a", "b"] and s["ranks"] == [0, 1] and s["world_size"] == 2
    assert s["steps"] == 3
    assert s["median_step_time_s"] == 2.5          # step 1 (connection setup) left out
    assert s["median_busbw_mbit_s"] == 25.0
    assert s["checkpoints"] == [("b", 2)]
    assert s["final_loss"] == {0: 1 / 3, 1: 1 / 3}
    assert not s["verify_ok"]                      # no verify run
    assert any("3 DDP steps" in line for line in training.summary_lines(s))


def test_verify_run_needs_every_rank_ok(tmp_path):
    ok = {"event": "verify_done", "ok": True, "bad_ranks": [], "world_size": 2}
    big = {"event": "verify", "case": "default_group", "ok": True, "elements": 1000}
    # The small tensor's figure measures latency: the summary leaves it out.
    write(tmp_path, "a", [dict(big, rank=0, elements=1, busbw_mbit_s=0.01), dict(big, rank=0, busbw_mbit_s=5.0),
                          dict(ok, rank=0)])
    write(tmp_path, "b", [dict(big, rank=1, elements=1, busbw_mbit_s=0.01), dict(big, rank=1, busbw_mbit_s=7.0)])
    s = training.summarize(training.run_events(tmp_path))
    assert not s["verify_ok"]                      # rank 1 never reported verify_done
    assert s["verify_busbw_mbit_s"] == {"default_group": 6.0}
    (tmp_path / "b" / "b-0.jsonl").write_text(json.dumps(dict(ok, ok=False, rank=1, bad_ranks=[1])) + "\n")
    s = training.summarize(training.run_events(tmp_path))
    assert not s["verify_ok"] and s["bad_ranks"] == [1]


def test_time_lost_to_a_stalled_step(tmp_path):
    """Ranks in lockstep: a step each rank took 6 s longer than the typical step costs 6 s, once."""
    times = {1: 9.0, 2: 2.0, 3: 2.1, 4: 8.0, 5: 1.9, 6: 2.0}
    write(tmp_path, "a", [step(0, "a", n, t, 1.0) for n, t in times.items()])
    write(tmp_path, "b", [step(1, "b", n, t + 0.1, 1.0) for n, t in times.items()])
    s = training.summarize(training.run_events(tmp_path))
    assert s["slowest_step"] == {"step": 4, "step_time_s": 8.05}    # step 1 (connection setup) left out
    # typical step: median of 2.05, 2.15, 8.05, 1.95, 2.05 = 2.05; only step 4 (and 2.15) run over it
    assert s["time_lost_s"] == round((8.05 - 2.05) + (2.15 - 2.05), 3)
