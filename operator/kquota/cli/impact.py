"""``kquota plan --impact USAGE``: the plan's changes against usage history, on Spark (the advisor's extra).

The plan is the operator's (:func:`kquota.cli.planning.make_report`); this
module takes the quotas the brokers hold now, lays the plan's changes over
them (what the operator sends: adds, changes and removals, not held removals
or kept keys) and hands both to :func:`kquota.advisor.impact.assess`, which
answers per entity. The advisor, and with it pyspark, is imported only when
``--impact`` is given: ``kquota plan`` without it needs neither.

Exit code 4 (:data:`kquota.cli.common.THROTTLES`) replaces 2 (and 3) when a change
throttles an entity more than ``--throttle-threshold`` of the time, so CI can
ask for a second review.
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
from typing import TYPE_CHECKING, Any

from kquota.cli import common
from kquota.cli.planning import CHANGING, Action, Report
from kquota.cli.target import Quotas
from kquota.cli.term import Cell, Term, safe
from kquota.domain.entities import Entity, QuotaKey

if TYPE_CHECKING:
    from kquota.advisor.report.impact import Impact

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> dt.timedelta:
    match = _DURATION.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 7d, 12h or 90m")
    return dt.timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a share of time such as 0.01 (1%)") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError("the threshold is a share of time: 0 (any throttling) up to below 1")
    return value


def _conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--conf takes KEY=VALUE, got {text!r}")
    return key, value


def add_impact_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("impact on usage history (needs the advisor: pip install 'kquota[spark]')")
    group.add_argument(
        "--impact",
        metavar="USAGE",
        help="usage history: `kquota collect` output, files or directories in the advisor's input formats, or a "
        "Prometheus URL; for every changed or removed key, which entities the new limits throttle or free",
    )
    group.add_argument("--usage-format", choices=("parquet", "csv", "json"), help="USAGE's format (default: by name)")
    group.add_argument(
        "--usage-since",
        type=_duration,
        default=dt.timedelta(days=7),
        metavar="DURATION",
        help="Prometheus USAGE: how far back from now (default 7d)",
    )
    group.add_argument(
        "--usage-step",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="Prometheus USAGE: seconds between points (default %(default)s)",
    )
    group.add_argument(
        "--throttle-threshold",
        type=_share,
        default=0.0,
        metavar="SHARE",
        help="exit 4 when a change throttles an entity more than this share of the time (default 0: any)",
    )
    group.add_argument("--impact-report", metavar="FILE", help="also write the impact as an HTML page")
    group.add_argument(
        "--master", help="Spark master for --impact: local[*] (default), spark://HOST:7077, k8s://https://API:443"
    )
    group.add_argument(
        "--conf",
        type=_conf,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Spark configuration for --impact (repeatable), e.g. spark.kubernetes.container.image=...",
    )


def after_plan(live: Quotas, report: Report) -> dict[Entity, dict[QuotaKey, float]]:
    """The brokers' quotas once the operator has made the plan's changes shown (held removals stay)."""
    out = {entity: dict(values) for entity, values in live.items()}
    for row in report.rows:
        if row.action not in CHANGING or row.key is None:
            continue
        if row.action is Action.REMOVE:
            out.get(row.entity, {}).pop(row.key, None)
        elif row.desired is not None:
            out.setdefault(row.entity, {})[row.key] = row.desired
    return {entity: values for entity, values in out.items() if values}


def run_impact(args: argparse.Namespace, live: Quotas, report: Report) -> Impact | str:
    """The impact of ``report``'s changes on ``args.impact``; a message (str) when it cannot be computed."""
    try:
        from kquota.advisor.impact import ImpactOptions, assess
        from kquota.advisor.schema import InputError
        from kquota.advisor.session import MemoryTooSmall, spark_session
    except ImportError as exc:
        return f"--impact needs the advisor's Spark: pip install 'kquota[spark]' ({exc})"
    from kquota.advisor.collect import CollectError
    from kquota.advisor.commands import is_spark_failure, spark_failure_message

    options = ImpactOptions(
        usage=args.impact,
        format=args.usage_format,
        threshold=args.throttle_threshold,
        since=args.usage_since,
        step=args.usage_step,
    )
    changed = [(r.entity, r.key) for r in report.changes if r.key is not None]
    try:
        spark = spark_session(args.master, "kquota-plan-impact", conf=dict(args.conf))
    except MemoryTooSmall as exc:
        return str(exc)
    except Exception as exc:
        if not is_spark_failure(exc):
            raise
        # The JVM did not start (no Java, a bad --conf): one message, as in kquota advise.
        return f"Spark did not start: {str(exc).strip()[:400]}"
    try:
        return assess(spark, live, after_plan(live, report), options, changed)
    except (InputError, CollectError) as exc:
        return f"usage history: {exc}"
    except Exception as exc:
        if not is_spark_failure(exc):
            raise
        memory = spark.sparkContext.getConf().get("spark.driver.memory", "1g")
        return spark_failure_message(str(exc), memory)


def render_text(impact: Impact, t: Term) -> None:
    """The impact under the plan: one line per entity throttled or un-throttled, then the notes."""
    from kquota.advisor.report.impact import COLUMNS, cells, summary

    t.write()
    t.write("Impact on the usage history", "bold")
    t.write(f"history: {safe(impact.source)}")
    shown = [r for r in impact.rows if r.verdict != "within"]
    if shown:
        t.write()
        styles = {"throttles": "red bold", "un-throttles": "green", "within": "dim"}
        table: list[list[Cell]] = []
        for row in shown:
            c = cells(row)
            table.append([(c["verdict"], styles[row.verdict]), *(c[k] for k, _ in COLUMNS[1:])])
        t.table([title.upper() for _, title in COLUMNS], table)
    notes = [f"{r.entity} {r.key}: {r.note}" for r in impact.rows if r.note] + impact.notes
    common.bullet_list(t, "Impact notes:", notes)
    t.write()
    t.write(summary(impact), "red bold" if impact.over_threshold() else "bold")


def to_json(impact: Impact) -> dict[str, Any]:
    return impact.as_dict()


def render_markdown(impact: Impact) -> str:
    from kquota.advisor.report.impact import render_markdown as impact_markdown

    return impact_markdown(impact)


def write_html(impact: Impact, path: str) -> None:
    from pathlib import Path

    from kquota.advisor.report.page import write_impact_html

    write_impact_html(impact, Path(path))


def exit_code(code: int, impact: Impact | None) -> int:
    """Plan's exit code, 4 instead of 2 (changes) or 3 (held removals) when a change throttles an entity
    above the threshold: of the things to look at, that one fails CI."""
    if impact is not None and code in (common.CHANGES, common.HELD) and impact.over_threshold():
        return common.THROTTLES
    return code


__all__ = ["add_impact_args", "after_plan", "exit_code", "render_markdown", "render_text", "run_impact", "to_json"]
