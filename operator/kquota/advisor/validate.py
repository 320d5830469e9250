"""Validating the advisor's input: whatever a reader produced -> canonical types, or an error saying what to fix.

:func:`validate_clients` and :func:`validate_topics` turn whatever the reader
produced (CSV and JSON arrive as strings, Parquet typed) into the canonical
types of :mod:`kquota.advisor.schema`, or raise an :class:`InputError` subclass
whose message names the column, the expected type and an example of the bad
value. Nothing is silently coerced to null: a value that does not parse is an
error, not a missing sample. What is repaired rather than rejected is
:mod:`kquota.advisor.repair`'s.

Validation runs Spark actions (counts), so it is part of extraction, not of the
pure transformations in :mod:`kquota.advisor.transform`.
"""

from __future__ import annotations

import datetime as dt

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql import types as st

from kquota.advisor import repair
from kquota.advisor.params import SkewPolicy
from kquota.advisor.schema import (
    CLIENT_COLUMNS,
    CLIENT_KEY,
    CLIENT_METRICS,
    EXPECTED,
    THROTTLE_COLUMNS,
    TOPIC_COLUMNS,
    TOPIC_KEY,
    ColumnSpec,
    ColumnTypeError,
    EmptyInputError,
    InvalidValueError,
    MissingColumnsError,
    ValidationReport,
    normalise_name,
    spark_type,
)


def _type_name(data_type: object) -> str:
    simple = getattr(data_type, "simpleString", None)
    return str(simple()) if callable(simple) else str(data_type)


def _convert(what: str, spec: ColumnSpec, data_type: object, raw: Column) -> tuple[Column, Column | None]:
    """(converted column, "this raw value is bad" condition or None) for one input column."""

    numeric = (st.ByteType, st.ShortType, st.IntegerType, st.LongType, st.FloatType, st.DoubleType, st.DecimalType)
    found = f"type {_type_name(data_type)}"
    expected = EXPECTED[spec.kind]
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
        f"column {name}: {row[f'bad_{name}']} value(s) are not {EXPECTED[kinds[name]]}, e.g. {row[f'badx_{name}']!r}"
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
        clean = repair.nan_to_null(wide.select(*[c.name for c in columns]), metrics)
        clean, report.duplicates_dropped, report.conflicting_duplicates = repair.dedupe(clean, key, (*metrics, *extra))
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
        clean = repair.skew(what, clean, report, now or dt.datetime.now(dt.UTC), tolerance, skew)
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
