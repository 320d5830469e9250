"""Every way a pass can fail ends as a status: an unexpected exception in each gather step, and after it.

Each case makes one step of the pass raise an exception nothing else names
(a RuntimeError), runs the reconcile loop until it has failed twice, and checks
what a user sees: the resource and the KafkaCluster say ``Ready=False``,
``ClusterNotReady``, with the step and the cause; exactly one Warning event on
the KafkaCluster (not one per retry); and the next good pass clears it all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from kquota.domain.claims import ResourceClaim
from kquota.domain.entities import Entity, QuotaKey
from kquota.reconcile import gather as gather_module
from kquota.reconcile.engine import ClusterReconciler
from kquota.reconcile.records import ClusterConfig
from kquota.reconcile.settings import OperatorSettings
from tests.support.engine import Broker, Kube, Ledger, client_quota, config

pytestmark = pytest.mark.unit

BOOM = "boom: something nobody expected"


class Failing:
    """A switch: while on, the step it guards raises RuntimeError(BOOM)."""

    def __init__(self) -> None:
        self.on = True
        self.calls = 0

    def hit(self) -> None:
        self.calls += 1
        if self.on:
            raise RuntimeError(BOOM)


class FailingIndex(Mapping[str, Any]):
    def __init__(self, records: list[ResourceClaim], switch: Failing) -> None:
        self.records, self.switch = records, switch

    def __getitem__(self, key: str) -> Any:
        if key != "c":
            raise KeyError(key)
        self.switch.hit()
        return self.records

    def __iter__(self) -> Iterator[str]:
        return iter(["c"])

    def __len__(self) -> int:
        return 1


def build(
    switch: Failing, step: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[ClusterReconciler, Kube, Broker, list[ResourceClaim]]:
    broker, kube = Broker(), Kube()
    records = [client_quota("q", "alice", producerByteRate=1000)]
    if step == "topics":
        topic_body = {
            "apiVersion": "kquota.io/v1alpha1",
            "kind": "TopicQuota",
            "metadata": {"name": "t", "namespace": "ns", "uid": "t", "generation": 1},
            "spec": {
                "topic": {"name": "orders"},
                "budget": {"producerByteRate": 1000},
                "enforcement": "Monitor",
            },
        }
        from kquota.domain.claims import claim_from_body

        records.append(claim_from_body("TopicQuota", topic_body, "c"))
    ledger = Ledger()
    index: Mapping[str, Any] = {"c": records}

    async def cfg() -> ClusterConfig:
        if step == "cluster":
            switch.hit()
        return config()

    def admin(_: ClusterConfig) -> Any:
        if step == "admin":
            switch.hit()
        return broker

    if step == "records":
        index = FailingIndex(records, switch)
    if step == "ledger":
        real = ledger.load

        async def load() -> dict[Entity, dict[QuotaKey, float]]:
            switch.hit()
            return await real()

        ledger.load = load  # type: ignore[method-assign]
    if step == "cluster_info":
        real_info = broker.cluster_info

        def cluster_info() -> tuple[str, list[int]]:
            switch.hit()
            return real_info()

        broker.cluster_info = cluster_info  # type: ignore[method-assign]
    if step == "describe":
        real_describe = broker.describe_all

        def describe_all() -> dict[Entity, dict[QuotaKey, float]]:
            switch.hit()
            return real_describe()

        broker.describe_all = describe_all  # type: ignore[method-assign]
    if step == "topics":
        real_leaders = broker.topic_leaders

        def topic_leaders(topics: Any) -> dict[str, dict[int, int]]:
            switch.hit()
            return real_leaders(topics)

        broker.topic_leaders = topic_leaders  # type: ignore[method-assign]
    if step == "alter":
        real_alter = broker.alter

        def alter(changes: Any) -> Any:
            switch.hit()
            return real_alter(changes)

        broker.alter = alter  # type: ignore[method-assign]
    eng = ClusterReconciler(
        "c",
        [index],
        cfg,
        kube,
        ledger,
        OperatorSettings(),
        cluster_object={"metadata": {"name": "c", "uid": "c-uid", "generation": 1}},
        admin_factory=admin,
    )
    if step == "narrow":
        real_narrow = gather_module.narrow

        def narrow(*args: Any) -> Any:
            switch.hit()
            return real_narrow(*args)

        monkeypatch.setattr(gather_module, "narrow", narrow)
    if step == "approval":
        real_approval = eng._approval

        def approval() -> str | None:
            switch.hit()
            return real_approval()

        monkeypatch.setattr(eng, "_approval", approval)

    async def short(_: float) -> None:
        await asyncio.sleep(0.01)

    monkeypatch.setattr(eng, "_back_off", short)
    return eng, kube, broker, records


def ready(kube: Kube, name: str) -> dict[str, Any]:
    found = [c for c in kube.statuses.get(name, {}).get("conditions", []) if c["type"] == "Ready"]
    return dict(found[0]) if found else {}


async def until(check: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


#: Each step of the pass, with the words its status must use for it.
STEPS = {
    "cluster": "while reading the KafkaCluster, its Secrets and Strimzi objects",
    "records": "while reading the quota resources",
    "ledger": "while reading the ownership ledger",
    "admin": "while reading the Kafka cluster's id and brokers",
    "cluster_info": "while reading the Kafka cluster's id and brokers",
    "topics": "while reading the topics TopicQuotas name",
    "describe": "while reading the live quotas",
    "approval": "while reading the KafkaCluster's removal approval",
    "narrow": "while reading the resources a narrow pass covers",
    # After gather: the generic rule (nothing is known about the brokers after an unexpected failure).
    "alter": "the reconcile pass failed",
}


async def narrow_pass_fails(eng: ClusterReconciler, kube: Kube, switch: Failing) -> None:
    """Only a narrow pass (a resource changed) narrows: it fails, says so once, and the full pass after it recovers."""
    await until(lambda: ready(kube, "q").get("reason") == "Applied", "the first full pass")
    assert switch.calls == 0
    eng.trigger("q")
    await until(lambda: switch.calls >= 1, "a narrow pass")
    switch.on = False
    await until(lambda: any(e[2] == "ClusterNotReady" for e in kube.events), "the event")
    found = [e for e in kube.events if e[0] == "c" and e[2] == "ClusterNotReady"]
    assert len(found) == 1, kube.events
    (event,) = found
    assert event[:2] == ("c", "Warning") and STEPS["narrow"] in event[3] and BOOM in event[3]
    # A failed pass is followed by a full one, which does not narrow: Ready again without a fix.
    await until(lambda: ready(kube, "q").get("reason") == "Applied", "Applied again after the full pass")


@pytest.mark.parametrize("step", sorted(STEPS))
def test_an_unexpected_exception_in_each_step_is_a_condition_and_one_event(
    step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def run() -> None:
        switch = Failing()
        eng, kube, broker, _ = build(switch, step, monkeypatch)
        stopped = asyncio.Event()
        task = asyncio.create_task(eng.run(stopped))
        try:
            if step == "narrow":
                await narrow_pass_fails(eng, kube, switch)
                return
            await until(lambda: switch.calls >= 3, f"three failed passes at {step}")
            named = "c" if step == "records" else "q"
            await until(lambda: named in kube.statuses and ready(kube, named).get("status") == "False", "the status")
            # Without the resources (the step that failed lists them) only the KafkaCluster can say it.
            for name in ("c",) if step == "records" else ("q", "c"):
                cond = ready(kube, name)
                assert cond["reason"] == "ClusterNotReady", (name, cond)
                assert STEPS[step] in cond["message"], (name, cond["message"])
                assert f"RuntimeError: {BOOM}" in cond["message"], cond["message"]
            warnings = [e for e in kube.events if e[0] == "c" and e[1] == "Warning" and e[2] == "ClusterNotReady"]
            assert len(warnings) == 1, f"one event for the failure, not one per retry: {warnings}"
            assert STEPS[step] in warnings[0][3]
            # A resource that goes from Ready to not Ready has its own event, once.
            assert len([e for e in kube.events if e[0] == "q" and e[2] == "ClusterNotReady"]) <= 1
            # Fixed: the next pass applies and says so.
            switch.on = False
            await until(lambda: ready(kube, "q").get("reason") == "Applied", "Applied after the fix")
            assert broker.live == {Entity.for_user("alice"): {QuotaKey.PRODUCER_BYTE_RATE: 1000.0}}
            await until(lambda: ready(kube, "c").get("reason") == "Connected", "the KafkaCluster Connected again")
        finally:
            stopped.set()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            eng.close()

    asyncio.run(run())


def test_every_gather_step_is_guarded() -> None:
    """The steps above are every ``reading(...)`` in gather: a new step without a case here fails."""
    import inspect
    import re

    source = inspect.getsource(gather_module.Gather.gather)
    steps = set(re.findall(r'reading\("([^"]+)"\)', source))
    tested = {text.removeprefix("while reading ") for text in STEPS.values() if text.startswith("while reading ")}
    assert steps == tested, (steps, tested)
