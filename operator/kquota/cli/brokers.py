"""Reaching the brokers from the CLI: a TCP probe of the bootstrap servers first, then the reads and checks the
commands make (live quotas, topic leaders, quota callbacks, validate-only alters).

Before kafka-python is given the bootstrap servers, each is tried with a
plain TCP connect (:func:`probe`): kafka-python retries a refused port or an
unknown host until its timeout and then says only "Unable to bootstrap",
while a CI log should say at once which address failed and why.
"""

from __future__ import annotations

import dataclasses
import errno
import queue
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Final

from kquota.cli.target import Quotas, TargetError
from kquota.domain.callback import CALLBACK_CONFIG, callbacks_from_configs
from kquota.domain.explain import number
from kquota.domain.plan import EntityChange
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.errors import EntityResult, KafkaNotAuthorized, KafkaUnavailable, QuotaRequestError
from kquota.kafka.settings import ConnectionSettings

#: The port kafka-python assumes for a bootstrap server given without one.
DEFAULT_KAFKA_PORT: Final = 9092


def split_address(server: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``host`` (port 9092, as kafka-python) as (host, port)."""
    server = server.strip()
    if server.startswith("["):
        host, _, rest = server[1:].partition("]")
        port = rest.removeprefix(":")
    elif server.count(":") == 1:
        host, port = server.split(":")
    else:  # a bare host name, or a bare IPv6 address
        host, port = server, ""
    if not port:
        return host, DEFAULT_KAFKA_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise TargetError(f"bootstrap server {server!r}: the port is not a number from 1 to 65535")
    return host, int(port)


def connect_failure(host: str, port: int, exc: OSError, timeout: float) -> str:
    """Why a TCP connect to ``host:port`` failed, in words a CI log can act on."""
    if isinstance(exc, socket.gaierror):
        return f"DNS lookup of {host} failed ({exc.strerror or exc})"
    if isinstance(exc, TimeoutError):
        return f"no answer within {number(timeout)} s (timeout; a firewall, or the wrong host)"
    if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED:
        return f"connection refused (nothing listens on port {port} of {host})"
    return f"cannot connect: {exc.strerror or exc}"


Connector = Callable[[tuple[str, int], float], object]


def _tcp_connect(address: tuple[str, int], timeout: float) -> object:
    with socket.create_connection(address, timeout=timeout):
        return None


def probe(bootstrap_servers: str, timeout: float, connect: Connector = _tcp_connect) -> None:
    """Raise TargetError, naming each address and its cause, when no bootstrap server accepts a TCP connection.

    All are tried at once, each for at most ``timeout`` seconds (what
    kafka-python would wait for it anyway), and the first that answers ends
    the probe: the brokers it names are kafka-python's business from there.
    """
    servers = [s.strip() for s in bootstrap_servers.split(",") if s.strip()]
    addresses = [split_address(s) for s in servers]
    results: queue.Queue[tuple[int, str | None]] = queue.Queue()

    def attempt(i: int) -> None:
        host, port = addresses[i]
        try:
            connect((host, port), timeout)
        except OSError as exc:  # socket.gaierror and TimeoutError are OSErrors
            results.put((i, connect_failure(host, port, exc, timeout)))
        except Exception as exc:  # noqa: BLE001 - e.g. UnicodeError: a host name IDNA cannot encode
            results.put((i, f"cannot connect: {type(exc).__name__}: {exc}"))
        else:
            results.put((i, None))

    # Daemon threads, not a pool: once one server answers, the others' attempts
    # may run on to their timeout without holding up the command or its exit.
    for i in range(len(addresses)):
        threading.Thread(target=attempt, args=(i,), name=f"kquota-probe-{i}", daemon=True).start()
    failures: dict[int, str] = {}
    for _ in addresses:
        i, why = results.get()
        if why is None:
            return
        failures[i] = why
    if failures:
        causes = "; ".join(f"{servers[i]}: {failures[i]}" for i in range(len(servers)))
        raise TargetError(f"cannot reach any bootstrap server: {causes}")


def _admin(connection: ConnectionSettings) -> QuotaAdmin:
    return QuotaAdmin(dataclasses.replace(connection, client_id="kquota-cli"))


#: Per topic: partition -> leader broker id (-1 without a leader).
Leaders = dict[str, dict[int, int]]


def read_live(connection: ConnectionSettings, topics: Sequence[str] = ()) -> tuple[Quotas, Leaders]:
    """Every quota on the brokers, and the leader layout of ``topics`` (for TopicQuotas)."""
    probe(connection.bootstrap_servers, connection.connect_timeout_ms / 1000)
    admin = _admin(connection)
    try:
        return admin.describe_all(), admin.topic_leaders(list(topics))
    except (KafkaUnavailable, QuotaRequestError) as exc:
        raise TargetError(str(exc)) from None
    finally:
        admin.close()


def read_callbacks(connection: ConnectionSettings) -> dict[int, str] | None:
    """Each broker's client.quota.callback.class (brokers without one left out); None if the brokers refuse."""
    admin = _admin(connection)
    try:
        _, brokers = admin.cluster_info()
        configs = {b: admin.broker_configs(b, [CALLBACK_CONFIG]) for b in brokers}
    except KafkaNotAuthorized:
        return None
    except (KafkaUnavailable, QuotaRequestError) as exc:
        raise TargetError(str(exc)) from None
    finally:
        admin.close()
    return callbacks_from_configs(configs)


def broker_validate(connection: ConnectionSettings, changes: Sequence[EntityChange]) -> list[EntityResult]:
    """Ask the brokers to validate ``changes`` without applying them (validate_only)."""
    if not changes:
        return []
    admin = _admin(connection)
    try:
        return admin.alter(changes, validate_only=True)
    except (KafkaUnavailable, QuotaRequestError) as exc:
        raise TargetError(str(exc)) from None
    finally:
        admin.close()
