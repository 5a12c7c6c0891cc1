#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: path_routes
short_description: Routes to remote sites that carry each path's MTU and advertised MSS
version_added: 0.2.0
description:
  - Installs one route per remote prefix whose C(mtu) is that path's MTU and whose C(advmss)
    is the MSS that fits it (MTU - 40, MTU - 60 for IPv6). The kernel then sizes TCP segments
    for that destination only, and the MSS this host advertises makes the peer send segments
    that fit as well, whichever side opened the connection. A path whose MTU is below the
    interface's and whose ICMP "fragmentation needed" is black-holed stops stalling.
  - The module owns every route of one protocol number (O(protocol), C(proto N) in
    C(ip route)) in the main table. O(routes) is the whole set. Wanted routes are added or
    replaced whole (a metric set by hand on one of them is drift and goes), routes of that
    protocol that are not wanted any more are removed. Other routes are never touched.
  - Each route takes the next hop (gateway and device) of the route the kernel uses for that
    prefix today, the module's own routes left out (usually the default route).
  - The module predicts first, then acts. It reads C(ip -j route show table main) per
    address family, plans the change and returns the plan in check mode. A prefix that already
    has a route of another owner, or that no route covers, fails before anything changes.
  - After a change each address in O(verify_peers) that a changed route covers is pinged with
    the Don't Fragment bit at that route's MTU. A peer that answers small pings but not
    full-size ones proves the path does not carry the MTU; every route change of this run is
    undone and the task fails naming the peer. A peer that answers no ping at all is reported
    with a warning.
author:
  - longhaul.trainnet maintainers (@longhaul)
requirements:
  - C(ip) from iproute2 with JSON output (C(ip -j), iproute2 4.13 or later).
  - C(ping) (iputils) for O(verify_peers).
options:
  routes:
    description:
      - The wanted routes, the whole set this module owns on the host. An empty list removes
        every route of O(protocol).
    type: list
    elements: dict
    required: true
    suboptions:
      prefix:
        description:
          - Destination network with its length, for example C(198.18.3.0/24); host bits must be
            zero. Not the default route.
        type: str
        required: true
      mtu:
        description:
          - Path MTU towards O(routes[].prefix) in bytes, 576 to 9000 (IPv6 at least 1280).
          - Give the smaller of the path MTU and the interface MTU; a route MTU above the
            interface's makes the kernel build packets the interface cannot send whole.
          - Omit to leave that route at the interface's MTU (no C(mtu) or C(advmss) metric),
            for a route that only carries TCP attributes.
        type: int
      name:
        description:
          - A label for reports, for example the link's name. Defaults to the prefix.
          - One line without control characters or backslash (it is a comment of the boot unit).
        type: str
      initcwnd:
        description:
          - Initial congestion window of new connections that way, in segments, 1 to 4096
            (C(initcwnd)). Omit for the kernel's 10.
        type: int
      initrwnd:
        description:
          - Initial receive window this host advertises to that prefix, in segments, 1 to 4096
            (C(initrwnd)); the socket's receive buffer (C(tcp_rmem)) still bounds it. Omit for
            the kernel's default.
        type: int
      cwnd_clamp:
        description:
          - Largest congestion window of connections that way, in segments, 2 to 65535
            (C(cwnd lock N)). Caps what a connection keeps in flight, for example near the
            path's bandwidth-delay product. Omit for no cap.
        type: int
      congctl:
        description:
          - Congestion control of connections that way (C(congctl)), whatever the host's
            default is; it must be available in the kernel or loadable as C(tcp_<name>).
        type: str
  protocol:
    description:
      - Protocol number that marks this module's routes, 5 to 255 (0-4 are the kernel's).
        Pick one that no routing daemon on the host uses.
    type: int
    default: 250
  verify_peers:
    description:
      - Addresses on the remote paths that must carry full-size packets at the route's MTU;
        each one a changed route covers is pinged with DF after the change (see the description).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    description: Returns the plan, the drift and the routes the real run would leave, without changing anything or sending probes.
    support: full
  diff_mode:
    description: Shows the module's routes before and after, one line per route.
    support: full
  platform:
    description: Linux hosts with iproute2.
    support: full
    platforms: linux
notes:
  - Every command runs with C(LANG=C) and a time limit.
  - Routes are runtime state; the data_plane role re-applies them at boot with its link unit.
  - A changed route is verified and undone right away when its path fails the DF probe; unlike
    M(longhaul.trainnet.interface_link) no timer is armed, because a route to a remote prefix
    keeps its next hop and only lowers the packet size towards it.
seealso:
  - module: longhaul.trainnet.interface_link
  - name: ip-route(8)
    description: Route attributes mtu and advmss.
    link: https://man7.org/linux/man-pages/man8/ip-route.8.html
"""

EXAMPLES = r"""
- name: Give the route to us-east the 1280-byte MTU of that path
  longhaul.trainnet.path_routes:
    routes:
      - {prefix: 198.18.3.0/24, mtu: 1280, name: cn-home<->us-east}
    verify_peers: [198.18.3.11]

- name: New connections to us-east start with a window for the path, and use BBR
  longhaul.trainnet.path_routes:
    routes:
      - {prefix: 198.18.3.0/24, mtu: 1400, initcwnd: 250, initrwnd: 250, congctl: bbr}

- name: Remove every route this module installed (protocol 250)
  longhaul.trainnet.path_routes:
    routes: []
"""

RETURN = r"""
routes:
  description:
    - The module's routes after the run (predicted in check mode), each with the C(command) that installs it
      (arguments quoted for a systemd C(ExecStart=) line).
  returned: always
  type: list
  elements: dict
  sample: [{prefix: 198.18.3.0/24, name: cn-home<->us-east, gateway: 198.18.1.1, dev: eth0, mtu: 1280, advmss: 1240,
            initcwnd: null, initrwnd: null, cwnd_clamp: null, congctl: null,
            command: /usr/sbin/ip -4 route replace 198.18.3.0/24 via 198.18.1.1 dev eth0 proto 250 mtu 1280 advmss 1240}]
actions:
  description: What changed (or would change), one entry per route, with C(action) add, replace or delete and the route C(before).
  returned: always
  type: list
  elements: dict
drift:
  description: One line per route that was not as wanted (missing, different, or no longer wanted).
  returned: always
  type: list
  elements: str
  sample: ["route 198.18.3.0/24: via 198.18.1.1 dev eth0 mtu 1400 advmss - -> via 198.18.1.1 dev eth0 mtu 1280 advmss 1240"]
verify_results:
  description: One entry per DF probe, with C(address), C(prefix), C(payload) and C(result) (ok, too_big, silent).
  returned: always
  type: list
  elements: dict
"""

import ipaddress
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import run_bounded
from ansible_collections.longhaul.trainnet.plugins.module_utils.config_value import systemd_quote
from ansible_collections.longhaul.trainnet.plugins.module_utils.interface_link import (
    PROBE_OK, PROBE_PEER_SILENT, SMALL_PAYLOAD, judge_probe, ping_argv, reported_path_mtu,
)
from ansible_collections.longhaul.trainnet.plugins.module_utils.mtu import icmp_payload
from ansible_collections.longhaul.trainnet.plugins.module_utils.kernel_capability import CC_AVAILABLE
from ansible_collections.longhaul.trainnet.plugins.module_utils.path_routes import (
    ACTION_DELETE, NO_METRICS_SAVE, congctl_problem, covering_route, drift_lines, parse_locks,
    parse_routes, plan_routes, render_state, route_argv, validate_wanted,
)

LIMIT_IP = 30
LIMIT_PING = 15


def read_text(path):
    """A /proc or /lib/modules file's text, '' when it cannot be read."""
    try:
        with open(path) as handle:
            return handle.read()
    except (IOError, OSError):
        return ""


class PathRoutes(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.protocol = module.params["protocol"]
        self.ip = module.get_bin_path("ip", required=True)

    def run(self, argv, limit=LIMIT_IP):
        res = run_bounded(argv, limit)
        if res.timed_out:
            self.module.fail_json(msg="%s did not finish within %d s" % (" ".join(argv), limit))
        return res.rc, res.out, res.err

    def read_live(self, families):
        """Parsed main-table routes of the given families (4, 6)."""
        live = []
        for family in sorted(families):
            rc, out, err = self.run([self.ip, "-%d" % family, "-j", "route", "show", "table", "main"])
            if rc != 0:
                if family == 6 and not any(":" in r["prefix"] for r in self.params["routes"]):
                    continue  # IPv6 disabled on the host and not asked for
                self.module.fail_json(msg="ip -%d -j route show table main exited %d: %s"
                                      % (family, rc, (err or out).strip()))
            try:
                live.extend(parse_routes(out))
            except ValueError as exc:
                self.module.fail_json(msg="cannot parse ip -j route show: %s" % exc)
        return live

    def read_locks(self, families):
        """Metrics set with 'lock' on the module's routes (only the text output shows them)."""
        locks = {}
        for family in sorted(families):
            rc, out, _err = self.run([self.ip, "-%d" % family, "route", "show", "table", "main",
                                      "proto", str(self.protocol)])
            if rc == 0:
                locks.update(parse_locks(out))
        return locks

    def congctl_errors(self, wanted):
        names = sorted({r["congctl"] for r in wanted if r.get("congctl")})
        if not names:
            return []
        available = read_text(CC_AVAILABLE)
        dep = read_text(os.path.join("/lib/modules", os.uname()[2], "modules.dep"))
        return [problem for problem in (congctl_problem(n, available, dep) for n in names) if problem]

    def apply(self, actions):
        """Run the actions in order; on a failed command undo the ones done and fail."""
        done = []
        for item in actions:
            if item["action"] == ACTION_DELETE:
                argv = route_argv(self.ip, item["before"], self.protocol, ACTION_DELETE)
            else:
                argv = route_argv(self.ip, item["route"], self.protocol)
            rc, out, err = self.run(argv)
            if rc != 0:
                self.undo(done)
                self.module.fail_json(msg="%s exited %d: %s; the routes changed before it were put back"
                                      % (" ".join(argv), rc, (err or out).strip()))
            done.append(item)
        return done

    def undo(self, done):
        """Put back what ``done`` changed, last first (best effort: this runs after a failure)."""
        for item in reversed(done):
            if item["before"] is None:
                self.run(route_argv(self.ip, item["route"], self.protocol, ACTION_DELETE))
            else:
                self.run(route_argv(self.ip, item["before"], self.protocol))

    def verify(self, done, routes):
        """DF probes at each changed route's MTU; undo everything and fail on a path too small."""
        changed = [item["route"] for item in done if item["route"] is not None]
        ping = None
        results = []
        for address in self.params["verify_peers"]:
            route = covering_route(address, changed)
            if route is None or not route["mtu"]:
                continue  # no route here, or none with an MTU of its own (interface_link's probe)
            if ping is None:
                ping = self.module.get_bin_path("ping")
                if not ping:
                    self.undo(done)
                    self.module.fail_json(msg="verify_peers needs ping (iputils-ping) on the host; "
                                              "the route changes were put back")
            ipv6 = ipaddress.ip_address(address).version == 6
            payload = icmp_payload(route["mtu"], ipv6)
            rc, out, err = self.run(ping_argv(ping, address, payload, ipv6), LIMIT_PING)
            small_rc = None
            if rc != 0:
                small_rc = self.run(ping_argv(ping, address, SMALL_PAYLOAD, ipv6,
                                              dont_fragment=False), LIMIT_PING)[0]
            verdict = judge_probe(small_rc, rc, out + err)
            results.append({"address": address, "prefix": route["prefix"], "payload": payload,
                            "result": verdict})
            if verdict == PROBE_PEER_SILENT:
                self.module.warn("verify_peers: %s answers no pings at all; the route to %s is not "
                                 "verified towards it" % (address, route["prefix"]))
            elif verdict != PROBE_OK:
                self.undo(done)
                hint = reported_path_mtu(out + err)
                self.module.fail_json(
                    msg="route %s with mtu %d does not reach %s: %d-byte packets (ping -M do -s %d) got "
                        "no reply while small pings did%s; every route change of this run was put back. "
                        "Give that path the MTU it carries." % (
                            route["prefix"], route["mtu"], address, route["mtu"], payload,
                            " (the path reports MTU %d)" % hint if hint else ""),
                    verify_results=results, routes=routes)
        return results

    def execute(self):
        wanted = self.params["routes"]
        errors = validate_wanted(wanted, self.protocol)
        for address in self.params["verify_peers"]:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                errors.append("verify_peers: %r is not an IP address" % address)
        if not errors:
            errors = self.congctl_errors(wanted)
        if errors:
            self.module.fail_json(msg="; ".join(errors))
        clamped = [r["prefix"] for r in wanted if r.get("cwnd_clamp")]
        if clamped and read_text(NO_METRICS_SAVE).strip() == "1":
            # tcp_init_metrics() copies a locked route cwnd only from the destination's TCP metrics
            # entry, which the kernel never writes with metrics saving off.
            self.module.warn("cwnd_clamp on %s has no effect while net.ipv4.tcp_no_metrics_save=1: the kernel "
                             "applies a route's cwnd cap through the TCP metrics it saves per destination"
                             % ", ".join(clamped))
        families = {4, 6}  # routes of this protocol may exist in either family
        before_live = self.read_live(families)
        plan = plan_routes(wanted, before_live, self.protocol, self.read_locks(families))
        if plan["errors"]:
            self.module.fail_json(msg="nothing was changed: " + "; ".join(plan["errors"]), plan=plan)
        for route in plan["routes"]:
            # The exact command that installs it, for boot units (quoted for ExecStart=) and reports.
            route["command"] = " ".join(systemd_quote(arg) for arg in route_argv(self.ip, route, self.protocol))
        result = dict(changed=plan["changed"], routes=plan["routes"], actions=plan["actions"],
                      drift=drift_lines(plan["actions"]), verify_results=[])
        if plan["changed"] and not self.module.check_mode:
            done = self.apply(plan["actions"])
            result["verify_results"] = self.verify(done, plan["routes"])
            again = plan_routes(wanted, self.read_live(families), self.protocol, self.read_locks(families))
            if again["actions"]:
                self.module.fail_json(msg="the routes did not stick: " + "; ".join(drift_lines(again["actions"])),
                                      routes=plan["routes"])
        if self.module._diff:
            result["diff"] = {"before_header": "routes of protocol %d (before)" % self.protocol,
                              "after_header": "routes of protocol %d (after)" % self.protocol,
                              "before": render_state(plan["before"]),
                              "after": render_state(plan["after"])}
        return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            routes=dict(type="list", elements="dict", required=True, options=dict(
                prefix=dict(type="str", required=True),
                mtu=dict(type="int"),
                name=dict(type="str"),
                initcwnd=dict(type="int"),
                initrwnd=dict(type="int"),
                cwnd_clamp=dict(type="int"),
                congctl=dict(type="str"),
            )),
            protocol=dict(type="int", default=250),
            verify_peers=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**PathRoutes(module).execute())


if __name__ == "__main__":
    main()
