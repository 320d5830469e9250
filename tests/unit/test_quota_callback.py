"""Brokers running a client quota callback: quota resources never say Applied as if enforced."""

from __future__ import annotations

import asyncio
import dataclasses

from kquota.domain.callback import (
    CALLBACK_CONFIG,
    callback_summary,
    callbacks_from_configs,
    cluster_condition,
    with_callback,
)
from kquota.domain.entities import Entity
from kquota.domain.status import STALLED, Condition, Outcome, Reason, render_cluster_status, render_status
from kquota.kafka.settings import ConnectionSettings
from kquota.reconcile.records import ClusterConfig
from tests.support.engine import Broker, Kube, engine, quota, reason

STRIMZI = "io.strimzi.kafka.quotas.StaticQuotaCallback"
APPLIED = Outcome(Reason.APPLIED, "quota applied on the brokers", {"producer_byte_rate": 1024.0}, True)


def test_only_brokers_with_a_class_count() -> None:
    configs = {1: {CALLBACK_CONFIG: STRIMZI}, 2: {CALLBACK_CONFIG: ""}, 3: {}, 4: {CALLBACK_CONFIG: " null "}}
    assert callbacks_from_configs(configs) == {1: STRIMZI}


def test_the_summary_names_every_class_and_its_brokers() -> None:
    assert callback_summary({1: STRIMZI}) == f"broker 1 runs {CALLBACK_CONFIG}={STRIMZI}"
    text = callback_summary({3: "b.B", 1: STRIMZI, 2: STRIMZI})
    assert text == f"broker 3 runs {CALLBACK_CONFIG}=b.B; brokers 1, 2 run {CALLBACK_CONFIG}={STRIMZI}"


def test_an_applied_user_quota_says_the_callback_decides() -> None:
    out = with_callback(APPLIED, [Entity.for_user("app")], {1: STRIMZI}, honoured=False)
    assert out.reason is Reason.QUOTA_CALLBACK and out.ready == "False"
    assert out.reason in STALLED, "a GitOps health check must not be green"
    assert STRIMZI in out.message and "honoursEntityQuotas" in out.message
    assert out.applied == APPLIED.applied, "the keys are set on the brokers: status.applied says so"
    detected = Condition("QuotaCallback", "True", "Detected", f"broker 1 runs {CALLBACK_CONFIG}={STRIMZI}")
    assert detected in out.conditions
    status = render_status(None, 1, out, "users/app", "kc", "2026-11-25T00:00:00Z")
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Ready"]["reason"] == "QuotaCallback" and conds["Stalled"]["status"] == "True"
    assert conds["QuotaCallback"]["status"] == "True"


def test_a_cluster_that_says_its_callback_enforces_entity_quotas_reports_applied() -> None:
    out = with_callback(APPLIED, [Entity.for_user("app")], {1: STRIMZI}, honoured=True)
    assert out.reason is Reason.APPLIED and out.ready == "True"
    assert [(c.type, c.status, c.reason) for c in out.conditions] == [("QuotaCallback", "True", "Honoured")]


def test_without_a_callback_nothing_changes() -> None:
    assert with_callback(APPLIED, [Entity.for_user("app")], {}, honoured=False) is APPLIED


def test_ip_connection_rates_are_not_the_callbacks() -> None:
    assert with_callback(APPLIED, [Entity.for_ip("10.0.0.1")], {1: STRIMZI}, honoured=False) is APPLIED
    mixed = [Entity.for_ip(None), Entity.for_client("c")]
    assert with_callback(APPLIED, mixed, {1: STRIMZI}, honoured=False).reason is Reason.QUOTA_CALLBACK


def test_an_outcome_that_is_not_applied_keeps_its_own_reason() -> None:
    pending = Outcome(Reason.PENDING, "waiting", {}, False)
    assert with_callback(pending, [Entity.for_user("app")], {1: STRIMZI}, honoured=False) is pending


def test_the_kafkacluster_condition() -> None:
    def said(cond: Condition) -> tuple[str, str, str]:
        return cond.type, cond.status, cond.reason

    assert said(cluster_condition({}, False)) == ("QuotaCallback", "False", "NotConfigured")
    detected = cluster_condition({1: STRIMZI}, False)
    assert said(detected) == ("QuotaCallback", "True", "Detected") and STRIMZI in detected.message
    assert said(cluster_condition({1: STRIMZI}, True)) == ("QuotaCallback", "True", "Honoured")
    assert said(cluster_condition(None, False)) == ("QuotaCallback", "Unknown", "NotAuthorized")
    rendered = render_cluster_status(
        None, 1, Reason.APPLIED, "connected", 1, "t0", callback=cluster_condition({1: STRIMZI}, False)
    )
    conds = {c["type"]: c for c in rendered["conditions"]}
    assert conds["QuotaCallback"]["reason"] == "Detected" and conds["Ready"]["status"] == "True"
    # Unreachable brokers: the last known callback condition stays.
    later = render_cluster_status(rendered, 1, Reason.KAFKA_UNAVAILABLE, "down", None, "t1")
    assert {c["type"]: c for c in later["conditions"]}["QuotaCallback"] == conds["QuotaCallback"]


def test_the_engine_reads_the_callback_and_reports_it_on_resources_and_cluster() -> None:
    async def run() -> None:
        broker, kube = Broker(), Kube()
        records = [quota("q", "app", 100)]
        config = ClusterConfig("c", ConnectionSettings(bootstrap_servers="unused:9092"))
        eng = engine(records, broker, kube, config)
        await eng.reconcile_once()
        assert reason(kube, "q") == "Applied"
        assert {c["type"]: c for c in kube.statuses["c"]["conditions"]}["QuotaCallback"]["status"] == "False"

        # A broker now runs a callback: seen on the next full pass after the drift interval.
        broker.configs[1] = {CALLBACK_CONFIG: STRIMZI}
        eng._callbacks = None  # the cached read is older than the drift interval
        await eng.reconcile_once()
        assert reason(kube, "q") == "QuotaCallback"
        assert broker.live[Entity.for_user("app")], "the keys stay set on the brokers"
        cluster = {c["type"]: c for c in kube.statuses["c"]["conditions"]}
        assert cluster["QuotaCallback"]["reason"] == "Detected" and STRIMZI in cluster["QuotaCallback"]["message"]

        # Narrow passes reuse the last read instead of asking every broker again.
        reads = broker.config_reads
        await eng.reconcile_once(frozenset({"q"}))
        assert broker.config_reads == reads

        # The KafkaCluster says its callback enforces entity quotas: Applied again.
        eng2 = engine(records, broker, kube, dataclasses.replace(config, callback_honoured=True))
        await eng2.reconcile_once()
        assert reason(kube, "q") == "Applied"
        assert {c["type"]: c for c in kube.statuses["q"]["conditions"]}["QuotaCallback"]["reason"] == "Honoured"

    asyncio.run(run())
