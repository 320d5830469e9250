"""The ownership ledger on the real API server: its 1 MiB object limit, growth past it, long cluster names."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from harness.kube_apiserver import KubeAPIServer
from kubernetes.aio.client.exceptions import ApiException

from kquota.domain import ledger as fmt
from kquota.domain.entities import Entity, QuotaKey
from kquota.k8s.api import Kube, connect
from kquota.k8s.ledger import LABEL, RETIRED_LABEL, SHARDS_LABEL, LedgerStore, label_value

pytestmark = pytest.mark.e2e

P, C = QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE
T = TypeVar("T")


def with_kube(kube: KubeAPIServer, work: Callable[[Kube], Awaitable[T]]) -> T:
    async def run() -> T:
        api = Kube(await connect(str(kube.kubeconfig)))
        try:
            return await work(api)
        finally:
            await api.close()

    return asyncio.run(run())


def configmaps(kube: KubeAPIServer, namespace: str, selector: str) -> list[dict[str, Any]]:
    out = kube.kubectl("get", "configmaps", "-n", namespace, "-l", selector, "-o", "json").stdout
    return list(json.loads(out)["items"])


def long_pairs(count: int, start: int = 0) -> dict[Entity, dict[QuotaKey, float]]:
    wide = "\U0001d11e" * 1018  # 4 bytes each: 1,024-character names of 4 KiB
    return {
        Entity.for_pair(f"{wide}u{i:05d}", f"{wide}c{i:05d}"): {P: float(i), C: 2.0 * i}
        for i in range(start, start + count)
    }


def test_the_api_server_refuses_a_shard_over_1_mib(kube: KubeAPIServer, namespace: str) -> None:
    """Why the ledger grows: one shard of 600 pairs with 1,024-character ASCII names is refused."""
    text = fmt.encode_shard(
        {Entity.for_pair(f"{'u' * 1018}{i:06d}", f"{'c' * 1018}{i:06d}"): {P: 1.0} for i in range(600)}
    )
    assert 1_048_576 < fmt.encoded_size(text) < 2_000_000

    async def put(api: Kube) -> None:
        await api.put_config_map(namespace, "too-big", {}, {"ledger.json": text})

    with pytest.raises(ApiException) as info:
        with_kube(kube, put)
    assert info.value.status == 422 and "Too long" in str(info.value.body)


def test_a_ledger_of_2000_long_name_pairs_grows_and_reads_back_exactly(kube: KubeAPIServer, namespace: str) -> None:
    led = long_pairs(2_000)

    async def save_in_batches(api: Kube) -> int:
        store = LedgerStore(api, namespace, "main")
        current: dict[Entity, dict[QuotaKey, float]] = {}
        items = list(led.items())
        for i in range(0, len(items), 250):
            chunk = dict(items[i : i + 250])
            current = {**current, **chunk}
            await store.save(current, chunk.keys())
        return store.shards

    shards = with_kube(kube, save_in_batches)
    assert shards > fmt.SHARDS
    live = configmaps(kube, namespace, f"{LABEL}=main")
    assert len(live) == shards and all(cm["metadata"]["labels"][SHARDS_LABEL] == str(shards) for cm in live)
    retired = configmaps(kube, namespace, f"{RETIRED_LABEL}=main")
    assert retired and all(not cm.get("data") for cm in retired)

    async def load(api: Kube) -> dict[Entity, dict[QuotaKey, float]]:
        return await LedgerStore(api, namespace, "main").load()

    assert with_kube(kube, load) == led


def test_a_cluster_name_longer_than_a_label_value(kube: KubeAPIServer, namespace: str) -> None:
    cluster = "kafka-" + "-".join(["prod"] * 40)  # 205 characters: a valid KafkaCluster name
    led = {Entity.for_user("app"): {P: 1000.0}}

    async def save_and_load(api: Kube) -> dict[Entity, dict[QuotaKey, float]]:
        await LedgerStore(api, namespace, cluster).save(led, led.keys())
        return await LedgerStore(api, namespace, cluster).load()

    assert with_kube(kube, save_and_load) == led
    (cm,) = configmaps(kube, namespace, f"{LABEL}={label_value(cluster)}")
    assert len(cm["metadata"]["name"]) <= 253


def test_shards_deleted_or_edited_by_hand_are_rewritten_from_what_the_operator_owns(
    kube: KubeAPIServer, namespace: str
) -> None:
    owned = {Entity.for_user(f"u{i}"): {P: float(i + 1)} for i in range(64)}
    cluster = "repair"

    async def work(api: Kube) -> tuple[list[str], list[str], dict[Entity, dict[QuotaKey, float]]]:
        store = LedgerStore(api, namespace, cluster)
        await store.save(owned, owned)
        assert await store.repair(owned) == [], "nothing changed: nothing rewritten"
        names = sorted(cm["metadata"]["name"] for cm in await api.list_config_maps(namespace, f"{LABEL}={cluster}"))
        kube.kubectl("delete", "configmap", "-n", namespace, names[0])
        kube.kubectl("patch", "configmap", "-n", namespace, names[1], "--type=merge", "-p",
                     json.dumps({"data": {"ledger.json": "{}"}}))  # fmt: skip
        lines = await store.repair(owned)
        # A fresh operator (a restart, a failover) reads every key back.
        return names, lines, await LedgerStore(api, namespace, cluster).load()

    names, lines, loaded = with_kube(kube, work)
    assert loaded == owned
    assert len(lines) == 2
    assert f"ownership ledger ConfigMap {namespace}/{names[0]} was missing (deleted, or its labels removed)" in lines[0]
    assert f"ownership ledger ConfigMap {namespace}/{names[1]} was changed outside kquota" in lines[1]
