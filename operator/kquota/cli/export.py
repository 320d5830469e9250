"""``kquota export``: every live quota as manifests, the migration path from hand-run kafka-configs.

One file per entity (``--out DIR``) or one multi-document YAML stream on
stdout. The manifests are built by :mod:`kquota.domain.manifests`, which
keeps values exact, so ``kquota export`` -> ``kubectl apply`` -> the
operator takes the keys over -> ``kquota plan`` shows no change.

Only what kquota does not manage yet, by default: with ``--cluster`` the
operator's ownership ledger is read, and keys recorded there (kquota set
them for some resource) are left out, since a second resource claiming them
would be a conflict, not a migration. ``--all`` exports them too. Without a
readable ledger everything is exported, and a note on stderr says so.

YAML is written so that every reader gets the same values back: strings a
YAML 1.2 parser (kubectl's) would read as numbers or booleans, such as a
client-id ``1e3`` or ``0x10``, are quoted even where PyYAML (YAML 1.1) would
not need it.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from kquota.cli import common
from kquota.cli.brokers import read_live
from kquota.cli.connect import add_connection_args, load_target
from kquota.cli.target import Quotas, Target, TargetError
from kquota.domain.manifests import ExportedEntity, export_manifests

EPILOG: Final = """\
examples:
  kquota export --bootstrap-server kafka:9092 --command-config admin.properties --out quotas/ --namespace kafka-quotas
  kquota export --cluster prod --entity 'users/*' > users.yaml
  kquota export --cluster prod --out quotas/ && kubectl apply -f quotas/ && kquota plan -f quotas/ --cluster prod
  kquota export --cluster prod --all > everything.yaml      # also the keys kquota already manages

With --cluster, keys kquota already manages (its ownership ledger) are left out unless --all is given.
Each entity gets one file, <name>.yaml, holding a ClientQuota and, for controller_mutation_rate, a
ControllerMutationQuota. Names are DNS-1123 safe (principals that are not are slugged and hashed);
the real principal is in spec.entity.
"""

# Plain scalars that YAML 1.2 (core schema) or YAML 1.1 resolve to something other than a string.
_AMBIGUOUS: Final = re.compile(
    r"""^(?:
        [-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?   # numbers, 1e3, 1_000
      | [-+]?\.(?:inf|Inf|INF) | \.(?:nan|NaN|NAN)
      | 0x[0-9a-fA-F_]+ | 0o[0-7_]+ | 0b[01_]+
      | [0-9]+(?::[0-5]?[0-9])+(?:\.[0-9_]*)?                             # sexagesimal (1.1)
      | ~ | null | Null | NULL
      | y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF
    )$""",
    re.X,
)


class _Dumper(yaml.SafeDumper):
    pass


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if _AMBIGUOUS.match(value) else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def to_yaml(docs: Sequence[dict[str, Any]]) -> str:
    """Manifests as one YAML stream (``---`` between documents)."""
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, allow_unicode=True, explicit_start=True, width=1000)


def unmanaged(live: Quotas, ledger: Quotas) -> tuple[Quotas, int]:
    """The keys of ``live`` that ``ledger`` does not record, and how many keys were left out.

    A key is left out whatever its live value: a value changed by hand on a
    key kquota owns is drift, which the operator restores, not a quota to adopt.
    """
    out: Quotas = {}
    left_out = 0
    for entity, values in live.items():
        owned = ledger.get(entity, {})
        kept = {k: v for k, v in values.items() if k not in owned}
        left_out += len(values) - len(kept)
        if kept:
            out[entity] = kept
    return out, left_out


def scope(live: Quotas, target: Target, mode: str | None) -> Quotas:
    """What to export: ``mode`` is "all", "unmanaged" or None (unmanaged when the ledger is readable).

    Raises TargetError for --unmanaged-only without a readable ledger; prints
    a note for each thing the user should know about the choice.
    """
    if mode == "all":
        return live
    if target.ledger is None:
        why = target.ledger_problem or "no --cluster, so no ownership ledger to read"
        if mode == "unmanaged":
            raise TargetError(f"--unmanaged-only needs kquota's ownership ledger: {why}")
        common.note(f"exporting every quota, including any kquota already manages: {why}")
        return live
    selected, left_out = unmanaged(live, target.ledger)
    if left_out:
        common.note(
            f"left out {common.plural(left_out, 'key')} kquota already manages (in its ownership ledger, "
            f"namespace {target.ledger_namespace}); --all exports them too"
        )
    return selected


def write_files(exported: Sequence[ExportedEntity], out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for item in exported:
        if item.manifests:
            (out / f"{item.name}.yaml").write_text(to_yaml(item.manifests), encoding="utf-8")
            written += 1
    return written


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "export",
        help="write every live quota as ClientQuota / ControllerMutationQuota manifests",
        description=common.paragraph(
            "Read every quota on the brokers and write manifests that set exactly those values: "
            "the migration path from hand-run kafka-configs to kquota."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", type=Path, metavar="DIR", help="write one file per entity here (default: stdout)")
    p.add_argument("-n", "--namespace", help="metadata.namespace of the manifests (default: none)")
    p.add_argument("--cluster-ref", metavar="NAME", help="spec.clusterRef of the manifests (default: --cluster)")
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--unmanaged-only",
        dest="scope",
        action="store_const",
        const="unmanaged",
        help="only keys kquota does not manage (not in its ownership ledger); the default with a readable ledger",
    )
    which.add_argument(
        "--all",
        dest="scope",
        action="store_const",
        const="all",
        help="every live quota, also the keys kquota already manages",
    )
    common.add_entity_filter(p)
    add_connection_args(p, "KafkaCluster to export from (connection, credentials and ownership ledger via kubeconfig)")
    common.add_output_args(p, json_output=False)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        target = asyncio.run(load_target(args, with_claimants=False, need_ledger=False))
        live, _ = read_live(target.connection)
        selected = scope({e: v for e, v in live.items() if common.entity_selected(e, args.entity)}, target, args.scope)
    except TargetError as exc:
        return common.error(str(exc))
    exported = export_manifests(selected, args.namespace, args.cluster_ref or target.cluster)
    problems = [p for item in exported for p in item.problems]
    for problem in problems:
        common.warn(problem)
    if args.out is not None:
        try:
            written = write_files(exported, args.out)
        except OSError as exc:
            return common.error(f"{args.out}: {exc.strerror or exc}")
        t = common.term(args, sys.stderr)
        t.write(f"wrote {common.plural(written, 'file')} to {args.out} from {target.describe()}", "green")
    else:
        docs = [doc for item in exported for doc in item.manifests]
        if docs:
            sys.stdout.write(to_yaml(docs))
    if problems:
        return common.error(f"{common.plural(len(problems), 'quota')} could not be exported (see the warnings)")
    return common.OK
