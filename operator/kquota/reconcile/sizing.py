"""How much memory the operator needs for N quota resources, and whether its memory limit holds that.

The figures are measured by bench/operator_bench.py on the real stack
(docs/benchmarks.md): the operator's resident memory at its start-up peak (a
restart with every resource present, the largest it gets) is about
``BASE_MIB`` plus ``KIB_PER_RESOURCE`` per quota resource. The chart derives
its memory request and limit from the same two numbers (``kquota.memory`` in
helm/kquota/templates/_helpers.tpl, from ``expectedResources``), and
tests/unit/test_sizing.py checks that both agree.

An operator whose container limit cannot hold the resources it finds would be
OOM-killed during every start, a crash loop exactly when it is needed. So it
counts the resources first (a list of one object per kind gives the count) and,
if the limit is too small, reconciles nothing and says so on every
KafkaCluster, with the limit to set (:func:`refusal`).
"""

from __future__ import annotations

import math
from pathlib import Path

#: The start-up peak with no quota resource (the interpreter, Kopf, the clients), MiB.
BASE_MIB = 130
#: And what each quota resource adds to it, KiB.
KIB_PER_RESOURCE = 24
#: The chart's limit over the need: room for a burst of changes and the metrics readings.
LIMIT_HEADROOM = 1.25

CGROUP_ROOT = Path("/sys/fs/cgroup")
#: cgroup v1 reports "no limit" as a huge number near 2**63.
_UNLIMITED = 2**60


def need_mib(resources: int) -> int:
    """The memory the operator needs at its start-up peak with ``resources`` quota resources, MiB."""
    return BASE_MIB + math.ceil(resources * KIB_PER_RESOURCE / 1024)


def limit_mib(resources: int) -> int:
    """The memory limit the chart sets for ``resources`` quota resources, MiB."""
    return math.ceil(need_mib(resources) * LIMIT_HEADROOM)


def cgroup_memory_limit(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_ROOT) -> int | None:
    """This process's memory limit in bytes, from its cgroup (v2 ``memory.max``, v1 ``memory.limit_in_bytes``).

    None when there is none, or it cannot be read (not in a container, another layout).
    """
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            candidates = [root / path.lstrip("/") / "memory.max", root / "memory.max"]
        elif "memory" in controllers.split(","):
            candidates = [root / "memory" / path.lstrip("/") / "memory.limit_in_bytes"]
        else:
            continue
        for file in candidates:
            try:
                text = file.read_text().strip()
            except OSError:
                continue
            if text == "max" or not text.isdigit() or int(text) >= _UNLIMITED:
                return None
            return int(text)
    return None


def refusal(resources: int, limit_bytes: int | None) -> str | None:
    """Why the operator must not start with this memory limit (None: it holds the resources, or there is none)."""
    if limit_bytes is None:
        return None
    need = need_mib(resources)
    have = limit_bytes / 2**20
    if need <= have:
        return None
    return (
        f"the operator's memory limit ({have:.0f} MiB) cannot hold its {resources} quota resources: it needs "
        f"about {need} MiB at start-up ({BASE_MIB} MiB plus {KIB_PER_RESOURCE} KiB per resource, measured), so it "
        "would be OOM-killed at every start; it reconciles nothing until it runs with more memory: set the "
        f"chart's expectedResources to at least {resources} (a limit of {limit_mib(resources)} MiB), or "
        f"resources.limits.memory to {limit_mib(resources)}Mi or more"
    )
