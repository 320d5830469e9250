"""Effective quotas: which configured quota a connection actually gets, key by key, and why.

Kafka resolves each quota key separately (each quota manager - produce, fetch,
request, controller mutation - has its own callback and its own set of
configured entities), taking the most specific configured entity in this
order (Kafka documentation, "Quotas"; ``DefaultQuotaCallback``)::

    1. users/<user>/clients/<client-id>      5. users/<default>/clients/<default>
    2. users/<user>/clients/<default>        6. users/<default>
    3. users/<user>                          7. clients/<client-id>
    4. users/<default>/clients/<client-id>   8. clients/<default>

So a connection may take producer_byte_rate from level 3 and consumer_byte_rate
from level 1. The winning level also decides who shares the limit (Kafka's
metric tags, :attr:`Resolution.bucket`): at levels 1, 2, 4, 5 each (user,
client-id) pair has its own bucket, at 3 and 6 all clients of a user share
one, at 7 and 8 all users of a client-id share one.

Two details of ``DefaultQuotaCallback`` that a plain "first match" misses:
an empty client-id only ever gets user quotas (levels 3, 6) and an empty user
only client-id quotas (levels 7, 8). A user literally named ``<default>`` is
a user like any other: the default entity is ``None`` in
:class:`~kquota.domain.entities.Entity`, never a string.

IP entities have their own two-step ladder for connection_creation_rate:
``ips/<ip>`` (level 1) then ``ips/<default>`` (level 2).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kquota.domain.entities import CLIENT_KEYS, IP_KEYS, Entity, QuotaKey

#: Level -> how the level is written in Kafka's documentation.
LEVEL_NAMES: Final = {
    1: "users/<user>/clients/<client-id>",
    2: "users/<user>/clients/<default>",
    3: "users/<user>",
    4: "users/<default>/clients/<client-id>",
    5: "users/<default>/clients/<default>",
    6: "users/<default>",
    7: "clients/<client-id>",
    8: "clients/<default>",
}
IP_LEVEL_NAMES: Final = {1: "ips/<ip>", 2: "ips/<default>"}


@dataclass(frozen=True, slots=True)
class Connection:
    """A client connection as the broker identifies it.

    ``user`` is the principal name (SASL username, TLS principal after mapping
    rules, ``ANONYMOUS`` on an unauthenticated listener); ``client_id`` the
    client.id it sends; ``ip`` its address, for connection_creation_rate.
    """

    user: str
    client_id: str
    ip: str | None = None


@dataclass(frozen=True, slots=True)
class Candidate:
    """A configured entity that matches the connection and sets the key."""

    level: int
    entity: Entity
    value: float
    source: str | None

    def describe(self) -> str:
        where = f" ({self.source})" if self.source else ""
        return f"{self.entity.path()}={_fmt(self.value)} [level {self.level}]{where}"


@dataclass(frozen=True, slots=True)
class Resolution:
    """The effective value of one quota key for a connection."""

    key: QuotaKey
    value: float
    level: int
    entity: Entity
    source: str | None
    #: Lower-precedence entities that match the connection and set this key too, most specific first.
    overrides: tuple[Candidate, ...]
    #: Kafka's (user, client-id) metric tags: connections with equal tags share one limit.
    #: ``""`` means "any": ("alice", "") is shared by all of alice's clients. None for ip keys.
    bucket: tuple[str, str] | None

    def describe(self) -> str:
        """One line for humans: where the value comes from and what it beats."""
        where = f" ({self.source})" if self.source else ""
        text = f"{self.key}={_fmt(self.value)} from {self.entity.path()} [level {self.level}]{where}"
        if self.overrides:
            text += "; overrides " + ", ".join(c.describe() for c in self.overrides)
        return text


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def client_levels(user: str, client_id: str) -> list[tuple[int, Entity]]:
    """The entities that can apply to a (user, client-id) connection, most specific first.

    Follows ``DefaultQuotaCallback``: with an empty client-id only the user
    levels (3, 6) can apply, with an empty user only the client-id levels
    (7, 8), with both empty none.
    """
    levels = [
        (1, Entity.for_pair(user, client_id)) if user and client_id else None,
        (2, Entity.for_pair(user, None)) if user and client_id else None,
        (3, Entity.for_user(user)) if user else None,
        (4, Entity.for_pair(None, client_id)) if user and client_id else None,
        (5, Entity.for_pair(None, None)) if user and client_id else None,
        (6, Entity.for_user(None)) if user else None,
        (7, Entity.for_client(client_id)) if client_id else None,
        (8, Entity.for_client(None)) if client_id else None,
    ]
    return [lv for lv in levels if lv is not None]


def bucket_for(level: int, user: str, client_id: str) -> tuple[str, str]:
    """Kafka's metric tags for a connection whose quota comes from ``level``."""
    if level in (3, 6):
        return (user, "")
    if level in (7, 8):
        return ("", client_id)
    return (user, client_id)


def _same_ip(a: str, b: str) -> bool:
    # Brokers compare InetAddress values: 2001:db8::1 and 2001:db8:0:0:0:0:0:1 are one address.
    try:
        return ipaddress.ip_address(a) == ipaddress.ip_address(b)
    except ValueError:
        return a == b


def _ip_candidates(entries: Mapping[Entity, Mapping[QuotaKey, float]], ip: str) -> list[tuple[int, Entity]]:
    exact = [e for e in entries if e.has_ip and e.ip is not None and _same_ip(e.ip, ip)]
    default = [e for e in entries if e.has_ip and e.ip is None]
    return [(1, e) for e in sorted(exact, key=Entity.sort_key)] + [(2, e) for e in default]


def resolve(
    entries: Mapping[Entity, Mapping[QuotaKey, float]],
    connection: Connection,
    sources: Mapping[Entity, str] | None = None,
) -> dict[QuotaKey, Resolution]:
    """Per quota key, the value the brokers enforce on ``connection`` and where it comes from.

    ``entries`` are all configured quotas (entity -> key -> value), e.g. the
    desired state of every resource plus the unmanaged quotas read from the
    brokers; ``sources`` labels entries (``"team-a/alice"``, ``"unmanaged"``).
    Keys no matching entity sets are absent: the connection is unlimited there.
    """
    labels = sources or {}
    ladders: list[tuple[frozenset[QuotaKey], list[tuple[int, Entity]]]] = [
        (CLIENT_KEYS, client_levels(connection.user, connection.client_id))
    ]
    if connection.ip is not None:
        ladders.append((IP_KEYS, _ip_candidates(entries, connection.ip)))
    out: dict[QuotaKey, Resolution] = {}
    for key in QuotaKey:
        for allowed, ladder in ladders:
            if key not in allowed:
                continue
            found = [
                Candidate(level, entity, float(entries[entity][key]), labels.get(entity))
                for level, entity in ladder
                if entity in entries and key in entries[entity]
            ]
            if not found:
                continue
            winner, rest = found[0], tuple(found[1:])
            out[key] = Resolution(
                key=key,
                value=winner.value,
                level=winner.level,
                entity=winner.entity,
                source=winner.source,
                overrides=rest,
                bucket=None if allowed is IP_KEYS else bucket_for(winner.level, connection.user, connection.client_id),
            )
    return out
