# -*- coding: utf-8 -*-
# Copyright: (c) 2026, longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Per-destination path MTU filters: which remote prefixes get which route MTU.

Documentation of each filter is in the YAML file of the same name next to this one
(site_path_routes.yml, effective_path_routes.yml). The routes they produce are what the
path_routes module installs (plugins/module_utils/path_routes.py holds its logic).
"""

from __future__ import annotations

import ipaddress

from ansible.errors import AnsibleFilterError


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

    ``wan_links`` are the link matrix entries ({sites: [a, b], mtu, ...}); ``sites`` maps a site
    to {lan: prefix(es)}; ``site`` is the host's own site. Every link of that site that records
    an ``mtu`` gives one route per LAN prefix of the other end: {name, prefix, mtu}.
    """
    if not isinstance(sites, dict):
        raise AnsibleFilterError("site_path_routes: sites must be a dict of site -> {lan}, got %s"
                                 % type(sites).__name__)
    if site not in sites:
        raise AnsibleFilterError("site_path_routes: site %r is not in sites (%s)"
                                 % (site, ", ".join(sorted(sites))))
    routes = []
    for index, link in enumerate(wan_links or []):
        ends = link.get("sites") if isinstance(link, dict) else None
        if not isinstance(ends, (list, tuple)) or len(ends) != 2:
            raise AnsibleFilterError("site_path_routes: WAN link at index %d: sites must be a list of "
                                     "two site names, got %r" % (index, ends))
        if site not in ends or link.get("mtu") is None:
            continue
        other = ends[1] if ends[0] == site else ends[0]
        if other not in sites:
            raise AnsibleFilterError("site_path_routes: WAN link %s<->%s names site %r, which sites "
                                     "does not have" % (ends[0], ends[1], other))
        mtu = link["mtu"]
        if isinstance(mtu, bool) or not isinstance(mtu, int):
            raise AnsibleFilterError("site_path_routes: WAN link %s<->%s: mtu must be an integer, got %r"
                                     % (ends[0], ends[1], mtu))
        for prefix in _prefixes(other, sites[other]):
            routes.append({"name": "%s<->%s" % (ends[0], ends[1]), "prefix": prefix, "mtu": mtu})
    return routes


def _measured(results, host):
    """[(address, mtu, peer)] of the pairs ``host`` measured as the source, with a path MTU."""
    if not results:
        return []
    pairs = results.get("pairs") if isinstance(results, dict) else None
    if not isinstance(pairs, list):
        raise AnsibleFilterError("effective_path_routes: measured must be a measure results.json "
                                 "(a dict with a 'pairs' list)")
    found = []
    for record in pairs:
        if not isinstance(record, dict) or record.get("source") != host:
            continue
        mtu = (record.get("result") or {}).get("path_mtu_bytes")
        address = record.get("peer_address")
        try:
            ipaddress.ip_address(address)
        except (TypeError, ValueError):
            continue  # a host name: the route needs an address
        if isinstance(mtu, int) and not isinstance(mtu, bool):
            found.append((address, mtu, record.get("peer", address)))
    return found


def effective_path_routes(routes, interface_mtu=None, measured=None, host=None):
    """The routes to install: inventory routes, with measured path MTUs filled in.

    Each route's MTU is the smallest known for its path: its own ``mtu``, any path MTU that
    ``measured`` (a measure results.json) found from ``host`` to an address inside the prefix,
    and ``interface_mtu`` (a route MTU above the interface's would make packets the interface
    cannot send whole). A measured peer that no inventory route covers gets a host route.
    """
    if interface_mtu is not None and (isinstance(interface_mtu, bool) or not isinstance(interface_mtu, int)):
        raise AnsibleFilterError("effective_path_routes: interface_mtu must be an integer or None, got %r"
                                 % (interface_mtu,))
    result = []
    for index, route in enumerate(routes or []):
        if not isinstance(route, dict) or "prefix" not in route or "mtu" not in route:
            raise AnsibleFilterError("effective_path_routes: route at index %d needs prefix and mtu, "
                                     "got %r" % (index, route))
        try:
            network = ipaddress.ip_network(route["prefix"], strict=True)
        except (TypeError, ValueError) as exc:
            raise AnsibleFilterError("effective_path_routes: route at index %d: prefix %r is not a "
                                     "network prefix (%s)" % (index, route["prefix"], exc)) from exc
        result.append({"name": route.get("name") or route["prefix"], "prefix": str(network),
                       "mtu": route["mtu"], "network": network})
    for address, mtu, peer in _measured(measured, host):
        target = ipaddress.ip_address(address)
        covering = [r for r in result if r["network"].version == target.version and target in r["network"]]
        if covering:
            best = max(covering, key=lambda r: r["network"].prefixlen)
            if mtu < best["mtu"]:
                best["mtu"] = mtu
                best["name"] = "%s (measured from %s)" % (best["name"], peer)
        else:
            network = ipaddress.ip_network(address)
            result.append({"name": "measured %s" % peer, "prefix": str(network), "mtu": mtu,
                           "network": network})
    for route in result:
        if interface_mtu is not None and interface_mtu < route["mtu"]:
            route["mtu"] = interface_mtu
        del route["network"]
    return result


class FilterModule(object):
    """Per-destination path MTU filters of longhaul.trainnet."""

    def filters(self):
        return {
            "site_path_routes": site_path_routes,
            "effective_path_routes": effective_path_routes,
        }
