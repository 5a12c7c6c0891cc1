# -*- coding: utf-8 -*-
# Copyright: (c) 2026, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Per-destination route filters: which remote prefixes get which route MTU and TCP attributes.

Documentation of each filter is in the YAML file of the same name next to this one
(site_path_routes.yml, effective_path_routes.yml). The routes they produce are what the
path_routes module installs (plugins/module_utils/path_routes.py holds its logic).
"""

from __future__ import annotations

import ipaddress
import math

from ansible.errors import AnsibleFilterError
from ansible_collections.longhaul.trainnet.plugins.plugin_utils import wan_model

# TCP/IP headers between an MTU and its MSS (IPv4; the module adds 20 more for IPv6).
TCP_IP_HEADERS = 40
# The timestamps option every Linux segment carries (net.ipv4.tcp_timestamps=1): the data in a
# segment is the MSS less these, and windows counted in segments must count data segments
# (772 segments of 1360 B make 1 MiB; of the 1348 B they carry, 8 KB short of it).
TCP_TIMESTAMP_OPTION = 12
# The kernel's initial window without a route attribute (RFC 6928).
KERNEL_INITCWND = 10
# path_routes' range for initcwnd/initrwnd.
WINDOW_MAX = 4096


def _prefixes(site, entry):
    """The LAN prefixes of one trainnet_sites entry ({lan: str or list})."""
    lan = entry.get("lan") if isinstance(entry, dict) else None
    prefixes = [lan] if isinstance(lan, str) else lan
    if not prefixes or not all(isinstance(p, str) and p for p in prefixes):
        raise AnsibleFilterError("site_path_routes: site %r has no lan prefix (trainnet_sites.%s.lan: "
                                 "a prefix or a list of prefixes)" % (site, site))
    for prefix in prefixes:
        try:
            ipaddress.ip_network(prefix, strict=True)
        except ValueError as exc:
            raise AnsibleFilterError("site_path_routes: trainnet_sites.%s.lan: %r is not a network "
                                     "prefix (%s)" % (site, prefix, exc)) from exc
    return prefixes


def site_path_routes(wan_links, sites, site):
    """Routes from one site to the others with each link's path MTU.

    ``wan_links`` are the link matrix entries ({sites: [a, b], delay_ms, jitter_ms, rate_mbit,
    mtu, ...}); ``sites`` maps a site to {lan: prefix(es)}; ``site`` is the host's own site.
    Every link of that site gives one route per LAN prefix of the other end: {name, prefix,
    mtu (when the link records one), bandwidth_mbps, rtt_ms (2 x (delay + jitter), when the
    link records them)}.
    """
    if not isinstance(sites, dict):
        raise AnsibleFilterError("site_path_routes: sites must be a dict of site -> {lan}, got %s"
                                 % type(sites).__name__)
    if site not in sites:
        raise AnsibleFilterError("site_path_routes: site %r is not in sites (%s)"
                                 % (site, ", ".join(sorted(sites))))
    # The WAN model checks every link; a route needs only the link's sites (its MTU, rate and
    # delay where the link records them).
    links, problems = wan_model.normalise(wan_links, site_names=list(sites), required=("sites",), defaults=False)
    if problems:
        raise AnsibleFilterError("site_path_routes: " + "; ".join(problems))
    routes = []
    for link in links:
        ends = link["sites"]
        if site not in ends:
            continue
        other = ends[1] if ends[0] == site else ends[0]
        path = {key: link[key] for key in ("mtu", "bandwidth_mbps", "rtt_ms") if key in link}
        for prefix in _prefixes(other, sites[other]):
            route = {"name": link["name"], "prefix": prefix}
            route.update(path)
            routes.append(route)
    return routes


def _measured(results, host):
    """[(address, mtu, other host)] of the pairs with a path MTU that ``host`` is an end of: measured from
    it (towards ``peer_address``) or towards it (back to ``source_address``, where the record has one).
    A path MTU holds both ways: the path's smallest hop carries neither direction's bigger packets.
    The smallest MTU of each address wins."""
    if not results:
        return []
    pairs = results.get("pairs") if isinstance(results, dict) else None
    if not isinstance(pairs, list):
        raise AnsibleFilterError("effective_path_routes: measured must be a measure results.json "
                                 "(a dict with a 'pairs' list)")
    smallest = {}
    for record in pairs:
        if not isinstance(record, dict):
            continue
        if record.get("source") == host:
            address, other = record.get("peer_address"), record.get("peer")
        elif record.get("peer") == host and host is not None:
            address, other = record.get("source_address"), record.get("source")
        else:
            continue
        mtu = (record.get("result") or {}).get("path_mtu_bytes")
        try:
            ipaddress.ip_address(address)
        except (TypeError, ValueError):
            continue  # a host name: the route needs an address
        if isinstance(mtu, int) and not isinstance(mtu, bool) and (address not in smallest or mtu < smallest[address][0]):
            smallest[address] = (mtu, other or address)
    return [(address, mtu, other) for address, (mtu, other) in smallest.items()]


def path_window_segments(route, mss, first_flight_bytes):
    """Initial window (segments) for a new connection on one path: enough to send
    ``first_flight_bytes`` in the first round trip, but never more than the path's
    bandwidth-delay product (a larger burst only fills the bottleneck queue) and never less than
    the kernel's 10. None when ``first_flight_bytes`` is 0 (the kernel's default)."""
    if not first_flight_bytes:
        return None
    segments = math.ceil(first_flight_bytes / mss)
    bdp = bdp_segments(route, mss)
    if bdp is not None:
        segments = min(segments, bdp)
    return max(KERNEL_INITCWND, min(segments, WINDOW_MAX))


def bdp_segments(route, mss):
    """The path's bandwidth-delay product in segments of ``mss`` bytes, None without a rate and RTT."""
    if not route.get("bandwidth_mbps") or not route.get("rtt_ms"):
        return None
    return math.ceil(route["bandwidth_mbps"] * 1e6 / 8 * route["rtt_ms"] / 1000 / mss)


def effective_path_routes(routes, interface_mtu=None, measured=None, host=None,
                          first_flight_bytes=0, cwnd_clamp_bdp=0, congctl=""):
    """The routes to install: inventory routes, with measured path MTUs and TCP attributes.

    Each route's MTU is the smallest known for its path: its own ``mtu``, any path MTU that
    ``measured`` (a measure results.json) found from ``host`` to an address inside the prefix,
    and ``interface_mtu`` (a route MTU above the interface's would make packets the interface
    cannot send whole). A measured peer that no inventory route covers gets a host route.
    Routes with the path's rate and RTT (``bandwidth_mbps``, ``rtt_ms``) also get initcwnd and
    initrwnd for ``first_flight_bytes`` (capped at the BDP) and, with ``cwnd_clamp_bdp`` > 0, a
    congestion window cap of that many BDPs; every route gets ``congctl`` when it is set.
    """
    for label, value in (("first_flight_bytes", first_flight_bytes), ("cwnd_clamp_bdp", cwnd_clamp_bdp)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise AnsibleFilterError("effective_path_routes: %s must be a number >= 0, got %r" % (label, value))
    if interface_mtu is not None and (isinstance(interface_mtu, bool) or not isinstance(interface_mtu, int)):
        raise AnsibleFilterError("effective_path_routes: interface_mtu must be an integer or None, got %r"
                                 % (interface_mtu,))
    result = []
    for index, route in enumerate(routes or []):
        if not isinstance(route, dict) or "prefix" not in route:
            raise AnsibleFilterError("effective_path_routes: route at index %d needs a prefix, got %r"
                                     % (index, route))
        try:
            network = ipaddress.ip_network(route["prefix"], strict=True)
        except (TypeError, ValueError) as exc:
            raise AnsibleFilterError("effective_path_routes: route at index %d: prefix %r is not a "
                                     "network prefix (%s)" % (index, route["prefix"], exc)) from exc
        result.append({"name": route.get("name") or route["prefix"], "prefix": str(network),
                       "mtu": route.get("mtu"), "network": network,
                       "bandwidth_mbps": route.get("bandwidth_mbps"), "rtt_ms": route.get("rtt_ms")})
    for address, mtu, peer in _measured(measured, host):
        target = ipaddress.ip_address(address)
        covering = [r for r in result if r["network"].version == target.version and target in r["network"]]
        if covering:
            best = max(covering, key=lambda r: r["network"].prefixlen)
            if best["mtu"] is None or mtu < best["mtu"]:
                best["mtu"] = mtu
                best["name"] = "%s (measured from %s)" % (best["name"], peer)
        else:
            network = ipaddress.ip_network(address)
            result.append({"name": "measured %s" % peer, "prefix": str(network), "mtu": mtu,
                           "network": network})
    out = []
    for route in result:
        mtu = route["mtu"]
        if interface_mtu is not None and (mtu is None or interface_mtu < mtu):
            mtu = interface_mtu
        entry = {"name": route["name"], "prefix": route["prefix"]}
        if mtu is not None:
            entry["mtu"] = mtu
        mss = (mtu or 1500) - TCP_IP_HEADERS - TCP_TIMESTAMP_OPTION
        window = path_window_segments(route, mss, first_flight_bytes)
        if window is not None:
            entry["initcwnd"] = entry["initrwnd"] = window
        bdp = bdp_segments(route, mss)
        if cwnd_clamp_bdp and bdp is not None:
            entry["cwnd_clamp"] = max(2, math.ceil(cwnd_clamp_bdp * bdp))
        if congctl:
            entry["congctl"] = congctl
        out.append(entry)
    return out


class FilterModule(object):
    """Per-destination path MTU filters of longhaul.trainnet."""

    def filters(self):
        return {
            "site_path_routes": site_path_routes,
            "effective_path_routes": effective_path_routes,
        }
