"""Build, inspect and remove a lab.

What `up` creates, per site: a router namespace <lab>-rt-<site> holding the LAN bridge `br-lan`
(with the site's first address) and, once the emulator runs, the TUN `wan0` with routes to the
other sites' LANs. Per host: a namespace <lab>-<host> whose `eth0` is a veth into the bridge, with
the default route via the site router; for container labs, a podman container <lab>-<host> (systemd
as PID 1) joined to that namespace. One emulator process carries the WAN between all routers.

Every created object is recorded in <state root>/<lab>/state.json the moment it exists, so `down`
removes exactly those (after a failed `up` too) and `up` can tell its own objects from foreign ones.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ansible_collections.longhaul.trainnet.plugins.plugin_utils.nsenter import inspect_argv, is_current, nsenter_argv, parse_target

from . import STATE_ROOT, netns, object_store
from .netns import CommandError, ip, ip_batch
from .emulator import TUN_NAME
from .spec import LAN_INTERFACE, LabSpec, SpecError, validate_runtime_settings

LAB_DIR = Path(__file__).resolve().parent.parent          # lab/
CONTAINERS_CONF = LAB_DIR / "containers.conf"
BRIDGE = "br-lan"
CONTAINER_LABEL = "trainnet.lab"
EMULATOR_MODULE = "trainnet_lab.emulator"
EMULATOR_READY_TIMEOUT = 15.0
EMULATOR_STALE_AFTER = 5.0        # seconds without a status update before it counts as hung
SYSTEMD_BOOT_TIMEOUT = 120
CONTROL_TIMEOUT = 5.0             # seconds for the emulator to acknowledge a link change
# PyTorch (CPU build) installed once on the host by scripts/bootstrap.sh and mounted read-only into
# every container: the training_job role's lab inventory points its Python path here.
HOST_TORCH_DIR = Path("/var/lib/trainnet-lab/torch")
CONTAINER_TORCH_DIR = "/opt/trainnet-torch"

ALLOWED_CC = "net.ipv4.tcp_allowed_congestion_control"
SYSCTL_RESTORE_FILE = "sysctl-restore.json"  # shared by all labs: restored when the last goes down

# A fresh Debian 12 host: CUBIC and the kernel's default TCP buffers. A new namespace would
# otherwise inherit this machine's tuned init-namespace values (bbr, 32 MiB tcp_rmem).
HOST_DISTRIBUTION_DEFAULTS = {
    "net.ipv4.tcp_congestion_control": "cubic",
    "net.ipv4.tcp_rmem": "4096 131072 6291456",
    "net.ipv4.tcp_wmem": "4096 16384 4194304",
    "net.ipv4.tcp_mtu_probing": "0",
    "net.ipv4.tcp_fastopen": "1",
    "net.ipv4.tcp_slow_start_after_idle": "1",
}
ROUTER_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    # The WAN is IPv4; without IPv6 the TUN carries no router solicitations or MLD reports.
    "net.ipv6.conf.all.disable_ipv6": "1",
    "net.ipv6.conf.default.disable_ipv6": "1",
}


class LabError(RuntimeError):
    pass


def _podman_env() -> dict:
    # The project's containers.conf (runc, lower ulimits) unless the caller chose another one.
    return netns.c_locale_env(CONTAINERS_CONF=os.environ.get("CONTAINERS_CONF", str(CONTAINERS_CONF)))


def podman(*args: str, check: bool = True, timeout: float = 180) -> subprocess.CompletedProcess:
    return netns.run(["podman", *args], check=check, timeout=timeout, env=_podman_env())


def process_state(pid: int) -> str | None:
    """The one-letter state of a process (R, S, Z, ...), None if it does not exist."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def process_cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def other_lab_states(state_root: Path, except_name: str) -> list[str]:
    if not state_root.is_dir():
        return []
    return sorted(d.name for d in state_root.iterdir()
                  if d.is_dir() and d.name != except_name and (d / "state.json").exists())


class Lab:
    def __init__(self, spec: LabSpec, state_root: str | Path = STATE_ROOT):
        self.spec = spec
        self.state_root = Path(state_root)
        self.state_dir = self.state_root / spec.name
        self.state_file = self.state_dir / "state.json"
        self.emulator_config_file = self.state_dir / "emulator.json"
        self.emulator_log = self.state_dir / "emulator.log"
        self.state: dict = {}
        # Per container: {pid, start, env} (plugin_utils/nsenter.parse_target), from one podman inspect.
        self._nsenter_targets: dict[str, dict] = {}

    # --- state ---------------------------------------------------------------------------------

    @classmethod
    def from_state(cls, name: str, state_root: str | Path = STATE_ROOT) -> Lab:
        state_file = Path(state_root) / name / "state.json"
        if not state_file.exists():
            raise LabError(f"lab {name} is not up (no {state_file})")
        state = json.loads(state_file.read_text())
        lab = cls(LabSpec.from_dict(state["spec"]), state_root)
        lab.state = state
        return lab

    def is_up(self) -> bool:
        return self.state_file.exists()

    def _load_state(self) -> dict:
        if self.state_file.exists():
            return json.loads(self.state_file.read_text())
        return {}

    def _save_state(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        temporary = self.state_file.with_suffix(".tmp")
        temporary.write_text(json.dumps(self.state, indent=1))
        os.replace(temporary, self.state_file)

    def _record(self, kind: str, name: str) -> None:
        created = self.state.setdefault("created", {}).setdefault(kind, [])
        if name not in created:
            created.append(name)
            self._save_state()

    def _created(self, kind: str) -> list[str]:
        return list(self.state.get("created", {}).get(kind, []))

    # --- checks before anything is created -------------------------------------------------------

    def preflight(self) -> None:
        problems = []
        if os.geteuid() != 0:
            raise LabError("the lab needs root (network namespaces, TUN devices, privileged "
                           "containers): run it with sudo or as root")
        if not shutil.which("ip"):
            problems.append("ip (iproute2) is not installed: apt-get install iproute2")
        if not Path("/dev/net/tun").exists():
            problems.append("/dev/net/tun is missing: the kernel needs TUN support (modprobe tun)")
        if "cubic" not in netns.read_sysctl("net.ipv4.tcp_available_congestion_control").split():
            problems.append("the kernel has no cubic congestion control, so lab hosts cannot start "
                            "from Debian defaults")
        if self.spec.host_kind == "container":
            if not shutil.which("podman"):
                problems.append("podman is not installed: apt-get install podman runc "
                                "(or source scripts/bootstrap.sh)")
            elif podman("image", "exists", self.spec.image, check=False).returncode != 0:
                problems.append(f"image {self.spec.image} is missing: build it with "
                                "lab/image/build-image.sh (or source scripts/bootstrap.sh)")
        if problems:
            raise LabError("cannot bring the lab up:\n  - " + "\n  - ".join(problems))

    def _check_collisions(self) -> None:
        """Refuse if a name or address the lab would use belongs to something it did not create."""
        problems = []
        mine_netns = set(self._created("netns"))
        wanted = [self.spec.router_netns(s) for s in self.spec.sites]
        wanted += [self.spec.host_netns(h) for h in self.spec.hosts]
        for name in wanted:
            if netns.netns_exists(name) and name not in mine_netns:
                problems.append(f"network namespace {name} exists but this lab did not create it")
        if self.spec.host_kind == "container":
            mine_containers = set(self._created("containers"))
            for host in self.spec.hosts:
                name = self.spec.container(host)
                if name not in mine_containers and podman(
                        "container", "exists", name, check=False).returncode == 0:
                    problems.append(f"container {name} exists but this lab did not create it "
                                    f"(remove it with: podman rm -f {name})")
        # The lab's LANs live only inside its namespaces, but an overlapping address or route in
        # the machine's own namespace means the range is in use here: refuse rather than shadow it.
        lans = {name: site.network for name, site in self.spec.sites.items()}
        for entry in json.loads(ip("-j", "-4", "addr", "show").stdout or "[]"):
            for info in entry.get("addr_info", []):
                address = ipaddress.IPv4Interface(f"{info['local']}/{info['prefixlen']}")
                for site, lan in lans.items():
                    if address.network.overlaps(lan):
                        problems.append(f"address {address} on {entry['ifname']} overlaps the "
                                        f"LAN of site {site} ({lan})")
        for route in json.loads(ip("-j", "-4", "route", "show", "table", "all").stdout or "[]"):
            destination = route.get("dst", "")
            if destination in ("default", "") or route.get("type") in ("local", "broadcast"):
                continue
            try:
                network = ipaddress.IPv4Network(destination, strict=False)
            except ValueError:
                continue
            for site, lan in lans.items():
                if network.overlaps(lan) and network.prefixlen > 0:
                    problems.append(f"route {destination} (dev {route.get('dev', '?')}) overlaps "
                                    f"the LAN of site {site} ({lan})")
        if problems:
            raise LabError("refusing to build lab " + self.spec.name + ":\n  - "
                           + "\n  - ".join(sorted(set(problems))))

    # --- up ------------------------------------------------------------------------------------

    def up(self, log=print) -> None:
        """Build the lab, or complete/repair it; a lab that is fully up is left as it is."""
        self.preflight()
        self.state = self._load_state()
        fresh = not self.state
        if self.state:
            running = LabSpec.from_dict(self.state["spec"])
            if running.topology() != self.spec.topology():
                raise LabError(
                    f"lab {self.spec.name} is up with a different set of sites, hosts or host kind; "
                    f"take it down first (lab down --name {self.spec.name})")
        self._check_collisions()
        self.state.update({"spec": self.spec.to_dict(), "complete": False})
        self.state.setdefault("created", {})
        self.state.setdefault("started", time.time())
        self._save_state()
        try:
            self._allow_cubic(log)
            for site in self.spec.sites.values():
                self._ensure_router(site, log)
            rebuilt = {host.name for host in self.spec.hosts.values()
                       if self._ensure_host_netns(host, log)}
            if self.spec.host_kind == "container":
                self._ensure_containers(rebuilt, log)
                self._ensure_object_stores(log)
            self._ensure_emulator(log)
        except (LabError, CommandError, OSError, subprocess.SubprocessError) as error:
            if fresh:
                log(f"lab up failed ({error}); removing what it created")
                self.down(log=log)
            raise LabError(f"lab up failed: {error}") from error
        self.state["complete"] = True
        self._save_state()

    def _allow_cubic(self, log) -> None:
        """Let namespaces make cubic their default (ENVIRONMENT.md: the allowed list is global)."""
        current = netns.read_sysctl(ALLOWED_CC)
        if "cubic" in current.split():
            return
        restore_file = self.state_root / SYSCTL_RESTORE_FILE
        wanted = f"{current} cubic"
        if not restore_file.exists():
            self.state_root.mkdir(parents=True, exist_ok=True)
            restore_file.write_text(json.dumps({ALLOWED_CC: {"original": current, "set": wanted}}))
        netns.write_sysctl(ALLOWED_CC, wanted)
        log(f"{ALLOWED_CC}: '{current}' -> '{netns.read_sysctl(ALLOWED_CC)}' "
            "(restored when the last lab goes down)")

    @staticmethod
    def _has_link(netns_name: str, link: str) -> bool:
        return ip("link", "show", link, netns=netns_name, check=False).returncode == 0

    def _ensure_router(self, site, log) -> None:
        """Create and wire the site router unless it is complete (repairs a half-built one)."""
        name = self.spec.router_netns(site.name)
        if not netns.netns_exists(name):
            ip("netns", "add", name)
            self._record("netns", name)
        elif self._has_link(name, BRIDGE):
            return
        netns.sysctl_in(name, ROUTER_SYSCTLS)
        prefix = site.network.prefixlen
        ip_batch([
            "link set lo up",
            f"link add {BRIDGE} type bridge",
            f"addr add {site.router_address}/{prefix} dev {BRIDGE}",
            f"link set {BRIDGE} up",
        ], netns=name)
        log(f"router {name}: {BRIDGE} {site.router_address}/{prefix}")

    def _ensure_host_netns(self, host, log) -> bool:
        """Create and wire the host's namespace unless it is complete; True when it was (re)wired."""
        name = self.spec.host_netns(host.name)
        if not netns.netns_exists(name):
            ip("netns", "add", name)
            self._record("netns", name)
        elif self._has_link(name, LAN_INTERFACE):
            return False
        site = self.spec.sites[host.site]
        router = self.spec.router_netns(host.site)
        veth = self.spec.router_veth(host.name)
        # A namespace deleted under a running container lives on with the container, and so
        # does its veth into the bridge: drop that stale end before wiring the new namespace.
        ip("link", "del", veth, netns=router, check=False)
        ip("link", "add", veth, "type", "veth", "peer", "name", LAN_INTERFACE, "netns", name,
           netns=router)
        ip("link", "set", veth, "master", BRIDGE, "up", netns=router)
        ip_batch([
            "link set lo up",
            f"addr add {host.address}/{site.network.prefixlen} dev {LAN_INTERFACE}",
            f"link set {LAN_INTERFACE} up",
            f"route add default via {site.router_address}",
        ], netns=name)
        netns.sysctl_in(name, HOST_DISTRIBUTION_DEFAULTS)
        if host.rate_mbit:
            self._cap_host(host, router, veth)
        log(f"host {host.name}: netns {name}, {LAN_INTERFACE} {host.address} via {site.router_address}"
            + (f", capped at {host.rate_mbit:g} Mbit/s" if host.rate_mbit else ""))
        return True

    @staticmethod
    def _cap_host(host, router: str, veth: str) -> None:
        """tbf on the router's end of the host's veth: what the site delivers to the host (for an
        egress node: the objects it relays) is capped, in the router namespace Ansible never touches."""
        rate_bit = int(host.rate_mbit * 1e6)
        # burst: at least one MTU and about 2 ms of the rate (tbf needs rate / HZ at minimum)
        burst = max(rate_bit // 8 // 500, 16 * 1024)
        netns.run(["ip", "netns", "exec", router, "tc", "qdisc", "replace", "dev", veth, "root", "tbf",
                   "rate", f"{rate_bit}bit", "burst", str(burst), "latency", "50ms"])

    def _ensure_object_stores(self, log) -> None:
        """Hosts with an object store: CA, shards, nginx (idempotent); sums checked and published."""
        for host in self.spec.hosts.values():
            if not host.object_store:
                continue
            store = dict(host.object_store)
            name = self.spec.container(host.name)
            result = podman("exec", name, "python3", "-c", object_store.SETUP, host.name, host.address,
                            str(self.spec.seed), str(store["shards"]), str(store["shard_kib"]), timeout=600)
            expected = object_store.shard_sums(self.spec.seed, store["shards"], store["shard_kib"])
            if object_store.parse_sums(result.stdout) != expected:
                raise LabError(f"object store {host.name}: its SHA256SUMS differ from the ones the lab derives "
                               f"from the seed")
            out_dir = self.state_dir / "object-store" / host.name
            out_dir.mkdir(parents=True, exist_ok=True)
            ca = podman("exec", name, "cat", f"{object_store.TLS_DIR}/ca.pem").stdout
            (out_dir / "ca.pem").write_text(ca)
            (out_dir / "shards.list").write_text(object_store.shard_list(host.name, expected))
            # Every lab host trusts the lab CA, as hosts trust a private object store's CA.
            for other in self.spec.hosts.values():
                netns.run(["podman", "exec", "-i", self.spec.container(other.name), "sh", "-c",
                           f"cat > {object_store.TRUSTED_CA} && update-ca-certificates >/dev/null"],
                          input_text=ca, env=_podman_env(), timeout=60)
            log(f"host {host.name}: object store, {store['shards']} shards of {store['shard_kib']} KiB "
                f"at https://{host.name}/shards/ (CA and list in {out_dir})")

    def _ensure_containers(self, rebuilt_netns: set[str], log) -> None:
        started = []
        add_hosts = [f"--add-host={h.name}:{h.address}" for h in self.spec.hosts.values()]
        mounts = ([f"--volume={HOST_TORCH_DIR}:{CONTAINER_TORCH_DIR}:ro"]
                  if (HOST_TORCH_DIR / ".trainnet-torch").exists() else [])
        for host in self.spec.hosts.values():
            name = self.spec.container(host.name)
            inspect = podman("container", "inspect", "--format", "{{.State.Running}}", name,
                             check=False)
            if inspect.returncode == 0 and host.name in rebuilt_netns:
                # Its namespace was gone and is new: the container still holds the old one.
                podman("rm", "-f", "-t", "3", name)
                inspect = subprocess.CompletedProcess([], 1)
            if inspect.returncode == 0:
                if inspect.stdout.strip() != "true":
                    podman("start", name)
                    started.append(name)
                continue
            podman("run", "-d", "--privileged", "--systemd=always",
                   f"--network=ns:{netns.NETNS_DIR / self.spec.host_netns(host.name)}",
                   f"--name={name}", f"--hostname={host.name}",
                   f"--label={CONTAINER_LABEL}={self.spec.name}", *add_hosts, *mounts, self.spec.image)
            self._record("containers", name)
            started.append(name)
            log(f"host {host.name}: container {name}")
        deadline = time.monotonic() + SYSTEMD_BOOT_TIMEOUT
        for name in started:
            while True:
                remaining = max(1.0, deadline - time.monotonic())
                result = podman("exec", name, "timeout", str(int(remaining)), "systemctl",
                                "is-system-running", "--wait", check=False, timeout=remaining + 10)
                state = result.stdout.strip()
                if state in ("running", "degraded"):
                    break
                # Just after start systemctl may find no bus yet ("Failed to connect to bus"):
                # that is booting, not failure, so ask again until the deadline.
                if state not in ("", "initializing", "starting") or time.monotonic() >= deadline:
                    raise LabError(f"container {name}: systemd did not finish booting "
                                   f"({state or result.stderr.strip()})")
                time.sleep(0.5)

    # --- the emulator ----------------------------------------------------------------------------

    def emulator_pid(self) -> int | None:
        """The pid of this lab's live emulator, or None."""
        pid_file = self.state_dir / "emulator.pid"
        candidates = []
        if pid_file.exists():
            try:
                candidates.append(int(pid_file.read_text().strip()))
            except ValueError:
                pass
        if self.state.get("emulator_pid"):
            candidates.append(int(self.state["emulator_pid"]))
        for pid in candidates:
            if self._is_our_emulator(pid):
                return pid
        return None

    def _is_our_emulator(self, pid: int) -> bool:
        if process_state(pid) in (None, "Z", "X"):
            return False
        cmdline = process_cmdline(pid)
        return EMULATOR_MODULE in cmdline and str(self.emulator_config_file) in cmdline

    def _find_emulators(self) -> list[int]:
        """Every live emulator process of this lab, recorded or not."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and self._is_our_emulator(int(entry.name)):
                found.append(int(entry.name))
        return found

    def _ensure_emulator(self, log) -> None:
        config = self.spec.emulator_config(str(self.state_dir))
        pid = self.emulator_pid()
        if pid and self.emulator_config_file.exists() and \
                json.loads(self.emulator_config_file.read_text()) == config:
            return
        if pid:
            log(f"emulator {pid}: link settings changed, restarting it")
            self._stop_emulator()
            # New inventory settings are the truth again; runtime changes (`lab link`) survive
            # only a restart of a dead emulator with unchanged settings.
            runtime_file = Path(config["runtime_file"])
            if runtime_file.exists():
                log(f"runtime link changes dropped: {runtime_file.read_text().strip()}")
                runtime_file.unlink()
        self.emulator_config_file.write_text(json.dumps(config, indent=1))
        status_file = Path(config["status_file"])
        status_file.unlink(missing_ok=True)
        # `-m` from lab/ finds trainnet_lab there; the collection's code it uses comes from the
        # same interpreter's site-packages (the .pth file scripts/bootstrap.sh writes into .venv).
        with open(self.emulator_log, "a") as log_file:
            process = subprocess.Popen(
                [sys.executable, "-m", EMULATOR_MODULE, "--config", str(self.emulator_config_file)],
                cwd=str(LAB_DIR), env=netns.c_locale_env(), stdin=subprocess.DEVNULL, stdout=log_file,
                stderr=subprocess.STDOUT, start_new_session=True)
        self.state["emulator_pid"] = process.pid
        self._save_state()
        deadline = time.monotonic() + EMULATOR_READY_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise LabError(f"the emulator exited with {process.returncode}:\n"
                               + self._log_tail())
            try:
                if json.loads(status_file.read_text()).get("ready"):
                    log(f"emulator {process.pid}: {len(config['links'])} directed links, "
                        f"status {status_file}")
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise LabError(f"the emulator did not become ready in {EMULATOR_READY_TIMEOUT:.0f} s:\n"
                       + self._log_tail())

    def _log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.emulator_log.read_text().splitlines()[-lines:])
        except OSError:
            return "(no emulator log)"

    # --- runtime link control ------------------------------------------------------------------

    def control(self, request: dict, timeout: float = CONTROL_TIMEOUT) -> dict:
        """Send one request to the running emulator's control socket; return its reply."""
        self.state = self.state or self._load_state()
        if not self.state:
            raise LabError(f"lab {self.spec.name} is not up")
        if self.emulator_pid() is None:
            raise LabError(f"the WAN emulator of lab {self.spec.name} is not running; "
                           "`lab up` restarts it")
        path = self.state_dir / "control.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as connection:
            connection.settimeout(timeout)
            try:
                connection.connect(str(path))
                connection.send(json.dumps(request).encode())
                reply = connection.recv(1 << 20)
            except OSError as error:  # includes the timeout
                raise LabError(f"the emulator did not answer on {path}: {error} (an emulator "
                               "started before link control existed has no socket: `lab up` "
                               "restarts it)") from error
        try:
            return json.loads(reply)
        except ValueError as error:
            raise LabError(f"the emulator answered {reply[:200]!r}, not JSON") from error

    def link_name(self, a: str, b: str) -> str:
        link = self.spec.link_between(a, b)
        if link is None:
            known = ", ".join(link.name for link in self.spec.links)
            raise SpecError([f"lab {self.spec.name} has no link between {a} and {b} "
                             f"(links: {known or 'none'})"])
        return link.name

    def set_link(self, a: str, b: str, *, down: bool | None = None, **settings) -> dict:
        """Change a running link in both directions without restarting the emulator.

        down=True drops every packet silently (no ICMP, interfaces stay up), down=False restores;
        settings are any of delay_ms, jitter_ms, rate_mbit, loss, loss_model, loss_burst_packets,
        queue_bytes, mtu, icmp_blackhole. Validated first (SpecError naming the link and field), then applied
        atomically by the emulator; returns its acknowledgement (the link's new settings).
        """
        name = self.link_name(a, b)
        if down is not None and not isinstance(down, bool):
            raise SpecError([f"link {name}: down = {down!r} must be true or false"])
        current = self.link_settings(a, b)
        problems = validate_runtime_settings(name, current, settings)
        if problems:
            raise SpecError(problems)
        return self._checked(self.control({"op": "set", "sites": name.split("<->"),
                                           "down": down, "settings": settings}))

    def reset_link(self, a: str, b: str) -> dict:
        """Back to the inventory's settings (and up)."""
        name = self.link_name(a, b)
        return self._checked(self.control({"op": "reset", "sites": name.split("<->")}))

    def link_settings(self, a: str, b: str) -> dict:
        """The running link's settings (one direction's; both are always set together)."""
        name = self.link_name(a, b)
        reply = self.show_links()
        direction = name.replace("<->", "->")
        settings = dict(reply["links"][name][direction])
        settings.pop("down", None)
        return settings

    def show_links(self) -> dict:
        """Every link's running settings per direction, and the runtime changes."""
        return self._checked(self.control({"op": "show"}))

    @staticmethod
    def _checked(reply: dict) -> dict:
        if not reply.get("ok"):
            raise LabError(f"the emulator refused: {reply.get('error')}")
        return reply

    def _stop_emulator(self) -> None:
        pids = set(self._find_emulators())
        pid = self.emulator_pid()
        if pid:
            pids.add(pid)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + 5
        for pid in pids:
            while time.monotonic() < deadline and self._alive_or_zombie(pid):
                time.sleep(0.05)
            if self._alive_or_zombie(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                time.sleep(0.1)
                self._alive_or_zombie(pid)

    @staticmethod
    def _alive_or_zombie(pid: int) -> bool:
        """True while the process runs; reaps it if it is our exited child."""
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return False
        except ChildProcessError:
            pass
        return process_state(pid) not in (None, "Z", "X")

    # --- down ----------------------------------------------------------------------------------

    def down(self, log=print) -> list[str]:
        """Remove everything this lab created; return what is still left (empty when clean)."""
        if not self.state:
            self.state = self._load_state()
        self._stop_emulator()
        containers = set(self._created("containers"))
        if shutil.which("podman"):
            labelled = podman("ps", "-a", "--filter", f"label={CONTAINER_LABEL}={self.spec.name}",
                              "--format", "{{.Names}}", check=False).stdout.split()
            containers |= set(labelled)
            if containers:
                self._remove_containers(sorted(containers), log)
        # Hosts before routers: a host's veth peer lives in its router's namespace.
        created_netns = self._created("netns")
        routers = {self.spec.router_netns(s) for s in self.spec.sites}
        for name in sorted(created_netns, key=lambda n: n in routers):
            if netns.netns_exists(name):
                ip("netns", "del", name, check=False)
        if created_netns:
            log(f"removed network namespaces: {', '.join(created_netns)}")
        leftovers = self.leftovers(containers, created_netns)
        if not leftovers:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self._restore_sysctls(log)
            try:
                self.state_root.rmdir()  # only when no other lab is up
            except OSError:
                pass
        return leftovers

    @staticmethod
    def _remove_containers(names: list[str], log) -> None:
        """podman rm -f, then each one still there again (bounded: 3 rounds): one rm of all the lab's
        containers once left one behind in CI (a loaded host; podman said nothing the lab kept)."""
        left = names
        for attempt in range(3):
            try:
                result = podman("rm", "-f", "-t", "3", *left, check=False, timeout=240)
                said = (result.stderr or result.stdout).strip()[-500:]
            except subprocess.TimeoutExpired:
                said = "podman rm timed out after 240 s"
            left = [n for n in left if podman("container", "exists", n, check=False).returncode == 0]
            if not left:
                break
            log(f"podman rm left {', '.join(left)} (attempt {attempt + 1}): {said}")
            time.sleep(2)
        log(f"removed containers: {', '.join(n for n in names if n not in left)}")

    def leftovers(self, containers=(), created_netns=()) -> list[str]:
        left = [f"network namespace {n}" for n in created_netns if netns.netns_exists(n)]
        left += [f"emulator process {pid}" for pid in self._find_emulators()]
        if containers and shutil.which("podman"):
            for name in containers:
                if podman("container", "exists", name, check=False).returncode == 0:
                    left.append(f"container {name}")
        return left

    def _restore_sysctls(self, log) -> None:
        restore_file = self.state_root / SYSCTL_RESTORE_FILE
        if not restore_file.exists() or other_lab_states(self.state_root, self.spec.name):
            return
        record = json.loads(restore_file.read_text()).get(ALLOWED_CC, {})
        current = netns.read_sysctl(ALLOWED_CC)
        if current.split() == record.get("set", "").split():
            netns.write_sysctl(ALLOWED_CC, record["original"])
            log(f"{ALLOWED_CC}: restored '{record['original']}'")
        else:
            log(f"{ALLOWED_CC}: left as '{current}' (changed by someone else since the lab set it)")
        restore_file.unlink()

    # --- status --------------------------------------------------------------------------------

    def status(self) -> dict:
        """Hosts, routers, links with live counters, emulator health, and any problems."""
        self.state = self.state or self._load_state()
        problems = []
        report = {"name": self.spec.name, "up": bool(self.state),
                  "complete": bool(self.state.get("complete")), "host_kind": self.spec.host_kind}
        if not self.state:
            report.update(healthy=False, problems=["the lab is not up"])
            return report
        routers = []
        for site in self.spec.sites.values():
            name = self.spec.router_netns(site.name)
            entry = {"site": site.name, "lan": site.lan, "netns": name,
                     "exists": netns.netns_exists(name), "tun": None}
            if not entry["exists"]:
                problems.append(f"router namespace {name} is missing")
            else:
                entry["tun"] = self._tun_statistics(name)
            routers.append(entry)
        report["routers"] = routers
        container_states = {}
        if self.spec.host_kind == "container" and shutil.which("podman"):
            listing = podman("ps", "-a", "--filter", f"label={CONTAINER_LABEL}={self.spec.name}",
                             "--format", "json", check=False).stdout
            for container in json.loads(listing or "[]"):
                for container_name in container.get("Names", []):
                    container_states[container_name] = container.get("State", "unknown")
        hosts = []
        for host in self.spec.hosts.values():
            entry = {"host": host.name, "site": host.site, "address": host.address,
                     "netns": self.spec.host_netns(host.name),
                     "netns_exists": netns.netns_exists(self.spec.host_netns(host.name))}
            if not entry["netns_exists"]:
                problems.append(f"host {host.name}: namespace {entry['netns']} is missing")
            if self.spec.host_kind == "container":
                entry["container"] = self.spec.container(host.name)
                entry["container_state"] = container_states.get(entry["container"], "missing")
                if entry["container_state"] != "running":
                    problems.append(f"host {host.name}: container {entry['container']} is "
                                    f"{entry['container_state']}")
            hosts.append(entry)
        report["hosts"] = hosts
        emulator = {"pid": self.emulator_pid(), "log": str(self.emulator_log)}
        status_file = self.state_dir / "emulator-status.json"
        counters, runtime = {}, {}
        try:
            emulator_status = json.loads(status_file.read_text())
            emulator["status_age_s"] = round(time.time() - emulator_status["updated"], 1)
            emulator["ready"] = emulator_status.get("ready", False)
            counters = emulator_status.get("links", {})
            runtime = emulator_status.get("runtime", {})
            emulator["sites"] = emulator_status.get("sites", {})
            emulator["scheduling"] = emulator_status.get("scheduling", "unknown")
        except (OSError, ValueError, KeyError):
            emulator["status_age_s"] = None
        if emulator["pid"] is None:
            problems.append(f"the WAN emulator is not running (dead; see {self.emulator_log}); "
                            "`lab up` restarts it")
            emulator["health"] = "dead"
        elif emulator["status_age_s"] is None or emulator["status_age_s"] > EMULATOR_STALE_AFTER:
            problems.append(f"the WAN emulator (pid {emulator['pid']}) has not updated its status "
                            f"for {emulator['status_age_s']} s: hung?")
            emulator["health"] = "stale"
        else:
            emulator["health"] = "ok"
        if emulator["health"] == "ok":
            for router in routers:
                if router["exists"] and router["tun"] is None:
                    problems.append(f"router {router['netns']}: the emulator's {TUN_NAME} is missing")
        report["emulator"] = emulator
        links = []
        for link in self.spec.links:
            entry = {"link": link.name, "delay_ms": link.delay_ms, "jitter_ms": link.jitter_ms,
                     "rate_mbit": link.rate_mbit, "loss": link.loss, "loss_model": link.loss_model,
                     "loss_burst_packets": link.loss_burst_packets,
                     "queue_bytes": link.effective_queue_bytes, "mtu": link.mtu,
                     "icmp_blackhole": link.icmp_blackhole, "down": False, "directions": {}}
            # The running emulator's settings win: `lab link` may have changed them.
            live = counters.get(link.name.replace("<->", "->"), {})
            entry.update({k: live[k] for k in (*entry.keys(), "down") if k in live
                          and k not in ("link", "directions")})
            entry["runtime_change"] = {k: v for k, v in runtime.get(link.name, {}).items()
                                       if k != "sites"}
            for direction in link.directed():
                key = f"{direction['src']}->{direction['dst']}"
                entry["directions"][key] = counters.get(key, {}).get("counters", {})
            links.append(entry)
        report["links"] = links
        report["problems"] = problems
        report["healthy"] = not problems and report["complete"]
        return report

    @staticmethod
    def _tun_statistics(router_netns: str) -> dict | None:
        """The router's TUN counters; tx_dropped counts packets the emulator was too slow to read."""
        shown = ip("-j", "-s", "link", "show", TUN_NAME, netns=router_netns, check=False)
        if shown.returncode != 0:
            return None
        stats = json.loads(shown.stdout)[0].get("stats64", {})
        return {"to_emulator_packets": stats.get("tx", {}).get("packets"),
                "overflow_drops": stats.get("tx", {}).get("dropped"),
                "from_emulator_packets": stats.get("rx", {}).get("packets")}

    # --- running commands on lab hosts -------------------------------------------------------------

    def exec_argv(self, host: str, argv: list[str]) -> list[str]:
        """The command line that runs argv on a lab host (in its container or namespace), for a
        process that is waited for: nsenter into the container's namespaces (as the collection's
        podman_nsenter connection does), no container runtime started per command."""
        if self.spec.host_kind == "container":
            target = self._nsenter_target(host)
            if target is not None:
                return nsenter_argv("nsenter", target["pid"], target["env"], None, argv)
            return ["podman", "exec", self.spec.container(host), *argv]
        return ["ip", "netns", "exec", self.spec.host_netns(host), *argv]

    def _nsenter_target(self, host: str) -> dict | None:
        """The container's first process and environment (inspected again once that process is
        gone: a restarted container), or None when it does not run (podman exec then says why)."""
        target = self._nsenter_targets.get(host)
        if target is not None and is_current(target):
            return target
        done = podman(*inspect_argv("podman", self.spec.container(host))[1:], check=False, timeout=30)
        try:
            self._nsenter_targets[host] = parse_target(done.stdout)
        except ValueError:
            return None
        return self._nsenter_targets[host]

    def run_on(self, host: str, argv: list[str], *, timeout: float = 60,
               check: bool = False) -> subprocess.CompletedProcess:
        return netns.run(self.exec_argv(host, argv), check=check, timeout=timeout,
                         env=_podman_env(), what=f"{host}: {' '.join(argv)}")

    def popen_on(self, host: str, argv: list[str], **kwargs) -> subprocess.Popen:
        """A process that runs alongside (`podman exec` in a container: it lives as long as the
        remote process). Signals to it do not reach the remote process (podman 4 does not pass them
        on): serving() ends its servers on the host itself."""
        if self.spec.host_kind == "container":
            command = ["podman", "exec", self.spec.container(host), *argv]
        else:
            command = self.exec_argv(host, argv)
        return subprocess.Popen(command, env=_podman_env(), **kwargs)

    @contextlib.contextmanager
    def serving(self, host: str, argv: list[str], port: int, *, seconds: float, grace: float = 5.0):
        """Run a server on `host` for at most `seconds` (under timeout(1)), yield it once it
        listens on TCP `port`, and afterwards give it `grace` seconds to end on its own (a one-off
        server such as `iperf3 -s -1` ends after its client), then end it on the host: SIGTERM to
        its timeout(1) (which passes it on), then SIGKILL to both (`podman exec` does not pass
        signals on, so the local client cannot). Tests and benchmarks never leave a server behind,
        and never wait out the time limit of one that does not end by itself (an http.server)."""
        # The remote shell prints its PID and becomes timeout(1): the process to signal on the host.
        process = self.popen_on(host, ["sh", "-c", 'echo "$$"; exec timeout "$0" "$@"', str(int(seconds))] + argv,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        remote_pid = (process.stdout.readline() or "").strip()
        try:
            listening_by = time.monotonic() + 10
            while time.monotonic() < listening_by and process.poll() is None:
                if self.run_on(host, ["ss", "-Hltn", f"sport = :{port}"], timeout=10).stdout.strip():
                    break
                time.sleep(0.1)
            yield process
        finally:
            self._end_server(host, process, remote_pid, port, grace)

    def _end_server(self, host: str, process: subprocess.Popen, remote_pid: str, port: int,
                    grace: float) -> None:
        stops = [None]
        if remote_pid.isdigit():
            stops += [["kill", "-TERM", remote_pid],
                      ["sh", "-c", f"pkill -KILL -P {remote_pid}; kill -KILL {remote_pid}"]]
        for stop in stops:
            if stop is not None:
                self.run_on(host, stop, timeout=10)
            try:
                process.communicate(timeout=grace if stop is None else 5)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            process.kill()
            process.communicate(timeout=5)
        gone_by = time.monotonic() + 5
        while self.run_on(host, ["ss", "-Hltn", f"sport = :{port}"], timeout=10).stdout.strip():
            if time.monotonic() > gone_by:
                if sys.exc_info()[0] is None:   # never hide the error that ended the block
                    raise RuntimeError(f"{host}: a server still listens on TCP port {port} after it was ended")
                break
            time.sleep(0.1)
