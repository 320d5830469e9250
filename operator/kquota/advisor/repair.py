"""What validation repairs rather than rejects, each counted in the :class:`ValidationReport`.

* duplicate rows for one key: merged into one row taking the largest value of
  each metric (a conservative choice: a quota derived from it is never lower
  than one derived from either copy);
* ``NaN`` metric values: treated as missing (Kafka reports ``NaN`` throttle time
  until the first throttle happens);
* clock skew, by policy (:class:`SkewPolicy`): a broker whose timestamps are
  offset from the others by more than the tolerance, or samples in the future.

(Empty strings in user / client_id / broker are read as missing when the
columns are converted: Kafka's JmxReporter drops empty tags, so an empty label
means "not part of the bucket".)
"""

from __future__ import annotations

import datetime as dt

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from kquota.advisor.params import SkewPolicy
from kquota.advisor.schema import ClockSkewError, ValidationReport


def nan_to_null(df: DataFrame, metrics: tuple[str, ...]) -> DataFrame:
    return df.withColumns({m: sf.when(sf.isnan(sf.col(m)), sf.lit(None)).otherwise(sf.col(m)) for m in metrics})


def dedupe(df: DataFrame, key: tuple[str, ...], values: tuple[str, ...]) -> tuple[DataFrame, int, int]:
    """Merge rows sharing a key (largest value of each column); count dropped rows and conflicting keys."""
    n = sf.count(sf.lit(1))

    def surplus(*by: Column) -> int:
        counted = df.groupBy(*by).agg(n.alias("_n")).agg(sf.sum(sf.col("_n") - 1).alias("dropped")).first()
        return int((counted["dropped"] if counted is not None else 0) or 0)

    # Most inputs have no duplicates. Rows with the same key have the same 64-bit hash of it, so no two
    # rows sharing a hash means no duplicates, exactly; grouping by one long instead of four columns
    # (two of them strings) shuffles a third of the bytes: 15 s instead of 44 s at 10M samples here.
    # A shared hash is a duplicate or (rarely) a collision: only then count over the key itself.
    if surplus(sf.xxhash64(*key)) == 0:
        return df, 0, 0
    dropped = surplus(*[sf.col(k) for k in key])
    if dropped == 0:
        return df, 0, 0
    # The copies of a key conflict when they disagree on some value: different values, or some null and some not.
    # (max/min/count only: countDistinct per column would make Spark expand every row once per column.)
    conflict = sf.lit(False)
    for m in values:
        conflict = conflict | (sf.max(m) != sf.min(m)) | ((sf.count(m) > 0) & (sf.count(m) < n))
    grouped = df.groupBy(*key).agg(*[sf.max(m).alias(m) for m in values], conflict.alias("_conflict"))
    conflicts = grouped.agg(sf.sum(sf.when(sf.col("_conflict"), 1).otherwise(0)).alias("conf")).first()
    assert conflicts is not None
    return grouped.select(*df.columns), dropped, int(conflicts["conf"] or 0)


def _epoch() -> Column:
    return sf.unix_micros(sf.col("timestamp")) / 1e6


def skew(
    what: str,
    df: DataFrame,
    report: ValidationReport,
    now: dt.datetime,
    tolerance: dt.timedelta,
    policy: SkewPolicy,
) -> DataFrame:
    """Detect brokers whose clocks are offset from the others and samples from the future; apply the policy.

    A broker's offset is its median sample time minus the median of all brokers' medians; more than the
    tolerance either way is skew. ``error`` raises, ``align`` shifts the broker by its offset, ``ignore``
    keeps the timestamps. Then samples more than the tolerance after ``now``: ``error`` raises, ``align``
    drops them, ``ignore`` keeps them.
    """
    tol = tolerance.total_seconds()
    limit = now.timestamp() + tol
    per_broker = (
        df.groupBy("broker")
        .agg(
            sf.percentile_approx(_epoch(), 0.5, 10000).alias("median"),
            sf.sum(sf.when(_epoch() > limit, 1).otherwise(0)).alias("future"),
        )
        .collect()
    )
    report.brokers = len(per_broker)
    medians = sorted(float(r["median"]) for r in per_broker)
    reference = medians[(len(medians) - 1) // 2]
    offsets = {str(r["broker"]): float(r["median"]) - reference for r in per_broker}
    skewed = {b: o for b, o in offsets.items() if abs(o) > tol} if len(per_broker) > 1 else {}
    report.broker_offsets_seconds = {b: round(o, 3) for b, o in sorted(skewed.items())}
    if skewed and policy == "error":
        detail = ", ".join(f"broker {b} by {o:+.0f} s" for b, o in sorted(skewed.items()))
        raise ClockSkewError(
            f"{what}: broker timestamps are offset from the other brokers' (median sample time differs by more "
            f"than {tol:.0f} s): {detail}. If the brokers' clocks were wrong, rerun with --clock-skew align to "
            "shift each offset broker onto the others; if the brokers really cover different periods, use "
            "--clock-skew ignore."
        )
    n_future = sum(int(r["future"]) for r in per_broker)
    if skewed and policy == "align":
        shift = sf.lit(0.0)
        for b, o in skewed.items():
            shift = sf.when(sf.col("broker") == b, sf.lit(-o)).otherwise(shift)
        df = df.withColumn("timestamp", sf.timestamp_micros((sf.unix_micros("timestamp") + shift * 1e6).cast("long")))
        report.brokers_aligned = {b: round(-o, 3) for b, o in sorted(skewed.items())}
        report.notes.append(
            "shifted broker(s) "
            + ", ".join(f"{b} by {-o:+.0f} s" for b, o in sorted(skewed.items()))
            + " to align with the other brokers (--clock-skew align)"
        )
        # Shifting moves samples into or out of the future: count again.
        n_future = df.filter(_epoch() > limit).count()
    if n_future and policy == "error":
        raise ClockSkewError(
            f"{what}: {n_future} sample(s) are more than {tol:.0f} s in the future (now is {now.isoformat()}): "
            "a broker or collector clock is wrong. Fix the clock, or rerun with --clock-skew align to drop them "
            "(and align offset brokers)."
        )
    if n_future and policy == "align":
        df = df.filter(_epoch() <= limit)
        report.future_dropped = n_future
        report.notes.append(f"dropped {n_future} sample(s) more than {tol:.0f} s in the future")
    return df
