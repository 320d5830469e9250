"""Topic budgets (KIP-1010) on today's Kafka: per-broker allowances from the leader layout.

KIP-1010 proposes a whole-topic byte budget split over brokers by where the
topic's partition leaders are: allowance(broker) = budget / partitions x
leaders on that broker. Stock Kafka cannot enforce that per topic, but it can
enforce client quotas, per broker. A client sharing ``share`` percent of the
budget must be allowed, on every broker, what the busiest broker (the one with
the most leaders) may carry of its share:

    client quota = budget x share / 100 x max(leaders on one broker) / partitions

so the quota follows leadership: when leaders move, the quota is recomputed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.status import Condition, Outcome, Reason

#: The condition that says whether a TopicQuota's budget is enforced, and how.
ENFORCED = "Enforced"


@dataclass(frozen=True, slots=True)
class TopicLayout:
    partitions: int
    #: broker id -> number of this topic's partition leaders it holds
    leaders: Mapping[int, int]

    @classmethod
    def from_partition_leaders(cls, partition_leaders: Mapping[int, int]) -> TopicLayout:
        """From partition -> leader broker (-1 for a partition without a leader)."""
        counts = Counter(b for b in partition_leaders.values() if b >= 0)
        return cls(len(partition_leaders), dict(sorted(counts.items())))

    @property
    def max_leaders(self) -> int:
        return max(self.leaders.values(), default=0)


def client_quota(total: float, share_percent: int, layout: TopicLayout) -> float:
    """One client's per-broker quota for its share of a topic budget (never 0: Kafka rejects 0)."""
    if layout.partitions <= 0:
        raise ValueError("a topic has at least one partition")
    return float(max(1, math.floor(total * share_percent / 100 * layout.max_leaders / layout.partitions)))


def allowance(budget: Mapping[QuotaKey, float], layout: TopicLayout) -> dict[str, Any]:
    """The status view: each broker's slice of the budget, as KIP-1010 computes it."""
    names = {QuotaKey.PRODUCER_BYTE_RATE: "producerByteRate", QuotaKey.CONSUMER_BYTE_RATE: "consumerByteRate"}
    brokers = {
        str(broker): {"leaders": n, **{names[k]: math.floor(v / layout.partitions * n) for k, v in budget.items()}}
        for broker, n in layout.leaders.items()
    }
    return {"partitions": layout.partitions, "maxLeadersOnOneBroker": layout.max_leaders, "brokers": brokers}


def with_enforcement(
    outcome: Outcome,
    clients: Iterable[tuple[Entity, Mapping[QuotaKey, float]]],
    allowance: Mapping[str, Any] | None,
) -> Outcome:
    """A ClientQuotas-mode TopicQuota's outcome with its clients' quotas and the Enforced condition."""
    rows = tuple({"entity": entity.path(), **{k.value: v for k, v in values.items()}} for entity, values in clients)
    enforced = outcome.reason is Reason.APPLIED
    condition = Condition(
        ENFORCED,
        "True" if enforced else "False",
        "ClientQuotas" if enforced else outcome.reason.value,
        "the budget is enforced through the clients' quotas" if enforced else outcome.message,
    )
    return replace(outcome, allowance=allowance, clients=rows, conditions=(condition,))
