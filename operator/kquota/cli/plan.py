"""``kquota plan``: what applying these manifests would change on the brokers, changing nothing.

The answer is the operator's own: the same claim resolution (older resource
wins a key), the same planner (:func:`kquota.domain.plan.plan`), the same
ownership ledger, policy and protected principals. With ``--cluster`` the
manifests are laid over the quota resources already in the Kubernetes
cluster (same kind, namespace and name replaces, as ``kubectl apply``
would), so the plan is exactly what the operator would do after the apply,
including removing keys it owns that no resource sets any more.

Without ``--cluster`` there is no ledger: nothing counts as owned, keys the
manifests do not set are listed as left alone, and removals are not
computed. The output says so.

Resources without ``clusterRef`` target the operator's default cluster:
``--default-cluster``, else what the operator published in ConfigMap
``kquota-operator`` (:mod:`kquota.k8s.published`); with ``--cluster`` and
neither, plan refuses rather than guess, since a wrong guess shows removals
that will not happen.

Exit codes, for CI: 0 no change to the brokers, 2 changes (or, with
``--fail-on-conflict``, a conflict: two resources setting the same key, where
only the older one takes effect), 1 error (including a change the brokers
reject under ``--broker-validate``).
"""

from __future__ import annotations

import argparse
import asyncio
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from kquota.api.kafkacluster import KafkaCluster
from kquota.cli import common
from kquota.cli.brokers import broker_validate, read_live
from kquota.cli.connect import add_connection_args, load_target
from kquota.cli.sources import (
    UNRESOLVED_DEFAULT,
    Checked,
    Claimant,
    SourceError,
    bind_default_cluster,
    load_claimants,
    read_documents,
    validate_documents,
    with_topic_layouts,
)
from kquota.cli.target import Quotas, Target, TargetError
from kquota.cli.term import Cell, Term, safe, value_text
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.guard import APPROVAL_ANNOTATION, GuardHold, guard, hold_message, removals
from kquota.domain.plan import (
    ClaimResolution,
    DesiredEntry,
    EntityChange,
    Plan,
    Protection,
    ResourceRef,
    UnmanagedPolicy,
    plan,
    resolve_claims,
)
from kquota.domain.status import Reason
from kquota.domain.strimzi import StrimziOwnership
from kquota.domain.tenancy import Grant, refusal

EPILOG: Final = """\
examples:
  kquota plan -f quotas/ --cluster prod                 # with the ownership ledger, via your kubeconfig
  kquota plan -f quotas/ --cluster prod --bootstrap-server localhost:9092   # through a port-forward
  kquota plan -f alice.yaml --bootstrap-server kafka:9092 --command-config admin.properties
  kquota plan -f quotas/ --cluster prod --broker-validate -o json
  kquota plan -f quotas/ --cluster prod --fail-on-conflict   # a resource that loses a key fails CI

exit codes: 0 no change to the brokers, 2 changes (with --fail-on-conflict: or a conflict), 1 error.
"""


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
STYLES: Final = {
    Action.ADD: "green",
    Action.CHANGE: "yellow",
    Action.REMOVE: "red",
    Action.OWN: "cyan",
    Action.UNMANAGED: "dim",
    Action.PROTECTED: "magenta",
    Action.KEEP: "blue",
    Action.HELD: "red bold",
}


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

    @property
    def changes(self) -> list[Row]:
        return [r for r in self.rows if r.action in CHANGING]

    def exit_code(self) -> int:
        if self.rejected:
            return common.ERROR
        if self.changes or (self.fail_on_conflict and self.conflicts):
            return common.CHANGES
        return common.OK


# --- pure parts --------------------------------------------------------------------


def overlay(existing: Sequence[Claimant], manifests: Sequence[Claimant]) -> list[Claimant]:
    """The resources after ``kubectl apply`` of ``manifests``: same kind/namespace/name replaces."""

    def key(c: Claimant) -> tuple[str, str, str]:
        return (c.ref.kind, c.ref.namespace, c.ref.name)

    incoming = {key(c): c for c in manifests}
    out = [c for c in existing if key(c) not in incoming]
    by_key = {key(c): c for c in existing}
    for k, c in incoming.items():
        old = by_key.get(k)
        # An updated resource keeps its age, which decides conflicts; a new one is the youngest.
        out.append(c if old is None else replace(c, ref=old.ref, created=old.created))
    return out


def select(
    claimants: Sequence[Claimant],
    cluster: str | None,
    grants: tuple[Grant, ...] | None,
    protection: Protection,
    keep: dict[Entity, frozenset[QuotaKey] | None] | None = None,
) -> tuple[list[DesiredEntry], list[str]]:
    """The entries the operator would act on, and a note for each resource it would not act on.

    The keys of a resource refused by tenancy go into ``keep``: the operator
    leaves them on the brokers as they are (see :mod:`kquota.domain.plan`).
    """
    entries: list[DesiredEntry] = []
    notes: list[str] = []
    for c in sorted(claimants, key=lambda c: (c.ref.kind, c.ref.namespace, c.ref.name)):
        if cluster is not None and c.cluster != cluster:
            notes.append(f"{c.ref}: targets cluster {c.cluster}, not {cluster}; not planned")
            continue
        if c.skipped:
            notes.append(f"{c.ref}: {c.skipped}; sets nothing")
            continue
        refused = refusal(c.ref.namespace, [e for e, _ in c.entries], grants, protection)
        if refused is not None:
            reason, why = refused
            prefix = "not permitted: " if reason is Reason.NOT_PERMITTED else ""
            if reason is Reason.NOT_PERMITTED and keep is not None:
                for entity, values in c.entries:
                    held = keep.get(entity, frozenset())
                    keep[entity] = None if held is None else held | frozenset(values)
                notes.append(f"{c.ref}: {prefix}{why}; sets nothing, and what it set stays on the brokers as it is")
            else:
                notes.append(f"{c.ref}: {prefix}{why}; sets nothing")
            continue
        entries.extend(DesiredEntry(c.ref, c.created, e, v) for e, v in c.entries)
    if cluster is None:
        clusters = sorted({c.cluster for c in claimants if not c.skipped})
        if len(clusters) > 1:
            notes.append(
                f"the manifests target several clusters ({', '.join(clusters)}); all are compared with "
                "these brokers: pass --cluster to plan one"
            )
    return entries, notes


def conflict_notes(claims: ClaimResolution) -> list[tuple[Entity, str]]:
    """Each key a resource loses to an older one: the entity, and a note saying who wins."""
    out = []
    for loser, infos in sorted(claims.conflicts.items(), key=lambda item: str(item[0])):
        for info in infos:
            note = (
                f"{loser}: {info.key.value} on {info.entity.path()} is set by {info.winner} "
                "(the older resource wins); this resource does not set it"
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
) -> list[Row]:
    """The plan as rows, sorted by entity then key; removals ``hold`` names are HELD rows."""
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
    for entity in the_plan.protected:
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
    existing: Sequence[Claimant], after: Sequence[Claimant], gone: set[tuple[str, str, str]] | None = None
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


def topics_of(*groups: Sequence[Claimant] | None) -> list[str]:
    """The topics whose leader layout the TopicQuotas among the claimants need."""
    return sorted({c.topic for group in groups for c in group or [] if c.topic})


def make_report(
    target: Target,
    manifests: Sequence[Claimant],
    live: Quotas,
    globs: Sequence[str] | None = None,
    leaders: Mapping[str, Mapping[int, int]] | None = None,
    deleted: Sequence[Claimant] = (),
) -> tuple[Report, Plan]:
    """The plan of ``manifests`` against ``target`` and its live quotas (pure: everything is already read).

    ``leaders`` is the live leader layout of the topics TopicQuotas name.
    """
    known = target.claimants is not None
    claimants = overlay(target.claimants or [], manifests) if known else list(manifests)
    # --delete: gone after the apply, as `kubectl delete -f` would leave them.
    gone = {(c.ref.kind, c.ref.namespace, c.ref.name) for c in deleted}
    claimants = [c for c in claimants if (c.ref.kind, c.ref.namespace, c.ref.name) not in gone]
    claimants = with_topic_layouts(claimants, leaders or {})
    keep: dict[Entity, frozenset[QuotaKey] | None] = {}
    entries, notes = select(claimants, target.cluster, target.grants, target.protection, keep)
    claims = resolve_claims(entries)
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
    causes = removal_causes(target.claimants or [], claimants, gone)
    rows = [
        r
        for r in rows_of(the_plan, claims, live, target.ledger, hold, causes, target.protection.strimzi)
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
    return report, the_plan


def shown_changes(report: Report, the_plan: Plan) -> list[EntityChange]:
    """The plan's changes to the entities shown (whole entities, as the operator sends them)."""
    shown = {r.entity for r in report.changes}
    return [c for c in the_plan.changes if c.entity in shown]


# --- output ------------------------------------------------------------------------


def summary(report: Report) -> str:
    counts = {a: sum(1 for r in report.rows if r.action is a) for a in Action}
    if not report.changes:
        text = "No changes: the brokers already match."
    else:
        entities = len({r.entity for r in report.changes})
        text = (
            f"Plan: {counts[Action.ADD]} to add, {counts[Action.CHANGE]} to change, {counts[Action.REMOVE]} to remove "
            f"on {common.plural(entities, 'entity', 'entities')}."
        )
    extra = []
    if counts[Action.OWN]:
        extra.append(f"{common.plural(counts[Action.OWN], 'key')} already set become owned by kquota")
    if counts[Action.UNMANAGED]:
        extra.append(f"{common.plural(counts[Action.UNMANAGED], 'unmanaged key')} left alone")
    if counts[Action.HELD]:
        extra.append(
            f"{common.plural(counts[Action.HELD], 'removal')} held by the mass-removal guard until approved (see Notes)"
        )
    if counts[Action.KEEP]:
        extra.append(f"{common.plural(counts[Action.KEEP], 'key')} of refused resources kept as they are")
    if counts[Action.PROTECTED]:
        extra.append(f"{common.plural(counts[Action.PROTECTED], 'protected entity', 'protected entities')} skipped")
    if report.conflicts:
        extra.append(f"{common.plural(report.conflicts, 'conflict')}: the older resource wins (see Notes)")
    return text + (" " + "; ".join(extra) + "." if extra else "")


def render_text(report: Report, t: Term) -> None:
    t.write(f"Plan for {safe(report.target)}", "bold")
    t.write(f"ownership ledger: {report.ledger}" if report.ledger else "ownership ledger: not available")
    if report.default_cluster is not None:
        name, source = report.default_cluster
        t.write(f"default cluster (resources without clusterRef): {safe(name)} ({source})")
    if report.rows:
        t.write()
        table: list[list[Cell]] = []
        for r in report.rows:
            key = r.key.value if r.key else "*"
            source = str(r.source) if r.source else ""
            if r.note:
                source = f"{source} ({r.note})" if source else r.note
            rejected = report.rejected.get(r.entity.path())
            if rejected and r.action in CHANGING:
                source = f"REJECTED by the broker: {rejected}"
            live = value_text(r.key, r.live) if r.key else "-"
            desired = value_text(r.key, r.desired) if r.key else "-"
            table.append([(r.action.value, STYLES[r.action]), r.entity.path(), key, live, desired, source])
        t.table(["ACTION", "ENTITY", "KEY", "LIVE", "DESIRED", "SOURCE"], table)
    common.bullet_list(t, "Notes:", report.notes)
    if report.validated:
        t.write()
        if report.rejected:
            t.write(f"The brokers reject {common.plural(len(report.rejected), 'entity', 'entities')}.", "red bold")
        else:
            t.write("The brokers accept every change (validate only, nothing written).", "green")
    t.write()
    t.write(summary(report), "bold")


def to_json(report: Report) -> dict[str, Any]:
    return {
        "target": report.target,
        "ledger": report.ledger,
        "defaultCluster": (
            {"name": report.default_cluster[0], "source": report.default_cluster[1]}
            if report.default_cluster is not None
            else None
        ),
        "changes": len(report.changes),
        "conflicts": report.conflicts,
        "rows": [
            {
                "action": r.action.value,
                "entity": common.entity_json(r.entity),
                "key": r.key.value if r.key else None,
                "live": common.json_number(r.live),
                "desired": common.json_number(r.desired),
                "resource": common.ref_json(r.source),
                "note": r.note,
            }
            for r in report.rows
        ],
        "notes": report.notes,
        "brokerValidation": (
            {"rejected": [{"entity": e, "message": m} for e, m in sorted(report.rejected.items())]}
            if report.validated
            else None
        ),
        "summary": summary(report),
    }


# --- command -----------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="show what applying manifests would change on the brokers (changes nothing)",
        description=common.paragraph(
            "Compare quota manifests with the brokers' live quotas, as the operator would after "
            "`kubectl apply`: per entity and key, what would be added, changed or removed, and what kquota "
            "leaves alone because it does not own it. Nothing is changed."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-f", "--filename", action="append", required=True, metavar="PATH", help="file, directory or - (repeatable)"
    )
    p.add_argument(
        "--delete",
        action="append",
        default=[],
        metavar="PATH",
        help="manifests of resources to be deleted (as `kubectl delete -f` would): their keys are removed (repeatable)",
    )
    p.add_argument("-R", "--recursive", action="store_true", help="read directories recursively")
    p.add_argument(
        "-n", "--namespace", default="default", help="namespace of manifests that name none (default %(default)s)"
    )
    p.add_argument(
        "--broker-validate",
        action="store_true",
        help="also send the changes to the brokers with validate_only, so they check them without applying",
    )
    p.add_argument(
        "--fail-on-conflict",
        action="store_true",
        help="exit 2 also when two resources set the same key (only the older one takes effect)",
    )
    common.add_entity_filter(p)
    add_connection_args(p, "KafkaCluster to plan against; reads its ownership ledger and resources via kubeconfig")
    common.add_output_args(p)
    p.set_defaults(func=run)


def load_manifests(args: argparse.Namespace, paths: Sequence[str] | None = None) -> list[Claimant] | None:
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


def with_cluster_manifest(target: Target, docs: Sequence[Checked]) -> Target:
    """``target`` with the KafkaCluster of the same name from the manifests laid over the live one.

    Applying a KafkaCluster changes what the operator does with every quota of
    that cluster (unmanaged policy, tenancy grants, protected principals), so
    the plan must show it: the same pure :func:`cluster_policy` the operator
    uses, with the operator's published settings and its own principals.
    An approval annotation in the manifest replaces the live one; without it
    the live one stays (``kubectl apply`` keeps annotations it did not set).
    """
    from kquota.reconcile.build import cluster_policy
    from kquota.reconcile.settings import OperatorSettings

    for c in docs:
        if isinstance(c.resource, KafkaCluster) and c.resource.metadata.name == target.cluster:
            settings = target.settings or OperatorSettings.model_construct()
            grants, protection, policy = cluster_policy(
                c.resource, settings, target.principals, target.protection.strimzi
            )
            annotations = c.resource.metadata.annotations or {}
            return replace(
                target,
                grants=grants,
                protection=protection,
                policy=policy,
                approval=annotations.get(APPROVAL_ANNOTATION, target.approval),
            )
    return target


def cluster_manifests(args: argparse.Namespace) -> list[Checked]:
    """The valid KafkaCluster documents among the ``-f`` manifests."""
    checked, _ = validate_documents(read_documents(args.filename or [], args.recursive), args.namespace)
    return [c for c in checked if isinstance(c.resource, KafkaCluster)]


def run(args: argparse.Namespace) -> int:
    manifests = load_manifests(args)
    deleted = load_manifests(args, args.delete) if args.delete else []
    if manifests is None or deleted is None:
        return common.ERROR
    try:
        target = asyncio.run(load_target(args))
        if target.cluster is not None:
            target = with_cluster_manifest(target, cluster_manifests(args))
        manifests = bind_default_cluster(manifests, target.default_cluster)
        deleted = bind_default_cluster(deleted, target.default_cluster)
        live, leaders = read_live(target.connection, topics_of(manifests, target.claimants))
    except TargetError as exc:
        return common.error(str(exc))
    report, the_plan = make_report(target, manifests, live, args.entity, leaders, deleted)
    report.fail_on_conflict = args.fail_on_conflict
    if args.broker_validate:
        try:
            results = broker_validate(target.connection, shown_changes(report, the_plan))
        except TargetError as exc:
            return common.error(str(exc))
        report.validated = True
        report.rejected = {
            r.entity.path(): f"{r.error_name}: {r.error_message or 'no message'}" for r in results if not r.ok
        }
    if args.output == "json":
        common.dump_json(to_json(report))
    else:
        render_text(report, common.term(args))
    return report.exit_code()


__all__ = ["Action", "Report", "Row", "make_report", "overlay", "rows_of", "run", "select"]
