"""Bad input: each problem is a clear error naming the column (or a documented, counted repair)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import types as st
from pyspark.testing import assertDataFrameEqual, assertSchemaEqual

from kquota.advisor import extract, schema
from kquota.advisor.schema import (
    ClockSkewError,
    ColumnTypeError,
    EmptyInputError,
    InvalidValueError,
    MissingColumnsError,
)
from kquota.advisor.validate import validate_clients, validate_topics
from tests.spark.helpers import NOW, T0, at, clients

pytestmark = pytest.mark.spark

CSV_HEADER = ["timestamp", "broker", "user", "client-id", "produce_byte_rate", "fetch_byte_rate"]


def as_csv(spark: Any, rows: list[tuple[str | None, ...]], header: list[str] | None = None) -> Any:
    """What the CSV reader produces: every column a string."""
    cols = header or CSV_HEADER
    return spark.createDataFrame(rows, ", ".join(f"`{c}` string" for c in cols))


def validate(df: Any, **kwargs: Any) -> tuple[Any, schema.ValidationReport]:
    kwargs.setdefault("now", NOW)
    return validate_clients(df, **kwargs)


def test_string_columns_become_the_canonical_schema_and_names_are_normalised(spark: Any) -> None:
    df = as_csv(
        spark,
        [("2024-05-01T00:00:00Z", "1", "alice", "", "1024", "2048.5")],
        ["Timestamp", "broker", "user", "clientId", "produce_byte_rate", "fetch-byte-rate"],
    )
    clean, report = validate(df)
    expected = st.StructType(
        [st.StructField("timestamp", st.TimestampType())]
        + [st.StructField(n, st.StringType()) for n in ("broker", "user", "client_id")]
        + [st.StructField(c.name, st.DoubleType()) for c in schema.CLIENT_COLUMNS[4:]]
    )
    assertSchemaEqual(clean.schema, expected)
    # The empty client-id is missing (no client-id part), not a client named "".
    assertDataFrameEqual(
        clean.select("timestamp", "user", "client_id", "produce_byte_rate", "fetch_byte_rate"),
        spark.createDataFrame(
            [(T0, "alice", None, 1024.0, 2048.5)],
            "timestamp timestamp, user string, client_id string, produce_byte_rate double, fetch_byte_rate double",
        ),
    )
    assert (report.rows_read, report.rows_valid, report.brokers) == (1, 1, 1)


def test_epoch_seconds_are_accepted_as_timestamps(spark: Any) -> None:
    df = as_csv(spark, [(str(int(T0.timestamp())), "1", "alice", None, "1", "1")])
    clean, _ = validate(df)
    row = clean.first()
    assert row is not None
    assert row["timestamp"].replace(tzinfo=dt.UTC) == T0


def test_missing_required_columns_are_named(spark: Any) -> None:
    df = as_csv(spark, [("2024-05-01T00:00:00Z", "1")], ["timestamp", "broker"])
    with pytest.raises(
        MissingColumnsError,
        match=r"missing required column\(s\) user, client_id, produce_byte_rate, "
        r"fetch_byte_rate; the input has timestamp, broker",
    ):
        validate(df)


def test_a_column_of_the_wrong_type_is_named_with_the_expected_type(spark: Any) -> None:
    df = spark.createDataFrame(
        [(T0, "1", "alice", None, True, 1.0)],
        "timestamp timestamp, broker string, user string, client_id string, produce_byte_rate boolean, "
        "fetch_byte_rate double",
    )
    with pytest.raises(ColumnTypeError, match=r"column produce_byte_rate has type boolean, expected double"):
        validate(df)


def test_values_that_are_not_numbers_are_counted_with_an_example(spark: Any) -> None:
    df = as_csv(
        spark,
        [
            ("2024-05-01T00:00:00Z", "1", "alice", None, "12k", "1"),
            ("2024-05-01T00:00:10Z", "1", "alice", None, "abc", "1"),
            ("2024-05-01T00:00:20Z", "1", "alice", None, "5", "1"),
        ],
    )
    with pytest.raises(
        ColumnTypeError,
        match=r"column produce_byte_rate: 2 value\(s\) are not double \(a number\), "
        r"e.g. '12k'",
    ) as info:
        validate(df)
    assert info.value.column == "produce_byte_rate"


def test_timestamps_that_do_not_parse_are_reported(spark: Any) -> None:
    df = as_csv(spark, [("yesterday", "1", "alice", None, "1", "1")])
    with pytest.raises(ColumnTypeError, match=r"column timestamp: 1 value\(s\) are not timestamp.*'yesterday'"):
        validate(df)


def test_input_without_rows_is_an_error(spark: Any) -> None:
    with pytest.raises(EmptyInputError, match="no rows"):
        validate(as_csv(spark, []))


def test_input_without_columns_is_an_error(spark: Any) -> None:
    with pytest.raises(EmptyInputError, match="no columns"):
        validate(spark.createDataFrame([], st.StructType([])))


def test_an_empty_file_is_an_error_before_spark_reads_it(tmp_path: Path) -> None:
    empty = tmp_path / "samples.csv"
    empty.write_text("")
    with pytest.raises(EmptyInputError, match="empty file"):
        extract.locate(str(empty), None, None)


def test_an_empty_directory_is_an_error(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    with pytest.raises(EmptyInputError, match="no parquet data"):
        extract.read(spark, str(tmp_path / "in"), "parquet")


def test_rows_whose_keys_hash_alike_are_not_duplicates(spark: Any) -> None:
    """Duplicates are found by a hash of the key first; a shared hash alone merges nothing."""
    from pyspark.sql import functions as sf

    rows = [
        {"user": "x", "client_id": None, "produce_byte_rate": 10.0},
        {"user": None, "client_id": "x", "produce_byte_rate": 20.0},
    ]
    df = clients(spark, rows)
    # The premise: xxhash64 skips nulls, so these two different keys share a hash.
    hashes = {r[0] for r in df.select(sf.xxhash64("timestamp", "broker", "user", "client_id")).collect()}
    assert len(hashes) == 1
    clean, report = validate(df)
    assert (report.rows_valid, report.duplicates_dropped, report.conflicting_duplicates) == (2, 0, 0)
    assert report.notes == []
    assert clean.count() == 2


def test_duplicate_rows_are_merged_keeping_the_largest_value_and_counted(spark: Any) -> None:
    rows = [
        {"user": "alice", "produce_byte_rate": 10.0, "fetch_byte_rate": 1.0},
        {"user": "alice", "produce_byte_rate": 10.0, "fetch_byte_rate": 1.0},  # identical copy
        {"user": "bob", "produce_byte_rate": 10.0},
        {"user": "bob", "produce_byte_rate": 30.0},  # conflicting copy
        {"user": "bob", "produce_byte_rate": 20.0, "timestamp": at(10)},  # another time: not a duplicate
    ]
    clean, report = validate(clients(spark, rows))
    assert (report.rows_read, report.rows_valid) == (5, 3)
    assert (report.duplicates_dropped, report.conflicting_duplicates) == (2, 1)
    assert any("merged 2 duplicate row(s)" in n for n in report.notes)
    assertDataFrameEqual(
        clean.select("timestamp", "user", "produce_byte_rate"),
        spark.createDataFrame(
            [(T0, "alice", 10.0), (T0, "bob", 30.0), (at(10), "bob", 20.0)],
            "timestamp timestamp, user string, produce_byte_rate double",
        ),
    )


def test_nan_is_a_missing_value_and_counted(spark: Any) -> None:
    rows = [{"user": "alice", "produce_byte_rate": 5.0, "produce_throttle_time_ms": float("nan")}]
    clean, report = validate(clients(spark, rows))
    assert report.nan_values == 1
    row = clean.first()
    assert row is not None
    assert row["produce_throttle_time_ms"] is None


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"user": "alice", "produce_byte_rate": -1.0}, r"column produce_byte_rate: 1 negative value\(s\), e.g. -1.0"),
        ({"user": "alice", "fetch_byte_rate": float("inf")}, r"column fetch_byte_rate: 1 infinite value\(s\)"),
        ({"user": None, "client_id": None, "produce_byte_rate": 1.0}, r"1 row\(s\) have neither user nor client_id"),
        ({"user": "alice", "broker": None, "produce_byte_rate": 1.0}, r"1 row\(s\) have no broker"),
    ],
)
def test_impossible_values_are_errors(spark: Any, row: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidValueError, match=message):
        validate(clients(spark, [row]))


def two_brokers(offset_seconds: float) -> list[dict[str, Any]]:
    rows = []
    for i in range(5):
        rows.append({"timestamp": at(10 * i), "broker": "1", "user": "alice", "produce_byte_rate": 1.0})
        rows.append({"timestamp": at(10 * i), "broker": "3", "user": "alice", "produce_byte_rate": 1.0})
        rows.append(
            {"timestamp": at(10 * i + offset_seconds), "broker": "2", "user": "alice", "produce_byte_rate": 1.0}
        )
    return rows


def test_a_broker_with_an_offset_clock_is_an_error_by_default(spark: Any) -> None:
    with pytest.raises(ClockSkewError, match=r"broker 2 by \+3600 s.*--clock-skew align"):
        validate(clients(spark, two_brokers(3600)))


def test_align_shifts_the_offset_broker_onto_the_others(spark: Any) -> None:
    clean, report = validate(clients(spark, two_brokers(3600)), skew="align")
    assert report.brokers_aligned == {"2": -3600.0}
    times = {
        r["broker"]: r["t"]
        for r in clean.groupBy("broker").agg({"timestamp": "max"}).withColumnRenamed("max(timestamp)", "t").collect()
    }
    assert times["1"] == times["2"] == times["3"]


def test_ignore_keeps_offset_timestamps_and_small_offsets_are_tolerated(spark: Any) -> None:
    _, report = validate(clients(spark, two_brokers(3600)), skew="ignore")
    assert report.broker_offsets_seconds == {"2": 3600.0}
    assert report.brokers_aligned == {}
    _, report = validate(clients(spark, two_brokers(30)))
    assert report.broker_offsets_seconds == {}


def test_samples_from_the_future_are_an_error_or_dropped_with_align(spark: Any) -> None:
    rows = [
        {"timestamp": at(0), "user": "alice", "produce_byte_rate": 1.0},
        {"timestamp": at(10), "user": "alice", "produce_byte_rate": 1.0},
        {"timestamp": at(7200), "user": "alice", "produce_byte_rate": 1.0},
    ]
    now = at(60)
    with pytest.raises(ClockSkewError, match=r"1 sample\(s\) are more than 300 s in the future"):
        validate(clients(spark, rows), now=now)
    clean, report = validate(clients(spark, rows), now=now, skew="align")
    assert (report.future_dropped, report.rows_valid, clean.count()) == (1, 2, 2)


def test_topic_samples_are_validated_the_same_way(spark: Any) -> None:
    df = spark.createDataFrame(
        [(T0, "1", "orders", "x")], "timestamp timestamp, broker string, topic string, bytes_in_rate string"
    )
    with pytest.raises(MissingColumnsError, match="bytes_out_rate"):
        validate_topics(df, now=NOW)
    df = spark.createDataFrame(
        [(T0, "1", "orders", "x", "1")],
        "timestamp timestamp, broker string, topic string, bytes_in_rate string, bytes_out_rate string",
    )
    with pytest.raises(ColumnTypeError, match="bytes_in_rate: 1 value"):
        validate_topics(df, now=NOW)
