"""A memory cgroup of the test's own, for starting a process under a memory limit (as a container's).

cgroup v2 (``memory.max`` in a child of the unified hierarchy, with the memory
controller enabled for its children) or v1 (``memory.limit_in_bytes`` under the
memory hierarchy), whichever the machine mounts. Needs root. A process is put in
it by :meth:`MemoryCgroup.wrap`, which makes the process move itself in before it
runs its command, so it reads its own limit from the start.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")


class MemoryCgroup:
    def __init__(self, limit_bytes: int, root: Path = ROOT) -> None:
        name = f"kquota-test-{uuid.uuid4().hex[:8]}"
        if (root / "cgroup.controllers").exists():  # v2
            self.path = root / name
            self.path.mkdir()
            (self.path / "memory.max").write_text(str(limit_bytes))
            self._events = self.path / "memory.events"
        else:
            self.path = root / "memory" / name
            self.path.mkdir()
            (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            self._events = self.path / "memory.oom_control"

    def wrap(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this cgroup (a shell moves itself in, then execs it)."""
        return ["sh", "-c", f'echo $$ > {self.path / "cgroup.procs"} && exec "$@"', "sh", *argv]

    def oom_kills(self) -> int:
        """How many processes the kernel killed in this cgroup for memory."""
        for line in self._events.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        for pid in (self.path / "cgroup.procs").read_text().split():
            # Left-over processes go back to the root cgroup, so the directory can go.
            (self.path.parent / "cgroup.procs").write_text(pid)
        self.path.rmdir()
