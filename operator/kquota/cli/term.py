"""Terminal output for the kquota commands: aligned tables, colour only where it helps, safe text.

Colour is used on a terminal and never when the output is piped or
``NO_COLOR`` is set (https://no-color.org); ``--color always|never`` and
``FORCE_COLOR`` override. Tables are the same aligned columns either way,
so what a person sees and what a script greps are one format.

Principal names come from the brokers and can hold anything, including
escape sequences and newlines: :func:`safe` shows such characters escaped
(``\\x1b``), so a hostile client-id can neither spoof a line of output nor
drive the terminal.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Sequence
from typing import Final, TextIO

from kquota.domain.entities import INTEGER_KEYS, QuotaKey
from kquota.domain.explain import number
from kquota.domain.manifests import quantity, whole

COLOR_CHOICES: Final = ("auto", "always", "never")

_CODES: Final = {
    "bold": "1",
    "dim": "2",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
}

#: A table cell: text, or (text, style) where style is a space-separated list of _CODES names.
Cell = str | tuple[str, str]


def wants_color(stream: TextIO, mode: str = "auto") -> bool:
    if mode == "always":
        return True
    if mode == "never":
        return False
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"


def safe(text: str) -> str:
    """``text`` with every non-printable character escaped, so it shows as what it is."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def width(text: str) -> int:
    """Columns ``text`` takes on a terminal (wide East Asian characters take two, combining marks none)."""
    total = 0
    for ch in text:
        if unicodedata.combining(ch):
            continue
        total += 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1
    return total


class Term:
    """Where a command writes, and whether it may use colour there."""

    def __init__(self, stream: TextIO, color: bool) -> None:
        self.stream = stream
        self.color = color

    def paint(self, text: str, style: str) -> str:
        if not self.color or not style:
            return text
        codes = ";".join(_CODES[s] for s in style.split())
        return f"\x1b[{codes}m{text}\x1b[0m"

    def write(self, text: str = "", style: str = "") -> None:
        self.stream.write(self.paint(text, style) + "\n")

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[Cell]]) -> None:
        """Columns aligned to their widest cell; the last column is not padded."""
        cells = [[(c, "") if isinstance(c, str) else c for c in row] for row in rows]
        cells = [[(safe(text), style) for text, style in row] for row in cells]
        widths = [width(h) for h in headers]
        for row in cells:
            for i, (text, _) in enumerate(row):
                widths[i] = max(widths[i], width(text))
        last = len(headers) - 1
        self.write("  ".join(h.ljust(widths[i]) if i < last else h for i, h in enumerate(headers)).rstrip(), "bold")
        for row in cells:
            parts = []
            for i, (text, style) in enumerate(row):
                pad = "" if i == last else " " * (widths[i] - width(text))
                parts.append(self.paint(text, style) + pad)
            self.stream.write("  ".join(parts).rstrip() + "\n")


def value_text(key: QuotaKey, value: float | None) -> str:
    """A quota value for people: byte rates as exact quantities (10Mi), other keys as numbers."""
    if value is None:
        return "-"
    if key in INTEGER_KEYS and key is not QuotaKey.CONNECTION_CREATION_RATE:
        n = whole(value)
        if n is not None:
            return str(quantity(n))
    return number(value)
