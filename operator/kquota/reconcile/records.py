"""What the reconciler knows about each quota resource and each Kafka cluster.

Built from raw Kubernetes objects by the handlers (Kopf indexes hold them), so
the reconciler works on plain, already-validated data and never on dicts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import Protection, ResourceRef, UnmanagedPolicy
from kquota.domain.tenancy import Grant
from kquota.k8s.api import ObjectRef
from kquota.kafka.settings import ConnectionSettings
from kquota.metrics.names import MetricNames


@dataclass(frozen=True, slots=True)
class ResourceRecord:
    """One quota resource as the reconciler sees it."""

    ref: ResourceRef
    plural: str
    created: str
    generation: int
    cluster: str
    #: (entity, values) pairs the resource asks for; empty when ``error`` is set.
    entries: tuple[tuple[Entity, Mapping[QuotaKey, float]], ...]
    display: str
    error: str | None = None
    deleting: bool = False
    status: Mapping[str, Any] = field(default_factory=dict)
    #: Kind-specific spec values the reconciler reports on (e.g. expectedBurst).
    extras: Mapping[str, Any] = field(default_factory=dict)

    def with_entries(self, entries: tuple[tuple[Entity, Mapping[QuotaKey, float]], ...]) -> ResourceRecord:
        """The same resource asking for ``entries`` (a TopicQuota's clients on the live layout)."""
        return replace(self, entries=entries)

    @property
    def object_ref(self) -> ObjectRef:
        return ObjectRef(self.ref.kind, self.plural, self.ref.namespace or None, self.ref.name, self.ref.uid)


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """Where a cluster's quota metrics are read, over which window, under which names."""

    prometheus_url: str | None
    broker_endpoints: tuple[str, ...]
    window_seconds: float
    near_limit_percent: int
    #: PromQL label matchers added to every Prometheus query (spec.metrics.prometheusSelector).
    prometheus_selector: str | None = None
    #: Metric and label names the brokers' exporter writes (spec.metrics.names).
    names: MetricNames = field(default_factory=MetricNames)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """A KafkaCluster resolved for use: connection with credentials, and policy."""

    name: str
    connection: ConnectionSettings
    #: None: no tenancy section, every namespace may manage every principal.
    grants: tuple[Grant, ...] | None = None
    protection: Protection = field(default_factory=Protection)
    policy: UnmanagedPolicy = UnmanagedPolicy.IGNORE
    metrics: MetricsConfig | None = None
    #: The operator's own principals on this cluster (always protected).
    principals: frozenset[str] = frozenset()
    #: spec.quotaCallback.honoursEntityQuotas: the brokers' quota callback enforces entity quotas.
    callback_honoured: bool = False
