"""Ledger format versions (issue 23): a 0.1.0 ledger is read exactly, a newer one is refused, never guessed at.

The 0.1.0 ledger is test data made by that release's code (tests/data/ledger-0.1.0/).
The engine's refusal runs here on in-memory stand-ins; tests/e2e/test_ledger_versions.py
does the same on the real API server and broker.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from kquota.domain import ledger as fmt
from kquota.domain.entities import Entity, QuotaKey
from kquota.k8s.ledger import DATA_KEY, LABEL, SHARDS_LABEL, LedgerStore, shard_name
from kquota.kafka.errors import KafkaUnavailable
from tests.support.engine import Broker, Kube, engine, quota, reason
from tests.support.quotas import C, P

DATA = Path(__file__).resolve().parents[1] / "data" / "ledger-0.1.0" / "configmaps.yaml"
R, M, N = QuotaKey.REQUEST_PERCENTAGE, QuotaKey.CONTROLLER_MUTATION_RATE, QuotaKey.CONNECTION_CREATION_RATE

#: What the 0.1.0 ledger holds, written out by hand (not imported from the script that made it).
EXPECTED_010: dict[Entity, dict[QuotaKey, float]] = {
    Entity.for_user("alice"): {P: 1048576.0, C: 2097152.0},
    Entity.for_user(None): {P: 104857600.0},
    Entity.for_user("<default>"): {R: 50.0},
    Entity.for_user("CN=app,OU=payments,O=Example"): {M: 5.5},
    Entity.for_user("ünïcødé-用户"): {C: 4096.0},
    Entity.for_client("reporting-job"): {C: 524288.0},
    Entity.for_client("a=b,c=d"): {P: 8192.0},
    Entity.for_client(None): {R: 200.0},
    Entity.for_pair("bob", "ingest"): {P: 65536.0, R: 75.0},
    Entity.for_pair(None, "batch-клиент"): {C: 32768.0},
    Entity.for_pair("carol", None): {P: 16384.0},
    Entity.for_ip("10.0.0.7"): {N: 20.0},
    Entity.for_ip(None): {N: 1000.0},
}


def configmaps_010() -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = yaml.safe_load(DATA.read_text(encoding="utf-8"))["items"]
    return items


class ConfigMaps:
    """The two ConfigMap calls LedgerStore makes, on a dict; selectors are ``label=value``."""

    def __init__(self, items: Iterable[Mapping[str, Any]] = ()) -> None:
        self.items = {cm["metadata"]["name"]: dict(cm) for cm in items}
        self.puts = 0

    async def list_config_maps(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        key, value = selector.split("=", 1)
        return [cm for cm in self.items.values() if (cm["metadata"].get("labels") or {}).get(key) == value]

    async def put_config_map(self, namespace: str, name: str, labels: dict[str, str], data: dict[str, str]) -> None:
        self.puts += 1
        self.items[name] = {"metadata": {"name": name, "namespace": namespace, "labels": labels}, "data": data}


def load(cms: ConfigMaps, cluster: str = "legacy") -> dict[Entity, dict[QuotaKey, float]]:
    store = LedgerStore(cms, "kquota-system", cluster)  # type: ignore[arg-type]  # the stand-in has both calls
    return asyncio.run(store.load())


def newer_shard(version: int = 99) -> str:
    # What a newer operator might write: a field this code has never heard of, entries it cannot know.
    return json.dumps({"version": version, "entries": [{"entity": {"user": "alice"}, "owner": "x"}], "epoch": 7})


# -- the 0.1.0 ledger ------------------------------------------------------------------------------


def test_the_010_ledger_reads_back_to_exactly_its_entries() -> None:
    got = load(ConfigMaps(configmaps_010()))
    assert got == EXPECTED_010
    # Same names, not just equal ones: None (the default entity) is never the string "<default>".
    assert {e.user for e in got if e.has_user} >= {None, "<default>"}


def test_every_010_shard_decodes_on_its_own_and_is_format_1() -> None:
    merged: dict[Entity, dict[QuotaKey, float]] = {}
    for cm in configmaps_010():
        text = cm["data"][DATA_KEY]
        assert json.loads(text)["version"] == 1
        assert cm["metadata"]["labels"] == {
            LABEL: "legacy",
            SHARDS_LABEL: "16",
            "app.kubernetes.io/managed-by": "kquota",
        }
        merged.update(fmt.decode_shard(text))
    assert merged == EXPECTED_010


def test_this_code_still_writes_the_010_shards_byte_for_byte() -> None:
    """Format 1 is frozen: what this code writes is what 0.1.0 wrote, so a downgrade to 0.1.0 reads it."""
    for cm in configmaps_010():
        text = cm["data"][DATA_KEY]
        assert fmt.encode_shard(fmt.decode_shard(text)) == text
        assert cm["metadata"]["name"] == shard_name("legacy", fmt.shard_of(next(iter(fmt.decode_shard(text)))))


def test_format_1_is_current_and_migrates_as_the_identity() -> None:
    assert (fmt.OLDEST_VERSION, fmt.FORMAT_VERSION) == (1, 1)
    assert fmt.MIGRATIONS == {}
    doc = json.loads(configmaps_010()[0]["data"][DATA_KEY])
    assert fmt.migrate(doc) == doc


# -- a ledger from a newer operator --------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 99])
def test_a_newer_format_is_refused_naming_both_versions(version: int) -> None:
    with pytest.raises(fmt.LedgerFromNewerOperator) as info:
        fmt.decode_shard(newer_shard(version))
    assert (info.value.found, info.value.supported) == (version, 1)
    message = str(info.value)
    assert f"format version {version}" in message and "reads format version 1 only" in message
    assert "upgrade the operator" in message and "restore the ledger" in message


def test_one_newer_shard_refuses_the_whole_ledger_and_names_its_configmap() -> None:
    items = configmaps_010()
    victim = items[3]
    victim["data"][DATA_KEY] = newer_shard()
    cms = ConfigMaps(items)
    with pytest.raises(fmt.LedgerFromNewerOperator) as info:
        load(cms)
    assert info.value.found == 99
    assert f"ConfigMap kquota-system/{victim['metadata']['name']}" in str(info.value)
    assert cms.puts == 0


# -- malformed shards --------------------------------------------------------------------------------

MALFORMED = {
    "not JSON": "{version: 1",
    "a JSON list": "[1]",
    "no version": '{"entries": []}',
    "version as text": '{"version": "1", "entries": []}',
    "version true": '{"version": true, "entries": []}',
    "version 1.0": '{"version": 1.0, "entries": []}',
    "version 0 (no release wrote it)": '{"version": 0, "entries": []}',
    "negative version": '{"version": -3, "entries": []}',
    "no entries": '{"version": 1}',
    "entries not a list of rows": '{"version": 1, "entries": [3]}',
    "unknown entity type": '{"version": 1, "entries": [{"entity": {"group": "a"}, "keys": {}}]}',
    "ip with a user": '{"version": 1, "entries": [{"entity": {"ip": "1.2.3.4", "user": "a"}, "keys": {}}]}',
    "unknown quota key": '{"version": 1, "entries": [{"entity": {"user": "a"}, "keys": {"bytes": 1}}]}',
    "value null": '{"version": 1, "entries": [{"entity": {"user": "a"}, "keys": {"producer_byte_rate": null}}]}',
    "no keys": '{"version": 1, "entries": [{"entity": {"user": "a"}}]}',
}


@pytest.mark.parametrize("text", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_shard_is_its_own_error(text: str) -> None:
    with pytest.raises(fmt.LedgerMalformed) as info:
        fmt.decode_shard(text)
    assert not isinstance(info.value, fmt.LedgerFromNewerOperator)


def test_a_malformed_shard_in_the_store_names_its_configmap() -> None:
    items = configmaps_010()
    items[0]["data"][DATA_KEY] = '{"version": 1, "entries": [{"entity": {"group": "a"}, "keys": {}}]}'
    with pytest.raises(fmt.LedgerMalformed, match=f"ConfigMap kquota-system/{items[0]['metadata']['name']}: "):
        load(ConfigMaps(items))


# -- the migration chain (exercised with made-up versions: there is only version 1) ----------------


def test_migrations_run_in_order_from_the_version_found(monkeypatch: pytest.MonkeyPatch) -> None:
    def one_to_two(doc: fmt.Doc) -> fmt.Doc:
        return {"version": 2, "rows": doc["entries"]}

    def two_to_three(doc: fmt.Doc) -> fmt.Doc:
        return {"version": 3, "entries": doc["rows"], "seen": [*doc.get("seen", []), 2]}

    monkeypatch.setattr(fmt, "FORMAT_VERSION", 3)
    monkeypatch.setattr(fmt, "MIGRATIONS", {1: one_to_two, 2: two_to_three})
    assert fmt.migrate({"version": 1, "entries": ["e"]}) == {"version": 3, "entries": ["e"], "seen": [2]}
    assert fmt.migrate({"version": 2, "rows": ["e"]}) == {"version": 3, "entries": ["e"], "seen": [2]}
    assert fmt.migrate({"version": 3, "entries": ["e"]}) == {"version": 3, "entries": ["e"]}
    with pytest.raises(fmt.LedgerFromNewerOperator) as info:
        fmt.migrate({"version": 4, "entries": []})
    assert (info.value.found, info.value.supported) == (4, 3)
    assert "reads format versions 1-3 only" in str(info.value)


def test_a_missing_or_wrong_migration_step_is_an_error_not_a_guess(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fmt, "FORMAT_VERSION", 3)
    monkeypatch.setattr(fmt, "MIGRATIONS", {1: lambda doc: {**doc, "version": 3}})
    with pytest.raises(fmt.LedgerMalformed, match="did not give 2"):
        fmt.migrate({"version": 1, "entries": []})
    with pytest.raises(fmt.LedgerMalformed, match="no migration from ledger format version 2 to 3"):
        fmt.migrate({"version": 2, "entries": []})


# -- the engine meets a newer ledger ---------------------------------------------------------------------


def test_the_engine_refuses_a_newer_ledger_changes_nothing_says_so_once_and_recovers_when_restored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    alice, bob = Entity.for_user("alice"), Entity.for_user("bob")

    async def run() -> None:
        broker, kube = Broker(), Kube()
        before = {alice: {P: 1000.0}, bob: {P: 3000.0}}
        broker.live = {e: dict(v) for e, v in before.items()}
        records = [quota("qa", "alice", 2000), quota("qb", "bob", 3000, deletionTimestamp="2026-01-02T00:00:00Z")]
        eng = engine(records, broker, kube)
        eng.settings = eng.settings.model_copy(update={"removal_settle": 0.0})
        newer = {"metadata": {"name": shard_name("c", 3), "labels": {LABEL: "c"}}, "data": {DATA_KEY: newer_shard()}}
        cms = ConfigMaps([newer])
        eng.ledger_store = LedgerStore(cms, "kquota-system", "c")  # type: ignore[arg-type]

        async def quick(seconds: float) -> None:
            await asyncio.sleep(0.01)

        eng._back_off = quick  # type: ignore[method-assign]  # retries without the backoff's seconds
        stopped = asyncio.Event()
        task = asyncio.create_task(eng.run(stopped))
        # A finalizer waiting for bob's key to go is refused too: the deletion waits.
        with pytest.raises(KafkaUnavailable, match="format version 99"):
            await eng.wait_released("qb", timeout=5)
        for _ in range(20):  # several retries, all refused
            await asyncio.sleep(0.02)
        assert broker.live == before
        assert broker.described_all == 0 and broker.described == []
        assert cms.puts == 0, "the ledger is not rewritten either"

        cluster_ready = next(c for c in kube.statuses["c"]["conditions"] if c["type"] == "Ready")
        assert (cluster_ready["status"], cluster_ready["reason"]) == ("False", "LedgerFromNewerOperator")
        assert "format version 99" in cluster_ready["message"] and "version 1" in cluster_ready["message"]
        assert any(c["type"] == "Stalled" and c["status"] == "True" for c in kube.statuses["c"]["conditions"]), (
            "only a person can fix it: GitOps health must not wait"
        )
        assert reason(kube, "qa") == "LedgerFromNewerOperator"
        # Said once, however many retries: on the KafkaCluster, and on the resource whose Ready changed.
        warned = sorted(e[:2] for e in kube.events if e[2] == "LedgerFromNewerOperator")
        assert warned == [("c", "Warning"), ("qa", "Warning")], kube.events
        assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
            f"cluster c: {cluster_ready['message']}"
        ]

        # The ledger saved before the upgrade is put back: the next retry reads it and carries on.
        cms.items[newer["metadata"]["name"]]["data"] = {DATA_KEY: fmt.encode_shard({bob: {P: 3000.0}})}
        for _ in range(100):
            await asyncio.sleep(0.02)
            if broker.live.get(alice) == {P: 2000.0} and bob not in broker.live:
                break
        stopped.set()
        eng.trigger()
        await asyncio.wait_for(task, 5)
        assert broker.live == {alice: {P: 2000.0}}, "applied, and the deleted resource's owned key removed"
        assert reason(kube, "qa") == "Applied"

    with caplog.at_level(logging.ERROR, logger="kquota.reconcile.engine"):
        asyncio.run(run())
