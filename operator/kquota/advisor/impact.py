"""``kquota plan --impact``: who a quota change throttles, and who it frees, computed on the usage history.

The caller (``kquota plan``) gives the quotas on the brokers now and once the
plan is applied; this module reads the history (the advisor's input formats,
``kquota collect`` output, or a Prometheus range through the collector's
reader), validates it as ``kquota advise`` does, asks
:func:`kquota.domain.impact.moves` which measured buckets the change moves and
how, and has Spark compute each one's traffic against its new limit
(:mod:`kquota.advisor.transform.impact`). Exact figures: counts, nearest-rank
percentiles and sums in sorted order, the same on any master.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from kquota.advisor import collect, extract, validate
from kquota.advisor.params import Format
from kquota.advisor.report.impact import RESOURCE_OF, Impact, ImpactRow, Verdict
from kquota.advisor.schema import CLIENT_COLUMNS, empty_frame_schema
from kquota.advisor.session import Progress, spark_facts
from kquota.advisor.transform.entities import usage_long
from kquota.advisor.transform.impact import MAPPING_SCHEMA, destination_traffic, measured_traffic
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.impact import Bucket, Limit, Move, Quotas, moves
from kquota.metrics.prometheus import Fetch

#: The quota key each usage resource measures.
KEY_OF: Final = {resource: QuotaKey(key) for key, resource in RESOURCE_OF.items()}


@dataclass
class ImpactOptions:
    #: A file or directory in the advisor's input formats (``kquota collect`` output), or a Prometheus URL.
    usage: str
    format: Format | None = None
    #: Entities throttled more than this share of the time make ``kquota plan`` exit 4.
    threshold: float = 0.0
    #: A Prometheus range: this long, ending at ``now``, one point every ``step`` seconds.
    since: dt.timedelta = dt.timedelta(days=7)
    step: float = 60.0
    now: dt.datetime | None = None
    progress: bool = True
    #: The Prometheus API's transport (the size-capped HTTP GET when None; tests give their own).
    fetch: Fetch | None = None


def is_prometheus(usage: str) -> bool:
    return usage.startswith(("http://", "https://"))


def _samples(spark: SparkSession, options: ImpactOptions, now: dt.datetime) -> tuple[DataFrame, str]:
    """The client samples as the readers give them, and a description of where they came from."""
    if is_prometheus(options.usage):
        start = now - options.since
        rows: list[dict[str, Any]] = []
        for clients, _topics in collect.prometheus_rows(options.usage, start, now, options.step, fetch=options.fetch):
            rows += clients
        names = [c.name for c in CLIENT_COLUMNS]
        frame = spark.createDataFrame([tuple(r[n] for n in names) for r in rows], empty_frame_schema(CLIENT_COLUMNS))
        return frame, f"Prometheus {options.usage}, {start.isoformat()} to {now.isoformat()} every {options.step:g} s"
    inputs = extract.locate(options.usage, None, options.format)
    return extract.read(spark, inputs.clients, inputs.format), f"{inputs.clients} ({inputs.format})"


def _destination_id(move: Move) -> str:
    # Names may hold any character: JSON keeps distinct (key, user, client-id) triples distinct.
    return json.dumps([move.key.value, move.destination.user, move.destination.client_id])


def _mapping(spark: SparkSession, chosen: list[Move]) -> DataFrame:
    rows = [
        (
            RESOURCE_OF[m.key.value],
            m.measured.user,
            m.measured.client_id,
            _destination_id(m),
            m.before.value,
            m.after.value,
        )
        for m in chosen
    ]
    return constant_frame(spark, rows, MAPPING_SCHEMA)


def constant_frame(spark: SparkSession, rows: list[tuple[Any, ...]], schema: str) -> DataFrame:
    """A small DataFrame of ``rows`` built from literals in the JVM: no Python worker reads it.

    ``spark.createDataFrame`` of Python rows is read back by Python workers on the executors, and an
    executor pod need not run the driver's Python (on Kubernetes it is the advisor image's): the
    advisor's pipelines use none, so every executor needs only Spark.
    """
    columns = [tuple(part.strip().split(" ", 1)) for part in schema.split(",")]
    structs = [
        sf.struct(*[sf.lit(value).cast(kind).alias(name) for (name, kind), value in zip(columns, row, strict=True)])
        for row in rows
    ]
    if not structs:
        return spark.range(0).select(*[sf.lit(None).cast(kind).alias(name) for name, kind in columns])
    return spark.range(1).select(sf.inline(sf.array(*structs)))


def _from(limit: Limit) -> str:
    return limit.entity.path() if limit.entity is not None else "none"


def _destination_rows(chosen: list[Move], traffic: Mapping[str, dict[str, Any]]) -> list[ImpactRow]:
    by_destination: dict[str, list[Move]] = {}
    for m in chosen:
        by_destination.setdefault(_destination_id(m), []).append(m)
    rows = []
    for dest_id, group in by_destination.items():
        # Raising or removing a limit throttles nobody more: those are un-throttle rows, if anything.
        if all(m.loosens and m.destination == m.measured for m in group):
            continue
        figures = traffic.get(dest_id)
        if figures is None or not figures["samples"]:
            continue
        first = group[0]
        own = next((m for m in group if m.measured == m.destination), None)
        now = own.before if own is not None else min(group, key=lambda m: m.before.value or float("inf")).before
        after = min((m.after for m in group), key=lambda lim: lim.value if lim.value is not None else float("inf"))
        bounds = {m.bound for m in group if m.bound}
        bound = bounds.pop() if len(bounds) == 1 else ("about" if bounds else None)
        notes = [m.why for m in group if m.why]
        buckets = tuple(sorted({m.measured.path() for m in group}))
        if len(buckets) > 1:
            notes.insert(0, f"adds up the traffic of {', '.join(buckets)}")
        limit = figures["limit"]
        above = int(figures["above"])
        samples = int(figures["samples"])
        verdict: Verdict = "throttles" if above > 0 else "within"
        rows.append(
            ImpactRow(
                verdict=verdict,
                key=first.key.value,
                entity=first.destination.path(),
                limit_now=now.value,
                limit_now_from=_from(now),
                limit_after=after.value,
                limit_after_from=_from(after),
                samples=samples,
                share=above / samples,
                p99=figures["p99"],
                p99_ratio=None if limit is None or figures["p99"] is None else figures["p99"] / limit,
                throttle_seconds_per_hour=float(figures["throttle_seconds_per_hour"]),
                buckets=buckets,
                bound=bound,
                note="; ".join(dict.fromkeys(notes)),
            )
        )
    return rows


def _unthrottle_rows(
    chosen: list[Move], measured: Mapping[tuple[str, str | None, str | None], dict[str, Any]]
) -> list[ImpactRow]:
    rows = []
    for m in chosen:
        if not m.loosens:
            continue
        figures = measured.get((RESOURCE_OF[m.key.value], m.measured.user, m.measured.client_id))
        if figures is None or not figures["samples"]:
            continue
        # Throttled now: the broker said so (throttle time > 0), or, without throttle times in the
        # history, the rate reached the limit.
        if figures["throttle_known"]:
            share = figures["throttled"] / figures["throttle_known"]
        else:
            share = figures["at_limit"] / figures["samples"]
        if share <= 0:
            continue
        rows.append(
            ImpactRow(
                verdict="un-throttles",
                key=m.key.value,
                entity=m.measured.path(),
                limit_now=m.before.value,
                limit_now_from=_from(m.before),
                limit_after=m.after.value,
                limit_after_from=_from(m.after),
                samples=int(figures["samples"]),
                share=share,
                p99=figures["p99"],
                p99_ratio=None if m.before.value is None or figures["p99"] is None else figures["p99"] / m.before.value,
                throttle_seconds_per_hour=0.0,
                buckets=(m.measured.path(),),
                bound=m.bound,
                note=m.why or "its real demand is higher than the history shows: it was held down by the limit",
            )
        )
    return rows


def _bucket(user: str | None, client_id: str | None) -> Bucket | None:
    return Bucket(user, client_id) if user is not None or client_id is not None else None


def assess(
    spark: SparkSession,
    before: Quotas,
    after: Quotas,
    options: ImpactOptions,
    changed: Iterable[tuple[Entity, QuotaKey]] = (),
    echo: Callable[[str], None] | None = None,
) -> Impact:
    """Who the change from ``before`` to ``after`` throttles and un-throttles in the usage history.

    ``changed`` are the plan's changed (entity, key) pairs, each named in a note when no client of
    the history gets its limit from it, or when the history cannot measure its key.
    """
    say = echo or (lambda text: print(text, file=sys.stderr))
    now = options.now or dt.datetime.now(dt.UTC)
    with Progress(spark, enabled=options.progress) as progress:
        progress.step("reading the usage history")
        raw, source = _samples(spark, options, now)
        say(f"kquota plan: impact on {source}, Spark {spark.version}, master {spark.sparkContext.master}")
        # Each bucket is compared with its own broker's limit at its own moments: brokers' clocks need
        # not agree (the advisor's per-entity statistics do not either), so skew is not an error here.
        samples, report = validate.validate_clients(raw, now, skew="ignore", what="usage history")
        try:
            usage = usage_long(samples).filter(sf.col("resource").isin(*KEY_OF))
            progress.step("finding the buckets the change moves")
            found = usage.select("resource", "user", "client_id").distinct().collect()
            measured = [
                (KEY_OF[r["resource"]], b) for r in found if (b := _bucket(r["user"], r["client_id"])) is not None
            ]
            chosen = moves(before, after, measured)
            notes = _notes(chosen, changed, {k for k, _ in measured})
            dest_rows: list[ImpactRow] = []
            free_rows: list[ImpactRow] = []
            if chosen:
                progress.step("computing traffic against the new limits")
                mapping = _mapping(spark, chosen)
                traffic = {r["destination"]: r.asDict() for r in destination_traffic(usage, mapping).collect()}
                dest_rows = _destination_rows(chosen, traffic)
                loosened = [m for m in chosen if m.loosens]
                if loosened:
                    measured_rows = measured_traffic(usage, _mapping(spark, loosened)).collect()
                    by_bucket = {(r["resource"], r["user"], r["client_id"]): r.asDict() for r in measured_rows}
                    free_rows = _unthrottle_rows(loosened, by_bucket)
        finally:
            samples.unpersist()
    order = {"throttles": 0, "un-throttles": 1, "within": 2}
    keys = list(QuotaKey)
    rows = sorted(
        dest_rows + free_rows, key=lambda r: (order[r.verdict], -r.share, keys.index(QuotaKey(r.key)), r.entity)
    )
    return Impact(
        rows=rows,
        threshold=options.threshold,
        source=source,
        samples=report.rows_valid,
        brokers=report.brokers,
        first=report.first_timestamp,
        last=report.last_timestamp,
        notes=notes,
        spark=spark_facts(spark),
    )


def _notes(chosen: list[Move], changed: Iterable[tuple[Entity, QuotaKey]], measured_keys: set[QuotaKey]) -> list[str]:
    """What the history cannot tell about the plan's changes: keys it does not measure, entries no client uses."""
    used = {(lim.entity, m.key) for m in chosen for lim in (m.before, m.after) if lim.entity is not None}
    out = []
    for entity, key in sorted(set(changed), key=lambda ek: (ek[0].sort_key(), list(QuotaKey).index(ek[1]))):
        if key.value not in RESOURCE_OF:
            out.append(f"{entity.path()} {key.value}: not assessed (the usage history does not measure this key)")
        elif key not in measured_keys:
            resource = RESOURCE_OF[key.value]
            out.append(f"{entity.path()} {key.value}: not assessed (the usage history has no {resource} rates)")
        elif (entity, key) not in used:
            out.append(f"{entity.path()} {key.value}: no client in the usage history gets its limit from this entry")
    return out
