#!/usr/bin/env python3
"""Failover of the control plane on the ocean lab (issue 10 item 3).

Run as root from the checkout, holding the lab lock:
  flock /tmp/trainnet-lab.lock bash -c 'source scripts/bootstrap.sh >/dev/null; \
      python benchmarks/control_plane_failover.py [--cuts 5] [--soak 600] [--takeover]'
Brings the lab up (unless --keep-lab) and deploys playbooks/site.yml twice (--site-runs; the second
run's changed count is recorded), checks every training node reaches the rendezvous address, waits for BFD Up on the
master, starts one long-lived TCP echo client (master -> rendezvous on the primary anchor), then
per cut: ping every 10 ms and poll `ip route get` every 50 ms in the master, cut cn-home<->us-west
with Lab.set_link, restore after CUT_S, observe POST_S. --soak S: S seconds on the default lossy
links with no cut, counting departures of the rendezvous route from the primary and BFD session
flaps (false failovers). --takeover: stops the primary anchor's tunnels and BIRD, measures until
the secondary answers for the rendezvous address, starts them again and measures the way back.
Writes results.{json,md} under --out (benchmarks/results/failover). Brings the lab down unless --keep-lab.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from trainnet_bench import failover as fo
from trainnet_lab.lab import Lab

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "results" / "failover"
LAB = "trainnet-lab"
MASTER = "trainnet-lab-cn-master"
ANCHOR = "trainnet-lab-usw-anchor"
RDV = "198.19.255.1"
RDV_PORT = 29400  # control_plane_rdzv_port (the default the lab keeps)
PORT = 29500
PRE_S, CUT_S, POST_S = 3.0, 5.0, 8.0
PRIMARY_RTT_MAX_MS = 210.0  # primary ~150 ms, relay via us-east ~270 ms

SERVER = r"""
import socket, sys, time
end = time.time() + float(sys.argv[3])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(1); s.settimeout(max(1.0, end - time.time()))
c, _ = s.accept(); c.settimeout(1.0)
while time.time() < end:
    try:
        d = c.recv(4096)
    except socket.timeout:
        continue
    if not d:
        break
    c.sendall(d)
"""

CLIENT = r"""
import os, socket, sys, time, select
end = time.time() + float(sys.argv[3]); out = []; err = "ok"; buf = b""; n = 0; nxt = time.time()
try:
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); c.setblocking(False)
    while time.time() < end and not os.path.exists("/tmp/trainnet-failover-stop"):
        now = time.time()
        if now >= nxt:
            c.sendall(b"%d\n" % n); out.append("S %.6f %d" % (now, n)); n += 1; nxt += 0.05
        r, _, _ = select.select([c], [], [], max(0.0, min(0.05, nxt - time.time())))
        if r:
            d = c.recv(65536)
            if not d:
                err = "EOF"; break
            buf += d; t = time.time()
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1); out.append("R %.6f %s" % (t, line.decode()))
    c.close()
except OSError as e:
    err = "%s:%s" % (type(e).__name__, e)
print("\n".join(out)); print("E " + err.replace(" ", "_"))
"""

ROUTE_POLL = r"""
import subprocess, sys, time
end = time.time() + float(sys.argv[2])
for _ in range(int(float(sys.argv[2]) / 0.05) + 1):
    if time.time() >= end:
        break
    o = subprocess.run(["ip", "-o", "route", "get", sys.argv[1]], capture_output=True, text=True).stdout
    f = o.split()
    print("%.6f %s" % (time.time(), f[f.index("dev") + 1] if "dev" in f else "none"), flush=True)
    time.sleep(0.05)
"""


def sh(argv, limit, check=True):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=limit, cwd=ROOT)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed rc={r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r


def pexec(container, *argv):
    return ["podman", "exec", container, *argv]


def wait_bfd(limit_s=90):
    """Both master sessions Up (bounded); returns the birdc output."""
    end = time.time() + limit_s
    out = ""
    while time.time() < end:
        out = sh(pexec(MASTER, "birdc", "show", "bfd", "sessions"), 15, check=False).stdout
        if len(re.findall(r"\bUp\b", out)) >= 2:
            return out
        time.sleep(1)
    raise RuntimeError(f"BFD not Up within {limit_s} s:\n{out}")


def bfd_summary(out):
    """'2 sessions Up, 50 ms x 3' from birdc's Interval/Timeout columns (seconds)."""
    rows = re.findall(r"\bUp\s+\S+\s+(\d+\.\d+)\s+(\d+\.\d+)", out)
    if not rows:
        return "unknown"
    interval, timeout = (float(x) for x in rows[0])
    return f"{len(rows)} sessions Up, {interval * 1000:.0f} ms x {round(timeout / interval)}"


def route_dev():
    f = sh(pexec(MASTER, "ip", "-o", "route", "get", RDV), 10).stdout.split()
    return f[f.index("dev") + 1]


def wait_route_on(dev, limit_s):
    """Poll (100 ms) until the master routes the rendezvous address through dev; bounded."""
    for _ in range(int(limit_s * 10)):
        if route_dev() == dev:
            return True
        time.sleep(0.1)
    return False


CONTROL_HOSTS = ("trainnet-lab-cn-master", "trainnet-lab-usw-anchor", "trainnet-lab-use-anchor")
TRAINING_NODES = ("trainnet-lab-cn-gpu1", "trainnet-lab-usw-gpu1", "trainnet-lab-usw-gpu2", "trainnet-lab-use-gpu1")


def deploy(results, runs=2):
    """site.yml `runs` times (1 or 2); a second run must change nothing. True when all succeeded."""
    for run in ("first", "second")[:runs]:
        start = time.time()
        dep = sh(["ansible-playbook", "-i", "inventories/lab", "playbooks/site.yml"], 1800, check=False)
        results[f"site_{run}_run"] = {"rc": dep.returncode, "seconds": round(time.time() - start),
                                      "recap": fo.parse_recap(dep.stdout)}
        if dep.returncode != 0:
            results["error"] = f"site.yml ({run} run) failed:\n" + dep.stdout[-4000:] + dep.stderr[-2000:]
            print(results["error"], flush=True)
            return False
    if runs > 1:
        results["second_run_changed"] = sum(h["changed"] for h in results["site_second_run"]["recap"].values())
    return True


def training_nodes_reach_rendezvous():
    """{node: replies of 3 pings} through each node's site gateway."""
    out = {}
    for node in TRAINING_NODES:
        r = sh(pexec(node, "ping", "-n", "-c", "3", "-i", "0.2", "-W", "2", RDV), 20, check=False)
        out[node.replace("trainnet-lab-", "")] = len(fo.parse_ping(
            "\n".join("[0] " + line for line in r.stdout.splitlines())))
    return out


def bfd_raw():
    """`birdc show bfd sessions` per control host (kept in the results: a flap can be read back)."""
    return dict((host, sh(pexec(host, "birdc", "show", "bfd", "sessions"), 15, check=False).stdout)
                for host in CONTROL_HOSTS)


def soak(primary, seconds):
    """No cut: the rendezvous route must stay on the primary and no BFD session may flap."""
    raw_before = bfd_raw()
    before = dict((host, fo.bfd_by_interface(text)) for host, text in raw_before.items())
    count = int(seconds * 100) + 100
    start = time.time()
    ping = subprocess.Popen(pexec(MASTER, "ping", "-D", "-n", "-i", "0.01", "-c", str(count),
                                  "-W", "1", "-w", str(int(seconds) + 2), RDV),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    poll = subprocess.Popen(pexec(MASTER, "python3", "-I", "-c", ROUTE_POLL, RDV, str(seconds)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    p_out, _ = ping.communicate(timeout=seconds + 60)
    r_out, _ = poll.communicate(timeout=seconds + 60)
    end = start + seconds
    raw_after = bfd_raw()
    after = dict((host, fo.bfd_by_interface(text)) for host, text in raw_after.items())
    res = fo.analyze_soak(fo.parse_route_samples(r_out), primary, fo.parse_ping(p_out), start + 1.0, end - 1.0, 0.01)
    res["bfd_flaps"] = dict((host.replace("trainnet-lab-", ""), fo.bfd_flaps(before[host], after[host]))
                            for host in CONTROL_HOSTS)
    res["bfd_sessions"] = sum(len(v) for v in before.values())
    res["bfd_raw"] = {"before": raw_before, "after": raw_after}
    # ping on a loaded host sends fewer than 100 probes/s: its own count is the denominator
    sent = re.search(r"(\d+) packets transmitted", p_out)
    res["probes_sent"] = int(sent.group(1)) if sent else None
    return res


def routing_state():
    """What the master and the secondary route and see for the rendezvous address (kept in the
    results, so a takeover that fails can be read back)."""
    state = {}
    for host in (MASTER, "trainnet-lab-use-anchor"):
        state[host.replace("trainnet-lab-", "")] = {
            "route": sh(pexec(host, "ip", "-o", "route", "get", RDV), 10, check=False).stdout.strip(),
            "bfd": sh(pexec(host, "birdc", "show", "bfd", "sessions"), 15, check=False).stdout,
            "bird_routes": sh(pexec(host, "birdc", "show", "route", "for", RDV, "all"), 15, check=False).stdout,
        }
    return state


def takeover(primary):
    """The primary anchor dies (its tunnels and BIRD stop): the secondary must answer for the
    rendezvous address; then it comes back and the master's route must return to it."""
    total = 20.0
    # Start from a settled state: the last cut's failback done, every master BFD session Up.
    wait_bfd()
    wait_route_on(primary, 30)
    # While the primary lives, the secondary relays to it (its takeover route is only a fallback).
    before = sh(pexec("trainnet-lab-use-anchor", "ip", "-o", "route", "get", RDV), 10).stdout.split()[0]
    state_before = routing_state()
    ping = subprocess.Popen(pexec(MASTER, "ping", "-D", "-n", "-i", "0.01", "-c", str(int(total * 100) + 100),
                                  "-W", "1", "-w", str(int(total) + 2), RDV),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    poll = subprocess.Popen(pexec(MASTER, "python3", "-I", "-c", ROUTE_POLL, RDV, str(total)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3.0)
    stop = time.time()
    sh(pexec(ANCHOR, "systemctl", "stop", "bird.service", "trainnet-wg-*.service"), 30)
    p_out, _ = ping.communicate(timeout=total + 30)
    r_out, _ = poll.communicate(timeout=total + 30)
    window_end = time.time()
    res = fo.analyze_takeover(fo.parse_ping(p_out), fo.parse_route_samples(r_out), stop, window_end, primary)
    # The secondary's standby store (training_job) answers a new rendezvous: a key set and read back
    # from a training node behind the master, through the address the agents use.
    probe = sh(pexec("trainnet-lab-cn-gpu1", "sh", "-c",
                     'set -a; . /etc/trainnet/training_job.env; set +a; "$TRAINNET_PYTHON" "$TRAINNET_STORE_CLIENT" --check '
                     '--host %s --port %d --timeout-sec 20' % (RDV, RDV_PORT)), 90, check=False)
    res["store_answered"] = probe.returncode == 0
    res["store_check"] = (probe.stdout + probe.stderr).strip()[-500:]
    res.update({"secondary_route_before": before,
                "master_route": route_dev(),
                "secondary_route": sh(pexec("trainnet-lab-use-anchor", "ip", "-o", "route", "get", RDV),
                                      10).stdout.split()[0],
                "state_before": state_before,
                "state_after": routing_state()})
    start = time.time()
    sh(pexec(ANCHOR, "bash", "-c", "systemctl start bird.service; for f in /etc/trainnet/wireguard/*.conf; do "
             "systemctl start trainnet-wg-$(basename $f .conf).service; done"), 60)
    back = None
    for _ in range(600):  # bounded: 60 s at 100 ms
        if route_dev() == primary:
            back = time.time() - start
            break
        time.sleep(0.1)
    res["back_on_primary_ms"] = None if back is None else back * 1000.0
    return res


def one_cut(lab, primary, i):
    total = PRE_S + CUT_S + POST_S
    count = int(total * 100) + 200
    ping = subprocess.Popen(pexec(MASTER, "ping", "-D", "-n", "-i", "0.01", "-c", str(count), "-W", "1",
                                  "-w", str(int(total) + 2), RDV),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    poll = subprocess.Popen(pexec(MASTER, "python3", "-I", "-c", ROUTE_POLL, RDV, str(total)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(PRE_S)
    cut = time.time()
    lab.set_link("cn-home", "us-west", down=True)
    time.sleep(CUT_S)
    restore = time.time()
    lab.set_link("cn-home", "us-west", down=False)
    p_out, p_err = ping.communicate(timeout=total + 20)
    r_out, _ = poll.communicate(timeout=total + 20)
    replies = fo.parse_ping(p_out)
    res = {"cut": i, "cut_time": cut, "restore_time": restore}
    res.update(fo.analyze_ping(replies, cut, restore, PRIMARY_RTT_MAX_MS))
    res.update(fo.analyze_route(fo.parse_route_samples(r_out), cut, restore, primary))
    if not replies:
        res["ping_error"] = p_err[-500:]
    return res


def fmt(v):
    return "-" if v is None else (f"{v:.0f}" if isinstance(v, float) else str(v))


def write(results, out):
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    keys = ["reply_gap_ms", "loss_window_ms", "since_cut_ms", "route_switch_ms", "back_on_primary_ms",
            "back_on_primary_rtt_ms", "restore_gap_ms", "echo_gap_ms"]
    lines = ["# Control-plane failover on the ocean lab", "",
             f"Command: `{results['command']}`  ", f"Date: {results['date']}; BFD "
             f"{results.get('bfd', '?')}; cut cn-home<->us-west {CUT_S:.0f} s, ping every 10 ms to "
             f"{RDV} from cn-master; TCP echo every 50 ms to {RDV}:{PORT}.", "",
             "| cut | " + " | ".join(keys) + " |", "|" + "---|" * (len(keys) + 1)]
    for c in results["cuts"]:
        lines.append(f"| {c['cut']} | " + " | ".join(fmt(c.get(k)) for k in keys) + " |")
    lines.append("| **median** | " + " | ".join(fmt(results["median"].get(k)) for k in keys) + " |")
    t = results.get("tcp", {})
    lines += ["", f"TCP connection survived: **{t.get('survived')}** (error: {t.get('error')}; "
              f"{t.get('sent')} lines sent, {t.get('echoed')} echoed).", ""]
    if "second_run_changed" in results:
        lines += [f"site.yml: first run {results['site_first_run']['seconds']} s, second run "
                  f"{results['site_second_run']['seconds']} s with **{results['second_run_changed']} changed**.", ""]
    if "rendezvous_from_training_nodes" in results:
        lines += ["Rendezvous answers (of 3 pings) from each training node through its site's control host: "
                  + ", ".join(f"{k} {v}" for k, v in results["rendezvous_from_training_nodes"].items()) + ".", ""]
    if "soak" in results:
        k = results["soak"]
        flaps = sum(len(v) for v in k["bfd_flaps"].values())
        lines += [f"Soak: {k['soak_s']:.0f} s on the default lossy links, no cut: **{k['false_failovers']} false "
                  f"failovers** (rendezvous route samples off the primary: {k['route_off_primary_samples']} of "
                  f"{k['route_samples']}), BFD flaps {flaps} over {k['bfd_sessions']} sessions, "
                  f"{k['probe_replies']} of {k.get('probes_sent') or k['probes_expected']} probes answered, longest reply gap "
                  f"{fmt(k['longest_reply_gap_ms'])} ms.", ""]
    if "takeover" in results:
        k = results["takeover"]
        lines += [f"Primary anchor down (tunnels and BIRD stopped): outage {fmt(k['outage_ms'])} ms until "
                  f"{RDV} answered from the secondary (master route {k['master_route']}, secondary route "
                  f"{k['secondary_route']}); back on the primary {fmt(k['back_on_primary_ms'])} ms after it "
                  "restarted.", ""]
    (out / "results.md").write_text("\n".join(lines))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cuts", type=int, default=5)
    ap.add_argument("--keep-lab", action="store_true", help="do not run lab up/down (lab already up)")
    ap.add_argument("--render", action="store_true", help="only rewrite results.md from results.json")
    ap.add_argument("--soak", type=float, default=0.0, help="seconds of soak with no cut (0: none)")
    ap.add_argument("--takeover", action="store_true", help="also stop the primary anchor and measure the takeover")
    ap.add_argument("--out", type=Path, default=OUT, help="directory for results.json and results.md")
    ap.add_argument("--site-runs", type=int, choices=(0, 1, 2), default=2,
                    help="site.yml runs before measuring (2: the second must report 0 changed; "
                         "0: the lab is already deployed)")
    args = ap.parse_args()
    if args.render:
        saved = json.loads((args.out / "results.json").read_text())
        saved["bfd"] = bfd_summary(saved.get("bfd_sessions", ""))
        write(saved, args.out)
        return 0
    results = {"command": " ".join(["python", "benchmarks/control_plane_failover.py", *sys.argv[1:]]),
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cuts": [], "median": {}}
    try:
        if not args.keep_lab:
            print("lab up", flush=True)
            sh([sys.executable, "lab/lab.py", "up"], 900)
        if args.site_runs:
            print(f"deploy: site.yml x{args.site_runs}", flush=True)
            if not deploy(results, args.site_runs):
                return 1
        results["bfd_sessions"] = wait_bfd()
        results["rendezvous_from_training_nodes"] = training_nodes_reach_rendezvous()
        results["bfd"] = bfd_summary(results["bfd_sessions"])
        lab = Lab.from_state(LAB)
        primary = route_dev()
        results["primary_dev"] = primary
        life = args.cuts * (PRE_S + CUT_S + POST_S + 15) + 30
        server = subprocess.Popen(pexec(ANCHOR, "python3", "-I", "-c", SERVER, RDV, str(PORT), str(life + 20)),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        sh(pexec(MASTER, "rm", "-f", "/tmp/trainnet-failover-stop"), 10)
        time.sleep(1)
        client = subprocess.Popen(pexec(MASTER, "python3", "-I", "-c", CLIENT, RDV, str(PORT), str(life)),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(2)
        for i in range(args.cuts):
            print(f"cut {i}", flush=True)
            if route_dev() != primary:  # previous failback not yet done: give it time (bounded)
                time.sleep(5)
            results["cuts"].append(one_cut(lab, primary, i))
            print(json.dumps(results["cuts"][-1]), flush=True)
        # The client stops at this file (its output would be lost if podman exec were killed).
        sh(pexec(MASTER, "touch", "/tmp/trainnet-failover-stop"), 10)
        c_out, c_err = client.communicate(timeout=30)
        server.communicate(timeout=30)  # ends at the client's EOF
        log = fo.parse_tcp_log(c_out)
        ends = [c["cut_time"] for c in results["cuts"][1:]] + [time.time()]
        for c, end in zip(results["cuts"], ends):
            c.update(fo.analyze_tcp_cut(log, c["cut_time"], c["restore_time"], end))
        last_restore = results["cuts"][-1]["restore_time"] if results["cuts"] else 0
        results["tcp"] = {"survived": fo.tcp_survived(log, last_restore), "error": log["error"],
                          "ended": log["ended"], "sent": len(log["sent"]), "echoed": len(log["echoed"]),
                          "stderr": c_err[-500:]}
        for k in ["reply_gap_ms", "loss_window_ms", "since_cut_ms", "route_switch_ms", "back_on_primary_ms",
                  "back_on_primary_rtt_ms", "restore_gap_ms", "echo_gap_ms"]:
            results["median"][k] = fo.median_of(results["cuts"], k)
        if args.soak > 0:
            wait_route_on(primary, 10)  # the last failback settles first
            print(f"soak {args.soak:.0f} s", flush=True)
            results["soak"] = soak(primary, args.soak)
        if args.takeover:
            print("takeover", flush=True)
            results["takeover"] = takeover(primary)
        return 0
    finally:
        try:
            Lab.from_state(LAB).set_link("cn-home", "us-west", down=False)
        except Exception:  # noqa: BLE001 - lab may be down already
            pass
        write(results, args.out)
        if not args.keep_lab:
            print("lab down", flush=True)
            sh([sys.executable, "lab/lab.py", "down"], 600, check=False)


if __name__ == "__main__":
    sys.exit(main())
