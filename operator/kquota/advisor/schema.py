"""The advisor's input: column definitions, their documentation, and validation with clear errors.

Two kinds of usage samples go in:

* **client samples** (:data:`CLIENT_COLUMNS`): one row per (timestamp, broker,
  user, client_id), the per-broker rates Kafka measures for a quota bucket;
* **topic samples** (:data:`TOPIC_COLUMNS`, optional): one row per (timestamp,
  broker, topic), the broker's per-topic byte rates.

:func:`validate_clients` and :func:`validate_topics` turn whatever the reader
produced (CSV and JSON arrive as strings, Parquet typed) into the canonical
types, or raise an :class:`InputError` subclass whose message names the column,
the expected type and an example of the bad value. Nothing is silently coerced
to null: a value that does not parse is an error, not a missing sample.

What is *handled* rather than rejected, each counted in :class:`ValidationReport`:

* duplicate rows for one (timestamp, broker, user, client_id): merged into one
  row taking the largest value of each metric (a conservative choice: a quota
  derived from it is never lower than one derived from either copy);
* ``NaN`` metric values: treated as missing (Kafka reports ``NaN`` throttle time
  until the first throttle happens);
* empty strings in user / client_id / broker: treated as missing (Kafka's
  JmxReporter drops empty tags, so an empty label means "not part of the bucket");
* clock skew, by policy (:class:`SkewPolicy`): a broker whose timestamps are
  offset from the others by more than the tolerance, or samples in the future.

Validation runs Spark actions (counts), so it is part of extraction, not of the
pure transformations in :mod:`kquota.advisor.transform`.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Final, Literal

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql import types as st

from kquota.advisor.params import SKEW_POLICIES, SkewPolicy

__all__ = ["SKEW_POLICIES", "SkewPolicy"]

ColumnKind = Literal["timestamp", "string", "double", "int"]


@dataclass(frozen=True, slots=True)
class ColumnSpec:
    name: str
    kind: ColumnKind
    required: bool
    doc: str


CLIENT_KEY: Final = ("timestamp", "broker", "user", "client_id")
TOPIC_KEY: Final = ("timestamp", "broker", "topic")

#: Metric columns of client samples, with the throttle column that says whether the sample was throttled.
CLIENT_METRICS: Final = ("produce_byte_rate", "fetch_byte_rate", "request_time")
THROTTLE_COLUMNS: Final = ("produce_throttle_time_ms", "fetch_throttle_time_ms", "request_throttle_time_ms")
#: resource name -> (usage column, throttle column)
RESOURCES: Final[dict[str, tuple[str, str]]] = {
    "produce": ("produce_byte_rate", "produce_throttle_time_ms"),
    "fetch": ("fetch_byte_rate", "fetch_throttle_time_ms"),
    "request": ("request_time", "request_throttle_time_ms"),
}

CLIENT_COLUMNS: Final[tuple[ColumnSpec, ...]] = (
    ColumnSpec(
        "timestamp",
        "timestamp",
        True,
        "When the sample was taken. A timestamp, an ISO-8601 string ('2024-05-01T10:00:00Z'; no offset "
        "means UTC) or a number of seconds since the Unix epoch.",
    ),
    ColumnSpec("broker", "string", True, "The broker that measured the sample (node id or host:port)."),
    ColumnSpec(
        "user",
        "string",
        True,
        "The quota bucket's user principal as Kafka names it (SASL username, TLS principal). Empty when the "
        "bucket has no user part (a client-id level quota).",
    ),
    ColumnSpec(
        "client_id",
        "string",
        True,
        "The bucket's client.id. Empty when the bucket has no client-id part (a user level quota).",
    ),
    ColumnSpec(
        "produce_byte_rate",
        "double",
        True,
        "Produce bytes per second on this broker (Kafka's Produce byte-rate); empty if not measured.",
    ),
    ColumnSpec(
        "fetch_byte_rate",
        "double",
        True,
        "Fetch bytes per second on this broker (Kafka's Fetch byte-rate); empty if not measured.",
    ),
    ColumnSpec(
        "request_time",
        "double",
        False,
        "Request handler time in percent of one thread (Kafka's Request request-time, the unit of request_percentage).",
    ),
    ColumnSpec("produce_throttle_time_ms", "double", False, "Average produce throttle time, ms (0 or NaN: none)."),
    ColumnSpec("fetch_throttle_time_ms", "double", False, "Average fetch throttle time, ms (0 or NaN: none)."),
    ColumnSpec("request_throttle_time_ms", "double", False, "Average request throttle time, ms (0 or NaN: none)."),
)

TOPIC_COLUMNS: Final[tuple[ColumnSpec, ...]] = (
    ColumnSpec("timestamp", "timestamp", True, "When the sample was taken (as for client samples)."),
    ColumnSpec("broker", "string", True, "The broker that measured the sample."),
    ColumnSpec("topic", "string", True, "The topic."),
    ColumnSpec("bytes_in_rate", "double", True, "Bytes per second produced into the topic on this broker."),
    ColumnSpec("bytes_out_rate", "double", True, "Bytes per second fetched from the topic on this broker."),
    ColumnSpec("partitions", "int", False, "The topic's partition count (for KIP-1010 per-broker allowances)."),
    ColumnSpec("leader_partitions", "int", False, "How many of the topic's partition leaders this broker hosts."),
)

_EXPECTED: Final[dict[ColumnKind, str]] = {
    "timestamp": "timestamp (a timestamp, an ISO-8601 string or epoch seconds)",
    "string": "string",
    "double": "double (a number)",
    "int": "int (a whole number)",
}

# Column names as people write them: "client-id", "clientId", "Client ID" all mean client_id.
_ALIASES: Final = {"clientid": "client_id", "client": "client_id", "time": "timestamp", "ts": "timestamp"}


# --- errors ---------------------------------------------------------------------


class InputError(ValueError):
    """The input cannot be analysed as it is; the message says what to fix."""


class EmptyInputError(InputError):
    pass


class MissingColumnsError(InputError):
    def __init__(self, what: str, missing: list[str], present: list[str]) -> None:
        self.missing = missing
        super().__init__(
            f"{what}: missing required column(s) {', '.join(missing)}; the input has {', '.join(present) or 'none'}"
        )


class ColumnTypeError(InputError):
    """A column's type, or some of its values, are not what the column needs."""

    def __init__(self, message: str, column: str) -> None:
        self.column = column
        super().__init__(message)


class InvalidValueError(InputError):
    pass


class ClockSkewError(InputError):
    pass


# --- report ---------------------------------------------------------------------


@dataclass
class ValidationReport:
    """What validation found and did, for the summary and the machine-readable report."""

    rows_read: int = 0
    rows_valid: int = 0
    duplicates_dropped: int = 0
    conflicting_duplicates: int = 0
    nan_values: int = 0
    future_dropped: int = 0
    broker_offsets_seconds: dict[str, float] = field(default_factory=dict)
    brokers_aligned: dict[str, float] = field(default_factory=dict)
    first_timestamp: str | None = None
    last_timestamp: str | None = None
    brokers: int = 0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "rows_read": self.rows_read,
            "rows_valid": self.rows_valid,
            "duplicates_dropped": self.duplicates_dropped,
            "conflicting_duplicates": self.conflicting_duplicates,
            "nan_values": self.nan_values,
            "future_dropped": self.future_dropped,
            "broker_offsets_seconds": self.broker_offsets_seconds,
            "brokers_aligned": self.brokers_aligned,
            "first_timestamp": self.first_timestamp,
            "last_timestamp": self.last_timestamp,
            "brokers": self.brokers,
            "notes": self.notes,
        }


# --- helpers --------------------------------------------------------------------


def normalise_name(name: str) -> str:
    """``Client-ID`` / ``clientId`` / ``client id`` -> ``client_id``."""
    out = ""
    for i, ch in enumerate(name.strip()):
        if ch.isupper() and i > 0 and name[i - 1].islower():
            out += "_"
        out += ch.lower()
    out = out.replace("-", "_").replace(" ", "_")
    return _ALIASES.get(out.replace("_", ""), out)


def spark_type(kind: ColumnKind) -> str:
    return {"timestamp": "timestamp", "string": "string", "double": "double", "int": "int"}[kind]


def empty_frame_schema(columns: tuple[ColumnSpec, ...]) -> str:
    """A DDL schema string of the canonical columns (for empty frames in tests and the collector)."""
    return ", ".join(f"{c.name} {spark_type(c.kind)}" for c in columns)


def _type_name(data_type: object) -> str:
    simple = getattr(data_type, "simpleString", None)
    return str(simple()) if callable(simple) else str(data_type)


def _convert(what: str, spec: ColumnSpec, data_type: object, raw: Column) -> tuple[Column, Column | None]:
    """(converted column, "this raw value is bad" condition or None) for one input column."""

    numeric = (st.ByteType, st.ShortType, st.IntegerType, st.LongType, st.FloatType, st.DoubleType, st.DecimalType)
    found = f"type {_type_name(data_type)}"
    expected = _EXPECTED[spec.kind]
    if spec.kind == "string":
        if isinstance(data_type, st.StringType):
            trimmed = sf.trim(raw)
            return sf.when(trimmed == "", sf.lit(None)).otherwise(raw), None
        if isinstance(data_type, numeric):
            # A broker id stored as a number is still an unambiguous name.
            return raw.cast("string"), None
        raise ColumnTypeError(f"{what}: column {spec.name} has {found}, expected {expected}", spec.name)
    if spec.kind == "timestamp":
        if isinstance(data_type, st.TimestampType | st.TimestampNTZType | st.DateType):
            return raw.cast("timestamp"), None
        if isinstance(data_type, numeric):
            return sf.timestamp_seconds(raw.cast("double")), None
        if isinstance(data_type, st.StringType):
            text = sf.trim(raw)
            parsed = sf.when(
                text.rlike(r"^[0-9]+(\.[0-9]+)?$"), sf.timestamp_seconds(text.try_cast("double"))
            ).otherwise(text.try_cast("timestamp"))
            return parsed, raw.isNotNull() & (text != "") & parsed.isNull()
        raise ColumnTypeError(f"{what}: column {spec.name} has {found}, expected {expected}", spec.name)
    target = "double" if spec.kind == "double" else "int"
    if isinstance(data_type, numeric):
        if spec.kind == "int" and isinstance(data_type, st.FloatType | st.DoubleType | st.DecimalType):
            converted = raw.cast("double")
            return converted.cast("int"), raw.isNotNull() & (converted != sf.floor(converted))
        return raw.cast(target), None
    if isinstance(data_type, st.StringType):
        text = sf.trim(raw)
        as_double = text.try_cast("double")
        if spec.kind == "int":
            bad = raw.isNotNull() & (text != "") & (as_double.isNull() | (as_double != sf.floor(as_double)))
            return as_double.cast("int"), bad
        # "NaN" and "Infinity" parse as doubles; NaN means missing, Infinity is caught later.
        return as_double, raw.isNotNull() & (text != "") & as_double.isNull()
    raise ColumnTypeError(f"{what}: column {spec.name} has {found}, expected {expected}", spec.name)


def _conform(what: str, df: DataFrame, columns: tuple[ColumnSpec, ...]) -> tuple[DataFrame, list[str]]:
    """Canonical columns converted, plus ``_bad_<col>`` / ``_raw_<col>`` helper columns for values that did
    not parse; returns (frame, names of the checked columns). Raises on missing columns and wrong types."""
    by_name: dict[str, str] = {}
    for column in df.columns:
        by_name.setdefault(normalise_name(column), column)
    missing = [c.name for c in columns if c.required and c.name not in by_name]
    if missing:
        raise MissingColumnsError(what, missing, list(df.columns))
    types = {f.name: f.dataType for f in df.schema.fields}
    selected: list[Column] = []
    checked: list[str] = []
    for spec in columns:
        original = by_name.get(spec.name)
        if original is None:
            selected.append(sf.lit(None).cast(spark_type(spec.kind)).alias(spec.name))
            continue
        raw = sf.col(f"`{original}`")
        converted, bad = _convert(what, spec, types[original], raw)
        selected.append(converted.alias(spec.name))
        if bad is not None:
            checked.append(spec.name)
            selected += [bad.alias(f"_bad_{spec.name}"), raw.cast("string").alias(f"_raw_{spec.name}")]
    return df.select(*selected), checked


def _check(
    what: str,
    wide: DataFrame,
    columns: tuple[ColumnSpec, ...],
    checked: list[str],
    metrics: tuple[str, ...],
    key_checks: list[tuple[str, Column]],
) -> tuple[int, int]:
    """One pass over the input: values that do not parse, empty input, negative or infinite metrics, rows
    without a key. Raises with every problem found; returns (rows, NaN values)."""
    aggs: list[Column] = [sf.count(sf.lit(1)).alias("rows")]
    for name in checked:
        aggs.append(sf.sum(sf.when(sf.col(f"_bad_{name}"), 1).otherwise(0)).alias(f"bad_{name}"))
        aggs.append(sf.min(sf.when(sf.col(f"_bad_{name}"), sf.col(f"_raw_{name}"))).alias(f"badx_{name}"))
    for name in metrics:
        c = sf.col(name)
        aggs.append(sf.sum(sf.when(sf.isnan(c), 1).otherwise(0)).alias(f"nan_{name}"))
        aggs.append(sf.sum(sf.when(~sf.isnan(c) & (c < 0), 1).otherwise(0)).alias(f"neg_{name}"))
        aggs.append(sf.min(sf.when(~sf.isnan(c) & (c < 0), c)).alias(f"negx_{name}"))
        aggs.append(sf.sum(sf.when(c == float("inf"), 1).otherwise(0)).alias(f"inf_{name}"))
    for i, (_label, cond) in enumerate(key_checks):
        aggs.append(sf.sum(sf.when(cond, 1).otherwise(0)).alias(f"key_{i}"))
    row = wide.agg(*aggs).first()
    assert row is not None
    if not row["rows"]:
        raise EmptyInputError(f"{what}: the input has no rows")
    kinds = {c.name: c.kind for c in columns}
    type_problems = [
        f"column {name}: {row[f'bad_{name}']} value(s) are not {_EXPECTED[kinds[name]]}, e.g. {row[f'badx_{name}']!r}"
        for name in checked
        if row[f"bad_{name}"]
    ]
    if type_problems:
        first = next(name for name in checked if row[f"bad_{name}"])
        raise ColumnTypeError(f"{what}: " + "; ".join(type_problems), first)
    problems = [f"{row[f'key_{i}']} row(s) {label}" for i, (label, _c) in enumerate(key_checks) if row[f"key_{i}"]]
    for name in metrics:
        if row[f"neg_{name}"]:
            problems.append(f"column {name}: {row[f'neg_{name}']} negative value(s), e.g. {row[f'negx_{name}']}")
        if row[f"inf_{name}"]:
            problems.append(f"column {name}: {row[f'inf_{name}']} infinite value(s)")
    if problems:
        raise InvalidValueError(f"{what}: " + "; ".join(problems))
    return int(row["rows"]), int(sum(row[f"nan_{name}"] or 0 for name in metrics))


def _nan_to_null(df: DataFrame, metrics: tuple[str, ...]) -> DataFrame:
    return df.withColumns({m: sf.when(sf.isnan(sf.col(m)), sf.lit(None)).otherwise(sf.col(m)) for m in metrics})


def _dedupe(df: DataFrame, key: tuple[str, ...], values: tuple[str, ...]) -> tuple[DataFrame, int, int]:
    """Merge rows sharing a key (largest value of each column); count dropped rows and conflicting keys."""
    n = sf.count(sf.lit(1))

    def surplus(*by: Column) -> int:
        counted = df.groupBy(*by).agg(n.alias("_n")).agg(sf.sum(sf.col("_n") - 1).alias("dropped")).first()
        return int((counted["dropped"] if counted is not None else 0) or 0)

    # Most inputs have no duplicates. Rows with the same key have the same 64-bit hash of it, so no two
    # rows sharing a hash means no duplicates, exactly; grouping by one long instead of four columns
    # (two of them strings) shuffles a third of the bytes: 15 s instead of 44 s at 10M samples here.
    # A shared hash is a duplicate or (rarely) a collision: only then count over the key itself.
    if surplus(sf.xxhash64(*key)) == 0:
        return df, 0, 0
    dropped = surplus(*[sf.col(k) for k in key])
    if dropped == 0:
        return df, 0, 0
    # The copies of a key conflict when they disagree on some value: different values, or some null and some not.
    # (max/min/count only: countDistinct per column would make Spark expand every row once per column.)
    conflict = sf.lit(False)
    for m in values:
        conflict = conflict | (sf.max(m) != sf.min(m)) | ((sf.count(m) > 0) & (sf.count(m) < n))
    grouped = df.groupBy(*key).agg(*[sf.max(m).alias(m) for m in values], conflict.alias("_conflict"))
    conflicts = grouped.agg(sf.sum(sf.when(sf.col("_conflict"), 1).otherwise(0)).alias("conf")).first()
    assert conflicts is not None
    return grouped.select(*df.columns), dropped, int(conflicts["conf"] or 0)


def _epoch() -> Column:
    return sf.unix_micros(sf.col("timestamp")) / 1e6


def _skew(
    what: str,
    df: DataFrame,
    report: ValidationReport,
    now: dt.datetime,
    tolerance: dt.timedelta,
    policy: SkewPolicy,
) -> DataFrame:
    """Detect brokers whose clocks are offset from the others and samples from the future; apply the policy.

    A broker's offset is its median sample time minus the median of all brokers' medians; more than the
    tolerance either way is skew. ``error`` raises, ``align`` shifts the broker by its offset, ``ignore``
    keeps the timestamps. Then samples more than the tolerance after ``now``: ``error`` raises, ``align``
    drops them, ``ignore`` keeps them.
    """
    tol = tolerance.total_seconds()
    limit = now.timestamp() + tol
    per_broker = (
        df.groupBy("broker")
        .agg(
            sf.percentile_approx(_epoch(), 0.5, 10000).alias("median"),
            sf.sum(sf.when(_epoch() > limit, 1).otherwise(0)).alias("future"),
        )
        .collect()
    )
    report.brokers = len(per_broker)
    medians = sorted(float(r["median"]) for r in per_broker)
    reference = medians[(len(medians) - 1) // 2]
    offsets = {str(r["broker"]): float(r["median"]) - reference for r in per_broker}
    skewed = {b: o for b, o in offsets.items() if abs(o) > tol} if len(per_broker) > 1 else {}
    report.broker_offsets_seconds = {b: round(o, 3) for b, o in sorted(skewed.items())}
    if skewed and policy == "error":
        detail = ", ".join(f"broker {b} by {o:+.0f} s" for b, o in sorted(skewed.items()))
        raise ClockSkewError(
            f"{what}: broker timestamps are offset from the other brokers' (median sample time differs by more "
            f"than {tol:.0f} s): {detail}. If the brokers' clocks were wrong, rerun with --clock-skew align to "
            "shift each offset broker onto the others; if the brokers really cover different periods, use "
            "--clock-skew ignore."
        )
    n_future = sum(int(r["future"]) for r in per_broker)
    if skewed and policy == "align":
        shift = sf.lit(0.0)
        for b, o in skewed.items():
            shift = sf.when(sf.col("broker") == b, sf.lit(-o)).otherwise(shift)
        df = df.withColumn("timestamp", sf.timestamp_micros((sf.unix_micros("timestamp") + shift * 1e6).cast("long")))
        report.brokers_aligned = {b: round(-o, 3) for b, o in sorted(skewed.items())}
        report.notes.append(
            "shifted broker(s) "
            + ", ".join(f"{b} by {-o:+.0f} s" for b, o in sorted(skewed.items()))
            + " to align with the other brokers (--clock-skew align)"
        )
        # Shifting moves samples into or out of the future: count again.
        n_future = df.filter(_epoch() > limit).count()
    if n_future and policy == "error":
        raise ClockSkewError(
            f"{what}: {n_future} sample(s) are more than {tol:.0f} s in the future (now is {now.isoformat()}): "
            "a broker or collector clock is wrong. Fix the clock, or rerun with --clock-skew align to drop them "
            "(and align offset brokers)."
        )
    if n_future and policy == "align":
        df = df.filter(_epoch() <= limit)
        report.future_dropped = n_future
        report.notes.append(f"dropped {n_future} sample(s) more than {tol:.0f} s in the future")
    return df


def _validate(
    what: str,
    df: DataFrame,
    columns: tuple[ColumnSpec, ...],
    key: tuple[str, ...],
    metrics: tuple[str, ...],
    extra: tuple[str, ...],
    key_checks: list[tuple[str, Column]],
    now: dt.datetime | None,
    tolerance: dt.timedelta,
    skew: SkewPolicy,
) -> tuple[DataFrame, ValidationReport]:
    if not df.columns:
        raise EmptyInputError(f"{what}: the input has no columns (is the file empty?)")
    report = ValidationReport()
    wide, checked = _conform(what, df, columns)
    # Parse the input once: the checks, the duplicate count and the skew check all read it.
    wide = wide.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        report.rows_read, report.nan_values = _check(what, wide, columns, checked, (*metrics, *extra), key_checks)
        clean = _nan_to_null(wide.select(*[c.name for c in columns]), metrics)
        clean, report.duplicates_dropped, report.conflicting_duplicates = _dedupe(clean, key, (*metrics, *extra))
        if report.duplicates_dropped:
            report.notes.append(
                f"merged {report.duplicates_dropped} duplicate row(s) for the same ({', '.join(key)})"
                + (
                    f", {report.conflicting_duplicates} key(s) with differing values (kept the largest value of "
                    "each metric)"
                    if report.conflicting_duplicates
                    else ""
                )
            )
        if report.nan_values:
            report.notes.append(f"treated {report.nan_values} NaN metric value(s) as missing")
        clean = _skew(what, clean, report, now or dt.datetime.now(dt.UTC), tolerance, skew)
        clean = clean.persist(StorageLevel.MEMORY_AND_DISK)
        row = clean.agg(sf.count(sf.lit(1)), sf.min("timestamp"), sf.max("timestamp")).first()
    finally:
        wide.unpersist()
    assert row is not None
    report.rows_valid = int(row[0])
    if not report.rows_valid:
        clean.unpersist()
        raise EmptyInputError(f"{what}: no samples left after validation ({'; '.join(report.notes)})")
    report.first_timestamp = row[1].isoformat() if row[1] else None
    report.last_timestamp = row[2].isoformat() if row[2] else None
    return clean, report


def validate_clients(
    df: DataFrame,
    now: dt.datetime | None = None,
    tolerance: dt.timedelta = dt.timedelta(minutes=5),
    skew: SkewPolicy = "error",
    what: str = "client samples",
) -> tuple[DataFrame, ValidationReport]:
    """Client samples in any reader's types -> canonical, checked, de-duplicated samples and a report.

    The returned DataFrame is persisted (the pipeline reads it several times); ``unpersist()`` it when done.
    """
    return _validate(
        what,
        df,
        CLIENT_COLUMNS,
        CLIENT_KEY,
        (*CLIENT_METRICS, *THROTTLE_COLUMNS),
        (),
        [
            ("have no timestamp", sf.col("timestamp").isNull()),
            ("have no broker", sf.col("broker").isNull()),
            ("have neither user nor client_id", sf.col("user").isNull() & sf.col("client_id").isNull()),
        ],
        now,
        tolerance,
        skew,
    )


def validate_topics(
    df: DataFrame,
    now: dt.datetime | None = None,
    tolerance: dt.timedelta = dt.timedelta(minutes=5),
    skew: SkewPolicy = "error",
    what: str = "topic samples",
) -> tuple[DataFrame, ValidationReport]:
    """Topic samples -> canonical, checked, de-duplicated samples and a report (same rules as clients)."""
    return _validate(
        what,
        df,
        TOPIC_COLUMNS,
        TOPIC_KEY,
        ("bytes_in_rate", "bytes_out_rate"),
        ("partitions", "leader_partitions"),
        [
            ("have no timestamp", sf.col("timestamp").isNull()),
            ("have no broker", sf.col("broker").isNull()),
            ("have no topic", sf.col("topic").isNull()),
        ],
        now,
        tolerance,
        skew,
    )
