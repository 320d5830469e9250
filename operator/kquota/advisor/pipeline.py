"""Orchestration of ``kquota advise``: extract -> validate -> transform -> write the manifests and reports.

This is the only module that decides *when* Spark computes: the pure
transforms in :mod:`kquota.advisor.transform` only describe DataFrames, and
here the validated samples are persisted until they are exploded into one row
per resource, which is persisted once for the statistics and the capacity
check; the small result tables are collected, and the outputs are written.
"""

from __future__ import annotations

import datetime as dt
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from kquota.advisor import current, extract, manifests, schema, validate
from kquota.advisor.params import (
    Format,
    Params,
    ReportFormat,
    SkewPolicy,
)
from kquota.advisor.report import data, page
from kquota.advisor.report.summary import summarise
from kquota.advisor.session import Progress, spark_facts
from kquota.advisor.transform.capacity import capacity_check
from kquota.advisor.transform.entities import regroup, usage_long
from kquota.advisor.transform.outliers import flag_outliers
from kquota.advisor.transform.recommend import recommend
from kquota.advisor.transform.stats import entity_stats_wide
from kquota.advisor.transform.topics import topic_view

#: Largest number of per-entity rows put into the JSON and HTML reports (all of them go to Parquet).
MAX_REPORT_ENTITIES: Final = 10_000


@dataclass
class AdviseOptions:
    input: str
    out: Path
    topic_input: str | None = None
    format: Format | None = None
    params: Params = field(default_factory=Params)
    namespace: str | None = None
    cluster_ref: str | None = None
    report_format: ReportFormat = "json"
    skew: SkewPolicy = "error"
    skew_tolerance: dt.timedelta = dt.timedelta(minutes=5)
    now: dt.datetime | None = None
    top_n: int = 20
    progress: bool = True
    #: ClientQuota manifests applied now (file or directory), compared with the advice in the report.
    current: str | None = None


@dataclass
class AdviseResult:
    summary: str
    report: dict[str, Any]
    manifests: list[Path]
    report_paths: list[Path]


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict(recursive=True) for r in df.collect()]


@contextmanager
def _persisted(df: DataFrame) -> Iterator[DataFrame]:
    df = df.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        yield df
    finally:
        df.unpersist()


def _entity_rows(flagged: list[dict[str, Any]], effective: dict[tuple[Any, ...], float]) -> list[dict[str, Any]]:
    out = []
    for row in flagged:
        key = (row["kind"], row["user"], row["client_id"], row["resource"])
        out.append(
            dict(
                row,
                entity=current.entity_display(row["kind"], row["user"], row["client_id"], False),
                quota=effective.get(key),
            )
        )
    out.sort(key=lambda r: (r["resource"], -(r["p99"] or 0), r["entity"]))
    return out


def _effective(recs: list[dict[str, Any]]) -> dict[tuple[Any, ...], float]:
    """(kind, user, client_id, resource) -> quota, for the entities with an override."""
    out: dict[tuple[Any, ...], float] = {}
    for r in recs:
        if not r["is_default"]:
            out[(r["kind"], r["user"], r["client_id"], r["resource"])] = r["quota"]
    return out


def advise(spark: SparkSession, options: AdviseOptions, echo: Callable[[str], None] | None = None) -> AdviseResult:
    """Run the whole pipeline; raises :class:`kquota.advisor.schema.InputError` for bad input."""

    params = options.params
    params.check()
    say = echo or (lambda text: print(text, file=sys.stderr))
    now = options.now or dt.datetime.now(dt.UTC)
    inputs = extract.locate(options.input, options.topic_input, options.format)
    # Read before any Spark work: a typo in --current should cost seconds, not the whole run.
    try:
        applied = current.read_current(options.current) if options.current else None
    except (ValueError, FileNotFoundError) as exc:
        raise schema.InputError(str(exc)) from exc
    master = spark.sparkContext.master
    say(f"kquota advise: {inputs.clients} ({inputs.format}) on Spark {spark.version}, master {master}")
    with Progress(spark, enabled=options.progress) as progress:
        progress.step("validating client samples")
        raw = extract.read(spark, inputs.clients, inputs.format)
        clients, client_report = validate.validate_clients(raw, now, options.skew_tolerance, options.skew)
        topic_report: schema.ValidationReport | None = None
        topics_df: DataFrame | None = None
        if inputs.topics:
            progress.step("validating topic samples")
            topics_fmt = options.format or extract.detect_format(inputs.topics)
            topics_df, topic_report = validate.validate_topics(
                extract.read(spark, inputs.topics, topics_fmt), now, options.skew_tolerance, options.skew
            )
        # The statistics group the samples as they are (a sorted array per resource in one group per
        # entity); only the capacity check reads them one row per resource. Both read the validated
        # samples' cache: exploding every sample into a second cache first cost more than it saved.
        # Re-keying (--level) is a shuffle of its own: cached too.
        samples = regroup(clients, params.level)
        rekeyed = params.level != "as-measured"
        with _persisted(samples) if rekeyed else nullcontext(samples) as samples:
            usage = usage_long(samples)
            progress.step("computing per-entity statistics and outliers")
            stats = entity_stats_wide(samples)
            flagged_df = flag_outliers(
                stats, params.outlier_alpha, params.outlier_top_k, params.min_population
            ).persist()
            flagged = _rows(flagged_df)
            if not flagged:
                raise schema.EmptyInputError("client samples: no usage values (every rate column is empty)")
            progress.step("recommending quotas")
            recs_df = recommend(flagged_df, params).persist()
            recs = _rows(recs_df)
            progress.step("checking broker capacity")
            capacity_df = capacity_check(usage, recs_df, params.capacity)
            capacity = _rows(capacity_df)
            topic_rows: list[dict[str, Any]] = []
            topic_broker_rows: list[dict[str, Any]] = []
            tables: dict[str, DataFrame] = {
                "entities": flagged_df,
                "recommendations": recs_df,
                "capacity": capacity_df,
            }
            if topics_df is not None:
                progress.step("topic budgets")
                per_topic, per_topic_broker = topic_view(topics_df, params)
                topic_rows, topic_broker_rows = _rows(per_topic), _rows(per_topic_broker)
                tables.update(topics=per_topic, topic_brokers=per_topic_broker)
            progress.step("writing manifests and reports")
            for r in recs:
                r["entity"] = current.entity_display(r["kind"], r["user"], r["client_id"], r["is_default"])
            recs.sort(key=lambda r: (not r["is_default"], r["resource"], r["entity"]))
            capacity.sort(key=lambda r: (r["resource"], r["broker"]))
            entities = _entity_rows(flagged, _effective(recs))
            defaults = {(r["kind"], r["resource"]): r["quota"] for r in recs if r["is_default"]}
            for e in entities:
                if e["quota"] is None:
                    e["quota"] = defaults.get((e["kind"], e["resource"]))
            report: dict[str, Any] = {
                "generated_at": now.isoformat(),
                "input": {"clients": inputs.clients, "topics": inputs.topics, "format": inputs.format},
                "parameters": dict(
                    asdict(params), skew=options.skew, skew_tolerance_seconds=options.skew_tolerance.total_seconds()
                ),
                "validation": {
                    "clients": client_report.as_dict(),
                    "topics": topic_report.as_dict() if topic_report else None,
                },
                "recommendations": recs,
                "capacity": capacity,
                "topics": topic_rows,
                "topic_brokers": topic_broker_rows,
                "entities": entities[:MAX_REPORT_ENTITIES],
                "entities_total": len(entities),
            }
            if applied is not None:
                report["changes"] = current.changes(recs, applied)
            report["spark"] = spark_facts(spark)
            report["summary"] = summarise(report)
            header = (
                f"Generated by kquota advise at {now.isoformat()} from {client_report.rows_valid} samples "
                f"({inputs.clients}).\nReview before merging: see report.html for the reasoning."
            )
            resources = manifests.client_quota_manifests(recs, options.namespace, options.cluster_ref, params.headroom)
            resources += manifests.topic_quota_manifests(
                topic_rows, topic_broker_rows, options.namespace, options.cluster_ref
            )
            out = options.out
            files = manifests.write_manifests(resources, out / "manifests", options.namespace, header)
            paths = []
            if options.report_format in ("json", "both"):
                paths.append(data.write_json_report(report, out / "report.json"))
            if options.report_format in ("parquet", "both"):
                paths += data.write_parquet_report(
                    {k: v.withColumn("generated_at", sf.lit(now.isoformat())) for k, v in tables.items()},
                    out / "report.parquet",
                )
            paths.append(page.write_html_report(report, out / "report.html", options.top_n))
            flagged_df.unpersist()
            recs_df.unpersist()
    clients.unpersist()
    if topics_df is not None:
        topics_df.unpersist()
    report["timings_seconds"] = {name: round(seconds, 3) for name, seconds in progress.steps}
    return AdviseResult(report["summary"], report, files, paths)
