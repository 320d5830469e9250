"""A planted usage history for ``kquota plan --impact``, and the impact computed from it independently (numpy).

The history is what a broker with the ``BEFORE`` quotas measures: each entity's
series is tagged with the bucket its quota level gives (user alone for
``users/<u>``, user and client-id for a pair entry), on two brokers. The plan
(``AFTER``, with ``REMOVED`` deleted) changes some of them, and the planting
says what that does:

==========  ==================================  ==================================
entity      change                              planted outcome
==========  ==================================  ==================================
alice       producer 4Mi -> 2Mi, consumer 8->4  throttled (both keys: runs at ~3Mi / ~5Mi)
bob         pair app 8Mi removed; bob/<default> throttled: falls back to 1Mi, runs at ~5Mi
            at 1Mi stays
gina        pair etl 3Mi removed                throttled: etl's ~2.5Mi joins gina's ~0.5Mi
                                                under users/gina 2Mi
frank       producer 2Mi -> 1.5Mi               within: runs at ~100Ki
carol       producer 512Ki -> 4Mi               un-throttled: held at 512Ki, throttled 40%
dave        users/dave 256Ki deleted            un-throttled: held at 256Ki, throttled 40%
erin        untouched (1Mi)                     not listed
==========  ==================================  ==================================

:func:`expected_impact` computes every figure from the same rows with numpy,
apart from the Spark code: per moment and broker the destination's total (the
sum of the buckets that land in it), the share of totals above the new limit,
the nearest-rank p99, and the share of time Kafka's throttling holds the
traffic back, 1 - limit / total, averaged, per hour.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from kquota.domain.entities import Entity, QuotaKey
from tests.support.quotas import C, P

KI, MI = 1024, 1024 * 1024
T0 = 1_714_521_600  # 2024-05-01T00:00:00Z
STEPS = 200
BROKERS = ("b0", "b1")


def names(prefix: str) -> dict[str, str]:
    """The planted principals, unique per test run (the broker is shared)."""
    return {n: f"{prefix}-{n}" for n in ("alice", "bob", "gina", "frank", "carol", "dave", "erin")}


@dataclass(frozen=True)
class Series:
    """One planted bucket: (user, client-id) tags, column, base rate, and whether it is held at a limit."""

    user: str
    client_id: str | None
    column: str
    base: float
    held_at: float | None = None


def series(n: dict[str, str]) -> list[Series]:
    return [
        Series(n["alice"], None, "produce_byte_rate", 3 * MI),
        Series(n["alice"], None, "fetch_byte_rate", 5 * MI),
        Series(n["bob"], "app", "produce_byte_rate", 5 * MI),
        Series(n["gina"], "etl", "produce_byte_rate", 2.5 * MI),
        Series(n["gina"], None, "produce_byte_rate", 0.5 * MI),
        Series(n["frank"], None, "produce_byte_rate", 100 * KI),
        Series(n["carol"], None, "produce_byte_rate", 512 * KI, held_at=512 * KI),
        Series(n["dave"], None, "produce_byte_rate", 256 * KI, held_at=256 * KI),
        Series(n["erin"], None, "produce_byte_rate", 200 * KI),
    ]


def write_history(path: Path, n: dict[str, str], seed: int = 36) -> list[dict[str, Any]]:
    """The history as CSV (the advisor's input format), one row per moment, broker and bucket (a bucket's
    produce and fetch rates in one row, as ``kquota collect`` writes them); returns the rows for the oracle."""
    rng = np.random.default_rng(seed)
    by_key: dict[tuple[int, str, str, str], dict[str, Any]] = {}
    for s in series(n):
        for step in range(STEPS):
            for broker in BROKERS:
                if s.held_at is not None:
                    # Held down by its quota: at the limit (throttled) 40% of the time, a little under it otherwise.
                    throttled = rng.random() < 0.4
                    value = s.held_at if throttled else float(f"{s.held_at * rng.uniform(0.6, 0.99):.6g}")
                    throttle = float(f"{rng.uniform(50, 900):.6g}") if throttled else 0.0
                else:
                    value = float(f"{s.base * float(np.exp(rng.normal(0.0, 0.25))):.6g}")
                    throttle = 0.0
                key = (T0 + 10 * step, broker, s.user, s.client_id or "")
                row = by_key.setdefault(
                    key,
                    {
                        "timestamp": key[0],
                        "broker": broker,
                        "user": s.user,
                        "client_id": s.client_id or "",
                        "produce_byte_rate": "",
                        "fetch_byte_rate": "",
                        "produce_throttle_time_ms": "",
                        "fetch_throttle_time_ms": "",
                    },
                )
                row[s.column] = value
                row[s.column.replace("byte_rate", "throttle_time_ms")] = throttle
    rows = list(by_key.values())
    columns = list(rows[0])
    lines = [",".join(columns)] + [",".join(str(r[c]) for c in columns) for r in rows]
    path.write_text("\n".join(lines) + "\n")
    return rows


def quotas(n: dict[str, str]) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]], list[str]]:
    """(before, after, deleted) as ClientQuota specs by resource name: the cluster now, and the plan."""
    before = {
        "alice": ({"user": {"name": n["alice"]}}, {"producerByteRate": "4Mi", "consumerByteRate": "8Mi"}),
        "bob-app": ({"user": {"name": n["bob"]}, "clientId": {"name": "app"}}, {"producerByteRate": "8Mi"}),
        "bob-default": ({"user": {"name": n["bob"]}, "clientId": {"default": True}}, {"producerByteRate": "1Mi"}),
        "gina": ({"user": {"name": n["gina"]}}, {"producerByteRate": "2Mi"}),
        "gina-etl": ({"user": {"name": n["gina"]}, "clientId": {"name": "etl"}}, {"producerByteRate": "3Mi"}),
        "frank": ({"user": {"name": n["frank"]}}, {"producerByteRate": "2Mi"}),
        "carol": ({"user": {"name": n["carol"]}}, {"producerByteRate": "512Ki"}),
        "dave": ({"user": {"name": n["dave"]}}, {"producerByteRate": "256Ki"}),
        "erin": ({"user": {"name": n["erin"]}}, {"producerByteRate": "1Mi"}),
    }
    after = dict(before)
    after["alice"] = (before["alice"][0], {"producerByteRate": "2Mi", "consumerByteRate": "4Mi"})
    # bob's pair entry loses its producer key (the resource keeps a consumer key): a removal.
    after["bob-app"] = (before["bob-app"][0], {"consumerByteRate": "8Mi"})
    after["frank"] = (before["frank"][0], {"producerByteRate": "1536Ki"})
    after["carol"] = (before["carol"][0], {"producerByteRate": "4Mi"})
    specs = {k: {"entity": e, "quota": q} for k, (e, q) in before.items()}
    specs_after = {k: {"entity": e, "quota": q} for k, (e, q) in after.items() if k not in ("gina-etl", "dave")}
    return specs, specs_after, ["gina-etl", "dave"]


Quotas = dict[Entity, dict[QuotaKey, float]]


def planted_quotas(n: dict[str, str]) -> tuple[Quotas, Quotas]:
    """The before and after quotas (the specs of :func:`quotas`), as the brokers hold them."""
    user, pair = Entity.for_user, Entity.for_pair
    before: Quotas = {
        user(n["alice"]): {P: 4 * MI, C: 8 * MI},
        pair(n["bob"], "app"): {P: 8 * MI},
        pair(n["bob"], None): {P: MI},
        user(n["gina"]): {P: 2 * MI},
        pair(n["gina"], "etl"): {P: 3 * MI},
        user(n["frank"]): {P: 2 * MI},
        user(n["carol"]): {P: 512 * KI},
        user(n["dave"]): {P: 256 * KI},
        user(n["erin"]): {P: MI},
    }
    after = dict(before)
    after[user(n["alice"])] = {P: 2 * MI, C: 4 * MI}
    after[pair(n["bob"], "app")] = {C: 8 * MI}
    del after[pair(n["gina"], "etl")], after[user(n["dave"])]
    after[user(n["frank"])] = {P: 1536 * KI}
    after[user(n["carol"])] = {P: 4 * MI}
    return before, after


def _rank(values: np.ndarray, p: float) -> float:
    ordered = np.sort(values)
    return float(ordered[max(1, math.ceil(Fraction(str(p)) * len(ordered))) - 1])


def expected_impact(
    rows: list[dict[str, Any]], n: dict[str, str], removals: bool
) -> dict[tuple[str, str, str], dict[str, Any]]:
    """(verdict, entity path, key) -> figures, from the rows alone. Without ``removals`` (no ledger: plan
    computes none) bob, gina and dave keep their entries."""

    def totals(parts: list[tuple[str, str | None, str]]) -> np.ndarray:
        by_moment: dict[tuple[int, str], float] = {}
        for r in rows:
            for user, client, column in parts:
                if r["user"] == user and (r["client_id"] or None) == client and r[column] != "":
                    key = (r["timestamp"], r["broker"])
                    by_moment[key] = by_moment.get(key, 0.0) + float(r[column])
        return np.array(list(by_moment.values()))

    def throttles(parts: list[tuple[str, str | None, str]], limit: float) -> dict[str, Any]:
        t = totals(parts)
        return {
            "share": float(np.mean(t > limit)),
            "p99": _rank(t, 0.99),
            # Held back 1 - L/R of the time when wanting R over the limit L (Kafka's throttling, steady state).
            "throttle_seconds_per_hour": float(np.mean(np.where(t > limit, 1.0 - limit / t, 0.0))) * 3600.0,
            "samples": len(t),
        }

    def freed(user: str) -> dict[str, Any]:
        mine = [r for r in rows if r["user"] == user]
        return {
            "share": sum(1 for r in mine if float(r["produce_throttle_time_ms"]) > 0) / len(mine),
            "p99": _rank(np.array([float(r["produce_byte_rate"]) for r in mine]), 0.99),
            "samples": len(mine),
        }

    out = {
        ("throttles", f"users/{n['alice']}", "producer_byte_rate"): throttles(
            [(n["alice"], None, "produce_byte_rate")], 2 * MI
        ),
        ("throttles", f"users/{n['alice']}", "consumer_byte_rate"): throttles(
            [(n["alice"], None, "fetch_byte_rate")], 4 * MI
        ),
        ("within", f"users/{n['frank']}", "producer_byte_rate"): throttles(
            [(n["frank"], None, "produce_byte_rate")], 1536 * KI
        ),
        ("un-throttles", f"users/{n['carol']}", "producer_byte_rate"): freed(n["carol"]),
    }
    if removals:
        out[("throttles", f"users/{n['bob']}/clients/app", "producer_byte_rate")] = throttles(
            [(n["bob"], "app", "produce_byte_rate")], MI
        )
        out[("throttles", f"users/{n['gina']}", "producer_byte_rate")] = throttles(
            [(n["gina"], "etl", "produce_byte_rate"), (n["gina"], None, "produce_byte_rate")], 2 * MI
        )
        out[("un-throttles", f"users/{n['dave']}", "producer_byte_rate")] = freed(n["dave"])
    return out
