"""The claims pipeline of ``kquota plan`` and ``kquota explain``: manifests in, the operator's gating out.

:func:`load_manifests` reads ``-f`` manifests into
:class:`~kquota.domain.claims.ResourceClaim` records; :func:`overlay` lays
them over the resources already in the cluster, as ``kubectl apply`` would;
:func:`select` runs the operator's own gating
(:func:`kquota.domain.gating.gate_claims`: TopicQuota expansion, invalid
specs, tenancy, protection, claim resolution) and words each resource the
operator would not act on as a note.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from kquota.cli import common
from kquota.cli.sources import UNRESOLVED_DEFAULT, SourceError, load_claimants
from kquota.domain.claims import ResourceClaim
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.gating import claimers_outcomes, gate_claims
from kquota.domain.plan import ClaimResolution, Protection
from kquota.domain.status import Outcome, Reason
from kquota.domain.tenancy import Grant
from kquota.domain.topic_outcomes import TopicFacts
from kquota.domain.topics import TopicLayout

#: Offline (no brokers to read the layout from), instead of "the topic does not exist".
OFFLINE_TOPIC: Final = "its client quotas follow the topic's live leader layout: give --bootstrap-server or --cluster"

#: Outcomes the plan notes: the resource sets nothing (a TopicQuota's own topic outcomes, such as
#: Monitoring, are not notes).
_GATED = frozenset({Reason.INVALID_SPEC, Reason.NOT_PERMITTED, Reason.PROTECTED, Reason.OWNED_BY_STRIMZI})
#: A resource whose spec (or topic) gives it nothing to claim, whatever the cluster's policy.
SKIPPED = frozenset({Reason.INVALID_SPEC, Reason.TOPIC_NOT_FOUND})


def load_manifests(args: argparse.Namespace, paths: Sequence[str] | None = None) -> list[ResourceClaim] | None:
    """The claims of ``-f`` manifests (or of ``paths``); None (errors printed) when any is invalid."""
    try:
        # Manifests without clusterRef get the default cluster once it is known (bind_default_cluster).
        default_cluster = args.default_cluster or UNRESOLVED_DEFAULT
        claims, invalid = load_claimants(
            (args.filename or []) if paths is None else paths,
            args.recursive,
            args.namespace,
            default_cluster,
            common.now_rfc3339(),
        )
    except SourceError as exc:
        common.error(str(exc))
        return None
    for c in invalid:
        common.error(f"{c.doc.origin}: {c.error}")
    return None if invalid else claims


def name_key(c: ResourceClaim) -> tuple[str, str, str]:
    return (c.ref.kind, c.ref.namespace, c.ref.name)


def overlay(existing: Sequence[ResourceClaim], manifests: Sequence[ResourceClaim]) -> list[ResourceClaim]:
    """The resources after ``kubectl apply`` of ``manifests``: same kind/namespace/name replaces."""
    incoming = {name_key(c): c for c in manifests}
    out = [c for c in existing if name_key(c) not in incoming]
    by_key = {name_key(c): c for c in existing}
    for k, c in incoming.items():
        old = by_key.get(k)
        # An updated resource keeps its age, which decides conflicts; a new one is the youngest.
        out.append(c if old is None else replace(c, ref=old.ref, created=old.created))
    return out


def topics_of(*groups: Sequence[ResourceClaim] | None) -> list[str]:
    """The topics whose leader layout the TopicQuotas among the claims need (enforcement ClientQuotas)."""
    return sorted(
        {spec.topic for group in groups for c in group or [] if (spec := c.topic) and spec.splits and spec.topic}
    )


@dataclass(frozen=True, slots=True)
class Selection:
    """What the operator would act on: the resolved claims, what refused resources keep, and notes."""

    claims: ClaimResolution
    #: Keys of resources refused by tenancy, left on the brokers as they are.
    keep: dict[Entity, frozenset[QuotaKey] | None]
    notes: list[str]
    #: Each resource's outcome known before anything is sent (topics, refusals, conflicts), by uid.
    outcomes: Mapping[str, Outcome]
    #: The entities of resources refused because kquota never touches them (protected, Strimzi's).
    shielded: frozenset[Entity] = frozenset()


def _keyed(c: ResourceClaim) -> ResourceClaim:
    # Gating keys outcomes by uid; a manifest not applied yet has none.
    return c if c.ref.uid else replace(c, ref=replace(c.ref, uid=f"manifest:{c.ref}"))


def _note(c: ResourceClaim, outcome: Outcome, offline: bool, keeps: bool) -> str | None:
    """The note for a resource that sets nothing, in the operator's words (None: not one)."""
    if outcome.reason is Reason.INVALID_SPEC:
        return f"{c.ref}: invalid spec: {outcome.message}; sets nothing"
    if outcome.reason is Reason.NOT_PERMITTED:
        kept = ", and what it set stays on the brokers as it is" if keeps else ""
        return f"{c.ref}: not permitted: {outcome.message}; sets nothing{kept}"
    if outcome.reason in _GATED:
        return f"{c.ref}: {outcome.message}; sets nothing"
    spec = c.topic
    if spec is not None and spec.splits and outcome.reason is Reason.TOPIC_NOT_FOUND:
        return f"{c.ref}: {OFFLINE_TOPIC if offline else outcome.message}; sets nothing"
    return None


def select(
    claimants: Sequence[ResourceClaim],
    cluster: str | None,
    grants: tuple[Grant, ...] | None,
    protection: Protection,
    leaders: Mapping[str, Mapping[int, int]] | None,
    keeps: bool = False,
) -> Selection:
    """The operator's gating on ``claimants`` of ``cluster`` (None: every cluster), with a note per resource refused.

    ``leaders`` is partition -> leader broker per existing topic, as the
    brokers report it; None offline (no broker to ask). ``keeps``: the
    notes say that a refused resource's keys stay on the brokers (plan).
    """
    ordered = sorted((_keyed(c) for c in claimants), key=name_key)
    mine = [c for c in ordered if cluster is None or c.cluster == cluster]
    layouts = {t: TopicLayout.from_partition_leaders(p) for t, p in (leaders or {}).items() if p}
    gated = gate_claims(mine, TopicFacts(layouts), grants, protection, {})
    outcomes = claimers_outcomes(gated)
    notes: list[str] = []
    noted: set[str] = set()
    shielded: set[Entity] = set()
    for c in ordered:
        if cluster is not None and c.cluster != cluster:
            notes.append(f"{c.ref}: targets cluster {c.cluster}, not {cluster}; not planned")
            continue
        outcome = gated.outcomes.get(c.ref.uid)
        note = None if outcome is None else _note(c, outcome, leaders is None, keeps)
        if note is not None:
            notes.append(note)
            noted.add(c.ref.uid)
        if outcome is not None and outcome.reason in (Reason.PROTECTED, Reason.OWNED_BY_STRIMZI):
            shielded.update(e for e, _ in c.entries if protection.covers(e))
    if cluster is None:
        clusters = sorted(
            {c.cluster for c in ordered if c.ref.uid not in noted or gated.outcomes[c.ref.uid].reason not in SKIPPED}
        )
        if len(clusters) > 1:
            notes.append(
                f"the manifests target several clusters ({', '.join(clusters)}); all are compared with "
                "these brokers: pass --cluster to plan one"
            )
    return Selection(gated.claims, gated.keep, notes, outcomes, frozenset(shielded))
