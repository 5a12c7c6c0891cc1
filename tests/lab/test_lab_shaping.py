"""The emulator's link physics and packet handling as pure logic, with a virtual clock. No root."""

from __future__ import annotations

import ipaddress
import struct

import pytest

from trainnet_lab import packets
from trainnet_lab.shaping import ACCEPTED, DROPPED, TOO_BIG, DirectedLink, auto_queue_bytes


def ipv4_packet(size: int, *, src="198.19.1.10", dst="198.19.2.10", proto=6, df=True,
                ident=0x1234, payload_byte=b"x") -> bytes:
    flags = packets.FLAG_DF if df else 0
    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, size, ident, flags, 64, proto, 0,
                         ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed)
    header = header[:10] + struct.pack("!H", packets.checksum(header)) + header[12:]
    return header + payload_byte * (size - 20)


def link(**overrides) -> DirectedLink:
    settings = {"rate_mbit": 8, "delay_ms": 100, "seed": 1}  # 8 Mbit/s: 1 byte per microsecond
    settings.update(overrides)
    return DirectedLink("near", "far", **settings)


def test_serialisation_then_fixed_delay():
    shaped = link()
    for _packet in range(3):
        assert shaped.offer(ipv4_packet(1000), now=10.0) == ACCEPTED
    releases = [release for release, _packet in shaped.delay_line]
    # Each 1000-byte packet takes 1 ms at 8 Mbit/s; all three arrived at once.
    assert releases == pytest.approx([10.101, 10.102, 10.103])
    assert shaped.pop_due(10.1015) == [ipv4_packet(1000)]
    assert len(shaped.pop_due(10.2)) == 2
    assert shaped.tx_packets == 3 and shaped.tx_bytes == 3000


def test_an_idle_link_starts_serialising_at_arrival():
    shaped = link()
    shaped.offer(ipv4_packet(1000), now=1.0)
    shaped.offer(ipv4_packet(1000), now=5.0)
    assert [r for r, _packet in shaped.delay_line] == pytest.approx([1.101, 5.101])


def test_drop_tail_when_the_queue_is_full():
    shaped = link(queue_bytes=3000)
    results = [shaped.offer(ipv4_packet(1000), now=0.0) for _packet in range(5)]
    # queue_bytes counts every byte not yet serialised, the packet on the wire included.
    assert results == [ACCEPTED, ACCEPTED, ACCEPTED, DROPPED, DROPPED]
    assert shaped.drop_queue == 2
    assert shaped.backlog_bytes(0.0) == pytest.approx(3000)
    # Once a packet has drained, there is room again.
    assert shaped.offer(ipv4_packet(1000), now=0.0015) == ACCEPTED


def test_default_queue_is_about_one_bdp():
    assert link(rate_mbit=50, delay_ms=75).queue_bytes == 937500
    assert auto_queue_bytes(1, 0) == 64 * 1024  # never a uselessly tiny queue


def test_loss_is_seeded_bernoulli():
    def lost(seed):
        shaped = link(loss=0.01, seed=seed, rate_mbit=10000, queue_bytes=10**9)
        return [shaped.offer(ipv4_packet(100), now=i * 1e-3) for i in range(100000)]
    first, again, other = lost(1), lost(1), lost(2)
    assert first == again  # repeatable
    assert first != other
    assert first.count(DROPPED) == pytest.approx(1000, rel=0.1)


def test_jitter_never_reorders():
    shaped = link(delay_ms=50, jitter_ms=20, rate_mbit=1000, queue_bytes=10**9)
    for i in range(2000):
        shaped.offer(ipv4_packet(100), now=i * 1e-4)
    releases = [release for release, _packet in shaped.delay_line]
    assert releases == sorted(releases)
    delays = [release - i * 1e-4 for i, release in enumerate(releases)]
    assert min(delays) >= 0.030 - 1e-9
    assert max(delays) - min(delays) > 0.02  # the jitter is really there


def test_oversize_packets_are_reported_not_queued():
    shaped = link(mtu=1400)
    assert shaped.offer(ipv4_packet(1500), now=0.0) == TOO_BIG
    assert shaped.offer(ipv4_packet(1400), now=0.0) == ACCEPTED
    assert len(shaped.delay_line) == 1 and shaped.rx_packets == 2


def test_counters_report_queue_and_in_flight():
    shaped = link()
    shaped.offer(ipv4_packet(1000), now=0.0)
    shaped.offer(ipv4_packet(1000), now=0.0)
    counters = shaped.counters(0.0)
    assert counters["rx_packets"] == 2 and counters["in_flight_packets"] == 2
    assert counters["queued_bytes"] == 2000


# --- packets ------------------------------------------------------------------------------------

def test_checksum_of_a_valid_header_is_zero():
    assert packets.checksum(ipv4_packet(60)[:20]) == 0


def test_icmp_frag_needed_quotes_the_packet_and_carries_the_mtu():
    original = ipv4_packet(1500, proto=6)
    router = ipaddress.IPv4Address("198.19.2.1").packed
    answer = packets.icmp_frag_needed(original, 1400, router)
    assert packets.checksum(answer[:20]) == 0
    assert answer[9] == packets.PROTO_ICMP
    assert answer[12:16] == router and answer[16:20] == original[12:16]
    icmp = answer[20:]
    assert (icmp[0], icmp[1]) == (3, 4)
    assert struct.unpack("!H", icmp[6:8])[0] == 1400
    assert packets.checksum(icmp) == 0
    assert icmp[8:] == original[:28]  # IP header + 8 bytes of payload


def test_no_icmp_error_about_icmp_errors_or_later_fragments():
    error = ipv4_packet(1500, proto=1, payload_byte=b"\x03")
    echo = ipv4_packet(1500, proto=1, payload_byte=b"\x08")
    assert not packets.may_answer_with_icmp_error(error)
    assert packets.may_answer_with_icmp_error(echo)
    later = bytearray(ipv4_packet(1500))
    later[6:8] = struct.pack("!H", 100)
    assert not packets.may_answer_with_icmp_error(bytes(later))


def test_fragments_fit_the_mtu_and_reassemble():
    original = ipv4_packet(3000, df=False, payload_byte=b"a")
    pieces = packets.fragment(original, 1400)
    assert all(len(p) <= 1400 for p in pieces) and len(pieces) == 3
    payload = b""
    for index, piece in enumerate(pieces):
        assert packets.checksum(piece[:20]) == 0
        flags_offset = struct.unpack("!H", piece[6:8])[0]
        assert bool(flags_offset & packets.FLAG_MF) == (index < len(pieces) - 1)
        assert (flags_offset & packets.OFFSET_MASK) * 8 == len(payload)
        payload += piece[20:]
    assert payload == original[20:]


def test_prefix_table_prefers_the_longest_match():
    table = packets.PrefixTable({"198.19.0.0/16": "wide", "198.19.2.0/24": "narrow"})
    assert table.lookup(int(ipaddress.IPv4Address("198.19.2.7"))) == "narrow"
    assert table.lookup(int(ipaddress.IPv4Address("198.19.3.7"))) == "wide"
    assert table.lookup(int(ipaddress.IPv4Address("10.0.0.1"))) is None
