"""What Strimzi owns, read from Kafka and KafkaUser objects shaped as Strimzi writes them."""

from __future__ import annotations

from typing import Any

import pytest

from kquota.domain.entities import Entity
from kquota.domain.plan import Protection, UnmanagedPolicy, plan
from kquota.domain.status import STALLED, Reason
from kquota.domain.strimzi import (
    IGNORED_USERS_ENV,
    StrimziError,
    UserOperatorView,
    decode_username,
    java_pattern,
    listener,
    ownership,
    parse_version,
    rollout_problem,
    user_principal,
)
from kquota.domain.tenancy import refusal
from tests.support.quotas import C, P


def kafka(
    user_operator: bool = True,
    pattern: str | None = None,
    version: str | None = "0.48.0",
    uo: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    eo: dict[str, Any] = {"topicOperator": {}}
    if user_operator:
        eo["userOperator"] = uo or {}
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
    assert (tls.bootstrap_servers, tls.tls, tls.authentication, tls.certificates) == (
        "my-cluster-kafka-bootstrap.kafka.svc:9093",
        True,
        "tls",
        ("x",),
    )
    plain = listener(kafka(), "plain")
    assert (plain.tls, plain.authentication) == (False, None)


@pytest.mark.parametrize(
    ("authentication", "oauthbearer"),
    [
        pytest.param({"type": "oauth", "validIssuerUri": "https://idp/realms/k"}, True, id="0.x type oauth"),
        pytest.param(
            {"type": "custom", "sasl": True, "listenerConfig": {"sasl.enabled.mechanisms": "oauthbearer,PLAIN"}},
            True,
            id="1.x type custom with OAUTHBEARER",
        ),
        pytest.param(
            {"type": "custom", "sasl": True, "listenerConfig": {"sasl.enabled.mechanisms": "SCRAM-SHA-512"}},
            False,
            id="type custom with another mechanism",
        ),
        pytest.param(
            {"type": "custom", "sasl": False, "listenerConfig": {"sasl.enabled.mechanisms": "OAUTHBEARER"}},
            False,
            id="type custom without SASL (mutual TLS by a custom principal builder)",
        ),
        pytest.param({"type": "scram-sha-512"}, False, id="scram"),
    ],
)
def test_a_listener_says_whether_clients_bring_oauthbearer_tokens(
    authentication: dict[str, Any], oauthbearer: bool
) -> None:
    body = kafka()
    body["spec"]["kafka"]["listeners"][0]["authentication"] = authentication
    assert listener(body, "plain").oauthbearer is oauthbearer


def test_a_missing_listener_or_address_names_what_is_missing() -> None:
    with pytest.raises(StrimziError, match=r"no listener 'external'.*plain, tls, scram"):
        listener(kafka(), "external")
    with pytest.raises(StrimziError, match="no address for listener 'scram'"):
        listener(kafka(), "scram")


def test_principals_as_the_brokers_see_them() -> None:
    assert user_principal(kafka_user("app")) == "app"
    assert user_principal(kafka_user("app", "tls")) == "CN=app"
    assert user_principal(kafka_user("app", "tls", username="CN=app")) == "CN=app"


def test_the_user_operator_owns_both_forms_of_every_kafkauser_and_every_other_user_unless_ignored() -> None:
    owned = ownership(kafka(), [kafka_user("app"), kafka_user("svc", "tls")])
    # Both name forms of every KafkaUser, whatever its authentication: one is set, the other cleared.
    for user in ("app", "CN=app", "svc", "CN=svc"):
        assert "KafkaUser kafka/" in (owned.owner(Entity.for_user(user)) or ""), user
    other = owned.owner(Entity.for_user("batch"))
    assert other is not None and IGNORED_USERS_ENV in other and "userOperatorContainer.env" in other
    # A KafkaUser's pair, a client-id and an IP: the User Operator never writes them, nor deletes anything for them.
    assert owned.owner(Entity.for_pair("app", "c")) is None
    assert owned.owner(Entity.for_pair("CN=svc", "c")) is None
    assert owned.owner(Entity.for_client("c")) is None
    assert owned.owner(Entity.for_ip("10.0.0.1")) is None
    assert owned.owner(Entity.for_pair(None, "c")) is None, "the User Operator skips <default> users"


def test_a_pair_of_a_user_without_kafkauser_or_pattern_match_is_refused_naming_what_strimzi_would_delete() -> None:
    owned = ownership(kafka(pattern="(CN=)?kq-.*", uo={"secretPrefix": "kafka-"}), [kafka_user("app")])
    why = owned.owner(Entity.for_pair("dave", "etl"))
    assert why is not None
    for part in (
        "'dave'",
        "deletion path",
        "Secret kafka-dave in namespace kafka",
        "SCRAM credential of dave",
        "ACLs of dave and CN=dave",
        "users/dave and users/CN=dave",
        "create a KafkaUser dave",
    ):
        assert part in why, (part, why)
    # A TLS principal with more than a CN decodes to its CN (app has a KafkaUser): nothing is deleted for it.
    assert owned.owner(Entity.for_user("CN=app,OU=platform")) is None
    assert owned.owner(Entity.for_pair("CN=app,OU=platform", "c")) is None
    # Not app: the User Operator would delete user "x" (the CN of this name).
    assert "deletion path" in (owned.owner(Entity.for_user("CN=x,OU=platform")) or "")
    # Matched by the pattern as written: left alone by the User Operator.
    assert owned.owner(Entity.for_pair("kq-etl", "c")) is None
    assert owned.owner(Entity.for_pair("CN=kq-etl", "c")) is None


def test_the_ignore_pattern_hands_users_to_kquota_only_when_it_matches_both_forms() -> None:
    owned = ownership(kafka(pattern="(CN=)?kq-.*"), [kafka_user("kq-app")])
    assert owned.owner(Entity.for_user("kq-batch")) is None
    assert owned.owner(Entity.for_user("CN=kq-batch")) is None
    assert owned.owner(Entity.for_user("xkq-batch")) is not None, "Java's matches(): the whole name"
    assert owned.owner(Entity.for_user("kq-app")) is not None, "a KafkaUser is reconciled whatever the pattern"
    assert owned.owner(Entity.for_user("CN=kq-app")) is not None, "both forms of a KafkaUser"
    # One form only: an entity on the other form would make the User Operator delete the user, this quota included.
    half = ownership(kafka(pattern="kq-.*"), [])
    why = half.owner(Entity.for_user("kq-batch"))
    assert why is not None and "matches 'kq-batch' but not 'CN=kq-batch'" in why and "'(CN=)?kq-batch'" in why
    assert "clears the quotas" in (half.owner(Entity.for_user("CN=kq-batch")) or "")


@pytest.mark.parametrize(
    ("name", "decoded"),
    [
        ("app", "app"),
        ("CN=app", "app"),
        ("CN=app,OU=platform,O=Acme", "app"),
        ("OU=x,CN=a", "a"),
        ("CN=a\\,b", "a,b"),
        ('CN="a,b"', "a,b"),
        ("cn=app", "cn=app"),  # the User Operator looks for "CN=" as written
        ("CN=", ""),
        ("CN=a,garbage", None),
    ],
)
def test_usernames_decode_as_the_user_operator_decodes_them(name: str, decoded: str | None) -> None:
    assert decode_username(name) == decoded


def test_java_patterns_run_as_python_or_say_why_not() -> None:
    named = java_pattern("(?<team>kq)-.*")
    assert not isinstance(named, str) and named.fullmatch("kq-x")
    assert isinstance(java_pattern("\\p{Alpha}+"), str)
    # An unevaluable pattern counts as none (the User Operator's side), and the message says why.
    owned = ownership(kafka(pattern="\\p{Alpha}+"), [])
    assert owned.ignored_pattern is None
    assert owned.view is not None and "cannot evaluate" in (owned.view.pattern_note or "")
    assert "cannot evaluate" in (owned.owner(Entity.for_user("abc")) or "")


def test_the_user_operator_namespace_and_prefix_come_from_the_kafka_without_a_running_view() -> None:
    owned = ownership(kafka(uo={"watchedNamespace": "users", "secretPrefix": "p-"}), [])
    assert owned.view == UserOperatorView("users", "p-", None, None)
    assert "in namespace users" in owned.summary()


@pytest.mark.parametrize(
    ("deployment", "problem"),
    [
        (
            {
                "metadata": {"generation": 2},
                "spec": {"replicas": 1},
                "status": {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1},
            },
            None,
        ),
        (
            {
                "metadata": {"generation": 3},
                "spec": {"replicas": 1},
                "status": {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 1},
            },
            "not seen its latest template",
        ),
        (
            {
                "metadata": {"generation": 3},
                "spec": {"replicas": 1},
                "status": {"observedGeneration": 3, "replicas": 2, "updatedReplicas": 1, "availableReplicas": 1},
            },
            "1 old pod(s) still run",
        ),
        (
            {
                "metadata": {"generation": 3},
                "spec": {"replicas": 1},
                "status": {"observedGeneration": 3, "replicas": 1, "updatedReplicas": 0, "availableReplicas": 1},
            },
            "0 of 1 pods run its latest template",
        ),
        (
            {
                "metadata": {"generation": 3},
                "spec": {"replicas": 1},
                "status": {"observedGeneration": 3, "replicas": 1, "updatedReplicas": 1, "availableReplicas": 0},
            },
            "0 of 1 updated pods are available",
        ),
    ],
)
def test_a_pattern_counts_only_once_the_entity_operator_is_rolled_out(
    deployment: dict[str, Any], problem: str | None
) -> None:
    found = rollout_problem(deployment)
    assert (found is None) if problem is None else (problem in (found or "")), found


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
    owned = ownership(kafka(pattern="(CN=)?kq-.*"), [kafka_user("app")])
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
