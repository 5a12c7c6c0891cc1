# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The WAN model: the link matrix (trainnet_wan_links between trainnet_sites) checked and
normalised in one place, for the filters every role reads it through (wan_links, wan_link_paths,
site_path_routes) and for the lab that builds the emulated WAN from it. Controller side, pure,
standard library only (exact numbers: plugin_utils/bdp).

A link: sites (two site names), delay_ms (one way), rate_mbit, and optionally jitter_ms, loss
(probability in [0, 1)), loss_model/loss_burst_packets, queue_bytes (0: about one BDP), mtu (path
MTU, MTU_MIN-MTU_MAX; 1500 when not given) and icmp_blackhole. Normalised, a link also has name
(a<->b), rtt_ms (2 x (delay + jitter)), bandwidth_mbps, loss_pct and queue_delay_ms (how long a full
drop-tail queue holds a packet: the most delay a loaded link adds, which timers such as BFD's must
outlast).
"""

from __future__ import annotations

import numbers

from ansible_collections.longhaul.trainnet.plugins.module_utils.mtu import MTU_MAX, MTU_MIN
from ansible_collections.longhaul.trainnet.plugins.plugin_utils.bdp import BYTES_PER_MBIT_MS, bdp_bytes, exact

LINK_REQUIRED = ('sites', 'delay_ms', 'rate_mbit')
LINK_DEFAULTS = {'jitter_ms': 0, 'loss': 0.0, 'loss_model': 'bernoulli', 'loss_burst_packets': 1,
                 'queue_bytes': 0, 'mtu': 1500, 'icmp_blackhole': False}
LINK_FIELDS = set(LINK_REQUIRED) | set(LINK_DEFAULTS) | set(['name'])
LOSS_MODELS = ('bernoulli', 'gilbert_elliott')
MAX_BURST_PACKETS = 1000000
MAX_RATE_MBIT = 10000
MAX_DELAY_MS = 10000
# queue_bytes 0: about one BDP of the round trip, but never a uselessly tiny queue.
MIN_AUTO_QUEUE_BYTES = 64 * 1024


def auto_queue_bytes(rate_mbit, delay_ms):
    """The queue of a link whose queue_bytes is 0: about one bandwidth-delay product of the round
    trip (delay_ms is one way), at least MIN_AUTO_QUEUE_BYTES."""
    return max(bdp_bytes(rate_mbit, 2 * exact(delay_ms)), MIN_AUTO_QUEUE_BYTES)


def queue_delay_ms(queue_bytes, rate_mbit, delay_ms):
    """Milliseconds a full drop-tail queue of `queue_bytes` (0: auto_queue_bytes) holds a packet at
    `rate_mbit`, rounded up: the most a loaded link adds to its delay."""
    size = int(queue_bytes) or auto_queue_bytes(rate_mbit, delay_ms)
    return -(-(size * 1000) // int(exact(rate_mbit) * BYTES_PER_MBIT_MS * 1000))


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def link_label(index, raw):
    """How problems name a link: `link a<->b`, or its index when it has no two site names."""
    pair = raw.get('sites') if isinstance(raw, dict) else None
    if isinstance(pair, (list, tuple)) and len(pair) == 2 and all(isinstance(s, str) and s for s in pair):
        return 'link %s<->%s' % (pair[0], pair[1])
    return 'trainnet_wan_links[%d]' % index


def link_problems(index, raw, site_names=None, given=None, required=LINK_REQUIRED):
    """(values, problems) for link number `index` of the matrix: values are the link's fields with
    the defaults filled in (None when there is a problem). `site_names`: the known sites (None: not
    checked). `given`: the fields the user wrote (default: raw's), for the rules that depend on
    intent rather than on the resulting values. `required`: the fields a link must have (the
    emulator needs delay and rate; a route needs only the sites)."""
    if not isinstance(raw, dict):
        return None, ['trainnet_wan_links[%d]: expected a mapping' % index]
    where = link_label(index, raw)
    problems = []
    for unknown in sorted(set(raw) - LINK_FIELDS, key=str):
        problems.append('%s: unknown field %r (fields: %s)' % (where, unknown, ', '.join(sorted(LINK_FIELDS))))
    for field in required:
        if field not in raw:
            problems.append('%s: %s is missing' % (where, field))
    if 'sites' in raw:
        pair = raw['sites']
        if where.startswith('trainnet_wan_links'):
            problems.append('%s: sites = %r must be a list of two site names' % (where, pair))
        else:
            for site in pair:
                if site_names is not None and site not in site_names:
                    problems.append('%s: sites: unknown site %r' % (where, site))
            if pair[0] == pair[1]:
                problems.append('%s: sites: a link joins two different sites' % where)
    values = dict(LINK_DEFAULTS)
    values.update(raw)

    def check(field, ok, requirement):
        if field in values and not ok(values[field]):
            problems.append('%s: %s = %r %s' % (where, field, values[field], requirement))

    check('delay_ms', lambda v: _is_number(v) and 0 <= v <= MAX_DELAY_MS,
          'must be a number of milliseconds, 0 to %d (one way; not negative)' % MAX_DELAY_MS)
    check('jitter_ms', lambda v: _is_number(v) and 0 <= v <= MAX_DELAY_MS,
          'must be a number of milliseconds, not negative')
    check('rate_mbit', lambda v: _is_number(v) and 0 < v <= MAX_RATE_MBIT,
          'must be a rate in Mbit/s above 0 (at most %d)' % MAX_RATE_MBIT)
    check('loss', lambda v: _is_number(v) and 0 <= v < 1,
          'must be a probability in [0, 1) (0.01 is 1%)')
    check('mtu', lambda v: _is_int(v) and MTU_MIN <= v <= MTU_MAX,
          'must be an integer from %d to %d' % (MTU_MIN, MTU_MAX))
    check('queue_bytes', lambda v: _is_int(v) and v >= 0,
          'must be an integer number of bytes (0 = about one BDP)')
    if _is_int(values.get('queue_bytes')) and _is_int(values.get('mtu')) and 0 < values['queue_bytes'] < values['mtu']:
        problems.append('%s: queue_bytes = %d cannot hold one packet of the path MTU (%d); use 0 for about one BDP'
                        % (where, values['queue_bytes'], values['mtu']))
    check('icmp_blackhole', lambda v: isinstance(v, bool), 'must be true or false')
    problems += _loss_model_problems(where, values, set(raw) if given is None else set(given))
    return (None if problems else values), problems


def _loss_model_problems(where, values, given):
    model, burst, loss = values['loss_model'], values['loss_burst_packets'], values['loss']
    if model not in LOSS_MODELS:
        return ['%s: loss_model = %r must be one of %s' % (where, model, ', '.join(LOSS_MODELS))]
    if not _is_number(burst) or not 1 <= burst <= MAX_BURST_PACKETS:
        return ['%s: loss_burst_packets = %r must be the mean length of a loss burst in packets, '
                'a number from 1 to %d' % (where, burst, MAX_BURST_PACKETS)]
    if model == 'bernoulli':
        # Written but unused would be a silent surprise: bursts need the bursty model.
        if 'loss_burst_packets' in given and burst != 1:
            return ['%s: loss_burst_packets = %r needs loss_model: gilbert_elliott (bernoulli losses '
                    'are independent, no bursts)' % (where, burst)]
        return []
    # P(Good->Bad) = p / (b (1 - p)) must be a probability: only reachable for loss >= 0.5.
    if _is_number(loss) and 0 <= loss < 1 and burst < loss / (1 - loss):
        return ['%s: loss = %r with loss_model: gilbert_elliott needs loss_burst_packets >= loss/(1-loss) = %.3g (is %r)'
                % (where, loss, loss / (1 - loss), burst)]
    return []


def normalise(links, site_names=None, required=LINK_REQUIRED, defaults=True):
    """(normalised links, problems) for the whole matrix: every link checked (one link per site
    pair). A normalised link has the fields given (with `defaults`, every field: the defaults
    filled in), its name (a<->b) and, when it has a delay and a rate, rtt_ms (2 x (delay +
    jitter)), bandwidth_mbps and loss_pct, computed on the decimal values (0.007 -> 0.7 %)."""
    if links is None:
        return [], []
    if isinstance(links, (str, bytes, dict)) or not hasattr(links, '__iter__'):
        return [], ['trainnet_wan_links: expected a list of links, got %s' % type(links).__name__]
    out, problems, seen = [], [], {}
    for index, raw in enumerate(links):
        values, found = link_problems(index, raw, site_names, required=required)
        problems += found
        if values is None:
            continue
        name = '%s<->%s' % tuple(values['sites'])
        pair = frozenset(values['sites'])
        if pair in seen:
            problems.append('link %s: the sites are already joined by link %s' % (name, seen[pair]))
            continue
        seen[pair] = name
        link = dict(values if defaults else raw)
        link.update(name=name, sites=list(values['sites']))
        if 'delay_ms' in raw and 'rate_mbit' in raw:
            delay, jitter = exact(values['delay_ms']), exact(values['jitter_ms'])
            link.update(rtt_ms=_plain(2 * (delay + jitter)), bandwidth_mbps=_plain(exact(values['rate_mbit'])),
                        loss_pct=_plain(exact(values['loss']) * 100),
                        queue_delay_ms=queue_delay_ms(values['queue_bytes'], values['rate_mbit'], values['delay_ms']))
        out.append(link)
    return out, problems


def _plain(number):
    """A Fraction as an int when whole, else a float."""
    return int(number) if number.denominator == 1 else float(number)
