"""Writing the advisor's results: manifests for a GitOps pull request, JSON / Parquet reports, an HTML report.

Everything here works on plain Python values (rows collected from the small
result DataFrames) except :func:`write_parquet_report`, which writes the result
DataFrames themselves. Every manifest is checked with
:func:`kquota.api.parse_manifest` before it is written, so the directory never
holds a resource the API server would reject.

Manifest names are DNS-1123 names derived from the principal: ``user-alice``,
``client-billing``, ``user-alice-client-billing``, ``default-user``. A principal
that is not already a valid name (``CN=app,OU=x``, ``Ålice``, upper case) gets a
readable slug plus the first 8 hex digits of its SHA-256, so two principals
never share a name; the real principal is in ``spec.entity`` and in the
``kquota.io/user`` / ``kquota.io/client-id`` annotations.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

import numpy as np
import yaml
from matplotlib.figure import Figure
from pyspark.sql import DataFrame

from kquota.api.manifest import parse_manifest
from kquota.api.resource import API_VERSION

GENERATED_BY: Final = "kquota.io/generated-by"
ANNOTATION_USER: Final = "kquota.io/user"
ANNOTATION_CLIENT: Final = "kquota.io/client-id"
ANNOTATION_REASON: Final = "kquota.io/advisor-reason"
ANNOTATION_ALLOWANCES: Final = "kquota.io/advisor-broker-allowances"

_UNITS: Final = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))
_DNS_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SLUG_MAX: Final = 30
QUOTA_FIELDS: Final = {"produce": "producerByteRate", "fetch": "consumerByteRate", "request": "requestPercentage"}
KIND_ENTITY_PREFIX: Final = {"user": "users", "client-id": "clients"}


# --- names and quantities -------------------------------------------------------------


def quantity(n: int) -> int | str:
    """A byte rate as a binary quantity when that is exact and short (``5Mi``, ``1.25Gi``), else the integer."""
    if n <= 0:
        raise ValueError(f"a byte rate must be positive, got {n}")
    for suffix, size in _UNITS:
        if n >= size:
            value = Decimal(n) / Decimal(size)
            # At most two decimals keeps it readable; the parser turns it back into exactly n bytes.
            if value == value.quantize(Decimal("0.01")):
                text = format(value.normalize(), "f")
                return f"{text}{suffix}"
    return n


def human_bytes(x: float | None) -> str:
    """For people: 5.0 MiB/s style, never used in manifests."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    for suffix, size in _UNITS:
        if abs(x) >= size:
            return f"{x / size:.3g} {suffix}B/s"
    return f"{x:.3g} B/s"


def human_value(resource: str, x: float | None) -> str:
    if resource == "request":
        return "-" if x is None else f"{x:.3g}%"
    return human_bytes(x)


def slug(name: str) -> str:
    """A DNS-1123 label part for ``name``: itself when already valid and short, else a slug plus a hash."""
    if _DNS_LABEL.match(name) and len(name) <= _SLUG_MAX:
        return name
    readable = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:_SLUG_MAX].strip("-")
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{readable}-{digest}" if readable else f"x-{digest}"


def entity_display(kind: str, user: str | None, client_id: str | None, is_default: bool) -> str:
    """The entity as kafka-configs shows it: users/alice, clients/<default>, users/alice/clients/app."""
    u = "<default>" if is_default else user
    c = "<default>" if is_default else client_id
    if kind == "user":
        return f"users/{u}"
    if kind == "client-id":
        return f"clients/{c}"
    return f"users/{u}/clients/{c}"


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


# --- reports --------------------------------------------------------------------------


def _json_default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _clean_floats(value: Any) -> Any:
    # JSON has no NaN or Infinity; a report that json.loads in every language is worth a None.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean_floats(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean_floats(v) for v in value]
    return value


def write_json_report(report: Mapping[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_clean_floats(dict(report)), indent=2, default=_json_default, allow_nan=False) + "\n")
    return path


def write_parquet_report(tables: Mapping[str, DataFrame], directory: Path) -> list[Path]:
    """Each result table as a Parquet dataset under ``directory/<table>``."""
    out = []
    for name, frame in tables.items():
        target = directory / name
        frame.coalesce(1).write.mode("overwrite").parquet(str(target))
        out.append(target)
    return out


# --- HTML -----------------------------------------------------------------------------


def _png(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode()


def _plot_usage_vs_quota(report: Mapping[str, Any], resource: str, top_n: int) -> str | None:

    rows = [e for e in report["entities"] if e["resource"] == resource]
    rows = sorted(rows, key=lambda e: -(e["p99"] or 0))[:top_n]
    if not rows:
        return None
    rows.reverse()
    labels = [e["entity"] for e in rows]
    scale, unit = (1.0, "%") if resource == "request" else (2.0**20, "MiB/s")
    fig = Figure(figsize=(9, 0.35 * len(rows) + 1.5))
    ax = fig.subplots()
    y = range(len(rows))
    ax.barh(y, [(e["p99"] or 0) / scale for e in rows], color="#4c78a8", label="p99 usage")
    ax.scatter([(e["max"] or 0) / scale for e in rows], y, color="#f58518", marker="|", s=200, label="max usage")
    ax.scatter(
        [(e["quota"] or 0) / scale for e in rows], y, color="#e45756", marker="D", s=30, label="recommended quota"
    )
    ax.set_yticks(list(y), labels=labels, fontsize=8)
    ax.set_xlabel(f"{resource} ({unit}, per broker)")
    ax.set_title(f"{resource}: usage against the recommended quota, top {len(rows)} by p99")
    ax.legend(loc="lower right", fontsize=8)
    data = _png(fig)
    return data


def _plot_distribution(report: Mapping[str, Any], resource: str) -> str | None:

    values = [e["p99"] for e in report["entities"] if e["resource"] == resource and e["p99"] and e["p99"] > 0]
    if not values:
        return None
    scale, unit = (1.0, "%") if resource == "request" else (2.0**20, "MiB/s")
    data = np.array(values) / scale
    fig = Figure(figsize=(8, 3.5))
    ax = fig.subplots()
    lo, hi = float(data.min()), float(data.max())
    if hi > lo * 1.01:
        ax.hist(data, bins=list(np.geomspace(lo, hi * 1.001, min(40, max(5, len(data))))), color="#4c78a8")
        ax.set_xscale("log")
    else:
        ax.hist(data, bins=5, color="#4c78a8")
    for d in report["recommendations"]:
        if d["resource"] == resource and d["is_default"]:
            ax.axvline(d["quota"] / scale, color="#e45756", linestyle="--", label=f"default ({d['kind']})")
    fences = {e["fence"] for e in report["entities"] if e["resource"] == resource and e.get("fence")}
    for fence in sorted(fences)[:3]:
        ax.axvline(fence / scale, color="#72b7b2", linestyle=":", label="outlier fence")
    ax.set_xlabel(f"per-entity p99 ({unit})")
    ax.set_ylabel("entities")
    ax.set_title(f"{resource}: distribution of per-entity p99 ({len(values)} entities)")
    ax.legend(fontsize=8)
    out = _png(fig)
    return out


def _plot_capacity(report: Mapping[str, Any]) -> str | None:

    rows = [r for r in report["capacity"] if r["resource"] in ("produce", "fetch")]
    if not rows:
        return None
    rows.sort(key=lambda r: (r["resource"], r["broker"]))
    labels = [f"{r['broker']}\n{r['resource']}" for r in rows]
    x = np.arange(len(rows))
    scale = 2.0**20
    fig = Figure(figsize=(max(6, 0.9 * len(rows) + 2), 4))
    ax = fig.subplots()
    ax.bar(x - 0.2, [(r["committed"] or 0) / scale for r in rows], 0.4, label="sum of quotas", color="#e45756")
    ax.bar(x + 0.2, [(r["observed_peak"] or 0) / scale for r in rows], 0.4, label="observed peak", color="#4c78a8")
    caps = [(r["capacity"] or 0) / scale for r in rows]
    if any(caps):
        ax.scatter(x, caps, marker="_", s=900, color="black", label="broker capacity")
    ax.set_xticks(x, labels=labels, fontsize=8)
    ax.set_ylabel("MiB/s")
    ax.set_title("Per-broker capacity: committed quotas and observed peak")
    ax.legend(fontsize=8)
    out = _png(fig)
    return out


def _plot_topics(report: Mapping[str, Any], top_n: int) -> str | None:

    rows = sorted(report.get("topics", []), key=lambda r: -(r["in_p99"] or 0))[:top_n]
    if not rows:
        return None
    scale = 2.0**20
    x = np.arange(len(rows))
    fig = Figure(figsize=(max(6, 0.8 * len(rows) + 2), 4))
    ax = fig.subplots()
    ax.bar(x - 0.2, [(r["in_p99"] or 0) / scale for r in rows], 0.4, label="produce p99", color="#4c78a8")
    ax.bar(x + 0.2, [(r["out_p99"] or 0) / scale for r in rows], 0.4, label="fetch p99", color="#72b7b2")
    ax.scatter(x - 0.2, [r["produce_budget"] / scale for r in rows], marker="D", color="#e45756", label="budget")
    ax.scatter(x + 0.2, [r["consume_budget"] / scale for r in rows], marker="D", color="#e45756")
    ax.set_xticks(x, labels=[r["topic"] for r in rows], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("MiB/s (all brokers)")
    ax.set_title("Topics: total rate p99 and suggested TopicQuota budget")
    ax.legend(fontsize=8)
    out = _png(fig)
    return out


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[tuple[str, str]], limit: int = 200) -> str:
    if not rows:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in columns)
    body = []
    for row in rows[:limit]:
        cells = "".join(f"<td>{html.escape(_cell(row.get(key)))}</td>" for key, _ in columns)
        body.append(f"<tr>{cells}</tr>")
    more = f"<p>{len(rows) - limit} more rows in the JSON / Parquet report.</p>" if len(rows) > limit else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{more}"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


_STYLE: Final = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f2f2f2; }
pre { background: #f7f7f7; padding: 1em; white-space: pre-wrap; }
img { max-width: 100%; }
"""


def render_html(report: Mapping[str, Any], top_n: int = 20) -> str:
    """A self-contained page (plots inlined as base64 PNG) that a person can read without tools."""
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>kquota advisor report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>kquota advisor report</h1>",
        f"<p>Generated {html.escape(str(report['generated_at']))} from {html.escape(str(report['input']))}.</p>",
        "<h2>Summary</h2>",
        f"<pre>{html.escape(report['summary'])}</pre>",
    ]
    recs = [
        dict(
            r,
            entity=r["entity"],
            quota_text=human_value(r["resource"], r["quota"]),
            basis_text=human_value(r["resource"], r["basis"]),
        )
        for r in report["recommendations"]
    ]
    parts += [
        "<h2>Recommended quotas</h2>",
        _table(
            recs,
            [
                ("entity", "entity"),
                ("resource", "resource"),
                ("quota_text", "quota"),
                ("reason", "why"),
                ("basis_text", "basis (before headroom)"),
                ("population", "population"),
                ("throttled_share", "throttled share"),
                ("demand_capped", "demand capped"),
            ],
        ),
    ]
    resources = sorted({e["resource"] for e in report["entities"]}, key=lambda r: list(QUOTA_FIELDS).index(r))
    for resource in resources:
        parts.append(f"<h2>{html.escape(resource.capitalize())}</h2>")
        for image in (_plot_usage_vs_quota(report, resource, top_n), _plot_distribution(report, resource)):
            if image:
                parts.append(f"<img alt='{html.escape(resource)} plot' src='data:image/png;base64,{image}'>")
    capacity_img = _plot_capacity(report)
    parts.append("<h2>Broker capacity</h2>")
    if capacity_img:
        parts.append(f"<img alt='capacity' src='data:image/png;base64,{capacity_img}'>")
    parts.append(
        _table(
            report["capacity"],
            [
                ("broker", "broker"),
                ("resource", "resource"),
                ("entities", "entities"),
                ("committed", "sum of quotas"),
                ("capacity", "capacity"),
                ("oversubscription", "oversubscription"),
                ("observed_peak", "observed peak"),
                ("status", "status"),
            ],
        )
    )
    if report.get("topics"):
        topic_img = _plot_topics(report, top_n)
        parts.append("<h2>Topics (TopicQuota budgets, KIP-1010 per-broker allowance)</h2>")
        if topic_img:
            parts.append(f"<img alt='topics' src='data:image/png;base64,{topic_img}'>")
        parts.append(
            _table(
                report["topics"],
                [
                    ("topic", "topic"),
                    ("partitions", "partitions"),
                    ("in_p99", "produce p99 B/s"),
                    ("produce_budget", "produce budget"),
                    ("out_p99", "fetch p99 B/s"),
                    ("consume_budget", "consume budget"),
                ],
            )
        )
        parts.append(
            _table(
                report.get("topic_brokers", []),
                [
                    ("topic", "topic"),
                    ("broker", "broker"),
                    ("leader_partitions", "leader partitions"),
                    ("in_share", "produce share"),
                    ("produce_allowance", "produce allowance"),
                    ("consume_allowance", "consume allowance"),
                    ("basis", "basis"),
                ],
            )
        )
    parts.append("<h2>Per-entity statistics</h2>")
    parts.append(
        _table(
            report["entities"],
            [
                ("entity", "entity"),
                ("resource", "resource"),
                ("samples", "samples"),
                ("brokers", "brokers"),
                ("p50", "p50"),
                ("p95", "p95"),
                ("p99", "p99"),
                ("max", "max"),
                ("peak_to_mean", "peak/mean"),
                ("throttled_share", "throttled share"),
                ("outlier", "outlier"),
                ("quota", "quota"),
            ],
        )
    )
    parts.append("<h2>Input and parameters</h2>")
    parts.append(f"<pre>{html.escape(json.dumps(_clean_floats(report['validation']), indent=2, default=str))}</pre>")
    parts.append(f"<pre>{html.escape(json.dumps(report['parameters'], indent=2, default=str))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html_report(report: Mapping[str, Any], path: Path, top_n: int = 20) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report, top_n))
    return path
