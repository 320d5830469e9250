"""The cluster a CLI command works on, and what the command knows about it; the error for one it cannot reach."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from kquota.domain.claims import ResourceClaim
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.guard import GuardLimits
from kquota.domain.plan import Protection, UnmanagedPolicy
from kquota.domain.tenancy import Grant
from kquota.kafka.settings import ConnectionSettings

if TYPE_CHECKING:
    from kquota.reconcile.settings import OperatorSettings

DEFAULT_LEDGER_NAMESPACE: Final = "kquota-system"

Quotas = dict[Entity, dict[QuotaKey, float]]


class TargetError(Exception):
    """The cluster cannot be reached or described; the message says what to fix."""


@dataclass(slots=True)
class Target:
    """A Kafka cluster and what is known about it. None means "not known" (no Kubernetes access)."""

    connection: ConnectionSettings
    #: The KafkaCluster's name, with --cluster.
    cluster: str | None = None
    policy: UnmanagedPolicy = UnmanagedPolicy.IGNORE
    protection: Protection = dataclasses.field(default_factory=Protection)
    grants: tuple[Grant, ...] | None = None
    ledger: Quotas | None = None
    #: The quota resources in the Kubernetes cluster that target this KafkaCluster.
    claimants: list[ResourceClaim] | None = None
    ledger_namespace: str = DEFAULT_LEDGER_NAMESPACE
    #: With --cluster, why the ledger could not be read (when the command could do without it).
    ledger_problem: str | None = None
    #: The operator's default cluster (resources without clusterRef target it), when known.
    default_cluster: str | None = None
    #: Where ``default_cluster`` comes from, in words.
    default_cluster_source: str | None = None
    #: The operator's settings as far as the CLI knows them (published ones, else the defaults).
    settings: OperatorSettings | None = None
    #: The operator's own principals on this cluster (always protected).
    principals: frozenset[str] = frozenset()
    #: The mass-removal guard's limits, and the KafkaCluster's current approval annotation.
    guard: GuardLimits = dataclasses.field(default_factory=GuardLimits)
    approval: str | None = None
    #: The KafkaCluster's spec.quotaCallback.honoursEntityQuotas.
    callback_honoured: bool = False

    def describe(self) -> str:
        where = self.connection.bootstrap_servers
        return f"cluster {self.cluster} ({where})" if self.cluster else where
