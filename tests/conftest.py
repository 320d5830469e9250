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


#: Test modules that share one group (one pytest-xdist worker, in order): the node suite's modules
#: each start a node with a kubelet, containerd and CNI on this machine, and two at once would
#: compete for the host's network set-up; the Spark modules share one Spark session per worker.
_SHARED_GROUPS = {"tests/node/": "node", "tests/spark/": "spark"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test in an xdist group: its module's (so module fixtures start once), or a shared one.

    `make test` runs two pytest-xdist workers with ``--dist loadgroup``; without xdist the marks
    change nothing.
    """
    for item in items:
        if item.get_closest_marker("xdist_group"):
            continue
        path = item.nodeid.split("::", 1)[0]
        group = next((g for prefix, g in _SHARED_GROUPS.items() if path.startswith(prefix)), path)
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, None, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        # The test's failure is often the broker's or apiserver's story: show it.
        for proc in procs.STARTED:
            report.sections.append((f"{proc.name} log tail ({proc.log})", procs.log_tail(proc.log, 40)))
