"""A short seed of the chaos soak (harness/soak/) in `make test`, and proof that the soak catches a break.

The long runs are ``make soak SEED=… FAULTS=…``; this module plays the first
steps of one fixed seed on its own API server, broker and operator, and
asserts what the issue asks of every run: no invariant broken, convergence
p99 within 30 s after each fault ends. Failover of two replicas is left to
``make soak`` (the standby waits out the killed replica's peering lifetime,
15 s, on top of starting a second operator) and to tests/e2e/test_failover.py.

The second test continues the same history for one more step with the
operator frozen on purpose, and checks that the soak reports it with the
command that replays it. The last one is what the soak found: a ledger
ConfigMap deleted by hand was not restored by the running operator, so after a
restart the operator no longer knew it owned the keys it set, and deleting
their resource left them on the brokers. Every full pass now rewrites such a
shard (LedgerStore.repair), with a LedgerRepaired event.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.soak import engine
from harness.soak.history import (
    CLIENT_QUOTA,
    FAULT_KINDS,
    MUTATION_QUOTA,
    TENANCY_EDITS,
    Fault,
    Op,
    Resource,
    Step,
    generate,
)

from kquota.domain.entities import Entity
from tests.plugins.resilience import Resilience

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.soak]

SEED = 1
FAULTS = 7
#: Failover is left to `make soak` and tests/e2e/test_failover.py; the ledger faults are left to the last
#: test (a deletion by hand, then a restart) and to `make soak`, which run them on purpose. The
#: Secret rotation and KafkaCluster edits are `make soak`'s too (the last test plays them on purpose):
#: leaving them out keeps this seed's history, and its cost, what it was. So for tenancy-revoked,
#: which the last test plays on purpose.
KINDS = tuple(
    k
    for k in FAULT_KINDS
    if k
    not in ("failover", "ledger-deleted", "ledger-edited", "secret-rotated", "kafkacluster-edited", "tenancy-revoked")
)


@pytest.fixture(scope="module")
def soak(tmp_path_factory: pytest.TempPathFactory) -> Iterator[engine.Soak]:
    s = engine.Soak(SEED, FAULTS, tmp_path_factory.mktemp("soak"), KINDS)
    try:
        s.start()
        yield s
    finally:
        s.stop()


def test_a_short_seed_breaks_no_invariant_and_converges_within_30_s(
    soak: engine.Soak, resilience: Resilience, tmp_path: Path
) -> None:
    report = soak.play_all(generate(SEED, FAULTS, KINDS))
    json_path, _ = report.write(tmp_path)
    conv = report.convergence()
    resilience.fault(
        f"soak seed {SEED}, {FAULTS} faults",
        ok=not report.violations and conv["p99"] <= 30,
        detail=f"{', '.join(sorted({s.kind for s in report.steps}))}; convergence p50 {conv['p50']} s, "
        f"p99 {conv['p99']} s; {sum(s.removals_checked for s in report.steps)} removals matched to events",
        lost=len(report.violations),
        seconds=sum(s.fault_seconds + (s.converge_seconds or 0) for s in report.steps),
    )
    assert len(report.steps) == FAULTS
    assert not report.violations, report.text()
    assert conv["p99"] <= 30, report.text()
    # The checks were not vacuous: keys were removed (and matched to events) and resources were Ready.
    assert sum(s.removals_checked for s in report.steps) > 0, report.text()
    assert json_path.exists()


def test_a_frozen_operator_is_caught_and_reported_with_the_step_that_replays_it(soak: engine.Soak) -> None:
    soak.break_at = FAULTS + 1
    soak.converge_seconds = 8.0
    before = len(soak.report.violations) if soak.report else 0
    report = soak.play_all(generate(SEED, FAULTS + 1, KINDS)[FAULTS:])
    found = report.violations[before:]
    assert found, report.text()
    assert found[0].step == FAULTS + 1
    assert found[0].invariant == "desired state within 8 s"
    expected = f"users/sabotage producer_byte_rate: expected {1000 + FAULTS + 1}, broker has absent"
    assert expected in found[0].detail
    assert found[0].replay == f"make soak SEED={SEED} FAULTS={FAULTS + 1} KINDS={','.join(KINDS)} BREAK={FAULTS + 1}"
    assert f"invariants broken: {len(report.violations)}" in report.text()


def test_a_ledger_deleted_by_hand_then_a_restart_loses_no_ownership(soak: engine.Soak) -> None:
    soak.break_at = None
    soak.converge_seconds = 12.0
    soak.replay_command = "pytest tests/soak -k ledger_deleted"
    first = len(soak.report.steps) + 1 if soak.report else 1
    mutation = Resource(
        MUTATION_QUOTA,
        "soak-a",
        "repro-m",
        "user+client=<default>",
        (("user", "u1"), ("clientId", None)),
        (("rate", 53.5),),
    )
    quota = Resource(CLIENT_QUOTA, "soak-b", "repro-c", "user", (("user", "u2"),), (("producerByteRate", 1000.0),))
    steps = [
        # Applied and converged first, so the ledger ConfigMaps hold both before they are deleted.
        Step(first, (Op("apply", mutation, "create"), Op("apply", quota, "create")), Fault("crds-reapplied"), ()),
        Step(first + 1, (), Fault("ledger-deleted"), ()),
        Step(first + 2, (), Fault("operator-kill", (("down", 1.0),)), (Op("delete", mutation, "delete"),)),
    ]
    before = len(soak.report.violations) if soak.report else 0
    report = soak.play_all(steps)
    assert report.violations[before:] == [], report.text()


def _on_purpose(soak: engine.Soak, test: str, converge_seconds: float) -> int:
    """Set the soak up for a test's own steps (no break, its bound, its replay); the first step's index."""
    soak.break_at = None
    soak.converge_seconds = converge_seconds
    soak.replay_command = f"pytest tests/soak -k {test}"
    return len(soak.report.steps) + 1 if soak.report else 1


def test_a_rotated_secret_and_kafkacluster_edits_disturb_nothing(soak: engine.Soak) -> None:
    """The operator's password changes on the broker (the old one refused at once, its connections
    dropped) and a change made meanwhile lands once the Secret has the new one; then permissive
    tenancy grants and a metrics block on the KafkaCluster change nothing that converged."""
    first = _on_purpose(soak, "rotated_secret", 30.0)
    quota = Resource(CLIENT_QUOTA, "soak-a", "rot-c", "user", (("user", "u3"),), (("producerByteRate", 2000.0),))
    modified = Resource(quota.kind, quota.namespace, quota.name, quota.form, quota.entity, (("consumerByteRate", 3e3),))
    steps = [
        Step(first, (), Fault("secret-rotated", (("lag", 2.0),)), (Op("apply", quota, "create"),)),
        Step(
            first + 1,
            (),
            Fault("kafkacluster-edited", (("what", 3.0), ("on", 1.0))),
            (Op("apply", modified, "modify"),),
        ),
        Step(first + 2, (), Fault("kafkacluster-edited", (("what", 1.0), ("on", 1.0))), ()),
    ]
    before = len(soak.report.violations) if soak.report else 0
    report = soak.play_all(steps)
    assert report.violations[before:] == [], report.text()
    assert all(s.converge_seconds is not None for s in report.steps[-3:]), report.text()


def test_a_revoked_grant_keeps_what_was_set_and_a_restored_one_applies_what_changed_meanwhile(
    soak: engine.Soak,
) -> None:
    """tenancy-revoked: soak-b loses its whole grant, so its resources are refused (NotPermitted,
    saying what they keep) and keep their keys as they were, even when edited meanwhile; a
    resource created meanwhile sets nothing. The grant restored, the edit and the new one land."""
    first = _on_purpose(soak, "revoked_grant", 30.0)
    quota = Resource(CLIENT_QUOTA, "soak-b", "ten-c", "user", (("user", "u1"),), (("producerByteRate", 4000.0),))
    edited = Resource(quota.kind, quota.namespace, quota.name, quota.form, quota.entity, (("producerByteRate", 5e3),))
    late = Resource(CLIENT_QUOTA, "soak-b", "ten-new", "client", (("clientId", "c3"),), (("consumerByteRate", 6e3),))
    revoke, restore = TENANCY_EDITS.index("soak-b-no-grant"), TENANCY_EDITS.index("restored")
    steps = [
        Step(first, (Op("apply", quota, "create"),), Fault("crds-reapplied"), ()),
        Step(
            first + 1,
            (),
            Fault("tenancy-revoked", (("grants", revoke),)),
            (Op("apply", edited, "modify"), Op("apply", late, "create")),
        ),
        Step(first + 2, (), Fault("tenancy-revoked", (("grants", restore),)), ()),
    ]
    before = len(soak.report.violations) if soak.report else 0
    report = soak.play_all(steps[:2])
    assert report.violations[before:] == [], report.text()
    revoked = report.steps[-1]
    assert revoked.refused_checked >= 2 and revoked.kept_checked >= 1, report.text()
    broker = soak.broker()
    assert broker[Entity.for_user("u1")]["producer_byte_rate"] == 4000.0, "refusing must not un-throttle"
    assert "consumer_byte_rate" not in broker.get(Entity.for_client("c3"), {}), "a refused resource sets nothing"
    report = soak.play_all(steps[2:])
    assert report.violations[before:] == [], report.text()
    broker = soak.broker()
    assert broker[Entity.for_user("u1")]["producer_byte_rate"] == 5000.0
    assert broker[Entity.for_client("c3")]["consumer_byte_rate"] == 6000.0
