"""The lab command: python3 lab/lab.py up|down|status|validate.

  up        build the lab from the inventory (idempotent: completes or repairs a lab that is up)
  down      remove everything the lab created (safe to repeat); exits 1 if anything is left
  status    hosts, links with emulator counters, emulator health; exits 1 when unhealthy
  link      change a running link without restarting the emulator, e.g.
              link cn-home,us-west down        (silent drop of every packet, both directions)
              link cn-home,us-west up
              link cn-home,us-west set loss=0.02 delay_ms=120
              link cn-home,us-west set loss_model=gilbert_elliott loss_burst_packets=4
              link cn-home,us-west reset       (back to the inventory's settings)
              link cn-home,us-west show
  validate  check the inventory's lab description without root or side effects
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import yaml

from . import DEFAULT_LAB_NAME, STATE_ROOT
from .inventory import InventoryError, read_inventory
from .lab import Lab, LabError
from .spec import SpecError, spec_from_inventory

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_INVENTORY = REPO_ROOT / "inventories" / "lab"


def _spec_from_args(args):
    inventory = read_inventory(args.inventory)
    sites = [s.strip() for s in args.sites.split(",") if s.strip()] if args.sites else None
    return spec_from_inventory(inventory, sites=sites, link_overrides=args.link or [],
                               name=args.name, host_kind=args.hosts_as, image=args.image)


def _lab_for_existing(args) -> Lab:
    """down/status work from the state of a lab that is up; fall back to the inventory."""
    try:
        return Lab.from_state(args.name, args.state_root)
    except LabError:
        return Lab(_spec_from_args(args), args.state_root)


def loss_text(settings) -> str:
    """'loss 0.01', or with the bursty model 'loss 0.02 gilbert_elliott burst 4' (settings: a
    dict, or a spec Link; absent fields come from an emulator older than the loss models)."""
    get = settings.get if isinstance(settings, dict) else lambda key, default=None: getattr(
        settings, key, default)
    text = f"loss {get('loss'):g}"
    if get("loss_model", "bernoulli") != "bernoulli":
        text += f" {get('loss_model')} burst {get('loss_burst_packets'):g}"
    return text


def cmd_validate(args) -> int:
    spec = _spec_from_args(args)
    print(f"{args.inventory}: {len(spec.sites)} sites, {len(spec.hosts)} hosts, "
          f"{len(spec.links)} links: valid")
    for link in spec.links:
        print(f"  {link.name}: {link.delay_ms} ms one way (RTT {link.rtt_ms} ms), "
              f"{link.rate_mbit} Mbit/s, {loss_text(link)}, queue {link.effective_queue_bytes} B, "
              f"MTU {link.mtu}{' (ICMP black hole)' if link.icmp_blackhole else ''}")
    return 0


def cmd_up(args) -> int:
    spec = _spec_from_args(args)
    lab = Lab(spec, args.state_root)
    lab.up()
    kind = "containers" if spec.host_kind == "container" else "bare namespaces"
    print(f"lab {spec.name} is up: {len(spec.sites)} sites, {len(spec.hosts)} hosts "
          f"({kind}), {len(spec.links)} WAN links.")
    print(f"  status: python3 lab/lab.py status --name {spec.name}")
    print(f"  down:   python3 lab/lab.py down --name {spec.name}")
    return 0


def cmd_down(args) -> int:
    lab = _lab_for_existing(args)
    leftovers = lab.down()
    if leftovers:
        print("NOT clean, still present:\n  - " + "\n  - ".join(leftovers), file=sys.stderr)
        return 1
    print(f"lab {lab.spec.name} is down: no namespace, TUN, container or emulator process left.")
    return 0


def _format_count(value) -> str:
    return "-" if value is None else f"{value}"


def print_status(report: dict) -> None:
    print(f"lab {report['name']}: {'up' if report['up'] else 'down'}"
          f"{'' if report.get('complete', True) or not report['up'] else ' (incomplete)'}")
    if not report["up"]:
        return
    emulator = report["emulator"]
    print(f"emulator: {emulator['health']} (pid {emulator['pid'] or '-'}, "
          f"status age {_format_count(emulator.get('status_age_s'))} s, log {emulator['log']})")
    print("\nhosts:")
    print(f"  {'host':<14}{'site':<10}{'address':<16}{'namespace':<30}"
          + ("container" if report["host_kind"] == "container" else ""))
    for host in report["hosts"]:
        ns = host["netns"] + ("" if host["netns_exists"] else " (MISSING)")
        print(f"  {host['host']:<14}{host['site']:<10}{host['address']:<16}{ns:<30}"
              + (host.get("container_state", "") if report["host_kind"] == "container" else ""))
    print("\nlinks:")
    header = (f"  {'direction':<20}{'config':<44}{'rx pkts':>10}{'tx pkts':>10}{'Mbit/s':>8}"
              f"{'loss':>7}{'queue':>7}{'mtu':>6}{'icmp':>6}")
    print(header + f"{'down':>8}")
    for link in report["links"]:
        config = (f"{'DOWN ' if link.get('down') else ''}{link['delay_ms']:g}ms "
                  f"{link['rate_mbit']:g}Mbit {loss_text(link)} "
                  f"mtu {link['mtu']}{' bh' if link['icmp_blackhole'] else ''}")
        for direction, c in link["directions"].items():
            print(f"  {direction:<20}{config:<44}{_format_count(c.get('rx_packets')):>10}"
                  f"{_format_count(c.get('tx_packets')):>10}{_format_count(c.get('tx_mbit_per_s')):>8}"
                  f"{_format_count(c.get('drop_loss')):>7}{_format_count(c.get('drop_queue')):>7}"
                  f"{_format_count(c.get('drop_mtu')):>6}"
                  f"{_format_count(c.get('icmp_frag_needed_sent')):>6}"
                  f"{_format_count(c.get('drop_down')):>8}")
    print("  (drops by cause: loss, queue = drop-tail, mtu = over the path MTU, down = link cut "
          "with `lab link`; icmp = frag-needed sent)")
    bursty = [f"{direction} {c['drop_loss'] / c['loss_bursts']:.2f}"
              for link in report["links"] for direction, c in link["directions"].items()
              if c.get("loss_bursts")]
    if bursty:
        print("  mean loss burst (packets): " + ", ".join(bursty))
    changed = {link["link"]: link["runtime_change"] for link in report["links"]
               if link.get("runtime_change")}
    for name, change in changed.items():
        print(f"  {name} changed at runtime (lab link ... reset undoes it): "
              + ", ".join(f"{k}={v}" for k, v in change.items()))
    overflow = {r["site"]: r["tun"]["overflow_drops"] for r in report["routers"]
                if r.get("tun") and r["tun"].get("overflow_drops")}
    if overflow:
        print("  packets dropped before the emulator read them (emulator overloaded): "
              + ", ".join(f"{site} {count}" for site, count in overflow.items()))
    if report["problems"]:
        print("\nPROBLEMS:\n  - " + "\n  - ".join(report["problems"]))
    else:
        print("\nhealthy")


def cmd_status(args) -> int:
    lab = _lab_for_existing(args)
    report = lab.status()
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print_status(report)
    return 0 if report.get("healthy") else 1


LINK_ACTIONS = ("down", "up", "set", "reset", "show")


def parse_link_settings(items: list[str]) -> dict:
    """['loss=0.02', 'delay_ms=120,jitter_ms=2'] -> {'loss': 0.02, 'delay_ms': 120, ...}."""
    settings = {}
    for item in (part for text in items for part in text.split(",") if part.strip()):
        key, separator, value = item.partition("=")
        if not separator or not key.strip():
            raise SpecError([f"link set: {item!r} is not FIELD=VALUE "
                             "(e.g. loss=0.02 delay_ms=120)"])
        settings[key.strip()] = yaml.safe_load(value)
    return settings


def _describe_link(name: str, settings: dict, change: dict | None) -> str:
    state = "DOWN (every packet dropped, both directions)" if settings.get("down") else "up"
    text = (f"link {name}: {state}; {settings['delay_ms']:g} ms one way, jitter "
            f"{settings['jitter_ms']:g} ms, {settings['rate_mbit']:g} Mbit/s, "
            f"{loss_text(settings)}, queue {settings['queue_bytes']} B, mtu {settings['mtu']}"
            f"{' (ICMP black hole)' if settings['icmp_blackhole'] else ''}")
    changed = {k: v for k, v in (change or {}).items() if k != "sites"}
    return text + (f"\n  changed at runtime: {changed}" if changed
                   else "\n  as in the inventory")


def cmd_link(args) -> int:
    lab = Lab.from_state(args.name, args.state_root)
    pair = [s.strip() for s in args.link_sites.replace("<->", ",").split(",") if s.strip()]
    if len(pair) != 2:
        raise SpecError([f"link: {args.link_sites!r} must name two sites, e.g. cn-home,us-west"])
    if args.action != "set" and args.settings:
        raise SpecError([f"link {args.action}: takes no FIELD=VALUE (use `set`)"])
    if args.action == "set" and not args.settings:
        raise SpecError(["link set: give at least one FIELD=VALUE, e.g. loss=0.02 delay_ms=120"])
    pid = lab.emulator_pid()
    if args.action == "show":
        name = lab.link_name(*pair)
        reply = lab.show_links()
        print(_describe_link(name, reply["links"][name][name.replace("<->", "->")],
                             reply["runtime"].get(name)))
        return 0
    if args.action == "reset":
        reply = lab.reset_link(*pair)
    elif args.action in ("down", "up"):
        reply = lab.set_link(*pair, down=args.action == "down")
    else:
        reply = lab.set_link(*pair, **parse_link_settings(args.settings))
    name = reply["link"]
    print(_describe_link(name, reply["directions"][name.replace("<->", "->")], reply["runtime"]))
    print(f"  applied by emulator pid {pid} (not restarted); counters: "
          f"python3 lab/lab.py status --name {args.name}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lab", description=__doc__.split("\n\n", maxsplit=1)[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-i", "--inventory", default=str(DEFAULT_INVENTORY),
                        help="lab inventory directory or file (default: inventories/lab)")
    common.add_argument("--sites", help="build only these sites, comma separated "
                                        "(and the links between them)")
    common.add_argument("--link", action="append", metavar="A,B:FIELD=VALUE[,FIELD=VALUE]",
                        help="override (or add) a link's fields, e.g. "
                             "'cn-home,us-west:loss=0.01,delay_ms=10'; repeatable")
    common.add_argument("--name", default=DEFAULT_LAB_NAME,
                        help=f"lab name, prefix of everything it creates (default {DEFAULT_LAB_NAME})")
    common.add_argument("--hosts-as", choices=("container", "netns"), default="container",
                        help="hosts as podman containers (default) or bare network namespaces")
    common.add_argument("--image", default=os.environ.get("TRAINNET_IMAGE",
                                                          "localhost/trainnet-debian12:latest"))
    common.add_argument("--state-root", default=STATE_ROOT, help=argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("up", parents=[common], help="build the lab (idempotent)").set_defaults(func=cmd_up)
    sub.add_parser("down", parents=[common], help="remove the lab").set_defaults(func=cmd_down)
    status = sub.add_parser("status", parents=[common], help="show hosts, links, emulator health")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)
    link = sub.add_parser("link", parents=[common],
                          help="cut, restore or change a running link (emulator keeps running)")
    link.add_argument("link_sites", metavar="SITE_A,SITE_B")
    link.add_argument("action", choices=LINK_ACTIONS)
    link.add_argument("settings", nargs="*", metavar="FIELD=VALUE",
                      help="for set: delay_ms, jitter_ms, rate_mbit, loss, loss_model (bernoulli "
                           "or gilbert_elliott), loss_burst_packets (mean burst, gilbert_elliott), "
                           "queue_bytes (0 = one BDP), mtu, icmp_blackhole")
    link.set_defaults(func=cmd_link)
    sub.add_parser("validate", parents=[common], help="check the inventory only").set_defaults(
        func=cmd_validate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SpecError as error:
        if args.command == "link":
            print("lab link: refused, the link is unchanged:\n  - " + "\n  - ".join(error.problems),
                  file=sys.stderr)
        else:
            print(f"lab {args.command}: refused, nothing was created.\n{error}", file=sys.stderr)
        return 2
    except (InventoryError, LabError) as error:
        print(f"lab {args.command}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
