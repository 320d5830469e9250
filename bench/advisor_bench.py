"""Benchmark of the quota advisor: samples per second and peak memory, Spark local mode against one process.

Synthetic client samples are generated *inside* Spark from ``spark.range`` (no
Python loop) with a deterministic formula of the row id, so the single-process
baseline (numpy, same formula, vectorised) sees exactly the same data:

* entity  = id mod E (E users, default 1000); broker = (id div E) mod B;
  timestamp = T0 + 10 s x (id div (E x B));
* produce rate = scale(entity) x u1(id) where u1 is a multiplicative hash in
  [0, 1) and scale has a heavy tail (every 97th entity is 100x larger);
* fetch rate = 2 x produce x u2(id); throttled when u1 > 0.97.

Measured per size, each in the same run:

* ``spark``: the advisor's per-entity statistics, outliers and recommendation
  (:func:`kquota.advisor.transform.stats.entity_stats_wide` -> ``flag_outliers`` ->
  ``recommend``), collected; data generation included (it is lazy and fused
  into the same job).
* ``spark_full`` (``--full``): the whole pipeline minus file I/O: validation
  (type checks, de-duplication, clock skew) + the above + the capacity check.
* ``baseline``: numpy in this process: generation + the same per-entity
  statistics (exact nearest-rank percentiles by sorting) + the same outlier
  and default rule, for sizes up to ``--baseline-max``.

Peak memory is the high-water mark of resident memory (``VmHWM`` in
``/proc/PID/status``), reset before each measurement by writing 5 to
``/proc/PID/clear_refs``: for Spark, the driver JVM (which runs the executors
in local mode) plus this Python process; for the baseline, this process.
A JVM rarely returns heap to the OS, so its figure is "the most it held", which
is what a machine must have.

Usage: ``python bench/advisor_bench.py [--sizes 1e6,1e7,5e7] [--out bench.json]``
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import json
import math
import os
import platform
import sys
import time
from fractions import Fraction
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from kquota.advisor import validate
from kquota.advisor.params import Params
from kquota.advisor.transform.capacity import capacity_check
from kquota.advisor.transform.entities import usage_long
from kquota.advisor.transform.outliers import NORMAL_IQR, flag_outliers
from kquota.advisor.transform.recommend import recommend
from kquota.advisor.transform.stats import entity_stats_wide

T0 = int(dt.datetime(2024, 5, 1, tzinfo=dt.UTC).timestamp())
HASH_A, HASH_M = 2654435761, 1000003
HASH_B, HASH_N = 40503, 65537


# --- memory --------------------------------------------------------------------------


def _status(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return 0


def reset_peak(pid: int) -> None:
    # Not Linux, or not allowed: the figure is then the process's lifetime peak.
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


def peak(pid: int) -> int:
    return _status(pid, "VmHWM")


# --- data ----------------------------------------------------------------------------


def spark_samples(spark: Any, n: int, entities: int, brokers: int) -> Any:
    from pyspark.sql import functions as sf

    ident = sf.col("id")
    entity = ident % entities
    u1 = ((ident * HASH_A) % HASH_M) / HASH_M
    u2 = ((ident * HASH_B) % HASH_N) / HASH_N
    scale = (1000.0 * (1 + (entity * 7919) % 1000)) * sf.when(entity % 97 == 0, 100.0).otherwise(1.0)
    produce = scale * u1
    return spark.range(n).select(
        sf.timestamp_seconds(sf.lit(T0) + (ident / (entities * brokers)).cast("long") * 10).alias("timestamp"),
        ((ident / entities).cast("long") % brokers).cast("string").alias("broker"),
        sf.concat(sf.lit("user-"), entity.cast("string")).alias("user"),
        sf.lit(None).cast("string").alias("client_id"),
        produce.alias("produce_byte_rate"),
        (2.0 * produce * u2).alias("fetch_byte_rate"),
        sf.lit(None).cast("double").alias("request_time"),
        sf.when(u1 > 0.97, 5.0).otherwise(0.0).alias("produce_throttle_time_ms"),
        sf.lit(None).cast("double").alias("fetch_throttle_time_ms"),
        sf.lit(None).cast("double").alias("request_throttle_time_ms"),
    )


def numpy_samples(n: int, entities: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    ident = np.arange(n, dtype=np.int64)
    entity = ident % entities
    u1 = ((ident * HASH_A) % HASH_M) / HASH_M
    u2 = ((ident * HASH_B) % HASH_N) / HASH_N
    scale = (1000.0 * (1 + (entity * 7919) % 1000)) * np.where(entity % 97 == 0, 100.0, 1.0)
    produce = scale * u1
    del ident, scale
    return entity, produce, 2.0 * produce * u2, (u1 > 0.97).astype(np.float64)


# --- the two implementations ---------------------------------------------------------------


def run_spark(spark: Any, n: int, entities: int, brokers: int, full: bool) -> list[dict[str, Any]]:
    params = Params()
    samples = spark_samples(spark, n, entities, brokers)
    if full:
        samples, _ = validate.validate_clients(samples, now=dt.datetime.now(dt.UTC), skew="ignore")
    stats = entity_stats_wide(samples)  # what the pipeline runs
    flagged = flag_outliers(stats, params.outlier_alpha, params.outlier_top_k, params.min_population)
    flagged = flagged.persist()
    recs = recommend(flagged, params)
    rows = [
        r.asDict()
        for r in flagged.select(
            "user", "resource", "p50", "p95", "p99", "max", "mean", "throttled_share", "outlier"
        ).collect()
    ]
    recs.collect()
    if full:
        capacity_check(usage_long(samples), recs, {"produce": 100.0 * 2**20}).collect()
        samples.unpersist()
    flagged.unpersist()
    return rows


def nearest_rank(sorted_values: np.ndarray, starts: np.ndarray, counts: np.ndarray, p: float) -> np.ndarray:
    # ceil(p x n) in integers: p as an exact fraction, so 0.07 x 100 is 7, not 8 as in floating point.
    f = Fraction(str(p))
    k = (f.numerator * counts + f.denominator - 1) // f.denominator
    return sorted_values[starts + np.maximum(k, 1) - 1]


def run_baseline(n: int, entities: int) -> list[dict[str, Any]]:
    entity, produce, fetch, throttled = numpy_samples(n, entities)
    out: list[dict[str, Any]] = []
    for resource, values, thr in (("produce", produce, throttled), ("fetch", fetch, None)):
        order = np.lexsort((values, entity))
        sv, se = values[order], entity[order]
        del order
        counts = np.bincount(se, minlength=entities)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        p50, p95, p99 = (nearest_rank(sv, starts, counts, p) for p in (0.5, 0.95, 0.99))
        maxima = sv[starts + counts - 1]
        means = np.bincount(entity, weights=values, minlength=entities) / counts
        share = np.bincount(entity, weights=thr, minlength=entities) / counts if thr is not None else None
        # Same outlier rule as the advisor: log-space fence median x exp(z x sigma), nearest-rank
        # quartiles of the active p99s, P(Z > z) = alpha / active, top 10.
        ps = np.sort(p99[p99 > 0])
        active = len(ps)
        q1, med, q3 = (ps[max(1, math.ceil(Fraction(q) * active)) - 1] for q in ("0.25", "0.5", "0.75"))
        sigma = (math.log(q3) - math.log(q1)) / NORMAL_IQR
        fence = med * math.exp(NormalDist().inv_cdf(1 - Params().outlier_alpha / active) * sigma)
        rank = np.empty(entities, dtype=np.int64)
        rank[np.argsort(-p99, kind="stable")] = np.arange(1, entities + 1)
        outlier = (p99 > fence) & (rank <= 10) & (p99 > 0)
        for e in range(entities):
            out.append(
                {
                    "user": f"user-{e}",
                    "resource": resource,
                    "p50": float(p50[e]),
                    "p95": float(p95[e]),
                    "p99": float(p99[e]),
                    "max": float(maxima[e]),
                    "mean": float(means[e]),
                    "throttled_share": None if share is None else float(share[e]),
                    "outlier": bool(outlier[e]),
                }
            )
        del sv, se
    return out


def compare(spark_rows: list[dict[str, Any]], base_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Largest relative difference per statistic (0 expected: both are exact nearest-rank)."""
    base = {(r["user"], r["resource"]): r for r in base_rows}
    worst: dict[str, float] = {}
    outliers_agree = True
    for r in spark_rows:
        b = base[(r["user"], r["resource"])]
        for key in ("p50", "p95", "p99", "max", "mean", "throttled_share"):
            if r[key] is None or b[key] is None:
                continue
            rel = abs(r[key] - b[key]) / max(abs(b[key]), 1e-12)
            worst[key] = max(worst.get(key, 0.0), rel)
        outliers_agree &= r["outlier"] == b["outlier"]
    return {"max_relative_difference": worst, "outliers_agree": outliers_agree, "rows": len(spark_rows)}


# --- main ----------------------------------------------------------------------------------


def parse_sizes(text: str) -> list[int]:
    return [int(float(s)) for s in text.split(",") if s]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1e6,1e7,5e7"))
    parser.add_argument("--entities", type=int, default=1000)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--baseline-max", type=float, default=5e7, help="largest size the baseline runs at")
    parser.add_argument("--full", action="store_true", help="also time the whole pipeline minus file I/O")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--shuffle-partitions", default="8")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args(argv)

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    started = time.perf_counter()
    spark = (
        SparkSession.builder.master(args.master)
        .appName("kquota-advisor-bench")
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.sql.shuffle.partitions", args.shuffle_partitions)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.perf_counter() - started
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    me = os.getpid()
    # Warm-up: JIT and codegen on a small input, so the first size is not charged for them.
    run_spark(spark, 100_000, args.entities, args.brokers, args.full)

    results: list[dict[str, Any]] = []
    for n in args.sizes:
        entry: dict[str, Any] = {"samples": n}
        for label, full in (("spark", False), *((("spark_full", True),) if args.full else ())):
            gc.collect()
            reset_peak(jvm_pid)
            reset_peak(me)
            t = time.perf_counter()
            rows = run_spark(spark, n, args.entities, args.brokers, full)
            seconds = time.perf_counter() - t
            entry[label] = {
                "seconds": round(seconds, 2),
                "samples_per_second": round(n / seconds),
                "peak_rss_jvm_mb": round(peak(jvm_pid) / 2**20),
                "peak_rss_python_mb": round(peak(me) / 2**20),
            }
            if label == "spark":
                spark_rows = rows
            print(f"{label:>10} {n:>12,} samples: {seconds:8.1f} s  {n / seconds:>12,.0f} samples/s", flush=True)
        if n <= args.baseline_max:
            gc.collect()
            reset_peak(me)
            t = time.perf_counter()
            base_rows = run_baseline(n, args.entities)
            seconds = time.perf_counter() - t
            entry["baseline"] = {
                "seconds": round(seconds, 2),
                "samples_per_second": round(n / seconds),
                "peak_rss_python_mb": round(peak(me) / 2**20),
            }
            entry["agreement"] = compare(spark_rows, base_rows)
            print(f"{'baseline':>10} {n:>12,} samples: {seconds:8.1f} s  {n / seconds:>12,.0f} samples/s", flush=True)
        results.append(entry)

    first = results[0]
    for entry in results:
        ratio = entry["samples"] / first["samples"]
        entry["spark"]["time_vs_first"] = round(entry["spark"]["seconds"] / first["spark"]["seconds"], 2)
        entry["spark"]["size_vs_first"] = round(ratio, 2)
    print()
    print(
        f"{'samples':>12} | {'spark s':>8} {'samples/s':>11} {'JVM+py MB':>10} | "
        f"{'numpy s':>8} {'samples/s':>11} {'py MB':>7} | {'speedup':>7} | max rel diff p99"
    )
    for e in results:
        s = e["spark"]
        b = e.get("baseline")
        line = (
            f"{e['samples']:>12,} | {s['seconds']:>8.1f} {s['samples_per_second']:>11,} "
            f"{s['peak_rss_jvm_mb'] + s['peak_rss_python_mb']:>10,} | "
        )
        if b:
            diff = e["agreement"]["max_relative_difference"].get("p99", 0.0)
            line += (
                f"{b['seconds']:>8.1f} {b['samples_per_second']:>11,} {b['peak_rss_python_mb']:>7,} | "
                f"{b['seconds'] / s['seconds']:>6.2f}x | {diff:.2e}"
            )
        else:
            line += f"{'-':>8} {'-':>11} {'-':>7} | {'-':>7} |"
        print(line)
    report = {
        "benchmark": "kquota advisor per-entity statistics",
        "when": dt.datetime.now(dt.UTC).isoformat(),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "spark": spark.version,
            "master": args.master,
            "driver_memory": args.driver_memory,
            "load_average_at_end": os.getloadavg(),
        },
        "spark_startup_seconds": round(startup, 2),
        "entities": args.entities,
        "brokers": args.brokers,
        "results": results,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.out}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
