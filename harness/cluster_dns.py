"""The single node's cluster DNS: answers the ``kubernetes`` Service's names, nothing else.

In-cluster clients (Kopf among them) reach the API server as
``kubernetes.default.svc``; a real cluster's DNS (CoreDNS) resolves that to the
Service's ClusterIP. harness/node.py has no CoreDNS image (no registry), so the
kubelet's ``clusterDNS`` points pods at this small UDP server on the node's
bridge address. It answers A queries for the names given with ``--record``
(with or without the cluster domain), NODATA for other record types of those
names, and NXDOMAIN for every other name (pods then fall back to their search
list, as with CoreDNS).

    python -m harness.cluster_dns --listen 10.213.7.1 --record kubernetes.default.svc.cluster.local=10.0.0.1
"""

from __future__ import annotations

import argparse
import ipaddress
import socket
import struct

_A, _IN = 1, 1


def parse_question(packet: bytes) -> tuple[str, int, int]:
    """The first question's name, type and the offset just past it."""
    labels = []
    offset = 12
    while packet[offset]:
        length = packet[offset]
        labels.append(packet[offset + 1 : offset + 1 + length].decode("ascii", "replace"))
        offset += 1 + length
    offset += 1
    qtype = struct.unpack("!H", packet[offset : offset + 2])[0]
    return ".".join(labels).lower(), qtype, offset + 4


def answer(packet: bytes, records: dict[str, str]) -> bytes:
    """The response to one query packet."""
    (query_id, flags) = struct.unpack("!HH", packet[:4])
    name, qtype, end = parse_question(packet)
    question = packet[12:end]
    address = records.get(name.rstrip("."))
    # QR=1, the query's opcode and RD, AA=1, RA=1; RCODE 3 (NXDOMAIN) for unknown names.
    reply_flags = 0x8000 | (flags & 0x7900) | 0x0400 | 0x0080 | (0 if address else 3)
    answers = b""
    if address and qtype == _A:
        answers = b"\xc0\x0c" + struct.pack("!HHIH", _A, _IN, 30, 4) + ipaddress.IPv4Address(address).packed
    header = struct.pack("!HHHHHH", query_id, reply_flags, 1, 1 if answers else 0, 0, 0)
    return header + question + answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="address to serve on (UDP port 53)")
    parser.add_argument("--port", type=int, default=53)
    parser.add_argument("--record", action="append", default=[], help="NAME=IPV4 (repeatable)")
    args = parser.parse_args()
    records = {}
    for record in args.record:
        name, _, address = record.partition("=")
        records[name.lower().rstrip(".")] = address
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((args.listen, args.port))
    print(f"cluster DNS on {args.listen}:{args.port}: {records}", flush=True)
    while True:
        packet, client = sock.recvfrom(512)
        try:
            sock.sendto(answer(packet, records), client)
        except (IndexError, struct.error, ValueError):
            continue  # not a query we can parse: no answer, the client retries elsewhere


if __name__ == "__main__":
    main()
