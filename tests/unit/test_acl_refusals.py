"""A missing Kafka ACL: the refusal's message, the principal it names, and the status it renders.

The behaviour against a real broker with an authorizer is in
tests/e2e/test_acls.py; these are the pure parts, as tables.
"""

from __future__ import annotations

import pytest

from kquota.domain.status import STALLED, Outcome, Reason, render_cluster_status, render_status
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    KafkaNotAuthorized,
    KafkaUnavailable,
    QuotaRequestError,
)
from kquota.kafka.settings import ConnectionSettings

T0 = "2026-01-01T00:00:00Z"

# (id, operation, resource type, resources, request, must appear in the message, must not appear)
MESSAGES = [
    (
        "a refused AlterClientQuotas names ALTER_CONFIGS on the cluster and where to read more",
        "ALTER_CONFIGS",
        "CLUSTER",
        [],
        "AlterClientQuotas",
        [
            "Kafka principal User:kquota-op may not ALTER_CONFIGS on the cluster",
            "AlterClientQuotas was refused",
            "grant it",
            "docs/install.md#acls",
        ],
        ["includes it"],
    ),
    (
        "a refused DescribeClientQuotas says ALTER_CONFIGS would cover it too",
        "DESCRIBE_CONFIGS",
        "CLUSTER",
        [],
        "DescribeClientQuotas",
        ["may not DESCRIBE_CONFIGS on the cluster", "or ALTER_CONFIGS on the cluster, which includes it"],
        [],
    ),
    (
        "a refused topic is named, quoted",
        "DESCRIBE",
        "TOPIC",
        ["orders"],
        "Metadata",
        ["may not DESCRIBE on topic 'orders' (Metadata was refused): grant it"],
        ["the cluster"],
    ),
    (
        "a long list of refused topics is cut after five",
        "DESCRIBE",
        "TOPIC",
        [f"t{i}" for i in range(8)],
        "Metadata",
        ["topic 't0', 't1', 't2', 't3', 't4' and 3 more"],
        ["'t5'"],
    ),
]


@pytest.mark.parametrize(
    ("operation", "rtype", "resources", "request_", "present", "absent"),
    [m[1:] for m in MESSAGES],
    ids=[m[0] for m in MESSAGES],
)
def test_refusal_message_names_operation_and_resource(
    operation: str, rtype: str, resources: list[str], request_: str, present: list[str], absent: list[str]
) -> None:
    exc = KafkaNotAuthorized("User:kquota-op", operation, rtype, resources, request_)
    for text in present:
        assert text in str(exc)
    for text in absent:
        assert text not in str(exc)


@pytest.mark.parametrize(
    ("rtype", "code", "name"),
    [
        ("CLUSTER", CLUSTER_AUTHORIZATION_FAILED, "CLUSTER_AUTHORIZATION_FAILED"),
        ("TOPIC", TOPIC_AUTHORIZATION_FAILED, "TOPIC_AUTHORIZATION_FAILED"),
    ],
    ids=["a cluster refusal carries Kafka's code 31", "a topic refusal carries Kafka's code 29"],
)
def test_refusal_is_a_request_error_with_kafkas_code_not_unavailability(rtype: str, code: int, name: str) -> None:
    exc = KafkaNotAuthorized("User:x", "DESCRIBE", rtype, ["t"], "Metadata")
    # The CLI already turns a QuotaRequestError into a clear message; the
    # operator must not mistake a refusal for an unreachable broker.
    assert isinstance(exc, QuotaRequestError) and not isinstance(exc, KafkaUnavailable)
    assert (exc.error_code, exc.error_name) == (code, name)


def test_only_narrows_a_refusal_to_one_resource_for_that_resources_status() -> None:
    exc = KafkaNotAuthorized("User:x", "DESCRIBE", "TOPIC", ["a", "b"], "Metadata", leaders={"c": {0: 1}})
    one = exc.only("b")
    assert one.resources == ("b",) and "'b'" in str(one) and "'a'" not in str(one)
    assert exc.leaders == {"c": {0: 1}}, "the allowed topics' layouts stay with the original"


@pytest.mark.parametrize(
    ("settings", "principal"),
    [
        (ConnectionSettings("k:9093", "SASL_SSL", "SCRAM-SHA-512", "kquota", "pw"), "User:kquota"),
        (ConnectionSettings("k:9093", "SASL_PLAINTEXT", "PLAIN", "svc", "pw"), "User:svc"),
        (ConnectionSettings("k:9093", "SSL", ssl_certfile="/c.pem"), "User:<the subject of kquota's TLS certificate>"),
        (ConnectionSettings("k:9092"), "User:ANONYMOUS"),
    ],
    ids=[
        "SASL: the user name is the principal",
        "SASL PLAIN: the same",
        "TLS client certificate: the subject, which kquota cannot know",
        "PLAINTEXT: Kafka's anonymous principal",
    ],
)
def test_principal_named_in_refusals(settings: ConnectionSettings, principal: str) -> None:
    admin = QuotaAdmin(settings)  # connects lazily: no broker needed
    assert admin.principal == principal
    assert "pw" not in admin.principal


def test_not_authorized_is_not_ready_stalled_and_keeps_what_was_applied() -> None:
    message = "Kafka principal User:k may not ALTER_CONFIGS on the cluster (AlterClientQuotas was refused)"
    status = render_status(
        None, 2, Outcome(Reason.NOT_AUTHORIZED, message, {"producer_byte_rate": 1000.0}), "users/a", "c", T0
    )
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["Ready"] == {**conds["Ready"], "status": "False", "reason": "NotAuthorized", "message": message}
    assert conds["Applied"]["status"] == "False", "a refusal never claims everything is applied"
    assert conds["Stalled"]["reason"] == "NotAuthorized" and "Reconciling" not in conds
    assert status["applied"]["values"] == {"producer_byte_rate": 1000.0}
    assert Reason.NOT_AUTHORIZED in STALLED


def test_kafka_cluster_reports_not_authorized_as_not_ready() -> None:
    status = render_cluster_status(None, 1, Reason.NOT_AUTHORIZED, "may not DESCRIBE_CONFIGS", None, T0)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NotAuthorized")
