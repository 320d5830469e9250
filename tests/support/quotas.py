"""Short names for quota keys and entities that many tests use (one definition, not one per test file)."""

from __future__ import annotations

from collections.abc import Callable

from kquota.domain.entities import Entity, QuotaKey
from tests.support.names import uniq

P = QuotaKey.PRODUCER_BYTE_RATE
C = QuotaKey.CONSUMER_BYTE_RATE
R = QuotaKey.REQUEST_PERCENTAGE
M = QuotaKey.CONTROLLER_MUTATION_RATE
N = QuotaKey.CONNECTION_CREATION_RATE

ALICE = Entity.for_user("alice")
BOB = Entity.for_user("bob")

#: Every entity form Kafka has, each a fresh entity per call (names made unique).
FORMS: dict[str, Callable[[], Entity]] = {
    "user": lambda: Entity.for_user(uniq("alice")),
    "client-id": lambda: Entity.for_client(uniq("app")),
    "user+client-id": lambda: Entity.for_pair(uniq("bob"), uniq("app")),
    "default user": lambda: Entity.for_user(None),
    "default client-id": lambda: Entity.for_client(None),
    "user+default client-id": lambda: Entity.for_pair(uniq("carol"), None),
    "default user+client-id": lambda: Entity.for_pair(None, uniq("app")),
    "default user+default client-id": lambda: Entity.for_pair(None, None),
    "ip": lambda: Entity.for_ip("10.11.12.13"),
    "default ip": lambda: Entity.for_ip(None),
    "TLS principal": lambda: Entity.for_user(f"CN={uniq('svc')},OU=payments,O=Example=Corp"),
    "user literally named <default>": lambda: Entity.for_user("<default>"),
}
