"""Why kquota could not reach the brokers, said precisely and without secrets.

kafka-python reports most connection failures as "Unable to bootstrap" or a
bare connection error. This module turns them into ``KafkaTlsFailed`` (with
OpenSSL's reason and what to check), ``KafkaAuthenticationFailed`` (a SASL
refusal, which kafka-python only logs), ``KafkaRefusalUnconfirmed`` (no connection
with SASL credentials and no refusal seen) or plain ``KafkaUnavailable``, and makes
sure no message carries the SASL password, the OAuth client secret or a token.
A refusal names who kquota authenticated as (``identity``): the SASL user, the
OAuth client and its token endpoint with the token's public claims (issuer,
audience, subject, expiry: what a broker's validator checks), the Kerberos
principal, or the MSK IAM signer.
"""

from __future__ import annotations

import logging
import ssl
from typing import Final, TypeGuard

import kafka.errors as kafka_errors

from kquota.kafka.errors import (
    KafkaAuthenticationFailed,
    KafkaLoginFailed,
    KafkaRefusalUnconfirmed,
    KafkaTlsFailed,
    KafkaUnavailable,
)
from kquota.kafka.settings import ConnectionSettings


def is_tls_failure(exc: object) -> TypeGuard[BaseException]:
    """Whether ``exc`` is a failed TLS handshake, however kafka-python wrapped it."""
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


def tls_hint(detail: str) -> str:
    """What to check, given OpenSSL's reason for a failed handshake."""
    if "CERTIFICATE_VERIFY_FAILED" in detail:
        if "mismatch" in detail:
            return "the brokers' certificate does not name the host in the bootstrap servers (subjectAltName)"
        return "the brokers' certificate could not be verified with the CA certificate kquota was given"
    if any(alert in detail for alert in _CLIENT_CERT_ALERTS):
        return "the brokers refused kquota's client certificate (none given, or not signed by a CA they trust)"
    if "KEY_VALUES_MISMATCH" in detail or "PEM" in detail:
        return "kquota's client certificate and key do not match, or are not PEM"
    return "check the CA certificate and, for mutual TLS, the client certificate and key"


class AuthFailureSpy(logging.Filter):
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
        #: The same for a token or ticket kquota could not get (raised by the token provider in the I/O thread).
        self.login_failure: KafkaLoginFailed | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if record.threadName == self._io_thread and isinstance(record.args, tuple):
            for arg in record.args:
                if isinstance(arg, kafka_errors.SaslAuthenticationFailedError):
                    self.failure = arg
                elif isinstance(arg, KafkaLoginFailed):
                    self.login_failure = arg
                elif is_tls_failure(arg):
                    self.tls_failure = arg
        return True


def scrub(settings: ConnectionSettings, message: str) -> str:
    """``message`` without the SASL password or the OAuth client secret."""
    # Belt and braces: no kafka-python message is known to carry either,
    # but one from a future version must not leak them.
    for secret in (settings.sasl_password, settings.oauth.client_secret if settings.oauth else None):
        if secret:
            message = message.replace(secret, "********")
    return message


def identity(settings: ConnectionSettings) -> str:
    """Who kquota authenticates as, for a message: ``'alice' (SCRAM-SHA-512)``, ``OAuth client 'kquota' ...``."""
    s = settings
    if s.oauth is not None:
        return f"OAuth client {s.oauth.client_id!r} (OAUTHBEARER, token from {s.oauth.token_endpoint_url})"
    if s.kerberos is not None:
        who = f"Kerberos principal {s.kerberos.principal!r}" if s.kerberos.principal else "the cached Kerberos ticket"
        return f"{who} (GSSAPI, service {s.kerberos.service_name!r})"
    if s.msk_iam is not None:
        how = (
            f"role {s.msk_iam.role_arn}"
            if s.msk_iam.role_arn
            else (f"profile {s.msk_iam.profile!r}" if s.msk_iam.profile else "the default AWS credentials chain")
        )
        return f"MSK IAM ({s.msk_iam.region}, {how}; sent as OAUTHBEARER)"
    return f"{s.sasl_username!r} ({s.sasl_mechanism})"


def unavailable(
    settings: ConnectionSettings,
    what: str,
    exc: BaseException,
    auth: Exception | None,
    tls: BaseException | None = None,
    presented: str | None = None,
) -> KafkaUnavailable:
    """The exception to raise for ``exc``: a TLS failure, refused credentials, or the brokers unreachable.

    ``presented`` describes the token sent (its public claims), for a refusal.
    """
    s = settings
    if tls is None and is_tls_failure(exc):
        tls = exc
    if tls is not None and auth is None:
        detail = str(tls).removeprefix(f"{type(tls).__name__}: ")
        return KafkaTlsFailed(
            scrub(
                s,
                f"{what}: {s.bootstrap_servers} ({s.security_protocol}): TLS with the brokers failed: "
                f"{detail}; {tls_hint(detail)}",
            )
        )
    if auth is not None:
        token = ""
        if presented is not None:
            token = (
                f"; the token sent: {presented} (check it against the brokers' sasl.oauthbearer.expected.audience, "
                "expected.issuer and JWKS)"
            )
        return KafkaAuthenticationFailed(
            scrub(s, f"{what}: authentication as {identity(s)} refused by {s.bootstrap_servers}: {auth}{token}")
        )
    detail = str(exc)
    if not detail.startswith(type(exc).__name__):
        detail = f"{type(exc).__name__}: {detail}"
    if s.sasl_mechanism and what.startswith("cannot connect"):
        # kafka-python does not always surface a SASL refusal as such (the
        # broker closes the socket): say what the likely causes are.
        hint = f"; if the brokers are up, check the credentials of {identity(s)} (possibly refused authentication)"
        return KafkaRefusalUnconfirmed(
            scrub(s, f"{what}: {s.bootstrap_servers} ({s.security_protocol}): {detail}{hint}")
        )
    return KafkaUnavailable(scrub(s, f"{what}: {s.bootstrap_servers} ({s.security_protocol}): {detail}"))


def principal(settings: ConnectionSettings, token_subject: object = None) -> str:
    """The principal the brokers see, as ACLs name it (as far as kquota can tell).

    ``token_subject`` is the OAUTHBEARER token's ``sub`` claim, what Kafka's
    validator names the principal by default (sasl.oauthbearer.sub.claim.name).
    """
    s = settings
    if s.sasl_mechanism and s.sasl_username:
        return f"User:{s.sasl_username}"
    if s.oauth is not None:
        return f"User:{token_subject}" if isinstance(token_subject, str) else "User:<the token's sub claim>"
    if s.kerberos is not None and s.kerberos.principal:
        return f"User:{kerberos_short_name(s.kerberos.principal)}"
    if s.msk_iam is not None:
        return "User:<the IAM identity's ARN>"
    if s.security_protocol.upper() == "SSL" and s.ssl_certfile:
        return "User:<the subject of kquota's TLS certificate>"
    return "User:ANONYMOUS"


def kerberos_short_name(principal: str) -> str:
    """A Kerberos principal as Kafka's DEFAULT principal.to.local rule names it: its primary."""
    return principal.split("@", 1)[0].split("/", 1)[0]
