"""Child processes that cannot outlive the test run, and whose logs are kept.

Every component runs in its own process group with a parent-death signal, so
Ctrl-C, a pytest crash or a SIGKILLed demo leaves no java, apiserver or etcd
behind. Readiness waits are bounded and fail with the tail of the log, never
hang.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _child_setup() -> None:
    # New session: a terminal's Ctrl-C reaches us, and we stop children in order.
    os.setsid()
    # If the Python process dies without cleaning up (SIGKILL), the kernel
    # sends SIGKILL to the child too.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


#: Every process started by the harness, so a failing test can show their logs.
STARTED: list[Process] = []


class ComponentError(RuntimeError):
    """A component failed to start or died; the message carries its log tail."""


def log_tail(path: Path, lines: int = 60) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text[-lines:])


class Process:
    """One child process writing stdout+stderr to ``log``."""

    def __init__(
        self, name: str, argv: Sequence[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        self.env = env
        self.cwd = cwd
        self.popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        fh = self.log.open("ab")
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # preexec_fn is the only way to set PDEATHSIG; harness processes are
                # started from the main thread, where it is safe.
                env=self.env,
                cwd=self.cwd,
                preexec_fn=_child_setup,  # noqa: PLW1509
            )
        finally:
            fh.close()
        STARTED.append(self)

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} not started"
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def wait_until(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``ready`` until true; fail fast with the log if the process dies."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.popen.returncode if self.popen else None
                raise ComponentError(
                    f"{self.name} exited (code {code}) before {what}; log {self.log}:\n{log_tail(self.log)}"
                )
            try:
                if ready():
                    return
            except Exception:  # noqa: BLE001, S110 - any error means "not ready yet"
                pass
            time.sleep(0.2)
        self.stop()
        raise ComponentError(
            f"{self.name}: {what} not reached within {timeout:.0f}s; log {self.log}:\n{log_tail(self.log)}"
        )

    def signal(self, sig: int) -> None:
        if self.alive():
            os.killpg(self.pid, sig)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGTERM)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.popen.wait(10)
            except ProcessLookupError:
                pass
        # Anything the process forked into its group goes too.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL without grace, for fault tests."""
        if self.alive():
            os.killpg(self.pid, signal.SIGKILL)
            assert self.popen is not None
            self.popen.wait(10)


#: Ports this process has handed out: never handed out twice, even once free again.
_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_range() -> tuple[int, int]:
    """The ports this process hands out, ``[start, end)``: below the ephemeral range, a slice per pytest-xdist worker.

    Each worker is a process with its own record of what it handed out, and a
    port that is free when checked is bound by its component only seconds later
    (a broker starting): two workers could hand out the same port, and one
    component failed to bind it ("Address already in use", a 3-broker cluster in
    a full ``make test``). Disjoint slices rule that out between workers. A
    process a worker starts inherits its slice, as any process shared the whole
    range before.
    """
    end = _ephemeral_low()
    start = max(1024, end - 16384)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 1:
        index, width = int(worker[2:]), (end - start) // int(count)
        if index < int(count):
            start, end = start + index * width, start + (index + 1) * width
    return start, end


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range, not handed out before.

    Below the ephemeral range because components are restarted on the ports they
    had (a broker or the API server in the fault suite): a port the kernel may
    give any outgoing connection could be taken while the component is down, and
    the restart would fail with "address in use". Nothing here binds port 0.
    """
    import random
    import socket

    start, low = port_range()
    for _ in range(200):
        port = random.randrange(start, low)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise ComponentError(f"no free loopback port in {start}-{low - 1}")


def run_checked(
    argv: Sequence[str],
    what: str,
    log: Path,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 3600,
) -> None:
    """Run a build/download step to completion; on failure raise with its log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as fh:
        result = subprocess.run(
            list(argv), stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=cwd, timeout=timeout, check=False
        )
    if result.returncode != 0:
        raise ComponentError(f"{what} failed (exit {result.returncode}); log {log}:\n{log_tail(log)}")


def maven_dependencies(pom: str, workdir: Path, what: str, log: Path) -> Path:
    """Resolve a pom's dependencies from Maven Central into ``workdir/lib`` (the pom file is removed after)."""
    (workdir / "pom.xml").write_text(pom)
    run_checked(
        ["mvn", "-q", "-B", "-f", str(workdir / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={workdir / 'lib'}"],
        what=what,
        log=log,
        cwd=workdir,
        timeout=1800,
    )  # fmt: skip
    (workdir / "pom.xml").unlink()
    return workdir / "lib"
