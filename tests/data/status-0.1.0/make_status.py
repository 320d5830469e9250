"""Writes statuses.yaml: a status of every kind as kquota 0.1.0 writes it (status format 1, no formatVersion).

Run once, from the 0.1.0 code before the status format was versioned (``git
archive`` of the commit in README.md, ``operator/`` on PYTHONPATH), never again:
the file is a record of what that release wrote, and later code must keep
reading it as it is. Each status is what the operator's renderers
(``render_status``, ``render_cluster_status``) give for an outcome the
reconciler makes, written onto a resource without a status: the merge patch of
an empty status is the whole rendered status, and the API server stores it as is.

    python tests/data/status-0.1.0/make_status.py > tests/data/status-0.1.0/statuses.yaml
"""

from __future__ import annotations

import importlib.util
import json
import sys
from typing import Any

import yaml

from kquota import __version__
from kquota.domain.entities import QuotaKey
from kquota.domain.mutation import ControllerWindow, with_burst
from kquota.domain.observed.status import KeyFigures, Observed
from kquota.domain.status import Outcome, Reason, merge_patch, render_cluster_status, render_status
from kquota.domain.topics import TopicLayout, allowance

T0 = "2026-11-20T10:00:00Z"
T1 = "2026-11-20T10:05:00Z"
P, C, M = QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE, QuotaKey.CONTROLLER_MUTATION_RATE


def _written(prev: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """What the API server holds after the merge patch kquota sends (nulls delete)."""

    def apply(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
        out = dict(target)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            elif isinstance(value, dict):
                out[key] = apply(out.get(key) if isinstance(out.get(key), dict) else {}, value)
            else:
                out[key] = value
        return out

    return apply(prev or {}, merge_patch(prev, new))


def statuses() -> list[dict[str, Any]]:
    observed = Observed(
        source="jmx",
        window_seconds=60.0,
        available=True,
        near_limit_percent=80,
        limits={P: 1048576.0, C: 2097152.0},
        total={P: KeyFigures(rate=524288.0, throttle_ms=0.0, share=0.5), C: KeyFigures(rate=10.0, share=0.0)},
        brokers={"0": {P: KeyFigures(rate=524288.0, share=0.5)}},
    )
    applied = Outcome(
        Reason.APPLIED,
        "everything this resource sets is live on the brokers",
        {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2097152.0},
        True,
        observed=observed.to_status(),
        conditions=observed.conditions(),
    )
    client = render_status(None, 3, applied, "users/alice", "main", T0)
    # A later pass that found the cluster unreachable: the applied values and their time stay.
    client_down = _written(
        client,
        render_status(
            client,
            3,
            Outcome(Reason.KAFKA_UNAVAILABLE, "cannot reach the brokers: timed out", dict(applied.applied), False),
            "users/alice",
            "main",
            T1,
        ),
    )
    layout = TopicLayout.from_partition_leaders({0: 1, 1: 1, 2: 2})
    budget = {P: 3145728.0}
    topic = render_status(
        None,
        1,
        Outcome(
            Reason.APPLIED,
            "everything this resource sets is live on the brokers",
            {"producer_byte_rate": 1048576.0},
            True,
            allowance=allowance(budget, layout),
            clients=({"entity": "users/ingest", "producer_byte_rate": 1048576.0},),
        ),
        "topics/orders",
        "main",
        T0,
    )
    windows = {1: ControllerWindow(11, 1), 2: ControllerWindow(11, 1)}
    mutation = render_status(
        None,
        2,
        with_burst(Outcome(Reason.APPLIED, "ok", {"controller_mutation_rate": 5.0}, True), 5.0, 50, windows),
        "users/ci",
        "main",
        T0,
    )
    orphan = render_status(
        None,
        1,
        Outcome(
            Reason.CLUSTER_NOT_FOUND,
            "KafkaCluster 'gone' does not exist: nothing is applied until it is created or spec.clusterRef "
            "names another; quotas it applied before stay on the brokers as they are",
            {"consumer_byte_rate": 4096.0},
            False,
        ),
        "clients/reporting",
        "gone",
        T0,
    )
    cluster = render_cluster_status(None, 4, Reason.APPLIED, "connected", 3, T0, cluster_id="q1Sh-9_ISia_zwGINzRvyQ")
    return [
        {"kind": "ClientQuota", "name": "alice", "status": client},
        {"kind": "ClientQuota", "name": "alice-unavailable", "status": client_down},
        {"kind": "TopicQuota", "name": "orders", "status": topic},
        {"kind": "ControllerMutationQuota", "name": "ci", "status": mutation},
        {"kind": "ClientQuota", "name": "reporting-orphan", "status": orphan},
        {"kind": "KafkaCluster", "name": "main", "status": cluster},
    ]


def main() -> int:
    if __version__ != "0.1.0" or importlib.util.find_spec("kquota.domain.status_format") is not None:
        print(
            "this records kquota 0.1.0's statuses, from before status.formatVersion: run it on that code",
            file=sys.stderr,
        )
        return 1
    header = (
        f"# Statuses kquota {__version__} wrote (status format 1: no formatVersion), one of each kind.\n"
        "# Test data: made once by make_status.py (see README.md); never regenerate.\n"
    )
    # Through JSON, as the API server stores it (and no YAML aliases for a status shared by two).
    stored = json.loads(json.dumps(statuses()))
    sys.stdout.write(header + yaml.safe_dump({"statuses": stored}, allow_unicode=True, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
