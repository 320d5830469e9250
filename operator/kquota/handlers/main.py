"""Runs the operator: logging, /metrics, Kopf with liveness and (optionally) peering."""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import os
import signal
import sys
import tracemalloc
from typing import Any

import aiohttp
import kopf
from prometheus_client import start_http_server

from kquota.handlers import kopf_startup
from kquota.handlers import operator as handlers
from kquota.handlers.gc_policy import RECLAIM_SECONDS, GcPolicy
from kquota.handlers.scopes import is_glob, kopf_namespaces
from kquota.reconcile.settings import OperatorSettings


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": self.formatTime(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out)


def _logging(settings: OperatorSettings, verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if settings.log_format == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # Kopf and the HTTP clients are chatty at INFO about every object.
    for noisy in ("kopf.objects", "kopf.activities", "aiohttp.access", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose else logging.WARNING)
    # kafka-python logs whole protocol messages at DEBUG: useless even when verbose.
    logging.getLogger("kafka").setLevel(logging.WARNING)


#: Watch streams Kopf holds open per watched namespace (one per namespaced kind: the three quota kinds).
WATCHES_PER_NAMESPACE = 3
#: Namespaces a glob in KQUOTA_WATCH_NAMESPACES is given room for (their number is not known at start).
GLOB_NAMESPACES = 256


def connection_limit(settings: OperatorSettings) -> int:
    """Connections the API session may open: ``api_connections`` for requests, plus one per watch stream.

    Each watch holds a connection for as long as it runs. Cluster-wide that is
    a handful; scoped to namespaces it is three per namespace, and a pool
    that the watches fill leaves no connection for status patches: the
    operator would hang. So the watches get room of their own: three per
    named namespace (the operator's own among them: Kopf watches it too, see
    ``scopes.kopf_namespaces``), and for globs (whose matches are not known at
    start) room for GLOB_NAMESPACES namespaces.
    """
    patterns = kopf_namespaces(settings.watch_namespaces, settings.namespace)
    if not patterns:
        return settings.api_connections + 8
    namespaces = GLOB_NAMESPACES if any(is_glob(p) for p in patterns) else len(patterns)
    return settings.api_connections + 8 + WATCHES_PER_NAMESPACE * namespaces


@kopf.on.login()
async def _login(**kwargs: Any) -> kopf.AiohttpSession | None:
    """In a Pod the ServiceAccount, elsewhere $KUBECONFIG (set from --kubeconfig).

    Kopf's own session allows unlimited connections: when thousands of objects
    arrive at once it opens one per object (a 256 KiB TLS buffer each), which
    is where an operator's memory goes. A session with a bounded connector
    queues those requests instead. (Kopf's worker_limit cannot be used for this:
    workers wait for every index to fill, so a limit deadlocks the start.)
    """
    info = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    if info is None:
        return None
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=connection_limit(handlers.state(kwargs["memo"]).settings), ssl=info.as_ssl_context()
        ),
        headers=info.as_http_headers(),
        auth=info.as_aiohttp_basic_auth(),
    )
    return kopf.AiohttpSession(
        server=info.server,
        default_namespace=info.default_namespace,
        expiration=info.expiration,
        aiohttp_session=session,
    )


def _limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's per-thread malloc arenas: with worker threads they fragment into
    hundreds of MiB of RSS for little gain. No-op where mallopt is unavailable."""
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(-8, arenas)  # M_ARENA_MAX
    except (OSError, AttributeError):
        pass


#: How long a thread may hold the GIL while another waits for it (CPython's default: 5 ms).
GIL_SWITCH_SECONDS = 0.001


def _short_gil_turns() -> None:
    """Let the event loop take the GIL back within 1 ms of asking, not 5.

    A full pass at 50,000 resources reads, decides and works out outcomes on worker
    threads, pure Python that holds the GIL for seconds, and a pass that gave way to a
    change leaves that work running there. Every step of the change's narrow pass on the
    event loop (each response, each await) then waited up to the switch interval for the
    GIL: in a lab at 50,000 the single changes' median was 0.25-0.28 s at 1 ms against
    0.32-0.35 s at 5 ms; in the bench (one run each) the changes sent during a full pass
    took 0.266 / 0.473 s (p50 / max) against 0.297 / 0.564 s. The cost is more switches
    between busy threads, which only a full pass has.
    """
    sys.setswitchinterval(GIL_SWITCH_SECONDS)


def _memory_diagnostics() -> None:
    """With KQUOTA_TRACEMALLOC=N (frames per traceback), SIGUSR1 logs where memory is held.

    For memory profiling: the first signal takes a baseline (log it at idle), every
    later one logs the allocation sites that grew most since then, with N frames each.
    """
    depth = os.environ.get("KQUOTA_TRACEMALLOC", "")
    if not depth.isdigit() or int(depth) < 1:
        return
    tracemalloc.start(int(depth))
    baseline: list[tracemalloc.Snapshot] = []

    def dump(signum: int, frame: object) -> None:
        log = logging.getLogger("kquota.memory")
        snapshot = tracemalloc.take_snapshot()
        current, peak = tracemalloc.get_traced_memory()
        log.warning("traced memory: %.1f MiB now, %.1f MiB peak", current / 2**20, peak / 2**20)
        if not baseline:
            baseline.append(snapshot)
            return
        for stat in snapshot.compare_to(baseline[0], "traceback")[:25]:
            log.warning(
                "%+.2f MiB in %+d blocks since the baseline\n%s",
                stat.size_diff / 2**20,
                stat.count_diff,
                "\n".join(stat.traceback.format()),
            )

    signal.signal(signal.SIGUSR1, dump)


#: How long a stopping operator may take before it is killed (Kopf's ultimate exiting timeout).
EXIT_DEADLINE_SECONDS = 20.0


def kopf_settings(settings: OperatorSettings) -> kopf.OperatorSettings:
    """Kopf's settings that must be in place before Kopf starts (the rest are set in the startup handler).

    The peering lifetime is how long a standby waits for a replica that
    stopped without a word (SIGKILL, a lost node): Kopf's default of 60 s is
    twice the failover budget. Kopf sends its keep-alive 5 to 10 s before the
    lifetime ends whatever the lifetime, so a shorter one keeps that margin and
    costs only more frequent keep-alives (one PATCH every 5 to 10 s at 15 s).
    A replica that exits cleanly (SIGTERM) deletes its record and a standby
    resumes at once.
    """
    kopf_settings = kopf.OperatorSettings()
    kopf_settings.peering.lifetime = settings.peering_lifetime
    # Once Kopf stops (SIGTERM, or a root task given up: e.g. the peering keep-alive failing nine
    # times in a row while the API server is down), a watch task that cannot be cancelled kept the
    # process alive, reconciling nothing, for Kopf's default of 10 minutes (the chaos soak: SEED=14,
    # an API server restart). Killed sooner, it is restarted and the standby takes over; the bound
    # stays under the chart's terminationGracePeriodSeconds (30 s), so a clean stop is unaffected.
    kopf_settings.process.ultimate_exiting_timeout = EXIT_DEADLINE_SECONDS
    return kopf_settings


def run(settings: OperatorSettings, verbose: bool = False) -> int:
    _limit_malloc_arenas()
    _short_gil_turns()
    _memory_diagnostics()
    GcPolicy(settings.gc_freeze_seconds, RECLAIM_SECONDS).start()
    _logging(settings, verbose)
    if settings.kubeconfig:
        os.environ["KUBECONFIG"] = settings.kubeconfig
    kopf_startup.install()
    if settings.metrics_port:
        start_http_server(settings.metrics_port)
    liveness = f"http://0.0.0.0:{settings.liveness_port}/healthz" if settings.liveness_port else None
    namespaces = settings.watch_namespaces
    logging.getLogger("kquota").info(
        "kquota operator starting: default cluster %r, ledger namespace %r, drift interval %.0fs, %s",
        settings.default_cluster,
        settings.namespace,
        settings.drift_interval,
        f"namespaces {namespaces}" if namespaces else "all namespaces",
    )
    asyncio.run(
        kopf.operator(
            settings=kopf_settings(settings),
            clusterwide=not namespaces,
            namespaces=kopf_namespaces(namespaces, settings.namespace),
            standalone=settings.peering is None,
            peering_name=settings.peering,
            priority=int(os.environ.get("KQUOTA_PEERING_PRIORITY", "0")),
            liveness_endpoint=liveness,
            memo=handlers.operator_memo(settings),
        )
    )
    return 0
