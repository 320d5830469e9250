"""How a list of changes is cut into AlterClientQuotas requests the brokers accept.

The broker applies each entity of a request all-or-nothing, independently of
the others; requests are cut at ``MAX_OPS_PER_REQUEST`` ops or
``MAX_RECORD_BYTES_PER_REQUEST`` bytes of records, never inside an entity, so
that guarantee holds for a change of any size. ``check`` refuses, before
anything is sent, changes the broker would half-apply or store wrongly.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Final

from kquota.domain.entities import Entity
from kquota.domain.plan import EntityChange

#: The controller refuses a request that would write more records than this
#: (one record per changed key) with POLICY_VIOLATION, failing the whole request.
MAX_OPS_PER_REQUEST: Final = 10_000
#: The active controller commits one AlterClientQuotas request as one metadata
#: record batch, capped at 8 MiB by KRaft. A bigger request fails whole with
#: UNKNOWN_SERVER_ERROR, and the controller renounces its leadership on the way:
#: 2,500 users with 1,024-emoji names (the longest the CRD admits) are enough.
#: Requests are also cut at this many bytes of records (a quarter of the cap,
#: by an over-estimate); short names still reach MAX_OPS_PER_REQUEST first.
MAX_RECORD_BYTES_PER_REQUEST: Final = 2 * 1024 * 1024
#: Per-record bytes besides the entity names and key (Kafka's own framing is ~30).
_RECORD_OVERHEAD: Final = 64


def check(changes: Iterable[EntityChange]) -> None:
    """Raise ``ValueError`` for a change the broker must not see: an entity twice, a key twice, a non-finite value."""
    seen: set[Entity] = set()
    for change in changes:
        if change.entity in seen:
            # The broker would apply the first and reject the second occurrence.
            raise ValueError(f"entity {change.entity} appears more than once")
        seen.add(change.entity)
        keys = [op.key for op in change.ops]
        if len(keys) != len(set(keys)):
            raise ValueError(f"entity {change.entity} has duplicate quota keys: {sorted(keys)}")
        for op in change.ops:
            # NaN and infinity pass the broker's validation and would be stored.
            if op.value is not None and not math.isfinite(op.value):
                raise ValueError(f"{change.entity}: {op.key} must be a finite number, not {op.value}")


def record_bytes(change: EntityChange) -> int:
    """An over-estimate of the metadata records ``change`` writes: one QuotaRecord per op."""
    names = sum(len(t) + len((n or "").encode()) + 8 for t, n in change.entity.parts().items())
    return sum(names + len(op.key.value) + _RECORD_OVERHEAD for op in change.ops)


def batches(changes: Sequence[EntityChange]) -> list[list[EntityChange]]:
    """``changes`` cut into requests under both limits, in order, never splitting an entity."""
    out: list[list[EntityChange]] = []
    current: list[EntityChange] = []
    count = size = 0
    for change in changes:
        n, b = len(change.ops), record_bytes(change)
        if current and (count + n > MAX_OPS_PER_REQUEST or size + b > MAX_RECORD_BYTES_PER_REQUEST):
            out.append(current)
            current, count, size = [], 0, 0
        current.append(change)
        count += n
        size += b
    if current:
        out.append(current)
    return out
