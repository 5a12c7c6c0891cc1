"""Accuracy of longhaul.trainnet.link_measure against the lab's known link physics.

A two-site lab of bare namespaces named trainnet-labacc (198.19.101.0/24 and 198.19.102.0/24,
so it never collides with trainnet-lab or trainnet-labtest) is built once for this file and
removed in a finalizer, even on failure. The module runs inside the source namespace as a plain
Python program (AnsiballZ is not needed: module args in a JSON file, PYTHONPATH=.collections),
exactly the code `ansible -m longhaul.trainnet.link_measure` would run there.

Loss: the emulator drops each packet with probability p in each direction, so an echo probe is
lost with 1 - (1 - p)^2; the link uses p = 0.005 so that probe loss is ~1% (0.9975%).
Runtime about 1 minute.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import REPO_ROOT, missing_lab_requirements
from lab_traffic import set_sysctls
from trainnet_lab.lab import Lab, LabError
from trainnet_lab.spec import build_spec

pytestmark = pytest.mark.lab

LAB_NAME = "trainnet-labacc"
MODULE = REPO_ROOT / "plugins" / "modules" / "link_measure.py"
COLLECTIONS = REPO_ROOT / ".collections"
ONE_WAY_MS = 75
PATH_MTU = 1400
LINK_LOSS = 0.005
PROBE_LOSS_PCT = 100 * (1 - (1 - LINK_LOSS) ** 2)
ROOMY_BUFFERS = {"net.ipv4.tcp_rmem": "4096 131072 33554432",
                 "net.ipv4.tcp_wmem": "4096 16384 33554432"}
FAR = "198.19.102.10"


def raw(**link) -> dict:
    return {
        "sites": {"near": {"lan": "198.19.101.0/24"}, "far": {"lan": "198.19.102.0/24"}},
        "links": [{"sites": ["near", "far"], "delay_ms": ONE_WAY_MS, "rate_mbit": RATE_MBIT, **link}],
        "hosts": {"near1": {"site": "near", "address": "198.19.101.10"},
                  "far1": {"site": "far", "address": FAR}},
        "seed": 11,
    }


@pytest.fixture(scope="module")
def acc_lab():
    reason = missing_lab_requirements()
    if reason:
        pytest.skip(reason)
    if not (COLLECTIONS / "ansible_collections" / "longhaul" / "trainnet").exists():
        pytest.skip("needs .collections (source scripts/bootstrap.sh)")
    try:
        Lab.from_state(LAB_NAME).down(log=lambda *_: None)
    except LabError:
        pass
    labs: list[Lab] = []

    def build(**link) -> Lab:
        lab = Lab(build_spec(raw(**link), name=LAB_NAME, host_kind="netns"))
        labs.append(lab)
        lab.up(log=lambda *_: None)
        return lab

    yield build
    leftovers = Lab.from_state(LAB_NAME).down(log=lambda *_: None) if labs else []
    assert not leftovers, f"lab down left: {leftovers}"


def run_module(lab: Lab, host: str, deadline: float, **args) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, handle)
    try:
        started = time.monotonic()
        completed = lab.run_on(host, ["timeout", str(int(deadline)), "env", f"PYTHONPATH={COLLECTIONS}",
                                      "LANG=C", sys.executable, str(MODULE), handle.name],
                               timeout=deadline + 10)
        result = json.loads(completed.stdout or "{}") if completed.stdout.strip() else {
            "failed": True, "msg": completed.stderr}
        result["_wall_s"] = time.monotonic() - started
        return result
    finally:
        Path(handle.name).unlink()


_lossy: dict = {}


def lossy_result(acc_lab) -> dict:
    """One module run (RTT over 3,000 probes + PMTU search) on the lossy black-holed link."""
    if not _lossy:
        lab = acc_lab(loss=LINK_LOSS, mtu=PATH_MTU, icmp_blackhole=True)
        lab.run_on("near1", ["ping", "-n", "-q", "-c", "2", "-W", "2", FAR], timeout=10)
        _lossy.update(run_module(lab, "near1", 90, peer=FAR, iperf3=False, tfo=False,
                                 ping_count=3000, ping_interval=0.005, timeout=80))
    return _lossy


def test_rtt_within_3_percent(acc_lab, figure):
    result = lossy_result(acc_lab)
    assert not result.get("failed"), result.get("msg")
    rtt = result["rtt_ms"]["avg"]
    ok = abs(rtt - 2 * ONE_WAY_MS) <= 0.03 * 2 * ONE_WAY_MS
    figure(f"RTT avg {rtt} ms (mdev {result['rtt_ms']['mdev']}) over {result['probes_sent']} probes",
           f"{2 * ONE_WAY_MS} ms +- 3%", ok)
    assert ok


def test_loss_within_0_3_points(acc_lab, figure):
    result = lossy_result(acc_lab)
    loss = result["loss_pct"]
    ok = abs(loss - PROBE_LOSS_PCT) <= 0.3 and result["probes_sent"] >= 2000
    figure(f"loss {loss}% of {result['probes_sent']} probes",
           f"{PROBE_LOSS_PCT:.3f}% (p={LINK_LOSS} each way) +- 0.3 points", ok)
    assert result["probes_sent"] >= 2000
    assert abs(loss - PROBE_LOSS_PCT) <= 0.3


def test_path_mtu_within_8_bytes_and_black_hole_seen(acc_lab, figure):
    result = lossy_result(acc_lab)
    mtu = result["path_mtu_bytes"]
    ok = mtu is not None and abs(mtu - PATH_MTU) <= 8
    figure(f"path MTU {mtu}, black hole {result['pmtu_blackhole']}, "
           f"{len(result['pmtu_probes'])} probes", f"{PATH_MTU} +- 8, black hole true", ok)
    assert ok, result["pmtu_probes"]
    assert result["pmtu_blackhole"] is True


RATE_MBIT = 50
# TCP goodput the emulator's rate allows: payload (MSS 1448) of each 1500-byte packet on the wire
GOODPUT_CEILING = RATE_MBIT * 1448 / 1500
# The module's documented bound for a default measurement at 150 ms RTT (about 15 s), with room for
# the longer iperf3 connect budget and a loaded CI machine.
DEFAULT_WALL_S = 25


def test_throughput_against_the_link_rate_and_default_timing(acc_lab, figure):
    """Independent reference: the emulator's configured rate and its own packet counters, not a
    second iperf3 run; and the module's wall time is asserted, not just reported."""
    lab = acc_lab(loss=0.0, mtu=1500, icmp_blackhole=False)
    for host in ("near1", "far1"):
        set_sysctls(lab, host, ROOMY_BUFFERS)
    # A second measurement only when the first falls short of the rate: a stall of the host (a busy
    # VM neighbour) can only lower a rate. The module must match the emulator's count every time.
    attempts = []
    for port in (5411, 5412):
        before = {k: dict(v) for link in lab.status()["links"] for k, v in link["directions"].items()}
        with lab.serving("far1", ["iperf3", "-s", "-1", "-p", str(port)], port, seconds=60):
            # The module's defaults (200 probes, PMTU search, 10 s iperf3) apart from cc and port.
            result = run_module(lab, "near1", 70, peer=FAR, iperf3_port=port, congestion_control="bbr")
        assert not result.get("failed"), result.get("msg")
        after = {k: dict(v) for link in lab.status()["links"] for k, v in link["directions"].items()}
        # the busiest direction carried the data: its packets bound what the receiver can have got
        forwarded = max(after[k].get("tx_packets", 0) - before.get(k, {}).get("tx_packets", 0) for k in after)
        counted_mbit = forwarded * 1500 * 8 / 1e6 / 10
        attempts.append((result["throughput_mbps"], forwarded, counted_mbit, result))
        assert result["throughput_mbps"] <= counted_mbit * 1.05, (result["throughput_mbps"], counted_mbit)
        if 0.80 * GOODPUT_CEILING <= result["throughput_mbps"]:
            break
    measured, forwarded, counted_mbit, result = max(attempts, key=lambda a: a[0])
    ok_rate = 0.80 * GOODPUT_CEILING <= measured <= 1.02 * GOODPUT_CEILING
    ok_counters = all(m <= c * 1.05 for m, _, c, _ in attempts)
    ok_time = all(r["_wall_s"] <= DEFAULT_WALL_S and r["duration_s"] <= DEFAULT_WALL_S for *_, r in attempts)
    earlier = "".join(f" (first run {m} Mbit/s)" for m, *_ in attempts[:-1])
    figure(f"module {measured} Mbit/s{earlier}; link rate {RATE_MBIT} Mbit/s (goodput ceiling {GOODPUT_CEILING:.1f}); "
           f"emulator forwarded {forwarded} packets (<= {counted_mbit:.1f} Mbit/s over 10 s); default "
           f"measurement took {result['duration_s']} s (wall {result['_wall_s']:.1f} s)",
           f"80-102% of the goodput ceiling (a second run if the first falls short); within the emulator's count; "
           f"wall <= {DEFAULT_WALL_S} s", ok_rate and ok_counters and ok_time)
    assert ok_rate, [a[0] for a in attempts]
    assert ok_counters, [(a[0], a[2]) for a in attempts]
    assert ok_time, [(a[3]["_wall_s"], a[3]["duration_s"]) for a in attempts]
