"""IPv4 packet helpers for the WAN emulator.

The emulator sees raw IPv4 packets (TUN in IFF_NO_PI mode). It only needs to read the destination
address, and to act like a router when a packet exceeds the path MTU: answer with ICMP
"fragmentation needed" (type 3 code 4) when DF is set, or fragment when it is not.
"""

from __future__ import annotations

import ipaddress
import struct

IPV4_HEADER_MIN = 20
PROTO_ICMP = 1
ICMP_DEST_UNREACH = 3
ICMP_FRAG_NEEDED = 4
# ICMP error messages must never trigger another ICMP error (RFC 1122 3.2.2).
ICMP_ERROR_TYPES = frozenset({3, 4, 5, 11, 12})
FLAG_DF = 0x4000
FLAG_MF = 0x2000
OFFSET_MASK = 0x1FFF


def checksum(data: bytes) -> int:
    """RFC 1071 Internet checksum."""
    if len(data) % 2:
        data += b"\x00"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def is_ipv4(packet: bytes) -> bool:
    return len(packet) >= IPV4_HEADER_MIN and packet[0] >> 4 == 4


def destination(packet: bytes) -> int:
    """Destination address of an IPv4 packet as an integer (for prefix lookups)."""
    return int.from_bytes(packet[16:20], "big")


def header_length(packet: bytes) -> int:
    return (packet[0] & 0x0F) * 4


def dont_fragment(packet: bytes) -> bool:
    return bool(int.from_bytes(packet[6:8], "big") & FLAG_DF)


def _ipv4_header(total_length: int, ident: int, flags_offset: int, ttl: int, proto: int,
                 src: bytes, dst: bytes, tos: int = 0, options: bytes = b"") -> bytes:
    ihl = (IPV4_HEADER_MIN + len(options)) // 4
    header = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, tos, total_length, ident, flags_offset,
                         ttl, proto, 0, src, dst) + options
    return header[:10] + struct.pack("!H", checksum(header)) + header[12:]


def may_answer_with_icmp_error(packet: bytes) -> bool:
    """Whether a router may send an ICMP error about this packet (RFC 1812 4.3.2.7)."""
    if not is_ipv4(packet):
        return False
    if int.from_bytes(packet[6:8], "big") & OFFSET_MASK:  # not the first fragment
        return False
    if packet[9] == PROTO_ICMP:
        ihl = header_length(packet)
        if len(packet) > ihl and packet[ihl] in ICMP_ERROR_TYPES:
            return False
    return True


def icmp_frag_needed(packet: bytes, next_hop_mtu: int, router_address: bytes) -> bytes:
    """The ICMP "fragmentation needed and DF set" a router sends back for an oversize packet.

    It quotes the original IP header plus the first 8 bytes of payload, as RFC 792 requires,
    and carries the next-hop MTU (RFC 1191) so the sender's PMTU discovery can adapt.
    """
    quoted = packet[: header_length(packet) + 8]
    body = struct.pack("!BBHHH", ICMP_DEST_UNREACH, ICMP_FRAG_NEEDED, 0, 0, next_hop_mtu) + quoted
    body = body[:2] + struct.pack("!H", checksum(body)) + body[4:]
    original_source = packet[12:16]
    # TOS 0xc0 (internetwork control) is what Linux uses for ICMP errors.
    header = _ipv4_header(IPV4_HEADER_MIN + len(body), 0, 0, 64, PROTO_ICMP,
                          router_address, original_source, tos=0xC0)
    return header + body


def fragment(packet: bytes, mtu: int) -> list[bytes]:
    """Split an IPv4 packet without DF into fragments that fit the MTU (RFC 791).

    The header (with its options, which lab traffic does not carry) is repeated in each fragment.
    """
    ihl = header_length(packet)
    header, payload = packet[:ihl], packet[ihl:int.from_bytes(packet[2:4], "big")]
    flags_offset = int.from_bytes(packet[6:8], "big")
    base_offset = flags_offset & OFFSET_MASK
    more_after = flags_offset & FLAG_MF
    chunk = ((mtu - ihl) // 8) * 8
    if chunk <= 0:
        return []
    pieces = []
    for start in range(0, len(payload), chunk):
        part = payload[start:start + chunk]
        last = start + chunk >= len(payload)
        flags = (0 if last else FLAG_MF) | (more_after if last else 0)
        new_flags_offset = flags | (base_offset + start // 8)
        rebuilt = header[:2] + struct.pack("!H", ihl + len(part)) + header[4:6] + \
            struct.pack("!H", new_flags_offset) + header[8:10] + b"\x00\x00" + header[12:]
        rebuilt = rebuilt[:10] + struct.pack("!H", checksum(rebuilt)) + rebuilt[12:]
        pieces.append(rebuilt + part)
    return pieces


class PrefixTable:
    """Longest-prefix match of IPv4 destinations to values, for a handful of site LANs."""

    def __init__(self, entries: dict[str, object]):
        by_length: dict[int, dict[int, object]] = {}
        for prefix, value in entries.items():
            network = ipaddress.IPv4Network(prefix)
            by_length.setdefault(network.prefixlen, {})[int(network.network_address)] = value
        # Longest prefix first; each entry is (mask, {network: value}).
        self._tables = [((0xFFFFFFFF << (32 - length)) & 0xFFFFFFFF, table)
                        for length, table in sorted(by_length.items(), reverse=True)]

    def lookup(self, address: int):
        for mask, table in self._tables:
            value = table.get(address & mask)
            if value is not None:
                return value
        return None
