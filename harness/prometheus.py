"""A real Prometheus server (Debian's ``prometheus`` package) scraping the test brokers.

``Prometheus.start`` writes a config that scrapes the given metrics URLs
every ``scrape_interval`` (1 s by default, so tests see changes quickly), keeps
its TSDB in the work directory and listens on a free loopback port: it never
clashes with a system Prometheus on 9090. The process runs through
:class:`harness.procs.Process` (own process group, log file, killed
with the test run) and is ready once ``/-/ready`` answers 200.

``make test`` installs the binary (``apt-get install prometheus``); without
it, starting raises a ComponentError saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import procs

START_TIMEOUT = float(os.environ.get("KQUOTA_PROMETHEUS_START_TIMEOUT", "90"))


def find_binary() -> Path:
    """``$KQUOTA_PROMETHEUS``, else ``prometheus`` on PATH, else Debian's ``/usr/bin/prometheus``."""
    configured = os.environ.get("KQUOTA_PROMETHEUS")
    candidates = [configured] if configured else [shutil.which("prometheus"), "/usr/bin/prometheus"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    raise procs.ComponentError(
        "Prometheus not found (looked for $KQUOTA_PROMETHEUS, prometheus on PATH, /usr/bin/prometheus); "
        "`make test` installs it (apt-get install -y prometheus)"
    )


def _target(url: str) -> tuple[str, str, str]:
    """(scheme, host:port, path) of a metrics URL."""
    parts = urllib.parse.urlsplit(url)
    return parts.scheme or "http", parts.netloc, parts.path or "/metrics"


def render_config(targets: Sequence[str], scrape_interval: str = "1s", job: str = "kafka") -> str:
    """prometheus.yml scraping ``targets`` (metrics URLs); one job per (scheme, path) combination.

    JSON is valid YAML, so no YAML library is needed to write it.
    """
    jobs: dict[tuple[str, str], list[str]] = {}
    for url in targets:
        scheme, hostport, path = _target(url)
        jobs.setdefault((scheme, path), []).append(hostport)
    scrape_configs = [
        {
            "job_name": job if i == 0 else f"{job}-{i}",
            "scheme": scheme,
            "metrics_path": path,
            "static_configs": [{"targets": hosts}],
        }
        for i, ((scheme, path), hosts) in enumerate(sorted(jobs.items()))
    ]
    config = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval, "evaluation_interval": "5s"},
        "scrape_configs": scrape_configs,
    }
    return json.dumps(config, indent=2) + "\n"


@dataclass
class Prometheus:
    """A running Prometheus server."""

    port: int
    workdir: Path
    proc: procs.Process
    targets: tuple[str, ...]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.proc.log

    @classmethod
    def start(
        cls, workdir: Path, targets: Sequence[str], scrape_interval: str = "1s", timeout: float = START_TIMEOUT
    ) -> Prometheus:
        binary = find_binary()
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        config.write_text(render_config(targets, scrape_interval))
        port = procs.free_port()
        argv = [
            str(binary),
            f"--config.file={config}",
            f"--storage.tsdb.path={workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            # Tests need minutes of data; a short retention keeps the TSDB small.
            "--storage.tsdb.retention.time=2h",
            "--log.level=info",
        ]
        proc = procs.Process("prometheus", argv, workdir / "prometheus.log", cwd=workdir)
        server = cls(port, workdir, proc, tuple(targets))
        proc.start()
        try:
            proc.wait_until(server.ready, timeout, "/-/ready answering 200")
        except BaseException:
            proc.stop()
            raise
        return server

    def ready(self) -> bool:
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:  # noqa: S310 - loopback http
            return bool(resp.status == 200)

    def query(self, promql: str) -> list[dict[str, Any]]:
        """Instant query; the raw ``data.result`` list (for harness checks; kquota has its own client)."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
        with urllib.request.urlopen(url, timeout=10) as resp:  # noqa: S310 - loopback http
            doc = json.loads(resp.read())
        if doc.get("status") != "success":
            raise procs.ComponentError(f"Prometheus query {promql!r} failed: {doc}")
        return list(doc["data"]["result"])

    def wait_scraped(self, timeout: float = 60.0) -> None:
        """Wait until every target has been scraped successfully (``up == 1``)."""
        wanted = {_target(t)[1] for t in self.targets}
        deadline = time.monotonic() + timeout
        last: set[str] = set()
        while time.monotonic() < deadline:
            try:
                last = {r["metric"].get("instance", "") for r in self.query("up == 1")}
            except OSError:
                last = set()
            if wanted <= last:
                return
            time.sleep(0.5)
        raise procs.ComponentError(
            f"Prometheus did not scrape {sorted(wanted - last)} within {timeout:.0f}s; log {self.log}:\n"
            f"{procs.log_tail(self.log, 30)}"
        )

    def stop(self) -> None:
        self.proc.stop()
