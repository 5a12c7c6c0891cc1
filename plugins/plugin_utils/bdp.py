# -*- coding: utf-8 -*-
# Copyright (c) longhaul.trainnet maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Bandwidth-delay product arithmetic, written once for the buffer sizing filters, the lab's
emulator queue and the benchmarks. Controller side, pure, standard library only.

Units are the collection's: bandwidth in Mbit/s (10^6 bit/s), round-trip time in ms, sizes in
bytes. 1 Mbit/s x 1 ms = 1000 bit = 125 bytes, so the BDP is bandwidth x RTT x 125. The
arithmetic is exact (fractions.Fraction on the decimal text of each number), so 1000 Mbit/s x
200 ms is exactly 25,000,000 bytes and never 25,000,000.000000004.
"""

from __future__ import annotations

import math
from fractions import Fraction

BYTES_PER_MBIT_MS = 125


def exact(value):
    """An int, float, Fraction or numeric string as an exact Fraction.

    Raises TypeError for booleans and non-numbers and ValueError for text that is not a number
    and for NaN or infinity; the message says what was given, the caller names the variable.
    """
    if isinstance(value, bool):
        raise TypeError("must be a number, got a boolean (%r)" % (value,))
    if isinstance(value, (int, Fraction)):
        return Fraction(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError("must be a finite number, got %r" % (value,))
        # repr is the shortest decimal that round-trips: 0.1 stays 1/10, not the binary value.
        return Fraction(repr(value))
    if isinstance(value, str):
        try:
            return Fraction(value.strip())
        except (ValueError, ZeroDivisionError):
            raise ValueError("must be a number, got %r" % (value,))
    raise TypeError("must be a number, got %r (%s)" % (value, type(value).__name__))


def bdp(bandwidth_mbps, rtt_ms):
    """The exact bandwidth-delay product in bytes, as a Fraction."""
    return exact(bandwidth_mbps) * exact(rtt_ms) * BYTES_PER_MBIT_MS


def bdp_bytes(bandwidth_mbps, rtt_ms):
    """The bandwidth-delay product in whole bytes, rounded up (a window must hold all of it)."""
    return int(math.ceil(bdp(bandwidth_mbps, rtt_ms)))


def window_limited_mbps(window_bytes, rtt_ms):
    """The most a flow with `window_bytes` in flight can carry over `rtt_ms`, in Mbit/s: the
    inverse of the BDP (a window smaller than the BDP caps the rate at window / RTT)."""
    rtt = exact(rtt_ms)
    if rtt <= 0:
        raise ValueError("must be greater than 0, got %r" % (rtt_ms,))
    return float(exact(window_bytes) / (rtt * BYTES_PER_MBIT_MS))
