"""What a quota resource claims: the one record the operator and every CLI command build.

:func:`claim_from_body` (an object read from the API server) and
:func:`claim_of` (a model parsed from a manifest) make a
:class:`ResourceClaim`: the entries it asks for on which cluster, its kind's
typed spec (:class:`ClientQuotaSpec`, :class:`MutationSpec`,
:class:`TopicSpec`), or why it asks for nothing (``error``: a spec the API
server admitted but kquota cannot use, reported InvalidSpec). A TopicQuota's
entries depend on the live leader layout: :mod:`kquota.domain.gating` fills
them in on every pass, for the operator and ``kquota plan`` alike.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from pydantic import ValidationError

from kquota.api.clientquota import ClientQuota
from kquota.api.controllermutationquota import ControllerMutationQuota
from kquota.api.manifest import KINDS
from kquota.api.topicquota import Enforcement, TopicQuota
from kquota.domain.desired import desired_entries, topic_budget, topic_clients
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.plan import ResourceRef
from kquota.domain.stored_status import EMPTY_STATUS, StoredStatus

Entries = tuple[tuple[Entity, Mapping[QuotaKey, float]], ...]
QuotaModel = ClientQuota | ControllerMutationQuota | TopicQuota


@dataclass(frozen=True, slots=True)
class ClientQuotaSpec:
    """A ClientQuota: everything it asks for is in its entries."""


@dataclass(frozen=True, slots=True)
class MutationSpec:
    """A ControllerMutationQuota: its rate and the burst its status reports on."""

    rate: float
    expected_burst: int | None


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A TopicQuota: a whole-topic budget, split between its clients on the live leader layout."""

    #: None: the default topic budget.
    topic: str | None
    enforcement: Enforcement
    budget: Mapping[QuotaKey, float]
    #: (client entity, share percent).
    clients: tuple[tuple[Entity, int], ...]

    @property
    def splits(self) -> bool:
        """Whether it sets client quotas (enforcement ClientQuotas), which follow the leader layout."""
        return self.enforcement == "ClientQuotas"


KindSpec = ClientQuotaSpec | MutationSpec | TopicSpec
#: Shared: a ClientQuota's spec holds nothing of its own.
CLIENT_QUOTA: Final = ClientQuotaSpec()


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    """One quota resource: the entries it asks for on a cluster, its kind's spec, or why it asks for nothing."""

    ref: ResourceRef
    #: RFC 3339 creation time: the older resource wins a key both claim.
    created: str
    #: The KafkaCluster it targets (its clusterRef, or the operator's default cluster).
    cluster: str
    #: (entity, values) pairs it asks for; empty when ``error`` is set, and for a TopicQuota until
    #: its leader layout is known.
    entries: Entries = ()
    #: None when ``error`` is set.
    spec: KindSpec | None = None
    #: Why the spec cannot be used (reported InvalidSpec).
    error: str | None = None
    generation: int = 0
    deleting: bool = False
    #: The status last read (what a refused resource keeps reporting as applied), kept compact.
    status: StoredStatus = EMPTY_STATUS

    def with_entries(self, entries: Entries) -> ResourceClaim:
        """The same resource asking for ``entries`` (a TopicQuota's clients on the live layout)."""
        return replace(self, entries=entries)

    @property
    def topic(self) -> TopicSpec | None:
        """The TopicQuota spec, for any other kind None."""
        return self.spec if isinstance(self.spec, TopicSpec) else None

    @property
    def display(self) -> str:
        """What it sets, for status and events: the entities, or the topic."""
        if isinstance(self.spec, TopicSpec):
            return f"topics/{self.spec.topic}" if self.spec.topic else "topics/<default>"
        if self.error is not None:
            return ""
        return ", ".join(e.path() for e, _ in self.entries)


def first_error(exc: ValidationError) -> str:
    """The first problem pydantic found, as ``field.path: message``."""
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ()))
    return f"{where}: {err.get('msg', 'invalid')}" if where else str(err.get("msg", "invalid"))


def claim_of(
    model: QuotaModel,
    ref: ResourceRef,
    created: str,
    cluster: str,
    generation: int = 0,
    deleting: bool = False,
    status: StoredStatus = EMPTY_STATUS,
) -> ResourceClaim:
    """The claim of a validated quota resource (a spec kquota cannot turn into quotas sets ``error``)."""
    common = ResourceClaim(ref, created, cluster, generation=generation, deleting=deleting, status=status)
    try:
        if isinstance(model, TopicQuota):
            topic = None if model.spec.topic.default else model.spec.topic.name
            spec = TopicSpec(topic, model.spec.enforcement, topic_budget(model), tuple(topic_clients(model)))
            return replace(common, spec=spec)
        entries = tuple(desired_entries(model))
    except ValueError as exc:
        return replace(common, error=str(exc))
    if isinstance(model, ControllerMutationQuota):
        return replace(common, entries=entries, spec=MutationSpec(float(model.spec.rate), model.spec.expected_burst))
    return replace(common, entries=entries, spec=CLIENT_QUOTA)


def _shared(value: Any) -> Any:
    """One copy of a string that many claims hold (anything else as it is: the spec is not validated yet)."""
    return sys.intern(value) if isinstance(value, str) else value


def claim_from_body(kind: str, body: Mapping[str, Any], default_cluster: str) -> ResourceClaim:
    """The claim of an object read from the API server (admitted, so normally valid).

    A spec the models reject (an older CRD let it in) makes a claim with
    ``error`` set, so it is reported InvalidSpec instead of crashing.
    """
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    # Namespaces, clusters and creation times repeat across thousands of resources: one
    # string each rather than one per resource (the operator keeps each claim as long as its resource).
    namespace = _shared(meta.get("namespace") or "")
    ref = ResourceRef(kind, namespace, meta.get("name", ""), meta.get("uid", ""))
    created = sys.intern(str(meta.get("creationTimestamp") or ""))
    cluster = _shared(spec.get("clusterRef") or default_cluster)
    generation = int(meta.get("generation") or 0)
    deleting = bool(meta.get("deletionTimestamp"))
    status = StoredStatus.of(body.get("status"))
    try:
        model = KINDS[kind].model_validate(
            {"apiVersion": body.get("apiVersion"), "kind": kind, "metadata": dict(meta), "spec": dict(spec)}
        )
    except ValidationError as exc:
        return ResourceClaim(ref, created, cluster, (), None, first_error(exc), generation, deleting, status)
    assert isinstance(model, ClientQuota | ControllerMutationQuota | TopicQuota), kind
    return claim_of(model, ref, created, cluster, generation, deleting, status)
