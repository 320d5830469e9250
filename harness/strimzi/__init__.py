"""Strimzi's own CRDs and PKCS#12 stores, made here from what Strimzi publishes, for the tests beside Strimzi.

Strimzi's operators are not on any registry this machine reaches, but its API
model (``io.strimzi:api``) and its CRD generator (``io.strimzi:crd-generator``) are
on Maven Central. :func:`crds` runs that generator on that model with the
arguments Strimzi's own build uses (api/pom.xml of each release), which gives
byte for byte the CRDs Strimzi ships (``040-Crd-kafka.yaml``,
``044-Crd-kafkauser.yaml``; checked against the 1.2.0 and 0.49.1 release
files), so the API server validates test objects with Strimzi's real schemas
and serves exactly Strimzi's versions (1.x: ``v1`` only; 0.49: ``v1beta2`` and
``v1``, and for KafkaUser the older ones too). The generator is built for Java
21, so it runs on the newest JDK the machine has (Temurin 25 here).

:func:`truststore` and :func:`keystore` write PKCS#12 stores with Java's own
KeyStore API, as Strimzi's ``OpenSslCertIssuer`` does (StrimziStores.java): the
binary ``ca.p12`` and ``user.p12`` keys every default Strimzi Secret has.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness import cache, procs

HERE = Path(__file__).resolve().parent
#: The generator is only published for 1.2.0 (and old releases); it generates every release's model.
GENERATOR_VERSION = "1.2.0"
_COMMON = ["--label", "app:strimzi", "--label", "strimzi.io/crd-install:true", "--target-kube", "1.16+"]
_COMMON += ["--crd-api-version", "v1"]


@dataclass(frozen=True)
class Release:
    """How a Strimzi release's build generates its Kafka and KafkaUser CRDs (its api/pom.xml)."""

    version: str
    kafka_args: tuple[str, ...]
    kafka_user_args: tuple[str, ...]

    @property
    def kafka_versions(self) -> tuple[str, ...]:
        """The versions its Kafka CRD serves."""
        return tuple(self.kafka_args[self.kafka_args.index("--api-versions") + 1].split(","))


RELEASES = {
    "1.2.0": Release(
        "1.2.0",
        ("--api-versions", "v1", "--storage-version", "v1"),
        ("--api-versions", "v1", "--storage-version", "v1"),
    ),
    "0.49.1": Release(
        "0.49.1",
        ("--api-versions", "v1beta2,v1", "--describe-api-versions", "v1alpha1", "--storage-version", "v1beta2"),
        ("--api-versions", "v1alpha1,v1beta1,v1beta2,v1", "--storage-version", "v1beta2"),
    ),
}


def java21() -> str:
    """A ``java`` of version 21 or later (Strimzi's generator needs it); the machine's newest JDK."""
    candidates = [shutil.which("java") or "", *sorted(str(p) for p in Path("/usr/lib/jvm").glob("*/bin/java"))]
    best: tuple[int, str] | None = None
    for java in candidates:
        if not java:
            continue
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60, check=False).stderr
        m = re.search(r'version "(\d+)', out)
        if m and int(m.group(1)) >= 21 and (best is None or int(m.group(1)) > best[0]):
            best = (int(m.group(1)), java)
    if best is None:
        raise procs.ComponentError(
            "Strimzi's CRD generator needs Java 21 or later; none found on PATH or under /usr/lib/jvm"
        )
    return best[1]


def _pom(version: str) -> str:
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kquota.harness</groupId>
  <artifactId>strimzi-crds</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency><groupId>io.strimzi</groupId><artifactId>api</artifactId><version>{version}</version></dependency>
    <dependency><groupId>io.strimzi</groupId><artifactId>crd-generator</artifactId>
      <version>{GENERATOR_VERSION}</version></dependency>
  </dependencies>
</project>
"""


def crds(version: str = "1.2.0") -> Path:
    """``cache.root()/strimzi-crds-<version>`` with ``kafka.yaml`` and ``kafkauser.yaml``, Strimzi's own CRDs."""
    release = RELEASES[version]
    home = cache.root() / f"strimzi-crds-{version}"
    if home.exists():
        return home
    if shutil.which("mvn") is None:
        raise procs.ComponentError("Strimzi's CRDs need mvn on PATH")
    with cache.locked(f"strimzi-crds-{version}"):
        if home.exists():
            return home
        tmp = Path(tempfile.mkdtemp(prefix=f".strimzi-crds-{version}-", dir=cache.root()))
        logs = cache.root() / "logs"
        try:
            lib = procs.maven_dependencies(
                _pom(version),
                tmp,
                what=f"downloading Strimzi {version}'s API model from Maven Central",
                log=logs / f"strimzi-{version}-download.log",
            )
            java = java21()
            for model, args, out in (
                ("io.strimzi.api.kafka.model.kafka.Kafka", release.kafka_args, "kafka.yaml"),
                ("io.strimzi.api.kafka.model.user.KafkaUser", release.kafka_user_args, "kafkauser.yaml"),
            ):
                procs.run_checked(
                    [
                        java,
                        "-cp",
                        f"{tmp / 'lib'}/*",
                        "io.strimzi.crdgenerator.CrdGenerator",
                        *_COMMON,
                        *args,
                        "--yaml",
                        f"{model}={tmp / out}",
                    ],
                    what=f"generating Strimzi {version}'s {out}",
                    log=logs / f"strimzi-{version}-{out}.log",
                    cwd=tmp,
                    timeout=600,
                )
            shutil.rmtree(lib)
            cache.publish_dir(tmp, home)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return home


def _store(args: list[str]) -> None:
    java = shutil.which("java")
    if java is None:
        raise procs.ComponentError("PKCS#12 stores need java on PATH")
    result = subprocess.run(
        [java, str(HERE / "StrimziStores.java"), *args], capture_output=True, text=True, timeout=120, check=False
    )
    if result.returncode != 0:
        raise procs.ComponentError(f"StrimziStores {args[0]} failed:\n{result.stderr}")


def truststore(cert_pem: Path, out: Path, password: str, alias: str = "ca.crt") -> bytes:
    """A PKCS#12 truststore holding ``cert_pem`` (Strimzi's ``ca.p12``); its bytes."""
    _store(["truststore", str(cert_pem), alias, str(out), password])
    return out.read_bytes()


def keystore(key_pem: Path, cert_pem: Path, out: Path, password: str, alias: str) -> bytes:
    """A PKCS#12 keystore holding a key and its certificate (Strimzi's ``user.p12``); its bytes."""
    _store(["keystore", str(key_pem), str(cert_pem), alias, str(out), password])
    return out.read_bytes()
