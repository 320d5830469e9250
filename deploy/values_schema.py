"""Keep the chart's values.schema.json in step with the KafkaCluster CRD.

``kafka.clusters[].spec`` in the chart's values is a KafkaCluster spec. Its JSON
Schema (``definitions.kafkaClusterSpec`` in helm/kquota/values.schema.json) is
generated from the CRD, itself generated from the pydantic models, so a typo in
a values file fails at ``helm install`` with the CRD's own field names and
descriptions, before any object reaches the API server. CEL rules are left to
the API server, but for the one a values file most often gets wrong: each SASL
mechanism needs its own section of ``security.sasl`` and no other's
(``kquota.api.security.MECHANISM_SECTIONS``), written as JSON Schema if/then, so
``mechanism: OAUTHBEARER`` without ``oauth`` fails at ``helm install``.

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

REPO = Path(__file__).resolve().parents[1]
CRD = Path("helm/kquota/crds/kafkaclusters.kquota.io.yaml")
SCHEMA = Path("helm/kquota/values.schema.json")
DEFINITION = "kafkaClusterSpec"
_DROP = {"nullable", "format"}


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


def mechanism_rules() -> list[dict[str, Any]]:
    """JSON Schema for the CEL rules that tie each SASL mechanism to its section of ``sasl``."""
    from kquota.api.security import MECHANISM_SECTIONS

    rules: list[dict[str, Any]] = []
    for section, mechanisms in MECHANISM_SECTIONS.items():
        rules.append(
            {
                "if": {"properties": {"mechanism": {"enum": list(mechanisms)}}, "required": ["mechanism"]},
                "then": {"required": [section]},
                "else": {"not": {"required": [section]}},
            }
        )
    return rules


def kafka_cluster_spec(root: Path) -> dict[str, Any]:
    crd = yaml.safe_load((root / CRD).read_text())
    version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    spec = json_schema(version["schema"]["openAPIV3Schema"]["properties"]["spec"])
    spec["properties"]["security"]["properties"]["sasl"]["allOf"] = mechanism_rules()
    return spec


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
