"""The node's cluster DNS (harness/cluster_dns.py), as the packets it answers with.

The real resolver in a pod uses it in tests/node (the operator finds
``kubernetes.default.svc``); here its answers byte by byte: an A record for a
known name, NODATA for another type of a known name, NXDOMAIN for the rest.
"""

from __future__ import annotations

import struct

from harness.cluster_dns import answer, parse_question

RECORDS = {"kubernetes.default.svc.cluster.local": "10.0.0.1"}


def query(name: str, qtype: int = 1, query_id: int = 0x1234) -> bytes:
    header = struct.pack("!HHHHHH", query_id, 0x0100, 1, 0, 0, 0)  # RD set, one question
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.split("."))
    return header + labels + b"\x00" + struct.pack("!HH", qtype, 1)


def test_a_known_name_gets_its_address() -> None:
    reply = answer(query("Kubernetes.Default.svc.cluster.local"), RECORDS)
    query_id, flags, questions, answers = struct.unpack("!HHHH", reply[:8])
    assert (query_id, flags & 0x800F, questions, answers) == (0x1234, 0x8000, 1, 1)
    assert flags & 0x0100, "recursion desired is echoed"
    assert reply[-4:] == bytes([10, 0, 0, 1])


def test_another_type_of_a_known_name_is_nodata() -> None:
    reply = answer(query("kubernetes.default.svc.cluster.local", qtype=28), RECORDS)  # AAAA
    _, flags, _, answers = struct.unpack("!HHHH", reply[:8])
    assert flags & 0x000F == 0 and answers == 0


def test_an_unknown_name_is_nxdomain() -> None:
    reply = answer(query("kubernetes.default.svc.kquota-system.svc.cluster.local"), RECORDS)
    _, flags, _, answers = struct.unpack("!HHHH", reply[:8])
    assert flags & 0x000F == 3 and answers == 0


def test_the_question_is_parsed() -> None:
    assert parse_question(query("a.b", qtype=1))[:2] == ("a.b", 1)
