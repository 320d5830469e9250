"""kquota explain: the effective quota per key, its level, who set it and what it overrides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kquota.cli.main import main
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.explain import Owner, Ownership, explain, owner_of, shared_by
from kquota.domain.plan import ResourceRef
from kquota.domain.resolver import Connection
from tests.support.quotas import ALICE, C, P

REF = ResourceRef("ClientQuota", "team-a", "alice")


@pytest.mark.parametrize(
    ("live", "holders", "ledger", "expected"),
    [
        pytest.param(100.0, {(ALICE, P): REF}, {}, Owner(Ownership.RESOURCE, REF), id="the holder set the live value"),
        pytest.param(
            50.0, {(ALICE, P): REF}, {}, Owner(Ownership.PENDING, REF, 100.0), id="the brokers lag the resource"
        ),
        pytest.param(None, {(ALICE, P): REF}, None, Owner(Ownership.RESOURCE, REF), id="offline the holder set it"),
        pytest.param(100.0, {}, {ALICE: {P: 100.0}}, Owner(Ownership.ORPHANED), id="owned but no resource: removed"),
        pytest.param(100.0, {}, {ALICE: {C: 1.0}}, Owner(Ownership.UNMANAGED), id="not in the ledger: unmanaged"),
        pytest.param(100.0, {}, None, Owner(Ownership.UNKNOWN), id="no ledger: unknown"),
    ],
)
def test_owner_of(
    live: float | None,
    holders: dict[tuple[Entity, QuotaKey], ResourceRef],
    ledger: dict[Entity, dict[QuotaKey, float]] | None,
    expected: Owner,
) -> None:
    assert owner_of(ALICE, P, live, holders, {ALICE: {P: 100.0}}, ledger) == expected


def test_labels() -> None:
    assert Owner(Ownership.RESOURCE, REF).label() == "ClientQuota team-a/alice"
    assert (
        Owner(Ownership.PENDING, REF, 1048576.0).label(lambda v: "1Mi")
        == "ClientQuota team-a/alice (pending: wants 1Mi)"
    )
    assert Owner(Ownership.UNMANAGED).label() == "unmanaged"


def test_owners_are_per_key_and_overrides_listed() -> None:
    entries = {
        Entity.for_pair("alice", "app"): {P: 1.0},
        ALICE: {P: 3.0, C: 30.0},
        Entity.for_user(None): {P: 6.0},
    }
    labels = {(ALICE, C): "by-hand"}

    def owner(entity: Entity, key: QuotaKey, value: float) -> Owner:
        return Owner(Ownership.UNMANAGED) if (entity, key) in labels else Owner(Ownership.RESOURCE, REF)

    rows = {e.key: e for e in explain(entries, Connection("alice", "app"), owner)}
    assert set(rows) == {P, C, QuotaKey.REQUEST_PERCENTAGE, QuotaKey.CONTROLLER_MUTATION_RATE}
    produce, consume = rows[P].winner, rows[C].winner
    assert produce is not None
    assert consume is not None
    assert (produce.level, produce.value, produce.owner.state) == (1, 1.0, Ownership.RESOURCE)
    assert [(c.level, c.value) for c in rows[P].overrides] == [(3, 3.0), (6, 6.0)]
    assert shared_by(rows[P]) == "this user and client-id"
    assert consume.owner.state is Ownership.UNMANAGED
    assert shared_by(rows[C]) == "all clients of user alice"
    assert rows[QuotaKey.REQUEST_PERCENTAGE].winner is None
    assert shared_by(rows[QuotaKey.REQUEST_PERCENTAGE]) == "-"


MANIFESTS = """\
apiVersion: kquota.io/v1alpha1
kind: ClientQuota
metadata: {name: alice, namespace: team-a, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  entity: {user: {name: alice}}
  quota: {producerByteRate: 10Mi, consumerByteRate: 20Mi}
---
apiVersion: kquota.io/v1alpha1
kind: ClientQuota
metadata: {name: alice-app}
spec:
  entity: {user: {name: alice}, clientId: {name: app}}
  quota: {consumerByteRate: 1Mi}
---
apiVersion: kquota.io/v1alpha1
kind: ClientQuota
metadata: {name: everyone, namespace: platform}
spec:
  entity: {clientId: {default: true}}
  quota: {producerByteRate: 1Ki, requestPercentage: 25}
---
apiVersion: kquota.io/v1alpha1
kind: ClientQuota
metadata: {name: office, namespace: platform}
spec:
  entity: {ip: {name: 192.0.2.10}}
  quota: {connectionCreationRate: 5}
"""


def run_json(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main([*args, "-o", "json"]) == 0
    doc: dict[str, Any] = json.loads(capsys.readouterr().out)
    return doc


def test_offline_from_manifests(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "q.yaml").write_text(MANIFESTS)
    doc = run_json(["explain", "-f", str(tmp_path), "--user", "alice", "--client-id", "app", "-n", "team-b"], capsys)
    keys = {k["key"]: k for k in doc["keys"]}
    assert doc["source"] == "manifests (offline)"
    assert keys["producer_byte_rate"]["value"] == 10485760
    assert keys["producer_byte_rate"]["level"] == 3
    assert keys["producer_byte_rate"]["levelName"] == "users/<user>"
    assert keys["producer_byte_rate"]["owner"]["resource"] == {
        "kind": "ClientQuota",
        "namespace": "team-a",
        "name": "alice",
    }
    assert keys["producer_byte_rate"]["bucket"] == {"user": "alice", "clientId": ""}
    assert [(o["level"], o["entity"]["path"]) for o in keys["producer_byte_rate"]["overrides"]] == [
        (8, "clients/<default>")
    ]
    assert keys["consumer_byte_rate"]["level"] == 1
    # A manifest without a namespace gets -n's.
    assert keys["consumer_byte_rate"]["owner"]["resource"]["namespace"] == "team-b"
    assert keys["request_percentage"]["entity"] == {"path": "clients/<default>", "parts": {"client-id": None}}
    assert keys["controller_mutation_rate"]["unlimited"] is True
    assert "connection_creation_rate" not in keys


def test_json_values_are_integers_when_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "q.yaml").write_text(MANIFESTS)
    assert main(["explain", "-f", str(tmp_path), "--user", "alice", "--client-id", "app", "-o", "json"]) == 0
    text = capsys.readouterr().out
    keys = {k["key"]: k for k in json.loads(text)["keys"]}
    assert type(keys["producer_byte_rate"]["value"]) is int
    assert all(type(o["value"]) is int for o in keys["producer_byte_rate"]["overrides"])
    assert '"value": 10485760,' in text
    assert ".0," not in text


def test_the_ip_ladder_needs_an_ip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "q.yaml").write_text(MANIFESTS)
    doc = run_json(["explain", "-f", str(tmp_path), "--ip", "192.0.2.10"], capsys)
    assert [(k["key"], k["value"]) for k in doc["keys"] if not k["unlimited"]] == [("connection_creation_rate", 5)]


def test_text_output_is_a_plain_table_when_piped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "q.yaml").write_text(MANIFESTS)
    assert main(["explain", "-f", str(tmp_path), "--user", "bob", "--client-id", "other"]) == 0
    out = capsys.readouterr().out
    assert "\x1b[" not in out
    line = next(x for x in out.splitlines() if x.startswith("producer_byte_rate"))
    assert line.split()[:4] == ["producer_byte_rate", "1Ki", "8", "clients/<default>"]
    assert "all users of client-id other" in line
    assert next(x for x in out.splitlines() if x.startswith("consumer_byte_rate")).split()[1] == "unlimited"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["-f", "x.yaml"], "give --user", id="a connection needs a user"),
        pytest.param(["--user", "a", "--ip", "10.0.0.300", "-f", "x"], "is not an IP address", id="a bad ip"),
        pytest.param(["--user", "a"], "give -f PATH", id="manifests or a cluster are needed"),
    ],
)
def test_errors(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", *args]) == 1
    assert message in capsys.readouterr().err
