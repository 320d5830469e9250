"""Operator settings, from environment variables (``KQUOTA_*``) or ``kquota operator`` flags."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KQUOTA_", extra="ignore")

    namespace: str = Field("kquota-system", description="Namespace of the ownership ledger ConfigMaps.")
    default_cluster: str = Field("default", description="KafkaCluster used when a resource has no clusterRef.")
    watch_namespaces: list[str] = Field(
        default_factory=list, description="Namespaces to watch for quota resources (empty: all)."
    )
    drift_interval: float = Field(60.0, gt=0, description="Seconds between drift checks when nothing changes.")
    coalesce_seconds: float = Field(
        0.05,
        ge=0,
        description="Wait after a change that follows another within a second, so a burst becomes one pass "
        "(a lone change goes at once).",
    )
    retry_max_seconds: float = Field(30.0, gt=0, description="Longest backoff while Kafka is unreachable.")
    reachability_interval: float = Field(
        5.0,
        gt=0,
        description="Seconds between checks, while nothing else reaches the brokers, that they still answer (one "
        "DescribeCluster, which must answer within as long): unanswered, the KafkaCluster and its resources say "
        "KafkaUnavailable, and the check goes on at this interval until they answer again.",
    )
    auth_failures_to_stall: int = Field(
        3,
        ge=1,
        description="Identical authentication failures in a row (the same credentials refused the same way) after "
        "which the KafkaCluster and its resources are Stalled (AuthenticationFailed); kquota keeps retrying "
        "with backoff, so corrected credentials recover by themselves.",
    )
    rejected_retry_seconds: float = Field(
        300.0, gt=0, description="How long a broker-rejected value waits before a retry."
    )
    narrow_max_entities: int = Field(
        32,
        ge=0,
        description="Most entities a pass after a few changes describes one by one; more (or 0) makes it a full pass.",
    )
    status_concurrency: int = Field(16, ge=1, description="Status patches in flight at once.")
    metrics_interval: float = Field(5.0, gt=0, description="Seconds between reads of the brokers' quota metrics.")
    observed_min_interval: float = Field(
        30.0, ge=0, description="Least seconds between status.observed writes whose conditions did not change."
    )
    api_connections: int = Field(
        32,
        ge=1,
        description="Most connections Kopf opens to the API server for requests (each holds a TLS buffer); "
        "watch streams get room of their own (3 per watched namespace).",
    )
    allow_shared_kafka_clusters: bool = Field(
        False,
        description="Let several KafkaClusters manage one Kafka cluster (else the younger is refused).",
    )
    contested_restores: int = Field(
        3, ge=2, description="Restores of one key within contested_window that make it Contested."
    )
    contested_window: float = Field(600.0, gt=0, description="Seconds over which restores of a key are counted.")
    contested_retry: float = Field(
        300.0, gt=0, description="Seconds a Contested key is left alone before kquota restores it once more."
    )
    removal_settle: float = Field(
        5.0,
        ge=0,
        description="Seconds without a new change before keys are removed, so a prune is seen (and guarded) whole.",
    )
    deletion_guard: bool = Field(
        True, description="Hold a pass's removals when they are a large share of a cluster's owned keys."
    )
    deletion_guard_percent: float = Field(
        30.0, gt=0, le=100, description="Removals above this percentage of a cluster's owned keys are held."
    )
    deletion_guard_max: int = Field(500, ge=1, description="Removals above this count are held, whatever the share.")
    deletion_guard_min: int = Field(
        10, ge=1, description="A pass removing fewer keys than this is never held (everyday deletions)."
    )
    protected_users: list[str] = Field(
        default_factory=list, description="Users never changed, in addition to each KafkaCluster's."
    )
    protected_client_ids: list[str] = Field(default_factory=list)
    metrics_port: int = Field(9090, ge=0, description="Port of /metrics (0 disables).")
    liveness_port: int = Field(8080, ge=0, description="Port of /healthz (0 disables).")
    kubeconfig: str | None = Field(None, description="Kubeconfig file; default in-cluster or $KUBECONFIG.")
    peering: str | None = Field(None, description="Kopf peering name for HA; None runs standalone.")
    peering_lifetime: int = Field(
        15,
        ge=10,
        le=3600,
        description="Seconds a replica's peering record stays valid without a keep-alive: a standby takes over "
        "at most this long after the active replica dies (a clean exit hands over at once).",
    )
    log_format: str = Field("plain", pattern="^(plain|json)$")
    gc_freeze_seconds: float = Field(
        2.0,
        ge=0,
        description="Seconds after which surviving objects are frozen out of the garbage collector's full scans "
        "(kquota.handlers.gc_policy); 0 leaves CPython's collector as it is.",
    )
