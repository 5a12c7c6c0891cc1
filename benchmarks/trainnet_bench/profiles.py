"""The benchmark plan: which link profiles and scenarios a run measures.

A scenario is one link setting of the emulator (the lab's `link` fields) plus what is measured
over it. Profiles change only the emulator's link; the two hosts stay the same all run long.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

RATE_MBIT = 50
RTTS_MS = (150, 200)
LOSSES = (0.0001, 0.001, 0.01)          # 0.01 %, 0.1 %, 1 %
BUFFER_PROFILE = {"rate_mbit": 200, "delay_ms": 150, "loss": 0.0}   # 300 ms RTT, BDP 7.5 MB
SMOKE_PROFILE = {"rtt_ms": 150, "loss": 0.01}

# Buffer sizing for the data_plane role: the profile with the highest BDP (the buffer ceiling one).
HIGHEST_BDP_LINK = {"name": "bench-buffer-ceiling", "bandwidth_mbps": BUFFER_PROFILE["rate_mbit"],
                    "rtt_ms": 2 * BUFFER_PROFILE["delay_ms"], "loss_pct": 0.0}


def loss_label(loss: float) -> str:
    """0.0001 -> '0.01%', 0.01 -> '1%', 0 -> '0%'."""
    pct = loss * 100
    return f"{pct:g}%"


@dataclass
class Scenario:
    id: str
    kind: str                    # throughput | tfo | pmtu | buffer
    title: str
    link: dict                   # the lab link fields (delay_ms, rate_mbit, loss, mtu, ...)
    iperf3_args: list = field(default_factory=list)   # extra iperf3 client arguments
    omit_s: int = 0              # iperf3 -O: seconds of startup left out of the figures
    duration_s: int = 0          # iperf3 -t (0 = the run's --duration)
    published: str = ""          # the published figure this row is compared with

    @property
    def rtt_ms(self) -> float:
        return 2 * self.link["delay_ms"]

    @property
    def loss(self) -> float:
        return self.link.get("loss", 0.0)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["rtt_ms"] = self.rtt_ms
        return data


PUBLISHED_THROUGHPUT = ("50 Mbit/s trans-Pacific: CUBIC 17 Mbit/s, BBR 2.8x (~48); "
                        "retrans 5.2% -> 0.8%; Google: BBR ~ link x (1 - loss)")
PUBLISHED_TFO = "TTFB > 200 ms -> < 80 ms"
PUBLISHED_PMTU = "MTU 1400 avoids fragmentation / black holes"


def throughput_scenario(rtt_ms: float, loss: float, omit_s: int) -> Scenario:
    return Scenario(
        id=f"throughput-{rtt_ms:g}ms-{loss_label(loss)}", kind="throughput",
        title=f"{RATE_MBIT} Mbit/s, {rtt_ms:g} ms RTT, loss {loss_label(loss)}",
        link={"delay_ms": rtt_ms / 2, "rate_mbit": RATE_MBIT, "loss": loss},
        omit_s=omit_s, published=PUBLISHED_THROUGHPUT)


def tfo_scenario() -> Scenario:
    return Scenario(id="tfo-150ms", kind="tfo",
                    title=f"TFO repeat request/response, {RATE_MBIT} Mbit/s, 150 ms RTT, 0 loss",
                    link={"delay_ms": 75, "rate_mbit": RATE_MBIT, "loss": 0.0},
                    published=PUBLISHED_TFO)


def pmtu_scenario(omit_s: int) -> Scenario:
    return Scenario(id="pmtu-blackhole-1400", kind="pmtu",
                    title="Bulk through a 1400-byte path that swallows ICMP, 150 ms RTT",
                    link={"delay_ms": 75, "rate_mbit": RATE_MBIT, "loss": 0.0, "mtu": 1400,
                          "icmp_blackhole": True},
                    omit_s=omit_s, published=PUBLISHED_PMTU)


def buffer_scenario(omit_s: int) -> Scenario:
    # Forced CUBIC in both phases: at 0 loss this isolates the socket buffers from the
    # congestion-control change, which the throughput rows already show.
    return Scenario(id="buffer-ceiling-200M-300ms", kind="buffer",
                    title="Buffer ceiling: 200 Mbit/s, 300 ms RTT, 0 loss (CUBIC both)",
                    link=dict(BUFFER_PROFILE), iperf3_args=["-C", "cubic"], omit_s=omit_s,
                    published="Debian max wmem 4 MB / 0.3 s ~ 107 Mbit/s cap")


def plan(smoke: bool, omit_s: int = 2, buffer_omit_s: int = 5) -> list[Scenario]:
    """The scenarios of a run, in the order they are measured (the same in both phases)."""
    if smoke:
        return [throughput_scenario(SMOKE_PROFILE["rtt_ms"], SMOKE_PROFILE["loss"], omit_s)]
    scenarios = [throughput_scenario(rtt, loss, omit_s) for rtt in RTTS_MS for loss in LOSSES]
    scenarios += [tfo_scenario(), pmtu_scenario(omit_s), buffer_scenario(buffer_omit_s)]
    return scenarios
