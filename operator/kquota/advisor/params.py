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
    #: Chance that a population without outliers gets one anyway (the fence's Bonferroni bound).
    outlier_alpha: float = 0.05
    outlier_top_k: int = 10
    min_population: int = 3
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
        if not (0 < self.outlier_alpha <= 0.5):
            raise ValueError(f"outlier alpha must be in (0, 0.5], got {self.outlier_alpha}")
        if self.outlier_top_k < 0:
            raise ValueError(f"outlier top-k must be >= 0, got {self.outlier_top_k}")
        if self.min_population < 2:
            raise ValueError(f"min population must be at least 2, got {self.min_population}")
        if self.min_byte_rate < 1 or self.min_request_percentage <= 0:
            raise ValueError("minimum quotas must be positive (Kafka rejects quotas <= 0)")
        if self.topic_bucket_seconds < 1:
            raise ValueError(f"topic bucket must be at least 1 s, got {self.topic_bucket_seconds}")
        for resource, value in self.capacity.items():
            if resource not in RESOURCE_NAMES:
                raise ValueError(f"unknown capacity resource {resource!r}; use {', '.join(RESOURCE_NAMES)}")
            if not (value > 0 and math.isfinite(value)):
                raise ValueError(f"capacity of {resource} must be a positive number, got {value}")


#: Share of the machine's memory a local-mode driver may take (it is the executors too), and its bounds.
DRIVER_MEMORY_SHARE: Final = 0.5
DRIVER_MEMORY_MIN_MIB: Final = 1024
DRIVER_MEMORY_MAX_MIB: Final = 32 * 1024


def local_driver_memory(total_bytes: int) -> str:
    """spark.driver.memory for local mode on a machine with ``total_bytes`` of memory, e.g. ``12288m``.

    In local mode the driver's heap holds the executors' work too: Spark's 1g
    default runs out of memory on tens of millions of samples. Half the
    machine (at least 1 GiB, at most 32 GiB) leaves the rest to Python and the
    page cache; the JVM takes heap only as it needs it.
    """
    mib = int(total_bytes * DRIVER_MEMORY_SHARE) // (1024 * 1024)
    return f"{max(DRIVER_MEMORY_MIN_MIB, min(DRIVER_MEMORY_MAX_MIB, mib))}m"
