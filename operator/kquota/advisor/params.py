"""The advisor's settings as plain data: importable without pyspark, so the CLI can build its parser.

:class:`Params` holds every knob of the method in :mod:`kquota.advisor.transform`;
the literal types list the choices the CLI offers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final, Literal

Level = Literal["as-measured", "user", "client-id"]
LEVELS: Final[tuple[Level, ...]] = ("as-measured", "user", "client-id")
SkewPolicy = Literal["error", "align", "ignore"]
SKEW_POLICIES: Final[tuple[SkewPolicy, ...]] = ("error", "align", "ignore")
Format = Literal["parquet", "csv", "json"]
FORMATS: Final[tuple[Format, ...]] = ("parquet", "csv", "json")
ReportFormat = Literal["json", "parquet", "both"]
#: Resources a quota limits, as the advisor names them.
RESOURCE_NAMES: Final = ("produce", "fetch", "request")


@dataclass(frozen=True)
class Params:
    """Every knob of the method; ``kquota advise --help`` lists them with the same defaults."""

    headroom: float = 0.2
    default_percentile: float = 1.0
    outlier_iqr_k: float = 1.5
    outlier_top_k: int = 10
    min_population: int = 3
    accuracy: int = 10_000
    min_byte_rate: float = 1024.0
    min_request_percentage: float = 1.0
    capped_share: float = 0.01
    level: Level = "as-measured"
    #: resource -> capacity per broker (bytes/s for produce and fetch, percent for request).
    capacity: dict[str, float] = field(default_factory=dict)
    topic_bucket_seconds: int = 60
    include_internal_topics: bool = False

    def check(self) -> None:
        if not (0 <= self.headroom <= 100):
            raise ValueError(f"headroom must be between 0 and 100 (a fraction: 0.2 is 20%), got {self.headroom}")
        if not (0 < self.default_percentile <= 1):
            raise ValueError(f"default percentile must be in (0, 1], got {self.default_percentile}")
        if self.outlier_iqr_k < 0:
            raise ValueError(f"outlier IQR factor must be >= 0, got {self.outlier_iqr_k}")
        if self.outlier_top_k < 0:
            raise ValueError(f"outlier top-k must be >= 0, got {self.outlier_top_k}")
        if self.min_population < 2:
            raise ValueError(f"min population must be at least 2, got {self.min_population}")
        if not (1 <= self.accuracy <= 10_000_000):
            raise ValueError(f"percentile accuracy must be between 1 and 10000000, got {self.accuracy}")
        if self.min_byte_rate < 1 or self.min_request_percentage <= 0:
            raise ValueError("minimum quotas must be positive (Kafka rejects quotas <= 0)")
        if self.topic_bucket_seconds < 1:
            raise ValueError(f"topic bucket must be at least 1 s, got {self.topic_bucket_seconds}")
        for resource, value in self.capacity.items():
            if resource not in RESOURCE_NAMES:
                raise ValueError(f"unknown capacity resource {resource!r}; use {', '.join(RESOURCE_NAMES)}")
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"capacity of {resource} must be a positive number, got {value}")
