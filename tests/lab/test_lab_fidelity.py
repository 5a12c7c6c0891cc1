"""Fidelity of the emulated WAN: does a lab link behave like the inventory says?

Each test builds a two-site lab of bare network namespaces (fast; the emulator and routing are
the same as in the container lab) with the link parameters it needs, measures with ping or iperf3
inside the namespaces, and tears the lab down. Figures go to the terminal summary.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import two_site_raw
from lab_traffic import emulator_counters, iperf3, ping, received_mbit, set_sysctls

pytestmark = pytest.mark.lab

# Large enough that a 50 Mbit/s x 150 ms flow is never limited by its socket buffers: these
# tests check the link, not the hosts' (deliberately untuned) defaults.
ROOMY_BUFFERS = {"net.ipv4.tcp_rmem": "4096 131072 33554432",
                 "net.ipv4.tcp_wmem": "4096 16384 33554432"}
TCP_PAYLOAD_PER_1500 = 1448  # MSS with TCP timestamps at MTU 1500


def test_rtt_is_twice_the_one_way_delay(make_lab, figure):
    lab = make_lab(two_site_raw(delay_ms=75, rate_mbit=50))
    result = ping(lab, "near1", "far1", count=50, interval=0.1)
    scheduling = lab.status().get("emulator", {}).get("scheduling", "unknown")
    # Never early (the emulator holds each packet for the configured delay), and late by no more
    # than the host's own latency: two TUN crossings and a wakeup each way, 0.3-0.8 ms here under
    # SCHED_FIFO, 1.4-2 ms in a CI run on a loaded machine. The median, not the mean: one scheduling
    # stall of the host moves the mean of 50 replies without saying anything about the emulator.
    # 2 % of the RTT keeps the lab's own error under link_measure's 3 % accuracy target it checks.
    excess = result["rtt_median_ms"] - 150
    within = result["rtt_min_ms"] >= 149.9 and 0 <= excess <= 3
    figure(f"RTT median {result['rtt_median_ms']:.2f} ms (min {result['rtt_min_ms']:.2f}, "
           f"avg {result['rtt_avg_ms']:.2f}, max {result['rtt_max_ms']:.2f}), emulator {scheduling}",
           "150 ms, never below, median at most 2 % (3 ms) above", within)
    assert result["loss_pct"] == 0
    assert within, result


def test_bbr_fills_the_link_without_loss(make_lab, figure):
    lab = make_lab(two_site_raw(delay_ms=75, rate_mbit=50, loss=0.0))
    for host in ("near1", "far1"):
        set_sysctls(lab, host, ROOMY_BUFFERS)
    # 5 s of startup omitted: the claim is about the rate BBR reaches, not how fast it gets there.
    # A second run only when the first falls short: a stall of the host (another process, a busy VM
    # neighbour) can only lower a rate, while BBR that cannot fill the link falls short in both.
    # Here 46.5-46.7 Mbit/s in 5 runs; 44.8 once in CI, right after the default lab's teardown.
    rates = []
    for _ in range(2):
        result = iperf3(lab, "near1", "far1", "-C", "bbr", "-t", "15", "-O", "5", duration=20)
        assert result.get("end", {}).get("sender_tcp_congestion") == "bbr", result.get("error", result)
        rates.append(received_mbit(result))
        if rates[-1] >= 45:
            break
    shown = ", then ".join(f"{rate:.1f} Mbit/s ({rate / 50:.0%})" for rate in rates)
    figure(f"BBR {shown}", ">= 45 Mbit/s (90% of 50), a second run if the first falls short", max(rates) >= 45)
    assert max(rates) >= 45, rates


def test_loss_matches_the_configured_probability(make_lab, figure):
    lab = make_lab(two_site_raw(delay_ms=75, rate_mbit=50, loss=0.01))
    # 20,000 counted UDP datagrams at 20 Mbit/s (well under the rate: no queue drops), ~8 s.
    result = iperf3(lab, "near1", "far1", "-u", "-b", "20M", "-l", "1000", "-k", "20000",
                    duration=10)
    summary = result["end"]["sum"]
    measured = summary["lost_packets"] / summary["packets"]
    time.sleep(1.2)  # the emulator's status file is refreshed every second
    counters = emulator_counters(lab, "near->far")
    emulated = counters["drop_loss"] / counters["rx_packets"]
    ok = 0.0075 <= measured <= 0.0125
    figure(f"loss {measured:.3%} of {summary['packets']} datagrams "
           f"(emulator {emulated:.3%} of {counters['rx_packets']})", "1% +- 25% relative", ok)
    assert summary["packets"] >= 10000
    assert counters["drop_queue"] == 0
    assert ok, summary
    assert 0.0075 <= emulated <= 0.0125, counters


def test_cubic_at_one_percent_loss_follows_mathis(make_lab, figure):
    lab = make_lab(two_site_raw(delay_ms=75, rate_mbit=50, loss=0.01))
    result = iperf3(lab, "near1", "far1", "-C", "cubic", "-t", "20", duration=20)
    rate = received_mbit(result)
    # Mathis et al.: throughput <= MSS / RTT * 1.22 / sqrt(p)
    mathis = TCP_PAYLOAD_PER_1500 * 8 / 0.150 * 1.22 / math.sqrt(0.01) / 1e6
    ratio = rate / mathis
    figure(f"CUBIC {rate:.2f} Mbit/s = {ratio:.2f} x Mathis {mathis:.2f}", "0.5x .. 2x",
           0.5 <= ratio <= 2)
    assert result["end"]["sender_tcp_congestion"] == "cubic"
    assert 0.5 <= ratio <= 2, rate


def test_pmtu_black_hole_stalls_1500_and_passes_1400(make_lab, figure):
    lab = make_lab(two_site_raw(delay_ms=75, rate_mbit=50, mtu=1400, icmp_blackhole=True))
    stalled = received_mbit(iperf3(lab, "near1", "far1", "-t", "5", duration=5))
    time.sleep(1.2)
    swallowed = emulator_counters(lab, "near->far")["drop_mtu"]
    for host in ("near1", "far1"):
        lab.run_on(host, ["ip", "link", "set", "eth0", "mtu", "1400"], check=True)
        set_sysctls(lab, host, ROOMY_BUFFERS)
    flowing = received_mbit(iperf3(lab, "near1", "far1", "-C", "bbr", "-t", "8", duration=8,
                                   port=5402))
    time.sleep(1.2)
    counters = emulator_counters(lab, "near->far")
    ok = stalled < 0.1 and flowing >= 20
    figure(f"MTU 1500: {stalled:.2f} Mbit/s ({swallowed} swallowed); MTU 1400: {flowing:.1f}",
           "1500 stalls (< 0.1), 1400 flows (>= 20)", ok)
    assert swallowed > 0 and counters["icmp_frag_needed_sent"] == 0
    assert stalled < 0.1
    assert flowing >= 20


def test_pmtu_discovery_works_when_icmp_is_not_blackholed(make_lab, figure):
    lab = make_lab(two_site_raw(delay_ms=75, rate_mbit=50, mtu=1400, icmp_blackhole=False))
    for host in ("near1", "far1"):
        set_sysctls(lab, host, ROOMY_BUFFERS)
    rate = received_mbit(iperf3(lab, "near1", "far1", "-C", "bbr", "-t", "8", duration=8))
    route = lab.run_on("near1", ["ip", "route", "get", lab.spec.hosts["far1"].address]).stdout
    time.sleep(1.2)
    sent = emulator_counters(lab, "near->far")["icmp_frag_needed_sent"]
    figure(f"MTU 1500 with ICMP: {rate:.1f} Mbit/s, {sent} frag-needed sent",
           "flows (>= 20), PMTU 1400 learned", rate >= 20 and "mtu 1400" in route)
    assert sent > 0
    assert "mtu 1400" in route, route
    assert rate >= 20


def test_emulator_sustains_two_links_loaded_both_ways(make_lab, figure):
    """Aggregate capacity: two 50 Mbit/s links, each loaded in both directions at once."""
    raw = {
        "sites": {"hub": {"lan": "198.19.1.0/24"}, "west": {"lan": "198.19.2.0/24"},
                  "east": {"lan": "198.19.3.0/24"}},
        "links": [{"sites": ["hub", "west"], "delay_ms": 75, "rate_mbit": 50},
                  {"sites": ["hub", "east"], "delay_ms": 100, "rate_mbit": 50}],
        "hosts": {"hub1": {"site": "hub", "address": "198.19.1.10"},
                  "hub2": {"site": "hub", "address": "198.19.1.11"},
                  "west1": {"site": "west", "address": "198.19.2.10"},
                  "east1": {"site": "east", "address": "198.19.3.10"}},
        "seed": 7,
    }
    lab = make_lab(raw)
    flows = [("hub1", "west1", 5411), ("west1", "hub1", 5412),
             ("hub2", "east1", 5413), ("east1", "hub2", 5414)]
    # 1400-byte datagrams at 46 Mbit/s: 47.3 Mbit/s of IP per direction, under each link's rate.
    with ThreadPoolExecutor(len(flows)) as pool:
        futures = [pool.submit(iperf3, lab, client, server, "-u", "-b", "46M", "-l", "1400",
                               "-t", "10", duration=10, port=port)
                   for client, server, port in flows]
        results = [f.result() for f in futures]
    delivered = [received_mbit(r) for r in results]  # receiver side: losses excluded
    total = sum(delivered)
    time.sleep(1.2)
    status = lab.status()
    carried = sum(c.get("tx_bytes", 0) for link in status["links"]
                  for c in link["directions"].values())
    figure(f"aggregate {total:.0f} Mbit/s payload over 4 directions "
           f"({carried * 8 / 10 / 1e6:.0f} Mbit/s IP incl. UDP/IP headers)",
           ">= 100 Mbit/s", total >= 100)
    assert total >= 100, delivered
