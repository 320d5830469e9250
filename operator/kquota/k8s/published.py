"""The operator's settings the CLI must agree with, published in ConfigMap ``kquota-operator``.

A quota resource without ``clusterRef`` targets the operator's default
cluster, a setting of the operator (``KQUOTA_DEFAULT_CLUSTER``; the Helm
chart sets it from ``operator.defaultCluster`` or the first of
``kafka.clusters``). ``kquota plan`` runs elsewhere and cannot read the
operator's environment; guessing ``default`` made it plan removals that
would never happen. So the operator writes what the CLI needs into a
ConfigMap in its ledger namespace at startup, and the CLI reads it there.

The ConfigMap is found by label, with ``list``: the operator's Role (and a
CLI user's, who already lists the ledger) has ``list`` on ConfigMaps in
that namespace but deliberately no ``get``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Final

from kquota.k8s.api import Kube

log = logging.getLogger(__name__)

NAME: Final = "kquota-operator"
DATA_KEY: Final = "settings.json"
LABEL: Final = "kquota.io/operator-settings"


@dataclass(frozen=True, slots=True)
class PublishedSettings:
    """What a running operator says about itself."""

    default_cluster: str
    version: str
    #: Operator-wide protected principals (KQUOTA_PROTECTED_USERS / _CLIENT_IDS), on every cluster.
    protected_users: tuple[str, ...] = ()
    protected_client_ids: tuple[str, ...] = ()
    #: The mass-removal guard's settings: enabled, percent, max, min (KQUOTA_DELETION_GUARD*).
    deletion_guard: tuple[bool, float, int, int] | None = None


def encode(settings: PublishedSettings) -> str:
    doc: dict[str, object] = {
        "defaultCluster": settings.default_cluster,
        "version": settings.version,
        "protectedUsers": list(settings.protected_users),
        "protectedClientIds": list(settings.protected_client_ids),
    }
    if settings.deletion_guard is not None:
        enabled, percent, most, least = settings.deletion_guard
        doc["deletionGuard"] = {"enabled": enabled, "percent": percent, "max": most, "min": least}
    return json.dumps(doc, sort_keys=True)


def _strings(value: object) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


def _guard(value: object) -> tuple[bool, float, int, int] | None:
    # Written by an older operator: absent. The CLI then assumes the defaults.
    if not isinstance(value, dict):
        return None
    try:
        return (bool(value["enabled"]), float(value["percent"]), int(value["max"]), int(value["min"]))
    except (KeyError, TypeError, ValueError):
        return None


def decode(text: str) -> PublishedSettings:
    """The settings in ``text``; ValueError when it is not what :func:`encode` writes."""
    doc = json.loads(text)
    if not isinstance(doc, dict) or not isinstance(doc.get("defaultCluster"), str) or not doc["defaultCluster"]:
        raise ValueError(f"{DATA_KEY} has no defaultCluster")
    version = doc.get("version")
    return PublishedSettings(
        doc["defaultCluster"],
        version if isinstance(version, str) else "unknown",
        _strings(doc.get("protectedUsers")),
        _strings(doc.get("protectedClientIds")),
        _guard(doc.get("deletionGuard")),
    )


async def publish(kube: Kube, namespace: str, settings: PublishedSettings) -> None:
    """Create or replace the ConfigMap (every replica writes the same content)."""
    labels = {LABEL: "true", "app.kubernetes.io/managed-by": "kquota"}
    await kube.put_config_map(namespace, NAME, labels, {DATA_KEY: encode(settings)})


async def publish_or_warn(kube: Kube, namespace: str, settings: PublishedSettings) -> None:
    """:func:`publish`, with a failure logged: reconciling does not depend on it, and the CLI refuses to guess."""
    try:
        await publish(kube, namespace, settings)
    except Exception as exc:  # noqa: BLE001 - any API failure; the operator's own work goes on
        log.warning(
            "could not publish the operator's settings in ConfigMap %s/%s (kquota plan will ask for "
            "--default-cluster): %s",
            namespace,
            NAME,
            exc,
        )


async def read(kube: Kube, namespace: str) -> PublishedSettings | None:
    """The settings published in ``namespace``; None when no operator published any there.

    API errors propagate; a ConfigMap whose data is not readable raises ValueError.
    """
    for cm in await kube.list_config_maps(namespace, f"{LABEL}=true"):
        if cm.get("metadata", {}).get("name") == NAME:
            text = (cm.get("data") or {}).get(DATA_KEY)
            if not text:
                raise ValueError(f"ConfigMap {namespace}/{NAME} has no {DATA_KEY}")
            return decode(text)
    return None
