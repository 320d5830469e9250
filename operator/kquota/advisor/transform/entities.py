"""Which quota bucket a client sample belongs to, and merging buckets to recommend at a coarser level.

A client sample belongs to the quota *bucket* the broker measured: ``user``
only, ``client-id`` only, or the ``(user, client-id)`` pair
(:func:`entity_kind`). :func:`regroup` can merge pairs up to users or
client-ids first (summing their rates), to recommend at that level.
"""

from __future__ import annotations

from typing import Final

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf

from kquota.advisor.params import Level
from kquota.advisor.schema import RESOURCES

KIND_USER: Final = "user"
KIND_CLIENT: Final = "client-id"
KIND_PAIR: Final = "user+client-id"
#: The columns that name an entity in every per-entity table.
ENTITY: Final = ("kind", "user", "client_id")


def entity_kind(user: Column, client_id: Column) -> Column:
    """Which Kafka entity a (user, client_id) label pair is: user, client-id or user+client-id."""

    return (
        sf.when(user.isNotNull() & client_id.isNotNull(), sf.lit(KIND_PAIR))
        .when(user.isNotNull(), sf.lit(KIND_USER))
        .otherwise(sf.lit(KIND_CLIENT))
    )


def regroup(samples: DataFrame, level: Level) -> DataFrame:
    """Re-key client samples at ``level``, summing the rates of the buckets merged into one entity.

    ``user``: every sample with a user becomes that user's (client-id dropped); samples with only a
    client-id are kept as they are (they have no user to merge into). ``client-id`` likewise. Throttle
    times take the largest of the merged buckets, so "was throttled" survives the merge.
    """

    if level == "as-measured":
        return samples
    if level == "user":
        user, client = sf.col("user"), sf.when(sf.col("user").isNull(), sf.col("client_id"))
    else:
        user, client = sf.when(sf.col("client_id").isNull(), sf.col("user")), sf.col("client_id")
    rekeyed = samples.withColumns({"user": user, "client_id": client})
    usage = [c for c, _ in RESOURCES.values()]
    throttle = [t for _, t in RESOURCES.values()]
    return (
        rekeyed.groupBy("timestamp", "broker", "user", "client_id")
        .agg(*[sf.sum(c).alias(c) for c in usage], *[sf.max(t).alias(t) for t in throttle])
        .select(*samples.columns)
    )


def usage_long(samples: DataFrame) -> DataFrame:
    """One row per (sample, resource) with a value: timestamp, broker, kind, user, client_id, resource, value,
    throttle_ms. Missing values (a client that only produces has no fetch rate) are left out."""

    per_resource = sf.array(
        *[
            sf.struct(sf.lit(r).alias("resource"), sf.col(c).alias("value"), sf.col(t).alias("throttle_ms"))
            for r, (c, t) in RESOURCES.items()
        ]
    )
    return (
        samples.select(
            "timestamp",
            "broker",
            entity_kind(sf.col("user"), sf.col("client_id")).alias("kind"),
            "user",
            "client_id",
            sf.explode(per_resource).alias("u"),
        )
        .select("timestamp", "broker", "kind", "user", "client_id", "u.resource", "u.value", "u.throttle_ms")
        .filter(sf.col("value").isNotNull())
    )
