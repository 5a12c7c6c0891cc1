"""One direction of a WAN link: the physics the emulator applies to each packet.

Model (per directed site pair), in the order a packet meets it:
  0. link down (runtime control, `lab link A,B down`): every packet vanishes, no ICMP, counted
     as drop_down; packets already on the delay line still arrive (they were past the cut);
  1. path MTU: a packet larger than the MTU does not enter (the emulator black-holes it, answers
     with ICMP "fragmentation needed", or fragments it when DF is clear);
  2. random loss (like netem, a lost packet takes no queue space), by the link's loss model:
     - bernoulli (default): an independent seeded trial per packet with probability `loss`;
     - gilbert_elliott: a two-state Markov chain advanced once per packet (see GilbertElliott),
       so losses come in bursts of mean length `loss_burst_packets` at the same mean rate `loss`;
  3. FIFO drop-tail queue of queue_bytes in front of the serialiser;
  4. serialisation at rate_bit/s: departure = max(now, last departure) + size * 8 / rate;
  5. propagation delay plus optional jitter, never earlier than the previous packet's release,
     so the link never reorders.
The queue is never materialised: with a serialisation clock, the bytes still waiting at time t
are exactly (last_departure - t) * rate / 8. Packets then wait in a FIFO delay line until their
release time; the emulator writes them out from there.

Pure logic (no I/O), so it is unit-tested without root.
"""

from __future__ import annotations

import random
from collections import deque

from ansible_collections.longhaul.trainnet.plugins.plugin_utils.wan_model import LOSS_MODELS, auto_queue_bytes

# Results of DirectedLink.offer
ACCEPTED = 0
DROPPED = 1
TOO_BIG = 2


def gilbert_elliott_transitions(loss: float, burst_packets: float) -> tuple[float, float]:
    """(q, r) = (P(Good->Bad), P(Bad->Good)) per packet for mean loss `loss` and mean burst
    length `burst_packets` (packets), with every packet lost in Bad and none in Good.

    A burst is a stay in Bad: geometric with mean 1/r, so r = 1/b. The chain is in Bad a
    fraction q/(q+r) of the packets; setting that to p gives q = p*r/(1-p). q is a probability
    only when b >= p/(1-p) (for p < 0.5 every b >= 1 is fine); ValueError otherwise.
    """
    if burst_packets < 1:
        raise ValueError(f"mean burst length {burst_packets} must be at least 1 packet")
    if not 0 <= loss < 1:
        raise ValueError(f"loss {loss} must be in [0, 1)")
    bad_to_good = 1.0 / burst_packets
    good_to_bad = loss * bad_to_good / (1.0 - loss)
    if good_to_bad > 1:
        raise ValueError(f"loss {loss} needs a mean burst of at least loss/(1-loss) = "
                         f"{loss / (1 - loss):.3g} packets, not {burst_packets}")
    return good_to_bad, bad_to_good


class GilbertElliott:
    """The simple Gilbert(-Elliott) loss model: Good loses nothing, Bad loses every packet.

    lost() advances the chain by one packet, then reports the new state: one uniform draw per
    packet from `uniform` (the link's seeded loss stream), so a seed gives the same losses every
    run. The chain starts in Good. set() keeps the current state (a runtime change does not cut
    a burst short), except that loss 0 goes back to Good, so loss 0 means no loss at once.
    """

    __slots__ = ("uniform", "bad", "good_to_bad", "bad_to_good")

    def __init__(self, loss: float, burst_packets: float, uniform):
        self.uniform = uniform
        self.bad = False
        self.set(loss, burst_packets)

    def set(self, loss: float, burst_packets: float) -> None:
        self.good_to_bad, self.bad_to_good = gilbert_elliott_transitions(loss, burst_packets)
        if not loss:
            self.bad = False

    def lost(self) -> bool:
        if self.bad:
            if self.uniform() < self.bad_to_good:
                self.bad = False
        elif self.uniform() < self.good_to_bad:
            self.bad = True
        return self.bad


class DirectedLink:
    """Shapes packets from one site to another. Counters are plain attributes for speed."""

    COUNTERS = ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "drop_down",
                "drop_loss", "loss_bursts", "drop_queue", "drop_mtu", "icmp_frag_needed_sent",
                "fragmented")
    # What the runtime control channel may change (sites and seed are the link's identity).
    SETTABLE = ("delay_ms", "jitter_ms", "rate_mbit", "loss", "loss_model", "loss_burst_packets",
                "queue_bytes", "mtu", "icmp_blackhole")

    def __init__(self, src: str, dst: str, *, rate_mbit: float, delay_ms: float,
                 jitter_ms: float = 0.0, loss: float = 0.0, loss_model: str = "bernoulli",
                 loss_burst_packets: float = 1, queue_bytes: int = 0, mtu: int = 1500,
                 icmp_blackhole: bool = False, seed: int | str = 0):
        self.src = src
        self.dst = dst
        self.name = f"{src}->{dst}"
        self.down = False
        # Separate generators so that enabling jitter does not change which packets are lost.
        # Both loss models draw from the same per-direction stream, one draw per packet.
        self._loss_random = random.Random(f"{seed}:{self.name}:loss").random
        self._jitter_random = random.Random(f"{seed}:{self.name}:jitter").uniform
        self._burst: GilbertElliott | None = None
        self._last_lost = False
        self.configure(rate_mbit=rate_mbit, delay_ms=delay_ms, jitter_ms=jitter_ms, loss=loss,
                       loss_model=loss_model, loss_burst_packets=loss_burst_packets,
                       queue_bytes=queue_bytes, mtu=mtu, icmp_blackhole=icmp_blackhole)
        self.last_departure = 0.0
        self.last_release = 0.0
        # FIFO of (release_time, packet); release times never decrease.
        self.delay_line: deque[tuple[float, bytes]] = deque()
        for counter in self.COUNTERS:
            setattr(self, counter, 0)

    def configure(self, **settings) -> None:
        """Set any of SETTABLE. Packets already queued keep their release times, and the link
        still never reorders: after a delay decrease new packets wait behind the old ones."""
        unknown = set(settings) - set(self.SETTABLE)
        if unknown:
            raise ValueError(f"not settable on a running link: {', '.join(sorted(unknown))}")
        if "rate_mbit" in settings:
            self.rate_mbit = settings["rate_mbit"]
            self.seconds_per_byte = 8.0 / (self.rate_mbit * 1e6)
            self.bytes_per_second = self.rate_mbit * 1e6 / 8.0
        # The given milliseconds are kept as given, so settings() reports them without rounding.
        if "delay_ms" in settings:
            self.delay_ms = settings["delay_ms"]
            self.delay = float(self.delay_ms) / 1000.0
        if "jitter_ms" in settings:
            self.jitter_ms = settings["jitter_ms"]
            self.jitter = float(self.jitter_ms) / 1000.0
        if "loss" in settings:
            self.loss = settings["loss"]
        if "loss_model" in settings:
            if settings["loss_model"] not in LOSS_MODELS:
                raise ValueError(f"loss_model {settings['loss_model']!r}: expected one of "
                                 f"{', '.join(LOSS_MODELS)}")
            self.loss_model = settings["loss_model"]
        if "loss_burst_packets" in settings:
            self.loss_burst_packets = settings["loss_burst_packets"]
        if {"loss", "loss_model", "loss_burst_packets"} & set(settings):
            if self.loss_model == "gilbert_elliott":
                if self._burst is None:
                    self._burst = GilbertElliott(self.loss, self.loss_burst_packets,
                                                 self._loss_random)
                else:
                    self._burst.set(self.loss, self.loss_burst_packets)
            else:
                self._burst = None
        if "queue_bytes" in settings:
            self.queue_bytes = int(settings["queue_bytes"]) or auto_queue_bytes(
                self.rate_mbit, self.delay_ms)
        if "mtu" in settings:
            self.mtu = int(settings["mtu"])
        if "icmp_blackhole" in settings:
            self.icmp_blackhole = bool(settings["icmp_blackhole"])

    def settings(self) -> dict:
        return {"delay_ms": self.delay_ms, "jitter_ms": self.jitter_ms,
                "rate_mbit": self.rate_mbit, "loss": self.loss, "loss_model": self.loss_model,
                "loss_burst_packets": self.loss_burst_packets, "queue_bytes": self.queue_bytes,
                "mtu": self.mtu, "icmp_blackhole": self.icmp_blackhole, "down": self.down}

    def backlog_bytes(self, now: float) -> float:
        """Bytes still waiting for (or in) serialisation at time now."""
        return max(0.0, (self.last_departure - now) * self.bytes_per_second)

    def offer(self, packet: bytes, now: float) -> int:
        """Admit a packet at time now: ACCEPTED (queued on the delay line), DROPPED or TOO_BIG."""
        size = len(packet)
        self.rx_packets += 1
        self.rx_bytes += size
        if self.down:
            # Before the MTU check: a cut path answers nothing, not even frag-needed.
            self.drop_down += 1
            return DROPPED
        if size > self.mtu:
            return TOO_BIG
        if self.loss:
            burst = self._burst
            if burst is None:
                lost = self._loss_random() < self.loss
            else:
                lost = burst.lost()
            if lost:
                self.drop_loss += 1
                if not self._last_lost:
                    self.loss_bursts += 1  # runs of consecutive losses: drop_loss / loss_bursts
                self._last_lost = True
                return DROPPED
            self._last_lost = False
        start = self.last_departure
        if start > now:
            if (start - now) * self.bytes_per_second + size > self.queue_bytes:
                self.drop_queue += 1
                return DROPPED
        else:
            start = now
        departure = start + size * self.seconds_per_byte
        self.last_departure = departure
        release = departure + self.delay
        if self.jitter:
            release += self._jitter_random(-self.jitter, self.jitter)
            # Never before the packet has left the serialiser, never before the previous packet.
            release = max(release, departure)
        if release < self.last_release:
            release = self.last_release
        self.last_release = release
        self.delay_line.append((release, packet))
        return ACCEPTED

    def next_release(self) -> float | None:
        return self.delay_line[0][0] if self.delay_line else None

    def pop_due(self, now: float) -> list[bytes]:
        """Packets whose release time has come, in order (used by tests; the emulator inlines it)."""
        due = []
        line = self.delay_line
        while line and line[0][0] <= now:
            due.append(line.popleft()[1])
        self.tx_packets += len(due)
        self.tx_bytes += sum(len(p) for p in due)
        return due

    def counters(self, now: float) -> dict:
        values = {name: getattr(self, name) for name in self.COUNTERS}
        values["queued_bytes"] = int(self.backlog_bytes(now))
        values["in_flight_packets"] = len(self.delay_line)
        return values
