"""An in-process HTTP server of fixed pages, for the metrics readers (real HTTP on a free port, no broker)."""

from __future__ import annotations

import http.server
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

#: What a path serves: a text page, raw bytes, or a function of the query string giving (content type, body).
Page = str | bytes | Callable[[dict[str, list[str]]], tuple[str, bytes]]


class _Pages(http.server.BaseHTTPRequestHandler):
    pages: ClassVar[dict[str, Page]] = {}

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        page = self.pages.get(self.path, self.pages.get(url.path))
        if page is None:
            self.send_error(404)
            return
        content_type = "text/plain; version=0.0.4; charset=utf-8"
        if callable(page):
            content_type, data = page(urllib.parse.parse_qs(url.query))
        else:
            data = page.encode() if isinstance(page, str) else page
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass


@contextmanager
def serve_pages() -> Iterator[tuple[str, dict[str, Page]]]:
    """Serve ``pages`` (path -> page, filled by the caller) on 127.0.0.1; yields the base URL and the dict."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Pages.pages = {}
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Pages.pages
    finally:
        server.shutdown()
        server.server_close()
