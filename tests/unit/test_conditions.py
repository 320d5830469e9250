"""The one condition transition rule (domain/status.set_condition) and the conditions an outcome says.

Every condition kquota writes, on a quota resource or a KafkaCluster, goes
through ``set_condition``: these tables pin its rule, and the stored form
against the CRD's schema (``kquota.api.status``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from kquota.api.status import ClientQuotaStatus, ControllerMutationQuotaStatus, KafkaClusterStatus, TopicQuotaStatus
from kquota.domain.status import (
    ALL_LIVE,
    Condition,
    Outcome,
    Reason,
    conditions_by_type,
    outcome_conditions,
    render_cluster_status,
    render_status,
    set_condition,
)

T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:05:00Z"


def stored(status: str, reason: str = "Pending", message: str = "m", since: str = T0, gen: int = 1) -> dict[str, Any]:
    return {
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since,
        "observedGeneration": gen,
    }


@pytest.mark.parametrize(
    ("prev", "cond", "since"),
    [
        pytest.param(None, Condition("Ready", "Unknown", "Pending", "m"), T1, id="a new condition starts now"),
        pytest.param(
            stored("Unknown"), Condition("Ready", "Unknown", "Pending", "m"), T0, id="the same condition keeps its time"
        ),
        pytest.param(
            stored("False", "KafkaUnavailable", "down"),
            Condition("Ready", "False", "Rejected", "bad value"),
            T0,
            id="a new reason or message with the same status is no transition",
        ),
        pytest.param(
            stored("Unknown"), Condition("Ready", "True", "Applied", "ok"), T1, id="Unknown to True is a transition"
        ),
        pytest.param(
            stored("True", "Applied"), Condition("Ready", "False", "Conflict", "x"), T1, id="True to False moves it"
        ),
        pytest.param(
            stored("False", "Conflict"),
            Condition("Ready", "Unknown", "Pending", "m"),
            T1,
            id="False to Unknown moves it",
        ),
        pytest.param(
            {k: v for k, v in stored("True").items() if k != "lastTransitionTime"},
            Condition("Ready", "True", "Applied", "ok"),
            T1,
            id="a stored condition without a time gets one",
        ),
    ],
)
def test_last_transition_time_moves_only_when_the_status_changes(
    prev: Mapping[str, Any] | None, cond: Condition, since: str
) -> None:
    got = set_condition({"Ready": prev} if prev is not None else {}, cond, 7, T1)
    assert got == {
        "type": cond.type,
        "status": cond.status,
        "reason": cond.reason,
        "message": cond.message,
        "lastTransitionTime": since,
        "observedGeneration": 7,
    }


def test_observed_generation_is_the_generation_rendered_even_when_nothing_else_changes() -> None:
    got = set_condition(
        {"Ready": stored("True", "Applied", "ok", gen=1)}, Condition("Ready", "True", "Applied", "ok"), 2, T1
    )
    assert got["observedGeneration"] == 2 and got["lastTransitionTime"] == T0


def test_another_types_condition_is_no_previous_state() -> None:
    prev = {"Stalled": {**stored("True"), "type": "Stalled"}}
    assert set_condition(prev, Condition("Ready", "True", "Applied", "ok"), 1, T1)["lastTransitionTime"] == T1


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        pytest.param(
            Outcome(Reason.APPLIED, "ok", fully_applied=True),
            [("Ready", "True", "Applied", "ok"), ("Applied", "True", "Applied", ALL_LIVE)],
            id="applied",
        ),
        pytest.param(
            Outcome(Reason.PENDING, "wait"),
            [
                ("Ready", "Unknown", "Pending", "wait"),
                ("Applied", "False", "Pending", "wait"),
                ("Reconciling", "True", "Pending", "wait"),
            ],
            id="pending is reconciling",
        ),
        pytest.param(
            Outcome(Reason.CONFLICT, "taken"),
            [
                ("Ready", "False", "Conflict", "taken"),
                ("Applied", "False", "Conflict", "taken"),
                ("Stalled", "True", "Conflict", "taken"),
            ],
            id="conflict is stalled",
        ),
        pytest.param(
            Outcome(
                Reason.MONITORING,
                "watching",
                fully_applied=True,
                conditions=(Condition("Enforced", "False", "MonitorOnly", "enforcement is Monitor"),),
            ),
            [
                ("Ready", "True", "Monitoring", "watching"),
                ("Applied", "True", "Applied", ALL_LIVE),
                ("Enforced", "False", "MonitorOnly", "enforcement is Monitor"),
            ],
            id="the kind's conditions come last",
        ),
    ],
)
def test_the_conditions_an_outcome_says(outcome: Outcome, said: list[tuple[str, str, str, str]]) -> None:
    assert [(c.type, c.status, c.reason, c.message) for c in outcome_conditions(outcome)] == said


def test_a_rendered_status_keeps_transition_times_through_set_condition() -> None:
    first = render_status(None, 1, Outcome(Reason.KAFKA_UNAVAILABLE, "down"), "users/a", "c", T0)
    later = render_status(first, 2, Outcome(Reason.REJECTED, "bad"), "users/a", "c", T1)
    ready = conditions_by_type(later)["Ready"]
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"], ready["observedGeneration"]) == (
        "False",
        "Rejected",
        T0,
        2,
    )
    assert conditions_by_type(later)["Stalled"]["lastTransitionTime"] == T1, "Stalled is new"
    applied = render_status(later, 2, Outcome(Reason.APPLIED, "ok", fully_applied=True), "users/a", "c", T1)
    assert conditions_by_type(applied)["Ready"]["lastTransitionTime"] == T1


def test_typed_outcome_fields_are_written_only_when_set() -> None:
    plain = render_status(None, 1, Outcome(Reason.APPLIED, "ok", fully_applied=True), "users/a", "c", T0)
    assert set(plain) == {"formatVersion", "observedGeneration", "entity", "conditions", "applied"}
    topic = Outcome(
        Reason.APPLIED,
        "ok",
        fully_applied=True,
        allowance={"partitions": 1},
        clients=({"entity": "users/a", "producer_byte_rate": 5.0},),
        observed={"source": "prometheus"},
    )
    status = render_status(None, 1, topic, "topics/t", "c", T0)
    assert status["allowance"] == {"partitions": 1} and status["observed"] == {"source": "prometheus"}
    assert status["clients"] == [{"entity": "users/a", "producer_byte_rate": 5.0}], "a list, as the API server returns"
    assert "burst" not in status


@pytest.mark.parametrize(
    ("model", "outcome"),
    [
        pytest.param(ClientQuotaStatus, Outcome(Reason.APPLIED, "ok", {"producer_byte_rate": 1.0}, True), id="cq"),
        pytest.param(
            TopicQuotaStatus,
            Outcome(Reason.APPLIED, "ok", fully_applied=True, allowance={"partitions": 3}, clients=()),
            id="tq",
        ),
        pytest.param(
            ControllerMutationQuotaStatus,
            Outcome(
                Reason.APPLIED,
                "ok",
                fully_applied=True,
                burst={"windowNum": 11},
                conditions=(Condition("BurstSufficient", "True", "WithinBurst", "fits"),),
            ),
            id="cmq",
        ),
    ],
)
def test_what_is_written_is_valid_against_the_crd_models(model: type[ClientQuotaStatus], outcome: Outcome) -> None:
    status = render_status(None, 4, outcome, "users/a", "c", T0)
    parsed = model.model_validate(status)
    assert parsed.conditions[0].type == "Ready" and parsed.conditions[0].observed_generation == 4


def test_a_kafkacluster_status_goes_through_the_same_rule() -> None:
    first = render_cluster_status(None, 1, Reason.APPLIED, "connected", 3, T0)
    held = render_cluster_status(first, 1, Reason.APPLIED, "connected", 3, T1, held="12 removals held")
    by_type = conditions_by_type(held)
    assert by_type["Ready"]["lastTransitionTime"] == T1 and by_type["Ready"]["reason"] == "RemovalsHeld"
    assert by_type["DeletionGuard"]["status"] == "True"
    KafkaClusterStatus.model_validate(held)
