"""The Go builds, started in the background before the virtualenv exists (``make setup``).

``make setup`` (so ``make test`` and ``make demo``) starts ``python3 -m harness.gobuilds`` with the
system's interpreter before it creates the virtualenv: the kube-apiserver, helm and the node's
binaries compile (CPU) while pip downloads (network), instead of after it. This module and what it
builds with are standard library only for that reason.

``--flux`` (``make test`` only): Flux's source- and kustomize-controller for tests/gitops, at idle
priority in a session of their own (``SCHED_IDLE`` and the session's autogroup at nice 19), so the
build takes only CPU nothing else wants while the rest is set up and the suite runs; on a busy
machine it simply takes longer. The Flux tests are scheduled last, and if they still find the build
running they lift it to normal priority (:func:`hurry`) and wait for it.

Every build takes the cache lock its foreground twin takes (``harness prepare``, the fixtures), so
they wait for a build in progress instead of starting a second one. A background build that fails
leaves only its log (``$KQUOTA_CACHE/logs/go-builds*.log``): the foreground then builds again and
fails loudly with the same cause.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from harness import cache, flux, kube_apiserver, node, procs, tools


def _pid_file() -> Path:
    return cache.root() / ".flux-build.session"


def _become_idle() -> bool:
    """Run this process, and everything it starts, only on CPU nothing else wants.

    True when it now leads a session of its own (which :func:`hurry` can find).
    """
    try:
        os.setsid()
        own_session = True
    except OSError:  # already a process group leader: stay in the caller's session
        own_session = False
    if own_session:
        # The scheduler shares the CPU between sessions (autogroups) first: without its own session
        # at nice 19, the build would take a full share beside every setsid'd broker and API server.
        # Never written for the caller's session, which holds the suite itself.
        with contextlib.suppress(OSError):
            Path("/proc/self/autogroup").write_text("19")
    os.nice(19)
    with contextlib.suppress(OSError, AttributeError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    return own_session


def _session_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its closing one.
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[3])


def hurry() -> int:
    """Lift a background Flux build to normal priority; the number of its processes lifted.

    Called by whoever is about to wait for the build. Best effort: lowering a nice value needs
    root (or RLIMIT_NICE); without it the build keeps its priority and only takes longer.
    """
    try:
        session = int(_pid_file().read_text())
    except (OSError, ValueError):
        return 0
    lifted = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or _session_of(int(entry.name)) != session:
            continue
        pid = int(entry.name)
        try:
            os.sched_setscheduler(pid, os.SCHED_OTHER, os.sched_param(0))
            os.setpriority(os.PRIO_PROCESS, pid, 0)
        except OSError:  # gone meanwhile, or not ours to lift
            continue
        with contextlib.suppress(OSError):
            Path(f"/proc/{pid}/autogroup").write_text("0")
        lifted += 1
    return lifted


def run_idle(build: Callable[[], object]) -> None:
    """Run ``build`` at idle priority in a session of its own that :func:`hurry` can find."""
    own_session = _become_idle()
    if own_session:
        _pid_file().write_text(str(os.getsid(0)))
    try:
        build()
    finally:
        if own_session:
            with contextlib.suppress(OSError):
                _pid_file().unlink()


def build_core() -> None:
    """What ``harness prepare`` needs from Go, in the order it needs it."""
    kube_apiserver.ensure_binary()
    tools.helm()
    node.prepare()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.gobuilds", description=__doc__.splitlines()[0])
    parser.add_argument("--flux", action="store_true", help="Flux's controllers, at idle priority")
    args = parser.parse_args(argv)
    start = time.monotonic()
    what = "Flux's controllers" if args.flux else "kube-apiserver, helm, the node's binaries"
    try:
        run_idle(flux.prepare) if args.flux else build_core()
    except (procs.ComponentError, OSError, subprocess.SubprocessError) as exc:  # the foreground builds again, loudly
        print(f"background build of {what} failed after {time.monotonic() - start:.0f}s: {exc}", flush=True)
        return 1
    print(f"background build of {what}: ready in {time.monotonic() - start:.0f}s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
