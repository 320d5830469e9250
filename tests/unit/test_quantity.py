"""Kubernetes quantities parsed offline exactly as the API server parses them, and byte-rate rules.

Expected values were checked against k8s.io/apimachinery v0.35.4's
``resource.ParseQuantity`` (the parser the CEL ``quantity()`` library uses) and,
for the byte-rate rules, against a real kube-apiserver 1.35 with kquota's CRDs.
"""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from kquota.api.quantity import (
    BYTE_RATE_FORMAT,
    BYTE_RATE_FRACTION,
    BYTE_RATE_POSITIVE,
    BYTE_RATE_RULES,
    BYTE_RATE_TOO_LARGE,
    MAX_EXACT_INTEGER,
    QuantityError,
    byte_rate,
    is_quantity,
    parse_quantity,
)

PARSES = [
    pytest.param("10Mi", Decimal(10 * 2**20), id="a binary suffix multiplies by a power of two"),
    pytest.param("1M", Decimal(10**6), id="a decimal suffix multiplies by a power of ten"),
    pytest.param("1.5Mi", Decimal(1572864), id="a fraction with a binary suffix can be whole"),
    pytest.param("1.5M", Decimal(1500000), id="a fraction with a decimal suffix can be whole"),
    pytest.param("512Ki", Decimal(524288), id="Ki is 1024"),
    pytest.param("1k", Decimal(1000), id="lower-case k is kilo"),
    pytest.param("1G", Decimal(10**9), id="G is giga"),
    pytest.param("1T", Decimal(10**12), id="T is tera"),
    pytest.param("1P", Decimal(10**15), id="P is peta"),
    pytest.param("1E", Decimal(10**18), id="a lone E is exa, not an exponent"),
    pytest.param("1Gi", Decimal(2**30), id="Gi"),
    pytest.param("1Ti", Decimal(2**40), id="Ti"),
    pytest.param("1Pi", Decimal(2**50), id="Pi"),
    pytest.param("1e3", Decimal(1000), id="a lower-case exponent"),
    pytest.param("1E3", Decimal(1000), id="E followed by digits is an exponent"),
    pytest.param("1e+3", Decimal(1000), id="an exponent with a plus sign"),
    pytest.param("11e-1", Decimal("1.1"), id="a negative exponent makes a fraction"),
    pytest.param("0.5", Decimal("0.5"), id="a plain decimal fraction"),
    pytest.param("1000m", Decimal(1), id="milli units can add up to a whole number"),
    pytest.param("1500m", Decimal("1.5"), id="milli units"),
    pytest.param("5n", Decimal("5e-9"), id="nano units"),
    pytest.param("2u", Decimal("2e-6"), id="micro units"),
    pytest.param("+5", Decimal(5), id="a leading plus sign"),
    pytest.param("-10Mi", Decimal(-10 * 2**20), id="a leading minus sign"),
    pytest.param("007", Decimal(7), id="leading zeros are ignored"),
    pytest.param("1.", Decimal(1), id="a trailing point is allowed"),
    pytest.param(".5k", Decimal(500), id="a leading point is allowed"),
    pytest.param(".", Decimal(0), id="a lone point is zero"),
    pytest.param("+", Decimal(0), id="a lone sign is zero"),
    pytest.param("Mi", Decimal(0), id="a lone suffix is zero, whatever the library docs say"),
    pytest.param("e3", Decimal(0), id="a lone exponent is zero"),
    pytest.param(".Ti", Decimal(0), id="a point with a small binary suffix is zero"),
    pytest.param("0.9999999999", Decimal(1), id="digits beyond nano precision round up, away from zero"),
    pytest.param("1e-20", Decimal("1e-9"), id="a tiny positive value rounds up to one nano"),
    pytest.param("-1e-20", Decimal("-1e-9"), id="a tiny negative value rounds away from zero too"),
    pytest.param("9Ei", Decimal(2**63 - 1), id="binary values are capped at the largest int64"),
    pytest.param("8Ei", Decimal(2**63 - 1), id="8Ei is exactly 2^63, one above the cap"),
    pytest.param("1e99", Decimal("1e99"), id="decimal values are not capped"),
    pytest.param(
        "123456789012345678901234.5678901234",
        Decimal("123456789012345678901234.567890124"),
        id="long numbers keep every digit up to nano precision",
    ),
]


@pytest.mark.parametrize(("text", "value"), PARSES)
def test_parse_quantity(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value
    assert is_quantity(text)


NOT_QUANTITIES = [
    pytest.param("", id="the empty string"),
    pytest.param("NaN", id="NaN"),
    pytest.param("inf", id="inf"),
    pytest.param("Infinity", id="Infinity"),
    pytest.param("10K", id="upper-case K"),
    pytest.param("1,5M", id="a decimal comma"),
    pytest.param("1.1.M", id="two points"),
    pytest.param("0x10", id="hexadecimal"),
    pytest.param(" 1", id="leading space"),
    pytest.param("1 ", id="trailing space"),
    pytest.param("1i", id="i alone is no suffix"),
    pytest.param("0.1mi", id="mi is no suffix"),
    pytest.param("-3.01e-", id="an exponent without digits"),
    pytest.param("1Mi3", id="digits after a binary suffix"),
    pytest.param(".Pi", id="no digit and a suffix too large for the fast path"),
    pytest.param("\uff11", id="non-ASCII digits (a fullwidth one)"),
    pytest.param("1e99999999999999999999", id="an exponent beyond int64"),
]


@pytest.mark.parametrize("text", NOT_QUANTITIES)
def test_not_a_quantity(text: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(text)
    assert not is_quantity(text)


def test_huge_exponents_parse_quickly_as_exact_values() -> None:
    # apimachinery would build 10^2000000000 here; Decimal keeps coefficient and exponent apart.
    assert parse_quantity("1e2000000000") == Decimal("1e2000000000")
    assert parse_quantity("1e-2000000000") == Decimal("1e-9")


BYTE_RATES = [
    pytest.param(1, 1, id="one byte per second is the smallest quota"),
    pytest.param("10Mi", 10485760, id="a binary quantity"),
    pytest.param("1.5Mi", 1572864, id="a fractional binary quantity that is whole"),
    pytest.param("1000m", 1, id="milli units that add up to a byte"),
    pytest.param("0.9999999999", 1, id="a value that rounds up to a whole byte at nano precision"),
    pytest.param("+5", 5, id="a signed positive quantity"),
    pytest.param(MAX_EXACT_INTEGER, MAX_EXACT_INTEGER, id="2^53-1 as an integer"),
    pytest.param(str(MAX_EXACT_INTEGER), MAX_EXACT_INTEGER, id="2^53-1 as a string"),
    pytest.param("9.007199254740991e15", MAX_EXACT_INTEGER, id="2^53-1 in exponent form"),
    pytest.param("1Pi", 2**50, id="1Pi, which isInteger() would wrongly call fractional"),
    pytest.param("1e15", 10**15, id="an exponent below 100"),
]


@pytest.mark.parametrize(("value", "expected"), BYTE_RATES)
def test_byte_rate_accepts(value: int | str, expected: int) -> None:
    assert byte_rate(value) == expected


BAD_BYTE_RATES = [
    pytest.param(0, BYTE_RATE_POSITIVE, id="zero"),
    pytest.param(-1, BYTE_RATE_POSITIVE, id="a negative integer"),
    pytest.param("-10Mi", BYTE_RATE_POSITIVE, id="a negative quantity"),
    pytest.param(".", BYTE_RATE_POSITIVE, id="a quantity that is zero"),
    pytest.param("0.5", BYTE_RATE_FRACTION, id="half a byte"),
    pytest.param("1500m", BYTE_RATE_FRACTION, id="one and a half bytes in milli units"),
    pytest.param("1.0001Ki", BYTE_RATE_FRACTION, id="a binary quantity with a fraction of a byte"),
    pytest.param("4503599627370495.9", BYTE_RATE_FRACTION, id="a fraction a float64 would round away"),
    pytest.param("1.00000000001", BYTE_RATE_FRACTION, id="a fraction below nano precision rounds up, still a fraction"),
    pytest.param(MAX_EXACT_INTEGER + 1, BYTE_RATE_TOO_LARGE, id="2^53 as an integer"),
    pytest.param("9007199254740992", BYTE_RATE_TOO_LARGE, id="2^53 as a string"),
    pytest.param("9007199254740991.5", BYTE_RATE_TOO_LARGE, id="too large wins over fractional"),
    pytest.param("9Ei", BYTE_RATE_TOO_LARGE, id="exbibytes"),
    pytest.param("1e99", BYTE_RATE_TOO_LARGE, id="a large exponent"),
    pytest.param("NaN", BYTE_RATE_FORMAT, id="NaN"),
    pytest.param("Infinity", BYTE_RATE_FORMAT, id="Infinity"),
    pytest.param("10K", BYTE_RATE_FORMAT, id="upper-case K"),
    pytest.param("", BYTE_RATE_FORMAT, id="the empty string"),
    pytest.param("1e100", BYTE_RATE_FORMAT, id="a three-digit exponent, refused before parsing"),
    pytest.param("1e-2000000000", BYTE_RATE_FORMAT, id="an exponent that would stall the API server"),
    pytest.param("1" * 65, BYTE_RATE_FORMAT, id="a string longer than 64 characters"),
    pytest.param(True, BYTE_RATE_FORMAT, id="a boolean is not an integer"),
    pytest.param(1.0, BYTE_RATE_FORMAT, id="a float is not an integer"),
]


@pytest.mark.parametrize(("value", "message"), BAD_BYTE_RATES)
def test_byte_rate_rejects(value: object, message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        byte_rate(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "message"), BAD_BYTE_RATES)
def test_exactly_one_byte_rate_rule_fails(value: object, message: str) -> None:
    """The rules are disjoint, so admission reports one precise message, never a pile."""
    failed = [r.message for r in BYTE_RATE_RULES if not r.check(value)]
    assert failed == [message]
