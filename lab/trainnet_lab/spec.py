"""The lab model (sites, hosts, WAN links) and its validation.

A LabSpec is built from a plain description (the `raw` dict below) that comes either from the lab
inventory (spec_from_inventory) or directly from Python (tests). Validation collects every problem,
each naming the site, host or link and the field, so `lab up` can refuse before creating anything.

raw = {
  "sites": {"cn-home": {"lan": "198.18.1.0/24"}, ...},
  "links": [{"sites": ["cn-home", "us-west"], "delay_ms": 75, "rate_mbit": 50, ...}, ...],
  "hosts": {"cn-gpu1": {"site": "cn-home", "address": "198.18.1.11", "groups": [...]}, ...},
  "seed": 42,
}
"""

from __future__ import annotations

import hashlib
import ipaddress
import numbers
import re
from dataclasses import asdict, dataclass

import yaml
from ansible_collections.longhaul.trainnet.plugins.plugin_utils import wan_model

from . import DEFAULT_LAB_NAME
from .inventory import Inventory

LAB_ADDRESS_SPACE = ipaddress.IPv4Network("198.18.0.0/15")  # RFC 2544 benchmarking range
DEFAULT_IMAGE = "localhost/trainnet-debian12:latest"
HOST_KINDS = ("container", "netns")
LAN_INTERFACE = "eth0"  # the LAN interface inside every lab host (data_plane_interface)
LAN_MTU = 1500
NAME_PATTERN = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
LAB_NAME_PATTERN = re.compile(r"^trainnet-lab[a-z0-9-]*$")
ROUTER_INFIX = "rt-"  # router namespaces are <lab>-rt-<site>; no host may be called rt-*

# Left out of the emulator's config while at their defaults, so that the config of a link that
# does not use them is what it was before they existed (`lab up` does not restart the emulator).
LOSS_MODEL_DEFAULTS = {"loss_model": "bernoulli", "loss_burst_packets": 1}


class SpecError(ValueError):
    """The lab description is invalid; .problems lists every problem found."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid lab description:\n  - " + "\n  - ".join(problems))


@dataclass(frozen=True)
class Site:
    name: str
    lan: str

    @property
    def network(self) -> ipaddress.IPv4Network:
        return ipaddress.IPv4Network(self.lan)

    @property
    def router_address(self) -> str:
        """The site router owns the first address of the LAN; hosts use it as default gateway."""
        return str(self.network.network_address + 1)


@dataclass(frozen=True)
class Host:
    name: str
    site: str
    address: str
    groups: tuple[str, ...] = ()
    # trainnet_lab_rate_mbit: a tbf cap on the traffic the site delivers to this host (0 = none),
    # e.g. an egress node whose path must not fill the site link.
    rate_mbit: float = 0.0
    # trainnet_lab_object_store: {shards, shard_kib}: `lab up` makes this host an HTTPS object
    # store (nginx, a lab CA) holding generated shards with known SHA-256 sums.
    object_store: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Link:
    sites: tuple[str, str]
    delay_ms: float
    rate_mbit: float
    jitter_ms: float = 0
    loss: float = 0.0
    queue_bytes: int = 0
    mtu: int = 1500
    icmp_blackhole: bool = False
    # How `loss` is spread over packets: bernoulli (independent) or gilbert_elliott (bursts of
    # mean length loss_burst_packets); see shaping.GilbertElliott.
    loss_model: str = "bernoulli"
    loss_burst_packets: float = 1

    @property
    def name(self) -> str:
        return f"{self.sites[0]}<->{self.sites[1]}"

    @property
    def effective_queue_bytes(self) -> int:
        return self.queue_bytes or wan_model.auto_queue_bytes(self.rate_mbit, self.delay_ms)

    @property
    def rtt_ms(self) -> float:
        return 2 * self.delay_ms

    def directed(self) -> list[dict]:
        """Both directions, in the form the emulator's config takes."""
        common = {"delay_ms": self.delay_ms, "jitter_ms": self.jitter_ms,
                  "rate_mbit": self.rate_mbit, "loss": self.loss,
                  "queue_bytes": self.effective_queue_bytes, "mtu": self.mtu,
                  "icmp_blackhole": self.icmp_blackhole,
                  **{k: getattr(self, k) for k, default in LOSS_MODEL_DEFAULTS.items()
                     if getattr(self, k) != default}}
        a, b = self.sites
        return [{"src": a, "dst": b, **common}, {"src": b, "dst": a, **common}]


@dataclass
class LabSpec:
    sites: dict[str, Site]
    hosts: dict[str, Host]
    links: list[Link]
    seed: int = 42
    name: str = DEFAULT_LAB_NAME
    host_kind: str = "container"
    image: str = DEFAULT_IMAGE

    # --- names of what the lab creates (all begin with the lab name) ---------------------------

    def host_netns(self, host: str) -> str:
        return f"{self.name}-{host}"

    def router_netns(self, site: str) -> str:
        return f"{self.name}-{ROUTER_INFIX}{site}"

    def container(self, host: str) -> str:
        return f"{self.name}-{host}"

    @staticmethod
    def router_veth(host: str) -> str:
        """Router-side end of a host's LAN veth (inside the router namespace; max 15 chars)."""
        name = f"v-{host}"
        return name if len(name) <= 15 else "v-" + hashlib.sha1(host.encode()).hexdigest()[:12]

    def hosts_in(self, site: str) -> list[Host]:
        return [h for h in self.hosts.values() if h.site == site]

    def link_between(self, a: str, b: str) -> Link | None:
        return next((link for link in self.links if set(link.sites) == {a, b}), None)

    # --- (de)serialisation -------------------------------------------------------------------

    def to_dict(self) -> dict:
        return {
            "name": self.name, "host_kind": self.host_kind, "image": self.image, "seed": self.seed,
            "sites": {n: {"lan": s.lan} for n, s in self.sites.items()},
            "hosts": {n: {"site": h.site, "address": h.address, "groups": list(h.groups),
                          # only when set, so a lab saved before these existed keeps its topology
                          **({"rate_mbit": h.rate_mbit} if h.rate_mbit else {}),
                          **({"object_store": dict(h.object_store)} if h.object_store else {})}
                      for n, h in self.hosts.items()},
            "links": [{**{k: v for k, v in asdict(link).items()
                          if k not in LOSS_MODEL_DEFAULTS or v != LOSS_MODEL_DEFAULTS[k]},
                       "sites": list(link.sites)} for link in self.links],
        }

    @classmethod
    def from_dict(cls, data: dict) -> LabSpec:
        return build_spec({k: data[k] for k in ("sites", "hosts", "links", "seed")},
                          name=data["name"], host_kind=data["host_kind"], image=data["image"])

    def topology(self) -> dict:
        """What cannot change under a running lab without rebuilding it (links can)."""
        data = self.to_dict()
        return {k: data[k] for k in ("name", "host_kind", "image", "sites", "hosts")}

    def emulator_config(self, state_dir: str) -> dict:
        return {
            "lab": self.name, "seed": self.seed, "tun_mtu": LAN_MTU,
            "status_file": f"{state_dir}/emulator-status.json",
            "pid_file": f"{state_dir}/emulator.pid",
            "control_socket": f"{state_dir}/control.sock",
            "runtime_file": f"{state_dir}/runtime-links.json",
            "sites": [{"name": s.name, "netns": self.router_netns(s.name), "lan": s.lan,
                       "router_address": s.router_address} for s in self.sites.values()],
            "links": [d for link in self.links for d in link.directed()],
        }

    def restricted_to(self, site_names: list[str]) -> LabSpec:
        unknown = [s for s in site_names if s not in self.sites]
        if unknown:
            raise SpecError([f"--sites: unknown site {s} (known: {', '.join(self.sites)})"
                             for s in unknown])
        keep = set(site_names)
        return LabSpec(
            sites={n: s for n, s in self.sites.items() if n in keep},
            hosts={n: h for n, h in self.hosts.items() if h.site in keep},
            links=[link for link in self.links if set(link.sites) <= keep],
            seed=self.seed, name=self.name, host_kind=self.host_kind, image=self.image)


# --- validation ---------------------------------------------------------------------------------

def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _validate_sites(raw_sites, problems: list[str]) -> dict[str, Site]:
    sites: dict[str, Site] = {}
    if not isinstance(raw_sites, dict) or not raw_sites:
        problems.append("trainnet_sites: expected a non-empty mapping of site name to {lan: ...}")
        return sites
    for name, body in raw_sites.items():
        where = f"site {name}"
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            problems.append(f"{where}: name must be lowercase letters, digits and '-'")
            continue
        lan = (body or {}).get("lan") if isinstance(body, dict) else None
        try:
            network = ipaddress.IPv4Network(str(lan))
        except ValueError:
            problems.append(f"{where}: lan = {lan!r} is not an IPv4 network such as 198.18.1.0/24")
            continue
        if network.prefixlen > 29:
            problems.append(f"{where}: lan = {lan} is too small (at most /29)")
            continue
        if not network.subnet_of(LAB_ADDRESS_SPACE):
            problems.append(f"{where}: lan = {lan} is outside {LAB_ADDRESS_SPACE} "
                            "(lab addresses come from the RFC 2544 benchmarking range)")
            continue
        for other in sites.values():
            if network.overlaps(other.network):
                problems.append(f"{where}: lan = {lan} overlaps site {other.name} ({other.lan})")
        sites[name] = Site(name, str(network))
    return sites


def _validate_link(index: int, raw, sites: dict[str, Site], problems: list[str],
                   given: set | None = None) -> Link | None:
    """One link of the matrix, checked by the collection's WAN model (the roles' filters read it
    through the same rules). `given`: the fields the user wrote (default: all of raw's)."""
    values, found = wan_model.link_problems(index, raw, set(sites), given)
    problems += found
    if values is None:
        return None
    pair = values["sites"]
    return Link(sites=(pair[0], pair[1]), delay_ms=values["delay_ms"],
                rate_mbit=values["rate_mbit"], jitter_ms=values["jitter_ms"], loss=values["loss"],
                queue_bytes=values["queue_bytes"], mtu=values["mtu"],
                icmp_blackhole=values["icmp_blackhole"], loss_model=values["loss_model"],
                loss_burst_packets=values["loss_burst_packets"])


RUNTIME_FIELDS = ("delay_ms", "jitter_ms", "rate_mbit", "loss", "loss_model", "loss_burst_packets",
                  "queue_bytes", "mtu", "icmp_blackhole")


def validate_runtime_settings(link_name: str, current: dict, settings: dict) -> list[str]:
    """Problems with changing a running link `a<->b` from `current` by `settings` (the same rules
    and messages as the inventory's, plus which fields a running link can change)."""
    where = f"link {link_name}"
    problems = [f"{where}: {field!r} cannot be changed on a running link (settable: "
                f"{', '.join(RUNTIME_FIELDS)})" for field in sorted(set(settings) - set(RUNTIME_FIELDS))]
    if problems:
        return problems
    pair = link_name.split("<->")
    _validate_link(0, {**current, **settings, "sites": pair}, dict.fromkeys(pair), problems,
                   given=set(settings))
    return problems


def _validate_hosts(raw_hosts, sites: dict[str, Site], problems: list[str]) -> dict[str, Host]:
    hosts: dict[str, Host] = {}
    owners: dict[str, str] = {}
    if not isinstance(raw_hosts, dict) or not raw_hosts:
        problems.append("hosts: the lab needs at least one host")
        return hosts
    for name, body in raw_hosts.items():
        where = f"host {name}"
        body = body or {}
        if not isinstance(name, str) or not NAME_PATTERN.match(name) or len(name) > 40:
            problems.append(f"{where}: name must be lowercase letters, digits and '-' (max 40)")
            continue
        if name.startswith(ROUTER_INFIX):
            problems.append(f"{where}: names beginning with {ROUTER_INFIX!r} are reserved for "
                            "site router namespaces")
            continue
        site_name, address = body.get("site"), body.get("address")
        ok = True
        if site_name is None:
            problems.append(f"{where}: trainnet_site is missing")
            ok = False
        elif site_name not in sites:
            problems.append(f"{where}: trainnet_site = {site_name!r} is not a known site "
                            f"(known: {', '.join(sites) or 'none'})")
            ok = False
        try:
            parsed = ipaddress.IPv4Address(str(address))
        except ValueError:
            problems.append(f"{where}: trainnet_lab_address = {address!r} is not an IPv4 address")
            continue
        if str(parsed) in owners:
            problems.append(f"{where}: trainnet_lab_address = {parsed} is already the address "
                            f"of host {owners[str(parsed)]}")
            ok = False
        owners.setdefault(str(parsed), name)
        if ok:
            site = sites[site_name]
            network = site.network
            if parsed not in network:
                problems.append(f"{where}: trainnet_lab_address = {parsed} is outside the LAN "
                                f"of site {site_name} ({site.lan})")
                ok = False
            elif parsed in (network.network_address, network.broadcast_address):
                problems.append(f"{where}: trainnet_lab_address = {parsed} is the network or "
                                f"broadcast address of {site.lan}")
                ok = False
            elif str(parsed) == site.router_address:
                problems.append(f"{where}: trainnet_lab_address = {parsed} is the site router's "
                                f"address on {site.lan}")
                ok = False
        rate = body.get("rate_mbit") or 0
        if not _is_number(rate) or rate < 0 or rate > 10000:
            problems.append(f"{where}: trainnet_lab_rate_mbit = {rate!r} must be a number of Mbit/s "
                            "in 0-10000 (0 = no cap)")
            ok = False
        store = body.get("object_store") or {}
        store_fields = {"shards": (1, 4096), "shard_kib": (1, 1048576)}
        if not isinstance(store, dict) or set(store) - set(store_fields) or (store and set(store) != set(store_fields)):
            problems.append(f"{where}: trainnet_lab_object_store must be a mapping with exactly "
                            f"{', '.join(store_fields)}")
            ok = False
        else:
            for key, (low, high) in store_fields.items():
                if key in store and (not isinstance(store[key], int) or isinstance(store[key], bool)
                                     or not low <= store[key] <= high):
                    problems.append(f"{where}: trainnet_lab_object_store.{key} = {store[key]!r} must be "
                                    f"an integer in {low}-{high}")
                    ok = False
        if ok:
            hosts[name] = Host(name, site_name, str(parsed), tuple(body.get("groups") or ()),
                               float(rate), tuple(sorted(store.items())))
    return hosts


def build_spec(raw: dict, *, name: str = DEFAULT_LAB_NAME, host_kind: str = "container",
               image: str = DEFAULT_IMAGE) -> LabSpec:
    """Validate a raw lab description; raise SpecError listing every problem."""
    problems: list[str] = []
    if not LAB_NAME_PATTERN.match(name or "") or len(name) > 40:
        problems.append(f"lab name {name!r} must begin with 'trainnet-lab' and use lowercase "
                        "letters, digits and '-' (max 40)")
    if host_kind not in HOST_KINDS:
        problems.append(f"host kind {host_kind!r} must be one of {', '.join(HOST_KINDS)}")
    sites = _validate_sites(raw.get("sites"), problems)
    links: list[Link] = []
    raw_links = raw.get("links") or []
    if not isinstance(raw_links, list):
        problems.append("trainnet_wan_links: expected a list of links")
        raw_links = []
    seen_pairs: dict[frozenset, str] = {}
    for index, raw_link in enumerate(raw_links):
        link = _validate_link(index, raw_link, sites, problems)
        if link is None:
            continue
        pair = frozenset(link.sites)
        if pair in seen_pairs:
            problems.append(f"link {link.name}: the sites are already joined by link "
                            f"{seen_pairs[pair]}")
            continue
        seen_pairs[pair] = link.name
        links.append(link)
    hosts = _validate_hosts(raw.get("hosts"), sites, problems)
    seed = raw.get("seed", 42)
    if not isinstance(seed, int) or isinstance(seed, bool):
        problems.append(f"trainnet_lab_seed = {seed!r} must be an integer")
    if problems:
        raise SpecError(problems)
    return LabSpec(sites=sites, hosts=hosts, links=links, seed=seed, name=name,
                   host_kind=host_kind, image=image)


# --- from the inventory -------------------------------------------------------------------------

def parse_link_override(text: str) -> tuple[tuple[str, str], dict]:
    """'cn-home,us-west:loss=0.01,delay_ms=10' -> (('cn-home', 'us-west'), {'loss': 0.01, ...})."""
    try:
        pair_text, settings_text = text.split(":", 1)
        a, b = [s.strip() for s in pair_text.replace("<->", ",").split(",")]
        settings = {}
        for item in settings_text.split(","):
            key, value = item.split("=", 1)
            settings[key.strip()] = yaml.safe_load(value)
    except ValueError as error:
        raise SpecError([f"--link {text!r}: expected SITE_A,SITE_B:field=value[,field=value]"]) \
            from error
    return (a, b), settings


def apply_link_overrides(raw_links: list, overrides: list[str]) -> list:
    links = [dict(link) if isinstance(link, dict) else link for link in raw_links]
    for text in overrides:
        (a, b), settings = parse_link_override(text)
        for link in links:
            if isinstance(link, dict) and set(link.get("sites") or ()) == {a, b}:
                link.update(settings)
                break
        else:
            links.append({"sites": [a, b], **settings})
    return links


def raw_from_inventory(inventory: Inventory, *, host_kind: str = "container",
                       name: str = DEFAULT_LAB_NAME) -> tuple[dict, list[str]]:
    """The raw lab description held by an inventory, plus inventory-level problems."""
    problems = []
    hosts = {}
    for host, hostvars in inventory.hosts.items():
        groups = inventory.groups_of(host)
        site = hostvars.get("trainnet_site")
        hosts[host] = {"site": site, "address": hostvars.get("trainnet_lab_address"),
                       "groups": groups}
        for var, key in (("trainnet_lab_rate_mbit", "rate_mbit"), ("trainnet_lab_object_store", "object_store")):
            if hostvars.get(var):
                hosts[host][key] = hostvars[var]
        if isinstance(site, str):
            expected_group = "site_" + site.replace("-", "_")
            for group in groups:
                if group.startswith("site_") and group != expected_group:
                    problems.append(f"host {host}: is in group {group} but trainnet_site = {site}")
        if host_kind == "container" and "ansible_host" in hostvars:
            container = f"{name}-{host}"
            if hostvars["ansible_host"] != container:
                problems.append(f"host {host}: ansible_host = {hostvars['ansible_host']!r} but the "
                                f"lab names its container {container!r}")
    raw = {"sites": inventory.all_vars.get("trainnet_sites"),
           "links": inventory.all_vars.get("trainnet_wan_links"),
           "seed": inventory.all_vars.get("trainnet_lab_seed", 42),
           "hosts": hosts}
    return raw, problems


def spec_from_inventory(inventory: Inventory, *, sites: list[str] | None = None,
                        link_overrides: list[str] = (), name: str = DEFAULT_LAB_NAME,
                        host_kind: str = "container", image: str = DEFAULT_IMAGE) -> LabSpec:
    raw, problems = raw_from_inventory(inventory, host_kind=host_kind, name=name)
    if link_overrides:
        raw["links"] = apply_link_overrides(raw.get("links") or [], list(link_overrides))
    try:
        spec = build_spec(raw, name=name, host_kind=host_kind, image=image)
    except SpecError as error:
        raise SpecError(problems + error.problems) from None
    if problems:
        raise SpecError(problems)
    return spec.restricted_to(sites) if sites else spec
