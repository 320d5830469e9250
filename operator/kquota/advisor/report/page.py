"""The advisor's HTML report: one self-contained page, the decision first, every rate with its unit."""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from kquota.advisor.manifests import QUOTA_FIELDS
from kquota.advisor.report.data import clean_floats
from kquota.advisor.report.impact import COLUMNS as IMPACT_COLUMNS
from kquota.advisor.report.impact import Impact, cells
from kquota.advisor.report.impact import summary as impact_summary
from kquota.advisor.report.plots import plot_capacity, plot_distribution, plot_topics, plot_usage_vs_quota
from kquota.advisor.report.summary import committed_line
from kquota.advisor.units import human_value


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
    committed = committed_line(report["capacity"])
    if committed:
        # Beside "no broker over capacity": quotas that oversubscribe a broker are part of the decision.
        items.append(f"<li class='warn'>{html.escape(committed[0].upper() + committed[1:])}</li>")
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


#: Parameters that are byte rates (bytes/s): shown in KiB/s, MiB/s ... with the exact figure beside.
_BYTE_PARAMETERS: Final = frozenset({"min_byte_rate"})


def _parameter_text(name: str, value: Any) -> str:
    if name == "capacity" and isinstance(value, Mapping):
        if not value:
            return "not given (no capacity check)"
        return "; ".join(f"{r} {_exact_rate(r, v)}" for r, v in sorted(value.items()))
    if name in _BYTE_PARAMETERS and isinstance(value, int | float):
        return _exact_rate("produce", value)
    return json.dumps(value, default=str) if isinstance(value, Mapping | list | tuple) else _cell(value)


def _exact_rate(resource: str, value: float) -> str:
    """A rate for people with its exact figure: ``100 MiB/s (104857600 bytes/s)``, ``400%``."""
    if resource == "request":
        return human_value(resource, value)
    exact = int(value) if float(value).is_integer() else value
    return f"{human_value(resource, value)} ({exact} bytes/s)"


def _parameters_table(parameters: Mapping[str, Any]) -> str:
    """The method's parameters as a table; byte rates (the capacity above all) in human units, never raw bytes."""
    rows = [{"name": k, "value_text": _parameter_text(k, v)} for k, v in parameters.items()]
    return _table(rows, [("name", "parameter"), ("value", "value")], limit=None)


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
        for image in (plot_usage_vs_quota(report, resource, top_n), plot_distribution(report, resource)):
            if image:
                parts.append(f"<img alt='{html.escape(resource)} plot' src='data:image/png;base64,{image}'>")
    capacity_img = plot_capacity(report)
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
        topic_img = plot_topics(report, top_n)
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
    parts.append(f"<pre>{html.escape(json.dumps(clean_floats(report['validation']), indent=2, default=str))}</pre>")
    parts.append(_parameters_table(report["parameters"]))
    parts.append("</body></html>")
    return "\n".join(parts)


def write_html_report(report: Mapping[str, Any], path: Path, top_n: int = 20) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report, top_n))
    return path


def impact_section(impact: Impact) -> str:
    """The impact of a plan on the usage history: the sentence, one row per entity, the notes.

    The cells are :func:`kquota.advisor.report.impact.cells`'s, as in the markdown table and
    ``kquota plan``'s text: the same numbers in every rendering.
    """
    rows = [cells(r) | {"verdict_text": r.verdict} for r in impact.rows]
    table_rows = [{f"{k}_text": v for k, v in c.items()} for c in rows]
    notes = [f"{r.entity} {r.key}: {r.note}" for r in impact.rows if r.note] + impact.notes
    parts = [
        "<h2>Impact on the usage history</h2>",
        f"<p class='{'warn' if impact.over_threshold() else ''}'><b>{html.escape(impact_summary(impact))}</b></p>",
        f"<p>History: {html.escape(impact.source)}. <i>time</i> is the share of samples (moments x brokers) above "
        "the new limit, or throttled now for an entity the change frees; <i>throttle</i> is how long Kafka would "
        "hold the traffic back, seconds per hour on a broker (1 - limit / rate of the time while over it).</p>",
        _table(table_rows, [(k, title) for k, title in IMPACT_COLUMNS], limit=None),
    ]
    if notes:
        parts.append("<ul>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    return "".join(parts)


def render_impact_html(impact: Impact) -> str:
    return "\n".join(
        [
            "<!DOCTYPE html><html><head><meta charset='utf-8'><title>kquota plan: impact</title>",
            f"<style>{_STYLE}</style></head><body>",
            "<h1>kquota plan: impact of the change</h1>",
            impact_section(impact),
            "</body></html>",
        ]
    )


def write_impact_html(impact: Impact, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_impact_html(impact))
    return path
