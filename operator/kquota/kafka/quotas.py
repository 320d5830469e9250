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
messages. TLS files (CA, client certificate and key) are passed as paths; a
failed TLS handshake raises ``KafkaTlsFailed`` with OpenSSL's reason (e.g.
certificate verify failed), never file contents.

A request the brokers refuse for lack of an ACL raises ``KafkaNotAuthorized``
naming the operation and resource to grant (docs/install.md#acls lists them),
never a silent empty answer: kafka-python's own describe_configs and
describe_topics drop per-resource errors, so this module reads those itself.
"""

from __future__ import annotations

import contextlib
import logging
import math
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

import kafka.errors as kafka_errors
from kafka import KafkaAdminClient
from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    DescribeClientQuotasRequest,
    DescribeClusterRequest,
    DescribeConfigsRequest,
)

from kquota.domain.entities import Entity, QuotaKey

log = logging.getLogger(__name__)

#: The controller refuses a request that would write more records than this
#: (one record per changed key) with POLICY_VIOLATION, failing the whole request.
MAX_OPS_PER_REQUEST: Final = 10_000
#: The active controller commits one AlterClientQuotas request as one metadata
#: record batch, capped at 8 MiB by KRaft. A bigger request fails whole with
#: UNKNOWN_SERVER_ERROR, and the controller renounces its leadership on the way:
#: 2,500 users with 1,024-emoji names (the longest the CRD admits) are enough.
#: Requests are also cut at this many bytes of records (a quarter of the cap,
#: by an over-estimate); short names still reach MAX_OPS_PER_REQUEST first.
MAX_RECORD_BYTES_PER_REQUEST: Final = 2 * 1024 * 1024
#: Per-record bytes besides the entity names and key (Kafka's own framing is ~30).
_RECORD_OVERHEAD: Final = 64

#: Error code kquota reports for an entity the broker's response left out.
UNKNOWN_SERVER_ERROR: Final = -1
#: Kafka's refusals for lack of an ACL, on a topic and on the cluster resource.
TOPIC_AUTHORIZATION_FAILED: Final = 29
CLUSTER_AUTHORIZATION_FAILED: Final = 31
_UNKNOWN_TOPIC_OR_PARTITION: Final = 3
#: DescribeConfigs resource types.
_TOPIC: Final = 2
_BROKER: Final = 4
#: Where the ACLs kquota needs are listed (docs/install.md, section "ACLs").
ACL_DOCS: Final = "docs/install.md#acls"


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


class KafkaTlsFailed(KafkaUnavailable):
    """TLS with the brokers failed: a certificate kquota or the brokers could not verify, or a bad key."""


class QuotaRequestError(Exception):
    """The broker answered a whole request with an error (e.g. not authorized)."""

    def __init__(self, error_code: int, error_name: str, message: str | None) -> None:
        super().__init__(f"{error_name} ({error_code}): {message or 'no message'}")
        self.error_code = error_code
        self.error_name = error_name


class KafkaNotAuthorized(QuotaRequestError):
    """The brokers refused an operation to kquota's principal: an ACL is missing.

    ``operation`` and ``resource_type`` are Kafka's names (as ``kafka-acls``
    lists them), so the message says exactly what to grant. The refused request
    changed nothing. What did go through is attached where there is some:
    ``results`` (``alter``: one per entity; refused or unsent ones are not ok)
    and ``leaders`` (``topic_leaders``: the topics that were allowed).
    """

    def __init__(
        self,
        principal: str,
        operation: str,
        resource_type: str,
        resources: Sequence[str],
        request: str,
        *,
        results: Sequence[EntityResult] = (),
        leaders: dict[str, dict[int, int]] | None = None,
    ) -> None:
        code = CLUSTER_AUTHORIZATION_FAILED if resource_type == "CLUSTER" else TOPIC_AUTHORIZATION_FAILED
        self.principal = principal
        self.operation = operation
        self.resource_type = resource_type
        self.resources = tuple(resources)
        self.request = request
        self.results = tuple(results)
        self.leaders = dict(leaders or {})
        if resource_type == "CLUSTER":
            where = "the cluster"
        else:
            names = ", ".join(repr(r) for r in self.resources[:5])
            more = f" and {len(self.resources) - 5} more" if len(self.resources) > 5 else ""
            where = f"{resource_type.lower()} {names}{more}"
        grant = "grant it"
        if (operation, resource_type) == ("DESCRIBE_CONFIGS", "CLUSTER"):
            grant = "grant it, or ALTER_CONFIGS on the cluster, which includes it"
        self.message = (
            f"Kafka principal {principal} may not {operation} on {where} ({request} was refused): {grant} ({ACL_DOCS})"
        )
        super().__init__(code, _error_name(code), self.message)

    def __str__(self) -> str:
        return self.message

    def only(self, resource: str) -> KafkaNotAuthorized:
        """The same refusal, naming only ``resource`` (one of ``resources``): for that resource's status."""
        return KafkaNotAuthorized(self.principal, self.operation, self.resource_type, [resource], self.request)


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
    def __init__(self, cause: Exception, auth: Exception | None, tls: BaseException | None = None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.auth = auth
        self.tls = tls


def _is_tls_failure(exc: object) -> TypeGuard[BaseException]:
    # kafka-python wraps a failed handshake as KafkaConnectionError("Handshake
    # failed: [SSL: ...]") (text only), a TLS alert on the first read as
    # KafkaConnectionError(SSLError), and an unloadable key raises SSLError itself.
    if isinstance(exc, ssl.SSLError):
        return True
    if isinstance(exc, kafka_errors.KafkaConnectionError):
        return any(isinstance(a, ssl.SSLError) for a in exc.args) or "[SSL" in str(exc) or "[X509" in str(exc)
    return False


# TLS alerts a broker sends when it does not accept the client's certificate.
_CLIENT_CERT_ALERTS: Final = ("BAD_CERTIFICATE", "CERTIFICATE_UNKNOWN", "CERTIFICATE_REQUIRED", "UNKNOWN_CA")


def _tls_hint(detail: str) -> str:
    if "CERTIFICATE_VERIFY_FAILED" in detail:
        if "mismatch" in detail:
            return "the brokers' certificate does not name the host in the bootstrap servers (subjectAltName)"
        return "the brokers' certificate could not be verified with the CA certificate kquota was given"
    if any(alert in detail for alert in _CLIENT_CERT_ALERTS):
        return "the brokers refused kquota's client certificate (none given, or not signed by a CA they trust)"
    if "KEY_VALUES_MISMATCH" in detail or "PEM" in detail:
        return "kquota's client certificate and key do not match, or are not PEM"
    return "check the CA certificate and, for mutual TLS, the client certificate and key"


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
        #: The same for a failed TLS handshake (a certificate not verified, a bad key).
        self.tls_failure: BaseException | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.threadName == self._io_thread and isinstance(record.args, tuple):
            for arg in record.args:
                if isinstance(arg, kafka_errors.SaslAuthenticationFailedError):
                    self.failure = arg
                elif _is_tls_failure(arg):
                    self.tls_failure = arg
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
            raise _BootstrapFailed(exc, spy.failure, spy.tls_failure) from exc
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

    def send_any(self, request: Any, node_id: int | None = None) -> Any:
        async def send() -> Any:
            return await self._manager.send(request, node_id=node_id)

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
        if response.error_code == CLUSTER_AUTHORIZATION_FAILED:
            raise self._refused("DESCRIBE_CONFIGS", "CLUSTER", [], "DescribeClientQuotas")
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
        the others. Requests are split at ``MAX_OPS_PER_REQUEST`` ops or
        ``MAX_RECORD_BYTES_PER_REQUEST`` bytes of records, never inside an
        entity, so that guarantee holds. If the connection fails
        after some requests went through, ``KafkaUnavailable`` is raised and
        those changes stay applied: callers re-read the live state anyway.
        Removing a key that is not set succeeds and changes nothing.

        Without ALTER_CONFIGS on the cluster the broker refuses the whole
        request: ``KafkaNotAuthorized`` is raised, carrying the same per-entity
        results (refused and unsent entities not ok, so nothing is mistaken
        for applied); later batches are not sent.
        """
        _check(alterations)
        results: dict[Entity, EntityResult] = {}
        refused = False
        for batch in _batches(alterations):
            if refused:
                break
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
                refused = refused or code == CLUSTER_AUTHORIZATION_FAILED
        missing = "not sent: an earlier request was refused" if refused else "no result in the broker's answer"
        out = [
            results.get(a.entity)
            or EntityResult(a.entity, UNKNOWN_SERVER_ERROR, missing, _error_name(UNKNOWN_SERVER_ERROR))
            for a in alterations
        ]
        if refused:
            raise self._refused("ALTER_CONFIGS", "CLUSTER", [], "AlterClientQuotas", results=out)
        return out

    def broker_ids(self) -> list[int]:
        """The ids of the brokers in the cluster (DescribeCluster), for status and per-broker math."""
        return self.cluster_info()[1]

    def cluster_info(self) -> tuple[str, list[int]]:
        """The Kafka cluster's id and its brokers' ids, from one DescribeCluster."""
        request = DescribeClusterRequest(include_cluster_authorized_operations=False)
        response = self._send(request, "DescribeCluster")
        if response.error_code:
            raise QuotaRequestError(response.error_code, _error_name(response.error_code), response.error_message)
        return str(response.cluster_id), sorted(int(b.broker_id) for b in response.brokers)

    def broker_configs(self, broker_id: int, keys: Sequence[str]) -> dict[str, str]:
        """Effective values (defaults included) of some configs of one broker."""
        # Sent by hand, not through kafka-python's describe_configs: that one
        # drops each resource's error code, so a refusal would read as "defaults".
        request = DescribeConfigsRequest(resources=[(_BROKER, str(broker_id), list(keys))], include_synonyms=False)
        result = self._described_config(self._send(request, "DescribeConfigs", node_id=broker_id))
        if result.error_code == CLUSTER_AUTHORIZATION_FAILED:
            raise self._refused("DESCRIBE_CONFIGS", "CLUSTER", [], "DescribeConfigs")
        if result.error_code:
            raise QuotaRequestError(result.error_code, _error_name(result.error_code), result.error_message)
        return {str(c.name): str(c.value) for c in result.configs or () if c.value is not None}

    def topic_config_names(self, topic: str) -> set[str]:
        """Every config key a topic has on these brokers (to detect KIP-1010 topic quota support)."""
        request = DescribeConfigsRequest(resources=[(_TOPIC, topic, None)], include_synonyms=False)
        result = self._described_config(self._send(request, "DescribeConfigs"))
        if result.error_code == TOPIC_AUTHORIZATION_FAILED:
            raise self._refused("DESCRIBE_CONFIGS", "TOPIC", [topic], "DescribeConfigs")
        if result.error_code == _UNKNOWN_TOPIC_OR_PARTITION:
            return set()
        if result.error_code:
            raise QuotaRequestError(result.error_code, _error_name(result.error_code), result.error_message)
        return {str(c.name) for c in result.configs or ()}

    @staticmethod
    def _described_config(response: Any) -> Any:
        if len(response.results or ()) != 1:
            raise QuotaRequestError(UNKNOWN_SERVER_ERROR, "UNKNOWN_SERVER_ERROR", "DescribeConfigs: no result")
        return response.results[0]

    def topic_leaders(self, topics: Sequence[str]) -> dict[str, dict[int, int]]:
        """partition -> leader broker id (-1 without a leader) per existing topic; missing topics are left out.

        Kafka answers TOPIC_AUTHORIZATION_FAILED for a topic the principal may
        not DESCRIBE, whether it exists or not: that raises
        ``KafkaNotAuthorized`` (with the allowed topics' layouts attached)
        rather than passing for a missing topic.
        """
        if not topics:
            return {}
        described = self._call("Metadata", lambda c: c.describe_topics(list(topics)))
        out: dict[str, dict[int, int]] = {}
        refused: list[str] = []
        for topic in described:
            if topic.get("error_code") == TOPIC_AUTHORIZATION_FAILED:
                refused.append(str(topic["name"]))
            if topic.get("error_code"):
                continue
            out[str(topic["name"])] = {
                int(p["partition_index"]): int(p["leader_id"]) for p in topic.get("partitions") or []
            }
        if refused:
            raise self._refused("DESCRIBE", "TOPIC", sorted(refused), "Metadata", leaders=out)
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
                raise self._unavailable("cannot connect to Kafka", failed.cause, failed.auth, failed.tls) from None
            except (kafka_errors.KafkaError, OSError, ValueError) as exc:  # e.g. an unreadable CA file
                raise self._unavailable("cannot connect to Kafka", exc, None) from None
            return self._client

    def _send(self, request: Any, what: str, node_id: int | None = None) -> Any:
        deadline = time.monotonic() + self._settings.request_timeout_ms / 1000
        while True:
            client = self._connect()
            try:
                return client.send_any(request, node_id)
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

    def _unavailable(
        self, what: str, exc: BaseException, auth: Exception | None, tls: BaseException | None = None
    ) -> KafkaUnavailable:
        s = self._settings
        if tls is None and _is_tls_failure(exc):
            tls = exc
        if tls is not None and auth is None:
            detail = str(tls).removeprefix(f"{type(tls).__name__}: ")
            return KafkaTlsFailed(
                self._scrub(
                    f"{what}: {s.bootstrap_servers} ({s.security_protocol}): TLS with the brokers failed: "
                    f"{detail}; {_tls_hint(detail)}"
                )
            )
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

    def _refused(
        self,
        operation: str,
        resource_type: str,
        resources: Sequence[str],
        request: str,
        *,
        results: Sequence[EntityResult] = (),
        leaders: dict[str, dict[int, int]] | None = None,
    ) -> KafkaNotAuthorized:
        return KafkaNotAuthorized(
            self.principal, operation, resource_type, resources, request, results=results, leaders=leaders
        )

    @property
    def principal(self) -> str:
        """The principal the brokers see, as ACLs name it (as far as kquota can tell)."""
        s = self._settings
        if s.sasl_mechanism and s.sasl_username:
            return f"User:{s.sasl_username}"
        if s.security_protocol.upper() == "SSL" and s.ssl_certfile:
            return "User:<the subject of kquota's TLS certificate>"
        return "User:ANONYMOUS"

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


def record_bytes(alteration: EntityAlteration) -> int:
    """An over-estimate of the metadata records ``alteration`` writes: one QuotaRecord per op."""
    names = sum(len(t) + len((n or "").encode()) + 8 for t, n in alteration.entity.parts().items())
    return sum(names + len(op.key.value) + _RECORD_OVERHEAD for op in alteration.ops)


def _batches(alterations: Sequence[EntityAlteration]) -> list[list[EntityAlteration]]:
    batches: list[list[EntityAlteration]] = []
    current: list[EntityAlteration] = []
    count = size = 0
    for alteration in alterations:
        n, b = len(alteration.ops), record_bytes(alteration)
        if current and (count + n > MAX_OPS_PER_REQUEST or size + b > MAX_RECORD_BYTES_PER_REQUEST):
            batches.append(current)
            current, count, size = [], 0, 0
        current.append(alteration)
        count += n
        size += b
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
