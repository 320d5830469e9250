"""In-memory stand-ins for the broker, the API server and the ledger, for the reconciler's unit tests.

The reconciler's own bookkeeping (narrow passes, transient errors, the guard,
the trust rules) is tested on these; the real broker and API server paths are
the e2e tests'. The pure decide step needs none of them (tests/unit/test_decide.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kquota.domain.claims import ResourceClaim, claim_from_body
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import EntityChange
from kquota.kafka.errors import EntityResult
from kquota.kafka.settings import ConnectionSettings
from kquota.reconcile.engine import ClusterReconciler
from kquota.reconcile.ports import QuotaAdminPort
from kquota.reconcile.records import ClusterConfig
from kquota.reconcile.settings import OperatorSettings


class Broker:
    """Quotas in a dict; counts what was read; can fail chosen entities once."""

    def __init__(self) -> None:
        self.live: dict[Entity, dict[QuotaKey, float]] = {}
        self.described_all = 0
        self.described: list[Entity] = []
        self.fail_once: dict[Entity, str] = {}
        #: Each broker's configs, as DescribeConfigs returns them (only the keys asked for).
        self.configs: dict[int, dict[str, str]] = {}
        self.config_reads = 0

    def broker_configs(self, broker_id: int, keys: Sequence[str]) -> dict[str, str]:
        self.config_reads += 1
        have = self.configs.get(broker_id, {})
        return {k: have[k] for k in keys if k in have}

    def describe_all(self) -> dict[Entity, dict[QuotaKey, float]]:
        self.described_all += 1
        return {e: dict(v) for e, v in self.live.items()}

    def describe_entity(self, entity: Entity) -> dict[QuotaKey, float]:
        self.described.append(entity)
        return dict(self.live.get(entity, {}))

    def alter(self, changes: Sequence[EntityChange]) -> list[EntityResult]:
        out = []
        for alt in changes:
            error = self.fail_once.pop(alt.entity, None)
            if error is not None:
                out.append(EntityResult(alt.entity, -1, "the controller failed", error))
                continue
            values = self.live.setdefault(alt.entity, {})
            for op in alt.ops:
                if op.value is None:
                    values.pop(op.key, None)
                else:
                    values[op.key] = op.value
            if not values:
                del self.live[alt.entity]
            out.append(EntityResult(alt.entity, 0, None))
        return out

    def cluster_info(self) -> tuple[str, list[int]]:
        return "fake-cluster-id", [1]

    def reachable(self, timeout: float) -> tuple[str, list[int]]:
        return self.cluster_info()

    def topic_leaders(self, topics: Sequence[str]) -> dict[str, dict[int, int]]:
        return {}

    def topic_config_names(self, topic: str) -> set[str]:
        return set()

    def close(self) -> None:
        pass


def merge(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """RFC 7386 JSON merge patch, as the API server applies a status patch."""
    out = dict(target)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


class Kube:
    """Statuses merge-patched as the API server does; events recorded as (object name, type, reason, message)."""

    def __init__(self) -> None:
        self.statuses: dict[str, Mapping[str, Any]] = {}
        self.events: list[tuple[str, str, str, str]] = []

    async def patch_status(self, ref: Any, status: Mapping[str, Any]) -> bool:
        self.statuses[ref.name] = merge(self.statuses.get(ref.name, {}), status)
        return True

    async def event(self, ref: Any, type_: str, reason: str, message: str) -> None:
        self.events.append((ref.name, type_, reason, message))


class Ledger:
    async def load(self) -> dict[Entity, dict[QuotaKey, float]]:
        return {}

    async def save(self, ledger: Any, entities: Iterable[Entity]) -> int:
        return 0

    async def repair(self, ledger: Any) -> list[str]:
        return []


def quota(name: str, user: str, rate: int, created: str = "2026-01-01T00:00:00Z", **meta: Any) -> ResourceClaim:
    body = {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ClientQuota",
        "metadata": {"name": name, "namespace": "ns", "uid": name, "generation": 1, "creationTimestamp": created}
        | meta,
        "spec": {"entity": {"user": {"name": user}}, "quota": {"producerByteRate": rate}},
    }
    return claim_from_body("ClientQuota", body, "c")


def engine(
    records: list[ResourceClaim],
    broker: Broker,
    kube: Kube,
    config: ClusterConfig | None = None,
    gone: Mapping[str, ResourceClaim] | None = None,
) -> ClusterReconciler:
    async def cfg() -> ClusterConfig:
        return config or ClusterConfig("c", ConnectionSettings(bootstrap_servers="unused:9092"))

    def admin(_: ClusterConfig) -> QuotaAdminPort:
        return broker

    return ClusterReconciler(
        "c",
        [{"c": records}],  # the list stays live: tests add and remove records between passes
        cfg,
        kube,
        Ledger(),
        OperatorSettings(),
        cluster_object={"metadata": {"name": "c", "uid": "c-uid", "generation": 1}},
        admin_factory=admin,
        gone=gone,
    )


def reason(kube: Kube, name: str) -> str:
    ready = next(c for c in kube.statuses[name]["conditions"] if c["type"] == "Ready")
    return str(ready["reason"])


def client_quota(name: str, user: str, generation: int = 1, deleting: bool = False, **quota_spec: Any) -> ResourceClaim:
    body = {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ClientQuota",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": name,
            "generation": generation,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            **({"deletionTimestamp": "2026-01-02T00:00:00Z"} if deleting else {}),
        },
        "spec": {"entity": {"user": {"name": user}}, "quota": quota_spec},
    }
    return claim_from_body("ClientQuota", body, "c")


def config(**kw: Any) -> ClusterConfig:
    return ClusterConfig("c", ConnectionSettings(bootstrap_servers="unused:9092"), **kw)
