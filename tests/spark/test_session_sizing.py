"""A fresh advisor session in local mode gets half the machine as driver memory; a given value wins.

Each case starts its own JVM in a subprocess: spark.driver.memory only takes
effect when the JVM starts, and the shared test session is already running.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from kquota.advisor.params import local_driver_memory, total_memory

pytestmark = pytest.mark.spark

PROBE = """
import sys
from kquota.advisor.session import spark_session
conf = dict(a.split("=", 1) for a in sys.argv[1:])
s = spark_session("local[1]", "sizing-probe", conf=conf)
print(s.sparkContext.getConf().get("spark.driver.memory"))
s.stop()
"""


def probe(*conf: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, *conf],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
        env={**os.environ, **(env or {})},
    )
    return result.stdout.strip().splitlines()[-1]


def test_local_mode_takes_half_the_machine() -> None:
    # The machine's memory, or this process's cgroup limit when smaller (as in a container).
    assert probe() == local_driver_memory(total_memory())


def test_a_given_driver_memory_wins() -> None:
    assert probe("spark.driver.memory=1536m") == "1536m"
