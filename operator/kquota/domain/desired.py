"""From API models to broker terms: a resource's Kafka entity and the quota values it wants.

The api layer keeps what users wrote (``10Mi``, ``{default: true}``); this
module turns it into :class:`~kquota.domain.entities.Entity` and
``{QuotaKey: float}``, the shapes the planner and the Kafka adapter use.
Values are floats because AlterClientQuotas carries float64; byte rates are
whole numbers at most 2**53-1 (checked by the API), so the float is exact.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kquota.api.clientquota import ClientQuota, ClientQuotaEntity, ClientQuotaLimits
from kquota.api.controllermutationquota import ControllerMutationEntity, ControllerMutationQuota
from kquota.api.fields import EntityName
from kquota.api.quantity import byte_rate
from kquota.api.topicquota import TopicClient, TopicQuota
from kquota.domain.entities import Entity, QuotaKey, QuotaValues
from kquota.domain.topics import TopicLayout, client_quota


class NeedsLeaderLayout(ValueError):
    """A TopicQuota with enforcement ClientQuotas cannot be split without the topic's leader layout."""


def _part(name: EntityName | None) -> tuple[bool, str | None]:
    if name is None:
        return False, None
    return True, name.kafka_name()


def entity_of(entity: ClientQuotaEntity | ControllerMutationEntity | TopicClient) -> Entity:
    """The Kafka entity a resource's ``spec.entity`` names."""
    has_user, user = _part(entity.user)
    has_client, client = _part(entity.client_id)
    has_ip, ip = _part(entity.ip) if isinstance(entity, ClientQuotaEntity) else (False, None)
    return Entity(has_user=has_user, user=user, has_client_id=has_client, client_id=client, has_ip=has_ip, ip=ip)


def client_quota_values(quota: ClientQuotaLimits) -> QuotaValues:
    """The Kafka quota keys and values a ClientQuota's ``spec.quota`` sets."""
    values: QuotaValues = {}
    if quota.producer_byte_rate is not None:
        values[QuotaKey.PRODUCER_BYTE_RATE] = float(byte_rate(quota.producer_byte_rate))
    if quota.consumer_byte_rate is not None:
        values[QuotaKey.CONSUMER_BYTE_RATE] = float(byte_rate(quota.consumer_byte_rate))
    if quota.request_percentage is not None:
        values[QuotaKey.REQUEST_PERCENTAGE] = float(quota.request_percentage)
    if quota.connection_creation_rate is not None:
        values[QuotaKey.CONNECTION_CREATION_RATE] = float(quota.connection_creation_rate)
    return values


def desired_client_quota(resource: ClientQuota) -> tuple[Entity, QuotaValues]:
    return entity_of(resource.spec.entity), client_quota_values(resource.spec.quota)


def desired_controller_mutation_quota(resource: ControllerMutationQuota) -> tuple[Entity, QuotaValues]:
    return entity_of(resource.spec.entity), {QuotaKey.CONTROLLER_MUTATION_RATE: float(resource.spec.rate)}


def topic_budget(resource: TopicQuota) -> QuotaValues:
    """The whole-topic budget as Kafka quota keys."""
    budget = resource.spec.budget
    totals = {
        QuotaKey.PRODUCER_BYTE_RATE: budget.producer_byte_rate,
        QuotaKey.CONSUMER_BYTE_RATE: budget.consumer_byte_rate,
    }
    return {k: float(byte_rate(v)) for k, v in totals.items() if v is not None}


def topic_client_entries(resource: TopicQuota, layout: TopicLayout) -> list[tuple[Entity, QuotaValues]]:
    """Client quotas that keep a TopicQuota's clients within their shares (enforcement ClientQuotas).

    Per client and key: budget x share% x (most leaders on one broker) / partitions,
    from the topic's live leader layout (see :mod:`kquota.domain.topics`). A
    client quota limits the client on every topic it uses, which the API documents.
    """
    if resource.spec.enforcement != "ClientQuotas":
        return []
    return split_budget(topic_budget(resource), topic_clients(resource), layout)


def topic_clients(resource: TopicQuota) -> list[tuple[Entity, int]]:
    """A TopicQuota's clients as (entity, share percent)."""
    return [(entity_of(c), c.share) for c in resource.spec.clients or []]


def split_budget(
    budget: Mapping[QuotaKey, float], clients: Iterable[tuple[Entity, int]], layout: TopicLayout
) -> list[tuple[Entity, QuotaValues]]:
    """Each client's quota from a topic budget and its share, on the live leader layout.

    The operator (every pass, from the layout it just read) and ``kquota plan``
    both call this, so they agree on every split.
    """
    return [
        (entity, {key: client_quota(total, share, layout) for key, total in budget.items()})
        for entity, share in clients
    ]


def desired_entries(
    resource: ClientQuota | ControllerMutationQuota | TopicQuota, layout: TopicLayout | None = None
) -> list[tuple[Entity, QuotaValues]]:
    """The client quota entries a resource asks for (none for a Monitor or TopicConfig TopicQuota).

    ``layout`` (the topic's live leader layout) is needed only for a TopicQuota
    with enforcement ClientQuotas; without it that case raises
    :class:`NeedsLeaderLayout` (a ValueError) rather than guess a split.
    """
    if isinstance(resource, ClientQuota):
        return [desired_client_quota(resource)]
    if isinstance(resource, ControllerMutationQuota):
        return [desired_controller_mutation_quota(resource)]
    if resource.spec.enforcement != "ClientQuotas":
        return []
    if layout is None:
        raise NeedsLeaderLayout("a TopicQuota with enforcement ClientQuotas needs the topic's leader layout")
    return topic_client_entries(resource, layout)
