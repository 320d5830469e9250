"""What the reconciler knows about each quota resource and each Kafka cluster.

Built from raw Kubernetes objects by the handlers (Kopf indexes hold them), so
the reconciler works on plain, already-validated data and never on dicts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import Protection, ResourceRef, UnmanagedPolicy
from kquota.domain.tenancy import Grant
from kquota.k8s.api import ObjectRef
from kquota.kafka.settings import ConnectionSettings
from kquota.metrics.names import MetricNames


def _frozen(value: Any) -> Any:
    """A hashable value equal wherever ``value`` is (maps as frozensets of items, lists as tuples)."""
    if isinstance(value, Mapping):
        return frozenset((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    return value


class StoredStatus(Mapping[str, Any]):
    """A resource's status kept compact: its JSON and a digest, read whole only to render a change.

    Decoded, a status is a few KB of dicts and strings per resource for as long as the
    operator runs (at 10,000 resources the largest thing kquota kept per resource, and kept
    twice: as read back and as written). Equal statuses have equal digests (Python's hash
    agrees with ``==``, 1000 and 1000.0 alike), so comparing a stored status with what kquota
    wrote compares two integers; each is computed once, when the drift check first asks.
    """

    __slots__ = ("_digest", "_json")

    def __init__(self, encoded: bytes) -> None:
        self._json = encoded
        self._digest: int | None = None

    @classmethod
    def of(cls, status: Mapping[str, Any] | None) -> StoredStatus:
        if not status:
            return EMPTY_STATUS
        return cls(json.dumps(status, separators=(",", ":")).encode())

    @property
    def digest(self) -> int:
        """Equal for equal statuses; computed when first asked (by the drift check), then kept."""
        if self._digest is None:
            self._digest = hash(_frozen(self.decoded()))
        return self._digest

    def mentions(self, fragment: bytes) -> bool:
        """Whether the compact JSON (no spaces after ``:`` or ``,``) holds ``fragment``, decoding nothing."""
        return fragment in self._json

    def decoded(self) -> dict[str, Any]:
        """The status as a new dict of its own."""
        found: dict[str, Any] = json.loads(self._json)
        return found

    def __getitem__(self, key: str) -> Any:
        return self.decoded()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.decoded())

    def __len__(self) -> int:
        return len(self.decoded())

    def __bool__(self) -> bool:
        return self._json != b"{}"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StoredStatus):
            return self.digest == other.digest
        return isinstance(other, Mapping) and self.decoded() == dict(other)

    def __hash__(self) -> int:
        return self.digest

    def __repr__(self) -> str:
        return f"StoredStatus({self._json.decode()})"


EMPTY_STATUS = StoredStatus(b"{}")


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
    status: StoredStatus = EMPTY_STATUS
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
