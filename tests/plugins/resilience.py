"""The resilience report: faults injected, hostile inputs tried, data lost.

Fault and hostile-input tests record what they did through the session
fixture ``resilience``; at the end of the session the report is printed after
pytest's summary and written as JSON (``KQUOTA_RESILIENCE_REPORT``, default
``resilience-report.json`` in pytest's rootdir cache folder). A record says
what was done, whether the operator came through (``ok``) and how many quota
entries were lost or wrongly changed (``lost``): desired keys missing on the
brokers, unmanaged entries changed, keys of deleted resources left behind.

The report is evidence, not the verdict: every test that records also asserts
the same invariants, so a lost entry fails the test that caused it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest


@dataclass(frozen=True)
class Record:
    kind: str  # "fault" or "hostile"
    name: str
    ok: bool
    detail: str
    lost: int
    test: str
    seconds: float


@dataclass
class Resilience:
    """Collects records from the tests of one session (thread-safe)."""

    records: list[Record] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _current: str = ""

    def fault(self, name: str, *, ok: bool, detail: str = "", lost: int = 0, seconds: float = 0.0) -> None:
        """A fault was injected; ``ok`` when every invariant held after it."""
        self._add(Record("fault", name, ok, detail, lost, self._current, round(seconds, 2)))

    def hostile(self, name: str, *, ok: bool, detail: str = "", lost: int = 0) -> None:
        """A hostile input was fed through the operator; ``ok`` when it was handled."""
        self._add(Record("hostile", name, ok, detail, lost, self._current, 0.0))

    def _add(self, record: Record) -> None:
        with self._lock:
            self.records.append(record)

    def lines(self) -> list[str]:
        faults = [r for r in self.records if r.kind == "fault"]
        hostile = [r for r in self.records if r.kind == "hostile"]
        out = []
        for title, rows in (("faults injected", faults), ("hostile inputs", hostile)):
            ok = sum(r.ok for r in rows)
            out.append(f"{title}: {len(rows)}, handled {ok}, failed {len(rows) - ok}")
            for r in rows:
                mark = "ok  " if r.ok else "FAIL"
                took = f" ({r.seconds:.1f} s)" if r.seconds else ""
                out.append(f"  {mark} {r.name}{took}: {r.detail}" + (f" [lost {r.lost}]" if r.lost else ""))
        out.append(f"data lost: {sum(r.lost for r in self.records)}")
        return out


_REPORT = Resilience()


@pytest.fixture(scope="session")
def resilience() -> Resilience:
    return _REPORT


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    _REPORT._current = item.nodeid


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Under pytest-xdist (`make test` runs two workers) each worker hands its records to the
    # controller, which prints and writes the one report (pytest_testnodedown below).
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["kquota_resilience"] = json.dumps([asdict(r) for r in _REPORT.records])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist's controller: a worker ended; keep its records."""
    text = (getattr(node, "workeroutput", None) or {}).get("kquota_resilience")
    if text:
        for row in json.loads(text):
            _REPORT._add(Record(**row))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if not _REPORT.records or hasattr(config, "workeroutput"):
        return
    terminalreporter.section("kquota resilience report")
    for line in _REPORT.lines():
        terminalreporter.write_line(line)
    default = Path(str(config.rootpath)) / ".pytest_cache" / "resilience-report.json"
    path = Path(os.environ.get("KQUOTA_RESILIENCE_REPORT", str(default)))
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "faults": sum(r.kind == "fault" for r in _REPORT.records),
        "hostile": sum(r.kind == "hostile" for r in _REPORT.records),
        "failed": sum(not r.ok for r in _REPORT.records),
        "data_lost": sum(r.lost for r in _REPORT.records),
        "records": [asdict(r) for r in _REPORT.records],
    }
    path.write_text(json.dumps(body, indent=2) + "\n")
    terminalreporter.write_line(f"report written to {path}")
