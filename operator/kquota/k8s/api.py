"""A small asyncio facade over the Kubernetes API for the reconciler.

Only the calls kquota needs, each with the error translation the reconciler
relies on: a missing object is ``None`` or ``False``, not an exception.

Requests go through the client's transport (authentication, TLS, connection
pool) with plain JSON in and out, not through its generated API classes and
models: ``CoreV1Api`` alone costs 22 MiB of resident memory once imported,
a tenth of the operator's budget at 10,000 resources, for five calls.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import logging
import urllib.request
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote, urlsplit

import aiohttp
from kubernetes.aio import client, config
from kubernetes.aio.client.exceptions import ApiException

from kquota import __version__
from kquota.api.resource import GROUP, VERSION

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


class SecretNotFound(LookupError):
    """A referenced Secret or key is missing; the message names it, never its content."""


@dataclass(frozen=True, slots=True)
class SecretData:
    """A Secret's keys as bytes, with the one way to read a key as text.

    Kubernetes stores every key as base64 of arbitrary bytes; a key is decoded
    as text only when a connection reads it, so a binary key next to it (a
    PKCS#12 store) never stops anything. Errors name the Secret and the key,
    never the content.
    """

    #: ``Secret <namespace>/<name>``, for messages.
    where: str
    data: Mapping[str, bytes]

    def __contains__(self, key: object) -> bool:
        return key in self.data

    def names(self) -> list[str]:
        return sorted(self.data)

    def binary(self, key: str) -> bytes:
        """The key's bytes (raises SecretNotFound when the Secret has no such key)."""
        if key not in self.data:
            raise SecretNotFound(f"{self.where} has no key {key!r}")
        return self.data[key]

    def text(self, key: str) -> str:
        """The key as UTF-8 text (raises SecretNotFound when it is missing or not text)."""
        raw = self.binary(key)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise SecretNotFound(f"{self.where}: key {key!r} holds binary data, not text") from None

    def get_text(self, key: str) -> str | None:
        """The key as text, or None when the Secret has no such key (raises SecretNotFound when it is not text)."""
        return self.text(key) if key in self.data else None


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
    env_proxy(cfg)
    return client.ApiClient(configuration=cfg)


def env_proxy(cfg: client.Configuration) -> None:
    """Take the API server's proxy from the environment once, not on every request.

    The client's aiohttp session trusts the environment, so each request looks up
    the proxy variables and reads ``~/.netrc`` in an executor thread: about a tenth
    of the operator's CPU while 10,000 resources arrive (py-spy). The API server
    takes a token or a certificate, never netrc credentials, so the proxy is
    resolved here as aiohttp would (``no_proxy`` too) and the session stops
    looking. A proxy set in the kubeconfig (``proxy-url``) wins. Proxy
    credentials go in the proxy URL; they are no longer read from ``~/.netrc``.
    """
    if not cfg.proxy:
        url = urlsplit(cfg.host)
        proxies = urllib.request.getproxies_environment()
        chosen = proxies.get(url.scheme)
        if chosen and not urllib.request.proxy_bypass(url.hostname or ""):
            cfg.proxy = chosen
    cfg.client_session_kwargs = {**(cfg.client_session_kwargs or {}), "trust_env": False}


#: Asks a list for its objects' metadata only (falls back to the full objects on a server without it).
METADATA_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"


def api_path(*segments: str) -> str:
    # Each segment quoted whole: a name can never add a path segment or a query.
    return "/" + "/".join(quote(s, safe="") for s in segments)


#: What kquota's requests say they come from. The API server names the field manager of a write
#: without an explicit one after this (up to the first "/"), so ``managedFields``, audit logs and
#: ``kubectl get --show-managed-fields`` say "kquota" for the statuses, ledger ConfigMaps and events
#: it writes, not the client library's "OpenAPI-Generator".
USER_AGENT = f"kquota/{__version__}"


class Kube:
    def __init__(self, api_client: client.ApiClient, operator_name: str = "kquota") -> None:
        api_client.user_agent = USER_AGENT
        self.api_client = api_client
        self.operator_name = operator_name
        self._watch_client: client.ApiClient | None = None

    async def close(self) -> None:
        await self.api_client.close()  # type: ignore[no-untyped-call]
        if self._watch_client is not None:
            await self._watch_client.close()  # type: ignore[no-untyped-call]

    def _watch_api(self) -> client.ApiClient:
        """The client watches go through: the same settings, but a connection pool of its own with no limit.

        Each informer holds a connection for as long as it watches, one per quota kind and watched
        namespace. In the shared pool (``connect``'s 32) the watches of 11 namespaces took every
        connection and every other request, a status write or the next informer's list, waited for
        ever (#35).
        """
        if self._watch_client is None:
            watcher = client.ApiClient(configuration=self.api_client.configuration)
            watcher.user_agent = USER_AGENT
            # Read when the pool is first made (on the first request): 0 is aiohttp's "no limit".
            watcher.rest_client.maxsize = 0
            self._watch_client = watcher
        return self._watch_client

    async def request(
        self,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> dict[str, Any]:
        """One API request with a JSON body; the decoded JSON reply. HTTP errors raise ApiException."""
        api = self.api_client
        # The client's own serialiser adds the credentials (bearer token) for the request.
        _, url, headers, payload, _ = await api.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params={"Accept": accept, "Content-Type": content_type},
            body=dict(body) if body is not None else None,
            auth_settings=["BearerToken"],
        )
        response = await api.call_api(method, url, headers, payload)
        await response.read()  # type: ignore[no-untyped-call]
        # Raises ApiException (with .status) on a non-2xx reply.
        data = api.response_deserialize(response, {"2XX": "object"}).data
        return cast(dict[str, Any], data)

    async def stream(
        self, path: str, query: list[tuple[str, str]], read_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        """A streaming GET (a watch): each line of the reply decoded as it arrives. HTTP errors raise ApiException.

        Lines are split here rather than by aiohttp's ``readline``, whose 64 KiB
        line limit a large object's watch event can exceed.
        """
        api = self._watch_api()
        _, url, headers, _, _ = await api.param_serialize(
            method="GET",
            resource_path=path,
            query_params=query,
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        # No total timeout (a watch lasts minutes); a stream silent for read_timeout is dead.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=read_timeout)
        response = await api.call_api("GET", url, headers, None, _request_timeout=timeout)
        raw = response.response
        try:
            if raw.status >= 300:
                body = await raw.read()
                raise ApiException(status=raw.status, reason=raw.reason, body=body.decode(errors="replace"))
            pending = b""
            async for chunk in raw.content.iter_any():
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)
            if pending.strip():
                yield json.loads(pending)
        finally:
            raw.release()

    # -- custom objects (the CLI reads KafkaClusters and quota resources) -------

    async def get_cluster_object(self, plural: str, name: str) -> dict[str, Any]:
        return await self.request("GET", api_path("apis", GROUP, VERSION, plural, name))

    async def list_cluster_objects(self, plural: str) -> dict[str, Any]:
        """Every object of a kind across namespaces (one list; the CLI's scale)."""
        return await self.request("GET", api_path("apis", GROUP, VERSION, plural))

    async def list_cluster_uids(self, plural: str, page: int = 500) -> set[str]:
        """The uid of every object of a kind across namespaces, from the API server itself.

        Metadata only (PartialObjectMetadataList: no spec or status), in pages of
        ``page``; without a resourceVersion the list is a consistent read, so an
        object that existed before the request is in it.
        """
        path = api_path("apis", GROUP, VERSION, plural)
        uids: set[str] = set()
        token = ""
        while True:
            query = [("limit", str(page))] + ([("continue", token)] if token else [])
            reply = await self.request("GET", path, query=query, accept=METADATA_LIST_ACCEPT)
            uids.update(str((item.get("metadata") or {}).get("uid")) for item in reply.get("items") or ())
            token = str((reply.get("metadata") or {}).get("continue") or "")
            if not token:
                return uids

    # -- other projects' objects (Strimzi's Kafka and KafkaUser) ---------------

    async def get_namespaced_object(
        self, group: str, versions: Sequence[str], namespace: str, plural: str, name: str
    ) -> dict[str, Any]:
        """One namespaced object, from the first of ``versions`` the API server serves (404 tries the next)."""
        last: ApiException | None = None
        for version in versions:
            try:
                return await self.request(
                    "GET", api_path("apis", group, version, "namespaces", namespace, plural, name)
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                last = exc
        assert last is not None
        raise last

    async def list_namespaced_objects(
        self, group: str, versions: Sequence[str], namespace: str, plural: str, selector: str
    ) -> list[dict[str, Any]]:
        """Objects matching a label selector in one namespace, from the first of ``versions`` served."""
        last: ApiException | None = None
        for version in versions:
            path = api_path("apis", group, version, "namespaces", namespace, plural)
            try:
                result = await self.request("GET", path, query=[("labelSelector", selector)])
            except ApiException as exc:
                if exc.status != 404:
                    raise
                last = exc
                continue
            return list(result.get("items") or [])
        assert last is not None
        raise last

    # -- status ---------------------------------------------------------------

    async def patch_status(self, ref: ObjectRef, status: dict[str, Any]) -> bool:
        """Merge-patch ``status``; False when the object is gone (deleted meanwhile)."""
        scope = ("namespaces", ref.namespace) if ref.namespace is not None else ()
        path = api_path("apis", GROUP, VERSION, *scope, ref.plural, ref.name, "status")
        try:
            await self.request("PATCH", path, body={"status": status}, content_type=MERGE_PATCH)
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
            await self.request("POST", api_path("api", "v1", "namespaces", namespace, "events"), body=body)
        except Exception as exc:  # noqa: BLE001 - events are best effort
            log.warning("could not record event %s on %s/%s: %s", reason, namespace, ref.name, exc)

    # -- secrets and config maps read for a connection -----------------------------

    async def secret(self, namespace: str, name: str) -> SecretData:
        """A Secret's keys as bytes (raises SecretNotFound when it cannot be read).

        Nothing is decoded here: a Secret may hold binary keys (Strimzi's
        ``ca.p12`` and ``user.p12``), and only the keys a connection uses are
        ever decoded, by :class:`SecretData`.
        """
        try:
            secret = await self.request("GET", api_path("api", "v1", "namespaces", namespace, "secrets", name))
        except ApiException as exc:
            if exc.status in (403, 404):
                raise SecretNotFound(f"Secret {namespace}/{name} is not readable (HTTP {exc.status})") from None
            raise
        data = {}
        for key, value in (secret.get("data") or {}).items():
            try:
                data[str(key)] = base64.b64decode(str(value), validate=True)
            except ValueError:
                # The API server only stores base64; this is a corrupt object, not a reason to stop reading.
                data[str(key)] = b""
        return SecretData(f"Secret {namespace}/{name}", data)

    async def config_map_value(self, namespace: str, name: str, key: str) -> str:
        """One key of a ConfigMap (raises SecretNotFound naming what is missing or unreadable)."""
        where = f"ConfigMap {namespace}/{name}"
        try:
            cm = await self.request("GET", api_path("api", "v1", "namespaces", namespace, "configmaps", name))
        except ApiException as exc:
            if exc.status in (403, 404):
                raise SecretNotFound(f"{where} is not readable (HTTP {exc.status})") from None
            raise
        value = (cm.get("data") or {}).get(key)
        if value is None:
            raise SecretNotFound(f"{where} has no key {key!r}")
        return str(value)

    # -- config maps (the ledger) -----------------------------------------------

    async def list_config_maps(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        """ConfigMaps as JSON objects (``metadata``, ``data``)."""
        path = api_path("api", "v1", "namespaces", namespace, "configmaps")
        result = await self.request("GET", path, query=[("labelSelector", selector)])
        return list(result.get("items") or [])

    async def put_config_map(self, namespace: str, name: str, labels: dict[str, str], data: dict[str, str]) -> None:
        """Create or replace; the operator is the only writer (one active replica)."""
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": data,
        }
        collection = api_path("api", "v1", "namespaces", namespace, "configmaps")
        try:
            await self.request("PUT", f"{collection}/{quote(name, safe='')}", body=body)
        except ApiException as exc:
            if exc.status != 404:
                raise
            await self.request("POST", collection, body=body)


async def gather_limited(coros: list[Any], limit: int) -> list[Any]:
    """Run coroutines with at most ``limit`` in flight; exceptions are returned, not raised."""
    sem = asyncio.Semaphore(limit)

    async def one(coro: Any) -> Any:
        try:
            async with sem:
                return await coro
        finally:
            # Cancelled while waiting for its turn (the operator stopping): the coroutine never
            # started, and closing it keeps a "never awaited" warning per write out of the log.
            coro.close()

    return await asyncio.gather(*(one(c) for c in coros), return_exceptions=True)
