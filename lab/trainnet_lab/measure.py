"""Measurements across the lab's WAN links (ping + iperf3) and before/after reports.

One host per site carries the probes (a GPU node where the site has one), one link at a time so
links do not compete for the emulator or the CPU. Every command is bounded in time.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

from .lab import Lab
from .spec import LabSpec

IPERF3_BASE_PORT = 5301
PING_COUNT = 10
PING_INTERVAL = 0.2
SERVER_GRACE = 30          # seconds an iperf3 server may outlive its test before `timeout` ends it
STALLED_BELOW_MBIT = 0.1   # a flow under this rate did not get through (e.g. a PMTU black hole)

_PING_RTT = re.compile(r"= ([\d.]+)/([\d.]+)/([\d.]+)/([\d.]+) ms")
_PING_LOSS = re.compile(r"([\d.]+)% packet loss")


def probe_hosts(spec: LabSpec) -> dict[str, str]:
    """The host that measures for each site: its first GPU node, else its first host."""
    chosen = {}
    for site in spec.sites:
        members = sorted(spec.hosts_in(site), key=lambda h: ("gpu_nodes" not in h.groups, h.name))
        if members:
            chosen[site] = members[0].name
    return chosen


def parse_ping(output: str) -> dict:
    rtt = _PING_RTT.search(output)
    loss = _PING_LOSS.search(output)
    return {
        "rtt_min_ms": float(rtt.group(1)) if rtt else None,
        "rtt_avg_ms": float(rtt.group(2)) if rtt else None,
        "rtt_max_ms": float(rtt.group(3)) if rtt else None,
        "loss_pct": float(loss.group(1)) if loss else None,
    }


def parse_iperf3(output: str) -> dict:
    """Throughput (receiver side), retransmissions and congestion control of an iperf3 -J run."""
    try:
        data = json.loads(output)
    except ValueError:
        return {"error": (output.strip().splitlines() or ["no output"])[-1]}
    end = data.get("end", {})
    received = end.get("sum_received", {}).get("bits_per_second")
    result = {
        "throughput_mbit": round(received / 1e6, 3) if received is not None else None,
        "retransmits": end.get("sum_sent", {}).get("retransmits"),
        "congestion_control": end.get("sender_tcp_congestion"),
        "bytes_received": end.get("sum_received", {}).get("bytes"),
    }
    if data.get("error"):
        result["error"] = data["error"]
    return result


def ping(lab: Lab, source: str, address: str, *, count: int = PING_COUNT,
         interval: float = PING_INTERVAL) -> dict:
    # No -w deadline: with one, ping stops at the count-th reply and reports the echo requests
    # still in flight as lost. -W bounds the wait for the last replies.
    result = lab.run_on(source, ["ping", "-n", "-q", "-c", str(count), "-i", str(interval),
                                 "-W", "2", address], timeout=count * interval + 20)
    return parse_ping(result.stdout)


def _wait_listening(lab: Lab, host: str, port: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listing = lab.run_on(host, ["ss", "-Hltn", f"sport = :{port}"], timeout=15).stdout
        if listing.strip():
            return True
        time.sleep(0.2)
    return False


def iperf3(lab: Lab, client: str, server: str, *, duration: int = 10, port: int = IPERF3_BASE_PORT,
           extra: tuple[str, ...] = ()) -> dict:
    """One bounded TCP iperf3 test from client to server; stalls are reported, not hung on."""
    address = lab.spec.hosts[server].address
    server_process = lab.popen_on(
        server, ["timeout", str(duration + SERVER_GRACE), "iperf3", "-s", "-1", "-p", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not _wait_listening(lab, server, port):
            return {"error": f"iperf3 server on {server}:{port} did not start"}
        argv = ["timeout", str(duration + 20), "iperf3", "-c", address, "-p", str(port),
                "-t", str(duration), "-J", "--connect-timeout", "5000", *extra]
        completed = lab.run_on(client, argv, timeout=duration + 40)
        result = parse_iperf3(completed.stdout)
        if completed.returncode == 124:
            result.setdefault("error", f"no result within {duration + 20} s")
        throughput = result.get("throughput_mbit")
        result["stalled"] = throughput is None or throughput < STALLED_BELOW_MBIT
        return result
    finally:
        try:
            server_process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server_process.kill()
            server_process.wait(timeout=5)


def measure_lab(lab: Lab, *, duration: int = 10, label: str = "measurement", log=print) -> dict:
    spec = lab.spec
    probes = probe_hosts(spec)
    report = {"label": label, "lab": spec.name, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "duration_s": duration, "links": []}
    for index, link in enumerate(spec.links):
        a, b = link.sites
        if a not in probes or b not in probes:
            continue
        client, server = probes[a], probes[b]
        log(f"[{label}] {link.name}: ping and {duration} s iperf3 {client} -> {server} ...")
        entry = {
            "link": link.name, "client": client, "server": server,
            "configured": {"rtt_ms": link.rtt_ms, "rate_mbit": link.rate_mbit, "loss": link.loss,
                           "mtu": link.mtu, "icmp_blackhole": link.icmp_blackhole},
            "ping": ping(lab, client, spec.hosts[server].address),
            "iperf3": iperf3(lab, client, server, duration=duration,
                             port=IPERF3_BASE_PORT + index),
        }
        flow = entry["iperf3"]
        log(f"    RTT {entry['ping']['rtt_avg_ms']} ms, "
            f"{'STALLED' if flow.get('stalled') else flow.get('throughput_mbit')} Mbit/s, "
            f"{flow.get('retransmits')} retransmits ({flow.get('congestion_control')})"
            + (f", error: {flow['error']}" if flow.get("error") else ""))
        report["links"].append(entry)
    return report


def _number(value, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _throughput(flow: dict) -> str:
    if flow.get("stalled"):
        return "0 (stalled)"
    return _number(flow.get("throughput_mbit"))


def compare_markdown(before: dict, after: dict) -> str:
    """A Markdown before/after table, one row per WAN link."""
    after_by_link = {entry["link"]: entry for entry in after["links"]}
    lines = [
        "| link | configured | throughput before (Mbit/s) | throughput after (Mbit/s) "
        "| RTT before (ms) | RTT after (ms) | retransmits before | retransmits after "
        "| congestion control |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for entry in before["links"]:
        later = after_by_link.get(entry["link"])
        if later is None:
            continue
        c = entry["configured"]
        configured = (f"{c['rate_mbit']:g} Mbit/s, RTT {c['rtt_ms']:g} ms, loss {c['loss'] * 100:g}%, "
                      f"MTU {c['mtu']}{' black hole' if c['icmp_blackhole'] else ''}")
        b_flow, a_flow = entry["iperf3"], later["iperf3"]
        lines.append(
            f"| {entry['link']} ({entry['client']} -> {entry['server']}) | {configured} "
            f"| {_throughput(b_flow)} | {_throughput(a_flow)} "
            f"| {_number(entry['ping']['rtt_avg_ms'])} | {_number(later['ping']['rtt_avg_ms'])} "
            f"| {b_flow.get('retransmits', '-')} | {a_flow.get('retransmits', '-')} "
            f"| {b_flow.get('congestion_control') or '-'} -> {a_flow.get('congestion_control') or '-'} |")
    return "\n".join(lines)


def compare_json(before: dict, after: dict) -> dict:
    after_by_link = {entry["link"]: entry for entry in after["links"]}
    rows = []
    for entry in before["links"]:
        later = after_by_link.get(entry["link"])
        if later is not None:
            rows.append({"link": entry["link"], "configured": entry["configured"],
                         "before": {"ping": entry["ping"], "iperf3": entry["iperf3"]},
                         "after": {"ping": later["ping"], "iperf3": later["iperf3"]}})
    return {"before_time": before.get("time"), "after_time": after.get("time"), "links": rows}
