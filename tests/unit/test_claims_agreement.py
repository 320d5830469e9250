"""`kquota plan` and the operator gate resources alike: the same cases through both paths, the same outcomes and words.

Each case is a set of quota objects as the API server returns them. The
operator's path: :func:`kquota.domain.claims.claim_from_body` (as the
handlers parse), :func:`kquota.domain.decide.decide` and the outcome chain.
The CLI's path: the same objects as ``kquota plan --cluster`` reads them, and
as ``kquota plan -f`` reads their manifests, through
:func:`kquota.cli.claims.select`. Both must resolve the same claims, give
every resource they gate the same reason and message, and the plan's note
must carry that message word for word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from kquota.api import ManifestError, parse_manifest
from kquota.cli.claims import select
from kquota.cli.planning import make_report
from kquota.cli.sources import manifest_claim
from kquota.cli.target import Target
from kquota.domain.claims import ResourceClaim, claim_from_body
from kquota.domain.decide import DecideInput, Decision, Settle, decide
from kquota.domain.gating import conflict_message
from kquota.domain.guard import GuardLimits
from kquota.domain.outcomes import ContestRule, OutcomeFacts, pass_outcomes
from kquota.domain.plan import Protection, UnmanagedPolicy
from kquota.domain.status import Outcome, Reason
from kquota.domain.stored_status import EMPTY_STATUS
from kquota.domain.tenancy import Grant
from kquota.domain.topic_outcomes import TopicFacts
from kquota.domain.topics import TopicLayout
from kquota.kafka.settings import ConnectionSettings

OLD = "2026-01-01T00:00:00Z"
NEW = "2026-02-01T00:00:00Z"


def obj(kind: str, name: str, spec: dict[str, Any], namespace: str = "team-a", **meta: Any) -> dict[str, Any]:
    """A quota object as the API server returns it (uid = name)."""
    metadata = {"name": name, "namespace": namespace, "uid": f"{namespace}-{name}", "creationTimestamp": OLD} | meta
    return {"apiVersion": "kquota.io/v1alpha1", "kind": kind, "metadata": metadata, "spec": spec}


def client_quota(name: str, entity: dict[str, Any], rate: str = "1Mi", **kw: Any) -> dict[str, Any]:
    return obj("ClientQuota", name, {"entity": entity, "quota": {"producerByteRate": rate}}, **kw)


def topic_quota(name: str, topic: str = "orders", **kw: Any) -> dict[str, Any]:
    spec = {
        "topic": {"name": topic},
        "budget": {"producerByteRate": "10Mi"},
        "enforcement": "ClientQuotas",
        "clients": [{"user": {"name": "alice"}, "share": 60}, {"user": {"name": "bob"}, "share": 40}],
    }
    return obj("TopicQuota", name, spec, **kw)


ALICE = {"user": {"name": "alice"}}


@dataclass
class Case:
    objects: list[dict[str, Any]]
    #: uid -> the reason both paths must give it before anything is sent (absent: it claims).
    gated: dict[str, Reason]
    grants: tuple[Grant, ...] | None = None
    protection: Protection = field(default_factory=Protection)
    #: topic -> partition -> leader, as the brokers report it.
    leaders: dict[str, dict[int, int]] = field(default_factory=dict)


CASES = [
    pytest.param(
        Case([client_quota("bad", ALICE, rate="lots")], {"team-a-bad": Reason.INVALID_SPEC}),
        id="an invalid spec",
    ),
    pytest.param(
        Case(
            [client_quota("a", ALICE)],
            {"team-a-a": Reason.NOT_PERMITTED},
            grants=(Grant(frozenset({"team-b"}), users=("*",)),),
        ),
        id="a namespace the tenancy grants do not cover",
    ),
    pytest.param(
        Case(
            [client_quota("a", ALICE), client_quota("b", {"user": {"name": "bob"}}, namespace="team-b")],
            {"team-a-a": Reason.NOT_PERMITTED},
            grants=(Grant(frozenset({"team-a"}), users=("carol",)), Grant(frozenset({"team-b"}), users=("b*",))),
        ),
        id="an entity outside the namespace's grant, next to one inside it",
    ),
    pytest.param(
        Case(
            [client_quota("cli", {"clientId": {"name": "admin-cli"}})],
            {"team-a-cli": Reason.PROTECTED},
            protection=Protection(client_ids=frozenset({"admin-cli"})),
        ),
        id="a protected client-id",
    ),
    pytest.param(
        Case(
            [client_quota("old", ALICE, "1Mi"), client_quota("young", ALICE, "2Mi", creationTimestamp=NEW)],
            {"team-a-young": Reason.CONFLICT},
        ),
        id="the younger of two resources setting a key loses it",
    ),
    pytest.param(
        Case(
            [
                client_quota("x", ALICE, "2Mi", namespace="team-b", creationTimestamp=NEW),
                client_quota("x", ALICE, "1Mi", namespace="team-a"),
            ],
            {"team-b-x": Reason.CONFLICT},
        ),
        id="the same key claimed from two namespaces: the older wins",
    ),
    pytest.param(
        Case([topic_quota("t")], {"team-a-t": Reason.TOPIC_NOT_FOUND}),
        id="a TopicQuota whose topic has no leaders",
    ),
    pytest.param(
        Case([topic_quota("t")], {}, leaders={"orders": {0: 1, 1: 1, 2: 2}}),
        id="a TopicQuota on a live topic claims its clients' quotas",
    ),
    pytest.param(
        Case(
            [topic_quota("t"), client_quota("a", ALICE, "5Mi", creationTimestamp=NEW)],
            {"team-a-a": Reason.CONFLICT},
            leaders={"orders": {0: 1, 1: 2}},
        ),
        id="a TopicQuota's client quota conflicts with a younger ClientQuota",
    ),
    pytest.param(
        Case(
            [client_quota("gone", ALICE, "1Mi", deletionTimestamp=NEW), client_quota("a", ALICE, "2Mi")],
            {},
        ),
        id="a resource being deleted claims nothing: the other one has the key",
    ),
]


def operator_path(case: Case, records: list[ResourceClaim]) -> tuple[Decision[ResourceClaim], dict[str, Outcome]]:
    now = 1000.0
    layouts = {t: TopicLayout.from_partition_leaders(p) for t, p in case.leaders.items()}
    inp = DecideInput(
        records=records,
        topics=TopicFacts(layouts),
        grants=case.grants,
        protection=case.protection,
        policy=UnmanagedPolicy.IGNORE,
        live={},
        ledger={},
        touched=None,
        remembered={},
        rejections={},
        contested=frozenset(),
        settle=Settle(now, float("-inf"), None, 0.0),
        limits=GuardLimits(enabled=False),
        approval=None,
        now=now,
    )
    decision = decide(inp)
    facts = OutcomeFacts({}, {}, {}, 5.0, {}, {}, False, {}, ContestRule(3, 600.0))
    return decision, pass_outcomes(decision, facts)


def from_manifest(body: Mapping[str, Any]) -> ResourceClaim:
    """``kquota plan -f``: the object's manifest, parsed and claimed as the CLI reads files."""
    manifest = {k: v for k, v in body.items() if k != "metadata"} | {
        "metadata": {k: body["metadata"][k] for k in ("name", "namespace")}
    }
    found = manifest_claim(parse_manifest(manifest), "default", "prod", body["metadata"]["creationTimestamp"])
    assert found is not None
    # Applied, it gets the object's uid and state (kquota plan's overlay keeps the live object's ref).
    meta = body["metadata"]
    return replace(found, ref=replace(found.ref, uid=meta["uid"]), deleting=bool(meta.get("deletionTimestamp")))


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("source", ["objects (plan --cluster)", "manifests (plan -f)"])
def test_plan_and_operator_gate_alike(case: Case, source: str) -> None:
    records = [claim_from_body(o["kind"], o, "prod") for o in case.objects]
    decision, outcomes = operator_path(case, records)

    if source.startswith("manifests"):
        if any(r.error for r in records):
            # kquota plan -f refuses an invalid manifest before planning, with the API server's words.
            with pytest.raises(ManifestError, match=r"spec\.quota\.producerByteRate"):
                parse_manifest(case.objects[0] | {"metadata": {"name": "bad"}})
            return
        cli_records = [from_manifest(o) for o in case.objects]
    else:
        cli_records = records
    selection = select(cli_records, "prod", case.grants, case.protection, case.leaders, keeps=True)

    assert selection.claims == decision.claims
    gated = {uid: o.reason for uid, o in selection.outcomes.items()}
    assert gated == case.gated
    for uid, outcome in selection.outcomes.items():
        assert (outcome.reason, outcome.message) == (outcomes[uid].reason, outcomes[uid].message), uid
    for rec in decision.claimers:
        if rec.ref.uid not in case.gated:
            assert outcomes[rec.ref.uid].reason is Reason.PENDING, "claims, and waits only for the brokers"
    # The plan says it in the operator's words (a conflict's note is per key).
    notes = plan_notes(cli_records, case)
    for uid, outcome in selection.outcomes.items():
        ref = next(r.ref for r in records if r.ref.uid == uid)
        said = [n for n in notes if n.startswith(f"{ref}: ")]
        if outcome.reason is Reason.CONFLICT:
            # One note per key lost, each in the status's words for that key.
            lost = selection.claims.conflicts[ref]
            for info in lost:
                words = conflict_message(info.key.value, info.entity, info.winner)
                assert any(words in n for n in said), (uid, words, notes)
            if len(lost) == 1:
                assert any(outcome.message in n for n in said), (uid, notes)
        else:
            assert any(outcome.message in n for n in said), (uid, notes)


def plan_notes(records: list[ResourceClaim], case: Case) -> list[str]:
    target = Target(
        ConnectionSettings("kafka:9092"),
        cluster="prod",
        ledger={},
        claimants=records,
        grants=case.grants,
        protection=case.protection,
    )
    report, _ = make_report(target, [], {}, None, case.leaders)
    return report.notes


def test_the_topic_quota_message_is_the_operators() -> None:
    """One case, one message: a TopicQuota on a missing topic, in the operator's status words."""
    rec = claim_from_body("TopicQuota", topic_quota("t"), "prod")
    _, outcomes = operator_path(Case([], {}), [rec])
    message = "topic 'orders' does not exist (yet): its clients' quotas are computed from its partition leaders"
    assert outcomes[rec.ref.uid].message == message
    assert select([rec], "prod", None, Protection(), {}).notes == [f"TopicQuota team-a/t: {message}; sets nothing"]


def test_the_cli_and_the_operator_build_the_same_claim() -> None:
    """One builder: an object read from the API server and its manifest make the same claim."""
    body = topic_quota("t")
    assert from_manifest(body) == replace(
        claim_from_body("TopicQuota", body, "prod"), generation=0, status=EMPTY_STATUS
    )
