"""CPU starvation for a test run: busy processes, twice as many as the cores, beside a command (issue #33).

A full ``make test`` on a machine busy with other work (load 9-13 on 2 cores) once left
quota keys on the broker that quiet runs never did. ``make test-stress`` runs the e2e,
fault, soak and node suites beside these hogs, so such races show up on purpose, not
by luck; ``make soak STARVE=1`` runs the chaos soak the same way.

The hogs are plain busy loops at the default priority, one process each (the GIL would
keep threads to one core); they run until the command ends and are stopped with it,
also on Ctrl-C. (Latency on the brokers' connections is the fault suite's and the
soak's slow proxy, :mod:`harness.slowproxy`; it is not added here.)
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Sequence


def _hog() -> None:  # pragma: no cover - runs in the hog processes
    while True:
        pass


def hogs_for(cores: int | None = None) -> int:
    """Twice the cores this process may run on."""
    available = cores or len(os.sched_getaffinity(0))
    return 2 * max(1, available)


def run(command: Sequence[str], hogs: int | None = None) -> int:
    """Run ``command`` beside ``hogs`` busy processes (default: twice the cores); its exit code."""
    count = hogs_for() if hogs is None else hogs
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_hog, name=f"kquota-starve-{i}", daemon=True) for i in range(count)]
    for p in procs:
        p.start()
    started = time.monotonic()
    print(f"starve: {count} CPU hogs beside: {' '.join(command)}", flush=True)
    try:
        return subprocess.run(list(command), check=False).returncode
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join(5)
        print(f"starve: {count} CPU hogs stopped after {time.monotonic() - started:.0f}s", flush=True)


def main(argv: Sequence[str]) -> int:
    """``python -m harness starve [--hogs N] -- COMMAND...``."""
    args = list(argv)
    hogs: int | None = None
    while args and args[0] != "--":
        flag = args.pop(0)
        if flag == "--hogs" and args:
            hogs = int(args.pop(0))
        else:
            print(f"starve: unknown argument {flag!r}", file=sys.stderr)
            return 2
    if not args or args[0] != "--" or len(args) < 2:
        print("usage: python -m harness starve [--hogs N] -- COMMAND...", file=sys.stderr)
        return 2
    return run(args[1:], hogs)
