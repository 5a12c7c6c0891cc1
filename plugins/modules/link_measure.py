#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: link_measure
short_description: Measure RTT, loss, throughput, path MTU and TCP Fast Open from this host to a peer
version_added: 0.1.0
description:
  - Runs on the source host of a link and measures the path to O(peer) - round-trip time, jitter
    and loss, TCP throughput and retransmissions with iperf3, the path MTU with DF-flagged probes
    (and whether the path is a PMTU black hole), and the time TCP Fast Open saves - then compares
    the results with the optional thresholds.
  - The measurements run in this order - RTT and loss, path MTU, TCP Fast Open, iperf3 - so the
    bulk transfer does not disturb the others.
  - B(RTT and loss) come from C(ping -q -c ping_count -i ping_interval) (the summary line, with
    C(LANG=C)); RV(rtt_source) is then V(icmp). When every echo request is lost (ICMP filtered),
    the module falls back to timing O(tcp_connect_count) TCP connects to O(tcp_port) (the time from
    SYN to the SYN-ACK, or to the RST of a closed port, both are one round trip); RV(rtt_source)
    is then V(tcp_connect). The connections are reset right after the handshake. RV(jitter_ms) is the
    mean deviation (ping's C(mdev)).
  - B(Throughput) comes from C(iperf3 -c peer -p iperf3_port -t duration -J [-C congestion_control]).
    An iperf3 server must listen on the peer; the module does not start one. The connect waits
    7.5 s (three SYNs at an initial RTO of 1 s, doubling), and a connect that still timed out is
    tried once more while O(timeout) allows. A failing iperf3 (no server, server busy, unknown
    congestion control) makes the module fail with iperf3's error and a hint, after the other
    measurements ran.
  - B(Path MTU) is found by a binary search between 576 (1280 for IPv6) and O(pmtu_max) with
    C(ping -M do) (DF set, two echo requests per size, each probe waiting 0.3 to 1 second depending
    on the RTT; a size that got neither a reply nor an ICMP error is probed once more, so two
    echo requests lost on a lossy link do not pass for a packet too big). An MTU named by an ICMP C(fragmentation needed) error or by the local stack is
    tried next, so a path that sends those errors is measured in two or three probes; at most
    12 probes run for 576 to 1500. RV(pmtu_blackhole) is V(true) when a size above the path MTU
    vanished without a reply and without an ICMP error. The path MTU is only probed when the peer
    answers ICMP echo.
  - B(TCP Fast Open), with O(tfo_port) set, compares the time to the first byte of a short
    request/response on a fresh connection with TFO (C(sendto) with C(MSG_FASTOPEN), after one
    priming connection that fetches the cookie) and without it, and reports the local
    C(TcpExt TCPFastOpen*) counter deltas from C(/proc/net/netstat). The peer must run a
    TFO-enabled server on O(tfo_port) that answers a request with at least one byte
    (M(longhaul.trainnet.tfo_server), with the peer's C(net.ipv4.tcp_fastopen) including the
    server bit 2); with O(tfo_port=0) only the sysctl and the counters are reported.
  - Each TFO request waits for two retransmission timeouts (1 s, then 2 s) plus four RTTs and a
    request that got no answer (or a reset) is tried up to three times, so one lost SYN on a
    lossy long path does not fail the timing. A timing that still fails is a sub-measurement
    failure - RV(tfo.error) and a warning - and does not fail the module; the link's RTT, loss,
    path MTU and throughput are what the thresholds judge.
  - 'B(Thresholds) are checked after measuring. When any is missed, or a measurement failed, the
    module fails with one message naming every missed threshold with the measured value, for
    example C(thresholds missed for peer 198.18.2.10: min_throughput_mbps 60 > measured 48.2;
    max_loss_pct 0.3 < measured 0.52). All results are returned in the failure as well.'
  - With O(textfile_dir), the results are written as Prometheus metrics for the node_exporter
    textfile collector to C(<textfile_dir>/trainnet_link_<peer>.prom) (characters other than
    letters, digits, C(.), C(_) and C(-) in the peer become C(_)), atomically (a temporary file in
    the same directory, then renamed). This file is the module's only side effect. It is a report,
    not managed state, so C(changed) is always V(false). In check mode the measurements run (they
    only send probe traffic) but the file is not written.
  - Every external command runs with C(LANG=C) and its own deadline, enforced by the module
    itself (SIGINT for ping so it prints its statistics, SIGTERM otherwise, SIGKILL 2 s later), so
    no process outlives the module; O(timeout) bounds the whole measurement, and the steps before
    iperf3 stop short of the O(duration) + 10 seconds iperf3 needs.
options:
  peer:
    description:
      - Address or name of the far end. A name is resolved once and every measurement uses the
        same address (RV(peer_address)).
    type: str
    required: true
  ping_count:
    description:
      - Number of echo requests for RTT and loss. With the default interval 200 probes take about
        one second; a loss of one probe is 0.5 percent.
      - Below about 10 ms iputils C(ping) sends slower than O(ping_interval) once the replies
        come back after a long RTT (about 9 ms per probe at 70-150 ms RTT), so the ping may run
        for O(ping_count) x max(3 x O(ping_interval), 0.015) + 6 seconds, but no longer than
        O(timeout) leaves after reserving O(duration) + 5 seconds for iperf3. A ping stopped at
        that limit (with SIGINT) still gives RTT and loss from the probes it sent (the ones in
        flight are not counted as lost) and a warning; raise O(timeout) for long runs.
    type: int
    default: 200
  ping_interval:
    description:
      - Seconds between echo requests (C(ping -i)). Values below 0.2 need root or an iputils newer
        than 2021 (minimum 0.002 there); the module runs as root.
    type: float
    default: 0.005
  tcp_port:
    description:
      - TCP port timed for the RTT fallback when the peer does not answer ICMP echo. An open port
        (SYN-ACK) and a closed port (RST) both give a round trip; a filtered port does not.
    type: int
    default: 22
  tcp_connect_count:
    description:
      - Number of TCP connects of the RTT fallback. Kept small because each one is a connection
        the service on O(tcp_port) sees (sshd logs them); the fallback stops after three
        unanswered attempts in a row.
    type: int
    default: 10
  iperf3:
    description:
      - Measure throughput with iperf3 (needs C(iperf3) here and an iperf3 server on the peer).
    type: bool
    default: true
  iperf3_port:
    description:
      - Port of the iperf3 server on the peer.
    type: int
    default: 5201
  duration:
    description:
      - Seconds iperf3 sends (C(iperf3 -t)).
    type: int
    default: 10
  congestion_control:
    description:
      - TCP congestion control algorithm for the iperf3 sender (C(iperf3 -C)), for example V(bbr)
        or V(cubic). Default is the host's default algorithm. RV(congestion_control) reports the
        one iperf3 used.
    type: str
  pmtu:
    description:
      - Search the path MTU.
    type: bool
    default: true
  pmtu_max:
    description:
      - Largest IP packet size (bytes, including headers) probed, normally the MTU of the sending
        interface.
    type: int
    default: 1500
  tfo:
    description:
      - Report TCP Fast Open - the local C(net.ipv4.tcp_fastopen), the counter deltas and, with
        O(tfo_port), the timing.
    type: bool
    default: true
  tfo_port:
    description:
      - Port of a TFO-enabled request/response (echo) server on the peer. V(0) skips the TFO
        timing; O(tcp_port) is not used for it, because an ordinary service (sshd) does not accept
        data in the SYN and the comparison would show nothing.
    type: int
    default: 0
  timeout:
    description:
      - Upper bound in seconds for the whole measurement. A step that no longer fits is not run
        and is reported as an error. With O(iperf3=true) it must be at least O(duration) + 10.
    type: int
    default: 60
  max_rtt_ms:
    description:
      - Fail when the average RTT (ms) is above this.
    type: float
  max_loss_pct:
    description:
      - Fail when the loss (percent of the RTT probes) is above this.
    type: float
  min_throughput_mbps:
    description:
      - Fail when the iperf3 throughput (Mbit/s, received by the peer) is below this. Needs O(iperf3=true).
    type: float
  max_retransmit_pct:
    description:
      - Fail when the iperf3 retransmissions (percent of the segments sent, see RV(retransmit_pct))
        are above this. Needs O(iperf3=true).
    type: float
  min_path_mtu:
    description:
      - Fail when the path MTU (bytes) is below this, or could not be measured. Needs O(pmtu=true).
    type: int
  textfile_dir:
    description:
      - Directory of the node_exporter textfile collector. When set, the results are written
        there as C(trainnet_link_<peer>.prom) (mode 0644) with the labels C(peer) and
        C(source) (this host's name). The directory must exist.
      - 'Metrics (gauges): C(trainnet_link_rtt_seconds) (average), C(trainnet_link_rtt_min_seconds),
        C(trainnet_link_jitter_seconds), C(trainnet_link_loss_ratio),
        C(trainnet_link_throughput_bits_per_second), C(trainnet_link_retransmit_ratio),
        C(trainnet_link_path_mtu_bytes), C(trainnet_link_pmtu_blackhole) (0 or 1) and
        C(trainnet_link_last_success_timestamp_seconds). Values not measured are left out.'
      - The last-success timestamp is set to now when no measurement failed and no threshold was
        missed; otherwise the value of the previous file is kept, so an alert on its age fires
        when a link keeps failing.
    type: path
extends_documentation_fragment:
  - action_common_attributes
attributes:
  check_mode:
    support: full
    details:
      - The measurements are read-only and run in check mode too; only the textfile is not written.
  diff_mode:
    support: none
  platform:
    platforms: linux
notes:
  - Needs C(ping) from iputils (C(-M do) for the path MTU) and, for throughput, C(iperf3) 3.x
    (C(--connect-timeout), 3.12 tested).
  - Linux caches a path MTU learned from ICMP for about ten minutes (C(net.ipv4.route.mtu_expires));
    probes in that time get the cached value from the local stack, which is still the path MTU.
  - The probe traffic is small except for iperf3, which saturates the path for O(duration)
    seconds; schedule measurements of pairs that share a link one after the other.
  - An iperf3 server serves one client at a time; a busy server fails the measurement with a
    message saying so.
  - A default measurement (200 pings, PMTU search, TFO timing, 10 s iperf3) takes about 11 s on a
    short path and about 15 s at 150 ms RTT.
seealso:
  - name: iperf3
    description: The iperf3 manual page (C(-J) JSON output, C(-C) congestion control).
    link: https://software.es.net/iperf/invoking.html
  - name: TCP Fast Open (RFC 7413)
    description: Data in the SYN with a server cookie, saving one round trip on repeat connections.
    link: https://www.rfc-editor.org/rfc/rfc7413
  - name: Packetization Layer Path MTU Discovery (RFC 4821)
    description: Why black holes happen when ICMP "fragmentation needed" is filtered.
    link: https://www.rfc-editor.org/rfc/rfc4821
author:
  - longhaul.trainnet maintainers (@longhaul)
'''

EXAMPLES = r'''
- name: Measure the link to the other data-plane host (iperf3 server already running there)
  longhaul.trainnet.link_measure:
    peer: 198.18.2.10
  register: link

- name: Show RTT and throughput
  ansible.builtin.debug:
    msg: "{{ link.rtt_ms.avg }} ms, {{ link.throughput_mbps }} Mbit/s over {{ link.congestion_control }}"

- name: Prove the cross-ocean link meets its budget and export the figures to node_exporter
  longhaul.trainnet.link_measure:
    peer: use-anchor.lab.example
    congestion_control: bbr
    duration: 10
    tfo_port: 7007
    max_rtt_ms: 160
    max_loss_pct: 1
    min_throughput_mbps: 40
    max_retransmit_pct: 2
    min_path_mtu: 1400
    textfile_dir: /var/lib/prometheus/node-exporter

- name: Only RTT, loss and path MTU (no iperf3 server on the peer)
  longhaul.trainnet.link_measure:
    peer: 198.18.2.10
    iperf3: false
    tfo: false
    pmtu_max: 9000

- name: Measure every pair but let the playbook decide what a failure means
  longhaul.trainnet.link_measure:
    peer: "{{ item }}"
    min_throughput_mbps: 60
  loop: "{{ groups['data_plane'] | difference([inventory_hostname]) }}"
  register: pairs
  ignore_errors: true
'''

RETURN = r'''
peer:
  description: The peer as given.
  returned: always
  type: str
  sample: 198.18.2.10
peer_address:
  description: The address the measurements used (O(peer) resolved); V(null) when it did not resolve.
  returned: always
  type: str
  sample: 198.18.2.10
rtt_ms:
  description: Round-trip time in milliseconds; V(null) when no probe got an answer.
  returned: always
  type: dict
  contains:
    min:
      description: Minimum RTT (ms).
      type: float
      returned: success
      sample: 150.2
    avg:
      description: Average RTT (ms).
      type: float
      returned: success
      sample: 151.0
    max:
      description: Maximum RTT (ms).
      type: float
      returned: success
      sample: 158.9
    mdev:
      description: Mean deviation of the RTT (ms), as ping computes it.
      type: float
      returned: success
      sample: 0.8
jitter_ms:
  description: RTT jitter in ms (the same value as RV(rtt_ms.mdev)).
  returned: always
  type: float
  sample: 0.8
loss_pct:
  description: Percentage of RTT probes (echo requests, or TCP connects) that got no answer.
  returned: always
  type: float
  sample: 0.5
rtt_source:
  description: V(icmp) (ping) or V(tcp_connect) (the fallback to O(tcp_port)); V(null) when nothing ran.
  returned: always
  type: str
  sample: icmp
probes_sent:
  description: Number of RTT probes sent (echo requests or TCP connects).
  returned: always
  type: int
  sample: 200
throughput_mbps:
  description: iperf3 throughput received by the peer, Mbit/s (C(end.sum_received.bits_per_second) / 1e6); V(null) when not measured.
  returned: always
  type: float
  sample: 48.2
retransmits:
  description: TCP segments the iperf3 sender retransmitted (C(end.sum_sent.retransmits)).
  returned: always
  type: int
  sample: 312
retransmit_pct:
  description:
    - Retransmitted segments as a percentage of the segments sent - 100 x RV(retransmits) /
      ceil(C(end.sum_sent.bytes) / MSS), the MSS being iperf3's C(start.tcp_mss) or
      C(start.tcp_mss_default).
  returned: always
  type: float
  sample: 0.71
congestion_control:
  description: Congestion control of the iperf3 sender (C(end.sender_tcp_congestion)).
  returned: always
  type: str
  sample: bbr
mean_rtt_ms:
  description: Mean smoothed RTT the kernel saw during the iperf3 transfer (C(streams[].sender.mean_rtt) / 1000), ms - the RTT under load.
  returned: always
  type: float
  sample: 162.4
max_cwnd_bytes:
  description: Largest congestion window of the iperf3 sender (C(streams[].sender.max_snd_cwnd)), bytes.
  returned: always
  type: int
  sample: 1146880
path_mtu_bytes:
  description: Largest IP packet (bytes, headers included) that got a reply with DF set; V(null) when not measured.
  returned: always
  type: int
  sample: 1400
pmtu_blackhole:
  description:
    - V(true) when a probe larger than RV(path_mtu_bytes) vanished without a reply and without an
      ICMP error (a PMTU black hole); V(null) when the path MTU was not probed.
  returned: always
  type: bool
  sample: false
pmtu_probes:
  description:
    - The path MTU probes in order, each with C(size) (IP packet bytes), C(outcome) (C(ok),
      C(too_big), C(silent) or C(error)), C(mtu_hint) (the MTU an ICMP error or the local stack
      named) and C(detail).
  returned: always
  type: list
  elements: dict
  sample:
    - {size: 1500, outcome: too_big, mtu_hint: 1400, detail: "Frag needed and DF set (mtu = 1400)"}
    - {size: 1400, outcome: ok, mtu_hint: null, detail: "2/2 replies"}
tfo:
  description: TCP Fast Open results; V(null) with O(tfo=false). The timing keys are V(null) with O(tfo_port=0).
  returned: always
  type: dict
  contains:
    port:
      description: O(tfo_port) (V(0) means the timing was skipped).
      type: int
      returned: success
      sample: 7007
    sysctl:
      description: The local C(net.ipv4.tcp_fastopen) (bit 1 is the client side).
      type: int
      returned: success
      sample: 1
    ttfb_ms_with:
      description: Best time (ms) from C(sendto(MSG_FASTOPEN)) to the first byte of the answer, with a cookie.
      type: float
      returned: success
      sample: 150.6
    ttfb_ms_without:
      description: Best time (ms) from C(connect) to the first byte of the answer, without TFO.
      type: float
      returned: success
      sample: 301.0
    saved_ms:
      description: RV(tfo.ttfb_ms_without) - RV(tfo.ttfb_ms_with).
      type: float
      returned: success
      sample: 150.4
    saved_rtt_ratio:
      description:
        - RV(tfo.saved_ms) / the average RTT; about 1.0 when TFO saves one round trip, about 0 when it does not work.
        - On a sub-millisecond path scheduling noise dominates both times and the ratio means nothing.
      type: float
      returned: success
      sample: 0.99
    samples:
      description: Timed connections of each kind (the best one counts).
      type: int
      returned: success
      sample: 2
    syn_data_acked:
      description: The peer acknowledged the data in the SYN on every timed TFO connection (C(TCP_INFO) option C(SYN_DATA)).
      type: bool
      returned: success
      sample: true
    active_delta:
      description: Change of C(TcpExt TCPFastOpenActive) (SYNs with data acknowledged) on this host during the measurement.
      type: int
      returned: success
      sample: 2
    active_fail_delta:
      description: Change of C(TcpExt TCPFastOpenActiveFail) (SYN data not acknowledged, or TFO turned off by the kernel).
      type: int
      returned: success
      sample: 0
    passive_delta:
      description: Change of C(TcpExt TCPFastOpenPassive) (TFO connections this host accepted as a server).
      type: int
      returned: success
      sample: 0
    passive_fail_delta:
      description: Change of C(TcpExt TCPFastOpenPassiveFail).
      type: int
      returned: success
      sample: 0
    cookie_reqd_delta:
      description: Change of C(TcpExt TCPFastOpenCookieReqd) (cookie requests received as a server).
      type: int
      returned: success
      sample: 0
    error:
      description:
        - Why the timing failed after its retries (with a hint), V(null) when it worked or was skipped.
          A failed timing is a warning, not a failure of the module.
      type: str
      returned: success
      sample: null
    retries:
      description: Requests sent again after a lost packet (no answer in time, or a reset).
      type: int
      returned: success
      sample: 0
thresholds_missed:
  description: The thresholds missed, each with C(name), C(limit), C(measured) (V(null) when not measured) and C(message).
  returned: always
  type: list
  elements: dict
  sample:
    - {name: min_throughput_mbps, limit: 60.0, measured: 48.2, message: "min_throughput_mbps 60 > measured 48.2"}
errors:
  description: Measurements that failed (iperf3, name resolution, unreachable peer, path MTU, textfile), one message each.
  returned: always
  type: list
  elements: str
  sample: ["iperf3: unable to connect to server: Connection refused - is an iperf3 server running on 198.18.2.10:5201?"]
duration_s:
  description: Seconds the whole measurement took.
  returned: always
  type: float
  sample: 13.4
prometheus_file:
  description: The textfile written (in check mode the one that would be written); V(null) without O(textfile_dir).
  returned: always
  type: str
  sample: /var/lib/prometheus/node-exporter/trainnet_link_198.18.2.10.prom
msg:
  description: A summary, or on failure the message naming every failed measurement and missed threshold.
  returned: always
  type: str
  sample: "thresholds missed for peer 198.18.2.10: min_throughput_mbps 60 > measured 48.2; max_loss_pct 0.3 < measured 0.52"
'''

import errno
import os
import socket
import struct
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.longhaul.trainnet.plugins.module_utils.command import run_bounded
from ansible_collections.longhaul.trainnet.plugins.module_utils.errors import describe_os_error
from ansible_collections.longhaul.trainnet.plugins.module_utils.link_measure import (
    ERROR,
    SILENT,
    PmtuSearch,
    classify_df_probe,
    evaluate_thresholds,
    failure_message,
    iperf3_argv,
    iperf3_error_message,
    parse_iperf3,
    parse_netstat,
    parse_ping_summary,
    ping_argv,
    ping_df_argv,
    ping_error,
    ping_time_limit,
    pmtu_linger,
    rtt_stats,
    stopped_ping_loss,
    success_message,
    tfo_counter_deltas,
    tfo_summary,
)
from ansible_collections.longhaul.trainnet.plugins.module_utils.mtu import MTU_MIN, mtu_floor
from ansible_collections.longhaul.trainnet.plugins.module_utils.prometheus import (
    parse_last_success,
    prom_file_name,
    render_prometheus,
)
from ansible_collections.longhaul.trainnet.plugins.module_utils.textfile import write_atomic
from ansible_collections.longhaul.trainnet.plugins.module_utils.tfo import (
    request,
    retriable,
    rto_budget,
)

NETSTAT = '/proc/net/netstat'
TFO_SYSCTL = '/proc/sys/net/ipv4/tcp_fastopen'
CC_AVAILABLE = '/proc/sys/net/ipv4/tcp_available_congestion_control'
TFO_SAMPLES = 3
TFO_ATTEMPTS = 3
# iperf3 --connect-timeout: three SYNs (sent at 0, 1 and 3 s, RTO 1 s doubling) and an RTT.
IPERF3_CONNECT_TIMEOUT_MS = 7500
# Seconds iperf3 needs beyond its duration: connecting (above) and the end-of-test exchange.
IPERF3_MARGIN = 10
IPERF3_ATTEMPTS = 2
TCP_FALLBACK_GIVE_UP = 3
PING_MIN_LIMIT = 2

NEEDS = (
    ('min_throughput_mbps', 'iperf3'),
    ('max_retransmit_pct', 'iperf3'),
    ('min_path_mtu', 'pmtu'),
)


class Net(object):
    """Sockets, files and clocks the module uses (replaced in unit tests)."""

    def monotonic(self):
        return time.monotonic()

    def now(self):
        return time.time()

    def sleep(self, seconds):
        time.sleep(seconds)

    def hostname(self):
        return socket.gethostname()

    def resolve(self, peer):
        """(family, address) of the peer, or raises socket.gaierror."""
        infos = socket.getaddrinfo(peer, None, socket.AF_UNSPEC, socket.SOCK_STREAM)
        family, _type, _proto, _name, sockaddr = infos[0]
        return family, sockaddr[0]

    def read(self, path):
        try:
            with open(path, 'r') as handle:
                return handle.read()
        except (IOError, OSError):
            return None

    def tcp_connect(self, family, address, port, timeout):
        """(rtt_ms, None) when a SYN-ACK or RST came back, (None, why) otherwise."""
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        started = time.perf_counter()
        try:
            try:
                sock.connect((address, port))
            except socket.timeout:
                return None, 'timed out after %s s' % timeout
            except (OSError, socket.error) as exc:
                if getattr(exc, 'errno', None) != errno.ECONNREFUSED:
                    return None, describe_os_error(exc)
            elapsed = (time.perf_counter() - started) * 1000.0
            try:
                # reset instead of FIN: no TIME_WAIT here, the service sees a short abort
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
            except (OSError, socket.error):
                pass
            return elapsed, None
        finally:
            sock.close()

    def tfo_request(self, address, port, fastopen, timeout):
        """One timed request/response (module_utils/tfo.py): (ttfb_ms, syn_data_acked, why)."""
        return request(address, port, fastopen, timeout)

    def write_textfile(self, directory, name, text):
        """Atomic, mode 0644, never through a planted link (module_utils/textfile.py)."""
        write_atomic(os.path.join(directory, name), text, 0o644)


class Measurement(object):
    def __init__(self, module, net):
        self.module = module
        self.net = net
        self.params = module.params
        self.errors = []
        self.started = net.monotonic()
        self.deadline = self.started + self.params['timeout']
        self.family = None
        self.address = None
        self.result = {
            'peer': self.params['peer'],
            'peer_address': None,
            'rtt_ms': None,
            'jitter_ms': None,
            'loss_pct': None,
            'rtt_source': None,
            'probes_sent': 0,
            'throughput_mbps': None,
            'retransmits': None,
            'retransmit_pct': None,
            'congestion_control': None,
            'mean_rtt_ms': None,
            'max_cwnd_bytes': None,
            'path_mtu_bytes': None,
            'pmtu_blackhole': None,
            'pmtu_probes': [],
            'tfo': None,
            'thresholds_missed': [],
            'errors': self.errors,
            'duration_s': None,
            'prometheus_file': None,
        }

    # ------------------------------------------------------------------ helpers
    def remaining(self):
        return self.deadline - self.net.monotonic()

    def run(self, argv, limit, signal=None):
        """(rc, out, err, timed_out): argv with LANG=C, stopped by this module after `limit` s."""
        result = run_bounded(argv, max(1.0, float(limit)), signal=signal)
        return result.rc, result.out, result.err, result.timed_out

    def reserve(self):
        """Seconds kept for iperf3, which runs last: the earlier steps stop short of them."""
        return self.params['duration'] + IPERF3_MARGIN if self.params['iperf3'] else 0

    def out_of_time(self, step, needed):
        if self.remaining() < needed:
            self.errors.append('timeout: %s not run, %d s overall bound reached' % (step, self.params['timeout']))
            return True
        return False

    # ------------------------------------------------------------------ steps
    def resolve(self):
        peer = self.params['peer']
        try:
            self.family, self.address = self.net.resolve(peer)
        except (socket.gaierror, socket.error, OSError, UnicodeError) as exc:
            self.errors.append('cannot resolve peer %s: %s' % (peer, getattr(exc, 'strerror', None) or exc))
            return False
        self.result['peer_address'] = self.address
        return True

    def measure_rtt(self):
        params = self.params
        ping = self.module.get_bin_path('ping')
        if self.out_of_time('ping', 2):
            return
        if not ping:
            icmp_problem = 'ping not found'
        else:
            linger = 1
            argv = ping_argv(ping, self.address, params['ping_count'], params['ping_interval'], linger)
            wanted = ping_time_limit(params['ping_count'], params['ping_interval'], linger)
            # leave iperf3 its time: a ping stopped early still gives RTT and loss
            reserve = self.reserve()
            limit = min(wanted, self.remaining(), max(PING_MIN_LIMIT, self.remaining() - reserve))
            # SIGINT: ping stops and prints its statistics for the probes it sent
            rc, out, err, killed = self.run(argv, limit, signal='INT')
            summary = parse_ping_summary(out)
            if summary and summary['received'] > 0:
                rtt = summary['rtt_ms']
                loss = summary['loss_pct']
                if killed or summary['transmitted'] < params['ping_count']:
                    loss = stopped_ping_loss(summary)
                    self.module.warn(
                        'ping: stopped after %d s with %d of %d echo requests sent (%s); RTT and loss are '
                        'from those, not counting the ones still in flight' % (
                            int(limit + 0.999), summary['transmitted'], params['ping_count'],
                            'the overall timeout %d s leaves the rest for the other steps; raise timeout'
                            % params['timeout'] if limit < wanted else
                            'ping sent slower than ping_interval %s' % params['ping_interval']))
                self.result.update(rtt_ms=rtt, jitter_ms=rtt['mdev'] if rtt else None,
                                   loss_pct=loss, rtt_source='icmp',
                                   probes_sent=summary['transmitted'])
                return
            if summary:
                icmp_problem = 'no ICMP echo reply to %d requests' % summary['transmitted']
            elif killed:
                icmp_problem = 'ping killed after %d s' % limit
            else:
                icmp_problem = ping_error(out, err) or 'ping rc=%s' % rc
        self.tcp_fallback(icmp_problem)

    def tcp_fallback(self, icmp_problem):
        params = self.params
        port = params['tcp_port']
        samples = []
        sent = 0
        failures_in_a_row = 0
        last_error = None
        for _i in range(params['tcp_connect_count']):
            left = self.remaining()
            if left < 0.5:
                break
            sent += 1
            rtt, why = self.net.tcp_connect(self.family, self.address, port, min(2.0, left))
            if rtt is None:
                last_error = why
                failures_in_a_row += 1
                if not samples and failures_in_a_row >= TCP_FALLBACK_GIVE_UP:
                    break
            else:
                failures_in_a_row = 0
                samples.append(rtt)
            self.net.sleep(max(0.01, params['ping_interval']))
        stats = rtt_stats(samples)
        self.result.update(rtt_ms=stats, jitter_ms=stats['mdev'] if stats else None,
                           loss_pct=round(100.0 * (sent - len(samples)) / sent, 3) if sent else None,
                           rtt_source='tcp_connect', probes_sent=sent)
        if not samples:
            self.errors.append('peer %s unreachable: %s, and no TCP answer on port %s (%s)' % (
                self.address, icmp_problem, port, last_error or 'not tried'))

    def measure_pmtu(self):
        params = self.params
        if self.result['rtt_source'] != 'icmp':
            if self.result['peer_address']:
                self.module.warn('pmtu: not probed, %s does not answer ICMP echo' % self.address)
            return
        ping = self.module.get_bin_path('ping')
        if not ping:
            self.errors.append('pmtu: ping not found')
            return
        ipv6 = self.family == getattr(socket, 'AF_INET6', None)
        floor = mtu_floor(ipv6)
        if params['pmtu_max'] < floor:
            self.errors.append('pmtu: pmtu_max %d is below the minimum MTU %d of %s' % (
                params['pmtu_max'], floor, 'IPv6' if ipv6 else 'IPv4'))
            return
        linger = pmtu_linger((self.result['rtt_ms'] or {}).get('max'))
        search = PmtuSearch(floor, params['pmtu_max'])
        while True:
            size = search.next_size()
            if size is None:
                break
            # a silent probe is sent once more: on a lossy link both echo requests of one probe
            # can be lost, which must not read as a packet too big for the path
            outcome = hint = detail = None
            for _attempt in range(2):
                if self.out_of_time('pmtu probe %d' % size, linger + 1 + self.reserve()):
                    break
                rc, out, err, killed = self.run(ping_df_argv(ping, self.address, size, ipv6, linger),
                                                min(self.remaining(), linger + 2))
                outcome, hint, detail = classify_df_probe(rc, out, err)
                if killed:
                    outcome, detail = ERROR, 'probe killed'
                if outcome != SILENT:
                    break
            if outcome is None:
                break
            search.record(size, outcome, hint, detail)
        self.result['pmtu_probes'] = search.probes
        if search.error:
            self.errors.append('pmtu: %s' % search.error)
            return
        self.result['path_mtu_bytes'] = search.path_mtu
        self.result['pmtu_blackhole'] = search.blackhole

    def measure_tfo(self):
        params = self.params
        sysctl = self.net.read(TFO_SYSCTL)
        try:
            sysctl = int(sysctl.strip()) if sysctl is not None else None
        except ValueError:
            sysctl = None
        port = params['tfo_port']
        before = parse_netstat(self.net.read(NETSTAT))
        with_ms, without_ms, acked = [], [], []
        error = None
        retries = 0
        if port and not self.out_of_time('tfo', 2 + self.reserve()):
            rtt_ms = self.result['rtt_ms'] or {}
            # room for two retransmission timeouts of a lost SYN or request (1 s, then 2 s)
            timeout = rto_budget(rtt_ms.get('max') or rtt_ms.get('avg'))
            # the first TFO connection fetches the cookie (SYN without data), the next ones use it
            plan = [False] * TFO_SAMPLES + [True] + [True] * TFO_SAMPLES
            for index, fastopen in enumerate(plan):
                why = None
                for attempt in range(TFO_ATTEMPTS):
                    if self.remaining() - self.reserve() < timeout:
                        why = 'not finished within the overall timeout %d s' % params['timeout']
                        break
                    retries += 1 if attempt else 0
                    ttfb, ack, why = self.net.tfo_request(self.address, port, fastopen, timeout)
                    if not retriable(why):
                        break
                if why:
                    error = why
                    break
                if index == TFO_SAMPLES:
                    continue
                (with_ms if fastopen else without_ms).append(ttfb)
                if fastopen:
                    acked.append(ack)
            if error:
                if 'ECONNREFUSED' in error:
                    error += ' - is the TFO echo server running on %s:%s?' % (self.address, port)
                elif 'EOPNOTSUPP' in error or 'ENOTSUP' in error:
                    error += ' - client TFO is off here (net.ipv4.tcp_fastopen=%s, needs bit 1)' % sysctl
                # a sub-measurement: the link's RTT, loss, MTU and throughput still stand
                self.module.warn('tfo: %s:%s: %s (the TFO timing is left out)' % (self.address, port, error))
        after = parse_netstat(self.net.read(NETSTAT))
        rtt = (self.result['rtt_ms'] or {}).get('avg')
        tfo = tfo_summary(with_ms, without_ms, rtt, acked, tfo_counter_deltas(before, after), sysctl)
        tfo['port'] = port
        tfo['error'] = error
        tfo['retries'] = retries
        self.result['tfo'] = tfo

    def measure_iperf3(self):
        params = self.params
        iperf3 = self.module.get_bin_path('iperf3')
        if not iperf3:
            self.errors.append('iperf3: not found on this host (install iperf3 or set iperf3=false)')
            return
        needed = params['duration'] + IPERF3_MARGIN
        if self.out_of_time('iperf3 (needs duration + %d s)' % IPERF3_MARGIN, needed):
            return
        cc = params['congestion_control']
        argv = iperf3_argv(iperf3, self.address, params['iperf3_port'], params['duration'], cc,
                           IPERF3_CONNECT_TIMEOUT_MS)
        for attempt in range(IPERF3_ATTEMPTS):
            limit = min(self.remaining(), needed + 5)
            rc, out, err, killed = self.run(argv, limit)
            parsed, error = parse_iperf3(out, cc)
            # a connect that timed out (lost SYNs) is tried again while the time allows
            if not error or 'timed out' not in error.lower() or self.remaining() < needed \
                    or attempt + 1 == IPERF3_ATTEMPTS:
                break
            self.module.warn('iperf3: %s; trying once more' % error)
        if error:
            if killed:
                error = 'no result within %d s (killed): %s' % (limit, error)
            elif error == 'no output' and err:
                error = err.strip().splitlines()[-1]
            available = (self.net.read(CC_AVAILABLE) or '').split()
            self.errors.append(iperf3_error_message(error, self.address, params['iperf3_port'], cc, available))
            return
        for key in ('throughput_mbps', 'retransmits', 'retransmit_pct', 'congestion_control',
                    'mean_rtt_ms', 'max_cwnd_bytes'):
            self.result[key] = parsed[key]

    def thresholds(self):
        limits = dict((name, self.params[name]) for name in
                      ('max_rtt_ms', 'max_loss_pct', 'min_throughput_mbps', 'max_retransmit_pct', 'min_path_mtu'))
        measured = dict(self.result)
        measured['rtt_avg_ms'] = (self.result['rtt_ms'] or {}).get('avg')
        self.result['thresholds_missed'] = evaluate_thresholds(limits, measured)

    def textfile(self):
        directory = self.params['textfile_dir']
        if not directory:
            return
        name = prom_file_name(self.params['peer'])
        path = os.path.join(directory, name)
        self.result['prometheus_file'] = path
        if self.module.check_mode:
            return
        if not os.path.isdir(directory):
            self.errors.append('textfile: directory %s does not exist' % directory)
            return
        success = not self.errors and not self.result['thresholds_missed']
        last = self.net.now() if success else parse_last_success(self.net.read(path))
        text = render_prometheus(self.result, self.params['peer'], self.net.hostname(), last)
        try:
            self.net.write_textfile(directory, name, text)
        except (IOError, OSError) as exc:
            self.errors.append('textfile: cannot write %s: %s' % (path, describe_os_error(exc)))

    def run_all(self):
        params = self.params
        if self.resolve():
            self.measure_rtt()
            if params['pmtu']:
                self.measure_pmtu()
            if params['tfo']:
                self.measure_tfo()
            if params['iperf3']:
                self.measure_iperf3()
        self.thresholds()
        self.result['duration_s'] = round(self.net.monotonic() - self.started, 2)
        self.textfile()
        return self.result


def validate(module):
    params = module.params
    problems = []
    for name, needs in NEEDS:
        if params[name] is not None and not params[needs]:
            problems.append('%s needs %s=true' % (name, needs))
    if params['ping_count'] < 1:
        problems.append('ping_count must be at least 1')
    if params['ping_interval'] < 0.002:
        problems.append('ping_interval must be at least 0.002 s')
    if params['tcp_connect_count'] < 1:
        problems.append('tcp_connect_count must be at least 1')
    for name in ('tcp_port', 'iperf3_port'):
        if not 0 < params[name] < 65536:
            problems.append('%s must be 1-65535' % name)
    if not 0 <= params['tfo_port'] < 65536:
        problems.append('tfo_port must be 0-65535')
    if params['duration'] < 1:
        problems.append('duration must be at least 1 s')
    if not MTU_MIN <= params['pmtu_max'] <= 65535:
        problems.append('pmtu_max must be %d-65535' % MTU_MIN)
    if params['timeout'] < 1:
        problems.append('timeout must be at least 1 s')
    elif params['iperf3'] and params['timeout'] < params['duration'] + IPERF3_MARGIN:
        problems.append('timeout %d is too short for iperf3 duration %d (needs at least duration + %d s)' % (
            params['timeout'], params['duration'], IPERF3_MARGIN))
    for name in ('max_rtt_ms', 'max_loss_pct', 'min_throughput_mbps', 'max_retransmit_pct', 'min_path_mtu'):
        if params[name] is not None and params[name] < 0:
            problems.append('%s must not be negative' % name)
    if problems:
        module.fail_json(msg='invalid options: %s' % '; '.join(problems), changed=False)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            peer=dict(type='str', required=True),
            ping_count=dict(type='int', default=200),
            ping_interval=dict(type='float', default=0.005),
            tcp_port=dict(type='int', default=22),
            tcp_connect_count=dict(type='int', default=10),
            iperf3=dict(type='bool', default=True),
            iperf3_port=dict(type='int', default=5201),
            duration=dict(type='int', default=10),
            congestion_control=dict(type='str'),
            pmtu=dict(type='bool', default=True),
            pmtu_max=dict(type='int', default=1500),
            tfo=dict(type='bool', default=True),
            tfo_port=dict(type='int', default=0),
            timeout=dict(type='int', default=60),
            max_rtt_ms=dict(type='float'),
            max_loss_pct=dict(type='float'),
            min_throughput_mbps=dict(type='float'),
            max_retransmit_pct=dict(type='float'),
            min_path_mtu=dict(type='int'),
            textfile_dir=dict(type='path'),
        ),
        supports_check_mode=True,
    )
    validate(module)
    result = Measurement(module, Net()).run_all()
    message = failure_message(module.params['peer'], result['thresholds_missed'], result['errors'])
    if message:
        module.fail_json(msg=message, changed=False, **result)
    msg = success_message(module.params['peer'], result)
    if result['prometheus_file'] and module.check_mode:
        msg += ' (check mode: %s not written)' % result['prometheus_file']
    module.exit_json(changed=False, msg=msg, **result)


if __name__ == '__main__':
    main()
