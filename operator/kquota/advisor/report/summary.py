"""The few lines a person reads at the end of ``kquota advise``: what was recommended and why."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kquota.advisor import current
from kquota.advisor.units import human_value

#: Overrides the summary lists by size; demand-capped ones are listed whatever their rank.
MOST_OVERRIDES: Final = 15


def _capped(r: Mapping[str, Any]) -> str:
    if not r["demand_capped"]:
        return ""
    return f"; demand capped: throttled {r['throttled_share']:.0%} of the time, real demand is higher"


def _capacity_lines(capacity: list[dict[str, Any]]) -> list[str]:
    """Brokers overloaded by their own traffic first, by name; quotas that merely add up to more, in one line."""

    known = [c for c in capacity if c["status"] != "unknown"]
    if not known:
        return ["capacity: not checked (pass --broker-capacity)"]

    def qty(c: Mapping[str, Any], key: str) -> str:
        return human_value(c["resource"], c[key])

    lines = [
        f"capacity: broker {c['broker']} {c['resource']} OVER CAPACITY: its traffic's p99 "
        f"{qty(c, 'observed_p99')} (peak {qty(c, 'observed_peak')}) is above its capacity {qty(c, 'capacity')}"
        for c in known
        if c["status"] == "over-capacity"
    ]
    if not lines:
        worst = max(known, key=lambda c: c["peak_utilisation"] or 0)
        lines.append(
            f"capacity: no broker over capacity (busiest: broker {worst['broker']} {worst['resource']}, "
            f"p99 {qty(worst, 'observed_p99')} of {qty(worst, 'capacity')})"
        )
    committed = committed_line(capacity)
    if committed:
        lines.append(f"  {committed}")
    return lines


def committed_line(capacity: list[dict[str, Any]]) -> str | None:
    """The brokers whose recommended quotas add up to more than their capacity, in one sentence; None if none.

    The summary and the HTML report's headline both say it: a broker the quotas oversubscribe is
    part of the decision, whether or not its traffic is over capacity today.
    """
    known = [c for c in capacity if c["status"] != "unknown"]
    over = [c for c in known if (c["oversubscription"] or 0) > 1]
    if not over:
        return None
    top = max(over, key=lambda c: c["oversubscription"] or 0)
    return (
        f"quotas add up to more than the capacity on {len(over)} of {len(known)} broker/resource "
        f"pair(s) (up to {top['oversubscription']:.2f}x on broker {top['broker']} {top['resource']}): "
        "they could overload a broker only if those clients peaked together"
    )


def _change_lines(changes: Mapping[str, Any], most: int = 10) -> list[str]:
    """The comparison with what is applied now: the counts, then the defaults and the largest changes."""
    lines = [current.summary_line(changes)]
    moved = [r for r in changes["rows"] if r["action"] != "keep"]

    def size(r: Mapping[str, Any]) -> float:
        return float("inf") if r["change_percent"] is None else abs(r["change_percent"])

    shown = sorted(moved, key=lambda r: (not r["is_default"], -size(r)))[:most]
    for r in shown:
        now = human_value(r["resource"], r["current"]) if r["current"] is not None else "not set"
        new = human_value(r["resource"], r["recommended"]) if r["recommended"] is not None else "not set"
        pct = "" if r["change_percent"] is None else f" ({r['change_percent']:+g}%)"
        lines.append(f"  {r['action']} {r['entity']} {r['resource']}: {now} -> {new}{pct}")
    if len(moved) > most:
        lines.append(f"  ... and {len(moved) - most} more changes (see the report)")
    for note in changes["skipped"][:3]:
        lines.append(f"  not compared: {note}")
    if len(changes["skipped"]) > 3:
        lines.append(f"  not compared: {len(changes['skipped']) - 3} more documents (see report.json)")
    return lines


def summarise(report: Mapping[str, Any]) -> str:
    """A few lines a person reads at the end of a run: what was recommended and why."""
    v = report["validation"]["clients"]
    p = report["parameters"]
    lines = [
        f"Analysed {v['rows_valid']:,} client samples from {v['brokers']} broker(s), "
        f"{v['first_timestamp']} to {v['last_timestamp']}; "
        f"{len({(e['kind'], e['user'], e['client_id']) for e in report['entities']}):,} entities.",
    ]
    for note in v["notes"]:
        lines.append(f"  input: {note}")
    if report.get("spark"):
        sp = report["spark"]
        rss = "" if sp["driver_peak_rss_mib"] is None else f", driver peak memory {sp['driver_peak_rss_mib']:,} MiB"
        lines.append(f"Spark {sp['version']} on {sp['master']}: driver memory {sp['driver_memory']}{rss}.")
    if report.get("changes"):
        lines += _change_lines(report["changes"])
    headroom = f"{p['headroom'] * 100:g}%"
    for d in (r for r in report["recommendations"] if r["is_default"]):
        entity = current.entity_display(d["kind"], None, None, True)
        lines.append(
            f"{d['resource']}: default {entity} = {human_value(d['resource'], d['quota'])} "
            f"(p{p['default_percentile'] * 100:g} of {d['population']} non-outlier p99s = "
            f"{human_value(d['resource'], d['basis'])}, + {headroom} headroom, rounded up{_capped(d)})"
        )
    overrides = sorted(
        (r for r in report["recommendations"] if not r["is_default"]), key=lambda r: (r["resource"], -(r["quota"] or 0))
    )
    # The largest overrides, and every demand-capped one wherever it ranks: the docs promise the
    # summary names them (their real demand is higher than recommended), so none hides in "... more".
    shown = overrides[:MOST_OVERRIDES] + [r for r in overrides[MOST_OVERRIDES:] if r["demand_capped"]]
    for r in shown:
        why = {"outlier": "outlier", "no-default": "no default for its population"}.get(
            r["reason"], "needs more than the default"
        )
        lines.append(
            f"  override {r['entity']} {r['resource']} = {human_value(r['resource'], r['quota'])} "
            f"({why}: p99 {human_value(r['resource'], r['basis'])}{_capped(r)})"
        )
    if len(overrides) > len(shown):
        lines.append(f"  ... and {len(overrides) - len(shown)} more overrides (see the report)")
    lines += _capacity_lines(report["capacity"])
    if report.get("topics"):
        lines.append(f"topics: {len(report['topics'])} TopicQuota budget(s) suggested (enforcement Monitor)")
    return "\n".join(lines)
