"""A loopback TCP proxy that makes a Kafka broker slow: latency per chunk, and stalls.

Fault tests put it between the operator and a broker whose advertised
listener points at the proxy's port (see tests/e2e/test_faults.py), so every
byte the operator exchanges with that broker passes through here, metadata
round trips included. Bytes are never reordered, dropped or altered: the
broker is slow, not broken.

* ``slow(latency=(lo, hi))``: each chunk read from either side waits a random
  ``lo..hi`` seconds before it is forwarded (per direction, so a request and
  its answer each pay it);
* ``stall_chance`` / ``stall_seconds`` / ``max_stalls``: now and then a chunk
  freezes *all* traffic for a few seconds, as a broker in a long GC pause
  would; at most ``max_stalls`` times, so a test stays bounded in time;
* ``stall(seconds)``: freeze all traffic now;
* ``reads_late(seconds)``: the client reads the broker's answers late, as a starved
  process does: what the broker sends in ``seconds`` after an answer begins, its
  closing of the connection included, reaches the client at once;
* ``fast()``: plain forwarding again.

Randomness comes from a seeded ``random.Random``: a failing run can be replayed
with the same seed (the schedule still depends on how the bytes are chunked).
Threads only, all daemons; ``stop()`` closes every socket and returns promptly.
"""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from dataclasses import dataclass


@dataclass
class ProxyStats:
    connections: int = 0
    chunks: int = 0
    bytes: int = 0
    delayed_seconds: float = 0.0
    stalls: int = 0
    stalled_seconds: float = 0.0


class SlowProxy:
    """Listens on ``127.0.0.1:<port>`` and forwards to ``127.0.0.1:<target>``."""

    def __init__(self, target_port: int = 0, seed: int = 0) -> None:
        self.target_port = target_port
        self.seed = seed
        self.stats = ProxyStats()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._latency = (0.0, 0.0)
        self._stall_chance = 0.0
        self._stall_seconds = (0.0, 0.0)
        self._stalls_left = 0
        self._stall_until = 0.0
        self._late = 0.0
        self._sockets: set[socket.socket] = set()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        # accept() wakes up now and then: closing a socket does not wake a thread blocked on it.
        self._listener.settimeout(0.5)
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, name=f"slowproxy-{self.port}", daemon=True)

    def start(self) -> SlowProxy:
        self._acceptor.start()
        return self

    # -- the profile -------------------------------------------------------------

    def slow(
        self,
        latency: tuple[float, float],
        stall_chance: float = 0.0,
        stall_seconds: tuple[float, float] = (2.0, 4.0),
        max_stalls: int = 0,
        seed: int | None = None,
    ) -> None:
        """Delay every chunk; ``seed`` restarts the random schedule (a soak step replays its own)."""
        with self._lock:
            if seed is not None:
                self._rng.seed(seed)
            self._latency = latency
            self._stall_chance = stall_chance
            self._stall_seconds = stall_seconds
            self._stalls_left = max_stalls

    def reads_late(self, seconds: float) -> None:
        """Hand the client the broker's bytes (and its close) in bursts gathered over ``seconds``."""
        with self._lock:
            self._late = seconds

    def fast(self) -> None:
        with self._lock:
            self._late = 0.0
            self._latency = (0.0, 0.0)
            self._stall_chance = 0.0
            self._stalls_left = 0
            self._stall_until = 0.0

    def drop(self) -> None:
        """Close every open connection (clients must reconnect, and authenticate again)."""
        with self._lock:
            sockets = set(self._sockets)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def stall(self, seconds: float) -> None:
        """Freeze all traffic for ``seconds`` from now."""
        with self._lock:
            self._begin_stall(seconds)

    def _begin_stall(self, seconds: float) -> None:
        now = time.monotonic()
        until = max(self._stall_until, now) + seconds
        self.stats.stalls += 1
        self.stats.stalled_seconds += until - max(self._stall_until, now)
        self._stall_until = until

    # -- forwarding ----------------------------------------------------------------

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue  # look at _closed again
            except OSError:
                return
            client.settimeout(None)
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
                upstream.settimeout(None)
            except OSError:
                # The broker is down: the client sees the connection close, as it would.
                client.close()
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._closed.is_set():
                    client.close()
                    upstream.close()
                    return
                self._sockets |= {client, upstream}
                self.stats.connections += 1
            for src, dst, answers in ((client, upstream, False), (upstream, client, True)):
                threading.Thread(target=self._pump, args=(src, dst, answers), daemon=True).start()

    def _delay(self, size: int) -> float:
        """Seconds this chunk waits; may start a stall that every direction waits out."""
        with self._lock:
            self.stats.chunks += 1
            self.stats.bytes += size
            lo, hi = self._latency
            delay = self._rng.uniform(lo, hi) if hi > 0 else 0.0
            if self._stalls_left > 0 and self._rng.random() < self._stall_chance:
                self._stalls_left -= 1
                self._begin_stall(self._rng.uniform(*self._stall_seconds))
            delay += max(0.0, self._stall_until - time.monotonic())
            self.stats.delayed_seconds += delay
            return delay

    def _gather(self, src: socket.socket, data: bytes, seconds: float) -> tuple[bytes, bool]:
        """``data`` and whatever else ``src`` sends within ``seconds``; True when it closed meanwhile."""
        chunks, deadline = [data], time.monotonic() + seconds
        try:
            while (left := deadline - time.monotonic()) > 0:
                src.settimeout(left)
                try:
                    more = src.recv(65536)
                except TimeoutError:
                    break
                if not more:
                    return b"".join(chunks), True
                chunks.append(more)
        finally:
            src.settimeout(None)
        return b"".join(chunks), False

    def _pump(self, src: socket.socket, dst: socket.socket, answers: bool = False) -> None:
        try:
            while not self._closed.is_set():
                data = src.recv(65536)
                if not data:
                    break
                with self._lock:
                    late = self._late if answers else 0.0
                if late:
                    # The burst and the close right behind it, as one late read finds them.
                    data, ended = self._gather(src, data, late)
                    dst.sendall(data)
                    if ended:
                        break
                    continue
                delay = self._delay(len(data))
                if delay and self._closed.wait(delay):
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            # One side gone: close both, so the other side sees it too.
            for sock in (src, dst):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            with self._lock:
                self._sockets -= {src, dst}

    def stop(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            sockets, self._sockets = set(self._sockets), set()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._acceptor.join(5)
