"""The advisor's settings as plain data: importable without pyspark, so the CLI can build its parser.

:class:`Params` holds every knob of the method in :mod:`kquota.advisor.transform`;
the literal types list the choices the CLI offers.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
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


#: The Python of the advisor image (Dockerfile.advisor), which Spark on Kubernetes runs executors from.
ADVISOR_IMAGE_PYTHON: Final = "/opt/kquota/bin/python"


def worker_python(master: str | None, executable: str) -> str:
    """The Python that Spark's Python workers run, when ``PYSPARK_PYTHON`` does not say.

    Workers run where the tasks run: in local mode (and on a standalone cluster of this
    machine) this interpreter, which has kquota; on Kubernetes the executor pods of the
    advisor image, whose Python is :data:`ADVISOR_IMAGE_PYTHON`, whatever the driver runs on.
    The advisor's own pipelines start no Python worker; a DataFrame made from Python rows
    (``plan --impact`` reading Prometheus) does.
    """
    return ADVISOR_IMAGE_PYTHON if master is not None and master.startswith("k8s://") else executable


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


#: Where the cgroup hierarchies are mounted, and this process's cgroup membership.
CGROUP_ROOT: Final = Path("/sys/fs/cgroup")
SELF_CGROUP: Final = Path("/proc/self/cgroup")
#: cgroup v1 writes "no limit" as a page-aligned LONG_MAX (v2 writes "max"): anything this large is none.
_NO_LIMIT: Final = 1 << 60


def cgroup_memory_limit(root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> int | None:
    """The memory limit, in bytes, of the cgroup this process runs in (a container's limit); None if none.

    A container sees the host's memory in /proc/meminfo and sysconf, not its limit: a
    driver sized from those is killed by the kernel long before Spark notices. Read
    cgroup v2's ``memory.max`` or v1's ``memory.limit_in_bytes``, both at the mount's
    root (what a container sees: runc mounts its own cgroup there, or a cgroup namespace
    does) and along the process's path from /proc/self/cgroup (a process on a host
    inside a limited cgroup, and that cgroup's parents, whose limits apply too);
    the smallest wins.
    """
    candidates = [root / "memory.max", root / "memory" / "memory.limit_in_bytes"]
    try:
        membership = self_cgroup.read_text().splitlines()
    except OSError:
        membership = []
    for line in membership:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        relative = Path(path.lstrip("/"))
        ancestors = [relative, *relative.parents]
        if hierarchy == "0" and controllers == "":
            # cgroup v2: the unified hierarchy at the root, or at unified/ next to v1's (hybrid).
            candidates += [base / a / "memory.max" for base in (root, root / "unified") for a in ancestors]
        elif "memory" in controllers.split(","):
            candidates += [root / "memory" / a / "memory.limit_in_bytes" for a in ancestors]
    limits = []
    for candidate in candidates:
        try:
            text = candidate.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and 0 < int(text) < _NO_LIMIT:
            limits.append(int(text))
    return min(limits) if limits else None


def total_memory(root: Path = CGROUP_ROOT, self_cgroup: Path = SELF_CGROUP) -> int:
    """The memory this process may use: the machine's, or its cgroup's limit when that is smaller.

    1 GiB when the system will not say.
    """
    try:
        physical = int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        physical = 1 << 30
    limit = cgroup_memory_limit(root, self_cgroup)
    return physical if limit is None else min(physical, limit)


def local_memory_problem(total_bytes: int) -> str | None:
    """Why local mode cannot run in ``total_bytes`` (None when it can), naming what to change.

    The driver heap gets half the memory and at least 1 GiB; below 2 GiB the JVM's own
    memory and Python would not fit next to that heap, and a container would be killed by
    the kernel (exit 137, no message) instead of failing with one.
    """
    floor = 2 * DRIVER_MEMORY_MIN_MIB * 1024 * 1024
    if total_bytes >= floor:
        return None
    return (
        f"only {total_bytes // (1024 * 1024)} MiB of memory (the container's limit or the machine's); local mode "
        f"needs at least {floor // (1024 * 1024)} MiB (a {DRIVER_MEMORY_MIN_MIB} MiB driver heap, and as much "
        "again for the JVM and Python): raise the memory limit (resources.limits.memory of the Job), or set "
        "--conf spark.driver.memory=... yourself"
    )
