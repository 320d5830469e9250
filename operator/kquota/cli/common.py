"""Pieces every kquota subcommand shares: exit codes, output flags, errors, JSON shapes."""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import fnmatch
import json
import math
import os
import sys
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final, TextIO

from kquota.cli.term import COLOR_CHOICES, Term, safe, wants_color
from kquota.domain.entities import Entity
from kquota.domain.plan import ResourceRef

#: Exit codes (plan's follow Terraform's -detailed-exitcode: 0 nothing to do, 1 error, 2 changes; and
#: 3 held, 4 throttles).
OK: Final = 0
ERROR: Final = 1
CHANGES: Final = 2
#: ``kquota plan``: removals the mass-removal guard will hold until the KafkaCluster approves them.
HELD: Final = 3
#: ``kquota plan --impact``: changes that throttle an entity more than the threshold allows.
THROTTLES: Final = 4


def paragraph(text: str) -> str:
    """A --help description wrapped for a terminal (the raw formatter keeps the examples' layout)."""
    return textwrap.fill(text, width=100)


def add_output_args(
    parser: argparse.ArgumentParser, json_output: bool = True, formats: tuple[str, ...] = ("text", "json")
) -> None:
    group = parser.add_argument_group("output")
    if json_output:
        # --format is the same flag: `kquota plan --format markdown` reads as the pull-request step it is.
        names = ("-o", "--output", "--format") if "markdown" in formats else ("-o", "--output")
        group.add_argument(
            *names, dest="output", choices=formats, default="text", help="output format (default %(default)s)"
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


def note(message: str) -> None:
    """Something the user should know about the output, on stderr (so stdout stays manifests or JSON)."""
    err = Term(sys.stderr, wants_color(sys.stderr))
    err.write(f"kquota: {err.paint('note', 'cyan bold')}: {safe(message)}")


def entity_json(entity: Entity) -> dict[str, Any]:
    """An entity for machines: its path and its wire parts (``null`` for a default part)."""
    return {"path": entity.path(), "parts": entity.parts()}


def ref_json(ref: ResourceRef | None) -> dict[str, str] | None:
    if ref is None:
        return None
    return {"kind": ref.kind, "namespace": ref.namespace, "name": ref.name}


def json_number(value: float | None) -> int | float | None:
    """A quota value for JSON: a whole number as an integer (``20971520``, not ``20971520.0``).

    Kafka keeps every quota as a double, so kquota holds them as floats; a
    consumer of ``-o json`` must still see the integer the manifest set. Any
    finite whole double converts to int exactly; other values stay floats,
    which ``json`` writes in their shortest exact form.
    """
    if value is None:
        return None
    return int(value) if math.isfinite(value) and float(value).is_integer() else float(value)


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


class _PipeGuard:
    """A text stream that goes quiet once its reader has gone (``kquota plan | head``).

    Python ignores SIGPIPE, so a write to a closed pipe raises
    BrokenPipeError from deep inside a table. Here the first such error
    points the file descriptor at /dev/null (so the interpreter's final flush
    of anything still buffered succeeds) and later writes are dropped: the
    command runs to its end and exits with the code it would have had.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._silence()
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._silence()

    def _silence(self) -> None:
        self.broken = True
        # Streams without a descriptor (io.StringIO in tests) cannot break; the guard is enough for them.
        with contextlib.suppress(OSError, ValueError, AttributeError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self._stream.fileno())
            os.close(devnull)

    def __getattr__(self, name: str) -> Any:
        # isatty, fileno, encoding, buffer...: the wrapped stream's.
        return getattr(self._stream, name)


@contextlib.contextmanager
def quiet_on_closed_pipe() -> Iterator[None]:
    """Within: stdout and stderr tolerate a reader that went away (see :class:`_PipeGuard`)."""
    saved = sys.stdout, sys.stderr
    out, err = _PipeGuard(sys.stdout), _PipeGuard(sys.stderr)
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        # Also on SystemExit (--help): what is still buffered meets the closed pipe here, not at exit.
        out.flush()
        err.flush()
        sys.stdout, sys.stderr = saved
