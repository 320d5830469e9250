"""Searching everything kquota exposes for a secret: logs, statuses, events, the ledger.

Credentials reach kquota only through Secrets and must not come back out
anywhere a user or a log collector can read: the operator's log (debug level,
tracebacks included), any kquota resource (status conditions, messages), any
Event, the ledger ConfigMaps, or the operator's metrics (label values). ``exposed`` gathers all of those as text;
``found`` says which needle is in which of them.
"""

from __future__ import annotations

from collections.abc import Mapping

from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import LEDGER_NAMESPACE, OperatorProcess


def exposed(kube: KubeAPIServer, operator: OperatorProcess, ledger_namespace: str = LEDGER_NAMESPACE) -> dict[str, str]:
    """Place -> its text: the operator's logs and metrics, every kquota resource, every Event, the ledger."""
    try:
        metrics = operator.metrics()
    except OSError:  # a stopped operator has none
        metrics = ""
    return {
        "operator metrics": metrics,
        "operator log": operator.log(),
        # The category covers the quota kinds and KafkaClusters, status included.
        "kquota resources": kube.kubectl("get", "kquota", "-A", "-o", "json").stdout,
        "events": kube.kubectl("get", "events", "-A", "-o", "json").stdout,
        "ledger ConfigMaps": kube.kubectl("get", "configmaps", "-n", ledger_namespace, "-o", "json").stdout,
    }


def found(needles: Mapping[str, str], places: Mapping[str, str]) -> list[str]:
    """``"<needle> in <place>"`` for every needle that occurs in a place; [] when nothing leaked."""
    for label, needle in needles.items():
        if len(needle) < 8:
            # A short needle would match by chance and prove nothing.
            raise ValueError(f"needle {label!r} is too short to search for")
    return [
        f"{label} in {place}" for label, needle in needles.items() for place, text in places.items() if needle in text
    ]
