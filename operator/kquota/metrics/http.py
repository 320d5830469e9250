"""HTTP GET for metrics pages and the Prometheus API: http(s) only, and no response over :data:`MAX_RESPONSE_BYTES`.

Standard-library HTTP (urllib): the operator's scraper and Prometheus client and
the advisor's ``kquota collect`` all read through :func:`get`, so they refuse the
same URLs and the same oversized answers.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from typing import Final

#: A broker with tens of thousands of clients exports a few MB; anything far beyond is not a metrics page.
MAX_RESPONSE_BYTES: Final = 64 * 1024 * 1024
#: How much of an error response's body is kept (Prometheus explains a bad query in it).
MAX_ERROR_BYTES: Final = 64 * 1024


class MetricsUnavailable(Exception):
    """A metrics endpoint or the Prometheus API could not be read; the message says why."""


class HTTPStatusError(MetricsUnavailable):
    """The server answered with an error status; ``body`` is the start of what it said."""

    def __init__(self, code: int, body: bytes) -> None:
        super().__init__(f"HTTP {code}")
        self.code = code
        self.body = body


def check_url(url: str) -> None:
    """Raises ValueError unless ``url`` is http or https (urllib would also open file: and ftp:)."""
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("http", "https"):
        raise ValueError(f"metrics URL must be http or https, got {url!r}")


def get(url: str, timeout: float, accept: str) -> tuple[bytes, str | None]:
    """The body and charset of a GET; raises MetricsUnavailable with a short reason on any failure.

    A body over :data:`MAX_RESPONSE_BYTES` is refused after reading one byte
    more than the limit, never read whole.
    """
    check_url(url)
    request = urllib.request.Request(url, headers={"Accept": accept})  # noqa: S310 - checked above
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310 - http(s) only, checked above
            body: bytes = resp.read(MAX_RESPONSE_BYTES + 1)
            charset: str | None = resp.headers.get_content_charset()
    except urllib.error.HTTPError as exc:
        try:
            detail = exc.read(MAX_ERROR_BYTES)
        except OSError:
            detail = b""
        raise HTTPStatusError(exc.code, detail) from exc
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise MetricsUnavailable(str(reason) or type(exc).__name__) from exc
    if len(body) > MAX_RESPONSE_BYTES:
        raise MetricsUnavailable(f"response larger than {MAX_RESPONSE_BYTES} bytes")
    return body, charset


def fetch_text(url: str, timeout: float) -> str:
    """GET a metrics page (Prometheus text format) as text; raises MetricsUnavailable on any failure."""
    body, charset = get(url, timeout, "text/plain;version=0.0.4")
    return body.decode(charset or "utf-8", errors="replace")
