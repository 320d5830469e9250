"""The operator's memory sizing: the need per resource count, the cgroup limit it reads, and its refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from kquota.reconcile import sizing

pytestmark = pytest.mark.unit


def test_the_need_grows_with_the_resources() -> None:
    assert sizing.need_mib(0) == sizing.BASE_MIB
    assert sizing.need_mib(10_000) == sizing.BASE_MIB + 235  # 24 KiB x 10,000, rounded up
    assert sizing.limit_mib(10_000) > sizing.need_mib(10_000)


def cgroup(tmp_path: Path, line: str, files: dict[str, str]) -> tuple[Path, Path]:
    proc = tmp_path / "cgroup"
    proc.write_text(line + "\n")
    for name, text in files.items():
        path = tmp_path / "fs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return proc, tmp_path / "fs"


@pytest.mark.parametrize(
    ("line", "files", "limit"),
    [
        pytest.param("0::/kubepods/pod1/c1", {"kubepods/pod1/c1/memory.max": "536870912"}, 536870912, id="v2"),
        pytest.param("0::/kubepods/pod1/c1", {"kubepods/pod1/c1/memory.max": "max"}, None, id="v2 unlimited"),
        pytest.param("0::/", {"memory.max": "268435456"}, 268435456, id="v2 namespaced root"),
        pytest.param(
            "5:memory:/kubepods/pod1",
            {"memory/kubepods/pod1/memory.limit_in_bytes": "1073741824"},
            1073741824,
            id="v1",
        ),
        pytest.param("5:memory:/", {"memory/memory.limit_in_bytes": "9223372036854771712"}, None, id="v1 unlimited"),
        pytest.param("0::/gone", {}, None, id="unreadable"),
    ],
)
def test_the_limit_comes_from_the_process_cgroup(
    tmp_path: Path, line: str, files: dict[str, str], limit: int | None
) -> None:
    proc, root = cgroup(tmp_path, line, files)
    assert sizing.cgroup_memory_limit(proc, root) == limit


def test_a_limit_below_the_need_is_refused_with_the_setting_to_change() -> None:
    assert sizing.refusal(10_000, None) is None
    assert sizing.refusal(10_000, sizing.need_mib(10_000) * 2**20) is None
    why = sizing.refusal(10_000, 256 * 2**20)
    assert why is not None
    assert "256 MiB" in why and "10000 quota resources" in why and f"{sizing.need_mib(10_000)} MiB" in why
    assert f"{sizing.limit_mib(10_000)}Mi" in why and "expectedResources" in why
