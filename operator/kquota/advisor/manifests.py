"""The advisor's recommendations as ClientQuota and TopicQuota manifests for a GitOps pull request.

Every manifest is checked with :func:`kquota.api.parse_manifest` before it is
written, so the directory never holds a resource the API server would reject.

Manifest names are DNS-1123 names derived from the principal: ``user-alice``,
``client-billing``, ``user-alice-client-billing``, ``default-user``. A principal
that is not already a valid name (``CN=app,OU=x``, ``Ålice``, upper case) gets a
readable slug plus the first 8 hex digits of its SHA-256, so two principals
never share a name; the real principal is in ``spec.entity`` and in the
``kquota.io/user`` / ``kquota.io/client-id`` annotations.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import yaml

from kquota.advisor.units import UNITS, human_bytes, human_value
from kquota.api.manifest import parse_manifest
from kquota.api.resource import API_VERSION

GENERATED_BY: Final = "kquota.io/generated-by"
ANNOTATION_USER: Final = "kquota.io/user"
ANNOTATION_CLIENT: Final = "kquota.io/client-id"
ANNOTATION_REASON: Final = "kquota.io/advisor-reason"
ANNOTATION_ALLOWANCES: Final = "kquota.io/advisor-broker-allowances"

_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SLUG_MAX: Final = 30
QUOTA_FIELDS: Final = {"produce": "producerByteRate", "fetch": "consumerByteRate", "request": "requestPercentage"}


# --- names and quantities -------------------------------------------------------------


def quantity(n: int) -> int | str:
    """A byte rate as a binary quantity when that is exact and short (``5Mi``, ``1.25Gi``), else the integer."""
    if n <= 0:
        raise ValueError(f"a byte rate must be positive, got {n}")
    for suffix, size in UNITS:
        if n >= size:
            value = Decimal(n) / Decimal(size)
            # At most two decimals keeps it readable; the parser turns it back into exactly n bytes.
            if value == value.quantize(Decimal("0.01")):
                text = format(value.normalize(), "f")
                return f"{text}{suffix}"
    return n


def slug(name: str) -> str:
    """A DNS-1123 label part for ``name``: itself when already valid and short, else a slug plus a hash."""
    if _DNS_LABEL.match(name) and len(name) <= _SLUG_MAX:
        return name
    readable = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:_SLUG_MAX].strip("-")
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{readable}-{digest}" if readable else f"x-{digest}"


def client_quota_name(kind: str, user: str | None, client_id: str | None, is_default: bool) -> str:
    if is_default:
        return {"user": "default-user", "client-id": "default-client-id"}.get(kind, "default-user-client-id")
    if kind == "user":
        return f"user-{slug(user or '')}"
    if kind == "client-id":
        return f"client-{slug(client_id or '')}"
    return f"user-{slug(user or '')}-client-{slug(client_id or '')}"


def _unique_names(names: list[str], keys: list[str]) -> list[str]:
    """Append a hash of the full key to every name that two different keys share."""
    owners: dict[str, set[str]] = {}
    for name, key in zip(names, keys, strict=True):
        owners.setdefault(name, set()).add(key)
    out = []
    for name, key in zip(names, keys, strict=True):
        unique = name if len(owners[name]) == 1 else f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"
        out.append(unique)
    return out


# --- manifests ------------------------------------------------------------------------


def _metadata(name: str, namespace: str | None, annotations: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = {GENERATED_BY: "kquota-advisor"}
    meta["annotations"] = annotations
    return meta


def _quota_value(resource: str, quota: float) -> int | str | float:
    if resource == "request":
        return float(quota)
    return quantity(round(quota))


def _reason_text(row: Mapping[str, Any], headroom: float) -> str:
    resource, reason = row["resource"], row["reason"]
    pct = f"{headroom * 100:g}%"
    if reason == "default":
        text = (
            f"{resource}: default for {row['population']} {row['kind']} entities: p99 "
            f"{human_value(resource, row['basis'])} (the chosen percentile of their p99s) + {pct} headroom"
        )
    elif reason == "outlier":
        text = f"{resource}: outlier, p99 {human_value(resource, row['basis'])} + {pct} headroom"
    elif reason == "no-default":
        text = (
            f"{resource}: p99 {human_value(resource, row['basis'])} + {pct} headroom (no default: the others used none)"
        )
    else:
        text = f"{resource}: p99 {human_value(resource, row['basis'])} + {pct} headroom is above the default"
    if row.get("demand_capped"):
        share = row.get("throttled_share") or 0.0
        text += f" (throttled in {share:.0%} of samples: real demand is higher than measured)"
    return text


def client_quota_manifests(
    recommendations: Sequence[Mapping[str, Any]],
    namespace: str | None = None,
    cluster_ref: str | None = None,
    headroom: float = 0.2,
) -> list[dict[str, Any]]:
    """One ClientQuota per entity (defaults included), with every recommended key of that entity."""
    grouped: dict[tuple[str, str | None, str | None, bool], list[Mapping[str, Any]]] = {}
    for row in recommendations:
        key = (row["kind"], row["user"], row["client_id"], bool(row["is_default"]))
        grouped.setdefault(key, []).append(row)
    order = sorted(grouped, key=lambda k: (not k[3], k[0], k[1] or "", k[2] or ""))
    names = _unique_names(
        [client_quota_name(k[0], k[1], k[2], k[3]) for k in order],
        [json.dumps(list(k)) for k in order],
    )
    out = []
    for key, name in zip(order, names, strict=True):
        kind, user, client_id, is_default = key
        rows = sorted(grouped[key], key=lambda r: list(QUOTA_FIELDS).index(r["resource"]))
        entity: dict[str, Any] = {}
        annotations: dict[str, str] = {}
        if kind in ("user", "user+client-id"):
            entity["user"] = {"default": True} if is_default else {"name": user}
            annotations[ANNOTATION_USER] = "<default>" if is_default else str(user)
        if kind in ("client-id", "user+client-id"):
            entity["clientId"] = {"default": True} if is_default else {"name": client_id}
            annotations[ANNOTATION_CLIENT] = "<default>" if is_default else str(client_id)
        annotations[ANNOTATION_REASON] = "; ".join(_reason_text(r, headroom) for r in rows)
        spec: dict[str, Any] = {}
        if cluster_ref:
            spec["clusterRef"] = cluster_ref
        spec["entity"] = entity
        spec["quota"] = {QUOTA_FIELDS[r["resource"]]: _quota_value(r["resource"], r["quota"]) for r in rows}
        manifest = {
            "apiVersion": API_VERSION,
            "kind": "ClientQuota",
            "metadata": _metadata(name, namespace, annotations),
            "spec": spec,
        }
        parse_manifest(manifest)
        out.append(manifest)
    return out


def topic_quota_manifests(
    topics: Sequence[Mapping[str, Any]],
    topic_brokers: Sequence[Mapping[str, Any]] = (),
    namespace: str | None = None,
    cluster_ref: str | None = None,
) -> list[dict[str, Any]]:
    """One TopicQuota (enforcement Monitor) per topic with the suggested budgets; per-broker allowances
    (KIP-1010) go into an annotation because the resource has no field for them. A direction with no
    traffic gets no budget, and a topic with none at all gets no TopicQuota."""
    allowances: dict[str, dict[str, dict[str, Any]]] = {}
    for row in topic_brokers:
        allowances.setdefault(row["topic"], {})[str(row["broker"])] = {
            "produce": row["produce_allowance"],
            "consume": row["consume_allowance"],
            "basis": row["basis"],
        }
    ordered = sorted(topics, key=lambda r: r["topic"])
    names = _unique_names([f"topic-{slug(r['topic'])}" for r in ordered], [r["topic"] for r in ordered])
    out = []
    for row, name in zip(ordered, names, strict=True):
        annotations = {
            ANNOTATION_REASON: (
                f"p99 of the topic's total rate over all brokers: produce {human_bytes(row['in_p99'])}, "
                f"fetch {human_bytes(row['out_p99'])}, plus headroom"
            ),
            ANNOTATION_ALLOWANCES: json.dumps(allowances.get(row["topic"], {}), sort_keys=True),
        }
        spec: dict[str, Any] = {}
        if cluster_ref:
            spec["clusterRef"] = cluster_ref
        spec["topic"] = {"name": row["topic"]}
        # A direction without traffic gets no budget: the data says nothing about what it needs.
        budget = {}
        if row["in_p99"]:
            budget["producerByteRate"] = quantity(int(row["produce_budget"]))
        if row["out_p99"]:
            budget["consumerByteRate"] = quantity(int(row["consume_budget"]))
        if not budget:
            continue
        spec["budget"] = budget
        spec["enforcement"] = "Monitor"
        manifest = {
            "apiVersion": API_VERSION,
            "kind": "TopicQuota",
            "metadata": _metadata(name, namespace, annotations),
            "spec": spec,
        }
        parse_manifest(manifest)
        out.append(manifest)
    return out


def write_manifests(
    manifests: Iterable[Mapping[str, Any]], directory: Path, namespace: str | None, header: str
) -> list[Path]:
    """One YAML file per resource plus a kustomization.yaml listing them (``kubectl apply -k DIR``)."""
    directory.mkdir(parents=True, exist_ok=True)
    for old in directory.glob("*.yaml"):
        # A rerun replaces the previous recommendation instead of leaving stale resources behind.
        old.unlink()
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    files = []
    for manifest in manifests:
        kind = {"ClientQuota": "clientquota", "TopicQuota": "topicquota"}[manifest["kind"]]
        path = directory / f"{kind}-{manifest['metadata']['name']}.yaml"
        path.write_text(comment + yaml.safe_dump(dict(manifest), sort_keys=False, allow_unicode=True))
        files.append(path)
    kustomization: dict[str, Any] = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    if namespace:
        kustomization["namespace"] = namespace
    kustomization["resources"] = [p.name for p in files]
    (directory / "kustomization.yaml").write_text(comment + yaml.safe_dump(kustomization, sort_keys=False))
    return files
