"""Short names for quota keys and entities that many tests use (one definition, not one per test file)."""

from __future__ import annotations

from kquota.domain.entities import Entity, QuotaKey

P = QuotaKey.PRODUCER_BYTE_RATE
C = QuotaKey.CONSUMER_BYTE_RATE
R = QuotaKey.REQUEST_PERCENTAGE
M = QuotaKey.CONTROLLER_MUTATION_RATE
N = QuotaKey.CONNECTION_CREATION_RATE

ALICE = Entity.for_user("alice")
BOB = Entity.for_user("bob")
