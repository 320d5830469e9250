"""One local SparkSession for every Spark test: local[2], 4 shuffle partitions, no UI.

Starting a JVM costs seconds, so the session is shared by the whole test run;
tests build small inline DataFrames on it and never stop it. The pipeline's own
``getOrCreate`` returns this session, so CLI tests run on it too.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

# Without pyspark (the optional "spark" extra) these tests are not collected at all, instead of failing on import.
if importlib.util.find_spec("pyspark") is None:
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    # The Python workers must be this interpreter (the venv's), not whatever "python3" is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kquota-advisor-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
