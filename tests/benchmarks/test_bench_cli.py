"""The benchmark command's options (no root: only argument parsing)."""

from __future__ import annotations

import importlib.util
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
