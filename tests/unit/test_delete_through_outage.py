"""A deletion handler waits through a Kafka outage instead of handing back to Kopf's 10 s retry."""

from __future__ import annotations

import asyncio

import kopf
import pytest

from kquota.handlers import operator as handlers
from kquota.kafka.errors import KafkaUnavailable
from kquota.reconcile.settings import OperatorSettings

pytestmark = pytest.mark.unit


class Engine:
    """Fails ``failures`` waits as a pass that found Kafka unavailable does, then releases."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.waits = 0

    async def wait_released(self, uid: str, timeout: float) -> None:
        self.waits += 1
        await asyncio.sleep(0.01)  # a pass
        if self.waits <= self.failures:
            raise KafkaUnavailable("authentication refused")


def test_released_by_the_first_pass_after_the_outage() -> None:
    engine = Engine(failures=3)
    asyncio.run(handlers._released(engine, "u-1"))  # type: ignore[arg-type]
    assert engine.waits == 4


def test_an_outage_longer_than_the_wait_hands_back_to_kopf(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handlers, "RELEASE_WAIT_SECONDS", 0.1)
    engine = Engine(failures=10**6)
    with pytest.raises(kopf.TemporaryError, match="authentication refused"):
        asyncio.run(handlers._released(engine, "u-1"))  # type: ignore[arg-type]
    assert 2 <= engine.waits < 100


def test_a_deletion_waiting_on_a_reconciler_that_stops_keeps_its_key_with_quota_kept() -> None:
    """Issue #33, finding 1: a deletion waiting while its KafkaCluster is deleted. The stopped reconciler
    stayed in the operator's state and the deletion waited on it for ever (a log line with an empty
    cause every minute, no event); it must decide again and end with QuotaKept."""
    from tests.support.engine import Broker, Kube, client_quota, engine

    async def run() -> None:
        memo = handlers.operator_memo(OperatorSettings(default_cluster="c"))
        st = handlers.state(memo)
        kube = Kube()
        st.kube = kube  # type: ignore[assignment]
        eng = engine([client_quota("q", "alice", producerByteRate=1000)], Broker(), kube)
        st.engines["c"] = eng
        body = {
            "apiVersion": "kquota.io/v1alpha1",
            "kind": "ClientQuota",
            "metadata": {"name": "q", "namespace": "ns", "uid": "q", "deletionTimestamp": "2026-01-02T00:00:00Z"},
            "spec": {"entity": {"user": {"name": "alice"}}, "quota": {"producerByteRate": 1000}},
        }
        clusters: dict[str, int] = {"c": 1}
        delete = handlers._delete("ClientQuota")
        waiting = asyncio.create_task(delete(body=body, memo=memo, kafkaclusters_index=clusters))
        await asyncio.sleep(0.05)
        assert not waiting.done(), "no pass ran: the deletion waits"
        # The KafkaCluster is deleted: its daemon stops the reconciler, then the object goes.
        del st.engines["c"]
        eng.close()
        clusters.clear()
        await asyncio.wait_for(waiting, 2)
        (kept,) = [e for e in kube.events if e[2] == "QuotaKept"]
        assert kept[:2] == ("q", "Warning") and "KafkaCluster 'c' does not exist" in kept[3]

    asyncio.run(run())
