"""``kquota explain``: the quota a client actually gets, key by key, and who set it.

For a connection (user, client-id, optionally IP) it lists every quota key
with the value the brokers enforce, its precedence level (Kafka's eight
levels, :mod:`kquota.domain.resolver`), the entity that set it, the resource
that owns it (or "unmanaged"), who shares the limit, and every
lower-precedence value it overrides.

Sources: the live brokers (``--bootstrap-server``/``--cluster``; owners
need ``--cluster``, which reads the resources and the ownership ledger), or
manifests offline (``-f`` alone). With both, ``-f`` manifests are laid over
the cluster's resources, as ``kquota plan`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kquota.cli import common
from kquota.cli.brokers import read_callbacks, read_live
from kquota.cli.claims import load_manifests, overlay, select, topics_of
from kquota.cli.connect import add_connection_args, has_connection, load_target
from kquota.cli.sources import bind_default_cluster
from kquota.cli.target import Quotas, TargetError
from kquota.cli.term import Cell, Term, safe, value_text
from kquota.domain.callback import CALLBACK_CONFIG, callback_summary
from kquota.domain.claims import ResourceClaim
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.explain import Candidate, KeyExplanation, Owner, Ownership, explain, owner_of, shared_by
from kquota.domain.plan import Protection
from kquota.domain.resolver import LEVEL_NAMES, Connection
from kquota.domain.tenancy import Grant

EPILOG: Final = """\
examples:
  kquota explain --user alice --client-id billing --cluster prod
  kquota explain --user 'CN=app,OU=payments' --client-id app --bootstrap-server kafka:9092
  kquota explain --user alice --client-id billing -f quotas/          # offline, from manifests
  kquota explain --user ANONYMOUS --client-id app --ip 192.0.2.10 --cluster prod -o json

--user is the principal name the brokers see: the SASL username, the TLS principal after
ssl.principal.mapping.rules, or ANONYMOUS on a PLAINTEXT listener.
"""


def _label(key: QuotaKey, owner: Owner) -> str:
    return owner.label(lambda v: value_text(key, v))


def overrides_text(e: KeyExplanation) -> str:
    if not e.overrides:
        return "-"
    return "; ".join(
        f"{c.entity.path()}={value_text(e.key, c.value)} (level {c.level}, {_label(e.key, c.owner)})"
        for c in e.overrides
    )


def render_text(title: str, rows: Sequence[KeyExplanation], notes: Sequence[str], t: Term) -> None:
    t.write(safe(title), "bold")
    t.write()
    table: list[list[Cell]] = []
    for e in rows:
        if e.winner is None:
            table.append([e.key.value, ("unlimited", "dim"), "-", "-", "-", "-", "-"])
            continue
        owner = e.winner.owner
        style = {Ownership.UNMANAGED: "yellow", Ownership.PENDING: "yellow", Ownership.ORPHANED: "red"}.get(
            owner.state, ""
        )
        table.append(
            [
                e.key.value,
                (value_text(e.key, e.winner.value), "bold"),
                str(e.winner.level),
                e.winner.entity.path(),
                (_label(e.key, owner), style),
                shared_by(e),
                overrides_text(e),
            ]
        )
    t.table(["KEY", "VALUE", "LEVEL", "ENTITY", "SOURCE", "SHARED BY", "OVERRIDES"], table)
    common.bullet_list(t, "Notes:", notes)
    t.write()
    levels = ", ".join(f"{n} {name}" for n, name in LEVEL_NAMES.items())
    t.write(f"Levels, most specific first (each key separately): {levels}.", "dim")


def _owner_json(owner: Owner) -> dict[str, Any]:
    return {"state": owner.state.value, "resource": common.ref_json(owner.resource), "label": owner.label()}


def _candidate_json(c: Candidate) -> dict[str, Any]:
    return {
        "level": c.level,
        "entity": common.entity_json(c.entity),
        "value": common.json_number(c.value),
        "owner": _owner_json(c.owner),
    }


def to_json(
    connection: Connection, source: str, rows: Sequence[KeyExplanation], notes: Sequence[str]
) -> dict[str, Any]:
    return {
        "connection": {"user": connection.user, "clientId": connection.client_id, "ip": connection.ip},
        "source": source,
        "keys": [
            {
                "key": e.key.value,
                "value": common.json_number(e.winner.value) if e.winner else None,
                "unlimited": e.winner is None,
                "level": e.winner.level if e.winner else None,
                "levelName": e.level_name,
                "entity": common.entity_json(e.winner.entity) if e.winner else None,
                "owner": _owner_json(e.winner.owner) if e.winner else None,
                "bucket": ({"user": e.bucket[0], "clientId": e.bucket[1]} if e.bucket else None),
                "sharedBy": shared_by(e),
                "overrides": [_candidate_json(c) for c in e.overrides],
            }
            for e in rows
        ],
        "notes": list(notes),
    }


def explain_entries(
    values: Quotas,
    claimants: Sequence[ResourceClaim],
    cluster: str | None,
    connection: Connection,
    ledger: Quotas | None,
    live: bool,
    protection: Protection | None = None,
    grants: tuple[Grant, ...] | None = None,
    leaders: Mapping[str, Mapping[int, int]] | None = None,
) -> tuple[list[KeyExplanation], list[str]]:
    """The explanation of live ``values``, or (``live`` False) of the claimants' desired state.

    ``leaders`` is the live leader layout of the topics TopicQuotas name; None offline.
    """
    selection = select(claimants, cluster, grants, protection or Protection(), leaders)
    claims, notes = selection.claims, selection.notes
    quotas: Quotas = values if live else {e: dict(v) for e, v in claims.desired.items()}

    def owner(entity: Entity, key: QuotaKey, value: float) -> Owner:
        strimzi = protection.strimzi if protection is not None else None
        return owner_of(
            entity, key, value if live else None, claims.holders, claims.desired, ledger, strimzi, selection.keep
        )

    return explain(quotas, connection, owner), notes


def callback_note(callbacks: Mapping[int, str] | None, honoured: bool, connection: Connection) -> str | None:
    """What the brokers' client quota callback means for this explanation (None: nothing to say)."""
    if connection.user == "" and connection.client_id == "" and connection.ip is not None and callbacks is not None:
        return None  # an IP's connection rate is not the callback's
    if callbacks is None:
        return f"could not read {CALLBACK_CONFIG} from the brokers (DescribeConfigs refused): if one is set, it decides"
    if not callbacks:
        return None
    if honoured:
        return f"{callback_summary(callbacks)}; the KafkaCluster says it enforces the entity quotas shown"
    return (
        f"{callback_summary(callbacks)}: that class, not Kafka's precedence rules, decides the produce, fetch, "
        "request and controller mutation quotas this client gets; the values below are what the brokers store, "
        "and may not be enforced"
    )


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "explain",
        help="show the effective quota of a client, key by key, and who set it",
        description=common.paragraph(
            "For a client connection (user, client-id, optionally IP): the quota the brokers enforce "
            "for each key, its precedence level, the entity and resource that set it (or 'unmanaged'), and "
            "what it overrides. From the live brokers, or offline from manifests with -f alone."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    who = p.add_argument_group("connection to explain")
    who.add_argument("--user", metavar="PRINCIPAL", help="the user principal name (required unless only --ip)")
    who.add_argument("--client-id", default="", metavar="ID", help="the client.id (default: none)")
    who.add_argument("--ip", metavar="ADDRESS", help="the client's IP address, for connection_creation_rate")
    p.add_argument("-f", "--filename", action="append", metavar="PATH", help="manifests: file, directory or -")
    p.add_argument("-R", "--recursive", action="store_true", help="read directories recursively")
    p.add_argument("-n", "--namespace", default="default", help="namespace of manifests that name none")
    add_connection_args(p, "KafkaCluster to read live quotas, resources and the ownership ledger from")
    common.add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.user is None and args.ip is None:
        return common.error("give --user (the principal; ANONYMOUS on a PLAINTEXT listener), or --ip")
    if args.ip is not None:
        try:
            ipaddress.ip_address(args.ip)
        except ValueError:
            return common.error(f"--ip {args.ip!r} is not an IP address")
    if not args.filename and not has_connection(args):
        return common.error("give -f PATH to explain manifests, or --bootstrap-server / --cluster for live quotas")
    connection = Connection(args.user or "", args.client_id if args.user is not None else "", args.ip)
    manifests = load_manifests(args)
    if manifests is None:
        return common.ERROR
    notes: list[str] = []
    if has_connection(args):
        try:
            target = asyncio.run(load_target(args))
            manifests = bind_default_cluster(manifests, target.default_cluster)
            live, leaders = read_live(target.connection, topics_of(manifests, target.claimants))
        except TargetError as exc:
            return common.error(str(exc))
        known = target.claimants is not None
        claimants = overlay(target.claimants or [], manifests) if known else manifests
        rows, notes = explain_entries(
            live, claimants, target.cluster, connection, target.ledger, True, target.protection, target.grants, leaders
        )
        source = f"live quotas of {target.describe()}"
        callback = callback_note(read_callbacks(target.connection), target.callback_honoured, connection)
        if callback:
            notes.insert(0, callback)
        if target.ledger is None:
            notes.insert(0, "no --cluster: owners of values the given manifests do not set are unknown")
    else:
        rows, notes = explain_entries({}, manifests, None, connection, None, False)
        source = "manifests (offline)"
    who = []
    if args.user is not None:
        who.append(f"user {args.user!r}")
        who.append(f"client-id {args.client_id!r}" if args.client_id else "no client-id")
    if args.ip is not None:
        who.append(f"ip {args.ip}")
    if args.output == "json":
        common.dump_json(to_json(connection, source, rows, notes))
    else:
        render_text(f"Effective quotas for {', '.join(who)}: {source}", rows, notes, common.term(args))
    return common.OK
