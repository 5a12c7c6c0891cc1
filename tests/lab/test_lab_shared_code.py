"""The lab as an installed package on the collection's shared code (no root needed).

One copy of each piece: the link rules come from plugins/plugin_utils/wan_model.py, the emulator's
default queue from plugins/plugin_utils/bdp.py, every command the lab runs from one runner
(trainnet_lab.netns.run); and nothing reaches the lab or the benchmarks by editing sys.path.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.longhaul.trainnet.plugins.module_utils import mtu
from ansible_collections.longhaul.trainnet.plugins.plugin_utils import wan_model
from ansible_collections.longhaul.trainnet.plugins.plugin_utils.bdp import bdp_bytes
from conftest import REPO_ROOT, two_site_raw
from trainnet_lab import lab as lab_module
from trainnet_lab import netns
from trainnet_lab import spec as spec_module
from trainnet_lab.spec import SpecError, build_spec

SYSTEM_PYTHON = "/usr/bin/python3"


def spec_problems(**link):
    try:
        build_spec(two_site_raw(**link), name="trainnet-labtest", host_kind="netns")
    except SpecError as error:
        return error.problems
    return []


def test_link_rules_are_the_collections_wan_model():
    """The lab checks each link with the WAN model the roles' filters use: the same problems."""
    assert spec_module.wan_model is wan_model
    assert spec_problems(mtu=mtu.MTU_MIN) == [] and spec_problems(mtu=mtu.MTU_MAX) == []
    for bad in ({"mtu": mtu.MTU_MIN - 1}, {"mtu": mtu.MTU_MAX + 1}, {"loss": 1.0}, {"rate_mbit": 0},
                {"queue_bytes": 100}, {"mtu": 1400, "colour": "blue"}):
        link = two_site_raw(**bad)["links"][0]
        _links, model_problems = wan_model.normalise([link], ["near", "far"])
        assert model_problems and spec_problems(**bad) == model_problems, bad
    assert spec_problems(mtu=mtu.MTU_MIN - 1) == [
        f"link near<->far: mtu = {mtu.MTU_MIN - 1} must be an integer from {mtu.MTU_MIN} to {mtu.MTU_MAX}"]


@pytest.mark.parametrize("rate_mbit, delay_ms", [(50, 75), (200, 150), (1, 262.4), (10000, 0.35)])
def test_default_queue_is_one_exact_bdp_of_the_round_trip(rate_mbit, delay_ms):
    # (1, 262.4): 1 Mbit/s x 524.8 ms is 65600 bytes; float arithmetic gave 65599.
    expected = max(bdp_bytes(rate_mbit, 2 * delay_ms), wan_model.MIN_AUTO_QUEUE_BYTES)
    assert wan_model.auto_queue_bytes(rate_mbit, delay_ms) == expected
    assert wan_model.auto_queue_bytes(1, 262.4) == 65600


def test_podman_and_host_commands_go_through_the_one_runner(monkeypatch):
    calls = []
    inspected = {"answer": "0 null"}      # podman's answer for a container that does not run

    def fake_run(argv, **kwargs):
        calls.append((argv, kwargs))
        return subprocess.CompletedProcess(argv, 0, inspected["answer"] if argv[1] == "inspect" else "out", "")
    monkeypatch.setattr(netns, "run", fake_run)
    monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    lab_module.podman("ps", "-a", check=False)
    spec = build_spec(two_site_raw(), name="trainnet-labtest", host_kind="container")
    lab = lab_module.Lab(spec, state_root="/nonexistent")
    lab.run_on("near1", ["true"], timeout=5)
    # Not running: podman exec, which says so.
    assert [argv[:2] for argv, _kw in calls] == [["podman", "ps"], ["podman", "inspect"], ["podman", "exec"]]
    assert calls[2][0] == ["podman", "exec", "trainnet-labtest-near1", "true"]
    for _argv, kwargs in calls:
        env = kwargs["env"]
        assert (env["LANG"], env["LC_ALL"]) == ("C", "C")
        assert env["CONTAINERS_CONF"] == str(REPO_ROOT / "lab" / "containers.conf")
    assert calls[2][1]["what"] == "near1: true" and calls[2][1]["timeout"] == 5
    # Running (this test's own process stands in for the container's first process): nsenter into
    # its namespaces with the container's environment, podman asked once for any number of commands.
    del calls[:]
    inspected["answer"] = '%d ["PATH=/usr/bin:/bin", "container=podman"]' % os.getpid()
    lab.run_on("near1", ["true"], timeout=5)
    lab.run_on("near1", ["hostname"], timeout=5)
    assert [argv[:2] for argv, _kw in calls] == [["podman", "inspect"], ["nsenter", "--target"], ["nsenter", "--target"]]
    assert calls[1][0][2] == str(os.getpid())
    assert calls[2][0][-5:] == ["/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "container=podman", "hostname"]
    assert calls[2][1]["what"] == "near1: hostname"


def test_runner_failure_names_the_command():
    with pytest.raises(netns.CommandError, match=r"^false failed \(1\)"):
        netns.run(["false"], timeout=10)
    assert netns.run(["sh", "-c", "echo $LC_ALL"], timeout=10).stdout == "C\n"


def test_packages_import_without_path_edits(tmp_path):
    """In .venv, from anywhere: the lab, the benchmarks and the collection (bootstrap installs them)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    code = ("import trainnet_lab, trainnet_bench.runner, "
            "ansible_collections.longhaul.trainnet.plugins.plugin_utils.svg_chart as s; "
            "print(trainnet_lab.__file__); print(trainnet_bench.runner.__file__); print(s.__file__)")
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    paths = [Path(line).resolve() for line in result.stdout.split()]
    assert paths == [REPO_ROOT / "lab" / "trainnet_lab" / "__init__.py",
                     REPO_ROOT / "benchmarks" / "trainnet_bench" / "runner.py",
                     REPO_ROOT / "plugins" / "plugin_utils" / "svg_chart.py"]


def test_no_sys_path_edits_in_lab_benchmarks_and_tests():
    edit = re.compile(r"sys\.path\s*(\.(insert|append|extend|remove)\b|\[[^\]]*\]\s*=|\+=|=)")
    found = [f"{path.relative_to(REPO_ROOT)}:{number}"
             for top in ("lab", "benchmarks", "tests")
             for path in (REPO_ROOT / top).rglob("*.py")
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if edit.search(line)]
    assert found == []


@pytest.mark.skipif(not Path(SYSTEM_PYTHON).exists(), reason="no system Python")
def test_lab_command_works_with_the_system_python():
    """`python3 lab/lab.py` as the README says: Debian's Python re-runs it with .venv's."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRAINNET_LAB_REEXEC")}
    result = subprocess.run([SYSTEM_PYTHON, str(REPO_ROOT / "lab" / "lab.py"), "validate", "-i",
                             str(REPO_ROOT / "tests" / "lab" / "fixtures" / "two_site")],
                            cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert "valid" in result.stdout and "queue 937500 B" in result.stdout
