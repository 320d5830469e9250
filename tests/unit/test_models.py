"""The API models: what they accept, how they convert to Kafka terms, and the CRDs they generate."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kquota.api import (
    ClientQuota,
    ClientQuotaStatus,
    ControllerMutationQuota,
    KafkaCluster,
    ManifestError,
    Resource,
    TopicQuota,
    parse_manifest,
    validate_update,
)
from kquota.api.status import Condition
from kquota.crdgen import crd, model_schema
from kquota.domain.desired import desired_entries, entity_of, topic_client_entries
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.topics import TopicLayout
from tests.support.paths import REPO

EXAMPLES = sorted((REPO / "examples").glob("*.yaml"))


def cq(entity: dict[str, Any], quota: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ClientQuota",
        "metadata": {"name": "q", "namespace": "team-a"},
        "spec": {"entity": entity, "quota": quota, **spec},
    }


def tq(spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "kquota.io/v1alpha1", "kind": "TopicQuota", "metadata": {"name": "t"}, "spec": spec}


def parse_cq(doc: dict[str, Any]) -> ClientQuota:
    model = parse_manifest(doc)
    assert isinstance(model, ClientQuota)
    return model


# --- examples -------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"example {p.name} is valid offline")
def test_examples_parse(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    if doc["apiVersion"].startswith("kquota.io/"):
        assert parse_manifest(doc).metadata.name


def test_examples_cover_every_kind_and_entity_shape() -> None:
    docs = [yaml.safe_load(p.read_text()) for p in EXAMPLES]
    kinds = {d["kind"] for d in docs}
    assert kinds == {"Namespace", "KafkaCluster", "ClientQuota", "TopicQuota", "ControllerMutationQuota"}
    paths = {entity_of(parse_cq(d).spec.entity).path() for d in docs if d["kind"] == "ClientQuota"}
    assert paths == {
        "users/alice",
        "clients/reporting-batch",
        "users/alice/clients/alice-ingest",
        "users/<default>",
        "clients/<default>",
        "ips/127.0.0.1",
    }
    enforcements = {d["spec"].get("enforcement") for d in docs if d["kind"] == "TopicQuota"}
    assert enforcements == {"Monitor", "ClientQuotas"}
    namespaced = [d for d in docs if d["kind"] not in ("Namespace", "KafkaCluster")]
    assert {d["metadata"]["namespace"] for d in namespaced} == {"team-a"}


# --- accepted edge cases ----------------------------------------------------------

ACCEPTED = [
    pytest.param(
        cq({"user": {"name": "CN=app,OU=payments,O=Example"}}, {"producerByteRate": "1Mi"}), id="a TLS principal"
    ),
    pytest.param(cq({"user": {"name": "Zoë Ålesund 用户"}}, {"producerByteRate": 1}), id="a unicode name with spaces"),
    pytest.param(cq({"user": {"name": "<default>"}}, {"producerByteRate": 1}), id="a user literally named <default>"),
    pytest.param(
        cq({"user": {"default": True}, "clientId": {"default": True}}, {"requestPercentage": 150}),
        id="both defaults and a request percentage above 100",
    ),
    pytest.param(
        cq({"ip": {"name": "2001:db8::10"}}, {"connectionCreationRate": 2147483647}),
        id="an IPv6 address at the INT limit",
    ),
    pytest.param(cq({"ip": {"default": True}}, {"connectionCreationRate": 1}), id="the default ip"),
    pytest.param(cq({"clientId": {"name": "x"}}, {"requestPercentage": 0.01}), id="a tiny request percentage"),
    pytest.param(cq({"user": {"name": "a"}}, {"producerByteRate": "9007199254740991"}), id="2^53-1 bytes per second"),
    pytest.param(
        tq({"topic": {"default": True}, "budget": {"producerByteRate": "1Gi"}}),
        id="the default topic budget in Monitor mode",
    ),
    pytest.param(
        tq(
            {
                "topic": {"name": "orders"},
                "budget": {"consumerByteRate": 10},
                "enforcement": "ClientQuotas",
                "clients": [
                    {"user": {"name": "a"}, "share": 50},
                    {"user": {"name": "a"}, "clientId": {"name": "c"}, "share": 50},
                ],
            }
        ),
        id="shares adding up to exactly 100, a user and that user with a client-id",
    ),
]


@pytest.mark.parametrize("doc", ACCEPTED)
def test_accepted(doc: dict[str, Any]) -> None:
    parse_manifest(doc)


def test_snake_case_field_names_are_unknown_fields_as_at_admission() -> None:
    doc = cq({"user": {"name": "a"}}, {"producerByteRate": 1}, cluster_ref="local")
    with pytest.raises(ManifestError, match=re.escape('unknown field "spec.cluster_ref"')):
        parse_manifest(doc)


def test_strings_are_not_numbers() -> None:
    with pytest.raises(ManifestError, match="must be of type integer"):
        parse_manifest(cq({"ip": {"name": "192.0.2.1"}}, {"connectionCreationRate": "5"}))


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        pytest.param(
            {"apiVersion": "kquota.io/v1"}, 'apiVersion: Unsupported value: "kquota.io/v1"', id="a wrong apiVersion"
        ),
        pytest.param({"kind": "Quota"}, 'kind: Unsupported value: "Quota"', id="an unknown kind"),
        pytest.param({"metadata": {}}, "metadata.name: Required value", id="no name"),
    ],
)
def test_type_and_object_meta_problems(change: dict[str, Any], fragment: str) -> None:
    doc = {**cq({"user": {"name": "a"}}, {"producerByteRate": 1}), **change}
    with pytest.raises(ManifestError, match=fragment) as info:
        parse_manifest(doc)
    assert info.value.problems


def test_every_failure_is_listed_like_the_api_server_lists_them() -> None:
    doc = cq({}, {"producerByteRate": "0.5", "requestPercentage": 0})
    with pytest.raises(ManifestError) as info:
        parse_manifest(doc)
    assert info.value.problems == [
        "spec.entity: Invalid value: entity needs user, clientId or ip",
        'spec.quota.producerByteRate: Invalid value: "0.5": must be a whole number of bytes per second: '
        "Kafka rejects fractional byte rates (e.g. 0.5 or 1500m)",
        "spec.quota.requestPercentage: Invalid value: 0: spec.quota.requestPercentage in body should be greater than 0",
    ]
    assert str(info.value).startswith('ClientQuota "q" is invalid: [spec.entity: ')


# --- conversions to Kafka terms ------------------------------------------------------

ENTITIES = [
    pytest.param({"user": {"name": "alice"}}, Entity.for_user("alice"), id="a named user"),
    pytest.param({"user": {"default": True}}, Entity.for_user(None), id="the default user is None, not a string"),
    pytest.param(
        {"user": {"name": "<default>"}}, Entity.for_user("<default>"), id="a user named <default> stays a name"
    ),
    pytest.param({"clientId": {"name": "app"}}, Entity.for_client("app"), id="a named client-id"),
    pytest.param(
        {"user": {"name": "a"}, "clientId": {"default": True}},
        Entity.for_pair("a", None),
        id="a user's default client-id",
    ),
    pytest.param({"ip": {"name": "192.0.2.1"}}, Entity.for_ip("192.0.2.1"), id="an ip"),
    pytest.param({"ip": {"default": True}}, Entity.for_ip(None), id="the default ip"),
]


@pytest.mark.parametrize(("entity", "expected"), ENTITIES)
def test_entity_of(entity: dict[str, Any], expected: Entity) -> None:
    quota = {"connectionCreationRate": 1} if "ip" in entity else {"producerByteRate": 1}
    assert entity_of(parse_cq(cq(entity, quota)).spec.entity) == expected


def test_quota_values_are_bytes_as_floats() -> None:
    model = parse_cq(
        cq({"user": {"name": "a"}}, {"producerByteRate": "10Mi", "consumerByteRate": "1.5M", "requestPercentage": 150})
    )
    assert desired_entries(model) == [
        (
            Entity.for_user("a"),
            {
                QuotaKey.PRODUCER_BYTE_RATE: 10485760.0,
                QuotaKey.CONSUMER_BYTE_RATE: 1500000.0,
                QuotaKey.REQUEST_PERCENTAGE: 150.0,
            },
        )
    ]


def test_controller_mutation_quota_sets_controller_mutation_rate() -> None:
    doc = {
        "apiVersion": "kquota.io/v1alpha1",
        "kind": "ControllerMutationQuota",
        "metadata": {"name": "m"},
        "spec": {"entity": {"clientId": {"name": "terraform"}}, "rate": 2.5, "expectedBurst": 40},
    }
    model = parse_manifest(doc)
    assert isinstance(model, ControllerMutationQuota)
    assert desired_entries(model) == [(Entity.for_client("terraform"), {QuotaKey.CONTROLLER_MUTATION_RATE: 2.5})]


def test_monitor_topic_quota_sets_no_client_quota() -> None:
    model = parse_manifest(
        tq(
            {
                "topic": {"name": "orders"},
                "budget": {"producerByteRate": "1Mi"},
                "clients": [{"user": {"name": "a"}, "share": 50}],
            }
        )
    )
    assert isinstance(model, TopicQuota)
    assert desired_entries(model) == []


def test_client_quotas_topic_quota_splits_the_budget_per_share_and_broker() -> None:
    model = parse_manifest(
        tq(
            {
                "topic": {"name": "payments"},
                "budget": {"producerByteRate": "30Mi", "consumerByteRate": 1000},
                "enforcement": "ClientQuotas",
                "clients": [{"user": {"name": "api"}, "share": 70}, {"clientId": {"name": "audit"}, "share": 1}],
            }
        )
    )
    assert isinstance(model, TopicQuota)
    with pytest.raises(ValueError, match="leader layout"):
        desired_entries(model)
    balanced = TopicLayout(partitions=3, leaders={1: 1, 2: 1, 3: 1})
    entries = topic_client_entries(model, balanced)
    assert entries == [
        (
            Entity.for_user("api"),
            {QuotaKey.PRODUCER_BYTE_RATE: float(30 * 2**20 * 70 // 100 // 3), QuotaKey.CONSUMER_BYTE_RATE: 233.0},
        ),
        (Entity.for_client("audit"), {QuotaKey.PRODUCER_BYTE_RATE: 104857.0, QuotaKey.CONSUMER_BYTE_RATE: 3.0}),
    ]
    assert desired_entries(model, balanced) == entries
    # All leaders on one broker: that broker carries the whole topic, so each client may use its full share there.
    skewed = topic_client_entries(model, TopicLayout(partitions=3, leaders={1: 3}))
    assert skewed[0][1][QuotaKey.PRODUCER_BYTE_RATE] == float(30 * 2**20 * 70 // 100)
    tiny = topic_client_entries(model, TopicLayout(partitions=1000, leaders={b: 1 for b in range(1000)}))
    assert tiny[1][1][QuotaKey.CONSUMER_BYTE_RATE] == 1.0, "never 0: Kafka rejects a zero quota"


# --- updates, conditions, status -------------------------------------------------------


def test_entity_is_immutable_offline_too() -> None:
    old = parse_manifest(cq({"user": {"name": "alice"}}, {"producerByteRate": "1Mi"}))
    quota_change = parse_manifest(cq({"user": {"name": "alice"}}, {"producerByteRate": "2Mi"}))
    validate_update(old, quota_change)
    moved = parse_manifest(cq({"user": {"name": "bob"}}, {"producerByteRate": "1Mi"}))
    with pytest.raises(ManifestError, match=re.escape("spec.entity is immutable: delete this ClientQuota")):
        validate_update(old, moved)


def test_status_round_trips_in_api_server_json() -> None:
    raw = {
        "observedGeneration": 3,
        "entity": "users/alice",
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Applied",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 3,
            }
        ],
        "applied": {
            "cluster": "local",
            "values": {"producer_byte_rate": 10485760.0},
            "lastAppliedTime": "2026-01-01T00:00:01Z",
        },
        "observed": {"throttleTimeMs": 12.5},
        "fieldFromANewerOperator": True,
    }
    status = ClientQuotaStatus.model_validate(raw)
    assert isinstance(status.conditions[0], Condition)
    out = status.to_manifest()
    assert out["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert out["applied"]["lastAppliedTime"] == "2026-01-01T00:00:01Z"
    assert {k: v for k, v in raw.items() if k != "fieldFromANewerOperator"} == out


def test_kafka_cluster_defaults_match_the_crd_defaults() -> None:
    model = parse_manifest(
        {
            "apiVersion": "kquota.io/v1alpha1",
            "kind": "KafkaCluster",
            "metadata": {"name": "k"},
            "spec": {"bootstrapServers": "a:9092,[::1]:9093"},
        }
    )
    assert isinstance(model, KafkaCluster)
    spec = model.spec
    assert (spec.security.protocol, spec.metrics.window, spec.metrics.near_limit_percent, spec.unmanaged.policy) == (
        "PLAINTEXT",
        "60s",
        80,
        "Ignore",
    )
    assert spec.tenancy is None, "no tenancy: single-team mode"
    schema = model_schema(type(spec))["properties"]
    assert (
        schema["security"]["default"] == {} and schema["security"]["properties"]["protocol"]["default"] == "PLAINTEXT"
    )
    assert schema["metrics"]["properties"]["window"]["default"] == "60s"
    assert schema["unmanaged"]["properties"]["policy"]["default"] == "Ignore"


# --- generated CRDs -----------------------------------------------------------------------

RESOURCES: list[type[Resource]] = [KafkaCluster, ClientQuota, TopicQuota, ControllerMutationQuota]


def _walk(node: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, sub in node.get("properties", {}).items():
        out += _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        out += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += _walk(node["additionalProperties"], f"{path}{{}}")
    return out


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: f"{r.crd.kind}'s schema is structural and documented")
def test_schema_is_structural_and_documented(resource: type[Resource]) -> None:
    schema = crd(resource)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    text = yaml.safe_dump(schema)
    assert "$ref" not in text and "allOf" not in text and "oneOf" not in text and "const" not in text
    assert "title" not in {k for _, node in _walk(schema, "") for k in node}
    for path, node in _walk(schema, ""):
        if node.get("x-kubernetes-int-or-string"):
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        else:
            assert "anyOf" not in node, path
            assert node.get("type") in {"object", "string", "integer", "number", "boolean", "array"}, path
        assert node.get("additionalProperties") is not False, path
        if path.startswith((".spec", ".status")) and path.count(".") >= 2 and not path.endswith(("[]", "{}")):
            assert node.get("description"), f"{path} has no description for kubectl explain"
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node, path


def test_crd_names_columns_and_status_subresource() -> None:
    got = {r.crd.kind: crd(r) for r in RESOURCES}
    cq_crd = got["ClientQuota"]["spec"]
    assert cq_crd["scope"] == "Namespaced" and got["KafkaCluster"]["spec"]["scope"] == "Cluster"
    assert cq_crd["names"]["shortNames"] == ["cq"] and cq_crd["names"]["categories"] == ["kquota"]
    assert got["TopicQuota"]["spec"]["names"]["shortNames"] == ["tq"]
    assert got["ControllerMutationQuota"]["spec"]["names"]["shortNames"] == ["cmq"]
    version = cq_crd["versions"][0]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")]
    assert columns == ["Entity", "Producer", "Consumer", "Request%", "Ready", "Age"]
    tq_columns = [
        c["name"] for c in got["TopicQuota"]["spec"]["versions"][0]["additionalPrinterColumns"] if not c.get("priority")
    ]
    assert tq_columns == ["Topic", "Producer", "Consumer", "Enforcement", "Ready", "Age"]
    conditions = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map" and conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert conditions["items"]["required"] == ["type", "status", "reason", "lastTransitionTime"]


def test_entity_has_the_immutability_transition_rule() -> None:
    for resource, kind in ((ClientQuota, "ClientQuota"), (ControllerMutationQuota, "ControllerMutationQuota")):
        spec = crd(resource)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        rules = spec["properties"]["entity"]["x-kubernetes-validations"]
        assert {
            "rule": "self == oldSelf",
            "message": f"spec.entity is immutable: delete this {kind} and create a new one to move the quota",
        } in rules
