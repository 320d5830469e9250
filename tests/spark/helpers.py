"""Small builders for inline advisor DataFrames: rows as dicts, canonical schema, defaults for the rest."""

from __future__ import annotations

import datetime as dt
from typing import Any

from kquota.advisor.schema import CLIENT_COLUMNS, TOPIC_COLUMNS, empty_frame_schema

T0 = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
#: A "now" safely after every inline sample, so the future-sample check never fires by accident.
NOW = T0 + dt.timedelta(days=1)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def clients(spark: Any, rows: list[dict[str, Any]]) -> Any:
    """Client samples in the canonical schema; missing keys are null, timestamp defaults to T0."""
    names = [c.name for c in CLIENT_COLUMNS]
    data = [tuple(({"timestamp": T0, "broker": "1"} | r).get(n) for n in names) for r in rows]
    return spark.createDataFrame(data, empty_frame_schema(CLIENT_COLUMNS))


def topics(spark: Any, rows: list[dict[str, Any]]) -> Any:
    names = [c.name for c in TOPIC_COLUMNS]
    data = [tuple(({"timestamp": T0, "broker": "1"} | r).get(n) for n in names) for r in rows]
    return spark.createDataFrame(data, empty_frame_schema(TOPIC_COLUMNS))


def series(
    user: str | None,
    values: list[float],
    resource_column: str = "produce_byte_rate",
    client_id: str | None = None,
    broker: str = "1",
    throttle: list[float] | None = None,
    throttle_column: str = "produce_throttle_time_ms",
    step: float = 10.0,
) -> list[dict[str, Any]]:
    """One sample per value, ``step`` seconds apart."""
    out = []
    for i, v in enumerate(values):
        row: dict[str, Any] = {
            "timestamp": at(i * step),
            "broker": broker,
            "user": user,
            "client_id": client_id,
            resource_column: v,
        }
        if throttle is not None:
            row[throttle_column] = throttle[i]
        out.append(row)
    return out
