"""Terminal output: colour only on a terminal, aligned tables, hostile names shown escaped."""

from __future__ import annotations

import io

import pytest

from kquota.cli.term import Term, safe, value_text, wants_color, width
from kquota.domain.entities import QuotaKey


class Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    ("tty", "mode", "env", "expected"),
    [
        pytest.param(True, "auto", {}, True, id="a terminal gets colour"),
        pytest.param(False, "auto", {}, False, id="a pipe gets plain text"),
        pytest.param(True, "auto", {"NO_COLOR": "1"}, False, id="NO_COLOR turns it off"),
        pytest.param(True, "auto", {"NO_COLOR": ""}, True, id="an empty NO_COLOR does not count"),
        pytest.param(True, "auto", {"TERM": "dumb"}, False, id="a dumb terminal gets none"),
        pytest.param(False, "auto", {"FORCE_COLOR": "1"}, True, id="FORCE_COLOR forces it"),
        pytest.param(False, "always", {"NO_COLOR": "1"}, True, id="--color always wins"),
        pytest.param(True, "never", {"FORCE_COLOR": "1"}, False, id="--color never wins"),
    ],
)
def test_wants_color(
    tty: bool, mode: str, env: dict[str, str], expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR", "TERM"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert wants_color(Stream(tty), mode) is expected


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("alice", "alice"),
        ("CN=Ålice,OU=x", "CN=Ålice,OU=x"),
        ("\x1b[31mred", "\\x1b[31mred"),
        ("two\nlines", "two\\nlines"),
        ("zero\u200bwidth", "zero\\u200bwidth"),
        ("bell\x07", "bell\\x07"),
    ],
)
def test_safe_escapes_what_a_terminal_would_act_on(text: str, shown: str) -> None:
    assert safe(text) == shown


def test_width_counts_terminal_columns() -> None:
    assert width("abc") == 3
    assert width("日本") == 4
    assert width("e\u0301") == 1


def test_table_aligns_wide_and_coloured_cells() -> None:
    out = Stream(True)
    t = Term(out, color=True)
    t.table(["NAME", "VALUE"], [[("日本", "red"), "1"], ["ab", ("2", "green")]])
    lines = out.getvalue().splitlines()
    assert lines[0] == "\x1b[1mNAME  VALUE\x1b[0m"
    assert lines[1] == "\x1b[31m日本\x1b[0m  1"
    assert lines[2] == "ab    \x1b[32m2\x1b[0m"

    plain = Stream(False)
    Term(plain, color=False).table(["NAME", "VALUE"], [["\x1b[2J", "1"]])
    assert plain.getvalue().splitlines() == ["NAME     VALUE", "\\x1b[2J  1"]


@pytest.mark.parametrize(
    ("key", "value", "text"),
    [
        (QuotaKey.PRODUCER_BYTE_RATE, 10485760.0, "10Mi"),
        (QuotaKey.CONSUMER_BYTE_RATE, 1536.0, "1536"),
        (QuotaKey.CONSUMER_BYTE_RATE, 1.5, "1.5"),
        (QuotaKey.REQUEST_PERCENTAGE, 1024.0, "1024"),
        (QuotaKey.REQUEST_PERCENTAGE, 33.3, "33.3"),
        (QuotaKey.CONNECTION_CREATION_RATE, 2048.0, "2048"),
        (QuotaKey.CONTROLLER_MUTATION_RATE, None, "-"),
        # Past what a manifest can carry (2^53-1) still the exact integer the broker holds, never 1e+20.
        (QuotaKey.PRODUCER_BYTE_RATE, 1e20, "100000000000000000000"),
        (QuotaKey.REQUEST_PERCENTAGE, 1e20, "100000000000000000000"),
        (QuotaKey.PRODUCER_BYTE_RATE, 20971520.5, "20971520.5"),
        (QuotaKey.CONTROLLER_MUTATION_RATE, 1234567.891, "1234567.891"),
        (QuotaKey.CONTROLLER_MUTATION_RATE, 1e-7, "1e-07"),
    ],
)
def test_value_text(key: QuotaKey, value: float | None, text: str) -> None:
    assert value_text(key, value) == text
