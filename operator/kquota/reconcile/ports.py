"""What a reconcile pass needs of Kafka and Kubernetes, as Protocols.

The adapters (:class:`~kquota.kafka.admin.QuotaAdmin`,
:class:`~kquota.k8s.ledger.LedgerStore`, :class:`~kquota.k8s.api.Kube`) satisfy
them as they are; the reconciler is typed against these ports, so an in-memory
stand-in with the same methods is a valid argument without ``type: ignore``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from kquota.domain.claims import ResourceClaim
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import EntityChange
from kquota.k8s.api import ObjectRef
from kquota.kafka.errors import EntityResult

Quotas = Mapping[Entity, Mapping[QuotaKey, float]]


class QuotaAdminPort(Protocol):
    """The Kafka admin requests a pass sends (blocking calls; the pass runs them in a thread)."""

    def cluster_info(self) -> tuple[str, list[int]]: ...
    def reachable(self, timeout: float) -> tuple[str, list[int]]: ...
    def describe_all(self) -> dict[Entity, dict[QuotaKey, float]]: ...
    def describe_entity(self, entity: Entity) -> dict[QuotaKey, float]: ...
    def alter(self, changes: Sequence[EntityChange]) -> list[EntityResult]: ...
    def topic_leaders(self, topics: Sequence[str]) -> dict[str, dict[int, int]]: ...
    def topic_config_names(self, topic: str) -> set[str]: ...
    def broker_configs(self, broker_id: int, keys: Sequence[str]) -> dict[str, str]: ...
    def close(self) -> None: ...


class LedgerPort(Protocol):
    """Where the ownership ledger is kept (ConfigMap shards)."""

    async def load(self) -> dict[Entity, dict[QuotaKey, float]]: ...
    async def save(self, ledger: Quotas, entities: Iterable[Entity]) -> int: ...
    async def repair(self, ledger: Quotas) -> list[str]: ...


class StatusWriter(Protocol):
    """What report and events write to the API server."""

    async def patch_status(self, ref: ObjectRef, status: dict[str, Any]) -> bool: ...
    async def event(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None: ...


@runtime_checkable
class ClaimantIndex(Protocol):
    """An index of the quota resources that also finds them by uid and by claimed entity (ClaimIndex).

    With one, a narrow pass costs what it touches; without (plain mappings, as
    in unit tests), it scans every resource of the cluster for the same answer.
    """

    def claim_in(self, cluster: str, uid: str) -> ResourceClaim | None: ...
    def claimants(self, cluster: str, entity: Entity) -> Iterable[ResourceClaim]: ...
