"""The benchmark command's options (no root: only argument parsing)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

RUN_PY = Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"


@pytest.fixture(scope="module")
def run_module():
    spec = importlib.util.spec_from_file_location("bench_run", RUN_PY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_defaults_full_and_smoke(run_module):
    full = run_module.parse_args([])
    assert (full.smoke, full.reps, full.duration, full.seed, full.publish) == (False, 3, 20, 42, False)
    smoke = run_module.parse_args(["--smoke"])
    assert (smoke.reps, smoke.duration) == (1, 8)
    custom = run_module.parse_args(["--reps", "5", "--duration", "30", "--publish"])
    assert (custom.reps, custom.duration, custom.publish) == (5, 30, True)


def test_bad_values_are_refused(run_module):
    with pytest.raises(SystemExit):
        run_module.parse_args(["--reps", "0"])
    with pytest.raises(SystemExit):
        run_module.parse_args(["--duration", "1"])


ROUTE_TUNING_PY = RUN_PY.parent / "route_tuning_lab.py"


@pytest.mark.parametrize("argv, message", [
    (["--phases", "untuned,bogus"], "--phases takes a comma-separated subset of untuned, global, per-route"),
    (["--phases", "global", "--keep-from", "{earlier}"], "measured other profiles, reps or duration"),
])
def test_route_tuning_refuses_bad_phases_and_an_earlier_run_of_another_plan(tmp_path, argv, message):
    # Refused while parsing, before any lab is touched (no root needed).
    earlier = tmp_path / "results.json"
    earlier.write_text(json.dumps({"scenarios": [], "reps": 1, "duration_s": 20, "phases": {}}))
    argv = [a.replace("{earlier}", str(earlier)) for a in argv]
    done = subprocess.run([sys.executable, str(ROUTE_TUNING_PY), *argv, "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60, cwd=RUN_PY.parent, check=False)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
