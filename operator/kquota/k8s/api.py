"""A small asyncio facade over the Kubernetes API for the reconciler.

Only the calls kquota needs, each with the error translation the reconciler
relies on: a missing object is ``None`` or ``False``, not an exception.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import uuid
from dataclasses import dataclass
from typing import Any, cast

from kubernetes.aio import client, config
from kubernetes.aio.client.exceptions import ApiException

from kquota.api.resource import GROUP, VERSION

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class SecretNotFound(LookupError):
    """A referenced Secret or key is missing; the message names it, never its content."""


@dataclass(frozen=True, slots=True)
class ObjectRef:
    kind: str
    plural: str
    namespace: str | None
    name: str
    uid: str


async def connect(kubeconfig: str | None = None, pool_size: int = 32) -> client.ApiClient:
    """An API client from a kubeconfig file, $KUBECONFIG, or the in-cluster ServiceAccount."""
    cfg = client.Configuration()
    # kubernetes.aio.config is untyped.
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)  # type: ignore[no-untyped-call]
    else:
        try:
            config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except config.ConfigException:
            await config.load_kube_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    cfg.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration=cfg)


class Kube:
    def __init__(self, api_client: client.ApiClient, operator_name: str = "kquota") -> None:
        self.api_client = api_client
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.operator_name = operator_name

    async def close(self) -> None:
        await self.api_client.close()  # type: ignore[no-untyped-call]

    # -- status ---------------------------------------------------------------

    async def patch_status(self, ref: ObjectRef, status: dict[str, Any]) -> bool:
        """Merge-patch ``status``; False when the object is gone (deleted meanwhile)."""
        try:
            if ref.namespace is None:
                await self.custom.patch_cluster_custom_object_status(
                    GROUP, VERSION, ref.plural, ref.name, {"status": status}, _content_type=MERGE_PATCH
                )
            else:
                await self.custom.patch_namespaced_custom_object_status(
                    GROUP, VERSION, ref.namespace, ref.plural, ref.name, {"status": status}, _content_type=MERGE_PATCH
                )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    # -- events ---------------------------------------------------------------

    async def event(self, ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on the object; failures are logged, never raised."""
        now = dt.datetime.now(dt.UTC)
        namespace = ref.namespace or "default"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{ref.name}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": ref.kind,
                "name": ref.name,
                "namespace": ref.namespace,
                "uid": ref.uid,
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": self.operator_name},
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
            "reportingComponent": self.operator_name,
            "reportingInstance": self.operator_name,
        }
        try:
            # The client serialises plain dicts; its typed models add nothing here.
            await self.core.create_namespaced_event(namespace, cast(Any, body))
        except Exception as exc:  # noqa: BLE001 - events are best effort
            log.warning("could not record event %s on %s/%s: %s", reason, namespace, ref.name, exc)

    # -- secrets --------------------------------------------------------------

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        try:
            secret = await self.core.read_namespaced_secret(name, namespace)
        except ApiException as exc:
            if exc.status in (403, 404):
                raise SecretNotFound(f"Secret {namespace}/{name} is not readable (HTTP {exc.status})") from None
            raise
        data = secret.data or {}
        if key not in data:
            raise SecretNotFound(f"Secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data[key]).decode()

    # -- config maps (the ledger) -----------------------------------------------

    async def list_config_maps(self, namespace: str, selector: str) -> list[Any]:
        result = await self.core.list_namespaced_config_map(namespace, label_selector=selector)
        return list(result.items)

    async def put_config_map(self, namespace: str, name: str, labels: dict[str, str], data: dict[str, str]) -> None:
        """Create or replace; the operator is the only writer (one active replica)."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": data,
        }
        try:
            await self.core.replace_namespaced_config_map(name, namespace, cast(Any, body))
        except ApiException as exc:
            if exc.status != 404:
                raise
            await self.core.create_namespaced_config_map(namespace, cast(Any, body))


async def gather_limited(coros: list[Any], limit: int) -> list[Any]:
    """Run coroutines with at most ``limit`` in flight; exceptions are returned, not raised."""
    sem = asyncio.Semaphore(limit)

    async def one(coro: Any) -> Any:
        async with sem:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)
