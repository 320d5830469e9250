"""The Spark session ``kquota advise`` and ``kquota collect`` run on, and the progress printed while Spark computes.

Spark's own console bar is switched off and :class:`Progress` prints the step
being computed and its stage progress (tasks done / total), polling
``SparkContext.statusTracker()``; on a terminal it redraws one line, otherwise
it prints a line at most every few seconds.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from pyspark.sql import SparkSession

from kquota.advisor.params import local_driver_memory, local_memory_problem, total_memory, worker_python


class MemoryTooSmall(Exception):
    """Local mode cannot run in the memory this process may use; the message says what to change."""


def spark_session(
    master: str | None = None, app_name: str = "kquota-advise", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """The session to run on: the active one if there is one (tests, notebooks), else a new one.

    ``master`` None means ``local[*]``, except under spark-submit (which starts the JVM first and says
    so in ``PYSPARK_GATEWAY_PORT``), where the master and resources given to spark-submit apply.
    In local mode the driver's memory is half the machine's, or of the container's memory limit
    (see ``local_driver_memory`` and ``total_memory``), unless ``spark.driver.memory`` or
    ``SPARK_DRIVER_MEMORY`` says otherwise; with less than 2 GiB it raises :class:`MemoryTooSmall`.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    # Python workers must run an interpreter with kquota importable: this one, or the advisor image's.
    os.environ.setdefault("PYSPARK_PYTHON", worker_python(master, sys.executable))
    builder = SparkSession.builder.appName(app_name)
    if master is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        master = "local[*]"
    if master:
        builder = builder.master(master)
    local = master is not None and master.startswith("local")
    settings = {
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.showConsoleProgress": "false",
        # A laptop's few cores want few shuffle partitions; a cluster keeps Spark's default.
        **({"spark.sql.shuffle.partitions": "8"} if local else {}),
    }
    if local and "spark.driver.memory" not in (conf or {}) and not os.environ.get("SPARK_DRIVER_MEMORY"):
        # Local mode's one JVM is driver and executors: size it from the machine (or the
        # container's memory limit), not Spark's 1g; refuse before starting a JVM that cannot fit.
        memory = total_memory()
        problem = local_memory_problem(memory)
        if problem is not None:
            raise MemoryTooSmall(problem)
        settings["spark.driver.memory"] = local_driver_memory(memory)
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


class Progress:
    """Prints which step runs and the progress of its Spark stages, from a polling thread."""

    def __init__(
        self,
        spark: SparkSession | None,
        stream: TextIO | None = None,
        enabled: bool = True,
        interval: float = 0.5,
        line_every: float = 5.0,
    ) -> None:
        self._spark = spark
        self._stream = stream or sys.stderr
        self._enabled = enabled
        self._interval = interval
        self._line_every = line_every
        self._tty = bool(getattr(self._stream, "isatty", lambda: False)())
        self._step = ""
        self._step_started = time.monotonic()
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_line = 0.0
        self.steps: list[tuple[str, float]] = []

    def __enter__(self) -> Progress:
        if self._enabled and self._spark is not None:
            self._thread = threading.Thread(target=self._run, name="kquota-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_step()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._enabled and self._tty:
            self._stream.write("\r\033[K")
            self._stream.flush()

    def _close_step(self) -> None:
        if self._step:
            elapsed = time.monotonic() - self._step_started
            self.steps.append((self._step, elapsed))
            if self._enabled:
                prefix = "\r\033[K" if self._tty else ""
                self._stream.write(f"{prefix}  {self._step}: done in {elapsed:.1f} s\n")
                self._stream.flush()

    def step(self, name: str) -> None:
        self._close_step()
        self._step = name
        self._step_started = time.monotonic()
        if self._spark is not None:
            self._spark.sparkContext.setJobDescription(name)

    def _run(self) -> None:
        assert self._spark is not None
        tracker = self._spark.sparkContext.statusTracker()
        while not self._stop.wait(self._interval):
            try:
                infos = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:  # noqa: BLE001 - the context is shutting down; progress is best effort
                return
            stages = [s for s in infos if s is not None]
            if not stages:
                continue
            done = sum(s.numCompletedTasks for s in stages)
            total = sum(s.numTasks for s in stages)
            ids = ",".join(str(s.stageId) for s in stages)
            elapsed = time.monotonic() - self._step_started
            if self._tty:
                width = 24
                filled = int(width * done / total) if total else 0
                bar = "#" * filled + "-" * (width - filled)
                self._stream.write(f"\r\033[K  {self._step} [{bar}] stage {ids}: {done}/{total} tasks, {elapsed:.0f} s")
                self._stream.flush()
            elif time.monotonic() - self._last_line >= self._line_every:
                self._last_line = time.monotonic()
                self._stream.write(f"  {self._step}: stage {ids}: {done}/{total} tasks ({elapsed:.0f} s)\n")
                self._stream.flush()


def spark_facts(spark: SparkSession) -> dict[str, Any]:
    """Where it ran and how much memory the driver JVM held at most (VmHWM; in local mode it did all the work)."""
    conf = spark.sparkContext.getConf()
    facts: dict[str, Any] = {
        "master": spark.sparkContext.master,
        "version": spark.version,
        "driver_memory": conf.get("spark.driver.memory", "1g"),
        "driver_peak_rss_mib": None,
    }
    try:
        jvm: Any = spark.sparkContext._jvm
        pid = int(jvm.java.lang.ProcessHandle.current().pid())
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                facts["driver_peak_rss_mib"] = round(int(line.split()[1]) / 1024)
    except (OSError, ValueError, AttributeError):
        pass  # not Linux, or no JVM handle (Spark Connect): the figure is left out, nothing else changes
    return facts
