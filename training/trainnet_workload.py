"""longhaul.trainnet training workload: a small DDP job over Gloo, run by torchrun on every gpu node.

Standard library + torch only. Reads the environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR/MASTER_PORT, TORCHELASTIC_RUN_ID) and the trainnet env files
(/etc/trainnet/control_plane.env, /etc/trainnet/data_plane.env).

Modes
  (default)            train --steps steps; one JSON line per step on stdout and in --log-file
  --verify-allreduce   all-reduce known tensors (default group and the WAN sync groups) and
                       assert the exact result on every rank; exit 3 naming the ranks that differ
  --preflight-only     the preflight checks alone, without importing torch (exit 0 or 2)
  --resume             (training) start after the newest valid checkpoint any rank holds, so
                       torchrun's elastic restart continues instead of starting over

WAN-aware gradient sync (--sync-groups N, env TRAINNET_SYNC_GROUPS, default 8): a DDP
communication hook that splits each gradient bucket into N chunks all-reduced at the same time
over N Gloo process groups, i.e. N sets of TCP connections. On a long fat lossy path one
dependent chain of transfers leaves the link half empty; several in flight fill it (issue 13:
21-27 Mbit/s with one group, 32-39 with eight, on 50 Mbit/s at 150 ms).
--sync-topology (env TRAINNET_SYNC_TOPOLOGY, with TRAINNET_SITE naming each node's site): site
sums the bucket inside each site (LAN), the sites' leaders combine their sums by direct exchanges
(the N chunks in flight at once; with three or more sites a direct reduce-scatter and all-gather,
so each site pair's path carries 2/L of the bucket each way) and hand the total back to their site;
site-ring puts a ring between the leaders instead; flat keeps every rank in every chunk's ring.

Touches: TCP sockets on the Gloo interface, --log-file, checkpoints and manifests under
--checkpoint-dir (checkpoint writers only). Exit codes: 0 ok, 2 preflight refused, 3 verify mismatch.
"""

import argparse
import ctypes
import datetime
import fcntl
import hashlib
import io
import ipaddress
import json
import os
import queue
import socket
import struct
import sys
import tempfile
import threading
import time

EXIT_PREFLIGHT = 2
EXIT_VERIFY = 3
# NCCL refuses more than 64 sockets per peer connection (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD).
NCCL_MAX_SOCKETS = 64
MAX_SYNC_GROUPS = 64
SYNC_TOPOLOGIES = ("flat", "site", "site-ring")
SITE_NAME_MAX_BYTES = 255
DEFAULT_PG_TIMEOUT_SEC = 1800
SIOCGIFADDR = 0x8915
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("", "0", "false", "no", "off")


class PreflightError(Exception):
    """A setting that would make the job fail or hang later; the message names it and the fix."""


# ----------------------------------------------------------------------------------------------
# arguments and environment (no torch needed)
# ----------------------------------------------------------------------------------------------
def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % text) from None
    if value < 1:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % text)
    return value


def _env_int(env, name, default, low, high):
    raw = env.get(name, "")
    if raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise PreflightError("%s=%r is not an integer (allowed: %d..%d)" % (name, raw, low, high)) from None
    if not low <= value <= high:
        raise PreflightError("%s=%d is out of range (allowed: %d..%d)" % (name, value, low, high))
    return value


def env_flag(env, name):
    raw = env.get(name, "").strip().lower()
    if raw in TRUE_WORDS:
        return True
    if raw in FALSE_WORDS:
        return False
    raise PreflightError("%s=%r is not a boolean (allowed: %s)" % (name, raw, ", ".join(w for w in TRUE_WORDS + FALSE_WORDS if w)))


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--verify-allreduce", action="store_true", help="all-reduce known tensors and assert the exact result on every rank")
    mode.add_argument("--preflight-only", action="store_true", help="run the preflight checks only (no torch import)")
    p.add_argument("--steps", type=_positive_int, default=20)
    p.add_argument("--batch-size", type=_positive_int, default=32)
    p.add_argument("--width", type=_positive_int, default=1024, help="hidden width; parameters ~ width^2 + 80 x width floats")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--sync-groups", type=_positive_int, default=None,
                   help="Gloo process groups each bucket is split over (env TRAINNET_SYNC_GROUPS, default 8; 1 = plain DDP all-reduce)")
    p.add_argument("--sync-topology", choices=SYNC_TOPOLOGIES, default=None,
                   help="flat: every rank in every chunk's all-reduce; site: sum inside each site first, the sites' leaders "
                        "combine the sums by direct exchanges; site-ring: the same with a ring "
                        "between the leaders (env TRAINNET_SYNC_TOPOLOGY, default flat; site* need TRAINNET_SITE)")
    p.add_argument("--no-comm-hook", action="store_true", help="DDP's built-in all-reduce, no hook (all-reduce time is then not measured)")
    p.add_argument("--bucket-cap-mb", type=float, default=None, help="DDP bucket size (env TRAINNET_BUCKET_CAP_MB, default 25)")
    p.add_argument("--pg-timeout-sec", type=_positive_int, default=None,
                   help="process-group timeout (default: env TRAINNET_PROCESS_GROUP_TIMEOUT_SEC, else %d)" % DEFAULT_PG_TIMEOUT_SEC)
    p.add_argument("--local-addr", default=None, help="this node's gradient-sync address (default: env PET_LOCAL_ADDR); picks the Gloo interface")
    p.add_argument("--log-file", default=None, help="JSON lines are appended here too; {rank}, {local_rank}, {host} are expanded")
    p.add_argument("--checkpoint-dir", default=None, help="{rank}, {local_rank}, {host} are expanded")
    p.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (0 = none)")
    p.add_argument("--resume", action="store_true",
                   help="continue from the newest valid checkpoint any rank holds (after torchrun's elastic restart)")
    p.add_argument("--checkpoint-writer", action="store_true", default=None,
                   help="this node writes checkpoints (default: env TRAINNET_CHECKPOINT_WRITER)")
    p.add_argument("--verify-elements", type=_positive_int, default=4 * 1024 * 1024, help="largest verify tensor, float32 elements")
    p.add_argument("--verify-rounds", type=_positive_int, default=1)
    # Test hook: corrupts one element of the result on this rank after the all-reduce, so the
    # mismatch path is exercised for real (tests/unit/training).
    p.add_argument("--fault-inject-rank", type=int, default=None, help=argparse.SUPPRESS)
    return p


def list_interfaces():
    """Interface names of this process's network namespace (if_nameindex follows the netns)."""
    return [pair[1] for pair in socket.if_nameindex()]


def interface_ipv4(name):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def interface_ipv6(proc_file="/proc/net/if_inet6"):
    found = {}
    try:
        with open(proc_file) as handle:
            for line in handle:
                fields = line.split()
                if len(fields) >= 6:
                    found.setdefault(fields[5], []).append(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    except OSError:
        pass
    return found


def interface_for_address(address, interfaces):
    """The interface holding `address`, or None."""
    addr = ipaddress.ip_address(address)
    if addr.version == 4:
        for name in interfaces:
            if interface_ipv4(name) == str(addr):
                return name
        return None
    for name, addrs in interface_ipv6().items():
        if str(addr) in addrs and name in interfaces:
            return name
    return None


def hostname_addresses(hostname):
    try:
        infos = socket.getaddrinfo(hostname, None, proto=socket.IPPROTO_TCP)
    except (socket.gaierror, UnicodeError):
        return []
    return sorted({info[4][0] for info in infos})


def preflight(env, local_addr=None, interfaces=None, hostname=None):
    """Check the socket settings before anything connects. Returns the env changes to apply
    (GLOO_SOCKET_IFNAME derived from --local-addr). Raises PreflightError listing every problem."""
    interfaces = list_interfaces() if interfaces is None else interfaces
    hostname = socket.gethostname() if hostname is None else hostname
    problems, changes = [], {}

    gloo = env.get("GLOO_SOCKET_IFNAME", "").strip()
    if gloo:
        if gloo[0] in "^=":
            problems.append(
                "GLOO_SOCKET_IFNAME=%r uses NCCL's %s syntax, which Gloo does not understand (Gloo takes a "
                "comma-separated list of interface names); set it to the gradient-sync interface, e.g. "
                "GLOO_SOCKET_IFNAME=tun0" % (gloo, "exclusion-list '^'" if gloo[0] == "^" else "exact-match '='"))
        else:
            missing = [name for name in gloo.split(",") if name not in interfaces]
            if missing:
                problems.append("GLOO_SOCKET_IFNAME=%r names interface(s) that do not exist here: %s (interfaces: %s)"
                                % (gloo, ", ".join(missing), ", ".join(sorted(interfaces))))

    local_addr = (local_addr or env.get("PET_LOCAL_ADDR", "")).strip() or None
    if local_addr is not None:
        try:
            iface = interface_for_address(local_addr, interfaces)
        except ValueError:
            iface = None
            problems.append("--local-addr/PET_LOCAL_ADDR=%r is not an IP address" % local_addr)
        else:
            if iface is None:
                problems.append("--local-addr/PET_LOCAL_ADDR=%s is not an address of any interface here (interfaces: %s)"
                                % (local_addr, ", ".join(sorted(interfaces))))
            elif not gloo:
                # Gloo only binds by interface name or host name: pin it to the interface holding the address.
                changes["GLOO_SOCKET_IFNAME"] = iface

    if not gloo and local_addr is None:
        addrs = hostname_addresses(hostname)
        if not addrs:
            problems.append("host name %r does not resolve and neither GLOO_SOCKET_IFNAME nor --local-addr/PET_LOCAL_ADDR "
                            "is set: Gloo would have no address to bind" % hostname)
        elif all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs):
            problems.append("host name %r resolves to loopback (%s) and neither GLOO_SOCKET_IFNAME nor "
                            "--local-addr/PET_LOCAL_ADDR is set: Gloo and torchrun would advertise an address other "
                            "nodes cannot reach; set GLOO_SOCKET_IFNAME to the tunnel and --local-addr to its address"
                            % (hostname, ", ".join(addrs)))

    try:
        nthreads = _env_int(env, "NCCL_SOCKET_NTHREADS", 1, 1, NCCL_MAX_SOCKETS)
        nsocks = _env_int(env, "NCCL_NSOCKS_PERTHREAD", 1, 1, NCCL_MAX_SOCKETS)
    except PreflightError as exc:
        problems.append(str(exc))
    else:
        if nthreads * nsocks > NCCL_MAX_SOCKETS:
            problems.append("NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = %d x %d = %d is above NCCL's limit of %d"
                            % (nthreads, nsocks, nthreads * nsocks, NCCL_MAX_SOCKETS))

    for name, low, high in (("TRAINNET_PROCESS_GROUP_TIMEOUT_SEC", 1, 86400 * 7), ("TRAINNET_SYNC_GROUPS", 1, MAX_SYNC_GROUPS)):
        try:
            _env_int(env, name, 1, low, high)
        except PreflightError as exc:
            problems.append(str(exc))
    try:
        env_flag(env, "TRAINNET_CHECKPOINT_WRITER")
    except PreflightError as exc:
        problems.append(str(exc))
    topology = env.get("TRAINNET_SYNC_TOPOLOGY", "").strip()
    if topology and topology not in SYNC_TOPOLOGIES:
        problems.append("TRAINNET_SYNC_TOPOLOGY=%r is not a sync topology (allowed: %s)" % (topology, ", ".join(SYNC_TOPOLOGIES)))
    if problems:
        raise PreflightError("; ".join(problems))
    return changes


def resolve_settings(args, env):
    """Flags over env over defaults; raises PreflightError naming the variable."""
    settings = {
        "pg_timeout_sec": args.pg_timeout_sec or _env_int(env, "TRAINNET_PROCESS_GROUP_TIMEOUT_SEC", DEFAULT_PG_TIMEOUT_SEC, 1, 86400 * 7),
        "sync_groups": args.sync_groups or _env_int(env, "TRAINNET_SYNC_GROUPS", 8, 1, MAX_SYNC_GROUPS),
        "checkpoint_writer": args.checkpoint_writer if args.checkpoint_writer is not None else env_flag(env, "TRAINNET_CHECKPOINT_WRITER"),
    }
    if settings["sync_groups"] > MAX_SYNC_GROUPS:
        raise PreflightError("--sync-groups=%d is out of range (allowed: 1..%d)" % (settings["sync_groups"], MAX_SYNC_GROUPS))
    settings["sync_topology"] = args.sync_topology or env.get("TRAINNET_SYNC_TOPOLOGY", "").strip() or "flat"
    if settings["sync_topology"] not in SYNC_TOPOLOGIES:
        raise PreflightError("TRAINNET_SYNC_TOPOLOGY=%r is not a sync topology (allowed: %s)"
                             % (settings["sync_topology"], ", ".join(SYNC_TOPOLOGIES)))
    settings["site"] = env.get("TRAINNET_SITE", "").strip()
    if len(settings["site"].encode("utf-8")) > SITE_NAME_MAX_BYTES:
        raise PreflightError("TRAINNET_SITE is longer than %d bytes" % SITE_NAME_MAX_BYTES)
    if settings["sync_topology"] != "flat" and not settings["site"]:
        raise PreflightError("sync topology %r needs TRAINNET_SITE (this node's site name, written by the "
                             "training_job role from trainnet_site); set it or use TRAINNET_SYNC_TOPOLOGY=flat" % settings["sync_topology"])
    cap = args.bucket_cap_mb
    if cap is None:
        raw = env.get("TRAINNET_BUCKET_CAP_MB", "").strip()
        try:
            cap = float(raw) if raw else 25.0
        except ValueError:
            raise PreflightError("TRAINNET_BUCKET_CAP_MB=%r is not a number" % raw) from None
    if not 0 < cap <= 4096:
        raise PreflightError("bucket cap %r MB is out of range (allowed: >0..4096)" % cap)
    settings["bucket_cap_mb"] = cap
    if args.checkpoint_every < 0:
        raise PreflightError("--checkpoint-every=%d must be >= 0" % args.checkpoint_every)
    if args.checkpoint_every and not args.checkpoint_dir:
        raise PreflightError("--checkpoint-every needs --checkpoint-dir")
    return settings


# ----------------------------------------------------------------------------------------------
# output
# ----------------------------------------------------------------------------------------------
class JsonLog:
    def __init__(self, path):
        self._handle = None
        if path:
            parent = os.path.dirname(os.path.abspath(path))
            os.makedirs(parent, exist_ok=True)
            self._handle = open(path, "a", encoding="utf-8")

    def emit(self, record):
        line = json.dumps(record, sort_keys=True)
        print(line, flush=True)
        if self._handle:
            self._handle.write(line + "\n")
            self._handle.flush()

    def close(self):
        if self._handle:
            self._handle.close()


def bus_bandwidth_bps(nbytes, seconds, world_size):
    """Ring all-reduce bus bandwidth (nccl-tests definition): 2(n-1)/n x bytes / time, in bit/s."""
    if seconds <= 0 or world_size < 2:
        return 0.0
    return 2.0 * (world_size - 1) / world_size * nbytes * 8 / seconds


def _atomic_write(path, data):
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_checkpoint(directory, step, payload_bytes, host, rank, world_size, run_id, extra=None):
    """Checkpoint, then its manifest, each atomically: a manifest present means its checkpoint is complete."""
    os.makedirs(directory, exist_ok=True)
    base = "step-%08d-%s" % (step, host)
    ckpt_path = os.path.join(directory, base + ".pt")
    _atomic_write(ckpt_path, payload_bytes)
    manifest = {
        "step": step,
        "file": os.path.basename(ckpt_path),
        "size": len(payload_bytes),
        "sha256": hashlib.sha256(payload_bytes).hexdigest(),
        "host": host,
        "rank": rank,
        "world_size": world_size,
        "run_id": run_id,
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds"),
    }
    manifest.update(extra or {})
    manifest_path = os.path.join(directory, base + ".manifest.json")
    _atomic_write(manifest_path, (json.dumps(manifest, sort_keys=True, indent=1) + "\n").encode())
    return ckpt_path, manifest_path, manifest


# ----------------------------------------------------------------------------------------------
# torch part
# ----------------------------------------------------------------------------------------------
def _import_torch():
    import warnings
    # The CPU wheel warns when numpy is absent; the workload never uses numpy.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    import torch
    import torch.distributed as dist
    return torch, dist


class WanSync:
    """State of the WAN gradient sync hook: the sync plan, and what the current step all-reduced."""

    def __init__(self, plan, world_size):
        self.plan = plan
        self.world_size = world_size
        self._lock = threading.Lock()
        self._queue = None
        self.reset()

    def reset(self):
        with self._lock:
            self.bytes = 0
            self.first_start = None
            self.last_done = None

    def _started(self, nbytes):
        now = time.perf_counter()
        with self._lock:
            self.bytes += nbytes
            if self.first_start is None:
                self.first_start = now

    def _done(self):
        now = time.perf_counter()
        with self._lock:
            if self.last_done is None or now > self.last_done:
                self.last_done = now

    def span(self):
        with self._lock:
            if self.first_start is None or self.last_done is None:
                return 0.0
            return self.last_done - self.first_start

    def submit(self, tensor):
        """Run plan.allreduce(tensor) on the sync thread; returns a torch future. One thread, so every
        rank issues its collectives in the order DDP hands over the buckets (the same on every rank)."""
        import torch
        if self._queue is None:
            self._queue = queue.Queue()
            threading.Thread(target=self._serve, name="trainnet-wan-sync", daemon=True).start()
        future = torch.futures.Future()
        self._queue.put((tensor, future))
        return future

    def _serve(self):
        while True:
            tensor, future = self._queue.get()
            try:
                self.plan.allreduce(tensor)
            except Exception as exc:   # noqa: BLE001 -- handed to DDP, which raises it in backward
                future.set_exception(exc)
            else:
                self._done()
                future.set_result(tensor)


def chunked_allreduce(tensor, groups):
    """Sum-all-reduce a flat contiguous tensor in place as len(groups) chunks, one per process
    group, all in flight at once. Returns a future that completes with `tensor`."""
    import torch
    import torch.distributed as dist
    chunks = tensor.chunk(len(groups)) if tensor.numel() else ()
    futures = [dist.all_reduce(chunk, group=group, async_op=True).get_future() for chunk, group in zip(chunks, groups)]
    if not futures:
        done = torch.futures.Future()
        done.set_result(tensor)
        return done

    def all_done(fut):
        for chunk_future in fut.value():
            chunk_future.value()   # raises the chunk's error: a failed chunk must not pass as a sum
        return tensor
    return torch.futures.collect_all(futures).then(all_done)


class SyncPlan:
    """Who sums with whom.

    flat: chunk_groups span every rank; no site stage.
    site, site-ring: the site's ranks sum into their leader (the site's lowest rank) over site_group
    (None when the node is alone in its site), the leaders combine their sites' sums over
    chunk_groups (leaders only; empty elsewhere and when all ranks share one site), the leader
    broadcasts the result back. site: the leaders combine the sums by direct exchanges (exchange_sum:
    two sites swap the bucket, one WAN hop; three or more reduce-scatter and all-gather, two hops, 2/L
    of the bucket each way on each site pair's path). site-ring: the leaders all-reduce (Gloo's ring:
    2(L-1) dependent hops, 2(L-1)/L of the bucket through each leader's uplink to one neighbour)."""

    def __init__(self, topology, chunk_groups, groups_setting, site_group=None, leader=None, sites=None, leaders=None):
        self.topology = topology
        self.chunk_groups = chunk_groups
        self.groups_setting = groups_setting
        self.site_group = site_group
        self.leader = leader
        self.sites = sites
        self.leaders = leaders or []

    @property
    def asynchronous(self):
        """flat needs no thread: its chunks are one set of async collectives."""
        return self.topology == "flat"

    def allreduce(self, tensor):
        """Sum tensor over every rank, in place; blocks until done."""
        import torch.distributed as dist
        if self.site_group is not None:
            dist.reduce(tensor, dst=self.leader, group=self.site_group)
        if self.chunk_groups and self.topology == "site":
            exchange_sum(tensor, self.chunk_groups, self.leaders, dist.get_rank())
        elif self.chunk_groups:
            chunked_allreduce(tensor, self.chunk_groups).wait()
        if self.site_group is not None:
            dist.broadcast(tensor, src=self.leader, group=self.site_group)
        return tensor


def exchange_sum(tensor, groups, leaders, me):
    """Sum tensor over `leaders` in place by direct exchanges between them, chunk c over groups[c]
    (all chunks in flight at once), so that every leader ends with the same bits.

    Two leaders: each sends the other its whole tensor and adds what it receives.
    Three or more: a direct reduce-scatter, then a direct all-gather. Chunk c is cut into L parts,
    part j owned by leaders[j]; every leader sends part j to its owner, the owner adds the L copies in
    leader order and sends the sum to every other leader. Each directed leader pair then carries 2/L
    of the tensor instead of all of it (2/3 for three sites), over the same single WAN hop per stage.
    The receives of both stages are posted first: Gloo sends only after the receiver's ready notice
    has arrived, so the sums leave at once instead of one more one-way delay later."""
    import torch.distributed as dist
    peers = [leader for leader in leaders if leader != me]
    if not peers or not tensor.numel():
        return tensor
    if len(leaders) == 2:
        return _exchange_whole(tensor, groups, peers[0])
    mine = leaders.index(me)
    owner = {peer: leaders.index(peer) for peer in peers}
    stages = [(group, chunk.tensor_split(len(leaders))) for chunk, group in zip(tensor.tensor_split(len(groups)), groups)]
    scattered, gathered = [], []
    for group, parts in stages:
        own = parts[mine]
        incoming = {}   # peer -> (its copy of my part, receive)
        for peer in peers:
            if own.numel():
                buffer = own.new_empty(own.shape)
                incoming[peer] = (buffer, dist.irecv(buffer, peer, group=group, tag=0))
            theirs = parts[owner[peer]]
            if theirs.numel():
                buffer = theirs.new_empty(theirs.shape)
                gathered.append((theirs, buffer, dist.irecv(buffer, peer, group=group, tag=1)))
        scattered.append(incoming)
    scatter_sends = [dist.isend(parts[owner[peer]], peer, group=group, tag=0)
                     for group, parts in stages for peer in peers if parts[owner[peer]].numel()]
    gather_sends = []
    for (group, parts), incoming in zip(stages, scattered):
        own = parts[mine]
        if not own.numel():
            continue
        total = None
        for leader in leaders:
            if leader == me:
                part = own
            else:
                part, work = incoming[leader]
                work.wait()
            total = part.clone() if total is None else total.add_(part)
        own.copy_(total)
        gather_sends += [dist.isend(own, peer, group=group, tag=1) for peer in peers]
    for work in scatter_sends:   # before the sums overwrite the parts they send
        work.wait()
    for part, buffer, work in gathered:
        work.wait()
        part.copy_(buffer)
    for work in gather_sends:
        work.wait()
    return tensor


def _exchange_whole(tensor, groups, peer):
    """exchange_sum for two leaders: one WAN hop each way, the whole tensor. Float addition is
    commutative, so a + b on one leader and b + a on the other give the same bits."""
    import torch.distributed as dist
    received = tensor.new_empty(tensor.shape)
    works = []
    for chunk, into, group in zip(tensor.tensor_split(len(groups)), received.tensor_split(len(groups)), groups):
        if chunk.numel():
            works += [dist.isend(chunk, peer, group=group), dist.irecv(into, peer, group=group)]
    for work in works:
        work.wait()
    return tensor.add_(received)


def site_layout(sites):
    """sites[rank] -> ({site: [ranks]} in order of each site's lowest rank, [leader rank per site])."""
    members = {}
    for rank, site in enumerate(sites):
        members.setdefault(site, []).append(rank)
    return members, [ranks[0] for ranks in members.values()]


def gather_sites(dist, site):
    """Every rank's TRAINNET_SITE, by rank. (all_gather_object needs numpy, which the CPU wheel lacks.)"""
    import torch
    raw = site.encode("utf-8")
    mine = torch.zeros(SITE_NAME_MAX_BYTES + 1, dtype=torch.uint8)
    mine[0] = len(raw)
    if raw:
        mine[1:1 + len(raw)] = torch.tensor(list(raw), dtype=torch.uint8)
    everyone = [torch.zeros_like(mine) for rank in range(dist.get_world_size())]
    dist.all_gather(everyone, mine)
    return [bytes(t[1:1 + int(t[0])].tolist()).decode("utf-8") for t in everyone]


def make_sync_plan(dist, settings, timeout):
    """Build the process groups of a SyncPlan. Every rank creates every group, in the same order
    (torch requires it, members or not); the site names come from an all-gather of TRAINNET_SITE."""
    world = dist.get_world_size()
    count = settings["sync_groups"]
    if settings["sync_topology"] == "flat":
        return SyncPlan("flat", make_sync_groups(dist, list(range(world)), count, timeout), count)
    sites = gather_sites(dist, settings["site"])
    members, leaders = site_layout(sites)
    rank = dist.get_rank()
    site_group = None
    for ranks in members.values():
        if len(ranks) > 1:
            group = dist.new_group(ranks=ranks, backend="gloo", timeout=timeout)
            if rank in ranks:
                site_group = group
    chunk_groups = make_sync_groups(dist, leaders, count, timeout) if len(leaders) > 1 else []
    if rank not in leaders:
        chunk_groups = []
    return SyncPlan(settings["sync_topology"], chunk_groups, count, site_group=site_group, leader=members[sites[rank]][0],
                    sites=sites, leaders=leaders)


def wan_allreduce_hook(state, bucket):
    """DDP comm hook: average each gradient bucket over the sync plan.
    Divides before summing, as DDP's built-in reducer does, so two ranks give bit-identical results."""
    tensor = bucket.buffer()
    tensor.div_(state.world_size)
    state._started(tensor.numel() * tensor.element_size())
    if not state.plan.asynchronous:
        return state.submit(tensor)
    fut = chunked_allreduce(tensor, state.plan.chunk_groups)

    def finished(f):
        state._done()
        return f.value()
    return fut.then(finished)


def make_sync_groups(dist, ranks, count, timeout):
    """count Gloo groups over ranks (the default group first when ranks is every rank): each has its
    own TCP connections."""
    groups = [dist.group.WORLD] if len(ranks) == dist.get_world_size() else []
    while len(groups) < count:
        groups.append(dist.new_group(ranks=ranks, backend="gloo", timeout=timeout))
    return groups


def build_model(torch, width, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(64, width), torch.nn.ReLU(),
        torch.nn.Linear(width, width), torch.nn.ReLU(),
        torch.nn.Linear(width, 16))


def batch_for(torch, seed, rank, step, batch_size):
    """Generated data, a function of (seed, rank, step) only: reruns and restarts see the same batches."""
    gen = torch.Generator().manual_seed(seed * 1000003 + rank * 7919 + step)
    inputs = torch.randn(batch_size, 64, generator=gen)
    # A fixed smooth target the model can learn: the loss going down shows the sync is right.
    target = torch.sin(inputs[:, :16]) + 0.5 * inputs[:, 16:32]
    return inputs, target


def _identity(dist):
    env = os.environ
    return {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "local_rank": int(env.get("LOCAL_RANK", "0")),
        "host": socket.gethostname(),
        "run_id": env.get("TORCHELASTIC_RUN_ID", ""),
    }


def latest_valid_checkpoint(directory, seed, width):
    """(step, path) of the newest checkpoint here whose manifest matches its file (size, SHA-256)
    and this run's model; (0, None) when there is none. Files without a manifest are incomplete."""
    best = (0, None)
    try:
        names = os.listdir(directory)
    except OSError:
        return best
    for name in names:
        if not (name.endswith(".manifest.json") and not name.startswith(".")):
            continue
        try:
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                manifest = json.load(handle)
            path = os.path.join(directory, manifest["file"])
            with open(path, "rb") as handle:
                data = handle.read()
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if len(data) != manifest.get("size") or hashlib.sha256(data).hexdigest() != manifest.get("sha256"):
            continue
        if manifest.get("seed", seed) != seed or manifest.get("width", width) != width:
            continue
        if isinstance(manifest.get("step"), int) and manifest["step"] > best[0]:
            best = (manifest["step"], path)
    return best


def resume_state(args, torch, dist, ident):
    """Agree on the newest checkpoint any rank holds and give its state to every rank (after an
    elastic restart only the writer nodes have checkpoints). Returns (step, state or None)."""
    step, path = latest_valid_checkpoint(args.checkpoint_dir, args.seed, args.width) if args.checkpoint_dir else (0, None)
    steps = [torch.zeros(1, dtype=torch.int64) for _rank in range(ident["world_size"])]
    dist.all_gather(steps, torch.tensor([step], dtype=torch.int64))
    steps = [int(t) for t in steps]
    best = max(steps)
    if best == 0:
        return 0, None
    holder = steps.index(best)
    # Raw bytes as a uint8 tensor: broadcast_object_list needs numpy, which the CPU wheel lacks.
    size = torch.zeros(1, dtype=torch.int64)
    if ident["rank"] == holder:
        with open(path, "rb") as handle:
            data = handle.read()
        size[0] = len(data)
    dist.broadcast(size, src=holder)
    buffer = torch.frombuffer(bytearray(data), dtype=torch.uint8) if ident["rank"] == holder else torch.empty(int(size), dtype=torch.uint8)
    dist.broadcast(buffer, src=holder)
    data = ctypes.string_at(buffer.data_ptr(), buffer.numel())
    return best, dict(torch.load(io.BytesIO(data), weights_only=True), holder_rank=holder)


def train(args, settings, torch, dist, log):
    from torch.nn.parallel import DistributedDataParallel
    ident = _identity(dist)
    model = build_model(torch, args.width, args.seed)
    start_step, state = resume_state(args, torch, dist, ident) if args.resume else (0, None)
    if state:
        model.load_state_dict(state["model"])
        log.emit(dict(ident, event="resume", from_step=start_step, holder_rank=state["holder_rank"]))
    ddp = DistributedDataParallel(model, bucket_cap_mb=settings["bucket_cap_mb"])
    sync = None
    if not args.no_comm_hook:
        timeout = datetime.timedelta(seconds=settings["pg_timeout_sec"])
        sync = WanSync(make_sync_plan(dist, settings, timeout), ident["world_size"])
        ddp.register_comm_hook(sync, wan_allreduce_hook)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)
    if state:
        optimizer.load_state_dict(state["optimizer"])
    loss_fn = torch.nn.MSELoss()
    writer = settings["checkpoint_writer"] and ident["local_rank"] == 0 and args.checkpoint_every > 0
    step_times = []
    for step in range(start_step + 1, args.steps + 1):
        inputs, target = batch_for(torch, args.seed, ident["rank"], step, args.batch_size)
        if sync:
            sync.reset()
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(inputs), target)
        loss.backward()
        optimizer.step()
        step_time = time.perf_counter() - start
        step_times.append(step_time)
        # "ended" (wall clock) places a step beside outside events, such as a link cut.
        record = dict(ident, event="step", step=step, loss=round(loss.item(), 6), step_time_s=round(step_time, 6),
                      ended=round(time.time(), 3), sync_groups=0 if sync is None else sync.plan.groups_setting,
                      sync_topology=None if sync is None else sync.plan.topology)
        if sync:
            span = sync.span()
            record.update(allreduce_time_s=round(span, 6), allreduce_bytes=sync.bytes,
                          busbw_mbit_s=round(bus_bandwidth_bps(sync.bytes, span, ident["world_size"]) / 1e6, 3))
        else:
            record.update(allreduce_time_s=None, allreduce_bytes=None, busbw_mbit_s=None)
        log.emit(record)
        if writer and step % args.checkpoint_every == 0:
            buffer = io.BytesIO()
            torch.save({"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "seed": args.seed, "width": args.width}, buffer)
            path, manifest_path, manifest = write_checkpoint(args.checkpoint_dir, step, buffer.getvalue(), ident["host"],
                                                             ident["rank"], ident["world_size"], ident["run_id"],
                                                             {"seed": args.seed, "width": args.width})
            log.emit(dict(ident, event="checkpoint", step=step, path=path, manifest=manifest_path,
                          size=manifest["size"], sha256=manifest["sha256"]))
    ordered = sorted(step_times) or [0.0]
    log.emit(dict(ident, event="done", steps=args.steps, first_step=start_step + 1, median_step_time_s=round(ordered[len(ordered) // 2], 6),
                  params=sum(p.numel() for p in model.parameters())))
    return 0


def expected_pattern(torch, elements, world_size):
    """Rank r contributes (r+1) x (i mod 7 + 1): integers, so the float32 sum is exact in any
    order (below 2^24 for up to ~2000 ranks) and a misplaced chunk shows as a wrong element."""
    base = (torch.arange(elements, dtype=torch.int64) % 7 + 1).to(torch.float32)
    return base, base * (world_size * (world_size + 1) // 2)


def verify_allreduce(args, settings, torch, dist, log):
    ident = _identity(dist)
    rank, world = ident["rank"], ident["world_size"]
    timeout = datetime.timedelta(seconds=settings["pg_timeout_sec"])
    flat = make_sync_plan(dist, dict(settings, sync_topology="flat"), timeout)
    cases = [("default_group", SyncPlan("flat", flat.chunk_groups[:1], 1)), ("sync_groups", flat)]
    if settings["sync_topology"] != "flat":
        # Both site variants, whichever is configured: every path the hook can take is checked.
        cases += [(case, make_sync_plan(dist, dict(settings, sync_topology=topology), timeout))
                  for case, topology in (("site_ring_groups", "site-ring"), ("site_groups", "site"))]
    sizes = sorted({1, 1000, 65537, args.verify_elements})
    failures = []
    for round_no in range(args.verify_rounds):
        for elements in sizes:
            for label, plan in cases:
                n_groups = plan.groups_setting
                base, expected = expected_pattern(torch, elements, world)
                tensor = base * (rank + 1)
                dist.barrier()
                start = time.perf_counter()
                plan.allreduce(tensor)
                seconds = time.perf_counter() - start
                if args.fault_inject_rank == rank:
                    tensor[elements // 2] += 1
                bad = (tensor != expected).nonzero()
                nbytes = elements * 4
                log.emit(dict(ident, event="verify", round=round_no, case=label, topology=plan.topology, groups=n_groups, elements=elements,
                              bytes=nbytes, seconds=round(seconds, 6), ok=not bad.numel(),
                              busbw_mbit_s=round(bus_bandwidth_bps(nbytes, seconds, world) / 1e6, 3)))
                if bad.numel():
                    index = int(bad[0])
                    failures.append("%s with %d elements over %d group(s): %d element(s) wrong, first at %d: got %r, expected %r"
                                    % (label, elements, n_groups, bad.numel(), index, float(tensor[index]), float(expected[index])))
    # Every rank learns which ranks failed, so each exits non-zero with the same names.
    flags = torch.zeros(world, dtype=torch.int32)
    flags[rank] = 1 if failures else 0
    dist.all_reduce(flags)
    bad_ranks = [r for r in range(world) if flags[r]]
    for failure in failures:
        print("trainnet_workload: rank %d (%s): all-reduce mismatch: %s" % (rank, ident["host"], failure), file=sys.stderr, flush=True)
    log.emit(dict(ident, event="verify_done", ok=not bad_ranks, bad_ranks=bad_ranks))
    if bad_ranks:
        print("trainnet_workload: rank %d: verify-allreduce FAILED on rank(s) %s" % (rank, ", ".join(map(str, bad_ranks))),
              file=sys.stderr, flush=True)
        return EXIT_VERIFY
    return 0


def main(argv=None, env=None):
    env = os.environ if env is None else env
    args = build_parser().parse_args(argv)
    try:
        changes = preflight(env, local_addr=args.local_addr)
        settings = resolve_settings(args, env)
    except PreflightError as exc:
        print("trainnet_workload: preflight refused: %s" % exc, file=sys.stderr, flush=True)
        return EXIT_PREFLIGHT
    if args.preflight_only:
        print(json.dumps(dict(event="preflight", ok=True, gloo_socket_ifname=changes.get("GLOO_SOCKET_IFNAME", env.get("GLOO_SOCKET_IFNAME")),
                              **settings), sort_keys=True), flush=True)
        return 0
    env.update(changes)
    try:
        torch, dist = _import_torch()
    except ImportError as exc:
        print("trainnet_workload: cannot import torch (%s): install it (pip install torch==2.13.0)" % exc, file=sys.stderr, flush=True)
        return 1
    fields = {"rank": env.get("RANK", "0"), "local_rank": env.get("LOCAL_RANK", "0"), "host": socket.gethostname()}
    try:
        log_path = args.log_file.format(**fields) if args.log_file else None
        if args.checkpoint_dir:
            args.checkpoint_dir = args.checkpoint_dir.format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        print("trainnet_workload: --log-file/--checkpoint-dir: unknown placeholder %s (allowed: {rank}, {local_rank}, {host})" % exc,
              file=sys.stderr, flush=True)
        return EXIT_PREFLIGHT
    log = JsonLog(log_path)
    dist.init_process_group(backend="gloo", timeout=datetime.timedelta(seconds=settings["pg_timeout_sec"]))
    try:
        if args.verify_allreduce:
            return verify_allreduce(args, settings, torch, dist, log)
        return train(args, settings, torch, dist, log)
    finally:
        dist.destroy_process_group()
        log.close()


if __name__ == "__main__":
    EXIT_CODE = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's teardown: with several Gloo groups, torch 2.13 sometimes destroys a
    # still-joinable worker thread there (std::terminate, exit -6, seen 2 runs in 8 on loopback)
    # after the job has finished; every output is already flushed, fsynced and closed here.
    os._exit(EXIT_CODE)
