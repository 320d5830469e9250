"""What Strimzi owns, read from Kafka and KafkaUser objects shaped as Strimzi writes them."""

from __future__ import annotations

from typing import Any

import pytest

from kquota.domain.entities import Entity
from kquota.domain.plan import Protection, UnmanagedPolicy, plan
from kquota.domain.status import STALLED, Reason
from kquota.domain.strimzi import IGNORED_USERS_ENV, StrimziError, listener, ownership, parse_version, user_principal
from kquota.domain.tenancy import refusal
from tests.support.quotas import C, P


def kafka(
    user_operator: bool = True, pattern: str | None = None, version: str | None = "0.48.0", **spec: Any
) -> dict[str, Any]:
    eo: dict[str, Any] = {"topicOperator": {}}
    if user_operator:
        eo["userOperator"] = {}
    if pattern is not None:
        eo["template"] = {"userOperatorContainer": {"env": [{"name": IGNORED_USERS_ENV, "value": pattern}]}}
    return {
        "apiVersion": "kafka.strimzi.io/v1beta2",
        "kind": "Kafka",
        "metadata": {"namespace": "kafka", "name": "my-cluster"},
        "spec": {
            "kafka": {
                "listeners": [
                    {"name": "plain", "port": 9092, "type": "internal", "tls": False},
                    {
                        "name": "tls",
                        "port": 9093,
                        "type": "internal",
                        "tls": True,
                        "authentication": {"type": "tls"},
                    },
                    {
                        "name": "scram",
                        "port": 9094,
                        "type": "internal",
                        "tls": False,
                        "authentication": {"type": "scram-sha-512"},
                    },
                ]
            },
            "entityOperator": eo,
            **spec,
        },
        "status": {
            "listeners": [
                {"name": "plain", "bootstrapServers": "my-cluster-kafka-bootstrap.kafka.svc:9092"},
                {"name": "tls", "bootstrapServers": "my-cluster-kafka-bootstrap.kafka.svc:9093", "certificates": ["x"]},
            ],
            **({"operatorLastSuccessfulVersion": version} if version else {}),
        },
    }


def kafka_user(name: str, auth: str = "scram-sha-512", username: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "metadata": {"namespace": "kafka", "name": name, "labels": {"strimzi.io/cluster": "my-cluster"}},
        "spec": {"authentication": {"type": auth}},
    }
    if username:
        body["status"] = {"username": username, "secret": name}
    return body


def test_a_listener_gives_its_address_tls_and_authentication() -> None:
    tls = listener(kafka(), "tls")
    assert (tls.bootstrap_servers, tls.tls, tls.authentication) == (
        "my-cluster-kafka-bootstrap.kafka.svc:9093",
        True,
        "tls",
    )
    plain = listener(kafka(), "plain")
    assert (plain.tls, plain.authentication) == (False, None)


def test_a_missing_listener_or_address_names_what_is_missing() -> None:
    with pytest.raises(StrimziError, match=r"no listener 'external'.*plain, tls, scram"):
        listener(kafka(), "external")
    with pytest.raises(StrimziError, match="no address for listener 'scram'"):
        listener(kafka(), "scram")


def test_principals_as_the_brokers_see_them() -> None:
    assert user_principal(kafka_user("app")) == "app"
    assert user_principal(kafka_user("app", "tls")) == "CN=app"
    assert user_principal(kafka_user("app", "tls", username="CN=app")) == "CN=app"


def test_the_user_operator_owns_every_kafkauser_and_every_other_user_unless_ignored() -> None:
    owned = ownership(kafka(), [kafka_user("app"), kafka_user("svc", "tls")])
    assert "KafkaUser kafka/app" in (owned.owner(Entity.for_user("app")) or "")
    # A TLS user's principal and its bare name: the User Operator reconciles both.
    assert "KafkaUser kafka/svc" in (owned.owner(Entity.for_user("CN=svc")) or "")
    assert "KafkaUser kafka/svc" in (owned.owner(Entity.for_user("svc")) or "")
    other = owned.owner(Entity.for_user("batch"))
    assert other is not None and IGNORED_USERS_ENV in other and "userOperatorContainer.env" in other
    # Pairs, client-ids and IPs are never the User Operator's.
    assert owned.owner(Entity.for_pair("app", "c")) is None
    assert owned.owner(Entity.for_client("c")) is None
    assert owned.owner(Entity.for_ip("10.0.0.1")) is None


def test_the_ignore_pattern_hands_users_to_kquota_but_not_kafkausers() -> None:
    owned = ownership(kafka(pattern="kq-.*"), [kafka_user("kq-app")])
    assert owned.owner(Entity.for_user("kq-batch")) is None
    assert owned.owner(Entity.for_user("xkq-batch")) is not None, "Java's matches(): the whole name"
    assert owned.owner(Entity.for_user("kq-app")) is not None, "a KafkaUser is reconciled whatever the pattern"


def test_without_a_user_operator_users_are_kquotas() -> None:
    owned = ownership(kafka(user_operator=False), [kafka_user("app")])
    assert owned.owner(Entity.for_user("app")) is None
    assert owned.owner(Entity.for_user("batch")) is None
    assert "no User Operator" in owned.summary()


@pytest.mark.parametrize(("version", "owned"), [("0.41.0", False), ("0.42.0", True), ("1.2.0", True), (None, True)])
def test_the_default_user_is_the_cluster_operators_since_0_42(version: str | None, owned: bool) -> None:
    o = ownership(kafka(version=version), [])
    assert (o.owner(Entity.for_user(None)) is not None) is owned


def test_the_handover_hint_depends_on_the_version() -> None:
    assert "needs 0.48 or later" in ownership(kafka(version="0.45.0"), []).handover_hint()
    assert IGNORED_USERS_ENV in ownership(kafka(version="0.48.1"), []).handover_hint()
    assert parse_version("1.2.0") == (1, 2) and parse_version("junk") is None


def test_a_resource_for_a_strimzi_user_is_refused_and_its_entity_never_touched() -> None:
    owned = ownership(kafka(pattern="kq-.*"), [kafka_user("app")])
    protection = Protection(strimzi=owned)
    refused = refusal("team", [Entity.for_user("app")], None, protection)
    assert refused is not None and refused[0] is Reason.OWNED_BY_STRIMZI and "KafkaUser kafka/app" in refused[1]
    assert Reason.OWNED_BY_STRIMZI in STALLED
    assert refusal("team", [Entity.for_user("kq-app")], None, protection) is None
    # Adopt removes unclaimed quotas, but never Strimzi's.
    live = {Entity.for_user("app"): {P: 1.0}, Entity.for_user(None): {C: 2.0}, Entity.for_user("kq-x"): {P: 3.0}}
    p = plan({}, live, {}, UnmanagedPolicy.ADOPT, protection)
    assert [c.entity for c in p.changes] == [Entity.for_user("kq-x")]


def test_explain_names_strimzi_as_the_owner_of_its_entities() -> None:
    from kquota.domain.explain import Ownership, owner_of

    owned = ownership(kafka(), [kafka_user("app")])
    who = owner_of(Entity.for_user("app"), P, 1.0, {}, {}, {}, owned)
    assert (who.state, who.label()) == (Ownership.STRIMZI, "Strimzi")
    assert owner_of(Entity.for_pair("app", "c"), P, 1.0, {}, {}, {}, owned).state is Ownership.UNMANAGED
