"""kquota plan: the operator's decisions shown as add / change / remove / own / left alone, and exit codes."""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from kquota.cli import common
from kquota.cli import plan as plan_cmd
from kquota.cli.claims import overlay, select, topics_of
from kquota.cli.explain import explain_entries
from kquota.cli.main import main
from kquota.cli.plan import render_text, summary, to_json
from kquota.cli.planning import Action, make_report, shown_changes
from kquota.cli.target import Target
from kquota.cli.term import Term
from kquota.domain.claims import CLIENT_QUOTA, ResourceClaim
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.explain import Ownership
from kquota.domain.plan import Protection, ResourceRef, UnmanagedPolicy
from kquota.domain.resolver import Connection
from kquota.domain.tenancy import Grant
from kquota.kafka.settings import ConnectionSettings
from tests.support.quotas import ALICE, BOB, C, P, R

APP = Entity.for_client("app")
CONN = ConnectionSettings("kafka:9092")

Quotas = dict[Entity, dict[QuotaKey, float]]


def res(
    name: str, entity: Entity, values: dict[QuotaKey, float], created: str = "2024-01-01T00:00:00Z"
) -> ResourceClaim:
    return ResourceClaim(ResourceRef("ClientQuota", "team-a", name), created, "prod", ((entity, values),), CLIENT_QUOTA)


@dataclass
class Case:
    manifests: list[ResourceClaim]
    live: Quotas
    #: None: no ledger (no --cluster), resources in the cluster unknown too.
    ledger: Quotas | None
    #: (action, entity path, key, live, desired)
    rows: list[tuple[Action, str, QuotaKey | None, float | None, float | None]]
    exit: int
    existing: list[ResourceClaim] = field(default_factory=list)
    policy: UnmanagedPolicy = UnmanagedPolicy.IGNORE
    protection: Protection = field(default_factory=Protection)
    entity_filter: list[str] | None = None


CASES = [
    pytest.param(
        Case([res("a", ALICE, {P: 100})], {}, {}, [(Action.ADD, "users/alice", P, None, 100)], 2),
        id="a key the brokers do not have is added: exit 2",
    ),
    pytest.param(
        Case(
            [res("a", ALICE, {P: 100})],
            {ALICE: {P: 50}},
            {ALICE: {P: 50}},
            [(Action.CHANGE, "users/alice", P, 50, 100)],
            2,
        ),
        id="an owned key with a new value is changed",
    ),
    pytest.param(
        Case([res("a", ALICE, {P: 100})], {ALICE: {P: 100}}, {ALICE: {P: 100}}, [], 0),
        id="brokers matching the manifests: no rows, exit 0",
    ),
    pytest.param(
        Case(
            [res("a", ALICE, {P: 100})],
            {ALICE: {P: 100, C: 7}},
            {ALICE: {P: 100, C: 7}},
            [(Action.REMOVE, "users/alice", C, 7, None)],
            2,
        ),
        id="an owned key the resource no longer sets is removed",
    ),
    pytest.param(
        Case(
            [res("a", ALICE, {P: 100})],
            {ALICE: {P: 100, C: 7}},
            None,
            [(Action.UNMANAGED, "users/alice", C, 7, None)],
            0,
        ),
        id="without a ledger removals are not computed: the key is listed as left alone",
    ),
    pytest.param(
        Case([res("a", ALICE, {P: 100})], {ALICE: {P: 60}}, {}, [(Action.CHANGE, "users/alice", P, 60, 100)], 2),
        id="a key set by hand that a resource claims is taken over",
    ),
    pytest.param(
        Case([res("a", ALICE, {P: 100})], {ALICE: {P: 100}}, {}, [(Action.OWN, "users/alice", P, 100, 100)], 0),
        id="a key already at its value becomes owned without a broker change: exit 0",
    ),
    pytest.param(
        Case([res("a", ALICE, {P: 100})], {ALICE: {P: 100}}, None, [], 0),
        id="without a ledger ownership is not shown",
    ),
    pytest.param(
        Case([], {BOB: {P: 5}}, {}, [(Action.UNMANAGED, "users/bob", P, 5, None)], 0),
        id="a key nobody claims and kquota does not own is left alone",
    ),
    pytest.param(
        Case([], {BOB: {P: 5}}, {}, [(Action.REMOVE, "users/bob", P, 5, None)], 2, policy=UnmanagedPolicy.ADOPT),
        id="with policy Adopt an unclaimed key is removed",
    ),
    pytest.param(
        Case(
            [res("a", ALICE, {P: 100})],
            {ALICE: {P: 5}},
            {ALICE: {P: 5}},
            [(Action.PROTECTED, "users/alice", None, None, None)],
            0,
            protection=Protection(frozenset({"alice"})),
        ),
        id="a protected principal is never changed",
    ),
    pytest.param(
        Case(
            [res("a", ALICE, {P: 100}), res("b", BOB, {P: 100})],
            {},
            {},
            [(Action.ADD, "users/bob", P, None, 100)],
            2,
            entity_filter=["users/b*"],
        ),
        id="--entity limits the rows and the exit code to matching entities",
    ),
    pytest.param(
        Case([res("a", ALICE, {P: 100})], {}, {}, [], 0, entity_filter=["users/bob"]),
        id="changes outside the filter do not count",
    ),
    pytest.param(
        Case(
            [res("a", ALICE, {P: 100})],
            {APP: {P: 9}, BOB: {P: 3}},
            {APP: {P: 9}, BOB: {P: 3}},
            [(Action.ADD, "users/alice", P, None, 100), (Action.REMOVE, "clients/app", P, 9, None)],
            2,
            existing=[res("b", BOB, {P: 3})],
        ),
        id="resources already in the cluster keep their keys; an owned key no resource sets goes",
    ),
    pytest.param(
        Case(
            [res("a", ALICE, {P: 200})],
            {ALICE: {P: 100}},
            {ALICE: {P: 100}},
            [(Action.CHANGE, "users/alice", P, 100, 200)],
            2,
            existing=[res("a", ALICE, {P: 100})],
        ),
        id="a manifest replaces the resource of the same name in the cluster",
    ),
]


@pytest.mark.parametrize("case", CASES)
def test_plan_rows(case: Case) -> None:
    known = case.ledger is not None
    target = Target(
        CONN,
        cluster="prod" if known else None,
        policy=case.policy,
        protection=case.protection,
        ledger=case.ledger,
        claimants=list(case.existing) if known else None,
    )
    report, _ = make_report(target, case.manifests, case.live, case.entity_filter)
    got = [(r.action, r.entity.path(), r.key, r.live, r.desired) for r in report.rows]
    assert sorted(got, key=str) == sorted(case.rows, key=str)
    assert report.exit_code() == case.exit


def test_removing_a_key_the_existing_resource_set_is_a_removal() -> None:
    """The overlay: the cluster's resource set P and C; the manifest of the same name sets only P."""
    existing = [res("a", ALICE, {P: 100, C: 7})]
    target = Target(CONN, cluster="prod", ledger={ALICE: {P: 100, C: 7}}, claimants=existing)
    report, _ = make_report(target, [res("a", ALICE, {P: 100})], {ALICE: {P: 100, C: 7}})
    assert [(r.action, r.key) for r in report.rows] == [(Action.REMOVE, C)]
    assert report.rows[0].note == "ClientQuota team-a/a no longer sets it"


def test_drift_and_takeover_are_explained() -> None:
    target = Target(CONN, cluster="prod", ledger={ALICE: {P: 100}}, claimants=[])
    report, _ = make_report(target, [res("a", ALICE, {P: 100, C: 5})], {ALICE: {P: 1, C: 4}})
    notes = {r.key: r.note for r in report.rows}
    assert notes == {P: "changed outside kquota; restored", C: "takes over a value set outside kquota"}


def test_overlay_keeps_the_age_of_an_updated_resource() -> None:
    old = res("a", ALICE, {P: 1}, created="2020-01-01T00:00:00Z")
    new = res("a", ALICE, {P: 2}, created="2030-01-01T00:00:00Z")
    other = res("b", BOB, {P: 3})
    merged = overlay([old, other], [new])
    assert {(c.ref.name, c.created, c.entries[0][1][P]) for c in merged} == {
        ("a", "2020-01-01T00:00:00Z", 2),
        ("b", "2024-01-01T00:00:00Z", 3),
    }


def test_the_older_resource_wins_a_key_and_the_loser_is_noted() -> None:
    older = res("older", ALICE, {P: 1}, created="2020-01-01T00:00:00Z")
    newer = res("newer", ALICE, {P: 2, C: 3}, created="2021-01-01T00:00:00Z")
    target = Target(CONN, cluster="prod", ledger={}, claimants=[older])
    report, _ = make_report(target, [newer], {})
    assert {(r.key, r.desired, r.source.name if r.source else None) for r in report.rows} == {
        (P, 1, "older"),
        (C, 3, "newer"),
    }
    assert any(
        "ClientQuota team-a/newer: producer_byte_rate on users/alice is already set by" in n for n in report.notes
    )


@pytest.mark.parametrize(
    ("flags", "live", "code", "summary"),
    [
        pytest.param(
            [],
            {ALICE: {P: 1024.0}},
            0,
            "No changes: the brokers already match. 1 key already set become owned by kquota; "
            "1 conflict: the older resource wins (see Notes).",
            id="a conflict alone exits 0 without the flag, but the summary counts it",
        ),
        pytest.param(
            ["--fail-on-conflict"],
            {ALICE: {P: 1024.0}},
            2,
            None,
            id="with --fail-on-conflict a conflict exits 2 though the brokers already match",
        ),
        pytest.param(
            ["--fail-on-conflict", "--entity", "users/bob"],
            {ALICE: {P: 1024.0}},
            0,
            "No changes: the brokers already match.",
            id="a conflict outside --entity does not count",
        ),
    ],
)
def test_fail_on_conflict(
    flags: list[str],
    live: Quotas,
    code: int,
    summary: str | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two new resources set producer_byte_rate of alice: of equal age, the first by name wins."""
    (tmp_path / "a.yaml").write_text(VALID.replace("name: a,", "name: first,").replace("10Mi", "1Ki"))
    (tmp_path / "b.yaml").write_text(VALID.replace("name: a,", "name: second,").replace("10Mi", "2Ki"))

    async def load_target(args: Any, with_claimants: bool = True) -> Target:
        return Target(CONN, cluster="prod", ledger={}, claimants=[])

    monkeypatch.setattr(plan_cmd, "load_target", load_target)
    monkeypatch.setattr(plan_cmd, "read_live", lambda connection, topics=(): (live, {}))
    args = ["plan", "-f", str(tmp_path), "--bootstrap-server", "kafka:9092", "--default-cluster", "prod"]
    assert main([*args, *flags, "-o", "json"]) == code
    doc = json.loads(capsys.readouterr().out)
    assert doc["changes"] == 0
    if summary is not None:
        assert doc["summary"] == summary
    assert doc["conflicts"] == (0 if "users/bob" in flags else 1)
    assert any(
        "ClientQuota team-a/second: producer_byte_rate on users/alice is already set by" in n for n in doc["notes"]
    )


@pytest.mark.parametrize(
    ("claimant", "grants", "protection", "note"),
    [
        pytest.param(
            ResourceClaim(ResourceRef("ClientQuota", "team-a", "x"), "", "other", ((ALICE, {P: 1}),), CLIENT_QUOTA),
            None,
            Protection(),
            "targets cluster other, not prod",
            id="a resource of another cluster is not planned",
        ),
        pytest.param(
            ResourceClaim(ResourceRef("TopicQuota", "team-a", "t"), "", "prod", error="spec.budget: no budget"),
            None,
            Protection(),
            "TopicQuota team-a/t: invalid spec: spec.budget: no budget; sets nothing",
            id="an invalid spec sets nothing",
        ),
        pytest.param(
            res("x", ALICE, {P: 1}),
            (Grant(frozenset({"team-b"}), users=("*",)),),
            Protection(),
            "not permitted: namespace team-a has no quota grant",
            id="a namespace without a grant sets nothing",
        ),
        pytest.param(
            res("x", ALICE, {P: 1}),
            None,
            Protection(frozenset({"alice"})),
            "names a protected principal",
            id="a resource naming a protected principal sets nothing",
        ),
    ],
)
def test_resources_the_operator_would_not_act_on_are_noted(
    claimant: ResourceClaim, grants: tuple[Grant, ...] | None, protection: Protection, note: str
) -> None:
    selection = select([claimant], "prod", grants, protection, {})
    assert selection.claims.desired == {}
    notes = selection.notes
    assert len(notes) == 1
    assert note in notes[0]


def test_text_and_json_output() -> None:
    target = Target(CONN, cluster="prod", ledger={ALICE: {C: 7}}, claimants=[])
    report, _ = make_report(target, [res("a", ALICE, {P: 10485760})], {ALICE: {C: 7}, BOB: {R: 50}})
    out = io.StringIO()
    render_text(report, Term(out, color=False))
    text = out.getvalue()
    assert "\x1b[" not in text
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("ACTION"))
    assert lines[header].split() == ["ACTION", "ENTITY", "KEY", "LIVE", "DESIRED", "SOURCE"]
    assert lines[header + 1].split()[:5] == ["add", "users/alice", "producer_byte_rate", "-", "10Mi"]
    assert lines[header + 2].split()[:5] == ["remove", "users/alice", "consumer_byte_rate", "7", "-"]
    assert lines[header + 3].split()[:5] == ["unmanaged", "users/bob", "request_percentage", "50", "-"]
    # Columns line up: each row's KEY starts where the header's does.
    column = lines[header].index("KEY")
    assert all(lines[header + i][column - 2 : column] == "  " for i in (1, 2, 3))
    assert lines[-1] == "Plan: 1 to add, 0 to change, 1 to remove on 1 entity. 1 unmanaged key left alone."

    doc = to_json(report)
    assert json.loads(json.dumps(doc)) == doc
    assert doc["changes"] == 2
    assert doc["rows"][0] == {
        "action": "add",
        "entity": {"path": "users/alice", "parts": {"user": "alice"}},
        "key": "producer_byte_rate",
        "live": None,
        "desired": 10485760,
        "resource": {"kind": "ClientQuota", "namespace": "team-a", "name": "a"},
        "note": "",
    }


def test_json_values_are_integers_when_whole() -> None:
    """Byte rates are doubles inside (Kafka's type); the JSON a script reads carries the exact integer."""
    big = float(2**60)  # above 2^53: %g or float formatting would show 1.15292e+18
    target = Target(CONN, cluster="prod", ledger={ALICE: {P: 10485760.0, R: 33.3}}, claimants=[])
    manifests = [res("a", ALICE, {P: 20971520.0, C: big, R: 50.0})]
    report, _ = make_report(target, manifests, {ALICE: {P: 10485760.0, R: 33.3}})
    out = io.StringIO()
    common.dump_json(to_json(report), out)
    text = out.getvalue()
    rows = {r["key"]: r for r in json.loads(text)["rows"]}
    assert (rows["producer_byte_rate"]["live"], rows["producer_byte_rate"]["desired"]) == (10485760, 20971520)
    assert type(rows["producer_byte_rate"]["desired"]) is int
    assert type(rows["consumer_byte_rate"]["desired"]) is int
    assert rows["consumer_byte_rate"]["desired"] == 2**60
    assert type(rows["request_percentage"]["live"]) is float
    assert '"desired": 20971520,' in text
    assert '"desired": 1152921504606846976,' in text
    assert '"live": 33.3,' in text
    assert ".0," not in text
    assert "e+" not in text

    table = io.StringIO()
    render_text(report, Term(table, color=False))
    assert "1152921504606846976" in table.getvalue()
    assert "e+" not in table.getvalue()


def test_broker_rejections_make_the_exit_code_an_error() -> None:
    target = Target(CONN, cluster="prod", ledger={}, claimants=[])
    report, the_plan = make_report(target, [res("a", ALICE, {P: 1}), res("b", BOB, {P: 2})], {}, ["users/alice"])
    assert [a.entity for a in shown_changes(report, the_plan)] == [ALICE]
    report.validated = True
    report.rejected = {"users/alice": "INVALID_REQUEST: no"}
    assert report.exit_code() == 1
    out = io.StringIO()
    render_text(report, Term(out, color=False))
    assert "REJECTED by the broker: INVALID_REQUEST: no" in out.getvalue()


VALID = """\
apiVersion: kquota.io/v1alpha1
kind: ClientQuota
metadata: {name: a, namespace: team-a}
spec:
  entity: {user: {name: alice}}
  quota: {producerByteRate: 10Mi}
"""


def test_an_invalid_manifest_fails_before_any_connection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ok.yaml").write_text(VALID)
    (tmp_path / "bad.yaml").write_text(VALID.replace("10Mi", "0"))
    # The bootstrap server does not exist: reaching it would fail differently, and slowly.
    code = main(["plan", "-f", str(tmp_path), "--bootstrap-server", "127.0.0.1:1"])
    assert code == 1
    err = capsys.readouterr().err
    assert (
        'bad.yaml: ClientQuota "a" is invalid: spec.quota.producerByteRate: Invalid value: 0: must be greater than zero'
        in err
    )


def test_plan_needs_a_cluster(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ok.yaml").write_text(VALID)
    assert main(["plan", "-f", str(tmp_path)]) == 1
    assert "no cluster: give --bootstrap-server" in capsys.readouterr().err


def test_usage_errors_exit_1_not_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["plan"])
    assert info.value.code == 1
    assert "the following arguments are required: -f/--filename" in capsys.readouterr().err


TOPIC_QUOTA = """\
apiVersion: kquota.io/v1alpha1
kind: TopicQuota
metadata: {name: payments, namespace: team-a}
spec:
  topic: {name: payments}
  budget: {producerByteRate: 30Mi}
  enforcement: ENFORCEMENT
  clients:
  - {user: {name: api}, share: 70}
"""


def topic_claimant(enforcement: str) -> ResourceClaim:
    from kquota.api import parse_manifest
    from kquota.cli.sources import manifest_claim

    found = manifest_claim(
        parse_manifest(yaml.safe_load(TOPIC_QUOTA.replace("ENFORCEMENT", enforcement))), "d", "prod", ""
    )
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("enforcement", "leaders", "rows", "note"),
    [
        pytest.param(
            "ClientQuotas",
            # 4 partitions, broker 1 leads 3 of them: 30Mi x 70% x 3/4 per broker.
            {"payments": {0: 1, 1: 1, 2: 1, 3: 2}},
            [(Action.ADD, "users/api", P, None, float(math.floor(30 * 2**20 * 0.7 * 3 / 4)))],
            None,
            id="ClientQuotas: the clients' quotas follow the live leader layout",
        ),
        pytest.param(
            "ClientQuotas",
            {},
            [],
            "topic 'payments' does not exist (yet)",
            id="ClientQuotas on a missing topic sets nothing and says why",
        ),
        pytest.param("Monitor", {"payments": {0: 1}}, [], None, id="a Monitor budget sets no client quotas"),
    ],
)
def test_topic_quotas(
    enforcement: str, leaders: dict[str, dict[int, int]], rows: list[tuple[Any, ...]], note: str | None
) -> None:
    c = topic_claimant(enforcement)
    assert topics_of([c]) == (["payments"] if enforcement == "ClientQuotas" else [])
    target = Target(CONN, cluster="prod", ledger={}, claimants=[])
    report, _ = make_report(target, [c], {}, None, leaders)
    assert [(r.action, r.entity.path(), r.key, r.live, r.desired) for r in report.rows] == rows
    if note:
        assert any(note in n for n in report.notes), report.notes


# --- the operator's decisions the plan must show: keep, guard, a KafkaCluster in -f -------------


def test_a_resource_refused_by_a_new_grant_keeps_its_keys_as_the_operator_does() -> None:
    existing = [res("a", ALICE, {P: 100})]
    target = Target(
        CONN,
        cluster="prod",
        ledger={ALICE: {P: 100}},
        claimants=existing,
        grants=(Grant(frozenset({"team-a"}), users=("team-*",)),),
    )
    report, _ = make_report(target, [], {ALICE: {P: 100}})
    assert [(r.action, r.entity, r.key, r.live) for r in report.rows] == [(Action.KEEP, ALICE, P, 100)]
    assert report.exit_code() == common.OK, "nothing changes on the brokers"
    assert any("stays on the brokers as it is" in n for n in report.notes)
    # kquota explain says the same of that key (#33, finding 6: it said "to be removed").
    rows, _ = explain_entries(
        {ALICE: {P: 100}}, existing, "prod", Connection("alice", "", None), {ALICE: {P: 100}}, True,
        grants=target.grants,
    )  # fmt: skip
    (row,) = [r for r in rows if r.key is P]
    assert row.winner is not None and row.winner.owner.state is Ownership.KEPT
    assert "kept for a refused resource" in row.winner.owner.label()


def test_adopt_over_many_hand_made_quotas_is_held_until_approved() -> None:
    live: Quotas = {Entity.for_user(f"hand{i}"): {C: 100.0} for i in range(40)}
    target = Target(CONN, cluster="prod", ledger={}, claimants=[], policy=UnmanagedPolicy.ADOPT)
    report, _ = make_report(target, [], live)
    assert {r.action for r in report.rows} == {Action.HELD}
    # Not "no changes" (0) nor "changes" (2): nothing is removed until someone approves (#33).
    assert report.exit_code() == common.HELD == 3
    (note,) = [n for n in report.notes if "removals held" in n]
    hold = note.rsplit("kquota.io/approve-removals=", 1)[1].split()[0]
    assert report.approval == f"kubectl annotate kafkacluster prod kquota.io/approve-removals={hold} --overwrite"
    assert summary(report).startswith("No change goes through until the held removals are approved.")
    approved, _ = make_report(replace(target, approval=hold), [], live)
    assert {r.action for r in approved.rows} == {Action.REMOVE} and approved.exit_code() == common.CHANGES


def test_a_kafkacluster_in_the_manifests_is_laid_over_the_live_one(tmp_path: Path) -> None:
    manifest = tmp_path / "cluster.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kquota.io/v1alpha1",
                "kind": "KafkaCluster",
                "metadata": {"name": "prod"},
                "spec": {
                    "bootstrapServers": "kafka:9092",
                    "unmanaged": {"policy": "Adopt"},
                    "protectedUsers": ["admin"],
                },
            }
        )
    )
    args = plan_cmd.argparse.Namespace(filename=[str(manifest)], recursive=False, namespace="default")
    target = Target(CONN, cluster="prod", ledger={}, claimants=[], principals=frozenset({"kquota-op"}))
    laid = plan_cmd.with_cluster_manifest(target, plan_cmd.cluster_manifests(args))
    assert laid.policy is UnmanagedPolicy.ADOPT
    assert laid.protection.users == {"admin", "kquota-op"}, "the operator's own principal stays protected"
    live: Quotas = {BOB: {C: 5.0}, Entity.for_user("admin"): {C: 9.0}}
    report, _ = make_report(laid, [], live)
    # Adopt removes bob's hand-set quota; admin is protected by the manifest: untouched.
    assert [(r.action, r.entity) for r in report.rows] == [(Action.REMOVE, BOB)]
    # Another cluster's KafkaCluster changes nothing here.
    other = plan_cmd.with_cluster_manifest(Target(CONN, cluster="staging"), plan_cmd.cluster_manifests(args))
    assert other.policy is UnmanagedPolicy.IGNORE


def test_delete_removes_the_keys_of_the_resources_named_with_the_cause() -> None:
    existing = [res("a", ALICE, {P: 100}), res("b", BOB, {C: 7})]
    target = Target(CONN, cluster="prod", ledger={ALICE: {P: 100}, BOB: {C: 7}}, claimants=existing)
    report, _ = make_report(target, [], {ALICE: {P: 100}, BOB: {C: 7}}, deleted=[res("b", BOB, {C: 7})])
    assert [(r.action, r.entity, r.key, r.note) for r in report.rows] == [
        (Action.REMOVE, BOB, C, "ClientQuota team-a/b is deleted")
    ]
