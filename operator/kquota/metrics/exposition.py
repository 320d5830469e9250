"""The Prometheus text exposition format (and OpenMetrics' sample lines): a page of metrics -> samples."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Sample:
    """One line of the Prometheus text format."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp_ms: int | None = None


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES: Final = {"\\": "\\", '"': '"', "n": "\n"}


def parse_float(text: str) -> float:
    """A sample value as Prometheus writes it: ``1.5``, ``1.0E5`` (Java), ``NaN``, ``+Inf``, ``-Inf``."""
    # Python's float() also takes "1_000" and surrounding blanks, which Prometheus does not.
    if not text or "_" in text or text != text.strip():
        raise ValueError(f"invalid sample value {text!r}")
    return float(text)


def _parse_labels(line: str, i: int) -> tuple[dict[str, str], int]:
    """Labels from ``line[i]`` (just after ``{``) to the closing ``}``; returns them and the index after it."""
    labels: dict[str, str] = {}
    n = len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == "}":
            return labels, i + 1
        m = _LABEL.match(line, i)
        if m is None:
            raise ValueError(f"label name expected at column {i + 1}")
        name = m.group()
        i = m.end()
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != "=":
            raise ValueError(f"expected = after label {name}")
        i += 1
        while i < n and line[i] in " \t":
            i += 1
        if i >= n or line[i] != '"':
            raise ValueError(f"expected a quoted value for label {name}")
        i += 1
        buf: list[str] = []
        while True:
            if i >= n:
                raise ValueError(f"unterminated value of label {name}")
            c = line[i]
            if c == "\\" and i + 1 < n:
                nxt = line[i + 1]
                # An unknown escape is kept as written rather than losing the line.
                buf.append(_ESCAPES.get(nxt, "\\" + nxt))
                i += 2
            elif c == '"':
                i += 1
                break
            else:
                buf.append(c)
                i += 1
        labels[name] = "".join(buf)
        while i < n and line[i] in " \t":
            i += 1
        if i < n and line[i] == ",":
            i += 1
            continue
        if i < n and line[i] == "}":
            return labels, i + 1
        raise ValueError(f"expected , or }} after label {name}")


def parse_line(line: str) -> Sample:
    """One sample line: ``name{label="value",...} value [timestamp]``; raises ValueError if malformed."""
    m = _NAME.match(line)
    if m is None:
        raise ValueError("metric name expected")
    name = m.group()
    i = m.end()
    labels: dict[str, str] = {}
    j = i
    while j < len(line) and line[j] in " \t":
        j += 1
    if j < len(line) and line[j] == "{":
        labels, i = _parse_labels(line, j + 1)
    rest = line[i:].split()
    if not rest or (i < len(line) and line[i] not in " \t"):
        raise ValueError("value expected after the metric name and labels")
    value = parse_float(rest[0])
    ts: int | None = None
    # OpenMetrics may follow with an exemplar ("# {...} 1.0"); it is not needed here.
    if len(rest) > 1 and not rest[1].startswith("#"):
        stamp = rest[1]
        ts = int(stamp) if re.fullmatch(r"-?[0-9]+", stamp) else int(parse_float(stamp) * 1000)
    return Sample(name, labels, value, ts)


def parse_text(text: str, prefixes: Sequence[str] | None = None, strict: bool = False) -> list[Sample]:
    """Samples in a Prometheus text-format (or OpenMetrics) page.

    ``prefixes`` keeps only metrics whose names start with one of them; other
    lines are skipped before they are parsed (a broker page is mostly JVM
    metrics). Comments (``# HELP``, ``# TYPE``, ``# EOF``) and blank lines are
    skipped. A malformed line is skipped too, unless ``strict``: one odd
    metric must not hide the quota metrics next to it.
    """
    out: list[Sample] = []
    wanted = tuple(prefixes) if prefixes is not None else None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if wanted is not None and not line.startswith(wanted):
            continue
        try:
            out.append(parse_line(line))
        except (ValueError, IndexError) as exc:
            if strict:
                raise ValueError(f"line {number}: {exc}: {line[:200]!r}") from exc
            log.debug("skipping malformed metrics line %d: %s", number, exc)
    return out
