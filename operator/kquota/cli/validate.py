"""``kquota validate``: offline validation with the messages admission gives.

Every kquota document under the given paths is checked by
:func:`kquota.api.parse_manifest`, the same rules the CRDs' schemas and CEL
rules enforce at the API server, phrased the way the API server phrases them
(``ClientQuota "x" is invalid: spec.quota.producerByteRate: Invalid value:
...``). A pre-commit hook or a CI step catches a mistake before a GitOps sync
does. Documents of other API groups are skipped; the same kind, namespace
and name defined twice is an error.
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from kquota.cli import common
from kquota.cli.sources import Checked, SourceError, read_documents, validate_documents
from kquota.cli.term import Term, safe

EPILOG: Final = """\
examples:
  kquota validate -f quotas/
  kquota validate -f quotas/ -R -o json
  kustomize build overlays/prod | kquota validate -f -

exit codes: 0 every kquota document is valid, 1 otherwise.
"""


def _name(c: Checked) -> str:
    if c.resource is None:
        return ""
    meta = c.resource.metadata
    return f"{c.resource.crd.kind} {meta.namespace + '/' if meta.namespace else ''}{meta.name}"


def render_text(checked: list[Checked], skipped: int, t: Term, quiet: bool = False) -> None:
    for c in checked:
        if c.error is None and quiet:
            continue
        if c.error is None:
            t.write(f"{t.paint('valid  ', 'green')} {safe(_name(c))}  ({safe(c.doc.origin)})")
        else:
            t.write(f"{t.paint('invalid', 'red bold')} {safe(c.doc.origin)}: {safe(str(c.error))}")
    bad = sum(1 for c in checked if c.error is not None)
    summary = f"{len(checked) - bad} valid, {bad} invalid"
    if skipped:
        summary += f", {skipped} skipped (not kquota resources)"
    t.write(summary + ".", "red bold" if bad else "bold")


def to_json(checked: list[Checked], skipped: int) -> dict[str, Any]:
    return {
        "valid": all(c.error is None for c in checked),
        "skipped": skipped,
        "documents": [
            {
                "origin": c.doc.origin,
                "valid": c.error is None,
                "kind": c.resource.crd.kind if c.resource else (c.error.kind if c.error else None),
                "name": c.resource.metadata.name if c.resource else (c.error.name if c.error else None),
                "message": str(c.error) if c.error else None,
                "problems": c.error.problems if c.error else [],
            }
            for c in checked
        ],
    }


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "validate",
        help="validate manifests offline, with the API server's messages",
        description=common.paragraph(
            "Check kquota manifests offline with the same rules and messages as admission "
            "(schema and CEL rules of the CRDs). Other documents are skipped."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "-f", "--filename", action="append", required=True, metavar="PATH", help="file, directory or - (repeatable)"
    )
    p.add_argument("-R", "--recursive", action="store_true", help="read directories recursively")
    p.add_argument("-n", "--namespace", default="default", help="namespace of manifests that name none")
    p.add_argument("-q", "--quiet", action="store_true", help="print only invalid documents")
    common.add_output_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        checked, skipped = validate_documents(read_documents(args.filename, args.recursive), args.namespace)
    except SourceError as exc:
        return common.error(str(exc))
    if args.output == "json":
        common.dump_json(to_json(checked, skipped))
    else:
        render_text(checked, skipped, common.term(args), args.quiet)
    return common.ERROR if any(c.error is not None for c in checked) else common.OK
