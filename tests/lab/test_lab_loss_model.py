"""The bursty (Gilbert-Elliott) loss model beside the Bernoulli one.

Most tests are pure logic (no root): the chain derived from (mean loss, mean burst length), its
statistics over long seeded runs, reproducibility, the link's wiring, validation and runtime
control. The `lab` test sends a bounded stream of numbered UDP datagrams over a real two-site lab
and measures mean loss and mean burst length from the sequence numbers that did not arrive.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import pytest
from conftest import REPO_ROOT, TEST_LAB_NAME, TWO_SITE_INVENTORY, two_site_raw
from lab_traffic import emulator_counters

from trainnet_lab import cli
from trainnet_lab.emulator import Emulator
from trainnet_lab.inventory import read_inventory
from trainnet_lab.shaping import (DROPPED, DirectedLink, GilbertElliott,
                                  gilbert_elliott_transitions)
from trainnet_lab.spec import (LabSpec, SpecError, build_spec, spec_from_inventory,
                               validate_runtime_settings)

GE = {"loss_model": "gilbert_elliott"}


def loss_runs(lost: list[bool]) -> list[int]:
    """Lengths of the runs of consecutive lost packets, in order."""
    runs, current = [], 0
    for flag in lost:
        if flag:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    if current:
        runs.append(current)
    return runs


def test_loss_runs_counts_consecutive_losses():
    assert loss_runs([False, True, True, False, True, False, False, True, True, True]) == [2, 1, 3]
    assert loss_runs([]) == [] and loss_runs([False] * 3) == []


# --- the chain -------------------------------------------------------------------------------

def test_transitions_follow_from_mean_loss_and_mean_burst():
    good_to_bad, bad_to_good = gilbert_elliott_transitions(0.02, 4)
    assert bad_to_good == 0.25
    assert good_to_bad == pytest.approx(0.02 * 0.25 / 0.98)
    # The stationary share of Bad (= the loss, Bad losing everything) is the configured mean.
    assert good_to_bad / (good_to_bad + bad_to_good) == pytest.approx(0.02)
    assert gilbert_elliott_transitions(0.0, 3) == (0.0, pytest.approx(1 / 3))
    with pytest.raises(ValueError, match="at least 1 packet"):
        gilbert_elliott_transitions(0.02, 0.5)
    # q = p / (b (1 - p)) must not exceed 1: loss 0.6 needs bursts of at least 1.5 packets.
    with pytest.raises(ValueError, match="at least loss/.1-loss. = 1.5 packets"):
        gilbert_elliott_transitions(0.6, 1)
    assert gilbert_elliott_transitions(0.6, 1.5)[0] == pytest.approx(1.0)


@pytest.mark.parametrize("loss, burst", [(0.02, 4), (0.005, 1.5), (0.1, 10)])
def test_a_long_seeded_run_has_the_configured_mean_loss_and_burst_length(loss, burst):
    chain = GilbertElliott(loss, burst, random.Random(f"test:{loss}:{burst}").random)
    packets = 1_000_000
    lost = [chain.lost() for _ in range(packets)]
    runs = loss_runs(lost)
    measured_loss = sum(lost) / packets
    # Tolerances are >= 2.5 standard deviations of these estimators for a correct chain.
    assert measured_loss == pytest.approx(loss, rel=0.06)
    assert sum(runs) / len(runs) == pytest.approx(burst, rel=0.05)
    # Burst lengths are geometric: a share r = 1/b of the bursts is one packet long.
    assert sum(1 for r in runs if r == 1) / len(runs) == pytest.approx(1 / burst, abs=0.03)


def test_bernoulli_losses_do_not_come_in_bursts():
    """The contrast that makes the model worth having: at 2% Bernoulli's mean run is 1/(1-p)."""
    link = DirectedLink("near", "far", rate_mbit=10000, delay_ms=0, loss=0.02, seed=3)
    lost = [link.offer(b"x" * 100, i * 1e-3) == DROPPED for i in range(200_000)]
    runs = loss_runs(lost)
    assert sum(runs) / len(runs) == pytest.approx(1 / 0.98, rel=0.03)
    assert link.loss_bursts == len(runs)


def offer_many(link: DirectedLink, packets: int, start: float = 0.0) -> list[bool]:
    """Offer small packets 1 ms apart from `start` (no queueing at the test rates); True where
    the loss model dropped the packet."""
    lost = []
    for index in range(packets):
        before = link.drop_loss
        link.offer(b"x" * 100, start + index * 1e-3)
        lost.append(link.drop_loss > before)
        if len(link.delay_line) > 10000:
            link.delay_line.clear()
    return lost


def test_the_link_applies_the_model_and_counts_bursts():
    link = DirectedLink("near", "far", rate_mbit=10000, delay_ms=0, loss=0.02, seed=7,
                        loss_burst_packets=4, **GE)
    lost = offer_many(link, 400_000)
    runs = loss_runs(lost)
    assert link.drop_loss == sum(lost) and link.loss_bursts == len(runs)
    assert link.drop_loss / link.rx_packets == pytest.approx(0.02, rel=0.12)
    assert link.drop_loss / link.loss_bursts == pytest.approx(4, rel=0.1)
    assert link.drop_queue == 0


def test_one_seed_gives_the_same_losses_and_each_direction_its_own_stream():
    def losses(src="near", dst="far", seed=7, **extra):
        link = DirectedLink(src, dst, rate_mbit=10000, delay_ms=0, loss=0.05, seed=seed,
                            loss_burst_packets=4, **GE, **extra)
        return [i for i, flag in enumerate(offer_many(link, 20_000)) if flag]

    first = losses()
    assert first and losses() == first
    assert losses(seed=8) != first
    assert losses("far", "near") != first
    # Jitter draws from its own stream: enabling it leaves the losses alone.
    assert losses(jitter_ms=5) == first


def test_the_bernoulli_model_keeps_its_stream():
    """Existing links lose exactly the packets they lost before the loss models existed."""
    link = DirectedLink("near", "far", rate_mbit=10000, delay_ms=0, loss=0.03, seed=42)
    draws = random.Random("42:near->far:loss").random
    expected = [draws() < 0.03 for _ in range(5000)]
    assert offer_many(link, 5000) == expected


def test_loss_zero_means_no_loss_even_mid_burst():
    link = DirectedLink("near", "far", rate_mbit=10000, delay_ms=0, loss=0.0, seed=1,
                        loss_burst_packets=4, **GE)
    assert not any(offer_many(link, 10_000))
    link.configure(loss=0.3)
    # Find a loss, then stop the loss while the chain is in Bad.
    for index in range(1000):
        if link.offer(b"x" * 100, 20.0 + index * 1e-3) == DROPPED:
            break
    assert link._burst.bad
    link.configure(loss=0.0)
    assert not any(offer_many(link, 1000, start=30.0))
    link.configure(loss=0.3)
    assert not link._burst.bad  # a new loss starts a new burst, from Good


# --- the lab description ---------------------------------------------------------------------

def problems_of(**link) -> list[str]:
    with pytest.raises(SpecError) as caught:
        build_spec(two_site_raw(**link))
    return caught.value.problems


@pytest.mark.parametrize("link, expected", [
    ({"loss_model": "gilbert"},
     "link near<->far: loss_model = 'gilbert' must be one of bernoulli, gilbert_elliott"),
    ({**GE, "loss": 0.02, "loss_burst_packets": 0.5},
     "link near<->far: loss_burst_packets = 0.5 must be the mean length of a loss burst in "
     "packets, a number from 1"),
    ({**GE, "loss_burst_packets": True}, "link near<->far: loss_burst_packets = True must be"),
    ({**GE, "loss_burst_packets": "4"}, "link near<->far: loss_burst_packets = '4' must be"),
    ({"loss": 0.02, "loss_burst_packets": 4},
     "link near<->far: loss_burst_packets = 4 needs loss_model: gilbert_elliott"),
    ({**GE, "loss": 0.6, "loss_burst_packets": 1},
     "link near<->far: loss = 0.6 with loss_model: gilbert_elliott needs loss_burst_packets >= "
     "loss/(1-loss) = 1.5"),
])
def test_bad_loss_model_settings_are_refused(link, expected):
    problems = problems_of(**link)
    assert any(p.startswith(expected) for p in problems), problems


def test_good_loss_model_settings_are_accepted():
    spec = build_spec(two_site_raw(loss=0.02, loss_burst_packets=4, **GE))
    link = spec.links[0]
    assert (link.loss_model, link.loss, link.loss_burst_packets) == ("gilbert_elliott", 0.02, 4)
    assert LabSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert all(d["loss_model"] == "gilbert_elliott" and d["loss_burst_packets"] == 4
               for d in spec.emulator_config("/tmp/x")["links"])
    # Loss 0 with the bursty model is valid: no loss. Burst 1 with Bernoulli is the default.
    assert build_spec(two_site_raw(loss=0.0, **GE)).links[0].loss == 0.0
    assert build_spec(two_site_raw(loss=0.6, loss_burst_packets=1.5, **GE)).links[0].loss == 0.6
    assert build_spec(two_site_raw(loss=0.02, loss_burst_packets=1)).links[0].loss_model == "bernoulli"


def test_inventory_and_override_select_the_model_and_existing_links_are_unchanged():
    spec = spec_from_inventory(read_inventory(TWO_SITE_INVENTORY), host_kind="netns",
                               link_overrides=["near,far:loss_model=gilbert_elliott,loss=0.02,"
                                               "loss_burst_packets=4"])
    assert (spec.links[0].loss_model, spec.links[0].loss_burst_packets) == ("gilbert_elliott", 4)
    # A link without the new fields has the emulator config and state it had before they
    # existed, so `lab up` on a running lab does not restart its emulator.
    plain = spec_from_inventory(read_inventory(TWO_SITE_INVENTORY), host_kind="netns")
    assert plain.links[0].loss_model == "bernoulli"
    for direction in plain.emulator_config("/tmp/x")["links"]:
        assert set(direction) == {"src", "dst", "delay_ms", "jitter_ms", "rate_mbit", "loss",
                                  "queue_bytes", "mtu", "icmp_blackhole"}
    assert set(plain.to_dict()["links"][0]) == {"sites", "delay_ms", "rate_mbit", "jitter_ms",
                                                "loss", "queue_bytes", "mtu", "icmp_blackhole"}


# --- runtime control -----------------------------------------------------------------------------

def test_runtime_settings_are_validated_by_intent():
    bursty = {"delay_ms": 75, "jitter_ms": 0, "rate_mbit": 50, "loss": 0.02, "queue_bytes": 0,
              "mtu": 1500, "icmp_blackhole": False, "loss_model": "gilbert_elliott",
              "loss_burst_packets": 4}
    assert validate_runtime_settings("near<->far", bursty, {"loss_burst_packets": 8}) == []
    # Back to Bernoulli: the unused burst length stays, and is no error.
    assert validate_runtime_settings("near<->far", bursty, {"loss_model": "bernoulli"}) == []
    plain = {**bursty, "loss_model": "bernoulli", "loss_burst_packets": 1}
    assert validate_runtime_settings("near<->far", plain, {"loss_burst_packets": 4}) == [
        "link near<->far: loss_burst_packets = 4 needs loss_model: gilbert_elliott "
        "(bernoulli losses are independent, no bursts)"]
    assert validate_runtime_settings("near<->far", plain, {"loss_burst_packets": 4, **GE}) == []
    assert validate_runtime_settings("near<->far", bursty, {"loss_burst_packets": 0})[0].startswith(
        "link near<->far: loss_burst_packets = 0 must be")


def test_control_switches_both_directions_to_the_bursty_model_and_back(tmp_path):
    spec = build_spec(two_site_raw(loss=0.01), name="trainnet-labunit", host_kind="netns")
    emulator = Emulator(spec.emulator_config(str(tmp_path)))
    refused = emulator.handle_control({"op": "set", "sites": ["near", "far"],
                                       "settings": {"loss_model": "gilbert"}})
    assert not refused["ok"] and "loss_model = 'gilbert' must be one of" in refused["error"]
    reply = emulator.handle_control({"op": "set", "sites": ["far", "near"], "settings": {
        "loss": 0.02, "loss_model": "gilbert_elliott", "loss_burst_packets": 4}})
    assert reply["ok"], reply
    for direction in ("near->far", "far->near"):
        settings = reply["directions"][direction]
        assert (settings["loss"], settings["loss_model"], settings["loss_burst_packets"]) == \
            (0.02, "gilbert_elliott", 4)
    assert reply["runtime"] == {"sites": ["near", "far"], "loss": 0.02,
                                "loss_model": "gilbert_elliott", "loss_burst_packets": 4}
    links = emulator.pairs[frozenset(("near", "far"))]
    assert all(isinstance(link._burst, GilbertElliott) for link in links)
    status = emulator.snapshot(time.monotonic())["links"]["near->far"]
    assert status["loss_model"] == "gilbert_elliott" and "loss_bursts" in status["counters"]
    reset = emulator.handle_control({"op": "reset", "sites": ["near", "far"]})
    assert reset["directions"]["near->far"]["loss_model"] == "bernoulli"
    assert all(link._burst is None for link in links)


def test_status_and_link_show_name_the_bursty_model(capsys):
    shown = {"loss": 0.02, "loss_model": "gilbert_elliott", "loss_burst_packets": 4}
    assert cli.loss_text(shown) == "loss 0.02 gilbert_elliott burst 4"
    assert cli.loss_text({"loss": 0.01}) == "loss 0.01"   # an emulator older than the models
    report = {
        "name": "trainnet-labtest", "up": True, "complete": True, "host_kind": "netns",
        "emulator": {"health": "ok", "pid": 1, "status_age_s": 0.2, "log": "x.log"},
        "hosts": [], "routers": [], "problems": [],
        "links": [{"link": "near<->far", "delay_ms": 75, "jitter_ms": 0, "rate_mbit": 50,
                   **shown, "queue_bytes": 0, "mtu": 1500, "icmp_blackhole": False,
                   "down": False, "runtime_change": {},
                   "directions": {"near->far": {"rx_packets": 1000, "drop_loss": 20,
                                                "loss_bursts": 5}}}],
    }
    cli.print_status(report)
    out = capsys.readouterr().out
    assert "loss 0.02 gilbert_elliott burst 4" in out
    assert "mean loss burst (packets): near->far 4.00" in out


# --- a real lab ---------------------------------------------------------------------------------

UDP_PORT = 5409
RECEIVER = """
import json, socket, sys, time
address, port, count, limit = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind((address, port))
s.settimeout(0.5)
seen, end, last = set(), time.monotonic() + limit, None
while time.monotonic() < end and len(seen) < count:
    if last is not None and time.monotonic() - last > 3:
        break  # the sender has finished (its last packets may be lost)
    try:
        data = s.recv(2048)
    except socket.timeout:
        continue
    seen.add(int.from_bytes(data[:4], "big"))
    last = time.monotonic()
print(json.dumps(sorted(seen)))
"""
SENDER = """
import socket, sys, time
address, port, count, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
payload = bytes(60)
start = time.monotonic()
for seq in range(count):
    s.sendto(seq.to_bytes(4, "big") + payload, (address, port))
    if seq % 16 == 15:  # paced in small groups: the link sees count packets at `rate` per second
        time.sleep(max(0.0, start + (seq + 1) / rate - time.monotonic()))
print(round(time.monotonic() - start, 2))
"""


def send_numbered_datagrams(lab, source: str, destination: str, *, count: int, rate: float
                            ) -> tuple[list[int], float]:
    """Send `count` numbered UDP datagrams; return the numbers that arrived and the send time."""
    address = lab.spec.hosts[destination].address
    limit = count / rate + 15
    receiver = lab.popen_on(destination, ["timeout", str(int(limit + 5)), "python3", "-c", RECEIVER,
                                          address, str(UDP_PORT), str(count), str(limit)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready_by = time.monotonic() + 10
        while time.monotonic() < ready_by and receiver.poll() is None:
            if lab.run_on(destination, ["ss", "-Hlun", f"sport = :{UDP_PORT}"], timeout=10
                          ).stdout.strip():
                break
            time.sleep(0.1)
        sent = lab.run_on(source, ["python3", "-c", SENDER, address, str(UDP_PORT), str(count),
                                   str(rate)], timeout=limit, check=True)
        out, err = receiver.communicate(timeout=limit + 10)
    finally:
        if receiver.poll() is None:
            receiver.kill()
            receiver.communicate(timeout=5)
    assert receiver.returncode == 0, err
    return json.loads(out), float(sent.stdout)


@pytest.mark.lab
def test_bursty_loss_matches_the_configured_mean_loss_and_burst_length(make_lab, figure):
    started = time.monotonic()
    # 80,000 datagrams: about 400 bursts, so a correct chain lands within about +-7% (one
    # standard deviation) of the configured loss and burst length; 16 s at 5000 packets/s.
    loss, burst, count, rate = 0.02, 4, 80_000, 5000.0
    lab = make_lab(two_site_raw(delay_ms=20, rate_mbit=50, loss=loss, loss_burst_packets=burst,
                                **GE))
    received, sending = send_numbered_datagrams(lab, "near1", "far1", count=count, rate=rate)
    arrived = set(received)
    runs = loss_runs([seq not in arrived for seq in range(count)])
    measured_loss = sum(runs) / count
    measured_burst = sum(runs) / len(runs)
    # The lab adds nothing of its own: the datagrams lost are the ones the seeded chain of this
    # direction picks, as computed here without a lab (only the test's datagrams cross near->far).
    chain = GilbertElliott(loss, burst, random.Random(f"{lab.spec.seed}:near->far:loss").random)
    predicted = {seq for seq in range(count) if chain.lost()}
    lost = set(range(count)) - arrived
    time.sleep(1.2)  # the emulator's status file is refreshed every second
    counters = emulator_counters(lab, "near->far")
    emulated_loss = counters["drop_loss"] / counters["rx_packets"]
    emulated_burst = counters["drop_loss"] / counters["loss_bursts"]
    ok = (abs(measured_loss / loss - 1) <= 0.25 and abs(measured_burst / burst - 1) <= 0.25)
    duration = time.monotonic() - started
    figure(f"loss {measured_loss:.3%} in {len(runs)} runs, mean run {measured_burst:.2f} packets, "
           f"of {count} datagrams sent in {sending:.1f} s (emulator: {emulated_loss:.3%}, mean "
           f"burst {emulated_burst:.2f}, {counters['loss_bursts']} bursts; "
           f"{len(lost ^ predicted)} lost datagrams differ from the seeded model's); "
           f"test {duration:.1f} s",
           f"loss {loss:.0%} and mean burst {burst} packets, each within 25%", ok)
    assert counters["drop_queue"] == 0 and counters["rx_packets"] >= count
    assert abs(measured_loss / loss - 1) <= 0.25, measured_loss
    assert abs(measured_burst / burst - 1) <= 0.25, runs
    assert abs(emulated_loss / loss - 1) <= 0.25 and abs(emulated_burst / burst - 1) <= 0.25
    # A few may differ if a loaded host drops a datagram at the receiver.
    assert len(lost ^ predicted) <= 0.02 * len(predicted), sorted(lost ^ predicted)[:20]

    # `lab status` names the model and the bursts it measured; Lab.set_link switches at runtime.
    status = subprocess.run([sys.executable, str(REPO_ROOT / "lab" / "lab.py"), "status",
                             "--name", TEST_LAB_NAME], capture_output=True, text=True, timeout=60,
                            check=False)
    assert "loss 0.02 gilbert_elliott burst 4" in status.stdout, status.stdout
    assert f"mean loss burst (packets): near->far {emulated_burst:.2f}" in status.stdout
    reply = lab.set_link("near", "far", loss_model="bernoulli")
    assert reply["directions"]["far->near"]["loss_model"] == "bernoulli"
    link = next(entry for entry in lab.status()["links"] if entry["link"] == "near<->far")
    assert link["loss_model"] == "bernoulli" and link["runtime_change"] == {"loss_model": "bernoulli"}
    assert time.monotonic() - started < 60
