"""One connection to a Kafka cluster: kafka-python's admin client, reconnecting after failures.

No maintained Python client exposes the client-quota admin APIs
(confluent-kafka/librdkafka has not shipped KIP-546), so kquota's requests are
kafka-python's protocol classes sent through kafka-python's admin client
connection. Everything kafka-python-specific (and untyped) about connecting
stays in this module; the requests themselves are built in client_quotas.py and
cluster_info.py.

Calls are synchronous and may be made from several threads at once (the
operator uses ``asyncio.to_thread``): kafka-python runs all network I/O on its
own thread and its ``run`` is safe to call concurrently.

The SASL password is kept out of kafka-python's debug log of its configuration
(``_Secret``) and out of exception messages (``diagnosis.unavailable``).

OAUTHBEARER and AWS MSK IAM connections hold a token provider
(:mod:`kquota.kafka.oauth`, :mod:`kquota.kafka.msk`) for as long as the
connection lives: a token is made before the first broker is contacted (a
failure there is ``KafkaLoginFailed``, naming its cause), and the provider
keeps it fresh across reconnects and KIP-368 re-authentications. GSSAPI
connections authenticate with the cluster's own keytab and credential cache
(:mod:`kquota.kafka.kerberos`).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import kafka.errors as kafka_errors
from kafka import KafkaAdminClient
from kafka.net.compat import KafkaNetClient
from kafka.net.selector import NetworkSelector

from kquota.kafka import diagnosis, oauth
from kquota.kafka.errors import KafkaLoginFailed
from kquota.kafka.settings import ConnectionSettings, ssl_context

log = logging.getLogger(__name__)


class _Secret(str):
    """A password that is itself but prints as stars.

    kafka-python logs its whole configuration at debug level when an admin
    client starts (``%s`` of a dict, so the values' ``repr``); the SASL code only
    encodes the value, which a ``str`` subclass supports unchanged.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "'********'"


# Transport-level failures worth another try on another broker, within the deadline.
_RETRIABLE: Final[tuple[type[BaseException], ...]] = (
    kafka_errors.KafkaConnectionError,
    kafka_errors.NodeNotReadyError,
    kafka_errors.RequestTimedOutError,
    kafka_errors.KafkaTimeoutError,
    kafka_errors.NotControllerError,
)


class KafkaLoginRefused(Exception):
    """The brokers' refusal of an OAUTHBEARER token (their error challenge), as diagnosis reports refusals."""

    def __str__(self) -> str:
        return str(self.args[0])


class _BootstrapFailed(Exception):
    def __init__(self, cause: Exception, auth: Exception | None, tls: BaseException | None = None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.auth = auth
        self.tls = tls


#: Numbers the admin clients of this process: each one's I/O thread gets a name of its own.
_CLIENTS = itertools.count(1)


def _net_client(io_name: str) -> Callable[..., Any]:
    """kafka-python's client, with its I/O thread named ``kafka-io-<io_name>``.

    kafka-python names the thread after the client id, which every cluster's client
    shares (the id the brokers see): the thread name is what tells one client's
    logged login refusal from another's (:class:`diagnosis.AuthFailureSpy`). The
    selector uses its client id for the thread name and its log lines only; the
    connections keep the real one.
    """

    def make(**configs: Any) -> Any:
        return KafkaNetClient(net=NetworkSelector(**{**configs, "client_id": io_name}), **configs)

    return make


class _AdminClient(KafkaAdminClient):  # type: ignore[misc]  # kafka-python is untyped
    """kafka-python's admin client plus a way to send any request to any broker.

    ``_manager`` and ``send`` are what kafka-python's own admin methods use; a
    subclass keeps that reliance in one spot.
    """

    def __init__(self, **configs: Any) -> None:
        # Several clusters' clients bootstrap at once (one reconcile loop each): the spy must hear
        # only this client's I/O thread, or one cluster reports another's refused login (#33).
        io_name = f"{configs.get('client_id')}-{next(_CLIENTS)}"
        spy = diagnosis.AuthFailureSpy(f"kafka-io-{io_name}")
        manager_log = logging.getLogger("kafka.net.manager")
        manager_log.addFilter(spy)
        try:
            super().__init__(kafka_client=_net_client(io_name), **configs)
        except Exception as exc:
            self._stop_io()
            if spy.login_failure is not None:
                raise spy.login_failure from None
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

    def send_any(self, request: Any, node_id: int | None = None, timeout_ms: int | None = None) -> Any:
        async def send() -> Any:
            return await self._manager.send(request, node_id=node_id, request_timeout_ms=timeout_ms)

        return self._manager.run(send)


class Connection:
    """A lazily opened admin client for one cluster; a failed request drops it, so the next one bootstraps again."""

    def __init__(self, settings: ConnectionSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._client: _AdminClient | None = None
        #: The OAUTHBEARER token provider (OAuth or MSK IAM), made on first connect and kept until close.
        self._tokens: oauth.TokenProvider | None = None

    @property
    def principal(self) -> str:
        """The principal the brokers see, as ACLs name it (as far as kquota can tell)."""
        token = self._tokens.current if self._tokens is not None else None
        return diagnosis.principal(self.settings, token.claims.get("sub") if token is not None else None)

    @property
    def tokens(self) -> oauth.TokenProvider | None:
        """The token provider of an OAUTHBEARER or MSK IAM connection (None before the first connect)."""
        return self._tokens

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
            tokens, self._tokens = self._tokens, None
        if client is not None:
            client.close()
        if tokens is not None:
            tokens.close()

    def _token_provider(self) -> oauth.TokenProvider:
        if self._tokens is None:
            s = self.settings
            if s.msk_iam is not None:
                from kquota.kafka import msk  # noqa: PLC0415 - the AWS libraries only for clusters that use them

                self._tokens = msk.provider_for(s.msk_iam, s.bootstrap_servers)
            elif s.oauth is not None:
                self._tokens = oauth.provider_for(s.oauth, s.bootstrap_servers)
            else:
                raise KafkaLoginFailed(f"SASL {s.sasl_mechanism} needs its settings (oauth or awsMskIam)")
        return self._tokens

    def _presented(self) -> str | None:
        """What kquota authenticated with, for a refusal's message: the token's public claims."""
        token = self._tokens.current if self._tokens is not None else None
        return token.described(time.time()) if token is not None else None

    def _unavailable(
        self, what: str, exc: BaseException, auth: Exception | None, tls: BaseException | None = None
    ) -> Exception:
        # Once no valid token is left, the token endpoint's failure is the cause, whatever the brokers said.
        tokens = self._tokens
        if tokens is not None and not tokens.usable() and tokens.failure is not None:
            return tokens.failure
        if tokens is not None and auth is None and tokens.refusal is not None:
            # The brokers answer a refused token with an error challenge, then close the connection.
            auth = KafkaLoginRefused(f"the token was refused: {tokens.refusal}")
        return diagnosis.unavailable(self.settings, what, exc, auth, tls, presented=self._presented())

    def connect(self, timeout_ms: int | None = None) -> _AdminClient:
        """The connected client; a new one bootstraps for ``timeout_ms`` (default: the settings' connect timeout)."""
        with self._lock:
            if self._client is not None:
                if self._tokens is not None and not self._tokens.usable():
                    # The brokers close a session whose token expired: without a new token every request would
                    # wait out its timeout. A fetch now, or its failure (the cause) at once.
                    self._tokens.ensure()
                return self._client
            s = self.settings
            configs: dict[str, Any] = {
                "bootstrap_servers": [b.strip() for b in s.bootstrap_servers.split(",") if b.strip()],
                "client_id": s.client_id,
                "security_protocol": s.security_protocol,
                "request_timeout_ms": s.request_timeout_ms,
                "bootstrap_timeout_ms": s.connect_timeout_ms if timeout_ms is None else timeout_ms,
            }
            if s.sasl_mechanism:
                configs["sasl_mechanism"] = s.wire_mechanism
                if s.wire_mechanism == "OAUTHBEARER":
                    tokens = self._token_provider()
                    tokens.ensure()  # KafkaLoginFailed, naming the cause, before any broker is asked
                    configs["sasl_oauth_token_provider"] = tokens
                elif s.kerberos is not None:
                    from kquota.kafka import kerberos  # noqa: PLC0415 - gssapi only for clusters that use it

                    configs["sasl_kerberos_name"] = kerberos.target(s.kerberos)
                    configs["sasl_kerberos_service_name"] = s.kerberos.service_name
                else:
                    configs["sasl_plain_username"] = s.sasl_username
                    configs["sasl_plain_password"] = None if s.sasl_password is None else _Secret(s.sasl_password)
            try:
                if s.security_protocol.endswith("SSL"):
                    configs["ssl_context"] = ssl_context(s)
                self._client = _AdminClient(**configs)
            except _BootstrapFailed as failed:
                raise self._unavailable("cannot connect to Kafka", failed.cause, failed.auth, failed.tls) from None
            except (kafka_errors.KafkaError, OSError, ValueError) as exc:  # e.g. an unreadable CA file
                raise self._unavailable("cannot connect to Kafka", exc, None) from None
            return self._client

    def send(self, request: Any, what: str, node_id: int | None = None, timeout_ms: int | None = None) -> Any:
        """Send ``request`` and return the answer, retrying transport failures until the deadline.

        ``timeout_ms`` bounds the whole call, connecting included (default: the
        settings' request timeout for the answers, connect timeout for connecting).
        """
        deadline = time.monotonic() + (self.settings.request_timeout_ms if timeout_ms is None else timeout_ms) / 1000
        while True:
            left = None if timeout_ms is None else max(1, int((deadline - time.monotonic()) * 1000))
            client = self.connect(left)
            try:
                left = None if timeout_ms is None else max(1, int((deadline - time.monotonic()) * 1000))
                return client.send_any(request, node_id, left)
            except _RETRIABLE as exc:
                if time.monotonic() >= deadline:
                    self.drop(client)
                    raise self._unavailable(f"{what} failed", exc, None) from None
                log.debug("%s failed (%s); retrying", what, type(exc).__name__)
                time.sleep(0.2)
            except kafka_errors.KafkaError as exc:
                self.drop(client)
                # A reconnect after a credential rotation fails here rather than in bootstrap.
                auth = exc if isinstance(exc, kafka_errors.SaslAuthenticationFailedError) else None
                raise self._unavailable(f"{what} failed", exc, auth) from None

    def drop(self, client: _AdminClient) -> None:
        # A fresh client bootstraps again, which is what a moved cluster needs.
        with self._lock:
            if self._client is client:
                self._client = None
        with contextlib.suppress(Exception):  # closing a broken client must not hide the real error
            client.close()

    def call(self, what: str, call: Callable[[KafkaAdminClient], Any]) -> Any:
        """Run one of kafka-python's own admin methods on the client (e.g. ``describe_topics``)."""
        client = self.connect()
        try:
            return call(client)
        except kafka_errors.KafkaError as exc:
            self.drop(client)
            raise self._unavailable(f"{what} failed", exc, None) from None
