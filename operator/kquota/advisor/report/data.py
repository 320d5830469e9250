"""The advisor's report as data: one JSON document, and the result tables as Parquet datasets."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame


def _json_default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def clean_floats(value: Any) -> Any:
    # JSON has no NaN or Infinity; a report that json.loads in every language is worth a None.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: clean_floats(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_floats(v) for v in value]
    return value


def write_json_report(report: Mapping[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(clean_floats(dict(report)), indent=2, default=_json_default, allow_nan=False) + "\n")
    return path


def write_parquet_report(tables: Mapping[str, DataFrame], directory: Path) -> list[Path]:
    """Each result table as a Parquet dataset under ``directory/<table>``."""
    out = []
    for name, frame in tables.items():
        target = directory / name
        frame.coalesce(1).write.mode("overwrite").parquet(str(target))
        out.append(target)
    return out
