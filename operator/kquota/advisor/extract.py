"""Reading usage samples: Parquet, CSV or JSON files (or directories of them) into DataFrames.

The readers never guess types from the data: CSV is read with every column a
string, JSON with every scalar a string (``primitivesAsString``), and Parquet
with the types in its footer. :mod:`kquota.advisor.validate` then converts the
columns and names the ones that do not fit, so a typo in one value is an error
with an example, never a column that quietly became null.

``kquota collect`` writes a directory with ``clients/`` and ``topics/``
subdirectories; :func:`locate` finds them, so ``--input DIR`` is enough.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pyspark.sql import DataFrame, SparkSession

from kquota.advisor.params import FORMATS, Format
from kquota.advisor.schema import EmptyInputError, InputError

__all__ = ["FORMATS", "Format", "Inputs", "detect_format", "locate", "read"]
_SUFFIXES: Final[dict[str, Format]] = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
}


@dataclass(frozen=True, slots=True)
class Inputs:
    clients: str
    topics: str | None
    format: Format


def _is_remote(path: str) -> bool:
    # s3a://, hdfs://, gs://, abfs://: only Spark can look inside, so trust the caller.
    return "://" in path and not path.startswith("file://")


def detect_format(path: str) -> Format:
    """The format from the file name, or from the files in a directory."""
    p = Path(path.removeprefix("file://"))
    if p.suffix.lower() in _SUFFIXES:
        return _SUFFIXES[p.suffix.lower()]
    if p.is_dir():
        found = {_SUFFIXES[f.suffix.lower()] for f in p.rglob("*") if f.suffix.lower() in _SUFFIXES}
        if len(found) == 1:
            return found.pop()
        if found:
            raise InputError(f"{path} holds files of several formats ({', '.join(sorted(found))}); pass --format")
    raise InputError(f"cannot tell the format of {path}; pass --format parquet, csv or json")


def locate(path: str, topics: str | None, fmt: Format | None) -> Inputs:
    """Resolve ``--input`` (a file, a directory, or a ``kquota collect`` output) and ``--topic-input``."""
    if not _is_remote(path):
        p = Path(path.removeprefix("file://"))
        if not p.exists():
            raise InputError(f"input {path} does not exist")
        if p.is_dir() and (p / "clients").is_dir():
            clients = str(p / "clients")
            if topics is None and (p / "topics").is_dir():
                topics = str(p / "topics")
            path = clients
        if p.is_file() and p.stat().st_size == 0:
            raise EmptyInputError(f"input {path} is an empty file")
    if topics is not None and not _is_remote(topics) and not Path(topics).exists():
        raise InputError(f"topic input {topics} does not exist")
    if fmt is None:
        fmt = "parquet" if _is_remote(path) else detect_format(path)
    return Inputs(path, topics, fmt)


def read(spark: SparkSession, path: str, fmt: Format) -> DataFrame:
    """One input as the reader sees it: untyped for CSV and JSON, typed for Parquet."""
    try:
        if fmt == "csv":
            # All columns strings; "" is null. Types are checked afterwards, with examples of bad values.
            return spark.read.option("header", "true").option("mode", "FAILFAST").csv(path)
        if fmt == "json":
            # One JSON object per line. primitivesAsString keeps numbers and strings comparable, so a
            # column mixing 12 and "12x" is reported by value instead of being inferred as a string.
            return (
                spark.read.option("primitivesAsString", "true")
                .option("mode", "FAILFAST")
                .option("multiLine", "false")
                .json(path)
            )
        return spark.read.parquet(path)
    except Exception as exc:
        # An empty directory or a file of the wrong format: say which input it was.
        text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if "UNABLE_TO_INFER_SCHEMA" in text or "Unable to infer schema" in text:
            raise EmptyInputError(f"input {path}: no {fmt} data found (empty file or directory?)") from exc
        raise InputError(f"input {path}: cannot read as {fmt}: {text}") from exc
