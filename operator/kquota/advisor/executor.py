"""A Spark executor in a Kubernetes pod started from the advisor image: ``kquota executor``.

With ``--master k8s://...`` Spark's Kubernetes backend starts executor pods
from ``spark.kubernetes.container.image`` with the single argument
``executor`` and the executor's settings in the environment (its id, cores,
memory, the driver's address, JVM options: Spark's ``BasicExecutorFeatureStep``).
Spark's own images answer that with their entrypoint script; the advisor
image's entrypoint is ``kquota``, so ``kquota executor`` (a subcommand kept out
of ``--help``) does the same: it starts the executor JVM,
``KubernetesExecutorBackend``, on the Spark jars pyspark ships. So one image
is the driver (a Job, ``deploy/advisor/spark-on-kubernetes.yaml``) and every
executor, with the same Spark version by construction. Nothing here imports
pyspark until the JVM is started (``pyspark`` only tells where its jars are).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Final

#: The executor's main class in Spark 4's Kubernetes backend.
BACKEND: Final = "org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend"
#: Environment variables Spark's Kubernetes backend sets on an executor pod, and the backend's flag for each.
ARGUMENTS: Final = (
    ("SPARK_DRIVER_URL", "--driver-url"),
    ("SPARK_EXECUTOR_ID", "--executor-id"),
    ("SPARK_EXECUTOR_CORES", "--cores"),
    ("SPARK_APPLICATION_ID", "--app-id"),
    ("SPARK_EXECUTOR_POD_IP", "--hostname"),
    ("SPARK_RESOURCE_PROFILE_ID", "--resourceProfileId"),
    ("SPARK_EXECUTOR_POD_NAME", "--podName"),
)
_JAVA_OPT: Final = "SPARK_JAVA_OPT_"


class NotAnExecutorPod(Exception):
    """The environment lacks what Spark sets on an executor pod; the message names what is missing."""


def executor_command(env: Mapping[str, str], spark_home: Path, java: str) -> list[str]:
    """The executor JVM's command line from the pod's environment, as Spark's Kubernetes backend sets it.

    JVM options come from ``SPARK_JAVA_OPT_0``, ``_1`` ... in their order (the driver's port,
    ``spark.executor.extraJavaOptions``, Java 17's module flags); the heap is ``SPARK_EXECUTOR_MEMORY``;
    the class path is the Spark configuration Spark mounts (``SPARK_CONF_DIR``), any
    ``spark.executor.extraClassPath`` (``SPARK_CLASSPATH``) and pyspark's jars.
    """
    missing = [name for name, _ in ARGUMENTS if not env.get(name)]
    if missing or not env.get("SPARK_EXECUTOR_MEMORY"):
        raise NotAnExecutorPod(
            "kquota executor runs a Spark executor in a pod Spark's Kubernetes backend started "
            f"(--master k8s://...); missing: {', '.join(missing or ['SPARK_EXECUTOR_MEMORY'])}"
        )
    options = sorted(
        (
            (int(k[len(_JAVA_OPT) :]), v)
            for k, v in env.items()
            if k.startswith(_JAVA_OPT) and k[len(_JAVA_OPT) :].isdigit()
        ),
    )
    memory = env["SPARK_EXECUTOR_MEMORY"]
    classpath = [env[k] for k in ("SPARK_CONF_DIR", "SPARK_CLASSPATH") if env.get(k)] + [str(spark_home / "jars" / "*")]
    command = [java, *(v for _, v in options), f"-Xms{memory}", f"-Xmx{memory}", "-cp", ":".join(classpath), BACKEND]
    for name, flag in ARGUMENTS:
        command += [flag, env[name]]
    return command


def spark_home() -> Path:
    """Where pyspark's jars are: ``SPARK_HOME``, else the installed pyspark package."""
    if os.environ.get("SPARK_HOME"):
        return Path(os.environ["SPARK_HOME"])
    from pyspark.find_spark_home import _find_spark_home  # noqa: PLC0415 - only the executor needs it

    return Path(_find_spark_home())


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found:
        raise NotAnExecutorPod("no java on PATH (or JAVA_HOME): the executor needs Java 17 or later")
    return found


def run() -> None:
    """Replace this process with the executor JVM (its exit code is the pod's)."""
    command = executor_command(os.environ, spark_home(), java())
    os.execv(command[0], command)  # noqa: S606 - the command is Spark's own executor, built from its pod's env
