"""Status numbers rounded so jitter is no change: what a reader would notice, and exact limits."""

from __future__ import annotations

import math


def quantize(value: float, digits: int = 2) -> int | float:
    """``value`` to ``digits`` significant digits; whole numbers as int (JSON ``100000``, not ``100000.0``).

    Jitter below the second digit (a byte rate moving from 101 kB/s to
    102 kB/s) is not a change worth a status write.
    """
    if not math.isfinite(value) or value == 0:
        return 0
    exp = math.floor(math.log10(abs(value)))
    rounded = round(value, digits - 1 - exp)
    if float(rounded).is_integer():
        return int(rounded)
    return float(rounded)


def exact(value: float) -> int | float:
    """A configured limit as written: whole numbers as int, nothing rounded (limits are configuration)."""
    return int(value) if float(value).is_integer() else float(value)
