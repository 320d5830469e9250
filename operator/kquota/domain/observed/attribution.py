"""Which entity's quota governs each metric series: the broker's own attribution, per quota key.

Kafka tags a client's quota metrics with its quota *bucket*, not its connection
(``DefaultQuotaCallback.quotaMetricTags``): ``{user}`` when the key comes from
``users/<u>`` or ``users/<default>`` (levels 3, 6), ``{client-id}`` from
``clients/<c>`` or ``clients/<default>`` (7, 8), both for the pair levels (1, 2,
4, 5) or no quota. The tag set therefore fixes the level *shape*, and the live
quota entries decide which entity of that shape applies, exactly as the
broker's ``quotaLimit`` does; that is done per key, since each quota manager
(produce, fetch, request, controller mutation) has its own set of configured
entities. A default-entity resource such as ``users/<default>`` thus collects
one bucket per user it applies to.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.observed.evidence import QuotaSample, summarize
from kquota.domain.observed.readings import KEY_OF, MetricsReading, QuotaSeries
from kquota.domain.resolver import client_levels

_PAIR_LEVELS: Final = frozenset({1, 2, 4, 5})
_USER_LEVELS: Final = frozenset({3, 6})
_CLIENT_LEVELS: Final = frozenset({7, 8})


def owner(
    entries: Mapping[Entity, Mapping[QuotaKey, float]], key: QuotaKey, user: str | None, client_id: str | None
) -> Entity | None:
    """The entity whose ``key`` governs a bucket tagged (``user``, ``client_id``); None when none does.

    The tags fix the level shape (module docstring); within it the most
    specific entity that has ``key`` wins, as in the resolver.
    """
    if user is not None and client_id is not None:
        allowed = _PAIR_LEVELS
    elif user is not None:
        allowed = _USER_LEVELS
    elif client_id is not None:
        allowed = _CLIENT_LEVELS
    else:
        return None
    for level, entity in client_levels(user or "", client_id or ""):
        if level in allowed and key in entries.get(entity, {}):
            return entity
    return None


@dataclass(frozen=True, slots=True)
class _Attributed:
    series: QuotaSeries
    sample: QuotaSample


@dataclass(frozen=True)
class Attribution:
    """A reading's series grouped by the (entity, key) that governs them, with the quota each one had.

    Build it once per reading (:func:`attribute`) and look resources up in it:
    that is one resolver walk per series, not per resource.
    """

    reading: MetricsReading
    live: Mapping[Entity, Mapping[QuotaKey, float]]
    by_owner: Mapping[tuple[Entity, QuotaKey], tuple[_Attributed, ...]]
    #: How many series no configured quota governs (unlimited clients).
    unattributed: int = 0

    def samples_for(self, entity: Entity, key: QuotaKey) -> list[QuotaSample]:
        return [a.sample for a in self.by_owner.get((entity, key), ())]


def attribute(reading: MetricsReading, live: Mapping[Entity, Mapping[QuotaKey, float]]) -> Attribution:
    """Attribute every series of ``reading`` to the entity whose quota the broker applies to it.

    ``live`` is the quota configuration on the brokers (entity -> key -> value),
    e.g. the reconciler's describe-all result after its changes.
    """
    groups: dict[tuple[Entity, QuotaKey], list[_Attributed]] = {}
    unattributed = 0
    for s in reading.series:
        key = KEY_OF[s.resource]
        entity = owner(live, key, s.user, s.client_id)
        if entity is None:
            unattributed += 1
            continue
        sample = summarize(s, reading.start, float(live[entity][key]))
        groups.setdefault((entity, key), []).append(_Attributed(s, sample))
    return Attribution(reading, live, {k: tuple(v) for k, v in groups.items()}, unattributed)
