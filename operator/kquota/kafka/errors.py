"""What the Kafka adapter raises, and the per-entity verdict an alter returns.

Callers above the adapter catch these and nothing from kafka-python: an
unreachable cluster is ``KafkaUnavailable`` (with ``KafkaAuthenticationFailed``,
``KafkaTlsFailed`` and ``KafkaLoginFailed`` as the precise kinds, ``KafkaRefusalUnconfirmed``
as the uncertain one), a request the brokers refuse is
``QuotaRequestError``, and a refusal for lack of an ACL is ``KafkaNotAuthorized``
naming the operation and resource to grant (docs/install.md#acls lists them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import kafka.errors as kafka_errors

from kquota.domain.entities import Entity

#: Error code kquota reports for an entity the broker's response left out.
UNKNOWN_SERVER_ERROR: Final = -1
#: Kafka's refusals for lack of an ACL, on a topic and on the cluster resource.
TOPIC_AUTHORIZATION_FAILED: Final = 29
CLUSTER_AUTHORIZATION_FAILED: Final = 31
UNKNOWN_TOPIC_OR_PARTITION: Final = 3
#: Where the ACLs kquota needs are listed (docs/install.md, section "ACLs").
ACL_DOCS: Final = "docs/install.md#acls"


def error_name(code: int) -> str:
    """Kafka's name for an error code (``NONE`` for 0; kafka-python says NO_ERROR)."""
    return "NONE" if code == 0 else str(kafka_errors.for_code(code).message)


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


class KafkaUnavailable(Exception):
    """The brokers could not be reached or did not answer in time."""


class KafkaAuthenticationFailed(KafkaUnavailable):
    """The brokers refused kquota's credentials (a kind of unavailability to callers)."""


class KafkaRefusalUnconfirmed(KafkaUnavailable):
    """No connection with SASL credentials, and no refusal seen: the brokers are down, or refused the login.

    The brokers close the connection right after refusing a login, and kafka-python
    sometimes reads the close before the refusal (then the whole bootstrap fails
    without a word on the credentials): such a failure neither confirms nor rules out
    refused credentials.
    """


class KafkaTlsFailed(KafkaUnavailable):
    """TLS with the brokers failed: a certificate kquota or the brokers could not verify, or a bad key."""


class KafkaLoginFailed(KafkaUnavailable):
    """kquota could not obtain what it authenticates with (Kafka's "login"), before any broker was asked.

    An OAuth token the provider did not give (endpoint unreachable, client refused),
    a Kerberos ticket the KDC did not give (wrong keytab, KDC unreachable), an MSK IAM
    token AWS's signer could not make. The message names the cause, never a secret.
    """


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
        super().__init__(code, error_name(code), self.message)

    def __str__(self) -> str:
        return self.message

    def only(self, resource: str) -> KafkaNotAuthorized:
        """The same refusal, naming only ``resource`` (one of ``resources``): for that resource's status."""
        return KafkaNotAuthorized(self.principal, self.operation, self.resource_type, [resource], self.request)
