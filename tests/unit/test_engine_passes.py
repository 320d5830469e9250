"""The reconciler's pass logic with in-memory stand-ins for the broker and the API server.

What is checked here is the engine's own bookkeeping (which entities a narrow
pass covers, what a transient broker error does); the real broker and API
server paths are the e2e tests'.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.status import Reason
from kquota.kafka.quotas import ConnectionSettings, EntityAlteration, EntityResult, QuotaAdmin
from kquota.reconcile.build import record_from_body
from kquota.reconcile.engine import ClusterReconciler
from kquota.reconcile.records import ClusterConfig, ResourceRecord
from kquota.reconcile.settings import OperatorSettings
from tests.support.quotas import P


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

    def alter(self, alterations: Sequence[EntityAlteration]) -> list[EntityResult]:
        out = []
        for alt in alterations:
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

    def broker_ids(self) -> list[int]:
        return [1]

    def cluster_info(self) -> tuple[str, list[int]]:
        return "fake-cluster-id", [1]

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


def quota(name: str, user: str, rate: int, created: str = "2026-01-01T00:00:00Z", **meta: Any) -> ResourceRecord:
    body = {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ClientQuota",
        "metadata": {"name": name, "namespace": "ns", "uid": name, "generation": 1, "creationTimestamp": created}
        | meta,
        "spec": {"entity": {"user": {"name": user}}, "quota": {"producerByteRate": rate}},
    }
    return record_from_body("ClientQuota", body, "c")


def engine(
    records: list[ResourceRecord], broker: Broker, kube: Kube, config: ClusterConfig | None = None
) -> ClusterReconciler:
    async def cfg() -> ClusterConfig:
        return config or ClusterConfig("c", ConnectionSettings(bootstrap_servers="unused:9092"))

    def admin(_: ClusterConfig) -> QuotaAdmin:
        return broker  # type: ignore[return-value]  # the stand-in has the methods the engine calls

    return ClusterReconciler(
        "c",
        lambda: list(records),
        cfg,
        kube,
        Ledger(),
        OperatorSettings(),
        admin_factory=admin,  # type: ignore[arg-type]
        cluster_object=lambda: {"metadata": {"name": "c", "uid": "c-uid", "generation": 1}},
    )


def reason(kube: Kube, name: str) -> str:
    ready = next(c for c in kube.statuses[name]["conditions"] if c["type"] == "Ready")
    return str(ready["reason"])


def test_a_narrow_pass_reads_and_changes_only_the_touched_entities() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota(f"q{i}", f"u{i}", 100 + i) for i in range(50)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        assert broker.described_all == 1 and len(broker.live) == 50
        # Someone changes u7 out of band; a narrow pass for q3 neither sees nor fixes it.
        broker.live[Entity.for_user("u7")] = {P: 1.0}
        records[3] = quota("q3", "u3", 999, generation=2)
        report = await eng.reconcile_once(frozenset({"q3"}))
        assert broker.described_all == 1, "a narrow pass must not describe everything"
        assert broker.described == [Entity.for_user("u3")]
        assert report.changes == 1 and broker.live[Entity.for_user("u3")] == {P: 999.0}
        assert broker.live[Entity.for_user("u7")] == {P: 1.0}
        # The next full pass restores it.
        await eng.reconcile_once()
        assert broker.live[Entity.for_user("u7")] == {P: 107.0}

    asyncio.run(run())


def test_a_narrow_pass_includes_every_claimant_of_a_touched_entity() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        older = quota("older", "shared", 100, created="2026-01-01T00:00:00Z")
        newer = quota("newer", "shared", 200, created="2026-02-01T00:00:00Z")
        records = [older]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        records.append(newer)
        await eng.reconcile_once(frozenset({"newer"}))
        # The older resource is not in scope but claims the entity: it still wins.
        assert broker.live[Entity.for_user("shared")] == {P: 100.0}
        assert reason(kube, "newer") == Reason.CONFLICT.value
        # The winner is deleted (its record gone from the index): a narrow pass for
        # its uid hands the key to the other claimant.
        records.remove(older)
        await eng.reconcile_once(frozenset({"older"}))
        assert broker.live[Entity.for_user("shared")] == {P: 200.0}
        assert reason(kube, "newer") == Reason.APPLIED.value

    asyncio.run(run())


def test_a_deleted_resource_not_seen_again_loses_its_keys_in_a_narrow_pass() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota("gone", "u-gone", 5), quota("stays", "u-stays", 6)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        del records[0]
        await eng.reconcile_once(frozenset({"gone"}))
        assert broker.live == {Entity.for_user("u-stays"): {P: 6.0}}

    asyncio.run(run())


def test_a_transient_broker_error_is_retried_soon_and_not_reported_as_rejected() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota("q", "u", 42)]
        eng = engine(records, broker, kube)
        broker.fail_once[Entity.for_user("u")] = "UNKNOWN_SERVER_ERROR"
        await eng.reconcile_once()
        assert reason(kube, "q") == Reason.KAFKA_UNAVAILABLE.value
        assert Entity.for_user("u") not in broker.live
        # Not held back: the very next pass sends it again.
        await eng.reconcile_once()
        assert broker.live[Entity.for_user("u")] == {P: 42.0}
        assert reason(kube, "q") == Reason.APPLIED.value

    asyncio.run(run())


def test_a_value_the_broker_refuses_is_held_back() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota("q", "u", 42)]
        eng = engine(records, broker, kube)
        broker.fail_once[Entity.for_user("u")] = "INVALID_REQUEST"
        await eng.reconcile_once()
        assert reason(kube, "q") == Reason.REJECTED.value
        report = await eng.reconcile_once()
        assert report.changes == 0, "a rejected value must not be retried in a hot loop"
        assert reason(kube, "q") == Reason.REJECTED.value

    asyncio.run(run())
