"""The advisor's input: the columns of client and topic samples with their documentation, the errors
input that breaks them raises, and the report of what validation did.

Two kinds of usage samples go in:

* **client samples** (:data:`CLIENT_COLUMNS`): one row per (timestamp, broker,
  user, client_id), the per-broker rates Kafka measures for a quota bucket;
* **topic samples** (:data:`TOPIC_COLUMNS`, optional): one row per (timestamp,
  broker, topic), the broker's per-topic byte rates.

:mod:`kquota.advisor.validate` checks input against them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

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

EXPECTED: Final[dict[ColumnKind, str]] = {
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
