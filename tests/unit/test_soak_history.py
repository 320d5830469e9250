"""The soak's history generator (harness/soak/history.py): pure, seeded, and covering what it claims."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from harness.soak.engine import Report, StepResult, claims, percentile
from harness.soak.history import (
    ENTITY_FORMS,
    FAULT_KINDS,
    MUTATION_FORMS,
    OP_KINDS,
    UNMANAGED_USER_FIELD,
    final_live,
    generate,
)


def test_the_same_seed_gives_the_same_history() -> None:
    assert generate(7, 60) == generate(7, 60)


def test_a_history_is_a_prefix_of_a_longer_one_so_a_step_replays_with_faults_equal_to_it() -> None:
    assert generate(3, 80)[:25] == generate(3, 25)


def test_different_seeds_give_different_histories() -> None:
    assert generate(1, 30) != generate(2, 30)


def test_every_fault_kind_operation_and_entity_form_is_reachable() -> None:
    steps = [s for seed in range(1, 6) for s in generate(seed, 100)]
    assert {s.fault.kind for s in steps} == set(FAULT_KINDS)
    ops = [o for s in steps for o in s.ops()]
    whys = {o.why.split("-")[0] for o in ops}
    assert whys == set(OP_KINDS)
    assert {o.why for o in ops if o.why.startswith("mutation")} == {
        "mutation-create",
        "mutation-modify",
        "mutation-delete",
    }
    assert {o.resource.form for o in ops if o.resource.kind == "ClientQuota"} == set(ENTITY_FORMS)
    assert {o.resource.form for o in ops if o.resource.kind == "ControllerMutationQuota"} == set(MUTATION_FORMS)


def test_faults_can_be_narrowed_to_some_kinds() -> None:
    assert {s.fault.kind for s in generate(1, 40, ("broker-kill", "crds-reapplied"))} == {
        "broker-kill",
        "crds-reapplied",
    }


def test_the_model_never_deletes_or_modifies_what_is_not_live_and_names_are_never_reused() -> None:
    for seed in range(1, 4):
        live: set[tuple[str, str, str]] = set()
        created: Counter[tuple[str, str, str]] = Counter()
        for step in generate(seed, 100):
            for op in step.ops():
                key = (op.resource.kind, op.resource.namespace, op.resource.name)
                if op.action == "delete":
                    assert key in live, op
                    live.remove(key)
                else:
                    if key not in live:
                        created[key] += 1
                    live.add(key)
        assert set(final_live(generate(seed, 100))) == live
        assert max(created.values()) == 1


def test_conflicting_claims_are_generated_on_keys_another_resource_holds() -> None:
    conflicts = [o for s in generate(2, 100) for o in s.ops() if o.why == "conflict"]
    assert conflicts
    for op in conflicts:
        assert op.resource.name.startswith("rival")


def test_user_only_quotas_never_claim_the_unmanaged_field_seeded_on_a_user() -> None:
    for seed in range(1, 6):
        for step in generate(seed, 100):
            for op in step.ops():
                if op.resource.kind == "ClientQuota" and dict(op.resource.entity).keys() == {"user"}:
                    assert UNMANAGED_USER_FIELD not in dict(op.resource.values), op


def _obj(kind: str, ns: str, name: str, created: str, entity: dict[str, object], quota: dict[str, float]) -> dict:  # type: ignore[type-arg]
    spec = {"entity": entity, "quota": quota} if kind == "ClientQuota" else {"entity": entity, **quota}
    return {"kind": kind, "metadata": {"namespace": ns, "name": name, "creationTimestamp": created}, "spec": spec}


def test_the_desired_state_gives_each_key_to_the_oldest_claim_and_names_the_whole_winners() -> None:
    old = _obj("ClientQuota", "b", "old", "2026-01-01T00:00:01Z", {"user": {"name": "u"}}, {"producerByteRate": 1})
    young = _obj(
        "ClientQuota",
        "a",
        "young",
        "2026-01-01T00:00:02Z",
        {"user": {"name": "u"}},
        {"producerByteRate": 2, "consumerByteRate": 3},
    )
    same_second = _obj(
        "ClientQuota", "a", "tie", "2026-01-01T00:00:01Z", {"clientId": {"default": True}}, {"producerByteRate": 5}
    )
    other = _obj(
        "ClientQuota", "b", "tie", "2026-01-01T00:00:01Z", {"clientId": {"default": True}}, {"producerByteRate": 6}
    )
    mutation = _obj(
        "ControllerMutationQuota", "a", "m", "2026-01-01T00:00:03Z", {"user": {"default": True}}, {"rate": 2.5}
    )
    c = claims([young, old, other, same_second, mutation])
    from kquota.domain.entities import Entity

    assert c.desired == {
        Entity.for_user("u"): {"producer_byte_rate": 1.0, "consumer_byte_rate": 3.0},
        Entity.for_client(None): {"producer_byte_rate": 5.0},
        Entity.for_user(None): {"controller_mutation_rate": 2.5},
    }
    assert c.winners == {
        ("ClientQuota", "b", "old"),
        ("ClientQuota", "a", "tie"),
        ("ControllerMutationQuota", "a", "m"),
    }


@pytest.mark.parametrize(
    ("values", "p", "expected"), [([], 99, 0.0), ([3.0], 50, 3.0), ([1, 2, 3, 4], 50, 2), ([*range(1, 101)], 99, 99)]
)
def test_percentiles_are_nearest_rank(values: list[float], p: float, expected: float) -> None:
    assert percentile(values, p) == expected


def test_the_report_names_each_broken_invariant_with_the_command_that_replays_it() -> None:
    from harness.soak.engine import Violation

    report = Report(5, 3, list(FAULT_KINDS))
    report.steps = [
        StepResult(1, "broker-kill", {"down": 3.0}, ["create:apply ClientQuota soak-a/cq1"], 9.0, 4.0),
        StepResult(2, "failover", {}, [], 0.1, 61.0),
        StepResult(3, "crds-reapplied", {}, [], 1.0, None, ["desired state within 60 s: not converged: x"]),
    ]
    report.violations = [
        Violation(3, "crds-reapplied", "desired state within 60 s", "not converged: x", "make soak SEED=5 FAULTS=3")
    ]
    text = report.text()
    assert "p50 4.0, p99 61.0, max 61.0 over 2 faults" in text
    assert "without failover: p50 4.0, p99 4.0" in text
    assert "invariants broken: 1" in text and "replay: make soak SEED=5 FAULTS=3" in text
    assert report.as_json()["per_kind"]["failover"]["max"] == 61.0


def test_the_report_says_each_operator_that_exited_on_its_own_and_was_started_again() -> None:
    report = Report(14, 1, list(FAULT_KINDS))
    assert "exited on their own and were started again: 0" in report.text()
    report.operator_exits = ["step 51: exit code -9; last line: Hung tasks are not stopped"]
    text = report.text()
    assert "exited on their own and were started again: 1" in text
    assert "    step 51: exit code -9; last line: Hung tasks are not stopped" in text
    assert "invariants broken: 0" in text, "a restart is reported, not an invariant broken"
    assert report.as_json()["operator_exits"] == report.operator_exits


def test_a_run_that_broke_an_invariant_keeps_its_operators_logs_beside_the_report(tmp_path: Path) -> None:
    from harness.soak.engine import Violation

    work, reports = tmp_path / "work", tmp_path / "reports"
    for n in (1, 2):
        (work / f"operator-{n}").mkdir(parents=True)
        (work / f"operator-{n}" / "operator-1.log").write_text(f"replica {n}\n")
    (work / "kafka").mkdir()
    (work / "kafka" / "server.log").write_text("not an operator's\n")
    report = Report(15, 76, list(FAULT_KINDS))
    assert report.keep_logs(work, reports) is None, "a run that broke nothing keeps nothing"
    report.violations = [Violation(75, "ledger-edited", "desired state", "x", "make soak SEED=15 FAULTS=75")]
    kept = report.keep_logs(work, reports)
    assert kept == reports / "soak-seed15-faults76-logs"
    assert sorted(p.name for p in kept.iterdir()) == ["operator-1-operator-1.log", "operator-2-operator-1.log"]
    assert (kept / "operator-2-operator-1.log").read_text() == "replica 2\n"
