"""The part of Prometheus' HTTP API kquota uses (``/api/v1/query``, ``/api/v1/query_range``)."""

from __future__ import annotations

import json
import math
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kquota.metrics.exposition import parse_float
from kquota.metrics.http import HTTPStatusError, MetricsUnavailable, check_url, get


@dataclass(frozen=True, slots=True)
class PromSeries:
    """One series of a Prometheus API result: its labels and ``(epoch seconds, value)`` samples."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float], ...]


#: How PrometheusAPI GETs a URL: ``fetch(url, timeout)`` -> the body; raises MetricsUnavailable.
Fetch = Callable[[str, float], bytes]


def _http_fetch(url: str, timeout: float) -> bytes:
    return get(url, timeout, "application/json")[0]


class PrometheusAPI:
    """The part of Prometheus' HTTP API kquota uses (``/api/v1/query``, ``/api/v1/query_range``).

    ``fetch`` is the transport (default: :func:`kquota.metrics.http.get`, with
    its size cap); tests pass one that answers without a server.
    """

    def __init__(self, url: str, timeout: float = 10.0, fetch: Fetch | None = None) -> None:
        check_url(url)
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._fetch: Fetch = fetch or _http_fetch

    def _get(self, path: str, params: Mapping[str, str]) -> Any:
        full = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            body = self._fetch(full, self.timeout)
        except HTTPStatusError as exc:
            # Prometheus explains bad queries in a JSON body with a 400/422/503.
            try:
                detail = json.loads(exc.body.decode(errors="replace"))
                raise MetricsUnavailable(f"Prometheus: {detail.get('errorType')}: {detail.get('error')}") from exc
            except (ValueError, AttributeError):
                raise MetricsUnavailable(f"Prometheus: HTTP {exc.code}") from exc
        except MetricsUnavailable as exc:
            raise MetricsUnavailable(f"Prometheus: {exc}") from exc
        try:
            doc = json.loads(body)
        except ValueError as exc:
            raise MetricsUnavailable("Prometheus: response is not JSON") from exc
        if not isinstance(doc, dict) or doc.get("status") != "success":
            err = doc.get("error") if isinstance(doc, dict) else None
            kind = doc.get("errorType") if isinstance(doc, dict) else None
            raise MetricsUnavailable(
                f"Prometheus: {kind}: {err}" if kind and err else f"Prometheus: {err or 'query failed'}"
            )
        return doc.get("data")

    def instant(self, query: str, at: float | None = None) -> list[PromSeries]:
        """``/api/v1/query``: a vector (one point per series), a matrix for range selectors, or a scalar."""
        params = {"query": query}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return prom_result(self._get("query", params))

    def range(self, query: str, start: float, end: float, step: float) -> list[PromSeries]:
        """``/api/v1/query_range``: the query evaluated every ``step`` seconds from ``start`` to ``end``."""
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        return prom_result(self._get("query_range", params))


def _prom_point(pair: Any) -> tuple[float, float]:
    # Values are strings ("NaN", "+Inf" included); timestamps are float seconds.
    return (float(pair[0]), parse_float(str(pair[1])))


def prom_result(data: Any) -> list[PromSeries]:
    if not isinstance(data, dict):
        raise MetricsUnavailable("Prometheus: unexpected response")
    kind = data.get("resultType")
    result: Any = data.get("result")
    try:
        if kind == "vector":
            return [PromSeries(dict(r.get("metric") or {}), (_prom_point(r["value"]),)) for r in result]
        if kind == "matrix":
            return [
                PromSeries(dict(r.get("metric") or {}), tuple(_prom_point(v) for v in r.get("values") or []))
                for r in result
            ]
        if kind == "scalar":
            return [PromSeries({}, (_prom_point(result),))]
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise MetricsUnavailable(f"Prometheus: malformed {kind} result") from exc
    return []


def promql_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def duration(seconds: float) -> str:
    """A PromQL duration for a range selector (whole seconds, at least 1s)."""
    return f"{max(1, math.ceil(seconds))}s"
