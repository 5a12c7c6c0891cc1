"""Drive one benchmark run on the lab: untuned phase, data_plane role, tuned phase, report.

The lab is a two-site container lab named trainnet-labbench (198.18.200.0/24 and
198.18.201.0/24). Every scenario only changes the emulator's link (Lab.up with a new link
restarts the emulator in place; hosts and their tuning stay). The lab is always taken down at
the end, also on errors and on SIGTERM/SIGINT.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import shutil
import signal
import subprocess
import time
from pathlib import Path

# The collection (iperf3 and ping parsers) and the lab, imported as installed packages, not copied:
# scripts/bootstrap.sh installs trainnet_lab and makes ansible_collections importable in .venv.
from ansible_collections.longhaul.trainnet.plugins.module_utils import link_measure as LINK_METRICS
from trainnet_lab.lab import Lab, LabError
from trainnet_lab.spec import build_spec

from . import BENCH_LAB_NAME, SCHEMA_VERSION
from .profiles import HIGHEST_BDP_LINK, Scenario, plan
from .report import render_markdown, summarize_run
from .svg import write_charts

REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO / "benchmarks"
INVENTORY = BENCH_DIR / "inventory"
PLAYBOOK = BENCH_DIR / "tune.yml"
TFO_PROBE = importlib.import_module(__package__ + ".tfo_probe")  # the collection's tfo.py

CLIENT, SERVER = "near1", "far1"
SITES = {"near": {"lan": "198.18.200.0/24"}, "far": {"lan": "198.18.201.0/24"}}
HOSTS = {CLIENT: {"site": "near", "address": "198.18.200.10"},
         SERVER: {"site": "far", "address": "198.18.201.10"}}
IPERF3_PORT = 5201
TUNED_CC = "bbr"  # data_plane_congestion_control's default
TFO_PORT = 7007
HOST_SYSCTLS = ("net.ipv4.tcp_congestion_control", "net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem",
                "net.ipv4.tcp_fastopen", "net.ipv4.tcp_mtu_probing",
                "net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_no_metrics_save",
                "net.ipv4.tcp_base_mss")


def raw_lab(link: dict, seed: int) -> dict:
    return {"sites": SITES, "hosts": HOSTS,
            "links": [{"sites": ["near", "far"], **link}], "seed": seed}


class Stop(Exception):
    """SIGTERM/SIGINT: stop measuring, tear down."""


class Runner:
    def __init__(self, out_dir: Path, *, smoke: bool, reps: int, duration: int, seed: int,
                 tfo_count: int = 5, log=print):
        self.out_dir = out_dir
        self.smoke = smoke
        self.reps = reps
        self.duration = duration
        self.seed = seed
        self.tfo_count = tfo_count
        self.log = log
        self.scenarios: list[Scenario] = plan(smoke)
        self.lab: Lab | None = None
        self.results: dict = {}

    # --- lab -------------------------------------------------------------------------------------

    def set_link(self, scenario: Scenario, index: int) -> None:
        """Bring the lab up (first call) or restart only its emulator with this link."""
        seed = self.seed + index
        spec = build_spec(raw_lab(scenario.link, seed), name=BENCH_LAB_NAME, host_kind="container")
        lab = Lab(spec)
        lab.up(log=lambda message: self.log(f"  lab: {message}"))
        self.lab = lab
        # Let the fresh emulator's status file appear before the first counters are read.
        time.sleep(1.2)

    def teardown(self) -> list[str]:
        lab = self.lab
        if lab is None:
            try:
                lab = Lab.from_state(BENCH_LAB_NAME)
            except LabError:
                return []
        self.log("tearing the lab down")
        left = lab.down(log=lambda message: self.log(f"  lab: {message}"))
        self.lab = None
        return left

    def run_on(self, host: str, argv: list[str], timeout: float = 60, check: bool = False):
        return self.lab.run_on(host, argv, timeout=timeout, check=check)

    def address(self, host: str) -> str:
        return self.lab.spec.hosts[host].address

    def counters(self) -> dict:
        status = self.lab.status()
        result = {key: dict(value) for link in status.get("links", [])
                  for key, value in link["directions"].items()}
        for router in status.get("routers", []):
            tun = router.get("tun") or {}
            result[f"tun-{router['site']}"] = {"overflow_drops": tun.get("overflow_drops") or 0}
        return result

    @staticmethod
    def counter_delta(before: dict, after: dict) -> dict:
        keys = ("rx_packets", "tx_packets", "drop_loss", "drop_queue", "drop_mtu",
                "icmp_frag_needed_sent", "overflow_drops")
        delta = {}
        for direction, values in after.items():
            old = before.get(direction, {})
            delta[direction] = {k: values[k] - old.get(k, 0) for k in keys
                                if isinstance(values.get(k), (int, float))}
        return delta

    def flush_tcp_metrics(self) -> None:
        """Each sample starts clean: no cached ssthresh/cwnd (or TFO cookie) from the previous one."""
        for host in (CLIENT, SERVER):
            self.run_on(host, ["ip", "tcp_metrics", "flush", "all"], timeout=15)

    def host_conditions(self, host: str) -> dict:
        values = {}
        out = self.run_on(host, ["sysctl", "-e", *HOST_SYSCTLS], timeout=15).stdout
        for line in out.splitlines():
            key, _sep, value = line.partition(" = ")
            values[key.strip()] = " ".join(value.split())
        link = self.run_on(host, ["ip", "-j", "link", "show", "eth0"], timeout=15).stdout
        try:
            info = json.loads(link)[0]
            values["eth0_mtu"] = info.get("mtu")
            values["eth0_qdisc"] = info.get("qdisc")
        except (ValueError, IndexError):
            values["eth0_mtu"] = None
        return values

    # --- measurements ----------------------------------------------------------------------------

    def iperf3(self, scenario: Scenario) -> dict:
        duration = scenario.duration_s or self.duration
        omit = min(scenario.omit_s, max(0, duration - 2))
        deadline = duration + omit + 25
        argv = ["timeout", str(deadline), "iperf3", "-c", self.address(SERVER),
                "-p", str(IPERF3_PORT), "-J", "-t", str(duration), "--connect-timeout", "3000"]
        if omit:
            argv += ["-O", str(omit)]
        argv += scenario.iperf3_args
        with self.lab.serving(SERVER, ["iperf3", "-s", "-1", "-p", str(IPERF3_PORT)], IPERF3_PORT,
                              seconds=deadline + 10):
            completed = self.run_on(CLIENT, argv, timeout=deadline + 15)
        parsed, error = LINK_METRICS.parse_iperf3(completed.stdout)
        sample = {"duration_s": duration, "omit_s": omit, "argv": argv[2:]}
        if parsed:
            sample.update(parsed)
        else:
            # A stalled flow (the PMTU black hole) may end without a usable JSON: it carried 0.
            sample.update(throughput_mbps=0.0 if scenario.kind == "pmtu" else None,
                          retransmit_pct=None, error=error or completed.stderr.strip()[:300])
        return sample

    def ping_rtt(self) -> float | None:
        result = self.run_on(CLIENT, ["ping", "-n", "-q", "-c", "5", "-i", "0.2", "-W", "2",
                                      self.address(SERVER)], timeout=30)
        parsed = LINK_METRICS.parse_ping_summary(result.stdout) or {}
        return (parsed.get("rtt_ms") or {}).get("avg")

    def tfo(self, rep: int) -> list[dict]:
        seconds = 10 + self.tfo_count * 2
        samples = []
        server = self.address(SERVER)
        with self.lab.serving(SERVER, TFO_PROBE.server_argv(server, TFO_PORT, seconds), TFO_PORT,
                              seconds=seconds + 5):
            out = self.run_on(CLIENT, ["timeout", str(seconds),
                                       *TFO_PROBE.client_argv(server, TFO_PORT, self.tfo_count)],
                              timeout=seconds + 10).stdout
            for line in out.splitlines():
                try:
                    samples.append({"rep": rep, **json.loads(line)})
                except ValueError:
                    continue
        return samples

    def measure_scenario(self, scenario: Scenario, index: int, phase: str) -> dict:
        self.log(f"[{phase}] {scenario.title}")
        self.set_link(scenario, index)
        entry = {"seed": self.seed + index, "samples": [], "load_before": os.getloadavg()}
        if scenario.kind == "tfo":
            entry["ping_rtt_ms"] = self.ping_rtt()
            for rep in range(self.reps):
                self.flush_tcp_metrics()
                entry["samples"] += self.tfo(rep)
            timed = [s["ttfb_ms"] for s in entry["samples"]
                     if not s.get("priming") and s.get("ttfb_ms") is not None]
            self.log(f"  TTFB of repeat connections: {sorted(timed)} ms "
                     f"(ping RTT {entry['ping_rtt_ms']} ms)")
        else:
            for rep in range(self.reps):
                self.flush_tcp_metrics()
                before = self.counters()
                sample = self.iperf3(scenario)
                time.sleep(1.2)  # the emulator's status file is refreshed every second
                sample["emulator"] = self.counter_delta(before, self.counters())
                sample["rep"] = rep
                sample["load"] = os.getloadavg()[0]
                entry["samples"].append(sample)
                self.log(f"  rep {rep + 1}/{self.reps}: {sample.get('throughput_mbps')} Mbit/s, "
                         f"retrans {sample.get('retransmit_pct')}%, "
                         f"cc {sample.get('congestion_control')}"
                         + (f", error {sample['error']}" if sample.get("error") else ""))
        entry["load_after"] = os.getloadavg()
        return entry

    def measure_phase(self, phase: str) -> dict:
        results = {}
        for index, scenario in enumerate(self.scenarios):
            if STOP["flag"]:
                raise Stop()
            results[scenario.id] = self.measure_scenario(scenario, index, phase)
        return results

    def apply_role(self, extra_vars: dict | None = None) -> dict:
        """Run the real data_plane role on both lab containers (containers.podman.podman)."""
        playbook = shutil.which("ansible-playbook") or str(REPO / ".venv" / "bin" / "ansible-playbook")
        env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), LANG="C.UTF-8",
                   ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
        env.setdefault("CONTAINERS_CONF", str(REPO / "lab" / "containers.conf"))
        argv = [playbook, "-i", str(INVENTORY), str(PLAYBOOK)]
        if extra_vars:
            argv += ["-e", json.dumps(extra_vars)]
        self.log("applying the data_plane role: " + " ".join(argv))
        started = time.monotonic()
        completed = subprocess.run(argv, cwd=str(REPO), env=env, capture_output=True, text=True,
                                   timeout=900, check=False)
        with open(self.out_dir / "tune.log", "a") as log_file:
            log_file.write(completed.stdout + completed.stderr)
        elapsed = round(time.monotonic() - started, 1)
        recap = completed.stdout[completed.stdout.rfind("PLAY RECAP"):].strip()
        if completed.returncode != 0:
            raise RuntimeError(f"ansible-playbook failed ({completed.returncode}); see "
                               f"{self.out_dir / 'tune.log'}:\n{recap or completed.stderr[-2000:]}")
        self.log(f"  role applied in {elapsed} s")
        return {"argv": argv, "seconds": elapsed, "recap": recap}

    def tune(self) -> dict:
        """Apply the role, then check the hosts really run its congestion control.

        The role skips (with a warning) a default congestion control the kernel refuses in a
        namespace: net.ipv4.tcp_allowed_congestion_control, a global, must list it. The tuned
        phase means nothing without BBR, so the run stops with the evidence instead.
        """
        result = self.apply_role()
        ccs = {h: self.host_conditions(h).get("net.ipv4.tcp_congestion_control")
               for h in (CLIENT, SERVER)}
        allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text().strip()
        result.update(host_congestion_control=ccs, allowed_congestion_control=allowed)
        if set(ccs.values()) != {TUNED_CC}:
            raise RuntimeError(f"after the data_plane role the hosts run {ccs}, not {TUNED_CC}; "
                               f"the host's tcp_allowed_congestion_control is '{allowed}' (another "
                               f"run changing it?); see {self.out_dir / 'tune.log'}")
        return result

    # --- the run ---------------------------------------------------------------------------------

    def conditions(self) -> dict:
        def read(path):
            try:
                return Path(path).read_text().strip()
            except OSError:
                return None
        iperf3 = subprocess.run(["iperf3", "--version"], capture_output=True, text=True,
                                check=False).stdout.splitlines()
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=False).stdout.strip()
        return {
            "kernel": platform.release(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "load_at_start": os.getloadavg(),
            "available_congestion_control": read("/proc/sys/net/ipv4/tcp_available_congestion_control"),
            "allowed_congestion_control": read("/proc/sys/net/ipv4/tcp_allowed_congestion_control"),
            "init_netns_congestion_control": read("/proc/sys/net/ipv4/tcp_congestion_control"),
            "iperf3": iperf3[0] if iperf3 else None,
            "python": platform.python_version(),
            "git_commit": commit or None,
            "lab": {"name": BENCH_LAB_NAME, "host_kind": "container", "sites": SITES,
                    "hosts": HOSTS, "client": CLIENT, "server": SERVER,
                    "emulator": "lab/trainnet_lab/emulator.py: Bernoulli loss per packet and "
                                "direction, drop-tail queue of one BDP (queue_bytes 0), "
                                "serialisation at rate_mbit, fixed one-way delay, no jitter"},
            "seed_base": self.seed,
            "reps": self.reps,
            "duration_s": self.duration,
            "tfo_repeat_connections": self.tfo_count,
            "data_plane_links": [HIGHEST_BDP_LINK],
            "tcp_metrics_flushed_before_each_sample": True,
        }

    def run(self) -> dict:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        started = time.time()
        data = {"schema": SCHEMA_VERSION, "mode": "smoke" if self.smoke else "full",
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                "conditions": self.conditions(),
                "scenarios": [s.to_dict() for s in self.scenarios],
                "phases": {}, "hosts": {}}
        try:
            leftovers = self.teardown()  # a previous run killed mid-way may have left its lab
            if leftovers:
                raise RuntimeError(f"a previous {BENCH_LAB_NAME} could not be removed: {leftovers}")
            data["phases"]["untuned"] = {}
            self.set_link(self.scenarios[0], 0)
            data["hosts"]["untuned"] = {h: self.host_conditions(h) for h in (CLIENT, SERVER)}
            data["phases"]["untuned"] = self.measure_phase("untuned")
            data["tune"] = self.tune()
            data["hosts"]["tuned"] = {h: self.host_conditions(h) for h in (CLIENT, SERVER)}
            data["phases"]["tuned"] = self.measure_phase("tuned")
        except Stop:
            data["interrupted"] = "stopped by a signal"
            raise
        except Exception as error:  # keep what was measured, then re-raise
            data["error"] = f"{type(error).__name__}: {error}"
            raise
        finally:
            try:
                data["leftovers_after_down"] = self.teardown()
            finally:
                data["finished"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
                data["seconds"] = round(time.time() - started, 1)
                data["conditions"]["load_at_end"] = os.getloadavg()
                data["summary"] = summarize_run(data)
                write_outputs(data, self.out_dir)
        return data


STOP = {"flag": False}


def install_signal_handlers() -> None:
    def handler(signum, _frame):
        STOP["flag"] = True
        raise Stop(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def write_outputs(data: dict, out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / "results.json", out_dir / "results.md"]
    written[0].write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    written[1].write_text(render_markdown(data))
    written += write_charts(data, out_dir)
    return written
