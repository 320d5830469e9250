"""What must hold on the brokers after any fault, checked against their own description.

Three invariants, one checker (``check``) shared by every fault scenario:

1. **Desired state holds**: every key of every live resource is on the brokers
   with exactly the resource's value.
2. **Unmanaged entries are untouched**: every entry that was on the brokers
   before the scenario began (seeded with Kafka's own kafka-configs, plus
   whatever earlier tests left) still has exactly its old keys and values,
   unless a resource claims that very key.
3. **Deletion is complete**: a deleted resource's entity keeps none of the
   keys kquota set (only its unmanaged keys, if it had any).

Anything else on the brokers (a key nobody asked for) is a discrepancy too.
The number of discrepancies is what the resilience report calls *data lost*.

``describe`` reads the brokers directly with kafka-python's protocol classes,
not through kquota's adapter, and can ask one chosen broker (``node_id``), so
a test can check that every broker of a cluster agrees.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient
from kafka.protocol.admin import DescribeClientQuotasRequest

from kquota.domain.entities import Entity

#: entity -> key -> value. Keys are Kafka's names; ``QuotaKey`` members compare equal to them.
Quotas = Mapping[Entity, Mapping[str, float]]


def describe(bootstrap: str, node_id: int | None = None, timeout: float = 30.0) -> dict[Entity, dict[str, float]]:
    """Every quota entry on the cluster, as broker ``node_id`` (default: any) describes it."""
    admin = KafkaAdminClient(
        bootstrap_servers=[b for b in bootstrap.split(",") if b],
        client_id="kquota-invariants",
        request_timeout_ms=int(timeout * 1000),
    )
    try:
        request = DescribeClientQuotasRequest(components=[], strict=False)

        async def send() -> Any:
            return await admin._manager.send(request, node_id=node_id)

        response = admin._manager.run(send)
    finally:
        with contextlib.suppress(Exception):
            admin.close()
    if response.error_code:
        raise RuntimeError(f"DescribeClientQuotas failed: {response.error_code} {response.error_message}")
    out: dict[Entity, dict[str, float]] = {}
    for entry in response.entries or ():
        parts = {str(e.entity_type): None if e.entity_name is None else str(e.entity_name) for e in entry.entity}
        values = {str(v.key): float(v.value) for v in entry.values}
        if values:
            out[Entity.from_parts(parts)] = values
    return out


@dataclass(frozen=True)
class Discrepancy:
    entity: Entity
    key: str
    expected: float | None
    actual: float | None
    why: str

    def __str__(self) -> str:
        def show(v: float | None) -> str:
            return "absent" if v is None else f"{v:g}"

        return f"{self.entity} {self.key}: expected {show(self.expected)}, broker has {show(self.actual)} ({self.why})"


@dataclass(frozen=True)
class Verdict:
    discrepancies: tuple[Discrepancy, ...]
    entities: int
    keys: int

    @property
    def lost(self) -> int:
        return len(self.discrepancies)

    def diff(self, limit: int = 30) -> str:
        if not self.discrepancies:
            return f"all {self.keys} keys of {self.entities} entities as expected"
        lines = [f"{self.lost} discrepancies (of {self.keys} keys on {self.entities} entities):"]
        lines += [f"  {d}" for d in self.discrepancies[:limit]]
        if self.lost > limit:
            lines.append(f"  ... and {self.lost - limit} more")
        return "\n".join(lines)


def check(actual: Quotas, desired: Quotas, deleted: Iterable[Entity], unmanaged: Quotas) -> Verdict:
    """Compare the brokers' ``actual`` state with what must be there.

    ``desired``: the live resources' keys; ``deleted``: entities of deleted
    resources; ``unmanaged``: the brokers' state before the scenario (nothing
    of it may change, except keys a resource claims).
    """
    gone = set(deleted)
    expected: dict[Entity, dict[str, float]] = {e: dict(v) for e, v in unmanaged.items()}
    for entity, values in desired.items():
        expected.setdefault(entity, {}).update(values)
    found: list[Discrepancy] = []
    keys = 0
    entities = sorted(set(expected) | set(actual), key=str)
    for entity in entities:
        want = expected.get(entity, {})
        have = actual.get(entity, {})
        claimed = desired.get(entity, {})
        for key in sorted(set(want) | set(have)):
            keys += 1
            exp, act = want.get(key), have.get(key)
            if exp == act:
                continue
            if exp is not None:
                if key in claimed:
                    why = "desired key missing" if act is None else "desired key has another value"
                else:
                    why = "unmanaged entry removed" if act is None else "unmanaged entry changed"
            elif entity in gone:
                why = "left behind by a deleted resource"
            elif entity in unmanaged:
                why = "key added to an unmanaged entity"
            else:
                why = "key nobody asked for"
            found.append(Discrepancy(entity, key, exp, act, why))
    return Verdict(tuple(found), len(entities), keys)
