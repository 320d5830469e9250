"""Keep the chart's values.schema.json in step with the KafkaCluster CRD.

``kafka.clusters[].spec`` in the chart's values is a KafkaCluster spec. Its JSON
Schema (``definitions.kafkaClusterSpec`` in helm/kquota/values.schema.json) is
generated from the CRD, itself generated from the pydantic models, so a typo in
a values file fails at ``helm install`` with the CRD's own field names and
descriptions, before any object reaches the API server. CEL rules are left to
the API server, except those JSON Schema can state (:data:`TWINS`: which
security protocol needs or allows ``sasl`` and ``tls``, which SASL mechanism
needs its own section of ``sasl`` and no other's), so that ``helm
template`` refuses a cluster the API server would refuse; each twin is tied to
its CEL rule by the rule's message, and ``--check`` fails when the CRD no
longer has that rule.

Usage: ``python deploy/values_schema.py`` rewrites the definition;
``--check`` writes nothing and exits 1 when it is stale (tests/e2e/test_helm.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from kquota.api.security import (
    CREDENTIALS_REQUIRED,
    CREDENTIALS_UNUSED,
    KERBEROS_REQUIRED,
    KERBEROS_UNUSED,
    MSK_NEEDS_TLS,
    MSK_REQUIRED,
    MSK_ROLE_OR_PROFILE,
    MSK_SESSION_NAME_UNUSED,
    MSK_UNUSED,
    OAUTH_REQUIRED,
    OAUTH_UNUSED,
    PASSWORD_MECHANISMS,
    SASL_REQUIRED,
    SASL_UNUSED,
    TLS_UNUSED,
)

REPO = Path(__file__).resolve().parents[1]
CRD = Path("helm/kquota/crds/kafkaclusters.kquota.io.yaml")
SCHEMA = Path("helm/kquota/values.schema.json")
DEFINITION = "kafkaClusterSpec"
_DROP = {"nullable", "format"}


def _protocol_in(*protocols: str) -> dict[str, Any]:
    """``protocol`` is one of ``protocols``; absent, it is the CRD's default PLAINTEXT."""
    if "PLAINTEXT" in protocols:
        return {"not": {"required": ["protocol"], "properties": {"protocol": {"not": {"enum": list(protocols)}}}}}
    return {"required": ["protocol"], "properties": {"protocol": {"enum": list(protocols)}}}


def _mechanism_in(*mechanisms: str) -> dict[str, Any]:
    return {"required": ["mechanism"], "properties": {"mechanism": {"enum": list(mechanisms)}}}


def _section(section: str, *mechanisms: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A mechanism needs its section of ``sasl``; the section needs its mechanism."""
    return (
        {"if": _mechanism_in(*mechanisms), "then": {"required": [section]}},
        {"if": {"required": [section]}, "then": _mechanism_in(*mechanisms)},
    )


_CREDENTIALS = _section("credentialsSecretRef", *PASSWORD_MECHANISMS)
_OAUTH = _section("oauth", "OAUTHBEARER")
_KERBEROS = _section("kerberos", "GSSAPI")
_MSK = _section("awsMskIam", "AWS_MSK_IAM")

#: JSON Schema twins of CEL rules, by path in the KafkaCluster spec and the CEL rule's message.
TWINS: dict[tuple[str, ...], dict[str, dict[str, Any]]] = {
    ("security",): {
        SASL_REQUIRED: {"if": _protocol_in("SASL_PLAINTEXT", "SASL_SSL"), "then": {"required": ["sasl"]}},
        SASL_UNUSED: {"if": {"required": ["sasl"]}, "then": _protocol_in("SASL_PLAINTEXT", "SASL_SSL")},
        TLS_UNUSED: {"if": {"required": ["tls"]}, "then": _protocol_in("SSL", "SASL_SSL")},
        MSK_NEEDS_TLS: {
            "if": {"required": ["sasl"], "properties": {"sasl": _mechanism_in("AWS_MSK_IAM")}},
            "then": _protocol_in("SASL_SSL"),
        },
    },
    ("security", "sasl"): {
        CREDENTIALS_REQUIRED: _CREDENTIALS[0],
        CREDENTIALS_UNUSED: _CREDENTIALS[1],
        OAUTH_REQUIRED: _OAUTH[0],
        OAUTH_UNUSED: _OAUTH[1],
        KERBEROS_REQUIRED: _KERBEROS[0],
        KERBEROS_UNUSED: _KERBEROS[1],
        MSK_REQUIRED: _MSK[0],
        MSK_UNUSED: _MSK[1],
    },
    ("security", "sasl", "awsMskIam"): {
        MSK_ROLE_OR_PROFILE: {"not": {"required": ["roleArn", "profile"]}},
        MSK_SESSION_NAME_UNUSED: {"if": {"required": ["roleSessionName"]}, "then": {"required": ["roleArn"]}},
    },
}


class StaleTwin(ValueError):
    """A twin whose CEL rule is no longer in the CRD."""


def json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """An OpenAPI v3.0 structural-schema node as JSON Schema draft-07."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key in _DROP:
            continue
        if key == "properties":
            out[key] = {name: json_schema(sub) for name, sub in value.items()}
        elif key == "items" or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = json_schema(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [json_schema(sub) for sub in value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(value, bool):
            # OpenAPI 3.0: a flag on minimum/maximum; draft-07: the bound itself.
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            if value:
                out[key] = node[bound]
        else:
            out[key] = value
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        bound = "minimum" if key == "exclusiveMinimum" else "maximum"
        if node.get(key) is True:
            out.pop(bound, None)
    if node.get("x-kubernetes-int-or-string") and "anyOf" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    # Unknown fields: the API server would prune them silently; a values file
    # with one is a typo, so reject it here.
    if "properties" in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        out.setdefault("additionalProperties", False)
    return out


def with_twins(crd_spec: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` (the JSON Schema) with each twin added, as ``allOf``, where its CEL rule is in ``crd_spec``."""
    for path, twins in TWINS.items():
        crd_node, node = crd_spec, spec
        for name in path:
            crd_node, node = crd_node["properties"][name], node["properties"][name]
        messages = {v["message"] for v in crd_node.get("x-kubernetes-validations", [])}
        for message, clause in twins.items():
            if message not in messages:
                raise StaleTwin(f"spec.{'.'.join(path)}: the CRD has no CEL rule {message!r} any more")
            node.setdefault("allOf", []).append(clause)
    return spec


def kafka_cluster_spec(root: Path) -> dict[str, Any]:
    crd = yaml.safe_load((root / CRD).read_text())
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    crd_spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return with_twins(crd_spec, json_schema(crd_spec))


def rendered(root: Path) -> str:
    schema = json.loads((root / SCHEMA).read_text())
    schema["definitions"][DEFINITION] = kafka_cluster_spec(root)
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when values.schema.json is stale")
    parser.add_argument("--root", type=Path, default=REPO, help="repository root")
    args = parser.parse_args(argv)
    text = rendered(args.root)
    path = args.root / SCHEMA
    if path.read_text() == text:
        return 0
    if args.check:
        print(f"{SCHEMA} is stale: run `python deploy/values_schema.py`", file=sys.stderr)
        return 1
    path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
