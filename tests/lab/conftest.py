"""Fixtures for the lab tests.

The unit tests (test_lab_spec.py, test_lab_shaping.py) need nothing special. Tests marked `lab`
build real labs (network namespaces, TUN devices, the emulator, sometimes containers): they need
root, iproute2 and iperf3, and skip otherwise. Select them with `-m lab`, the rest with
`-m "not lab"`. Each lab test builds its own small lab named trainnet-labtest (addresses from
198.19.0.0/16, so it never collides with the demo lab) and tears it down even when it fails.
The figures the fidelity tests measure are printed in the terminal summary.
trainnet_lab and the collection are imported as installed in .venv (scripts/bootstrap.sh).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from trainnet_lab.lab import Lab, LabError, podman
from trainnet_lab.spec import DEFAULT_IMAGE, build_spec

REPO_ROOT = Path(__file__).resolve().parents[2]

TEST_LAB_NAME = "trainnet-labtest"
TWO_SITE_INVENTORY = Path(__file__).resolve().parent / "fixtures" / "two_site"

_figures: list[tuple[str, str, str, str]] = []


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "lab: builds a real lab (root, network namespaces, TUN, the WAN emulator)")
    config.addinivalue_line(
        "markers", "benchmark: a published figure rather than a behaviour check; left out of the test command "
                   "(scripts/test.sh), run by benchmarks/lab_figures.sh")


def pytest_terminal_summary(terminalreporter):
    if not _figures:
        return
    terminalreporter.write_sep("-", "lab fidelity figures")
    for name, measured, target, verdict in _figures:
        terminalreporter.write_line(f"{verdict:<5}{name}\n     measured: {measured}\n"
                                    f"     target:   {target}")


@pytest.fixture
def figure(request):
    """Record a measured figure for the summary: figure(measured, target, ok)."""
    def record(measured: str, target: str, ok: bool) -> None:
        _figures.append((request.node.name, measured, target, "ok" if ok else "FAIL"))
    return record


def missing_lab_requirements(need_containers: bool = False) -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces, TUN devices)"
    for tool in ("ip", "iperf3", "ping", "ss"):
        if not shutil.which(tool):
            return f"needs {tool}"
    if not Path("/dev/net/tun").exists():
        return "needs /dev/net/tun"
    if need_containers:
        if not shutil.which("podman"):
            return "needs podman"
        if podman("image", "exists", DEFAULT_IMAGE, check=False).returncode != 0:
            return f"image {DEFAULT_IMAGE} not built (lab/image/build-image.sh)"
    return None


def remove_stale_test_lab() -> None:
    """A run killed mid-test may have left its lab: take it down before building another."""
    try:
        Lab.from_state(TEST_LAB_NAME).down(log=lambda *_: None)
    except LabError:
        pass


def two_site_raw(**link) -> dict:
    return {
        "sites": {"near": {"lan": "198.19.1.0/24"}, "far": {"lan": "198.19.2.0/24"}},
        "links": [{"sites": ["near", "far"], "delay_ms": 75, "rate_mbit": 50, **link}],
        "hosts": {"near1": {"site": "near", "address": "198.19.1.10"},
                  "far1": {"site": "far", "address": "198.19.2.10"}},
        "seed": 7,
    }


@pytest.fixture
def make_lab(request):
    """Factory: make_lab(raw, host_kind="netns") -> a Lab that is up; removed (and checked) after.

    Calling it again with the same topology updates the running lab (as `lab up` would).
    """
    reason = missing_lab_requirements(need_containers=False)
    if reason:
        pytest.skip(reason)
    remove_stale_test_lab()
    built: list[Lab] = []

    def factory(raw: dict, host_kind: str = "netns") -> Lab:
        lab = Lab(build_spec(raw, name=TEST_LAB_NAME, host_kind=host_kind))
        built.append(lab)
        lab.up(log=lambda *_: None)
        return lab

    yield factory
    for lab in built:
        leftovers = lab.down(log=lambda *_: None)
        assert not leftovers, f"lab down left: {leftovers}"
