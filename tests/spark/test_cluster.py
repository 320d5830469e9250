"""One answer everywhere: ``kquota advise`` on a real Spark standalone cluster gives local mode's answer.

A standalone master and one worker are started from the pyspark install (``spark-class``, the
same classes ``start-master.sh`` runs); ``kquota advise --master spark://...`` runs in its own
process, as a user runs it, and so do ``local[1]`` and ``local[2]``. The recommendations, every
per-entity statistic and the manifests must be identical: exact percentiles and sums in sorted
order do not depend on the partitioning, the number of executors or which task finishes first.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from harness.procs import Process, free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]

MI = 2**20
#: The planted heavy hitters and how many times their base rate is multiplied.
HEAVY = {"user-07": 400, "user-23": 700}


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """spark://127.0.0.1:PORT of a master with one 2-core worker; both stop with the test process."""
    home = _spark_home()
    work = tmp_path_factory.mktemp("spark-standalone")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = os.environ | {
        "SPARK_HOME": str(home),
        "SPARK_LOG_DIR": str(work / "logs"),
        "SPARK_WORKER_DIR": str(work / "worker"),
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    spark_class = str(home / "bin" / "spark-class")
    master = Process(
        "spark-master",
        [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port)),
            *("--webui-port", str(ui)),
        ],
        work / "master.log",
        env=env,
    )
    master.start()
    master.wait_until(lambda: _listening(port), 60, "the master listened")
    url = f"spark://127.0.0.1:{port}"
    worker = Process(
        "spark-worker",
        [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            url,
            *("--cores", "2", "--memory", "2g"),
            *("--host", "127.0.0.1", "--webui-port", str(worker_ui)),
        ],
        work / "worker.log",
        env=env,
    )
    worker.start()
    worker.wait_until(lambda: "Successfully registered with master" in worker.log.read_text(), 60, "registered")
    try:
        yield url
    finally:
        for proc in (worker, master):
            if proc.popen is not None and proc.alive():
                proc.popen.terminate()
                try:
                    proc.popen.wait(20)
                except subprocess.TimeoutExpired:
                    proc.popen.kill()


def write_samples(path: Path) -> None:
    """40 users x 3 brokers x 400 timestamps, lognormal, two heavy hitters on broker b2 only (46,400 samples).

    Values have 6 significant digits, so neighbouring ranks differ and a percentile one rank off, or a
    mean summed in another order, would show.
    """
    rng = np.random.default_rng(5)
    users = [f"user-{i:02d}" for i in range(40)]
    base = {u: 50_000.0 * float(np.exp(rng.normal(0.0, 0.6))) for u in users}
    for u, factor in HEAVY.items():
        base[u] *= factor
    rows: list[str] = ["timestamp,broker,user,client_id,produce_byte_rate,fetch_byte_rate,produce_throttle_time_ms"]
    t0 = 1_714_521_600  # 2024-05-01T00:00:00Z
    for step in range(400):
        for broker in ("b0", "b1", "b2"):
            noise = np.exp(rng.normal(0.0, 0.3, len(users)))
            for u, x in zip(users, noise, strict=True):
                if u in HEAVY and broker != "b2":
                    continue  # the heavy hitters' partitions lead on b2: that broker alone is overloaded
                rate = float(f"{base[u] * x:.6g}")
                rows.append(f"{t0 + 10 * step},{broker},{u},,{rate},{float(f'{2 * rate:.6g}')},0")
    path.write_text("\n".join(rows) + "\n")


def advise(master: str, source: Path, out: Path) -> dict[str, Any]:
    argv = [sys.executable, "-m", "kquota.advisor", "advise", "--input", str(source), "--out", str(out)]
    argv += ["--master", master, "--broker-capacity", "50Mi", "--namespace", "team-a", "--quiet"]
    # The executors on the worker must import kquota from this checkout, as the driver does.
    env = os.environ | {"PYSPARK_PYTHON": sys.executable}
    started = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"{master}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    report: dict[str, Any] = json.loads((out / "report.json").read_text())
    manifests = {p.name: yaml.safe_load(p.read_text()) for p in sorted((out / "manifests").glob("*.yaml"))}
    return {
        "seconds": time.monotonic() - started,
        "recommendations": report["recommendations"],
        "entities": report["entities"],
        "capacity": report["capacity"],
        "manifests": manifests,
        "summary": proc.stdout,
    }


def test_a_standalone_cluster_and_local_mode_give_identical_answers(standalone: str, tmp_path: Path) -> None:
    source = tmp_path / "samples.csv"
    write_samples(source)
    masters = (standalone, "local[1]", "local[2]")
    runs = {m: advise(m, source, tmp_path / m.replace("/", "_").replace(":", "_")) for m in masters}
    local = runs["local[1]"]
    for master in (standalone, "local[2]"):
        for part in ("recommendations", "entities", "capacity", "manifests"):
            assert runs[master][part] == local[part], f"{master} and local[1] differ in {part}"
    # The planted heavy hitters are the overrides, exactly, and everyone else has the default.
    overrides = {r["user"] for r in local["recommendations"] if not r["is_default"]}
    assert overrides == set(HEAVY)
    assert len(local["entities"]) == 80  # 40 users x (produce, fetch)
    # ... and the broker their traffic overloads is the one over capacity, exactly.
    status = {(c["broker"], c["resource"]): c["status"] for c in local["capacity"]}
    assert {k for k, v in status.items() if v == "over-capacity"} == {("b2", "produce"), ("b2", "fetch")}, status
    assert "broker b2 produce OVER CAPACITY" in local["summary"]
