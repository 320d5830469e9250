"""Orchestration of ``kquota advise``: session, extract -> validate -> transform -> load, progress, summary.

This is the only module that decides *when* Spark computes: the pure
transforms in :mod:`kquota.advisor.transform` only describe DataFrames, and
here the validated samples are persisted until they are exploded into one row
per resource, which is persisted once for the statistics and the capacity
check; the small result tables are collected, and the outputs are written.

Progress: Spark's own console bar is switched off and :class:`Progress`
prints the step being computed and its stage progress (tasks done / total),
polling ``SparkContext.statusTracker()``; on a terminal it redraws one line,
otherwise it prints a line at most every few seconds.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from kquota.advisor import current, extract, load, schema, transform
from kquota.advisor.params import (
    Format,
    Params,
    ReportFormat,
    SkewPolicy,
    local_driver_memory,
    local_memory_problem,
    total_memory,
)

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


# --- Spark session and progress ------------------------------------------------------


class MemoryTooSmall(Exception):
    """Local mode cannot run in the memory this process may use; the message says what to change."""


def spark_session(
    master: str | None = None, app_name: str = "kquota-advise", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """The session to run on: the active one if there is one (tests, notebooks), else a new one.

    ``master`` None means ``local[*]``, except under spark-submit (which starts the JVM first and says
    so in ``PYSPARK_GATEWAY_PORT``), where the master and resources given to spark-submit apply.
    In local mode the driver's memory is half the machine's, or of the container's memory limit
    (see ``local_driver_memory`` and ``total_memory``), unless ``spark.driver.memory`` or
    ``SPARK_DRIVER_MEMORY`` says otherwise; with less than 2 GiB it raises :class:`MemoryTooSmall`.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Python workers must run this interpreter, which has kquota importable.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"
    if master:
        builder = builder.master(master)
    local = master is not None and master.startswith("local")
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        # A laptop's few cores want few shuffle partitions; a cluster keeps Spark's default.
        **({"spark.sql.shuffle.partitions": "8"} if local else {}),
    }
    if local and "spark.driver.memory" not in (conf or {}) and not os.environ.get("SPARK_DRIVER_MEMORY"):
        # Local mode's one JVM is driver and executors: size it from the machine (or the
        # container's memory limit), not Spark's 1g; refuse before starting a JVM that cannot fit.
        memory = total_memory()
        problem = local_memory_problem(memory)
        if problem is not None:
            raise MemoryTooSmall(problem)
        settings["spark.driver.memory"] = local_driver_memory(memory)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


class Progress:
    """Prints which step runs and the progress of its Spark stages, from a polling thread."""

    def __init__(
        self,
        spark: SparkSession | None,
        stream: TextIO | None = None,
        enabled: bool = True,
        interval: float = 0.5,
        line_every: float = 5.0,
    ) -> None:
        self._spark = spark
        self._stream = stream or sys.stderr
        self._enabled = enabled
        self._interval = interval
        self._line_every = line_every
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._step = ""
        self._step_started = time.monotonic()
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_line = 0.0
        self.steps: list[tuple[str, float]] = []

    def __enter__(self) -> Progress:
        if self._enabled and self._spark is not None:
            self._thread = threading.Thread(target=self._run, name="kquota-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_step()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._enabled and self._tty:
            self._stream.write("\r\033[K")
            self._stream.flush()

    def _close_step(self) -> None:
        if self._step:
            elapsed = time.monotonic() - self._step_started
            self.steps.append((self._step, elapsed))
            if self._enabled:
                prefix = "\r\033[K" if self._tty else ""
                self._stream.write(f"{prefix}  {self._step}: done in {elapsed:.1f} s\n")
                self._stream.flush()

    def step(self, name: str) -> None:
        self._close_step()
        self._step = name
        self._step_started = time.monotonic()
        if self._spark is not None:
            self._spark.sparkContext.setJobDescription(name)

    def _run(self) -> None:
        assert self._spark is not None
        tracker = self._spark.sparkContext.statusTracker()
        while not self._stop.wait(self._interval):
            try:
                infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:  # noqa: BLE001 - the context is shutting down; progress is best effort
                return
            stages = [s for s in infos if s is not None]
            if not stages:
                continue
            done = sum(s.numCompletedTasks for s in stages)
            total = sum(s.numTasks for s in stages)
            ids = ",".join(str(s.stageId) for s in stages)
            elapsed = time.monotonic() - self._step_started
            if self._tty:
                width = 24
                filled = int(width * done / total) if total else 0
                bar = "#" * filled + "-" * (width - filled)
                self._stream.write(f"\r\033[K  {self._step} [{bar}] stage {ids}: {done}/{total} tasks, {elapsed:.0f} s")
                self._stream.flush()
            elif time.monotonic() - self._last_line >= self._line_every:
                self._last_line = time.monotonic()
                self._stream.write(f"  {self._step}: stage {ids}: {done}/{total} tasks ({elapsed:.0f} s)\n")
                self._stream.flush()


# --- the pipeline ----------------------------------------------------------------------


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


def _capacity_lines(capacity: list[dict[str, Any]]) -> list[str]:
    """Brokers overloaded by their own traffic first, by name; quotas that merely add up to more, in one line."""

    known = [c for c in capacity if c["status"] != "unknown"]
    if not known:
        return ["capacity: not checked (pass --broker-capacity)"]

    def qty(c: Mapping[str, Any], key: str) -> str:
        return load.human_value(c["resource"], c[key])

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
    committed_over = [c for c in known if (c["oversubscription"] or 0) > 1]
    if committed_over:
        top = max(committed_over, key=lambda c: c["oversubscription"] or 0)
        lines.append(
            f"  quotas add up to more than the capacity on {len(committed_over)} of {len(known)} broker/resource "
            f"pair(s) (up to {top['oversubscription']:.2f}x on broker {top['broker']} {top['resource']}): "
            "they could overload a broker only if those clients peaked together"
        )
    return lines


def _spark_facts(spark: SparkSession) -> dict[str, Any]:
    """Where it ran and how much memory the driver JVM held at most (VmHWM; in local mode it did all the work)."""
    conf = spark.sparkContext.getConf()
    facts: dict[str, Any] = {
        "master": spark.sparkContext.master,
        "version": spark.version,
        "driver_memory": conf.get("spark.driver.memory", "1g"),
        "driver_peak_rss_mib": None,
    }
    try:
        jvm: Any = spark.sparkContext._jvm
        pid = int(jvm.java.lang.ProcessHandle.current().pid())
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                facts["driver_peak_rss_mib"] = round(int(line.split()[1]) / 1024)
    except (OSError, ValueError, AttributeError):
        pass  # not Linux, or no JVM handle (Spark Connect): the figure is left out, nothing else changes
    return facts


def _change_lines(changes: Mapping[str, Any], most: int = 10) -> list[str]:
    """The comparison with what is applied now: the counts, then the defaults and the largest changes."""
    lines = [current.summary_line(changes)]
    moved = [r for r in changes["rows"] if r["action"] != "keep"]

    def size(r: Mapping[str, Any]) -> float:
        return float("inf") if r["change_percent"] is None else abs(r["change_percent"])

    shown = sorted(moved, key=lambda r: (not r["is_default"], -size(r)))[:most]
    for r in shown:
        now = load.human_value(r["resource"], r["current"]) if r["current"] is not None else "not set"
        new = load.human_value(r["resource"], r["recommended"]) if r["recommended"] is not None else "not set"
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
            f"{d['resource']}: default {entity} = {load.human_value(d['resource'], d['quota'])} "
            f"(p{p['default_percentile'] * 100:g} of {d['population']} non-outlier p99s = "
            f"{load.human_value(d['resource'], d['basis'])}, + {headroom} headroom, rounded up)"
        )
    overrides = [r for r in report["recommendations"] if not r["is_default"]]
    for r in sorted(overrides, key=lambda r: (r["resource"], -(r["quota"] or 0)))[:15]:
        why = {"outlier": "outlier", "no-default": "no default for its population"}.get(
            r["reason"], "needs more than the default"
        )
        capped = (
            f"; throttled {r['throttled_share']:.0%} of the time, real demand is higher" if r["demand_capped"] else ""
        )
        lines.append(
            f"  override {r['entity']} {r['resource']} = {load.human_value(r['resource'], r['quota'])} "
            f"({why}: p99 {load.human_value(r['resource'], r['basis'])}{capped})"
        )
    if len(overrides) > 15:
        lines.append(f"  ... and {len(overrides) - 15} more overrides (see the report)")
    lines += _capacity_lines(report["capacity"])
    if report.get("topics"):
        lines.append(f"topics: {len(report['topics'])} TopicQuota budget(s) suggested (enforcement Monitor)")
    return "\n".join(lines)


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
        clients, client_report = schema.validate_clients(raw, now, options.skew_tolerance, options.skew)
        topic_report: schema.ValidationReport | None = None
        topics_df: DataFrame | None = None
        if inputs.topics:
            progress.step("validating topic samples")
            topics_fmt = options.format or extract.detect_format(inputs.topics)
            topics_df, topic_report = schema.validate_topics(
                extract.read(spark, inputs.topics, topics_fmt), now, options.skew_tolerance, options.skew
            )
        # The statistics group the samples as they are (a sorted array per resource in one group per
        # entity); only the capacity check reads them one row per resource. Both read the validated
        # samples' cache: exploding every sample into a second cache first cost more than it saved.
        # Re-keying (--level) is a shuffle of its own: cached too.
        samples = transform.regroup(clients, params.level)
        rekeyed = params.level != "as-measured"
        with _persisted(samples) if rekeyed else nullcontext(samples) as samples:
            usage = transform.usage_long(samples)
            progress.step("computing per-entity statistics and outliers")
            stats = transform.entity_stats_wide(samples)
            flagged_df = transform.flag_outliers(
                stats, params.outlier_alpha, params.outlier_top_k, params.min_population
            ).persist()
            flagged = _rows(flagged_df)
            if not flagged:
                raise schema.EmptyInputError("client samples: no usage values (every rate column is empty)")
            progress.step("recommending quotas")
            recs_df = transform.recommend(flagged_df, params).persist()
            recs = _rows(recs_df)
            progress.step("checking broker capacity")
            capacity_df = transform.capacity_check(usage, recs_df, params.capacity)
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
                per_topic, per_topic_broker = transform.topic_view(topics_df, params)
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
            report["spark"] = _spark_facts(spark)
            report["summary"] = summarise(report)
            header = (
                f"Generated by kquota advise at {now.isoformat()} from {client_report.rows_valid} samples "
                f"({inputs.clients}).\nReview before merging: see report.html for the reasoning."
            )
            manifests = load.client_quota_manifests(recs, options.namespace, options.cluster_ref, params.headroom)
            manifests += load.topic_quota_manifests(
                topic_rows, topic_broker_rows, options.namespace, options.cluster_ref
            )
            out = options.out
            files = load.write_manifests(manifests, out / "manifests", options.namespace, header)
            paths = []
            if options.report_format in ("json", "both"):
                paths.append(load.write_json_report(report, out / "report.json"))
            if options.report_format in ("parquet", "both"):
                paths += load.write_parquet_report(
                    {k: v.withColumn("generated_at", sf.lit(now.isoformat())) for k, v in tables.items()},
                    out / "report.parquet",
                )
            paths.append(load.write_html_report(report, out / "report.html", options.top_n))
            flagged_df.unpersist()
            recs_df.unpersist()
    clients.unpersist()
    if topics_df is not None:
        topics_df.unpersist()
    report["timings_seconds"] = {name: round(seconds, 3) for name, seconds in progress.steps}
    return AdviseResult(report["summary"], report, files, paths)
