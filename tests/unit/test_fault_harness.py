"""The fault suite's own tools: the invariant checker flags every kind of loss; the slow proxy is a faithful pipe.

The checker decides whether a fault lost data, so each kind of discrepancy is
shown to be caught here, on plain dicts. The proxy only uses loopback sockets
inside this process.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import procs
from harness.invariants import check
from harness.slowproxy import SlowProxy

from kquota.domain.entities import Entity

U, V, GONE = Entity.for_user("u"), Entity.for_client("v"), Entity.for_user("gone")
P, C = "producer_byte_rate", "consumer_byte_rate"

CASES = [
    (
        "everything as expected",
        {U: {P: 1.0, C: 9.0}, V: {P: 5.0}},
        {U: {P: 1.0}},
        set(),
        {U: {C: 9.0}, V: {P: 5.0}},
        [],
    ),
    ("a desired key is missing", {}, {U: {P: 1.0}}, set(), {}, ["desired key missing"]),
    ("a desired key has another value", {U: {P: 2.0}}, {U: {P: 1.0}}, set(), {}, ["desired key has another value"]),
    ("an unmanaged entry changed", {V: {P: 6.0}}, {}, set(), {V: {P: 5.0}}, ["unmanaged entry changed"]),
    ("an unmanaged entry was removed", {}, {}, set(), {V: {P: 5.0}}, ["unmanaged entry removed"]),
    (
        "an unmanaged key on a managed entity was removed",
        {U: {P: 1.0}},
        {U: {P: 1.0}},
        set(),
        {U: {C: 9.0}},
        ["unmanaged entry removed"],
    ),
    ("a deleted resource left a key", {GONE: {P: 1.0}}, {}, {GONE}, {}, ["left behind by a deleted resource"]),
    ("a deleted resource's entity keeps its unmanaged key", {GONE: {C: 3.0}}, {}, {GONE}, {GONE: {C: 3.0}}, []),
    ("a key nobody asked for", {V: {P: 1.0}}, {}, set(), {}, ["key nobody asked for"]),
    (
        "a key added to an unmanaged entity",
        {V: {P: 5.0, C: 1.0}},
        {},
        set(),
        {V: {P: 5.0}},
        ["key added to an unmanaged entity"],
    ),
    ("a resource may take over an unmanaged key", {V: {P: 7.0}}, {V: {P: 7.0}}, set(), {V: {P: 5.0}}, []),
]


@pytest.mark.parametrize(
    ("actual", "desired", "deleted", "unmanaged", "whys"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_the_checker_counts_each_discrepancy(
    actual: dict[Entity, dict[str, float]],
    desired: dict[Entity, dict[str, float]],
    deleted: set[Entity],
    unmanaged: dict[Entity, dict[str, float]],
    whys: list[str],
) -> None:
    verdict = check(actual, desired, deleted, unmanaged)
    assert [d.why for d in verdict.discrepancies] == whys
    assert verdict.lost == len(whys)
    if whys:
        assert whys[0] in verdict.diff()


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()


def exchange(port: int, payload: bytes, timeout: float) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(payload)
        received = b""
        while len(received) < len(payload):
            received += sock.recv(65536)
        return received


def test_the_proxy_delivers_every_byte_in_order_when_slow(echo_port: int) -> None:
    proxy = SlowProxy(echo_port, seed=1).start()
    try:
        proxy.slow(latency=(0.01, 0.02), stall_chance=1.0, stall_seconds=(0.05, 0.1), max_stalls=2)
        payload = bytes(range(256)) * 4096  # 1 MiB in many chunks
        assert exchange(proxy.port, payload, timeout=60) == payload
        assert proxy.stats.connections == 1
        assert proxy.stats.stalls == 2, "max_stalls bounds the random stalls"
        assert proxy.stats.delayed_seconds > 0
    finally:
        proxy.stop()


def test_a_stall_holds_traffic_back(echo_port: int) -> None:
    proxy = SlowProxy(echo_port).start()
    try:
        proxy.stall(30.0)
        with pytest.raises(TimeoutError):
            exchange(proxy.port, b"ping", timeout=0.5)
    finally:
        proxy.stop()


def test_free_ports_are_outside_the_ephemeral_range_and_never_repeat() -> None:
    """A component restarted on its port (broker, API server) must find it free: no outgoing
    connection can have been given it meanwhile, and no other component was handed it."""
    low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [procs.free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < low for p in ports), [p for p in ports if not 1024 <= p < low]
    # Outgoing connections really are given ports in [low, high]: the range the harness avoids.
    with socket.socket() as server:
        server.bind(("127.0.0.1", ports[0]))
        server.listen()
        with socket.create_connection(("127.0.0.1", ports[0])) as client:
            assert low <= client.getsockname()[1] <= high
