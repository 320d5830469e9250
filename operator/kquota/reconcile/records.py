"""What the reconciler knows about each Kafka cluster, and where a quota resource's status goes.

Quota resources are :class:`kquota.domain.claims.ResourceClaim` records, built
from raw Kubernetes objects by the handlers (Kopf indexes hold them), so the
reconciler works on plain, already-validated data and never on dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kquota.api.manifest import QUOTA_KINDS
from kquota.domain.claims import ResourceClaim
from kquota.domain.plan import Protection, UnmanagedPolicy
from kquota.domain.tenancy import Grant
from kquota.k8s.api import ObjectRef
from kquota.kafka.settings import ConnectionSettings
from kquota.metrics.names import MetricNames


def object_ref(rec: ResourceClaim) -> ObjectRef:
    """Where a quota resource's status and events go."""
    return ObjectRef(rec.ref.kind, QUOTA_KINDS[rec.ref.kind], rec.ref.namespace or None, rec.ref.name, rec.ref.uid)


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
