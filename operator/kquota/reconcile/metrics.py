"""The operator's own Prometheus metrics (served on ``/metrics``)."""

from __future__ import annotations

import time

from prometheus_client import Counter, Gauge, Histogram

RECONCILE_SECONDS = Histogram(
    "kquota_reconcile_duration_seconds",
    "Duration of one reconcile pass (read, plan, apply, status).",
    ["cluster"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
)
PHASE_SECONDS = Histogram(
    "kquota_reconcile_phase_seconds",
    "Duration of each phase of a pass (gather, decide, act, report) by scope (full, narrow): what bounds a pass.",
    ["cluster", "scope", "phase"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CHANGE_LATENCY_SECONDS = Histogram(
    "kquota_change_latency_seconds",
    "From a resource change seen to its quota applied on the brokers.",
    ["cluster"],
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
)
PASSES = Counter("kquota_reconcile_passes_total", "Reconcile passes by result.", ["cluster", "result"])
NARROW_PASSES = Counter(
    "kquota_reconcile_narrow_passes_total",
    "Successful passes narrowed to the entities of a few changed resources (also counted in passes_total).",
    ["cluster"],
)
BATCH_OPS = Histogram(
    "kquota_apply_batch_ops",
    "Quota key changes sent in one pass.",
    ["cluster"],
    buckets=(1, 10, 100, 1000, 5000, 10000, 50000),
)
QUEUE_DEPTH = Gauge("kquota_pending_entity_changes", "Entity changes planned but not yet confirmed.", ["cluster"])
DRIFT = Counter("kquota_drift_corrections_total", "Owned quota keys restored after an out-of-band change.", ["cluster"])
ERRORS = Counter("kquota_errors_total", "Errors by reason.", ["cluster", "reason"])
RESOURCES = Gauge("kquota_managed_resources", "Quota resources per cluster and Ready reason.", ["cluster", "reason"])
STATUS_WRITES = Counter("kquota_status_writes_total", "Status patches sent.", ["cluster"])
OWNED_KEYS = Gauge("kquota_owned_quota_keys", "Quota keys recorded in the ownership ledger.", ["cluster"])
REMOVED = Counter(
    "kquota_quota_keys_removed_total",
    "Quota keys removed from the brokers (each also an event naming the key and the cause).",
    ["cluster"],
)
GUARD_HELD = Gauge(
    "kquota_removals_held",
    "Quota key removals the mass-removal guard holds until the KafkaCluster is annotated to approve them.",
    ["cluster"],
)
CONTESTED = Counter(
    "kquota_contested_keys_total",
    "Owned keys another writer changed back so often that kquota stopped restoring them for a while.",
    ["cluster"],
)


class PhaseClock:
    """Times a pass's phases into ``kquota_reconcile_phase_seconds`` once the pass's scope is known."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.started = self._last = time.monotonic()
        self._phases: list[tuple[str, float]] = []

    def done(self, phase: str, full: bool | None = None) -> None:
        now = time.monotonic()
        self._phases.append((phase, now - self._last))
        self._last = now
        if full is not None:
            scope = "full" if full else "narrow"
            for name, seconds in self._phases:
                PHASE_SECONDS.labels(self.cluster, scope, name).observe(seconds)
