"""The quota index handler: which events wake the reconciler, and what the index keeps.

A spec change (new generation), a deletion, a first sight and a label or
annotation a user sets wake the cluster's reconciler and re-parse the object;
an event that changed only status or the operator's own bookkeeping (the echo
of its status write, Kopf's finalizer and progress notes) keeps the parsed
record with the new status and wakes nothing.
Kopf's per-object memo is a shallow copy of the operator memo (``operator_memo``),
as Kopf hands it over: the shared state is the same object in every copy.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from typing import Any

import kopf
import pytest

from kquota.domain.entities import Entity
from kquota.domain.stored_status import StoredStatus
from kquota.handlers import operator as handlers
from kquota.reconcile.settings import OperatorSettings
from tests.support.engine import Broker, Kube
from tests.support.engine import engine as support_engine
from tests.support.quotas import P


class Engine:
    """Records the uids it was asked to reconcile; holds what it "wrote" to each status."""

    def __init__(self) -> None:
        self.triggered: list[str | None] = []
        self.written: dict[str, StoredStatus] = {}

    def trigger(self, uid: str | None = None) -> None:
        self.triggered.append(uid)

    def written_status(self, uid: str) -> StoredStatus | None:
        return self.written.get(uid)


OPERATOR_MEMO = handlers.operator_memo(OperatorSettings())


@pytest.fixture
def engine() -> Iterator[Engine]:
    fake = Engine()
    handlers.state(OPERATOR_MEMO).engines["c1"] = fake  # type: ignore[assignment]
    try:
        yield fake
    finally:
        handlers.state(OPERATOR_MEMO).engines.pop("c1", None)


def object_memo() -> kopf.Memo:
    """What Kopf gives each object: a shallow copy of the operator's memo."""
    return copy.copy(OPERATOR_MEMO)


def body(rate: int = 100, generation: int = 1, **extra: Any) -> dict[str, Any]:
    meta = {
        "name": "q",
        "namespace": "ns",
        "uid": "u-1",
        "generation": generation,
        "creationTimestamp": "2026-11-24T00:00:00Z",
        "resourceVersion": str(generation * 10),
    }
    meta.update(extra.pop("metadata", {}))
    return {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ClientQuota",
        "metadata": meta,
        "spec": {"clusterRef": "c1", "entity": {"user": {"name": "alice"}}, "quota": {"producerByteRate": rate}},
        **extra,
    }


def index(obj: dict[str, Any], memo: kopf.Memo) -> Any:
    fn = handlers._index("ClientQuota")
    return asyncio.run(fn(body=kopf.Body(obj), memo=memo))["c1"]


def test_first_sight_parses_and_wakes_the_reconciler(engine: Engine) -> None:
    rec = index(body(), object_memo())
    assert engine.triggered == ["u-1"]
    assert rec.entries == ((Entity.for_user("alice"), {P: 100.0}),)


def test_a_status_echo_keeps_the_record_takes_the_status_and_wakes_nothing(engine: Engine) -> None:
    memo = object_memo()
    first = index(body(), memo)
    status = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}
    echo = body(status=status, metadata={"resourceVersion": "11", "finalizers": ["kquota.io/finalizer"]})
    rec = index(echo, memo)
    assert engine.triggered == ["u-1"], "a status-only event woke a pass"
    assert rec.status == status
    assert rec.entries is first.entries, "the spec was parsed again"


def test_the_echo_of_what_kquota_wrote_keeps_one_copy_of_the_status(engine: Engine) -> None:
    memo = object_memo()
    index(body(), memo)
    status = {"observedGeneration": 1, "applied": {"values": {"producer_byte_rate": 100.0}, "cluster": "c1"}}
    engine.written["u-1"] = written = StoredStatus.written(status)
    # As the API server returns it: keys sorted, 100.0 as 100.
    read_back = {"applied": {"cluster": "c1", "values": {"producer_byte_rate": 100}}, "observedGeneration": 1}
    assert index(body(status=read_back, metadata={"resourceVersion": "11"}), memo).status is written
    edited = {**read_back, "observedGeneration": 2}
    rec = index(body(status=edited, metadata={"resourceVersion": "12"}), memo)
    assert rec.status is not written and rec.status == edited
    assert engine.triggered == ["u-1"]


def test_a_spec_change_is_parsed_again_and_wakes_the_reconciler(engine: Engine) -> None:
    memo = object_memo()
    index(body(), memo)
    rec = index(body(rate=200, generation=2), memo)
    assert engine.triggered == ["u-1", "u-1"]
    assert rec.entries == ((Entity.for_user("alice"), {P: 200.0}),)


def test_a_deletion_wakes_the_reconciler(engine: Engine) -> None:
    memo = object_memo()
    index(body(), memo)
    rec = index(body(metadata={"deletionTimestamp": "2026-11-24T01:00:00Z"}), memo)
    assert engine.triggered == ["u-1", "u-1"]
    assert rec.deleting


def test_each_object_has_its_own_memo(engine: Engine) -> None:
    # Kopf gives every object a shallow copy of the operator's memo: one object's
    # record must never stand in for another's.
    index(body(), object_memo())
    other = body()
    other["metadata"]["uid"] = "u-2"
    rec = index(other, object_memo())
    assert engine.triggered == ["u-1", "u-2"]
    assert rec.ref.uid == "u-2"
    assert set(handlers.state(OPERATOR_MEMO).records) >= {"u-1", "u-2"}, "the shared state saw both"
    assert handlers._MEMO_KEY not in OPERATOR_MEMO, "an object's record stayed in its own memo"


@pytest.mark.parametrize(
    ("metadata", "wakes"),
    [
        pytest.param({"annotations": {"poke": "1"}}, True, id="a user's annotation asks for a pass"),
        pytest.param({"labels": {"team": "a"}}, True, id="a label change asks for a pass"),
        pytest.param(
            {"annotations": {"kquota.io/clientquotas_delete": '{"started": "x"}'}}, False, id="Kopf's progress note"
        ),
        pytest.param({"finalizers": ["kquota.io/finalizer"]}, False, id="Kopf adding the finalizer"),
    ],
)
def test_metadata_changes_a_user_makes_wake_the_reconciler(
    engine: Engine, metadata: dict[str, Any], wakes: bool
) -> None:
    memo = object_memo()
    index(body(), memo)
    index(body(metadata=metadata), memo)
    assert engine.triggered == (["u-1", "u-1"] if wakes else ["u-1"])


def test_a_kafkacluster_change_asks_its_reconciler_for_a_full_pass() -> None:
    eng = support_engine([], Broker(), Kube())
    seen = []
    for version in [(1, None), (1, None), (2, None), (2, "0123456789ab"), (2, "0123456789ab")]:
        eng.cluster_seen(version)
        seen.append(eng._pending)
    assert seen == [0, 0, 1, 2, 2], "first sight and repeats are no change; a generation or an approval is"
