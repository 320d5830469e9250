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


def _figure(v: float) -> str:
    """Three significant digits without an exponent: 8.98, 57.2, 1000 (``:.3g`` would print 1e+03)."""
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    decimals = max(0, 2 - math.floor(math.log10(abs(v))))
    text = f"{v:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def human_bytes(x: float | None) -> str:
    """For people: 5.00 MiB/s style, never used in manifests."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    for suffix, size in _UNITS:
        if abs(x) >= size:
            return f"{_figure(x / size)} {suffix}B/s"
    return f"{_figure(x)} B/s"


def human_value(resource: str, x: float | None) -> str:
    if resource == "request":
        return "-" if x is None else f"{_figure(x)}%"
    return human_bytes(x)


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


def _table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[tuple[str, str]],
    limit: int | None = 200,
    more: str = "in the JSON / Parquet report",
) -> str:
    """An HTML table; a cell is formatted by ``_cell`` unless the row holds ``<key>_text`` for it."""
    if not rows:
        return "<p><em>none</em></p>"
    head = "".join(f"<th>{html.escape(title)}</th>" for _, title in columns)
    body = []
    shown = rows if limit is None else rows[:limit]
    for row in shown:
        cells = "".join(
            f"<td>{html.escape(str(row[key + '_text']) if key + '_text' in row else _cell(row.get(key)))}</td>"
            for key, _ in columns
        )
        body.append(f"<tr>{cells}</tr>")
    rest = f"<p>{len(rows) - len(shown)} more rows {more}.</p>" if len(rows) > len(shown) else ""
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{rest}"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}" if x == 0 or x >= 0.01 else f"{x:.2%}"


def _with_units(row: Mapping[str, Any], resource: str, keys: Iterable[str]) -> dict[str, Any]:
    """The row plus ``<key>_text`` in the resource's unit (KiB/s ... or %) for each of ``keys``."""
    return dict(row) | {f"{k}_text": human_value(resource, row.get(k)) for k in keys}


def _input_text(source: Mapping[str, Any]) -> str:
    text = f"client samples {source.get('clients')} ({source.get('format')})"
    return text + (f", topic samples {source['topics']}" if source.get("topics") else "")


def _headline(report: Mapping[str, Any]) -> str:
    """The decision on top: the defaults, how many overrides and why, and what needs a person's eyes."""
    recs = report["recommendations"]
    defaults = [r for r in recs if r["is_default"]]
    overrides = [r for r in recs if not r["is_default"]]
    items = [
        f"<li><b>{html.escape(r['entity'])}</b> {html.escape(r['resource'])} = "
        f"<b>{html.escape(human_value(r['resource'], r['quota']))}</b> "
        f"(covers {r['population']} entities at their p99 + {report['parameters']['headroom']:.0%})</li>"
        for r in defaults
    ]
    by_reason: dict[str, int] = {}
    for r in overrides:
        by_reason[r["reason"]] = by_reason.get(r["reason"], 0) + 1
    reasons = ", ".join(f"{n} {why}" for why, n in sorted(by_reason.items())) or "none"
    items.append(f"<li><b>{len(overrides)} override(s)</b> ({html.escape(reasons)}): all listed below</li>")
    capped = [r for r in recs if r["demand_capped"]]
    if capped:
        items.append(
            f"<li class='warn'><b>{len(capped)} demand-capped</b>: throttled in their samples, so their real "
            "demand is higher than recommended: "
            + ", ".join(f"{html.escape(r['entity'])} {html.escape(r['resource'])}" for r in capped)
            + "</li>"
        )
    over = [c for c in report["capacity"] if c["status"] == "over-capacity"]
    for c in over:
        items.append(
            f"<li class='warn'><b>broker {html.escape(str(c['broker']))} {html.escape(c['resource'])} over "
            f"capacity</b>: its traffic's p99 {html.escape(human_value(c['resource'], c['observed_p99']))} is above "
            f"{html.escape(human_value(c['resource'], c['capacity']))}</li>"
        )
    if not any(c["status"] != "unknown" for c in report["capacity"]):
        items.append("<li>capacity not checked (no <code>--broker-capacity</code>)</li>")
    elif not over:
        items.append("<li>no broker over capacity</li>")
    return "<div class='headline'><h2>Recommendation</h2><ul>" + "".join(items) + "</ul></div>"


def _changes_section(changes: Mapping[str, Any]) -> str:
    """Every change against the quotas applied now (unchanged keys counted, not listed)."""
    counts = changes["counts"]
    words = {"add": "added", "raise": "raised", "lower": "lowered", "drop": "dropped", "keep": "unchanged"}
    summary = ", ".join(f"{counts[a]} {words[a]}" for a in words if counts.get(a)) or "nothing to compare"
    rows = [
        r
        | {
            "current_text": "not set" if r["current"] is None else human_value(r["resource"], r["current"]),
            "recommended_text": "not set" if r["recommended"] is None else human_value(r["resource"], r["recommended"]),
            "change_percent_text": "-" if r["change_percent"] is None else f"{r['change_percent']:+g}%",
        }
        for r in changes["rows"]
        if r["action"] != "keep"
    ]
    parts = [
        "<h2>Against what is applied now</h2>",
        f"<p>{html.escape(str(changes['manifests']))} ClientQuotas from {html.escape(str(changes['source']))}: "
        f"<b>{html.escape(summary)}</b>. <i>drop</i> means set now and not recommended: applied with pruning, "
        "the entity falls back to a default.</p>",
    ]
    if rows:
        parts.append(
            _table(
                rows,
                [
                    ("action", "change"),
                    ("entity", "entity"),
                    ("resource", "resource"),
                    ("current", "applied now"),
                    ("recommended", "recommended"),
                    ("change_percent", "change"),
                ],
                limit=None,
            )
        )
    if changes["skipped"]:
        parts.append(
            "<p>Not compared: "
            + "; ".join(html.escape(s) for s in changes["skipped"][:20])
            + (f" and {len(changes['skipped']) - 20} more" if len(changes["skipped"]) > 20 else "")
            + "</p>"
        )
    return "".join(parts)


_STYLE: Final = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f2f2f2; }
pre { background: #f7f7f7; padding: 1em; white-space: pre-wrap; }
img { max-width: 100%; }
.headline { border: 2px solid #4c78a8; padding: 0.2em 1.2em; margin: 1em 0 2em; }
.headline li { margin: 0.3em 0; }
.warn { color: #a4001d; }
"""


def render_html(report: Mapping[str, Any], top_n: int = 20) -> str:
    """A self-contained page (plots inlined as base64 PNG) that a person can read without tools.

    The decision comes first (defaults, overrides, demand-capped entities, brokers over capacity),
    every override and demand-capped entity is listed in full, and every rate carries its unit.
    """
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>kquota advisor report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>kquota advisor report</h1>",
        f"<p>Generated {html.escape(str(report['generated_at']))} from "
        f"{html.escape(_input_text(report['input']))}.</p>",
        _headline(report),
    ]
    if report.get("changes"):
        parts.append(_changes_section(report["changes"]))
    recs = [
        _with_units(r, r["resource"], ("quota", "basis")) | {"throttled_share_text": _share(r.get("throttled_share"))}
        for r in report["recommendations"]
    ]
    parts += [
        "<h2>Recommended quotas</h2>",
        _table(
            recs,
            [
                ("entity", "entity"),
                ("resource", "resource"),
                ("quota", "quota"),
                ("reason", "why"),
                ("basis", "basis (before headroom)"),
                ("population", "population"),
                ("throttled_share", "throttled share"),
                ("demand_capped", "demand capped"),
            ],
            limit=None,
        ),
        "<h2>Summary</h2>",
        f"<pre>{html.escape(report['summary'])}</pre>",
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
    capacity = [
        _with_units(c, c["resource"], ("committed", "capacity", "observed_p99", "observed_peak"))
        | {"oversubscription_text": "-" if c.get("oversubscription") is None else f"{c['oversubscription']:.2f}x"}
        for c in report["capacity"]
    ]
    parts.append(
        _table(
            capacity,
            [
                ("broker", "broker"),
                ("resource", "resource"),
                ("status", "status"),
                ("observed_p99", "traffic p99"),
                ("observed_peak", "traffic peak"),
                ("capacity", "capacity"),
                ("committed", "sum of quotas"),
                ("oversubscription", "sum of quotas / capacity"),
                ("entities", "entities"),
            ],
            limit=None,
        )
    )
    if report.get("topics"):
        topic_img = _plot_topics(report, top_n)
        parts.append("<h2>Topics (TopicQuota budgets, KIP-1010 per-broker allowance)</h2>")
        if topic_img:
            parts.append(f"<img alt='topics' src='data:image/png;base64,{topic_img}'>")
        topics = [
            _with_units(t, "produce", ("in_p99", "produce_budget", "out_p99", "consume_budget"))
            for t in report["topics"]
        ]
        parts.append(
            _table(
                topics,
                [
                    ("topic", "topic"),
                    ("partitions", "partitions"),
                    ("in_p99", "produce p99"),
                    ("produce_budget", "produce budget"),
                    ("out_p99", "fetch p99"),
                    ("consume_budget", "consume budget"),
                ],
            )
        )
        brokers = [
            _with_units(t, "produce", ("produce_allowance", "consume_allowance"))
            | {"in_share_text": _share(t.get("in_share"))}
            for t in report.get("topic_brokers", [])
        ]
        parts.append(
            _table(
                brokers,
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
    entities = [
        _with_units(e, e["resource"], ("p50", "p95", "p99", "max", "quota"))
        | {"throttled_share_text": _share(e.get("throttled_share"))}
        for e in report["entities"]
    ]
    parts.append(
        _table(
            entities,
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
