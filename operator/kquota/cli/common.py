"""Pieces every kquota subcommand shares: exit codes, output flags, errors, JSON shapes."""

from __future__ import annotations

import argparse
import datetime as dt
import fnmatch
import json
import sys
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any, Final, TextIO

from kquota.cli.term import COLOR_CHOICES, Term, safe, wants_color
from kquota.domain.entities import Entity
from kquota.domain.plan import ResourceRef

#: Exit codes (plan's follow Terraform's -detailed-exitcode: 0 nothing to do, 1 error, 2 changes).
OK: Final = 0
ERROR: Final = 1
CHANGES: Final = 2


def paragraph(text: str) -> str:
    """A --help description wrapped for a terminal (the raw formatter keeps the examples' layout)."""
    return textwrap.fill(text, width=100)


def add_output_args(parser: argparse.ArgumentParser, json_output: bool = True) -> None:
    group = parser.add_argument_group("output")
    if json_output:
        group.add_argument(
            "-o", "--output", choices=("text", "json"), default="text", help="output format (default %(default)s)"
        )
    group.add_argument(
        "--color",
        choices=COLOR_CHOICES,
        default="auto",
        help="colour: auto (on a terminal unless NO_COLOR is set), always, never",
    )


def add_entity_filter(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--entity",
        action="append",
        metavar="GLOB",
        help="only entities whose path matches, e.g. 'users/team-a-*' or 'users/<default>' (repeatable)",
    )


def entity_selected(entity: Entity, globs: Sequence[str] | None) -> bool:
    return not globs or any(fnmatch.fnmatchcase(entity.path(), g) for g in globs)


def term(args: argparse.Namespace, stream: TextIO | None = None) -> Term:
    out = stream or sys.stdout
    return Term(out, wants_color(out, getattr(args, "color", "auto")))


def error(message: str) -> int:
    """Report an error on stderr the way argparse does; returns the error exit code."""
    err = Term(sys.stderr, wants_color(sys.stderr))
    err.write(f"kquota: {err.paint('error', 'red bold')}: {safe(message)}")
    return ERROR


def warn(message: str) -> None:
    err = Term(sys.stderr, wants_color(sys.stderr))
    err.write(f"kquota: {err.paint('warning', 'yellow bold')}: {safe(message)}")


def entity_json(entity: Entity) -> dict[str, Any]:
    """An entity for machines: its path and its wire parts (``null`` for a default part)."""
    return {"path": entity.path(), "parts": entity.parts()}


def ref_json(ref: ResourceRef | None) -> dict[str, str] | None:
    if ref is None:
        return None
    return {"kind": ref.kind, "namespace": ref.namespace, "name": ref.name}


def dump_json(doc: Any, stream: TextIO | None = None) -> None:
    out = stream or sys.stdout
    out.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def bullet_list(t: Term, title: str, lines: Iterable[str]) -> None:
    items = list(lines)
    if not items:
        return
    t.write()
    t.write(title, "bold")
    for line in items:
        t.write(f"  - {safe(line)}")


def now_rfc3339() -> str:
    """Now as a creationTimestamp: manifests not yet applied are the youngest resources."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
