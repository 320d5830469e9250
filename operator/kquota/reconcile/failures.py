"""What a failed pass (or reachability check) says: its reason, and refused logins counted until they are Stalled.

A failure is retried with backoff whatever it is, so most reasons are Reconciling
(the brokers may come back, a Secret may be created). A login the brokers refuse
is too at first: during a credential rotation the brokers may refuse the old
password for the few seconds before the Secret holds the new one. The same
credentials refused the same way ``auth_failures_to_stall`` times in a row are
no rotation: then the reason is ``AuthenticationFailed`` (Stalled, so a GitOps
wait ends with the cause instead of at its timeout), still retried, so a
corrected Secret recovers by itself.

kafka-python sometimes reads the brokers closing a refused connection before
the refusal itself (:class:`~kquota.kafka.errors.KafkaRefusalUnconfirmed`); such a
failure with the same credentials neither counts nor ends the run of refusals,
and once it is Stalled it keeps saying the refusal it cannot rule out.
"""

from __future__ import annotations

from dataclasses import dataclass

from kquota.domain.ledger import LedgerFromNewerOperator
from kquota.domain.status import Reason
from kquota.k8s.api import SecretNotFound
from kquota.kafka.errors import (
    KafkaAuthenticationFailed,
    KafkaLoginFailed,
    KafkaNotAuthorized,
    KafkaRefusalUnconfirmed,
    KafkaTlsFailed,
    KafkaUnavailable,
)
from kquota.kafka.settings import ConnectionSettings
from kquota.reconcile.gather import ClusterNotReady, DuplicateCluster, GatherFailed

#: Failures a pass reports with a reason of their own (anything else is reported as unexpected).
NAMED_FAILURES = (
    KafkaUnavailable,
    KafkaNotAuthorized,
    ClusterNotReady,
    SecretNotFound,
    DuplicateCluster,
    LedgerFromNewerOperator,
)


def failure_reason(exc: Exception) -> Reason:
    """The Reason every resource reports when a pass stops on ``exc`` (before refusals are counted)."""
    if isinstance(exc, KafkaNotAuthorized):
        return Reason.NOT_AUTHORIZED
    if isinstance(exc, LedgerFromNewerOperator):
        return Reason.LEDGER_FROM_NEWER_OPERATOR
    if isinstance(exc, KafkaUnavailable):
        return Reason.KAFKA_UNAVAILABLE
    if isinstance(exc, (SecretNotFound, GatherFailed)):
        return Reason.CLUSTER_NOT_READY
    if isinstance(exc, DuplicateCluster):
        return Reason.DUPLICATE_CLUSTER
    return Reason.CLUSTER_NOT_FOUND


def answered(exc: Exception) -> bool:
    """Whether the brokers (or the token or ticket issuer) answered, refusing: a login refused, TLS that failed, a
    token or ticket not given. A retry is one more refusal: it waits for the backoff, not the reachability timer."""
    return isinstance(exc, (KafkaAuthenticationFailed, KafkaTlsFailed, KafkaLoginFailed))


@dataclass(slots=True)
class Refusals:
    """Authentication failures in a row, with the same credentials and the same refusal."""

    #: How many in a row make it Stalled (the operator setting auth_failures_to_stall).
    stall_after: int
    #: The credentials and the refusal's text of the run under way (None: no run).
    last: tuple[ConnectionSettings | None, str] | None = None
    count: int = 0

    def reset(self) -> None:
        """A pass or check got through: the run ends."""
        self.last = None
        self.count = 0

    def active(self, tried: ConnectionSettings | None) -> bool:
        """Whether a run of refusals of ``tried`` is under way (a login failing without a word is one more then)."""
        return self.last is not None and self.last[0] == tried

    def failed(self, exc: Exception, tried: ConnectionSettings | None) -> tuple[Reason, str]:
        """Count ``exc`` (a failure with the credentials ``tried``); the reason and message to report for it."""
        if isinstance(exc, KafkaAuthenticationFailed):
            key = (tried, str(exc))
            self.count = self.count + 1 if key == self.last else 1
            self.last = key
        elif not (isinstance(exc, KafkaRefusalUnconfirmed) and self.active(tried)):
            self.reset()
        if self.last is not None and self.count >= self.stall_after:
            return Reason.AUTHENTICATION_FAILED, stalled_message(self.last[1], self.stall_after)
        return failure_reason(exc), str(exc)


def stalled_message(refusal: str, times: int) -> str:
    """The AuthenticationFailed message: the refusal, and what to do (the same on every retry, so no rewrite)."""
    return (
        f"{refusal}; refused {times} times in a row: correct the credentials the KafkaCluster's spec.security "
        "names (kquota keeps retrying with backoff and recovers by itself once the brokers accept them)"
    )
