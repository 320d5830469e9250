"""make test's background build of Flux's controllers (harness/gobuilds.py) on real processes.

It must take only CPU nothing else wants while the suite runs (the idle scheduling class, in a
session of its own whose autogroup is at nice 19, children included), and the Flux tests must be
able to lift it to normal priority once they wait for it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from harness import gobuilds

REPO = Path(__file__).resolve().parents[2]

#: A stand-in for the build: a process that starts a child (as go build starts compilers) and waits.
BUILD = """
import subprocess, sys
from harness import gobuilds
gobuilds.run_idle(lambda: subprocess.run([sys.executable, "-c", "import time; time.sleep(120)"]))
"""


def _policy(pid: int) -> tuple[int, int, str]:
    return os.sched_getscheduler(pid), os.getpriority(os.PRIO_PROCESS, pid), Path(f"/proc/{pid}/autogroup").read_text()


def _children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


@pytest.mark.skipif(os.geteuid() != 0, reason="lifting a nice value back to 0 needs root")
def test_the_build_runs_idle_in_its_own_session_and_hurry_lifts_it_children_included(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KQUOTA_CACHE", str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", BUILD], cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    try:
        deadline = time.monotonic() + 30
        while not (children := _children(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children, "the stand-in build started no child"
        child = children[0]
        session = int((tmp_path / ".flux-build.session").read_text())
        assert session == proc.pid == os.getsid(child) != os.getsid(0)
        for pid in (proc.pid, child):
            policy, nice, autogroup = _policy(pid)
            assert (policy, nice) == (os.SCHED_IDLE, 19)
            assert autogroup.strip().endswith("nice 19")
        assert _policy(os.getpid())[0] == os.SCHED_OTHER  # the caller's session is untouched

        assert gobuilds.hurry() == 2

        for pid in (proc.pid, child):
            policy, nice, autogroup = _policy(pid)
            assert (policy, nice) == (os.SCHED_OTHER, 0)
            assert autogroup.strip().endswith("nice 0")
    finally:
        # The stand-in leads its own process group (setsid): stop it and its child together.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 9)
        proc.wait()


def test_hurry_without_a_build_lifts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KQUOTA_CACHE", str(tmp_path))
    assert gobuilds.hurry() == 0
    (tmp_path / ".flux-build.session").write_text("not a session")
    assert gobuilds.hurry() == 0


def test_a_command_name_with_spaces_and_parentheses_gives_the_right_session(tmp_path: Path) -> None:
    # /proc/<pid>/stat's second field is the command name in parentheses, which may hold both.
    odd = tmp_path / "a (b) c"
    odd.symlink_to(sys.executable)
    proc = subprocess.Popen([str(odd), "-c", "import os, time; os.setsid(); time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while gobuilds._session_of(proc.pid) != proc.pid and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "(b)" in Path(f"/proc/{proc.pid}/stat").read_text()
        assert gobuilds._session_of(proc.pid) == proc.pid
    finally:
        proc.kill()
        proc.wait()


def test_the_background_builds_need_nothing_but_the_standard_library() -> None:
    # make setup starts them with the system's python3, before the virtualenv exists (-S: no site-packages).
    probe = (
        "import sys, harness.gobuilds\n"
        "ours = sys.stdlib_module_names | {'harness', '__main__'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] not in ours))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"
