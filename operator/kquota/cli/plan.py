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

With ``--impact USAGE`` the changes are also run against usage history on
Spark (:mod:`kquota.cli.impact`): which entities the new effective limits
would throttle, and which a removal or a raise would free.

Exit codes, for CI: 0 no change to the brokers, 2 changes (or, with
``--fail-on-conflict``, a conflict: two resources setting the same key, where
only the older one takes effect), 3 removals the mass-removal guard will hold
until the KafkaCluster approves them (the approval command is printed), 4
changes of which, by ``--impact``, one throttles an entity more than
``--throttle-threshold`` of the time, 1 error
(including a change the brokers reject under ``--broker-validate``).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Final

from kquota.api.kafkacluster import KafkaCluster
from kquota.cli import common
from kquota.cli.brokers import broker_validate, read_live
from kquota.cli.claims import load_manifests, topics_of
from kquota.cli.connect import add_connection_args, load_target
from kquota.cli.impact import add_impact_args, exit_code, write_html
from kquota.cli.impact import render_markdown as impact_markdown
from kquota.cli.impact import render_text as render_impact_text
from kquota.cli.impact import run_impact as impact_of
from kquota.cli.impact import to_json as impact_json
from kquota.cli.planning import CHANGING, Action, Report, make_report, shown_changes
from kquota.cli.sources import Checked, bind_default_cluster, read_documents, validate_documents
from kquota.cli.target import Target, TargetError
from kquota.cli.term import Cell, Term, safe, value_text
from kquota.domain.guard import APPROVAL_ANNOTATION

EPILOG: Final = """\
examples:
  kquota plan -f quotas/ --cluster prod                 # with the ownership ledger, via your kubeconfig
  kquota plan -f quotas/ --cluster prod --bootstrap-server localhost:9092   # through a port-forward
  kquota plan -f alice.yaml --bootstrap-server kafka:9092 --command-config admin.properties
  kquota plan -f quotas/ --cluster prod --broker-validate -o json
  kquota plan -f quotas/ --cluster prod --fail-on-conflict   # a resource that loses a key fails CI
  kquota plan -f quotas/ --cluster prod --impact usage/ --format markdown   # who it throttles, for the PR

exit codes: 0 no change to the brokers, 2 changes (with --fail-on-conflict: or a conflict),
  3 removals the mass-removal guard will hold until approved (the approval command is printed),
  4 changes that throttle an entity (--impact; more than --throttle-threshold of the time), 1 error.
"""


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


# --- output ------------------------------------------------------------------------


def summary(report: Report) -> str:
    counts = {a: sum(1 for r in report.rows if r.action is a) for a in Action}
    if not report.changes and counts[Action.HELD]:
        text = "No change goes through until the held removals are approved."
    elif not report.changes:
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
    if report.approval is not None:
        t.write(f"To let the held removals go: {report.approval}", "bold")


#: What makes markup inside a markdown table cell (the advisor's impact table escapes the same).
_MARKDOWN_SPECIAL: Final = re.compile(r"([\\`*_\[\]<>|~])")


def _md(text: str) -> str:
    """Text safe in a markdown table cell: control characters escaped, markup and the cell separator too."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", safe(text))


def render_markdown(report: Report) -> str:
    """The plan for a pull-request comment: the summary, then every row in a collapsed table."""
    lines = [f"#### kquota plan for {_md(report.target)}", "", f"**{_md(summary(report))}**", ""]
    if report.rows:
        lines += [f"<details><summary>{len(report.rows)} row(s)</summary>", ""]
        lines += ["| action | entity | key | live | desired | source |", "|---|---|---|---|---|---|"]
        for r in report.rows:
            key = r.key.value if r.key else "*"
            source = str(r.source) if r.source else ""
            if r.note:
                source = f"{source} ({r.note})" if source else r.note
            live = value_text(r.key, r.live) if r.key else "-"
            desired = value_text(r.key, r.desired) if r.key else "-"
            cells = [r.action.value, r.entity.path(), key, live, desired, source]
            lines.append("| " + " | ".join(_md(c) for c in cells) + " |")
        lines += ["", "</details>", ""]
    lines += [f"- {_md(n)}" for n in report.notes]
    return "\n".join(lines).rstrip() + "\n"


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
        "approval": report.approval,
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
    add_impact_args(p)
    common.add_output_args(p, formats=("text", "json", "markdown"))
    p.set_defaults(func=run)


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
    if args.impact_report and not args.impact:
        return common.error("--impact-report needs --impact USAGE")
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
    impact = None
    if args.impact and not report.changes:
        # Nothing changes on the brokers: nobody's limit moves, and Spark need not start.
        common.note("--impact: the plan changes nothing, so it throttles and frees nobody")
    elif args.impact:
        result = impact_of(args, live, report)
        if isinstance(result, str):
            return common.error(result)
        impact = result
        if args.impact_report:
            write_html(impact, args.impact_report)
    if args.output == "json":
        doc = to_json(report)
        if impact is not None:
            doc["impact"] = impact_json(impact)
        common.dump_json(doc)
    elif args.output == "markdown":
        text = render_markdown(report)
        if impact is not None:
            text += "\n" + impact_markdown(impact)
        sys.stdout.write(text)
    else:
        t = common.term(args)
        render_text(report, t)
        if impact is not None:
            render_impact_text(impact, t)
    return exit_code(report.exit_code(), impact)


__all__ = ["add_parser", "render_markdown", "render_text", "run", "summary", "to_json"]
