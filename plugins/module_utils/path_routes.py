# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pure logic behind the path_routes module: per-destination routes that carry a path's MTU.

A host whose interface MTU is larger than the path to one remote site sends segments that
path cannot carry; where the path black-holes ICMP, TCP stalls until MTU probing recovers
(tens of seconds at ocean RTTs). A route to that site's prefixes with the path's MTU makes
the kernel size segments for that path only, and its advertised MSS (advmss) makes the peer
send segments that fit too, whichever side opened the connection.

The module owns every route of one protocol number (``proto N`` in ``ip route``) in the main
table: wanted routes are added or replaced whole, its routes that are no longer wanted are
removed. Nothing here runs a command: it parses ``ip -j route show``, validates the wanted
routes, finds each route's next hop (the route the kernel uses today, the module's own left
out), plans the change and renders the diff. Standard library only; imports on Python 3.8+.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json

from ansible_collections.longhaul.trainnet.plugins.module_utils.config_value import is_unit_text, problem as value_problem
from ansible_collections.longhaul.trainnet.plugins.module_utils.mtu import MTU_MAX, MTU_MIN, MTU_MIN_IPV6

# Protocol numbers a route may be tagged with: 0-4 are the kernel's own (unspec, redirect,
# kernel, boot, static), the rest up to 255 belong to routing daemons and administrators.
PROTOCOL_MIN = 5
PROTOCOL_MAX = 255

# TCP/IP header bytes between an MTU and the MSS a host advertises for it.
IPV4_TCP_HEADERS = 40
IPV6_TCP_HEADERS = 60

# The TCP attributes a route may carry besides mtu/advmss: option name -> (ip keyword, key in
# ``ip -j`` metrics, smallest, largest). cwnd_clamp is rendered ``cwnd lock N``: without the
# lock the kernel ignores it; locked, it caps the congestion window of connections that way once
# the destination has a TCP metrics entry (tcp_init_metrics() reads the cap from there), which
# needs NO_METRICS_SAVE at 0.
TCP_ATTRIBUTES = {
    "initcwnd": ("initcwnd", "initcwnd", 1, 4096),
    "initrwnd": ("initrwnd", "initrwnd", 1, 4096),
    "cwnd_clamp": ("cwnd", "cwnd", 2, 65535),
}
CONGCTL = ("congctl", "congestion")
NO_METRICS_SAVE = "/proc/sys/net/ipv4/tcp_no_metrics_save"
ROUTE_KEYS = ("prefix", "mtu", "name", "congctl") + tuple(sorted(TCP_ATTRIBUTES))
# Metrics the module sets; any other metric on one of its routes is drift.
OWNED_METRICS = ("mtu", "advmss", "initcwnd", "initrwnd", "cwnd", "congestion")

ACTION_ADD = "add"
ACTION_REPLACE = "replace"
ACTION_DELETE = "delete"


def validate_prefix(prefix):
    """Error message for a wanted prefix, else None."""
    if not isinstance(prefix, str) or not prefix.strip():
        return "prefix %r is not an address prefix (e.g. 198.18.3.0/24)" % (prefix,)
    try:
        network = ipaddress.ip_network(prefix, strict=True)
    except ValueError as exc:
        return "prefix %r is not a network address with its length (%s)" % (prefix, exc)
    if network.prefixlen == 0:
        return ("prefix %s is the default route; path_routes manages routes to remote sites, "
                "not the default" % prefix)
    return None


def advmss_for(mtu, ipv6=False):
    """The MSS a host advertises when segments must fit ``mtu``."""
    return mtu - (IPV6_TCP_HEADERS if ipv6 else IPV4_TCP_HEADERS)


def validate_wanted(routes, protocol):
    """Error messages for the wanted routes and the protocol number (empty when all good)."""
    errors = []
    if not isinstance(protocol, int) or not PROTOCOL_MIN <= protocol <= PROTOCOL_MAX:
        errors.append("protocol must be an integer from %d to %d (0-4 belong to the kernel), got %r"
                      % (PROTOCOL_MIN, PROTOCOL_MAX, protocol))
    seen = {}
    for index, route in enumerate(routes):
        label = "routes[%d]" % index
        if not isinstance(route, dict):
            errors.append("%s must be a dict with prefix and mtu, got %r" % (label, route))
            continue
        unknown = sorted(set(route) - set(ROUTE_KEYS))
        if unknown:
            errors.append("%s has unknown keys %s (known: %s)" % (label, ", ".join(unknown), ", ".join(ROUTE_KEYS)))
        error = validate_prefix(route.get("prefix"))
        if error:
            errors.append("%s: %s" % (label, error))
            continue
        network = ipaddress.ip_network(route["prefix"])
        mtu = route.get("mtu")
        if mtu is None:
            pass  # no MTU of its own: the interface's
        elif isinstance(mtu, bool) or not isinstance(mtu, int) or not MTU_MIN <= mtu <= MTU_MAX:
            errors.append("%s (%s): mtu must be an integer from %d to %d, got %r"
                          % (label, route["prefix"], MTU_MIN, MTU_MAX, mtu))
        elif network.version == 6 and mtu < MTU_MIN_IPV6:
            errors.append("%s (%s): IPv6 needs an mtu of at least %d, got %d"
                          % (label, route["prefix"], MTU_MIN_IPV6, mtu))
        for option, (keyword, metric, low, high) in sorted(TCP_ATTRIBUTES.items()):
            value = route.get(option)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not low <= value <= high):
                errors.append("%s (%s): %s must be an integer from %d to %d, got %r"
                              % (label, route["prefix"], option, low, high, value))
        congctl = route.get("congctl")
        if congctl is not None and (not isinstance(congctl, str) or not congctl
                                    or not all(c.isalnum() or c == "_" for c in congctl)):
            errors.append("%s (%s): congctl must be a congestion control name such as bbr, got %r"
                          % (label, route["prefix"], congctl))
        name = route.get("name")
        if name is not None and not is_unit_text(name):
            # the name is a comment line of the boot unit (data_plane's link unit)
            errors.append("%s (%s): %s" % (label, route["prefix"], value_problem(name, "unit_text", "name")))
        key = str(network)
        if key in seen:
            errors.append("%s: prefix %s is also routes[%d]; give each prefix once"
                          % (label, key, seen[key]))
        seen[key] = index
    return errors


def congctl_problem(name, available_text, modules_dep_text=None):
    """Why the kernel would refuse congestion control ``name`` on a route, else None. A name
    not registered yet is fine when modules.dep has tcp_<name>: the kernel loads it on use."""
    available = (available_text or "").split()
    if name in available:
        return None
    loadable = False
    for line in (modules_dep_text or "").splitlines():
        module = line.split(":", 1)[0].rsplit("/", 1)[-1]
        if module.split(".ko", 1)[0] == "tcp_" + name:
            loadable = True
    if loadable:
        return None
    return ("congctl %s is not available in this kernel (available: %s; no tcp_%s module to load)"
            % (name, ", ".join(available) or "none", name))


def parse_locks(text):
    """``ip route show`` text -> {prefix: set of metrics set with 'lock'}; JSON output drops it."""
    locks = {}
    for line in (text or "").splitlines():
        words = line.split()
        if not words:
            continue
        dst = words[0]
        if dst == "default":
            continue
        try:
            prefix = str(ipaddress.ip_network(dst, strict=False))
        except ValueError:
            continue
        locked = {words[i - 1] for i, word in enumerate(words) if word == "lock" and i > 0}
        if locked:
            locks[prefix] = locked
    return locks


def parse_routes(text):
    """``ip -j route show`` (one family, main table) -> [{dst, gateway, dev, protocol, metrics}].

    ``dst`` is normalised to a network text ('default' -> 0.0.0.0/0 or ::/0); ``protocol`` is
    the text iproute2 prints (a name such as 'kernel' or a number) or '' for boot routes;
    ``metrics`` is one dict of every metric iproute2 reports (mtu, advmss, initcwnd, ...).
    Route types other than unicast (local, broadcast, unreachable, ...) are kept with ``type``.
    """
    data = json.loads(text or "[]")
    if not isinstance(data, list):
        raise ValueError("ip -j route show printed %s, not a list" % type(data).__name__)
    routes = []
    for entry in data:
        if not isinstance(entry, dict) or "dst" not in entry:
            continue
        dst = entry["dst"]
        if dst == "default":
            gateway = entry.get("gateway", "")
            dst = "::/0" if ":" in gateway else "0.0.0.0/0"
        elif "/" not in dst:
            dst = str(ipaddress.ip_network(dst))
        metrics = {}
        for item in entry.get("metrics") or []:
            if isinstance(item, dict):
                metrics.update(item)
        routes.append({
            "dst": str(ipaddress.ip_network(dst, strict=False)),
            "gateway": entry.get("gateway", ""),
            "dev": entry.get("dev", ""),
            "protocol": str(entry.get("protocol", "")),
            "type": entry.get("type", "unicast"),
            "metric": entry.get("metric", 0),
            "metrics": metrics,
        })
    return routes


def next_hop(prefix, live, protocol):
    """(gateway, dev) of the route the kernel would use for ``prefix`` without the module's own
    routes: the longest other unicast route that covers the whole prefix. None if none does."""
    network = ipaddress.ip_network(prefix)
    best = None
    for route in live:
        if route["protocol"] == str(protocol) or route["type"] != "unicast":
            continue
        covering = ipaddress.ip_network(route["dst"])
        if covering.version != network.version or not network.subnet_of(covering):
            continue
        key = (covering.prefixlen, -int(route["metric"] or 0))
        if best is None or key > best[0]:
            best = (key, route)
    if best is None:
        return None
    return best[1]["gateway"], best[1]["dev"]


STATE_KEYS = ("prefix", "gateway", "dev", "mtu", "advmss", "initcwnd", "initrwnd", "cwnd_clamp", "congctl")


def route_state(route):
    """The part of a route the module owns, as compared and shown in the diff."""
    return {key: route.get(key) for key in STATE_KEYS}


def _live_state(route, locked=frozenset()):
    metrics = route["metrics"]
    locked_cwnd = "cwnd" in locked
    other = sorted(k for k in metrics if k not in OWNED_METRICS)
    if "cwnd" in metrics and not locked_cwnd:
        other.append("cwnd (not locked)")
    other += sorted("%s lock" % k for k in locked if k != "cwnd")
    return {"prefix": route["dst"], "gateway": route["gateway"], "dev": route["dev"],
            "mtu": metrics.get("mtu"), "advmss": metrics.get("advmss"),
            "initcwnd": metrics.get("initcwnd"), "initrwnd": metrics.get("initrwnd"),
            "cwnd_clamp": metrics.get("cwnd") if locked_cwnd else None,
            "congctl": metrics.get("congestion"), "other_metrics": other}


def plan_routes(wanted, live, protocol, locks=None):
    """Plan the module's routes.

    ``wanted`` is the validated list of {prefix, mtu[, name, initcwnd, initrwnd, cwnd_clamp,
    congctl]}, ``live`` the parsed routes of the prefixes' families, ``locks`` parse_locks() of
    the module's routes. Returns {"routes": wanted with next hop and advmss, "actions": [{action,
    route, before}], "before": [...], "after": [...], "errors": [...], "changed": bool}.
    An error (no route to the prefix, a route of another owner with the same prefix) means
    nothing may change.
    """
    locks = locks or {}
    own = {r["dst"]: r for r in live if r["protocol"] == str(protocol)}
    others = {r["dst"]: r for r in live if r["protocol"] != str(protocol)}
    errors = []
    routes = []
    actions = []
    for item in wanted:
        prefix = str(ipaddress.ip_network(item["prefix"]))
        ipv6 = ipaddress.ip_network(prefix).version == 6
        if prefix in others:
            other = others[prefix]
            errors.append("a route to %s already exists (%s dev %s, protocol %s) and is not this "
                          "module's: remove it or leave that prefix out"
                          % (prefix, "via " + other["gateway"] if other["gateway"] else "connected",
                             other["dev"] or "?", other["protocol"] or "boot"))
            continue
        hop = next_hop(prefix, live, protocol)
        if hop is None:
            errors.append("no route covers %s (not even a default route): the host has no path "
                          "to it to give an MTU to" % prefix)
            continue
        route = {"prefix": prefix, "name": item.get("name") or prefix, "gateway": hop[0],
                 "dev": hop[1], "mtu": item.get("mtu"),
                 "advmss": advmss_for(item["mtu"], ipv6) if item.get("mtu") else None}
        for option in ("initcwnd", "initrwnd", "cwnd_clamp", "congctl"):
            route[option] = item.get(option)
        routes.append(route)
        current = own.get(prefix)
        if current is None:
            actions.append({"action": ACTION_ADD, "route": route, "before": None})
        else:
            before = _live_state(current, locks.get(prefix, frozenset()))
            if before["other_metrics"] or {k: before[k] for k in STATE_KEYS} != route_state(route):
                actions.append({"action": ACTION_REPLACE, "route": route, "before": before})
    wanted_prefixes = {str(ipaddress.ip_network(i["prefix"])) for i in wanted}
    for prefix in sorted(own):
        if prefix not in wanted_prefixes:
            actions.append({"action": ACTION_DELETE, "route": None,
                            "before": _live_state(own[prefix], locks.get(prefix, frozenset()))})
    before_states = sorted((_live_state(r, locks.get(r["dst"], frozenset())) for r in own.values()),
                           key=lambda r: r["prefix"])
    after_states = sorted((route_state(r) for r in routes), key=lambda r: r["prefix"])
    return {"routes": routes, "actions": actions if not errors else [],
            "before": before_states, "after": after_states, "errors": errors,
            "changed": bool(actions) and not errors}


def route_argv(ip, route, protocol, action=ACTION_REPLACE):
    """argv of the ip command that installs (replace, whole: metrics left out are removed) or
    removes (delete) one route. A metric of 0 or None is left out."""
    family = "-6" if ":" in route["prefix"] else "-4"
    if action == ACTION_DELETE:
        return [ip, family, "route", "delete", route["prefix"], "proto", str(protocol)]
    argv = [ip, family, "route", "replace", route["prefix"]]
    if route.get("gateway"):
        argv += ["via", route["gateway"]]
    argv += ["dev", route["dev"], "proto", str(protocol)]
    for metric in ("mtu", "advmss", "initcwnd", "initrwnd"):
        if route.get(metric):
            argv += [metric, str(route[metric])]
    if route.get("cwnd_clamp"):
        argv += ["cwnd", "lock", str(route["cwnd_clamp"])]
    if route.get("congctl"):
        argv += ["congctl", route["congctl"]]
    return argv


def covering_route(address, routes):
    """The wanted route (longest prefix) that covers ``address``, else None."""
    try:
        target = ipaddress.ip_address(address)
    except ValueError:
        return None
    best = None
    for route in routes:
        network = ipaddress.ip_network(route["prefix"])
        if network.version == target.version and target in network:
            if best is None or network.prefixlen > ipaddress.ip_network(best["prefix"]).prefixlen:
                best = route
    return best


def drift_lines(actions):
    """One line per route that is not as wanted, for remediation reports."""
    lines = []
    for item in actions:
        if item["action"] == ACTION_ADD:
            route = item["route"]
            lines.append("route %s: missing (want %s)" % (route["prefix"], describe(route)))
        elif item["action"] == ACTION_REPLACE:
            route, before = item["route"], item["before"]
            lines.append("route %s: %s -> %s" % (route["prefix"], describe(before), describe(route)))
        else:
            lines.append("route %s: not wanted any more (%s), would be removed"
                         % (item["before"]["prefix"], describe(item["before"])))
    return lines


def describe(state):
    """One route state as text: 'via GW dev D mtu M advmss A'."""
    parts = ["via %s" % state["gateway"] if state.get("gateway") else "connected",
             "dev %s" % state.get("dev"),
             "mtu %s" % (state.get("mtu") or "-"), "advmss %s" % (state.get("advmss") or "-")]
    for key, label in (("initcwnd", "initcwnd"), ("initrwnd", "initrwnd"),
                       ("cwnd_clamp", "cwnd lock"), ("congctl", "congctl")):
        if state.get(key):
            parts.append("%s %s" % (label, state[key]))
    extra = state.get("other_metrics")
    if extra:
        parts.append("also %s" % ",".join(extra))
    return " ".join(parts)


def render_state(states):
    """The text one side of the diff shows: one route per line."""
    return "".join("%s %s\n" % (s["prefix"], describe(s)) for s in states)
