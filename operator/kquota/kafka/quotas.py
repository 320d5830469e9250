"""Kafka's client-quota admin APIs (DescribeClientQuotas, AlterClientQuotas) for kquota.

This is the one place that reads and writes broker quota configuration. No
maintained Python client exposes these APIs (confluent-kafka/librdkafka has not
shipped KIP-546), so the requests are kafka-python's protocol classes sent
through kafka-python's admin client connection. Everything kafka-python-specific
(and untyped) stays in this module; callers see ``Entity``/``QuotaKey`` from
``kquota.domain.entities`` and the small result types below. An integration
test against a real broker (tests/integration/test_quota_adapter.py) keeps a
kafka-python upgrade from breaking this silently.

Calls are synchronous and may be made from several threads at once (the
operator uses ``asyncio.to_thread``): kafka-python runs all network I/O on its
own thread and its ``run`` is safe to call concurrently.

Credentials never leave ``ConnectionSettings``: they are kept out of reprs,
out of kafka-python's debug log of its configuration, and out of exception
messages.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import kafka.errors as kafka_errors
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest, DescribeClusterRequest

from kquota.domain.entities import Entity, QuotaKey

log = logging.getLogger(__name__)

#: The controller refuses a request that would write more records than this
#: (one record per changed key) with POLICY_VIOLATION, failing the whole request.
MAX_OPS_PER_REQUEST: Final = 10_000

#: Error code kquota reports for an entity the broker's response left out.
UNKNOWN_SERVER_ERROR: Final = -1


@dataclass(frozen=True)
class ConnectionSettings:
    """How to reach the brokers. ``sasl_password`` never appears in the repr."""

    bootstrap_servers: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    request_timeout_ms: int = 30_000
    #: How long to keep trying to reach a first broker. A wrong password is only
    #: reported once this runs out: kafka-python keeps retrying the bootstrap.
    connect_timeout_ms: int = 10_000
    client_id: str = "kquota"


@dataclass(frozen=True)
class QuotaOp:
    """Set ``key`` to ``value``, or remove it when ``value`` is None."""

    key: QuotaKey
    value: float | None


@dataclass(frozen=True)
class EntityAlteration:
    entity: Entity
    ops: tuple[QuotaOp, ...]


@dataclass(frozen=True)
class EntityResult:
    """The broker's verdict for one entity: all its ops applied, or none."""

    entity: Entity
    error_code: int
    error_message: str | None
    #: Kafka's error name, e.g. ``INVALID_REQUEST``; ``NONE`` on success.
    error_name: str = "NONE"

    @property
    def ok(self) -> bool:
        return self.error_code == 0


@dataclass(frozen=True)
class RawQuotaEntry:
    """One entry exactly as the broker described it, including types/keys kquota does not know."""

    parts: tuple[tuple[str, str | None], ...]
    values: tuple[tuple[str, float], ...]


class KafkaUnavailable(Exception):
    """The brokers could not be reached or did not answer in time."""


class KafkaAuthenticationFailed(KafkaUnavailable):
    """The brokers refused kquota's credentials (a kind of unavailability to callers)."""


class QuotaRequestError(Exception):
    """The broker answered a whole request with an error (e.g. not authorized)."""

    def __init__(self, error_code: int, error_name: str, message: str | None) -> None:
        super().__init__(f"{error_name} ({error_code}): {message or 'no message'}")
        self.error_code = error_code
        self.error_name = error_name


class _Secret(str):
    """A password that is itself but prints as stars.

    kafka-python logs its whole configuration at debug level when an admin
    client starts (``%s`` of a dict, so the values' ``repr``); the SASL code only
    encodes the value, which a ``str`` subclass supports unchanged.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "'********'"


def _error_name(code: int) -> str:
    # Kafka calls code 0 NONE; kafka-python says NO_ERROR. Use Kafka's names.
    return "NONE" if code == 0 else str(kafka_errors.for_code(code).message)


# Transport-level failures worth another try on another broker, within the deadline.
_RETRIABLE: Final[tuple[type[BaseException], ...]] = (
    kafka_errors.KafkaConnectionError,
    kafka_errors.NodeNotReadyError,
    kafka_errors.RequestTimedOutError,
    kafka_errors.KafkaTimeoutError,
    kafka_errors.NotControllerError,
)


class _BootstrapFailed(Exception):
    def __init__(self, cause: Exception, auth: Exception | None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.auth = auth


class _AuthFailureSpy(logging.Filter):
    """Notes a SASL refusal during kafka-python's bootstrap.

    kafka-python retries a refused login until its bootstrap timeout and then
    reports only "Unable to bootstrap"; the broker's refusal is logged (a
    warning on ``kafka.net.manager`` from the client's I/O thread) and nowhere
    else. Catching it here lets kquota say "wrong credentials" instead of
    "unreachable". If kafka-python's logging is silenced or changes, callers
    still get ``KafkaUnavailable``, just the less precise one.
    """

    def __init__(self, io_thread: str) -> None:
        super().__init__()
        self._io_thread = io_thread
        self.failure: Exception | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.threadName == self._io_thread and isinstance(record.args, tuple):
            for arg in record.args:
                if isinstance(arg, kafka_errors.SaslAuthenticationFailedError):
                    self.failure = arg
        return True


class _AdminClient(KafkaAdminClient):  # type: ignore[misc]  # kafka-python is untyped
    """kafka-python's admin client plus a way to send any request to any broker.

    ``_manager`` and ``send`` are what kafka-python's own admin methods use; a
    subclass keeps that reliance in one spot.
    """

    def __init__(self, **configs: Any) -> None:
        spy = _AuthFailureSpy(f"kafka-io-{configs.get('client_id')}")
        manager_log = logging.getLogger("kafka.net.manager")
        manager_log.addFilter(spy)
        try:
            super().__init__(**configs)
        except Exception as exc:
            self._stop_io()
            raise _BootstrapFailed(exc, spy.failure) from exc
        except BaseException:
            self._stop_io()
            raise
        finally:
            manager_log.removeFilter(spy)

    def _stop_io(self) -> None:
        # kafka-python starts its I/O thread before bootstrapping and does not
        # stop it when the bootstrap fails: without this every failed connect
        # attempt would leak a thread.
        self._closed = False
        with contextlib.suppress(Exception):  # best effort on an already failing path
            self.close()

    def send_any(self, request: Any) -> Any:
        async def send() -> Any:
            return await self._manager.send(request)

        return self._manager.run(send)


class QuotaAdmin:
    """Describe and alter client quotas. Connects lazily and reconnects after failures."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self._settings = settings
        self._lock = threading.Lock()
        self._client: _AdminClient | None = None

    def __repr__(self) -> str:
        user = f", user={self._settings.sasl_username!r}" if self._settings.sasl_username else ""
        return f"QuotaAdmin({self._settings.bootstrap_servers!r}, {self._settings.security_protocol}{user})"

    # -- reading ----------------------------------------------------------------

    def describe_all_raw(self) -> list[RawQuotaEntry]:
        """Every quota entry on the cluster, as the broker reports it."""
        # No components and strict=false is "everything"; any broker answers
        # from its metadata image.
        return self._describe(DescribeClientQuotasRequest(components=[], strict=False))

    def describe_entity(self, entity: Entity) -> dict[QuotaKey, float]:
        """The quotas set on exactly this entity (one small request, for polling)."""
        # match_type 0 = EXACT name, 1 = DEFAULT entity; strict excludes entities with more parts.
        component = DescribeClientQuotasRequest.ComponentData
        components = [
            component(entity_type=etype, match_type=1 if name is None else 0, match=name)
            for etype, name in entity.parts().items()
        ]
        for raw in self._describe(DescribeClientQuotasRequest(components=components, strict=True)):
            if Entity.from_parts(dict(raw.parts)) == entity:
                return {QuotaKey(k): v for k, v in raw.values if k in QuotaKey._value2member_map_}
        return {}

    def _describe(self, request: Any) -> list[RawQuotaEntry]:
        response = self._send(request, "DescribeClientQuotas")
        if response.error_code:
            raise QuotaRequestError(response.error_code, _error_name(response.error_code), response.error_message)
        entries: list[RawQuotaEntry] = []
        for entry in response.entries or ():
            parts = tuple(
                (str(e.entity_type), None if e.entity_name is None else str(e.entity_name)) for e in entry.entity
            )
            values = tuple((str(v.key), float(v.value)) for v in entry.values)
            entries.append(RawQuotaEntry(parts, values))
        return entries

    def describe_all(self) -> dict[Entity, dict[QuotaKey, float]]:
        """Every quota kquota understands: entity -> {key: value}.

        Entity types or keys from a newer Kafka are left out (logged at debug;
        ``describe_all_raw`` shows them) rather than failing the whole read.
        """
        out: dict[Entity, dict[QuotaKey, float]] = {}
        for raw in self.describe_all_raw():
            try:
                entity = Entity.from_parts(dict(raw.parts))
            except ValueError as exc:
                log.debug("skipping quota entity %r unknown to kquota: %s", raw.parts, exc)
                continue
            values: dict[QuotaKey, float] = {}
            for key, value in raw.values:
                try:
                    values[QuotaKey(key)] = value
                except ValueError:
                    log.debug("skipping quota key %r of %s unknown to kquota", key, entity)
            if values:
                out[entity] = values
        return out

    # -- writing ----------------------------------------------------------------

    def alter(self, alterations: Sequence[EntityAlteration], validate_only: bool = False) -> list[EntityResult]:
        """Apply ``alterations``; return one result per entity, in the given order.

        Each entity is applied all-or-nothing by the broker, independently of
        the others. Requests are split at ``MAX_OPS_PER_REQUEST`` ops, never
        inside an entity, so that guarantee holds. If the connection fails
        after some requests went through, ``KafkaUnavailable`` is raised and
        those changes stay applied: callers re-read the live state anyway.
        Removing a key that is not set succeeds and changes nothing.
        """
        _check(alterations)
        results: dict[Entity, EntityResult] = {}
        for batch in _batches(alterations):
            request = AlterClientQuotasRequest(
                entries=[_entry(alteration) for alteration in batch], validate_only=validate_only
            )
            response = self._send(request, "AlterClientQuotas")
            for entry in response.entries:
                parts = {
                    str(e.entity_type): None if e.entity_name is None else str(e.entity_name) for e in entry.entity
                }
                entity = Entity.from_parts(parts)
                code = int(entry.error_code)
                results[entity] = EntityResult(entity, code, entry.error_message or None, _error_name(code))
        return [
            results.get(a.entity)
            or EntityResult(
                a.entity, UNKNOWN_SERVER_ERROR, "no result in the broker's answer", _error_name(UNKNOWN_SERVER_ERROR)
            )
            for a in alterations
        ]

    def broker_ids(self) -> list[int]:
        """The ids of the brokers in the cluster (DescribeCluster), for status and per-broker math."""
        request = DescribeClusterRequest(include_cluster_authorized_operations=False)
        response = self._send(request, "DescribeCluster")
        if response.error_code:
            raise QuotaRequestError(response.error_code, _error_name(response.error_code), response.error_message)
        return sorted(int(b.broker_id) for b in response.brokers)

    def broker_configs(self, broker_id: int, keys: Sequence[str]) -> dict[str, str]:
        """Effective values (defaults included) of some configs of one broker."""
        resource = ConfigResource(ConfigResourceType.BROKER, str(broker_id), configs=list(keys))
        result = self._call("DescribeConfigs", lambda c: c.describe_configs([resource], config_filter="all"))
        entries = result.get("broker", {}).get(str(broker_id), {})
        return {k: str(v["value"]) for k, v in entries.items() if v.get("value") is not None}

    def topic_config_names(self, topic: str) -> set[str]:
        """Every config key a topic has on these brokers (to detect KIP-1010 topic quota support)."""
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        result = self._call("DescribeConfigs", lambda c: c.describe_configs([resource], config_filter="all"))
        return set(result.get("topic", {}).get(topic, {}))

    def topic_leaders(self, topics: Sequence[str]) -> dict[str, dict[int, int]]:
        """partition -> leader broker id (-1 without a leader) per existing topic; missing topics are left out."""
        if not topics:
            return {}
        described = self._call("Metadata", lambda c: c.describe_topics(list(topics)))
        out: dict[str, dict[int, int]] = {}
        for topic in described:
            if topic.get("error_code"):
                continue
            out[str(topic["name"])] = {
                int(p["partition_index"]): int(p["leader_id"]) for p in topic.get("partitions") or []
            }
        return out

    def _call(self, what: str, call: Callable[[_AdminClient], Any]) -> Any:
        client = self._connect()
        try:
            return call(client)
        except kafka_errors.KafkaError as exc:
            self._drop(client)
            raise self._unavailable(f"{what} failed", exc, None) from None

    # -- connection ---------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()

    def _connect(self) -> _AdminClient:
        with self._lock:
            if self._client is not None:
                return self._client
            s = self._settings
            configs: dict[str, Any] = {
                "bootstrap_servers": [b.strip() for b in s.bootstrap_servers.split(",") if b.strip()],
                "client_id": s.client_id,
                "security_protocol": s.security_protocol,
                "request_timeout_ms": s.request_timeout_ms,
                "bootstrap_timeout_ms": s.connect_timeout_ms,
                "ssl_cafile": s.ssl_cafile,
                "ssl_certfile": s.ssl_certfile,
                "ssl_keyfile": s.ssl_keyfile,
            }
            if s.sasl_mechanism:
                configs["sasl_mechanism"] = s.sasl_mechanism
                configs["sasl_plain_username"] = s.sasl_username
                configs["sasl_plain_password"] = None if s.sasl_password is None else _Secret(s.sasl_password)
            try:
                self._client = _AdminClient(**configs)
            except _BootstrapFailed as failed:
                raise self._unavailable("cannot connect to Kafka", failed.cause, failed.auth) from None
            except (kafka_errors.KafkaError, OSError, ValueError) as exc:  # e.g. an unreadable CA file
                raise self._unavailable("cannot connect to Kafka", exc, None) from None
            return self._client

    def _send(self, request: Any, what: str) -> Any:
        deadline = time.monotonic() + self._settings.request_timeout_ms / 1000
        while True:
            client = self._connect()
            try:
                return client.send_any(request)
            except _RETRIABLE as exc:
                if time.monotonic() >= deadline:
                    self._drop(client)
                    raise self._unavailable(f"{what} failed", exc, None) from None
                log.debug("%s failed (%s); retrying", what, type(exc).__name__)
                time.sleep(0.2)
            except kafka_errors.KafkaError as exc:
                self._drop(client)
                # A reconnect after a credential rotation fails here rather than in bootstrap.
                auth = exc if isinstance(exc, kafka_errors.SaslAuthenticationFailedError) else None
                raise self._unavailable(f"{what} failed", exc, auth) from None

    def _drop(self, client: _AdminClient) -> None:
        # A fresh client bootstraps again, which is what a moved cluster needs.
        with self._lock:
            if self._client is client:
                self._client = None
        with contextlib.suppress(Exception):  # closing a broken client must not hide the real error
            client.close()

    def _unavailable(self, what: str, exc: BaseException, auth: Exception | None) -> KafkaUnavailable:
        s = self._settings
        if auth is not None:
            return KafkaAuthenticationFailed(
                self._scrub(
                    f"{what}: authentication as {s.sasl_username!r} ({s.sasl_mechanism}) refused "
                    f"by {s.bootstrap_servers}: {auth}"
                )
            )
        detail = str(exc)
        if not detail.startswith(type(exc).__name__):
            detail = f"{type(exc).__name__}: {detail}"
        hint = ""
        if s.sasl_mechanism and what.startswith("cannot connect"):
            # kafka-python does not always surface a SASL refusal as such (the
            # broker closes the socket): say what the likely causes are.
            hint = (
                f"; if the brokers are up, check the {s.sasl_mechanism} credentials of user "
                f"{s.sasl_username!r} (possibly refused authentication)"
            )
        return KafkaUnavailable(self._scrub(f"{what}: {s.bootstrap_servers} ({s.security_protocol}): {detail}{hint}"))

    def _scrub(self, message: str) -> str:
        # Belt and braces: no kafka-python message is known to carry the
        # password, but one from a future version must not leak it either.
        password = self._settings.sasl_password
        return message.replace(password, "********") if password else message


def _check(alterations: Iterable[EntityAlteration]) -> None:
    seen: set[Entity] = set()
    for alteration in alterations:
        if alteration.entity in seen:
            # The broker would apply the first and reject the second occurrence.
            raise ValueError(f"entity {alteration.entity} appears more than once")
        seen.add(alteration.entity)
        keys = [op.key for op in alteration.ops]
        if len(keys) != len(set(keys)):
            raise ValueError(f"entity {alteration.entity} has duplicate quota keys: {sorted(keys)}")
        for op in alteration.ops:
            # NaN and infinity pass the broker's validation and would be stored.
            if op.value is not None and not math.isfinite(op.value):
                raise ValueError(f"{alteration.entity}: {op.key} must be a finite number, not {op.value}")


def _batches(alterations: Sequence[EntityAlteration]) -> list[list[EntityAlteration]]:
    batches: list[list[EntityAlteration]] = []
    current: list[EntityAlteration] = []
    count = 0
    for alteration in alterations:
        n = len(alteration.ops)
        if current and count + n > MAX_OPS_PER_REQUEST:
            batches.append(current)
            current, count = [], 0
        current.append(alteration)
        count += n
    if current:
        batches.append(current)
    return batches


def _entry(alteration: EntityAlteration) -> Any:
    data = AlterClientQuotasRequest.EntryData
    return data(
        entity=[data.EntityData(entity_type=t, entity_name=n) for t, n in alteration.entity.parts().items()],
        ops=[
            data.OpData(key=op.key.value, value=0.0 if op.value is None else float(op.value), remove=op.value is None)
            for op in alteration.ops
        ],
    )
