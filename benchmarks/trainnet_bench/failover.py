"""Control-plane failover: pure analysis of probe timestamps around a cut of the primary path.

All times are seconds on one clock (the lab's containers share the host kernel's clock, so
`ping -D` stamps, route-poll stamps and the controller's cut time compare directly). Results are
milliseconds. Nothing here touches the lab; benchmarks/control_plane_failover.py collects the data.
"""

from __future__ import annotations

import re
import statistics

from ansible_collections.longhaul.trainnet.plugins.module_utils import control_plane_status

# `ping -D -n`: "[1764550000.123456] 64 bytes from 198.19.255.1: icmp_seq=12 ttl=63 time=151 ms"
_PING_REPLY = re.compile(
    r"^\[(?P<ts>\d+(?:\.\d+)?)\]\s+\d+\s+bytes from\s+\S+:\s+icmp_seq=(?P<seq>\d+)\s+"
    r"ttl=(?P<ttl>\d+)\s+time=(?P<rtt>\d+(?:\.\d+)?)\s*ms"
)


def parse_ping(text: str) -> list[dict]:
    """Replies from `ping -D -n` output: [{recv, send, seq, ttl, rtt_ms}], sorted by arrival.

    send = arrival - RTT: ping on a loaded host sends fewer than 100 probes/s, so seq x interval
    is not the send time.
    """
    replies = []
    for line in text.splitlines():
        m = _PING_REPLY.match(line.strip())
        if not m:
            continue
        recv = float(m["ts"])
        rtt = float(m["rtt"])
        replies.append({"recv": recv, "send": recv - rtt / 1000.0, "seq": int(m["seq"]),
                        "ttl": int(m["ttl"]), "rtt_ms": rtt})
    replies.sort(key=lambda r: r["recv"])
    return replies


def longest_gap(times: list[float], start: float, end: float) -> float | None:
    """Longest interval between consecutive times (sorted) that overlaps [start, end), in ms.

    A gap overlaps the window when it ends after start and begins before end, so the silence that
    a cut causes is counted whole even if it began a little before the cut. None if no time lies
    after start (nothing came back: the gap is unbounded).
    """
    times = sorted(times)
    best = None
    for a, b in zip(times, times[1:]):
        if b > start and a < end:
            gap = (b - a) * 1000.0
            best = gap if best is None or gap > best else best
    if not any(t > start for t in times):
        return None
    return best


def analyze_ping(replies: list[dict], cut: float, restore: float,
                 primary_rtt_max_ms: float) -> dict:
    """Outage figures of one cut from ping replies.

    - reply_gap_ms: longest gap between reply arrivals overlapping [cut, restore) (the issue's
      outage definition);
    - loss_window_ms: send time of the first answered probe sent at/after the cut minus that of
      the last answered probe sent before it;
    - since_cut_ms: first answered send after the cut minus the cut;
    - restore_gap_ms: longest reply gap overlapping [restore, restore + 2 s) (failback loss);
    - back_on_primary_rtt_ms: first probe sent at/after restore answered with an RTT at most
      primary_rtt_max_ms, minus restore (None if none).
    """
    before = [r["send"] for r in replies if r["send"] < cut]
    after = [r["send"] for r in replies if r["send"] >= cut]
    first_after = min(after) if after else None
    last_before = max(before) if before else None
    arrivals = [r["recv"] for r in replies]
    back = [r["send"] for r in replies
            if r["send"] >= restore and r["rtt_ms"] <= primary_rtt_max_ms]
    return {
        "replies": len(replies),
        "reply_gap_ms": longest_gap(arrivals, cut, restore),
        "loss_window_ms": (None if first_after is None or last_before is None
                           else (first_after - last_before) * 1000.0),
        "since_cut_ms": None if first_after is None else (first_after - cut) * 1000.0,
        "restore_gap_ms": longest_gap(arrivals, restore, restore + 2.0),
        "back_on_primary_rtt_ms": (min(back) - restore) * 1000.0 if back else None,
    }


def parse_route_samples(text: str) -> list[tuple[float, str]]:
    """Route-poll lines "<epoch seconds> <dev>" -> [(t, dev)] sorted by time (other lines ignored)."""
    samples = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 2:
            continue
        try:
            samples.append((float(parts[0]), parts[1]))
        except ValueError:
            continue
    samples.sort()
    return samples


def analyze_route(samples: list[tuple[float, str]], cut: float, restore: float,
                  primary_dev: str) -> dict:
    """route_switch_ms: first sample at/after the cut not on primary_dev, minus the cut;
    back_on_primary_ms: first sample at/after restore on primary_dev from which the route stays
    on primary_dev for the rest of the samples, minus restore (None if it never settles)."""
    switch = next((t for t, dev in samples if t >= cut and dev != primary_dev), None)
    settled = None
    for t, dev in reversed([s for s in samples if s[0] >= restore]):
        if dev != primary_dev:
            break
        settled = t
    return {
        "route_switch_ms": None if switch is None or switch >= restore else (switch - cut) * 1000.0,
        "back_on_primary_ms": None if settled is None else (settled - restore) * 1000.0,
    }


def analyze_takeover(replies: list[dict], samples: list[tuple[float, str]], stop: float, end: float,
                     primary_dev: str) -> dict:
    """Figures of a takeover (the primary anchor stopped at `stop`, watched until `end`).

    - outage_ms: longest silence between replies from `stop` on, the silence after the last reply
      up to `end` included (a secondary that answers a moment and then falls silent is an outage,
      not a success); None if nothing answered after `stop`;
    - answered_after: replies to probes sent after `stop`;
    - answering_at_end: a reply arrived in the last second of the window;
    - master_route_switch_ms: first route sample after `stop` on another tunnel (wg-*) than
      primary_dev;
    - master_route_changes: the sequence of route devices seen from `stop` on (e.g. primary,
      wg-use-anchor; an `eth0` in it means the master had no tunnel route to the address).
    """
    times = sorted(r["recv"] for r in replies)
    after = [t for t in times if t > stop]
    outage = None
    if after:
        outage = longest_gap(times, stop, end) or 0.0
        outage = max(outage, (end - after[-1]) * 1000.0)
    changes = []
    for t, dev in samples:
        if t >= stop and (not changes or changes[-1] != dev):
            changes.append(dev)
    switch = next((t for t, dev in samples if t >= stop and dev != primary_dev and dev.startswith("wg-")), None)
    return {
        "outage_ms": outage,
        "answered_after": sum(1 for r in replies if r["send"] > stop),
        "answering_at_end": bool(after) and after[-1] >= end - 1.0,
        "master_route_switch_ms": None if switch is None else (switch - stop) * 1000.0,
        "master_route_changes": changes,
    }


def parse_tcp_log(text: str) -> dict:
    """TCP echo client log: "S <t> <n>" sent, "R <t> <n>" echoed, "E <error>" the end state.

    Returns {sent: {n: t}, echoed: {n: t}, error: str|None, ended: bool}.
    """
    sent, echoed, error, ended = {}, {}, None, False
    for line in text.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) >= 2 and parts[0] == "E":
            ended = True
            error = None if parts[1] == "ok" else " ".join(parts[1:])
        elif len(parts) == 3 and parts[0] in ("S", "R"):
            try:
                t, n = float(parts[1]), int(parts[2])
            except ValueError:
                continue
            (sent if parts[0] == "S" else echoed)[n] = t
    return {"sent": sent, "echoed": echoed, "error": error, "ended": ended}


def analyze_tcp_cut(log: dict, cut: float, restore: float, end: float) -> dict:
    """Per cut: the longest gap between echo arrivals overlapping [cut, restore), and whether
    echoes arrived after the cut and again after the restore (before end)."""
    arrivals = sorted(log["echoed"].values())
    return {
        "echo_gap_ms": longest_gap(arrivals, cut, restore),
        "echoes_during_cut": any(cut < t < restore for t in arrivals),
        "echoes_after_restore": any(restore < t <= end for t in arrivals),
    }


def tcp_survived(log: dict, last_restore: float) -> bool:
    """The connection survived: the client ended without error and echoes came back after the
    last restore."""
    return (log["ended"] and log["error"] is None
            and any(t > last_restore for t in log["echoed"].values()))


def median_of(cuts: list[dict], key: str) -> float | None:
    """Median of one figure over the cuts (cuts where it is None are left out; None if none)."""
    values = [c[key] for c in cuts if c.get(key) is not None]
    return statistics.median(values) if values else None


def route_departures(samples: list[tuple[float, str]], primary_dev: str) -> list[float]:
    """Times at which the route left primary_dev (a sample off primary after one on it)."""
    departures = []
    previous = None
    for t, dev in samples:
        if previous == primary_dev and dev != primary_dev:
            departures.append(t)
        previous = dev
    return departures


# `birdc show bfd sessions` (BIRD 2.0): "169.254.2.1  wg-usw-anchor  Up  10:42:07.123  0.050  0.150"
def bfd_by_interface(text: str) -> dict:
    """{interface: (state, since)} from `birdc show bfd sessions` (the collection's own parser)."""
    return {s["interface"]: (s["state"], s["since"]) for s in control_plane_status.parse_bfd_sessions(text)}


def bfd_flaps(before: dict, after: dict) -> list[str]:
    """Sessions that changed state during a window: not Up at either end, or Up since a new time."""
    return sorted(ifname for ifname in set(before) | set(after)
                  if before.get(ifname, ("gone", ""))[0] != "Up" or before.get(ifname) != after.get(ifname))


def analyze_soak(samples: list[tuple[float, str]], primary_dev: str, replies: list[dict],
                 start: float, end: float, interval_s: float) -> dict:
    """A soak with no cut: every departure of the rendezvous route from the primary is a false
    failover. Loss is replies missing against the probes the interval implies over the window."""
    window = [s for s in samples if start <= s[0] <= end]
    got = sum(1 for r in replies if start <= r["send"] <= end)
    expected = int((end - start) / interval_s)
    return {
        "soak_s": end - start,
        "route_samples": len(window),
        "route_off_primary_samples": sum(1 for _, dev in window if dev != primary_dev),
        "false_failovers": len(route_departures(window, primary_dev)),
        "probes_expected": expected,
        "probe_replies": got,
        "longest_reply_gap_ms": longest_gap([r["recv"] for r in replies], start, end),
    }


_RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
                    r"\s+failed=(?P<failed>\d+)(?:\s+skipped=(?P<skipped>\d+))?")


def parse_recap(text: str) -> dict:
    """{host: {ok, changed, unreachable, failed, skipped}} from ansible-playbook's PLAY RECAP."""
    recap = {}
    for line in text.splitlines():
        m = _RECAP.match(line.strip())
        if m:
            recap[m["host"]] = dict((k, int(m[k] or 0)) for k in ("ok", "changed", "unreachable", "failed", "skipped"))
    return recap


def task_runs(recap: dict) -> int:
    """Task runs of a playbook run, all hosts: each task on each host counts once (ok, skipped or failed)."""
    return sum(h["ok"] + h["skipped"] + h["failed"] for h in recap.values())
