"""``kquota executor``: the Spark executor JVM started from the environment Spark's Kubernetes backend gives a pod."""

from __future__ import annotations

from pathlib import Path

import pytest

from kquota.advisor.executor import BACKEND, NotAnExecutorPod, executor_command
from kquota.advisor.params import worker_python
from kquota.cli.main import main

pytestmark = pytest.mark.unit

#: What Spark 4.3's BasicExecutorFeatureStep sets (names read from spark-kubernetes_2.13-4.3.0.jar's Constants).
POD_ENV = {
    "SPARK_DRIVER_URL": "spark://CoarseGrainedScheduler@10.213.0.7:7078",
    "SPARK_EXECUTOR_ID": "2",
    "SPARK_EXECUTOR_CORES": "1",
    "SPARK_EXECUTOR_MEMORY": "1024m",
    "SPARK_APPLICATION_ID": "spark-0a1b",
    "SPARK_EXECUTOR_POD_IP": "10.213.0.9",
    "SPARK_EXECUTOR_POD_NAME": "kquota-advise-exec-2",
    "SPARK_RESOURCE_PROFILE_ID": "0",
    "SPARK_CONF_DIR": "/opt/spark/conf",
    "SPARK_JAVA_OPT_10": "-Dspark.blockManager.port=7079",
    "SPARK_JAVA_OPT_0": "-XX:+IgnoreUnrecognizedVMOptions",
    "SPARK_JAVA_OPT_1": "-Dspark.driver.port=7078",
    "HOME": "/tmp",
}


def test_the_executor_command_is_the_backend_with_the_pods_settings_in_order() -> None:
    command = executor_command(POD_ENV, Path("/opt/kquota/lib/pyspark"), "/usr/bin/java")
    assert command == [
        "/usr/bin/java",
        # JVM options by their index, 10 after 1 (not as strings sort).
        "-XX:+IgnoreUnrecognizedVMOptions", "-Dspark.driver.port=7078", "-Dspark.blockManager.port=7079",
        "-Xms1024m", "-Xmx1024m",
        "-cp", "/opt/spark/conf:/opt/kquota/lib/pyspark/jars/*",
        BACKEND,
        "--driver-url", "spark://CoarseGrainedScheduler@10.213.0.7:7078",
        "--executor-id", "2", "--cores", "1", "--app-id", "spark-0a1b", "--hostname", "10.213.0.9",
        "--resourceProfileId", "0", "--podName", "kquota-advise-exec-2",
    ]  # fmt: skip


def test_outside_an_executor_pod_it_names_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    env = {k: v for k, v in POD_ENV.items() if k != "SPARK_DRIVER_URL"}
    with pytest.raises(NotAnExecutorPod, match="missing: SPARK_DRIVER_URL"):
        executor_command(env, Path("/x"), "java")
    assert main(["executor"]) == 1
    assert "kquota executor runs a Spark executor in a pod" in capsys.readouterr().err


def test_the_executor_subcommand_is_not_offered_to_people(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "executor" not in capsys.readouterr().out
    assert main(["completion", "bash"]) == 0
    assert "executor" not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        ("k8s://https://kubernetes.default.svc:443", "/opt/kquota/bin/python"),
        ("local[*]", "/venv/bin/python"),
        ("spark://127.0.0.1:7077", "/venv/bin/python"),
        (None, "/venv/bin/python"),
    ],
)
def test_python_workers_on_kubernetes_run_the_advisor_images_python(master: str | None, expected: str) -> None:
    assert worker_python(master, "/venv/bin/python") == expected
    assert "/opt/kquota/bin" in (Path(__file__).parents[2] / "Dockerfile.advisor").read_text()
