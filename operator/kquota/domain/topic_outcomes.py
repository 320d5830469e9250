"""TopicQuotas in a pass: client-quota entries (ClientQuotas mode) or final outcomes, from gathered topic facts.

Gather reads the leader layout of every referenced topic on every full pass
(so a leadership change shows within one drift interval) and, for
TopicConfig mode, whether the brokers know KIP-1010's topic configs; this
module decides what each TopicQuota means from those facts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kquota.domain.claims import KindSpec, TopicSpec
from kquota.domain.desired import split_budget
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import ResourceRef
from kquota.domain.status import Condition, Outcome, Reason
from kquota.domain.status_format import read_status
from kquota.domain.topics import ENFORCED, TopicLayout, allowance

Entries = tuple[tuple[Entity, Mapping[QuotaKey, float]], ...]


class TopicClaimant(Protocol):
    """What the topic rules need of a resource."""

    @property
    def ref(self) -> ResourceRef: ...
    @property
    def error(self) -> str | None: ...
    @property
    def deleting(self) -> bool: ...
    @property
    def status(self) -> Mapping[str, Any]: ...
    @property
    def spec(self) -> KindSpec | None: ...


@dataclass(frozen=True, slots=True)
class TopicFacts:
    """What gather read about the topics TopicQuotas name."""

    #: Each topic's leader layout (topics without leaders, or missing, left out).
    layouts: Mapping[str, TopicLayout] = field(default_factory=dict)
    #: Topics kquota may not describe, with the refusal's message.
    refused: Mapping[str, str] = field(default_factory=dict)
    #: Per TopicConfig-mode TopicQuota (uid): whether the brokers have KIP-1010's
    #: topic configs, or the refusal's message when they would not say.
    kip1010: Mapping[str, bool | str] = field(default_factory=dict)


def topic_recs(records: Iterable[TopicClaimant]) -> list[tuple[TopicClaimant, TopicSpec]]:
    """The TopicQuotas a pass looks at (not deleting, valid), with their specs."""
    return [(r, r.spec) for r in records if isinstance(r.spec, TopicSpec) and not r.deleting and r.error is None]


def topic_outcomes(
    records: Iterable[TopicClaimant], facts: TopicFacts
) -> tuple[dict[str, Entries], dict[str, Outcome], dict[str, dict[str, Any]]]:
    """Per TopicQuota uid: its clients' entries (ClientQuotas mode), else its final outcome; and its allowance.

    A TopicQuota whose topic has no leader layout has no allowance (left out).
    """
    entries: dict[str, Entries] = {}
    outcomes: dict[str, Outcome] = {}
    allowances: dict[str, dict[str, Any]] = {}
    for rec, spec in topic_recs(records):
        uid = rec.ref.uid
        topic, mode, budget = spec.topic, spec.enforcement, spec.budget
        layout = facts.layouts.get(topic) if topic else None
        share = allowance(budget, layout) if layout else None
        if share is not None:
            allowances[uid] = share
        missing = f"topic {topic!r} does not exist (yet)"
        if topic is not None and topic in facts.refused:
            read = read_status(rec.status)
            outcomes[uid] = Outcome(
                Reason.NOT_AUTHORIZED,
                facts.refused[topic] + read.unknown_applied(),
                read.applied_values,
                allowance=share,
            )
        elif mode == "ClientQuotas":
            if layout is None:
                outcomes[uid] = Outcome(
                    Reason.TOPIC_NOT_FOUND,
                    f"{missing}: its clients' quotas are computed from its partition leaders",
                )
            else:
                entries[uid] = tuple(split_budget(budget, spec.clients, layout))
        elif mode == "TopicConfig":
            outcomes[uid] = _topic_config(facts.kip1010.get(uid), missing, share)
        else:
            note = "" if layout or not topic else f"; {missing}"
            outcomes[uid] = Outcome(
                Reason.MONITORING,
                f"monitoring the topic against its budget (not enforced){note}",
                allowance=share,
                fully_applied=True,
                conditions=(Condition(ENFORCED, "False", "MonitorOnly", "enforcement is Monitor"),),
            )
    return entries, outcomes, allowances


def _topic_config(kip1010: bool | str | None, missing: str, share: Mapping[str, Any] | None) -> Outcome:
    if isinstance(kip1010, str):
        return Outcome(Reason.NOT_AUTHORIZED, kip1010, allowance=share)
    if kip1010 is None:
        return Outcome(Reason.TOPIC_NOT_FOUND, f"{missing}: cannot probe topic configs")
    message = (
        "the brokers have no producer.byte.rate / consumer.byte.rate topic configs (KIP-1010 is not "
        "part of this Kafka); nothing was changed. Use enforcement ClientQuotas or Monitor."
        if not kip1010
        else "the brokers support KIP-1010 topic configs, but this kquota version does not write "
        "them yet; nothing was changed."
    )
    return Outcome(
        Reason.UNSUPPORTED_BY_BROKER,
        message,
        allowance=share,
        conditions=(Condition(ENFORCED, "False", Reason.UNSUPPORTED_BY_BROKER.value, message),),
    )


def probe_topic(topic: str | None, layouts: Mapping[str, TopicLayout]) -> str | None:
    """Which topic a TopicConfig-mode TopicQuota's KIP-1010 probe asks about (None: no topic exists to ask)."""
    if not layouts:
        return None
    return topic if topic in layouts else next(iter(layouts))
