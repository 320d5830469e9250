"""Kubernetes quantities (``10Mi``, ``1.5M``, ``1e6``) as exact byte rates, parsed offline.

Byte rates in kquota's API are integers or Kubernetes quantity strings. The
API server checks them with CEL's quantity library, which parses with
``resource.ParseQuantity`` from k8s.io/apimachinery. :func:`parse_quantity`
ports that parser (same grammar, same suffixes, same rounding), so that
``kquota validate`` and the pydantic models accept exactly what admission
accepts. Values are :class:`decimal.Decimal`: no float ever touches a
quantity before it is known to be a whole number of bytes.

:data:`BYTE_RATE_RULES` are the CEL rules of a byte-rate field together with
their Python twins (see :mod:`kquota.api.cel`); :func:`byte_rate` runs the
Python half.

Why the CEL rules do not use ``quantity(...).isInteger()``: it is true only
when apimachinery happened to store the value as an int64 with a
non-negative scale, so ``1.5Mi`` (exactly 1572864) and ``1Pi`` report
false while ``1.5M`` reports true. The rules test the value instead:
``q == int(approx(q))`` or ``q == int(approx(q)) + 1``, exact because
``int()`` yields whole numbers and, below 2**53, the float approximation is
within one of the true value.
"""

from __future__ import annotations

import decimal
import re
from decimal import Decimal
from typing import Any, Final

from kquota.api.cel import Rule

#: Largest integer a float64 carries exactly; AlterClientQuotas sends values as float64.
MAX_EXACT_INTEGER: Final = 2**53 - 1

_MAX_INT64: Final = 2**63 - 1
_DIGITS: Final = frozenset("0123456789")
_SUFFIX_CHARS: Final = frozenset("eEinumkKMGTP")
#: apimachinery's decimal SI suffixes: suffix -> power of ten.
_DECIMAL_SI: Final = {"": 0, "n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
#: apimachinery's binary SI suffixes: suffix -> power of two.
_BINARY_SI: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_NANO: Final = Decimal("1e-9")


class QuantityError(ValueError):
    """The string is not a Kubernetes quantity (``isQuantity()`` would be false)."""


def _int32(value: int) -> int:
    # ParseQuantity reads the exponent as int64 and stores it as int32 (wrapping).
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def _scan(text: str) -> tuple[bool, str, str, str, str]:
    """Port of ``parseQuantityString``: (positive, value, numerator, denominator, suffix)."""
    positive = True
    pos = 0
    end = len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] == "+"
        pos += 1
    # Leading zeros; an all-zero (or empty after the sign) string is zero.
    while True:
        if pos >= end:
            return positive, "0", "0", "", ""
        if text[pos] != "0":
            break
        pos += 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return positive, text, num, "", ""
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end:
        if text[pos] not in _DIGITS:
            raise QuantityError(f"{text!r} is not a quantity: unexpected {text[pos]!r}")
        pos += 1
    return positive, value, num, denom, text[suffix_start:]


def _suffix(text: str, suffix: str) -> tuple[int, int]:
    """apimachinery's suffix interpretation: (base, exponent)."""
    if suffix in _DECIMAL_SI:
        return 10, _DECIMAL_SI[suffix]
    if suffix in _BINARY_SI:
        return 2, _BINARY_SI[suffix]
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[:1] in "+-" else digits
        if body and all(c in _DIGITS for c in body) and -(2**63) <= int(digits) <= _MAX_INT64:
            return 10, _int32(int(digits))
        raise QuantityError(f"{text!r} has an unparsable exponent")
    raise QuantityError(f"{text!r} has an unknown suffix {suffix!r}")


def _fast_path(num: str, denom: str, base: int, exponent: int) -> bool:
    """Whether ParseQuantity takes its int64 path, which cannot fail (the slow path can)."""
    if base == 10:
        precision = 18 - (len(num) + len(denom))
        scale = exponent
    elif exponent >= 0 and not denom:
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
        scale = 0
    else:
        return False
    if precision < 0 or scale - len(denom) < -9:
        return False
    mantissa = 1 if base == 10 else 2**exponent
    return int(num + denom) * mantissa <= _MAX_INT64


def parse_quantity(text: str) -> Decimal:
    """The exact value of a Kubernetes quantity string, as the API server computes it.

    Accepts what ``resource.ParseQuantity`` accepts: an optionally signed
    decimal number followed by nothing, a decimal SI suffix (n u m k M G T P
    E), a binary SI suffix (Ki Mi Gi Ti Pi Ei) or an exponent (``e3``,
    ``E-2``). As apimachinery does, values are rounded away from zero to a
    multiple of 1e-9, and binary-suffixed values are capped at 2**63-1.
    Raises :class:`QuantityError` for anything else (``NaN``, ``inf``,
    ``10K``, ``1,5M``, ``Mi``, ``""``).
    """
    if not isinstance(text, str):
        raise QuantityError(f"{text!r} is not a string")
    if text == "":
        raise QuantityError("an empty string is not a quantity")
    if not text.isascii():
        raise QuantityError(f"{text!r} is not a quantity")
    positive, value, num, denom, suffix = _scan(text)
    base, exponent = _suffix(text, suffix)
    if not _fast_path(num, denom, base, exponent) and not any(c in _DIGITS for c in value):
        # inf.Dec.SetString needs a digit; the int64 path never looks at `value`.
        raise QuantityError(f"{text!r} has no digits")
    with decimal.localcontext() as ctx:
        # Decimal stores coefficient and exponent apart: 1e2000000000 costs nothing.
        ctx.prec = decimal.MAX_PREC
        ctx.Emax = decimal.MAX_EMAX
        ctx.Emin = decimal.MIN_EMIN
        number = Decimal(num + denom).scaleb(-len(denom))
        if number == 0:
            return Decimal(0)
        result = number.scaleb(exponent) if base == 10 else number * (2**exponent)
        exp = result.as_tuple().exponent
        assert isinstance(exp, int)
        if exp < -9:
            result = result.quantize(_NANO, rounding=decimal.ROUND_UP)
        if base == 2 and result > _MAX_INT64:
            result = Decimal(_MAX_INT64)
        # Negate inside the context: outside it, unary minus would round to 28 digits.
        return result if positive else result.copy_negate()


def is_quantity(text: object) -> bool:
    """CEL's ``isQuantity()``."""
    if not isinstance(text, str):
        return False
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


# --- byte rates -------------------------------------------------------------

_MAX_Q: Final = f"quantity('{MAX_EXACT_INTEGER}')"
# sign() is a global function in Kubernetes' library, not the method its docs show: compare with zero.
_ZERO: Final = "quantity('0')"
# One float approximation, truncated; the true value is it or it + 1 when whole (see module doc).
_APPROX: Final = "int(quantity(self).asApproximateFloat())"
#: Longest quantity string accepted.
MAX_QUANTITY_LENGTH: Final = 64
# A string quantity() may safely parse and compare. apimachinery materialises 10^|exponent|
# when it rescales, so `1e-2000000000` (parsing) or `1e2000000000` (comparing) keeps an API
# server core busy for minutes: exponents of three digits or more are refused before any
# quantity() call, relying on && short-circuiting left to right.
_SANE: Final = f"(self.size() <= {MAX_QUANTITY_LENGTH} && !self.matches('[eE][+-]?[0-9]{{3,}}$') && isQuantity(self))"
_HUGE_EXPONENT: Final = re.compile(r"[eE][+-]?[0-9]{3,}\Z")

BYTE_RATE_FORMAT: Final = (
    "must be a positive integer or a Kubernetes quantity such as 10Mi, 1M or 1.5Mi (bytes per second; "
    "at most 64 characters, exponents below e100)"
)
BYTE_RATE_POSITIVE: Final = "must be greater than zero: Kafka rejects a quota of 0 (to remove a quota, omit it)"
BYTE_RATE_TOO_LARGE: Final = (
    f"must be at most {MAX_EXACT_INTEGER} bytes per second (2^53-1): AlterClientQuotas carries quotas as float64"
)
BYTE_RATE_FRACTION: Final = (
    "must be a whole number of bytes per second: Kafka rejects fractional byte rates (e.g. 0.5 or 1500m)"
)


def _value(v: Any) -> Decimal | None:
    """The quantity's value, or None if ``v`` is neither an int nor a quantity string."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return Decimal(v)
    if not isinstance(v, str) or len(v) > MAX_QUANTITY_LENGTH or _HUGE_EXPONENT.search(v):
        return None
    try:
        return parse_quantity(v)
    except QuantityError:
        return None


def _fmt_ok(v: Any) -> bool:
    return _value(v) is not None


def _positive_ok(v: Any) -> bool:
    q = _value(v)
    return q is None or q > 0


def _max_ok(v: Any) -> bool:
    q = _value(v)
    return q is None or q <= MAX_EXACT_INTEGER


def _whole_ok(v: Any) -> bool:
    q = _value(v)
    if q is None or q <= 0 or q > MAX_EXACT_INTEGER:
        return True
    return q == q.to_integral_value()


#: Rules on every byte-rate field (ints pass through the int branch; strings are quantities).
#: They are disjoint: for any value at most one fails, so the message says exactly what is wrong.
BYTE_RATE_RULES: Final = (
    Rule(f"type(self) == int || {_SANE}", BYTE_RATE_FORMAT, _fmt_ok),
    Rule(
        f"type(self) == int ? self > 0 : (!{_SANE} || quantity(self).isGreaterThan({_ZERO}))",
        BYTE_RATE_POSITIVE,
        _positive_ok,
    ),
    Rule(
        f"type(self) == int ? self <= {MAX_EXACT_INTEGER} : (!{_SANE} || quantity(self).compareTo({_MAX_Q}) <= 0)",
        BYTE_RATE_TOO_LARGE,
        _max_ok,
    ),
    Rule(
        f"type(self) == int || !{_SANE} || !quantity(self).isGreaterThan({_ZERO})"
        f" || quantity(self).isGreaterThan({_MAX_Q})"
        f" || quantity(self).sub({_APPROX}).compareTo({_ZERO}) == 0"
        f" || quantity(self).sub({_APPROX} + 1).compareTo({_ZERO}) == 0",
        BYTE_RATE_FRACTION,
        _whole_ok,
    ),
)


def byte_rate(value: int | str) -> int:
    """A byte-rate field's value in bytes per second, checked as admission checks it.

    Raises ValueError with the admission message of the first rule broken.
    """
    for rule in BYTE_RATE_RULES:
        if not rule.check(value):
            raise ValueError(rule.message)
    q = _value(value)
    assert q is not None  # the rules above guarantee it
    return int(q)
