"""Rates as people read them (5 MiB/s, 12.5%), for summaries, reports and annotations; never for manifests."""

from __future__ import annotations

import math
from typing import Final

#: Binary units, largest first; manifests use the same ones as Kubernetes quantities.
UNITS: Final = (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def _figure(v: float) -> str:
    """Three significant digits without an exponent: 8.98, 57.2, 1000 (``:.3g`` would print 1e+03)."""
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    decimals = max(0, 2 - math.floor(math.log10(abs(v))))
    text = f"{v:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def human_bytes(x: float | None) -> str:
    """For people: 5.00 MiB/s style, never used in manifests."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    for suffix, size in UNITS:
        if abs(x) >= size:
            return f"{_figure(x / size)} {suffix}B/s"
    return f"{_figure(x)} B/s"


def human_value(resource: str, x: float | None) -> str:
    if resource == "request":
        return "-" if x is None else f"{_figure(x)}%"
    return human_bytes(x)
