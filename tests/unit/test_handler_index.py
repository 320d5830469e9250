"""kquota's index of the quota resources: which events wake the reconciler, and what it keeps.

A spec change (new generation), a deletion, a first sight and a label or
annotation a user sets wake the cluster's reconciler and re-parse the object;
an event that changed only status or the operator's own bookkeeping (the echo
of its status write, Kopf's finalizer and progress notes) keeps the parsed
record with the new status and wakes nothing. A deletion the watch delivers,
and an object a new list lacks, leave the index and wake the reconciler.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

import pytest

from kquota.domain.decide import narrow, narrow_by_index
from kquota.domain.entities import Entity
from kquota.domain.stored_status import StoredStatus
from kquota.handlers.operator import OperatorState, _listed_again, _vanished
from kquota.reconcile.claim_index import ClaimIndex
from kquota.reconcile.settings import OperatorSettings
from tests.support.engine import Broker, Kube
from tests.support.engine import engine as support_engine
from tests.support.quotas import P


class Engine:
    """Records the uids it was asked to reconcile; holds what it "wrote" to each status."""

    def __init__(self) -> None:
        self.triggered: list[str | None] = []
        self.written: dict[str, StoredStatus] = {}


@pytest.fixture
def engine() -> Engine:
    return Engine()


def claims(engine: Engine) -> ClaimIndex:
    return ClaimIndex(
        "default",
        lambda cluster, uid: engine.triggered.append(uid) if cluster == "c1" else None,
        lambda cluster, uid: engine.written.get(uid),
    )


def watched(engine: Engine, vanished: list[str], again: list[str]) -> ClaimIndex:
    """An index that records the uids it takes for vanished and those listed again."""
    return ClaimIndex(
        "default",
        lambda c, u: engine.triggered.append(u),
        lambda c, u: None,
        None,
        lambda r: vanished.append(r.ref.uid),
        again.append,
    )


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


def index(obj: dict[str, Any], idx: ClaimIndex) -> Any:
    idx.upsert("ClientQuota", obj)
    (rec,) = [r for r in idx.get("c1", ()) if r.ref.uid == obj["metadata"]["uid"]]
    return rec


def test_first_sight_parses_and_wakes_the_reconciler(engine: Engine) -> None:
    rec = index(body(), claims(engine))
    assert engine.triggered == ["u-1"]
    assert rec.entries == ((Entity.for_user("alice"), {P: 100.0}),)


def test_a_status_echo_keeps_the_record_takes_the_status_and_wakes_nothing(engine: Engine) -> None:
    memo = claims(engine)
    first = index(body(), memo)
    status = {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]}
    echo = body(status=status, metadata={"resourceVersion": "11", "finalizers": ["kquota.io/finalizer"]})
    rec = index(echo, memo)
    assert engine.triggered == ["u-1"], "a status-only event woke a pass"
    assert rec.status == status
    assert rec.entries is first.entries, "the spec was parsed again"


def test_the_echo_of_what_kquota_wrote_keeps_one_copy_of_the_status(engine: Engine) -> None:
    memo = claims(engine)
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
    memo = claims(engine)
    index(body(), memo)
    rec = index(body(rate=200, generation=2), memo)
    assert engine.triggered == ["u-1", "u-1"]
    assert rec.entries == ((Entity.for_user("alice"), {P: 200.0}),)


def test_a_deletion_wakes_the_reconciler(engine: Engine) -> None:
    memo = claims(engine)
    index(body(), memo)
    rec = index(body(metadata={"deletionTimestamp": "2026-11-24T01:00:00Z"}), memo)
    assert engine.triggered == ["u-1", "u-1"]
    assert rec.deleting


def test_a_deletion_the_watch_delivers_drops_the_claim_and_wakes_the_reconciler(engine: Engine) -> None:
    idx = claims(engine)
    index(body(), idx)
    idx.delete("ClientQuota", body())
    assert engine.triggered == ["u-1", "u-1"]
    assert list(idx.get("c1", ())) == [] and "u-1" not in idx.records


def test_an_object_a_new_list_lacks_was_deleted_unseen(engine: Engine) -> None:
    idx = claims(engine)
    idx.expect("ClientQuota", None)
    index(body(), idx)
    other = body()
    other["metadata"]["uid"] = "u-2"
    index(other, idx)
    assert not idx.synced.is_set(), "not synced before the first complete list"
    idx.listed("ClientQuota", None, {"u-1", "u-2"})
    assert idx.synced.is_set()
    # After an expired watch the kind is listed again: u-2 is missing from it.
    idx.listed("ClientQuota", None, {"u-1"})
    assert [r.ref.uid for r in idx.get("c1", ())] == ["u-1"]
    assert engine.triggered == ["u-1", "u-2", "u-2"]
    # A list of another kind, or of one namespace, leaves the rest alone.
    idx.listed("TopicQuota", None, set())
    idx.listed("ClientQuota", "elsewhere", set())
    assert [r.ref.uid for r in idx.get("c1", ())] == ["u-1"]


def test_synced_waits_for_every_scope(engine: Engine) -> None:
    idx = claims(engine)
    idx.expect("ClientQuota", "a")
    idx.expect("ClientQuota", "b")
    idx.listed("ClientQuota", "a", set())
    assert not idx.synced.is_set()
    idx.forget_scope("ClientQuota", "b")
    assert idx.synced.is_set()


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
    memo = claims(engine)
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


def test_an_object_gone_without_being_seen_terminating_is_named_as_vanished(engine: Engine) -> None:
    vanished: list[str] = []
    idx = watched(engine, vanished, [])
    index(body(), idx)
    terminating = body(metadata={"uid": "u-2", "deletionTimestamp": "2026-11-24T01:00:00Z"})
    index(terminating, idx)
    idx.delete("ClientQuota", terminating)  # released by its finalizer: seen Terminating first
    idx.delete("ClientQuota", body())  # gone at once: no finalizer held it
    assert vanished == ["u-1"]
    idx.expect("ClientQuota", None)
    other = body(metadata={"uid": "u-3"})
    index(other, idx)
    idx.listed("ClientQuota", None, set())  # a list after an expired watch lacks it
    assert vanished == ["u-1", "u-3"]


def test_a_resource_taken_for_vanished_that_is_listed_again_is_said_to_be_back(engine: Engine) -> None:
    """A uid is never reused: one the API server lists again was not deleted, and must be reconciled again."""
    vanished: list[str] = []
    again: list[str] = []
    idx = watched(engine, vanished, again)
    index(body(), idx)
    idx.expect("ClientQuota", "ns")
    idx.forget_scope("ClientQuota", "ns")  # its informer stopped: the index drops it as deleted
    assert vanished == ["u-1"] and not idx.holds("u-1")
    rec = index(body(), idx)  # listed again
    assert again[-1] == "u-1" and idx.holds("u-1") and rec.entries == ((Entity.for_user("alice"), {P: 100.0}),)


def test_the_operator_reconciles_again_what_it_took_for_vanished_once_it_is_listed_again(engine: Engine) -> None:
    st = OperatorState(OperatorSettings())
    rec = index(body(), claims(engine))
    _vanished(st, rec)
    assert "u-1" in st.gone  # left out of every pass: its keys are removed as a deleted resource's
    _listed_again(st, "u-1")
    assert "u-1" not in st.gone


# -- narrow passes from the index -------------------------------------------------------------


def _random_body(rng: random.Random, uid: str, generation: int) -> tuple[str, dict[str, Any]]:
    """A ClientQuota (a user, a client id or both, from small pools: they overlap), a TopicQuota, or an invalid one."""
    users, clients = [f"u{i}" for i in range(6)], [f"c{i}" for i in range(4)]
    meta = {
        "name": uid,
        "namespace": "ns",
        "uid": uid,
        "generation": generation,
        "creationTimestamp": "2026-11-24T00:00:00Z",
    }
    cluster = rng.choice(["c1", "c1", "c1", "c2"])
    roll = rng.random()
    if roll < 0.15:
        spec: dict[str, Any] = {
            "clusterRef": cluster,
            "topic": {"name": "orders"},
            "budget": {"producerByteRate": 1000},
            "enforcement": "Monitor",
            "clients": [{"user": {"name": rng.choice(users)}, "share": 50}],
        }
        return "TopicQuota", {"apiVersion": "kquota.io/v1alpha1", "kind": "TopicQuota", "metadata": meta, "spec": spec}
    entity: dict[str, Any] = {}
    if roll < 0.6:
        entity["user"] = {"name": rng.choice(users)}
    if roll >= 0.45:
        entity["clientId"] = {"name": rng.choice(clients)}
    quota = {"producerByteRate": rng.randint(1, 9)} if roll < 0.95 else {"producerByteRate": -1}  # the last: invalid
    spec = {"clusterRef": cluster, "entity": entity, "quota": quota}
    return "ClientQuota", {"apiVersion": "kquota.io/v1alpha1", "kind": "ClientQuota", "metadata": meta, "spec": spec}


def _covered(narrowed: tuple[list[Any], frozenset[Entity]] | None) -> tuple[list[str], frozenset[Entity]] | None:
    return None if narrowed is None else (sorted(r.ref.uid for r in narrowed[0]), narrowed[1])


@pytest.mark.parametrize("seed", range(12))
def test_a_narrow_pass_from_the_kept_index_covers_what_an_index_built_afresh_covers(seed: int) -> None:
    # The index is kept through creates, status echoes, spec changes (other entities, another
    # cluster, another kind's shape) and deletions; after each step, every scope a narrow pass
    # may be given finds the same resources and entities as narrow() over the same resources
    # (which indexes them afresh).
    rng = random.Random(seed)
    idx = ClaimIndex("default", lambda c, u: None, lambda c, u: None)
    generations: dict[str, int] = {}
    for step in range(60):
        uid = f"r{rng.randrange(25)}"
        if uid in generations and rng.random() < 0.2:
            kind = idx.records[uid].ref.kind
            idx.delete(kind, {"metadata": {"uid": uid}})
            del generations[uid]
        elif uid in generations and rng.random() < 0.3:
            rec = idx.records[uid]
            kind, obj = _random_body(random.Random(f"{seed}-{uid}-{generations[uid]}"), uid, generations[uid])
            obj["status"] = {"conditions": [{"type": "Ready", "status": "True", "reason": f"step{step}"}]}
            idx.upsert(kind, obj)  # the same spec and generation: a status echo
            assert idx.records[uid].entries is rec.entries
        else:
            generations[uid] = generations.get(uid, 0) + 1
            kind, obj = _random_body(random.Random(f"{seed}-{uid}-{generations[uid]}"), uid, generations[uid])
            idx.upsert(kind, obj)
        for cluster in ("c1", "c2"):
            every = list(idx.get(cluster, ()))
            remembered = {r.ref.uid: frozenset(e for e, _ in r.entries) for r in every[::2]}
            remembered["gone-one"] = frozenset({Entity.for_user("u0")})
            for scope in ({r.ref.uid} for r in every[:8]):
                for extra in (set(), {"gone-one"}):
                    wanted = frozenset(scope | extra)
                    for limit in (2, 100):
                        scan = narrow(every, wanted, remembered, limit)
                        got = narrow_by_index(
                            wanted,
                            remembered,
                            limit,
                            partial(idx.claim_in, cluster),
                            partial(idx.claimants, cluster),
                        )
                        assert _covered(got) == _covered(scan), (seed, step, cluster, wanted, limit)
