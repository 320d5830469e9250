"""What ``kquota plan --impact`` found, as data and as text: one line per entity, the same numbers everywhere.

:class:`Impact` is the result (:mod:`kquota.advisor.impact` computes it);
:func:`cells` turns a row into the strings every rendering shows, so the
markdown table for a pull request (:func:`render_markdown`), the plan's text
output and the HTML section (:func:`kquota.advisor.report.page.render_impact_html`)
cannot disagree.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

from kquota.advisor.units import human_value

Verdict = Literal["throttles", "within", "un-throttles"]
#: The advisor's resources by quota key.
RESOURCE_OF: Final = {"producer_byte_rate": "produce", "consumer_byte_rate": "fetch", "request_percentage": "request"}


@dataclass(frozen=True)
class ImpactRow:
    """One entity (a quota bucket as Kafka measures it) and key, with what the change does to it.

    For ``throttles`` and ``within`` the bucket is where the traffic is limited after the change
    and the figures are against the new limit; for ``un-throttles`` it is the bucket as measured
    and the figures are against the limit it has now.
    """

    verdict: Verdict
    key: str
    entity: str
    limit_now: float | None
    limit_now_from: str
    limit_after: float | None
    limit_after_from: str
    samples: int
    #: throttles/within: share of samples above the new limit; un-throttles: share throttled now.
    share: float
    p99: float | None
    #: p99 / the new limit (throttles, within) or / the limit now (un-throttles); None without a limit.
    p99_ratio: float | None
    #: Seconds per hour the traffic would be held back (1 - limit/rate of the time while over it); 0 if never.
    throttle_seconds_per_hour: float
    #: The measured buckets whose traffic this row adds up (more than one when the change merges them).
    buckets: tuple[str, ...] = ()
    #: None: exact. "at most" / "at least": a bound, and ``note`` says why.
    bound: str | None = None
    note: str = ""

    @property
    def resource(self) -> str:
        return RESOURCE_OF.get(self.key, "produce")


@dataclass
class Impact:
    """Every entity the plan's changes touch in the usage history, and what the history is."""

    rows: list[ImpactRow]
    threshold: float
    source: str
    samples: int
    brokers: int
    first: str | None
    last: str | None
    notes: list[str] = field(default_factory=list)
    spark: dict[str, Any] = field(default_factory=dict)

    def throttled(self) -> list[ImpactRow]:
        return [r for r in self.rows if r.verdict == "throttles"]

    def unthrottled(self) -> list[ImpactRow]:
        return [r for r in self.rows if r.verdict == "un-throttles"]

    def over_threshold(self) -> list[ImpactRow]:
        """The entities the change throttles more than ``threshold`` of the time: these fail CI (exit 4)."""
        return [r for r in self.throttled() if r.share > self.threshold]

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rows"] = [asdict(r) | {"buckets": list(r.buckets)} for r in self.rows]
        out["overThreshold"] = len(self.over_threshold())
        out["summary"] = summary(self)
        return out


def share_text(x: float) -> str:
    """A share of time: 0%, 12.5%, 0.042% (never rounded to 0% when it is not 0)."""
    if x == 0:
        return "0%"
    if x >= 0.1:
        return f"{x:.1%}".replace(".0%", "%")
    digits = 2
    while x * 100 < 10 ** (1 - digits) and digits < 6:
        digits += 1
    return f"{x:.{digits}%}"


def limit_text(key: str, value: float | None, source: str) -> str:
    if value is None:
        return "none"
    return f"{human_value(RESOURCE_OF.get(key, 'produce'), value)} ({source})"


def cells(row: ImpactRow) -> dict[str, str]:
    """A row's figures as every rendering prints them."""
    bound = f"{row.bound} " if row.bound else ""
    if row.verdict == "un-throttles":
        share = f"{bound}throttled {share_text(row.share)} now"
        ratio = "-" if row.p99_ratio is None else f"{row.p99_ratio:.2f}x now"
    else:
        share = f"{bound}{share_text(row.share)} above"
        ratio = "-" if row.p99_ratio is None else f"{bound}{row.p99_ratio:.2f}x"
    throttle = "-" if row.verdict == "un-throttles" else f"{bound}{row.throttle_seconds_per_hour:.1f} s/h"
    return {
        "verdict": row.verdict,
        "entity": row.entity,
        "key": row.key,
        "now": limit_text(row.key, row.limit_now, row.limit_now_from),
        "after": limit_text(row.key, row.limit_after, row.limit_after_from),
        "share": share,
        "p99": human_value(row.resource, row.p99),
        "ratio": ratio,
        "throttle": throttle,
        "samples": f"{row.samples:,}",
        "note": row.note,
    }


COLUMNS: Final = (
    ("verdict", "impact"),
    ("entity", "entity"),
    ("key", "key"),
    ("now", "limit now"),
    ("after", "limit after"),
    ("share", "time"),
    ("p99", "p99"),
    ("ratio", "p99 / limit"),
    ("throttle", "throttle"),
    ("samples", "samples"),
)


def summary(impact: Impact) -> str:
    """One sentence: how many entities the change throttles (and above the threshold), un-throttles."""
    throttled, over, freed = impact.throttled(), impact.over_threshold(), impact.unthrottled()
    within = sum(1 for r in impact.rows if r.verdict == "within")
    parts = [
        f"{_entities(len(throttled))} throttled ({len(over)} of them more than {share_text(impact.threshold)} of the "
        "time, the threshold)",
        f"{_entities(len(freed))} un-throttled",
        f"{_entities(within)} under the new limit",
    ]
    span = f"{impact.first} to {impact.last}" if impact.first else "no samples"
    return f"Impact: {', '.join(parts)}; from {impact.samples:,} samples on {impact.brokers} broker(s), {span}."


def _entities(n: int) -> str:
    return f"{n} entity" if n == 1 else f"{n} entities"


#: What makes markup inside a table cell: emphasis, code, links, HTML, strikethrough, the cell separator.
_MARKDOWN_SPECIAL: Final = re.compile(r"([\\`*_\[\]<>|~])")


def md(text: str) -> str:
    """Text safe in a markdown table cell: no pipe, markup or line break of a principal's name can break it."""
    cleaned = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" for ch in text)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", cleaned)


def render_markdown(impact: Impact) -> str:
    """The pull-request comment: a sentence, then one table line per entity (notes under the table)."""
    lines = [f"**{md(summary(impact))}**", ""]
    shown = [r for r in impact.rows if r.verdict != "within"]
    if shown:
        lines.append("| " + " | ".join(title for _, title in COLUMNS) + " |")
        lines.append("|" + "---|" * len(COLUMNS))
        for row in shown:
            c = cells(row)
            lines.append("| " + " | ".join(md(c[k]) for k, _ in COLUMNS) + " |")
        lines.append("")
    notes = [f"{r.entity} {r.key}: {r.note}" for r in impact.rows if r.note] + impact.notes
    lines += [f"- {md(n)}" for n in notes]
    return "\n".join(lines).rstrip() + "\n"
