"""The reconciler's pass logic with in-memory stand-ins for the broker and the API server.

What is checked here is the engine's own bookkeeping (which entities a narrow
pass covers, what a transient broker error does); the real broker and API
server paths are the e2e tests'.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
from prometheus_client import REGISTRY

from kquota.domain.claims import claim_from_body
from kquota.domain.entities import Entity
from kquota.domain.observed import MetricsReading, Point, QuotaResource, QuotaSeries
from kquota.domain.plan import EntityChange
from kquota.domain.status import Reason
from kquota.kafka.errors import EntityResult
from kquota.reconcile import engine as engine_module
from kquota.reconcile import gather as gather_module
from kquota.reconcile import observing as observing_module
from kquota.reconcile import passes as passes_module
from kquota.reconcile import report as report_module
from kquota.reconcile.claim_index import ClaimIndex
from kquota.reconcile.engine import ClusterReconciler
from kquota.reconcile.records import MetricsConfig
from tests.support.engine import Broker, Kube, client_quota, config, engine, quota, reason
from tests.support.quotas import P


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


def _body(name: str, user: str, rate: int, created: str, generation: int = 1) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "uid": name, "generation": generation, "creationTimestamp": created}
    spec = {"clusterRef": "c", "entity": {"user": {"name": user}}, "quota": {"producerByteRate": rate}}
    return {"apiVersion": "kquota.io/v1alpha1", "kind": "ClientQuota", "metadata": meta, "spec": spec}


def test_a_narrow_pass_on_the_operators_claim_index_finds_the_claimants_without_a_scan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The operator's index finds a touched entity's claimants itself: the scan of every
    # resource is not run, and the older claimant out of scope still wins.
    def no_scan(*_: Any) -> None:
        raise AssertionError("a narrow pass scanned every resource")

    async def run() -> None:
        broker, kube = Broker(), Kube()
        idx = ClaimIndex("c", lambda c, u: None, lambda c, u: None)
        for i in range(20):
            idx.upsert("ClientQuota", _body(f"q{i}", f"u{i}", 100 + i, "2026-01-01T00:00:00Z"))
        idx.upsert("ClientQuota", _body("older", "shared", 100, "2026-01-01T00:00:00Z"))
        eng = engine([], broker, kube)
        eng._indexes = (idx,)
        await eng.reconcile_once()
        monkeypatch.setattr(gather_module, "narrow", no_scan)
        idx.upsert("ClientQuota", _body("newer", "shared", 200, "2026-02-01T00:00:00Z"))
        await eng.reconcile_once(frozenset({"newer"}))
        assert broker.live[Entity.for_user("shared")] == {P: 100.0}
        assert reason(kube, "newer") == Reason.CONFLICT.value
        assert broker.described == [Entity.for_user("shared")]
        idx.delete("ClientQuota", {"metadata": {"uid": "older"}})
        await eng.reconcile_once(frozenset({"older"}))
        assert broker.live[Entity.for_user("shared")] == {P: 200.0}
        assert reason(kube, "newer") == Reason.APPLIED.value
        assert len(broker.live) == 21

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


def metrics_engine(records: list[Any], broker: Broker, kube: Kube) -> tuple[ClusterReconciler, list[MetricsReading]]:
    """An engine with spec.metrics whose readings come from a list (the last one is returned each time)."""
    cfg = config(metrics=MetricsConfig(None, ("http://unused:9404/metrics",), 60.0, 80))
    eng = engine(records, broker, kube, cfg)
    readings = [MetricsReading("scrape", 0.0, 60.0, True)]

    async def read(_: Any) -> MetricsReading:
        return readings[-1]

    eng._read_metrics = read  # type: ignore[method-assign]
    return eng, readings


def test_between_drift_checks_a_metrics_reading_reads_nothing_else_and_writes_only_what_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    renders = 0
    render = report_module.render_status

    def counting_render(*args: Any, **kwargs: Any) -> Any:
        nonlocal renders
        renders += 1
        return render(*args, **kwargs)

    monkeypatch.setattr(report_module, "render_status", counting_render)

    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota(f"q{i}", f"u{i}", 100 + i) for i in range(20)]
        eng, readings = metrics_engine(records, broker, kube)
        writes = 0
        patch = kube.patch_status

        async def counting(ref: Any, status: Any) -> bool:
            nonlocal writes
            writes += ref.name != "c"  # the resources' statuses, not the KafkaCluster's
            return await patch(ref, status)

        kube.patch_status = counting  # type: ignore[method-assign]
        await eng.reconcile_once()
        eng._full = False  # as the loop leaves it when it starts a pass nothing has asked to widen
        assert broker.described_all == 1 and writes == 20
        assert kube.statuses["q0"]["observed"]["available"] is True
        # The same reading again: nothing read from the brokers, nothing rendered, nothing written.
        rendered = renders
        assert await eng._observe_between_drift_checks()
        assert (broker.described_all, writes, renders) == (1, 20, rendered)
        # The metrics source fails: every status says so at once (a flip), still without a pass.
        readings.append(MetricsReading("scrape", 5.0, 60.0, False, error="connection refused"))
        assert await eng._observe_between_drift_checks()
        assert (broker.described_all, writes) == (1, 40)
        assert kube.statuses["q0"]["observed"]["available"] is False
        assert await eng._observe_between_drift_checks()
        assert writes == 40
        # A change since the last full pass (a narrow pass ran): the next reading comes with a full pass.
        records[3] = quota("q3", "u3", 999, generation=2)
        await eng.reconcile_once(frozenset({"q3"}))
        assert not await eng._observe_between_drift_checks()
        await eng.reconcile_once()
        assert await eng._observe_between_drift_checks()
        assert broker.described_all == 2
        # The drift check is due: a full pass, not a reading.
        eng.last_full_at -= eng.settings.drift_interval
        assert not await eng._observe_between_drift_checks()

    asyncio.run(run())


def test_once_the_kafkaclusters_metrics_are_not_read_the_last_reading_leaves_every_status() -> None:
    # spec.metrics removed: the numbers of the last reading must not stay in status.observed as if
    # current, neither in the operator that read them nor in one started afterwards.
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota(f"q{i}", f"u{i}", 100 + i) for i in range(3)]
        eng, readings = metrics_engine(records, broker, kube)
        readings.append(_producing(50.0))
        await eng.reconcile_once()
        assert all("observed" in kube.statuses[f"q{i}"] for i in range(3))
        stored = {f"q{i}": dict(kube.statuses[f"q{i}"]) for i in range(3)}

        async def without_metrics() -> Any:
            return config()

        eng._cluster = without_metrics
        await eng.reconcile_once()
        assert not any("observed" in kube.statuses[f"q{i}"] for i in range(3)), kube.statuses
        assert reason(kube, "q1") == Reason.APPLIED.value
        # Another operator starts on statuses that still carry a reading, with no metrics to read.
        kube2 = Kube()
        kube2.statuses = {name: dict(status) for name, status in stored.items()}
        later = [
            claim_from_body(
                "ClientQuota",
                {**_body(f"q{i}", f"u{i}", 100 + i, "2026-01-01T00:00:00Z"), "status": stored[f"q{i}"]},
                "c",
            )
            for i in range(3)
        ]
        await engine(later, broker, kube2).reconcile_once()
        assert not any("observed" in kube2.statuses[f"q{i}"] for i in range(3)), kube2.statuses

    asyncio.run(run())


def _producing(rate: float) -> MetricsReading:
    """A reading in which only u1 produces, at ``rate`` bytes/s."""
    series = QuotaSeries("b1", QuotaResource.PRODUCE, "u1", None, (Point(90.0, math.nan, rate),))
    return MetricsReading("scrape", 100.0, 60.0, True, series=(series,), brokers=("b1",))


def test_a_metrics_reading_observes_and_renders_only_what_changed_and_a_held_back_one_once_due(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Standing still costs what changes: 10,000 resources must not be observed and rendered every 5 s."""
    observed: list[str] = []
    rendered: list[str] = []
    observe, render = observing_module.observe, report_module.render_status

    def counting_observe(attribution: Any, entity: Entity, *args: Any, **kwargs: Any) -> Any:
        observed.append(entity.user or "")
        return observe(attribution, entity, *args, **kwargs)

    def counting_render(prev: Any, generation: int, outcome: Any, entity: str, *args: Any) -> Any:
        rendered.append(entity)
        return render(prev, generation, outcome, entity, *args)

    monkeypatch.setattr(observing_module, "observe", counting_observe)
    monkeypatch.setattr(report_module, "render_status", counting_render)

    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota(f"q{i}", f"u{i}", 100 + i) for i in range(20)]
        eng, readings = metrics_engine(records, broker, kube)
        readings.append(_producing(10.0))
        await eng.reconcile_once()
        eng._full = False
        assert len(observed) == 20 and len(rendered) == 20
        assert kube.statuses["q1"]["observed"]["total"]["produceByteRate"] == 10.0
        observed.clear()
        rendered.clear()
        # The same figures again: nobody observed or rendered.
        readings.append(_producing(10.0))
        assert await eng._observe_between_drift_checks()
        assert (observed, rendered) == ([], [])
        # u1's rate moves: only q1 is observed and rendered, and its new numbers are held back
        # (observedMinInterval, 30 s): the status keeps the old ones.
        readings.append(_producing(20.0))
        assert await eng._observe_between_drift_checks()
        assert (observed, len(rendered)) == (["u1"], 1)
        assert kube.statuses["q1"]["observed"]["total"]["produceByteRate"] == 10.0
        # Held back and not yet due: the next readings render nothing.
        for _ in range(3):
            assert await eng._observe_between_drift_checks()
        assert (observed, len(rendered)) == (["u1"], 1)
        # Once due, the next reading writes it.
        eng._observed_written["q1"] -= eng.settings.observed_min_interval
        assert await eng._observe_between_drift_checks()
        assert len(rendered) == 2
        assert kube.statuses["q1"]["observed"]["total"]["produceByteRate"] == 20.0
        # A reading that fails is a flip for everyone: all 20 are observed and written at once.
        readings.append(MetricsReading("scrape", 105.0, 60.0, False, error="connection refused"))
        assert await eng._observe_between_drift_checks()
        assert len(observed) == 21 and all(
            s["observed"]["available"] is False for s in kube.statuses.values() if "observed" in s
        )
        assert sum(1 for s in kube.statuses.values() if "observed" in s) == 20

    asyncio.run(run())


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


def test_a_lone_change_after_a_quiet_spell_goes_at_once_and_a_burst_waits_to_become_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(engine_module, "BURST_GAP_SECONDS", 0.3)

    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota("q0", "u0", 100), quota("q1", "u1", 100)]
        eng = engine(records, broker, kube)
        eng.settings = eng.settings.model_copy(update={"coalesce_seconds": 1.0})
        loop = asyncio.create_task(eng.run())
        try:
            await until(lambda: broker.live.get(Entity.for_user("u0")) == {P: 100.0})
            await asyncio.sleep(0.5)  # quiet
            records[0] = quota("q0", "u0", 200, generation=2)
            t0 = time.monotonic()
            eng.trigger("q0")
            await until(lambda: broker.live[Entity.for_user("u0")] == {P: 200.0})
            assert time.monotonic() - t0 < 0.5, "a lone change waited for the coalescing delay"
            # Right after that pass: this change follows another closely, so it waits.
            records[1] = quota("q1", "u1", 300, generation=2)
            t0 = time.monotonic()
            eng.trigger("q1")
            await until(lambda: broker.live[Entity.for_user("u1")] == {P: 300.0})
            assert time.monotonic() - t0 >= 0.9, "a change in a burst did not wait to be coalesced"
        finally:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop

    asyncio.run(run())


class SlowBroker(Broker):
    """A broker whose DescribeClientQuotas of everything takes ``delay`` seconds; logs what was read."""

    def __init__(self) -> None:
        super().__init__()
        self.delay = 0.0
        self.reads: list[str] = []
        #: An AlterClientQuotas sleeps this long once, then it is back to 0.
        self.alter_delay = 0.0
        self.altering = threading.Event()
        #: Reads of every quota under way (a given-up one goes on in its thread).
        self.reading = 0

    def describe_all(self) -> dict[Entity, dict[Any, float]]:
        self.reads.append("all")
        self.reading += 1
        try:
            time.sleep(self.delay)
        finally:
            self.reading -= 1
        return super().describe_all()

    def describe_entity(self, entity: Entity) -> dict[Any, float]:
        self.reads.append(str(entity))
        return super().describe_entity(entity)

    def alter(self, changes: Sequence[EntityChange]) -> list[EntityResult]:
        delay, self.alter_delay = self.alter_delay, 0.0
        self.altering.set()
        time.sleep(delay)
        return super().alter(changes)


@contextlib.asynccontextmanager
async def slow_full_passes(delay: float) -> AsyncIterator[tuple[SlowBroker, list[Any], ClusterReconciler]]:
    """A running loop over q0 (u0) and q1 (u1), settled and quiet, whose full passes then read slowly."""
    broker, kube = SlowBroker(), Kube()
    records = [quota("q0", "u0", 100), quota("q1", "u1", 100)]
    eng = engine(records, broker, kube)
    loop = asyncio.create_task(eng.run())
    try:
        await until(lambda: broker.live.get(Entity.for_user("u1")) == {P: 100.0})
        await asyncio.sleep(1.2)  # quiet, so the changes below are lone ones
        broker.delay, broker.reads = delay, []
        yield broker, records, eng
    finally:
        loop.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loop


def test_a_full_pass_gives_way_to_a_change_made_while_it_read_and_then_runs_whole() -> None:
    async def run() -> None:
        async with slow_full_passes(0.5) as (broker, records, eng):
            eng.trigger()  # a full pass (as the drift check makes), reading slowly
            await until(lambda: broker.reads == ["all"])
            records[1] = quota("q1", "u1", 300, generation=2)
            eng.trigger("q1")
            await until(lambda: broker.live[Entity.for_user("u1")] == {P: 300.0})
            await until(lambda: broker.reads.count("all") == 2)
            # The full pass read, gave way before deciding anything, the change went narrow,
            # then the full pass ran again from the start.
            assert broker.reads[:3] == ["all", "users/u1", "all"], broker.reads
            await until(lambda: eng._put_off_since is None)  # the full pass that followed ran to its end
            assert eng._full is False

    asyncio.run(run())


def test_a_change_made_while_a_full_pass_reads_goes_before_the_read_ends() -> None:
    # Reading every quota at 50,000 takes 0.6-0.9 s: the change does not wait for it. The read
    # left behind ends on its own thread; the full pass then runs again from the start.
    async def run() -> None:
        async with slow_full_passes(3.0) as (broker, records, eng):
            eng.trigger()
            await until(lambda: broker.reads == ["all"])
            records[1] = quota("q1", "u1", 300, generation=2)
            eng.trigger("q1")
            await until(lambda: broker.live[Entity.for_user("u1")] == {P: 300.0})
            assert broker.reading == 1, "the change waited for the full pass's read"
            assert broker.reads == ["all", "users/u1"], broker.reads
            await until(lambda: broker.reads.count("all") == 2, timeout=10)
            await until(lambda: eng._put_off_since is None, timeout=10)
            assert reason(eng.kube, "q0") == reason(eng.kube, "q1") == Reason.APPLIED.value

    asyncio.run(run())


def test_a_full_pass_that_may_not_give_way_still_decides_off_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    # Put off for its bound (0 s here: the first giving way ends it) a full pass runs whole, but its
    # decision (seconds at 50,000) still runs in a thread: on the event loop it stalled every watch
    # event, and every change, until it ended.
    slow = SlowOnce(passes_module.decide, 1.0)
    monkeypatch.setattr(passes_module, "decide", slow)
    monkeypatch.setattr(engine_module, "FULL_PASS_PUT_OFF_SECONDS", 0.0)

    async def run() -> None:
        async with slow_full_passes(0.0) as (broker, records, eng):
            records[1] = quota("q1", "u1", 300, generation=2)
            slow.armed = True
            eng.trigger()
            eng.trigger("q1")  # goes first: the full pass's giving way, which ends its bound
            await asyncio.to_thread(slow.started.wait, 5)
            assert not eng._full_may_give_way(), "the full pass may still give way: not the case this test is about"
            await asyncio.sleep(0.05)
            assert not slow.finished.is_set(), "the event loop stood still while the full pass decided"
            await until(lambda: eng._put_off_since is None and not eng._full)
            assert broker.live[Entity.for_user("u1")] == {P: 300.0}
            assert reason(eng.kube, "q1") == Reason.APPLIED.value

    asyncio.run(run())


def test_a_full_pass_gives_way_again_to_a_stream_of_changes_within_its_bound() -> None:
    # A change every time the full pass runs again: each goes first while the full pass has been
    # put off less than FULL_PASS_PUT_OFF_SECONDS (10 s), and the full pass then runs to its end.
    async def run() -> None:
        async with slow_full_passes(0.4) as (broker, records, eng):
            eng.trigger()
            for value in (200, 300, 400):
                count = broker.reads.count("all")
                await until(lambda c=count: broker.reads.count("all") == c + 1)
                records[1] = quota("q1", "u1", value, generation=value)
                eng.trigger("q1")
                await until(lambda v=value: broker.live[Entity.for_user("u1")] == {P: float(v)})
                # (The read of the pass before may still run on its own thread beside this one's.)
                assert broker.reading >= 1, "the change waited for the full pass's read"
            await until(lambda: eng._put_off_since is None and not eng._full, timeout=10)
            assert broker.reads == ["all", "users/u1"] * 3 + ["all"], broker.reads
            assert reason(eng.kube, "q1") == Reason.APPLIED.value

    asyncio.run(run())


def test_a_full_pass_put_off_for_its_bound_runs_whole_so_a_stream_of_changes_cannot_put_it_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A bound of 0 s: the first giving way ends it at once (with 10 s, the same after 10 s of changes).
    monkeypatch.setattr(engine_module, "FULL_PASS_PUT_OFF_SECONDS", 0.0)

    async def run() -> None:
        async with slow_full_passes(0.4) as (broker, records, eng):
            eng.trigger()
            for value in (200, 300):
                # A change while each full pass reads: the first gives way, the second does not.
                count = broker.reads.count("all")
                await until(lambda c=count: broker.reads.count("all") == c + 1)
                records[1] = quota("q1", "u1", value, generation=value)
                eng.trigger("q1")
                await until(lambda v=value: broker.live[Entity.for_user("u1")] == {P: float(v)})
            # The second full pass ran whole (it had read its records before the second change),
            # and the second change went narrow after it.
            assert broker.reads == ["all", "users/u1", "all", "users/u1"], broker.reads

    asyncio.run(run())


def test_a_change_that_comes_with_a_full_pass_due_goes_first_and_the_full_pass_then_runs_whole() -> None:
    # A KafkaCluster edit (a full pass) and a resource change in the same moment: the full pass
    # would cover the change, but only at its end; the change goes narrow first. That is the
    # full pass's one giving way: a change made while it then runs waits for its end.
    async def run() -> None:
        async with slow_full_passes(0.4) as (broker, records, eng):
            records[1] = quota("q1", "u1", 300, generation=2)
            eng.trigger()
            eng.trigger("q1")
            await until(lambda: broker.live[Entity.for_user("u1")] == {P: 300.0})
            assert broker.reads == ["users/u1"], "the change waited for the full pass"
            await until(lambda: broker.reads.count("all") == 1)
            records[0] = quota("q0", "u0", 200, generation=2)
            eng.trigger("q0")
            await until(lambda: broker.live[Entity.for_user("u0")] == {P: 200.0})
            assert broker.reads == ["users/u1", "all", "users/u0"], broker.reads
            await until(lambda: eng._put_off_since is None and not eng._full)
            assert reason(eng.kube, "q0") == reason(eng.kube, "q1") == Reason.APPLIED.value

    asyncio.run(run())


def test_the_first_full_pass_is_never_put_off_by_the_changes_that_come_with_it() -> None:
    # Before the first full pass nothing is remembered to narrow from: it covers the changes.
    async def run() -> None:
        broker = SlowBroker()
        records = [quota("q0", "u0", 100), quota("q1", "u1", 100)]
        eng = engine(records, broker, Kube())
        eng.trigger("q1")
        loop = asyncio.create_task(eng.run())
        try:
            await until(lambda: broker.live.get(Entity.for_user("u1")) == {P: 100.0})
            assert broker.reads[0] == "all", broker.reads
        finally:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop

    asyncio.run(run())


_decide = passes_module.decide


class SlowOnce:
    """Wraps a pure step of the pass: its first call in a full pass sleeps ``seconds`` first (in its thread)."""

    def __init__(self, real: Callable[..., Any], seconds: float) -> None:
        self.real, self.seconds = real, seconds
        self.armed = False
        self.started = threading.Event()
        #: Set when the slow call has returned.
        self.finished = threading.Event()

    def __call__(self, *args: Any) -> Any:
        # (Whether this is a full pass's decision: decide's input says; the outcomes are a full pass's here.)
        full = getattr(args[0], "touched", None) is None if self.real is _decide else True
        if self.armed and full:
            self.armed = False
            self.started.set()
            time.sleep(self.seconds)
            try:
                return self.real(*args)
            finally:
                self.finished.set()
        return self.real(*args)


async def change_goes_first(broker: SlowBroker, records: list[Any], eng: ClusterReconciler, step: str) -> None:
    """q1 changes while the full pass is in its slow ``step``: it lands at once, then the full pass runs whole."""
    records[1] = quota("q1", "u1", 300, generation=2)
    t0 = time.monotonic()
    eng.trigger("q1")
    await until(lambda: broker.live[Entity.for_user("u1")] == {P: 300.0})
    assert time.monotonic() - t0 < 1.0, f"the change waited for the full pass's {step}"
    await until(lambda: broker.reads.count("all") == 2)
    assert broker.reads[:3] == ["all", "users/u1", "all"], broker.reads
    await until(lambda: eng._put_off_since is None)


def test_a_full_pass_gives_way_to_a_change_made_while_it_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    # Deciding over 50,000 resources takes about 2 s: it runs in a thread, and a change made
    # meanwhile goes first instead of waiting for the decision (and act, and report) to end.
    slow = SlowOnce(passes_module.decide, 1.5)
    monkeypatch.setattr(passes_module, "decide", slow)

    async def run() -> None:
        async with slow_full_passes(0.0) as (broker, records, eng):
            slow.armed = True
            eng.trigger()
            await asyncio.to_thread(slow.started.wait, 5)
            await change_goes_first(broker, records, eng, "decision")
            assert reason(eng.kube, "q1") == Reason.APPLIED.value

    asyncio.run(run())


def test_a_full_pass_gives_way_after_act_once_what_it_changed_is_announced(monkeypatch: pytest.MonkeyPatch) -> None:
    # The full pass restores drift, then works out every resource's outcome (slowly here): a change
    # made meanwhile goes first; the restore is already on the broker and announced, and the full
    # pass that follows writes the statuses.
    slow = SlowOnce(passes_module.pass_outcomes, 1.5)
    monkeypatch.setattr(passes_module, "pass_outcomes", slow)

    async def run() -> None:
        async with slow_full_passes(0.0) as (broker, records, eng):
            broker.live[Entity.for_user("u0")] = {P: 7.0}
            slow.armed = True
            eng.trigger()
            await asyncio.to_thread(slow.started.wait, 5)
            assert broker.live[Entity.for_user("u0")] == {P: 100.0}
            assert any(e[2] == "DriftCorrected" for e in eng.kube.events), eng.kube.events
            await change_goes_first(broker, records, eng, "outcomes")
            assert reason(eng.kube, "q0") == reason(eng.kube, "q1") == Reason.APPLIED.value
            assert [e[2] for e in eng.kube.events].count("DriftCorrected") == 1, "announced once"

    asyncio.run(run())


def test_a_change_made_while_a_full_pass_alters_goes_before_its_report() -> None:
    async def run() -> None:
        async with slow_full_passes(0.0) as (broker, records, eng):
            broker.live[Entity.for_user("u0")] = {P: 7.0}
            broker.alter_delay = 0.5
            broker.altering.clear()
            eng.trigger()
            await asyncio.to_thread(broker.altering.wait, 5)
            records[1] = quota("q1", "u1", 300, generation=2)
            eng.trigger("q1")
            await until(lambda: broker.live[Entity.for_user("u1")] == {P: 300.0})
            # The full pass restored u0 and announced it, then gave way: its statuses were not
            # written before the change went (the full pass after the change wrote them).
            assert broker.live[Entity.for_user("u0")] == {P: 100.0}
            assert broker.reads[:2] == ["all", "users/u1"], broker.reads
            await until(lambda: broker.reads.count("all") == 2)
            await until(lambda: eng._put_off_since is None)
            assert [e[2] for e in eng.kube.events].count("DriftCorrected") == 1
            assert reason(eng.kube, "q0") == reason(eng.kube, "q1") == Reason.APPLIED.value

    asyncio.run(run())


def test_an_unchanged_resource_keeps_one_outcome_the_last_full_passs() -> None:
    # The full pass keeps its outcomes for the metrics readings; the rendered memo held an equal
    # copy from the pass that wrote the status: two per resource for as long as the operator ran.
    async def run() -> None:
        broker, kube = Broker(), Kube()
        eng = engine([quota(f"q{i}", f"u{i}", 100 + i) for i in range(3)], broker, kube)
        await eng.reconcile_once()
        statuses = dict(kube.statuses)
        await eng.reconcile_once()
        basis = eng._observe_basis
        assert basis is not None
        for uid in ("q0", "q1", "q2"):
            assert eng._rendered[uid][1] is basis.outcomes[uid]
        assert kube.statuses == statuses

    asyncio.run(run())


def test_the_resources_by_reason_gauge_follows_narrow_passes_and_deletions() -> None:
    # Kept with each resource's reason, not recounted over all N on every narrow pass.
    def gauge(reason_: Reason) -> float:
        value = REGISTRY.get_sample_value("kquota_managed_resources", {"cluster": "c", "reason": reason_.value})
        return value or 0.0

    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota(f"q{i}", f"u{i}", 100 + i) for i in range(4)]
        eng = engine(records, broker, kube)
        await eng.reconcile_once()
        assert gauge(Reason.APPLIED) == 4 and gauge(Reason.REJECTED) == 0
        broker.fail_once[Entity.for_user("u1")] = "INVALID_REQUEST"
        records[1] = quota("q1", "u1", 5, generation=2)
        await eng.reconcile_once(frozenset({"q1"}))
        assert (gauge(Reason.APPLIED), gauge(Reason.REJECTED)) == (3, 1)
        records[2] = client_quota("q2", "u2", deleting=True, producerByteRate=102)
        await eng.reconcile_once(frozenset({"q2"}))
        del records[2]
        await eng.reconcile_once(frozenset({"q2"}))
        assert (gauge(Reason.APPLIED), gauge(Reason.REJECTED)) == (2, 1)
        await eng.reconcile_once()  # a full pass counts them all again: the same
        assert (gauge(Reason.APPLIED), gauge(Reason.REJECTED)) == (2, 1)

    asyncio.run(run())


def test_status_writes_are_counted_as_each_lands_not_when_the_batch_ends() -> None:
    def count() -> float:
        return REGISTRY.get_sample_value("kquota_status_writes_total", {"cluster": "c"}) or 0.0

    class SlowKube(Kube):
        """The first two status writes land at once, the others wait for ``gate``."""

        def __init__(self) -> None:
            super().__init__()
            self.gate = asyncio.Event()
            self.landed = 0

        async def patch_status(self, ref: Any, status: Any) -> bool:
            if ref.name != "c" and self.landed >= 2:
                await self.gate.wait()
            self.landed += ref.name != "c"
            return await super().patch_status(ref, status)

    async def run() -> None:
        broker, kube = Broker(), SlowKube()
        eng = engine([quota(f"q{i}", f"u{i}", 100 + i) for i in range(5)], broker, kube)
        before = count()
        pass_ = asyncio.ensure_future(eng.reconcile_once())
        await until(lambda: kube.landed == 2)
        await asyncio.sleep(0.05)
        assert count() - before == 2, "the writes that landed are not counted yet"
        kube.gate.set()
        await pass_
        assert count() - before == 5

    asyncio.run(run())
