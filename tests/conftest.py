"""Shared pytest wiring: component fixtures and component logs on failure.

Fixtures for the real components live in tests/plugins/, one module
per component, and are loaded here as plugins.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest
from harness import procs

pytest_plugins = [
    "tests.plugins.kube",
    "tests.plugins.kafka",
    "tests.plugins.prometheus",
    "tests.plugins.resilience",
]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        # The test's failure is often the broker's or apiserver's story: show it.
        for proc in procs.STARTED:
            report.sections.append((f"{proc.name} log tail ({proc.log})", procs.log_tail(proc.log, 40)))
