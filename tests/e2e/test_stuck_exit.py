"""An operator whose Kopf has stopped exits within a bound, even when a task will not stop.

The chaos soak (SEED=14) found a replica that did nothing for five minutes: an API server restart
outlasted Kopf's peering keep-alive (nine failed PATCHes), Kopf stopped the operator, and a watch
task whose cancellation failed inside Kopf (an AssertionError in its cancel callback) kept the
process alive, not reconciling, its liveness endpoint gone, until Kopf's own last resort ten
minutes later. kquota bounds that at ``EXIT_DEADLINE_SECONDS``; a restarted process (or the
standby) then takes over.

Here the real operator (kquota's ``run``, Kopf's reactor, the real API server) gets one extra task
that ignores cancellation, the way that watch did, and is sent SIGTERM.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest
from harness.kube_apiserver import KubeAPIServer
from harness.operator_proc import OperatorProcess, ensure_ledger_namespace

from kquota.handlers.main import EXIT_DEADLINE_SECONDS

pytestmark = pytest.mark.e2e

#: kquota's operator command, with a Kopf startup handler that leaves a task behind that will not stop.
STUBBORN = """
import asyncio, sys
import kopf
from kquota.cli.main import main

async def stubborn():
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            print("stubborn task: cancellation ignored", flush=True)

@kopf.on.startup()
async def leave_a_stubborn_task(**_):
    asyncio.get_running_loop().create_task(stubborn(), name="stubborn")

sys.exit(main(sys.argv[1:]))
"""


def test_a_stopping_operator_with_a_task_that_will_not_stop_is_gone_within_the_bound(
    kube: KubeAPIServer, tmp_path: Path
) -> None:
    kube.apply_crds()
    ensure_ledger_namespace(kube)
    operator = OperatorProcess(
        kube,
        tmp_path,
        "stuck-exit",
        extra_env={"KQUOTA_WATCH_NAMESPACES": '["stuck-exit-none"]'},  # nothing of the other modules'
        # OperatorProcess runs [python, -m, kquota.cli.main, operator, ...]: the same arguments, through STUBBORN.
        wrapper=lambda argv: [sys.executable, "-c", STUBBORN, *argv[3:]],
    )
    operator.start()
    proc = operator.proc
    assert proc is not None and proc.popen is not None
    try:
        started = time.monotonic()
        proc.popen.send_signal(signal.SIGTERM)
        rc = proc.popen.wait(timeout=EXIT_DEADLINE_SECONDS + 40)
        took = time.monotonic() - started
        log = proc.log.read_text()
        assert "stubborn task: cancellation ignored" in log, "the task did hold the exit up"
        # Killed by Kopf's last resort at kquota's bound, not after Kopf's default of 10 minutes.
        assert rc == -signal.SIGKILL, (rc, log[-3000:])
        assert EXIT_DEADLINE_SECONDS - 1 <= took <= EXIT_DEADLINE_SECONDS + 40
    finally:
        operator.stop()
