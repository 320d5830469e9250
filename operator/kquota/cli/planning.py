"""What ``kquota plan`` shows, computed: the operator's plan of the manifests as rows and notes (pure).

:func:`make_report` takes what ``kquota plan`` read (the target cluster, its
live quotas, the manifests and the topics' leader layouts) and runs the
operator's own decisions on it: the claims pipeline
(:func:`kquota.cli.claims.select`), the planner
(:func:`kquota.domain.plan.plan`) and the mass-removal guard. The command and
its output are in :mod:`kquota.cli.plan`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from kquota.cli import common
from kquota.cli.claims import overlay, select
from kquota.cli.target import Quotas, Target
from kquota.domain.claims import ResourceClaim
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.gating import conflict_message
from kquota.domain.guard import APPROVAL_ANNOTATION, GuardHold, guard, hold_message, removals
from kquota.domain.plan import ClaimResolution, EntityChange, Plan, ResourceRef, UnmanagedPolicy, plan
from kquota.domain.strimzi import StrimziOwnership


class Action(enum.StrEnum):
    ADD = "add"
    CHANGE = "change"
    REMOVE = "remove"
    #: Already at the desired value; kquota records ownership without touching the broker.
    OWN = "own"
    UNMANAGED = "unmanaged"
    PROTECTED = "protected"
    #: Owned by a resource the operator refuses (NotPermitted): left as it is on the brokers.
    KEEP = "keep"
    #: A removal the mass-removal guard holds until the KafkaCluster approves it.
    HELD = "held"


CHANGING: Final = frozenset({Action.ADD, Action.CHANGE, Action.REMOVE})


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the plan: an entity's key and what happens to it."""

    action: Action
    entity: Entity
    key: QuotaKey | None
    live: float | None = None
    desired: float | None = None
    source: ResourceRef | None = None
    note: str = ""


@dataclass(slots=True)
class Report:
    """Everything ``kquota plan`` prints."""

    target: str
    ledger: str | None
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Entity path -> the broker's complaint, from --broker-validate.
    rejected: dict[str, str] = field(default_factory=dict)
    validated: bool = False
    #: Keys a resource sets but loses to an older resource, on the entities shown (each also a note).
    conflicts: int = 0
    #: --fail-on-conflict: a conflict makes the exit code 2, as a change does.
    fail_on_conflict: bool = False
    #: The cluster resources without clusterRef target, and where that comes from; None when unknown.
    default_cluster: tuple[str, str] | None = None
    #: The command that approves the removals the mass-removal guard would hold (None: none held).
    approval: str | None = None

    @property
    def changes(self) -> list[Row]:
        return [r for r in self.rows if r.action in CHANGING]

    @property
    def held(self) -> list[Row]:
        return [r for r in self.rows if r.action is Action.HELD]

    def exit_code(self) -> int:
        if self.rejected:
            return common.ERROR
        if self.held:
            # Distinct from 2: the operator will not make these removals until someone approves them.
            return common.HELD
        if self.changes or (self.fail_on_conflict and self.conflicts):
            return common.CHANGES
        return common.OK


def conflict_notes(claims: ClaimResolution) -> list[tuple[Entity, str]]:
    """Each key a resource loses to an older one: the entity, and a note saying who wins."""
    out = []
    for loser, infos in sorted(claims.conflicts.items(), key=lambda item: str(item[0])):
        for info in infos:
            note = (
                f"{loser}: {conflict_message(info.key.value, info.entity, info.winner)}; this resource does not set it"
            )
            out.append((info.entity, note))
    return out


def rows_of(
    the_plan: Plan,
    claims: ClaimResolution,
    live: Quotas,
    ledger: Quotas | None,
    hold: GuardHold | None = None,
    causes: Mapping[tuple[Entity, QuotaKey], str] | None = None,
    strimzi: StrimziOwnership | None = None,
    shielded: frozenset[Entity] = frozenset(),
) -> list[Row]:
    """The plan as rows, sorted by entity then key; removals ``hold`` names are HELD rows.

    ``shielded`` are the entities of resources refused as protected or Strimzi's: each is a
    PROTECTED row, as the plan's own protected entities are.
    """
    owned = ledger or {}
    drift = {(d.entity, d.key) for d in the_plan.drift}
    rows: list[Row] = []
    touched: set[tuple[Entity, QuotaKey]] = set()
    for change in the_plan.changes:
        have = live.get(change.entity, {})
        for op in change.ops:
            touched.add((change.entity, op.key))
            holder = claims.holders.get((change.entity, op.key))
            old = have.get(op.key)
            if op.value is None:
                note = (causes or {}).get((change.entity, op.key)) or (
                    "owned by kquota; no resource sets it any more"
                    if op.key in owned.get(change.entity, {})
                    else "unmanaged policy Adopt: no resource sets it"
                )
                if old is None:
                    # The operator sends it all the same (the brokers' answer may lag), then forgets it.
                    note = f"{note}; not on the brokers as read (the removal changes nothing there)"
                if hold is not None and (change.entity, op.key) in hold.keys:
                    note = f"{note}; held by the mass-removal guard until approved (id {hold.id})"
                    rows.append(Row(Action.HELD, change.entity, op.key, old, None, None, note))
                else:
                    rows.append(Row(Action.REMOVE, change.entity, op.key, old, None, None, note))
                continue
            if old is None:
                rows.append(Row(Action.ADD, change.entity, op.key, None, op.value, holder))
                continue
            if (change.entity, op.key) in drift:
                note = "changed outside kquota; restored"
            elif ledger is not None and op.key not in owned.get(change.entity, {}):
                note = "takes over a value set outside kquota"
            else:
                note = ""
            rows.append(Row(Action.CHANGE, change.entity, op.key, old, op.value, holder, note))
    if ledger is not None:
        for entity, values in the_plan.record.items():
            for key, value in values.items():
                if (entity, key) in touched:
                    continue
                holder = claims.holders.get((entity, key))
                rows.append(Row(Action.OWN, entity, key, value, value, holder, "already set; kquota takes ownership"))
    for entity, values in the_plan.unmanaged.items():
        for key, value in values.items():
            owner = strimzi.owner(entity) if strimzi is not None else None
            if owner is not None:
                note = "Strimzi's; left alone"
            elif ledger is not None:
                note = "set outside kquota; left alone"
            else:
                note = "not in the manifests; left alone"
            rows.append(Row(Action.UNMANAGED, entity, key, value, None, None, note))
    for entity in sorted(the_plan.protected | shielded, key=Entity.sort_key):
        owner = strimzi.owner(entity) if strimzi is not None else None
        note = f"Strimzi's, never changed: {owner}" if owner else "protected principal; never changed"
        rows.append(Row(Action.PROTECTED, entity, None, None, None, None, note))
    for entity, values in the_plan.kept.items():
        for key, value in values.items():
            note = (
                "set by a resource the operator refuses (not permitted); kept as it is until that resource is deleted"
            )
            rows.append(Row(Action.KEEP, entity, key, value, None, None, note))
    order = list(QuotaKey)
    rows.sort(key=lambda r: (r.entity.sort_key(), order.index(r.key) if r.key else -1, r.action.value))
    return rows


def removal_causes(
    existing: Sequence[ResourceClaim], after: Sequence[ResourceClaim], gone: set[tuple[str, str, str]] | None = None
) -> dict[tuple[Entity, QuotaKey], str]:
    """Why a key would be removed, where a resource explains it: deleted, or its new version no longer sets it."""
    now = {(c.ref.kind, c.ref.namespace, c.ref.name): c for c in after}
    causes: dict[tuple[Entity, QuotaKey], str] = {}
    for old in existing:
        new = now.get((old.ref.kind, old.ref.namespace, old.ref.name))
        still = {(e, k) for e, values in (new.entries if new is not None else ()) for k in values}
        for entity, values in old.entries:
            for key in values:
                if (entity, key) not in still:
                    deleted = (old.ref.kind, old.ref.namespace, old.ref.name) in (gone or set())
                    causes[(entity, key)] = f"{old.ref} is deleted" if deleted else f"{old.ref} no longer sets it"
    return causes


def make_report(
    target: Target,
    manifests: Sequence[ResourceClaim],
    live: Quotas,
    globs: Sequence[str] | None = None,
    leaders: Mapping[str, Mapping[int, int]] | None = None,
    deleted: Sequence[ResourceClaim] = (),
) -> tuple[Report, Plan]:
    """The plan of ``manifests`` against ``target`` and its live quotas (pure: everything is already read).

    ``leaders`` is the live leader layout of the topics TopicQuotas name.
    """
    known = target.claimants is not None
    claimants = overlay(target.claimants or [], manifests) if known else list(manifests)
    # --delete: gone after the apply, as `kubectl delete -f` would leave them.
    gone = {(c.ref.kind, c.ref.namespace, c.ref.name) for c in deleted}
    claimants = [c for c in claimants if (c.ref.kind, c.ref.namespace, c.ref.name) not in gone]
    selection = select(claimants, target.cluster, target.grants, target.protection, leaders or {}, keeps=True)
    claims, keep, notes = selection.claims, selection.keep, selection.notes
    policy = target.policy if target.ledger is not None else UnmanagedPolicy.IGNORE
    the_plan = plan(claims.desired, live, target.ledger or {}, policy, target.protection, keep)
    hold = None
    if target.ledger is not None:
        # The operator's guard, on the whole plan (a prune the operator sees as a stream of
        # deletions is held the same way; see kquota.domain.guard).
        removed = removals(the_plan.changes)
        base = sum(len(v) for v in target.ledger.values()) + sum(
            1 for e, k in removed if k not in target.ledger.get(e, {})
        )
        hold = guard(removed, base, target.guard)
        if hold is not None and target.approval == hold.id:
            notes.append(f"the {hold.count} removals are approved ({APPROVAL_ANNOTATION}={hold.id})")
            hold = None
        if hold is not None:
            notes.append(hold_message(hold, target.cluster or "", target.guard))
    # A resource being deleted (the operator waits on its finalizer) claims nothing, as in the operator.
    gone |= {(c.ref.kind, c.ref.namespace, c.ref.name) for c in claimants if c.deleting}
    causes = removal_causes(target.claimants or [], [c for c in claimants if not c.deleting], gone)
    rows = [
        r
        for r in rows_of(
            the_plan, claims, live, target.ledger, hold, causes, target.protection.strimzi, selection.shielded
        )
        if common.entity_selected(r.entity, globs)
    ]
    if target.ledger is None:
        ledger_text = None
        notes.insert(
            0,
            "no ownership ledger (no --cluster): nothing counts as owned by kquota, so removals are not computed "
            "and keys the manifests do not set are only listed",
        )
    else:
        owned = sum(len(v) for v in target.ledger.values())
        ledger_text = f"{common.plural(owned, 'key')} owned (namespace {target.ledger_namespace})"
        if target.policy is UnmanagedPolicy.ADOPT:
            notes.append("unmanaged policy Adopt: keys no resource sets are removed")
    conflicts = conflict_notes(claims)
    notes.extend(note for _, note in conflicts)
    shown = sum(1 for entity, _ in conflicts if common.entity_selected(entity, globs))
    default = (
        (target.default_cluster, target.default_cluster_source or "") if target.default_cluster is not None else None
    )
    report = Report(target.describe(), ledger_text, rows, notes, conflicts=shown, default_cluster=default)
    if hold is not None:
        report.approval = approval_command(target.cluster or "", hold)
    return report, the_plan


def approval_command(cluster: str, hold: GuardHold) -> str:
    """The command that lets exactly ``hold``'s removals go (as the operator's DeletionGuard condition says)."""
    return f"kubectl annotate kafkacluster {cluster} {APPROVAL_ANNOTATION}={hold.id} --overwrite"


def shown_changes(report: Report, the_plan: Plan) -> list[EntityChange]:
    """The plan's changes to the entities shown (whole entities, as the operator sends them)."""
    shown = {r.entity for r in report.changes}
    return [c for c in the_plan.changes if c.entity in shown]
