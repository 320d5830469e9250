"""The advisor sizes a local-mode driver from the machine instead of Spark's 1g default."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kquota.advisor.params import cgroup_memory_limit, local_driver_memory, local_memory_problem, total_memory

GIB = 1 << 30


@pytest.mark.parametrize(
    ("total", "expected"),
    [
        (24 * GIB, "12288m"),  # this machine: half
        (GIB, "1024m"),  # never below Spark's own default
        (512 << 20, "1024m"),
        (256 * GIB, "32768m"),  # at most 32 GiB
        (3 * GIB + 123, "1536m"),
    ],
)
def test_half_the_machine_within_bounds(total: int, expected: str) -> None:
    assert local_driver_memory(total) == expected


def cgroup_tree(tmp_path: Path, files: dict[str, str], membership: str) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text + "\n")
    self_cgroup = tmp_path / "self-cgroup"
    self_cgroup.write_text(membership)
    return root, self_cgroup


V1_MEMBERSHIP = "4:memory:/kubepods/pod1/c1\n3:cpu,cpuacct:/kubepods/pod1/c1\n0::/\n"
V1_UNLIMITED = str(9223372036854771712)


@pytest.mark.parametrize(
    ("files", "membership", "expected"),
    [
        # A container on cgroup v1 (this repository's node): runc mounts its own cgroup at the root.
        ({"memory/memory.limit_in_bytes": str(3 * GIB)}, "4:memory:/\n", 3 * GIB),
        # cgroup v2 with a cgroup namespace: the container's memory.max at the root.
        ({"memory.max": str(2 * GIB)}, "0::/\n", 2 * GIB),
        ({"memory.max": "max"}, "0::/\n", None),
        # A process on a host, inside a limited v1 cgroup (unlimited at the root).
        (
            {"memory/memory.limit_in_bytes": V1_UNLIMITED,
             "memory/kubepods/pod1/c1/memory.limit_in_bytes": V1_UNLIMITED,
             "memory/kubepods/pod1/memory.limit_in_bytes": str(5 * GIB)},
            V1_MEMBERSHIP, 5 * GIB,
        ),
        # Hybrid: v2 at unified/, the process's cgroup limited there.
        ({"unified/app/memory.max": str(4 * GIB)}, "0::/app\n", 4 * GIB),
        # Several limits: the smallest applies.
        ({"memory/memory.limit_in_bytes": str(8 * GIB), "memory.max": str(6 * GIB)}, "0::/\n", 6 * GIB),
        # This test machine: v1, unlimited.
        ({"memory/memory.limit_in_bytes": V1_UNLIMITED}, "4:memory:/x\n", None),
        ({}, "", None),
    ],
)  # fmt: skip
def test_the_cgroup_memory_limit_is_read_from_v1_and_v2(
    tmp_path: Path, files: dict[str, str], membership: str, expected: int | None
) -> None:
    root, self_cgroup = cgroup_tree(tmp_path, files, membership)
    assert cgroup_memory_limit(root, self_cgroup) == expected


def test_a_container_limit_below_the_machine_sizes_the_driver(tmp_path: Path) -> None:
    root, self_cgroup = cgroup_tree(tmp_path, {"memory/memory.limit_in_bytes": str(3 * GIB)}, "4:memory:/\n")
    assert total_memory(root, self_cgroup) == 3 * GIB  # this machine has more than 3 GiB
    assert local_driver_memory(total_memory(root, self_cgroup)) == "1536m"
    unlimited, _ = cgroup_tree(tmp_path / "u", {"memory/memory.limit_in_bytes": V1_UNLIMITED}, "")
    assert total_memory(unlimited, self_cgroup) == os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def test_local_mode_refuses_less_than_two_gib_with_a_message_naming_the_fix() -> None:
    assert local_memory_problem(2 * GIB) is None
    problem = local_memory_problem(768 << 20)
    assert problem is not None
    assert "768 MiB" in problem and "resources.limits.memory" in problem and "spark.driver.memory" in problem
