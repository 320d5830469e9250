r"""A real KRaft Kafka cluster built from Maven Central jars, for tests and the demo.

``ensure_kafka`` resolves ``org.apache.kafka:kafka_2.13:<version>`` plus a
logging backend and the Prometheus JMX exporter agent with Maven into the cache
(``cache.root()/kafka-<version>``). ``KafkaCluster.start`` formats KRaft storage
(with SCRAM credentials for the superuser ``admin``) and runs N combined
broker+controller nodes on free loopback ports, each with three listeners
(five with ``tls=True``):

* ``PLAINTEXT`` (``cluster.bootstrap``): no authentication, principal
  ``User:ANONYMOUS``. With ``authorizer=True`` ANONYMOUS is a super user too:
  the brokers talk to each other on this listener, and it gives tests an admin
  path that needs no credentials. ACLs are therefore only meaningful on the SASL
  listener.
* ``SASL_PLAINTEXT`` (``cluster.sasl_bootstrap``): SCRAM-SHA-256,
  SCRAM-SHA-512 and PLAIN (PLAIN knows only ``admin``, from the JAAS config).
  The quota ``user`` of a client is its SASL username.
* ``CONTROLLER``: the KRaft quorum (static ``controller.quorum.voters``).
* With ``KafkaCluster.start(..., tls=True)`` only (harness/tls.py makes a
  throwaway CA and a broker certificate for ``IP:127.0.0.1``/``DNS:localhost``
  in ``<workdir>/tls``; ``cluster.ca_cert`` is the CA's PEM file):

  * ``SSL`` (``cluster.ssl_bootstrap``): mutual TLS, ``ssl.client.auth=required``.
    The principal is the client certificate's DN as Kafka prints it,
    ``User:CN=kquota-operator,OU=platform`` for a certificate from
    ``cluster.mint_client_cert("CN=kquota-operator,OU=platform")``.
  * ``SASL_SSL`` (``cluster.sasl_ssl_bootstrap``): TLS without client
    certificates plus SCRAM-SHA-256/512 (the same credentials as on
    ``SASL_PLAINTEXT``; no PLAIN). The principal is the SASL username.

  ``cluster.tls_client_config(...)`` gives confluent-kafka settings for both.

More client listeners: ``KafkaCluster.start(..., listeners=[Listener(name, protocol,
properties)])`` adds one per entry to every broker, on its own free port, with
the broker properties it needs (harness/oidc.py's OAUTHBEARER listener,
harness/kdc.py's GSSAPI one); ``cluster.listener_bootstrap(name)`` is its
bootstrap. ``jvm_options`` are added to every broker's JVM (system properties
such as Kafka 4.x's OAuth URL allow-list or ``java.security.krb5.conf``).

Kafka 4.3.1 is the default; ``KQUOTA_KAFKA_VERSION`` selects another (3.x works:
reload4j logging, ``kafka.admin.AclCommand``; 4.x: log4j2, ACL tool moved to
``org.apache.kafka.tools.AclCommand`` in the kafka-tools jar).
``kafka.admin.ConfigCommand`` and ``kafka.tools.StorageTool`` are in the core jar
in both.

ZooKeeper mode (3.x only; 4.0 removed it): ``KafkaCluster.start(..., zookeeper=True)``
first starts one ZooKeeper server (``org.apache.zookeeper.server.ZooKeeperServerMain``
from the zookeeper jar that kafka_2.13 3.x depends on, so nothing more is downloaded)
on a free port, then brokers (``broker.id``, ``zookeeper.connect``) with the same
PLAINTEXT/SASL/TLS listeners and metrics but no CONTROLLER listener and no storage
format. The superuser's SCRAM credentials, which KRaft gets at format time, are
created once the brokers are up, with AlterUserScramCredentials (KIP-554, Kafka
2.7+) over the PLAINTEXT listener, whose ANONYMOUS principal needs none. The
authorizer is ``kafka.security.authorizer.AclAuthorizer``. ZooKeeper is stopped
after the brokers (they deregister from it on a controlled shutdown).

Metrics: every broker runs ``jmx_prometheus_javaagent`` 1.0.1 with the rules in
``harness/jmx-exporter.yaml`` (``KafkaCluster.start(..., jmx_rules=path)`` gives it
another configuration); ``broker.metrics_url`` serves the Prometheus
text format. Names as exported (checked against a live 4.3.1 broker with quotas set):

* ``kafka_server_quota_byte_rate{resource="Produce"|"Fetch", user, clientId}``
* ``kafka_server_quota_throttle_time{resource="Produce"|"Fetch"|"Request"|"ControllerMutation", user, clientId}``
  (``NaN`` until a throttle happened)
* ``kafka_server_quota_request_time{resource="Request", user, clientId}``
* ``kafka_server_quota_tokens{resource="ControllerMutation", user, clientId}`` and
  ``kafka_server_quota_mutation_rate{resource="ControllerMutation", user, clientId}``

  Quota series exist once any quota is configured on the broker, for every
  active client. Labels follow the quota *bucket*, not the connection: a client
  governed by ``users/u`` or ``users/<default>`` has ``{resource, user}`` only; by
  ``clients/c`` or ``clients/<default>`` ``{resource, clientId}`` only; by a
  pair (including ``users/<default>/clients/<default>``) or by nothing (unlimited)
  both. Kafka's JmxReporter drops empty tags, hence the missing labels.
  Values are as Kafka puts them in the ObjectName: ``user`` is URL-encoded by
  Kafka's Sanitizer (``CN%3Dapp%2COU%3Dx%3Dy``, ``user%20with%20space``,
  ``%3Cdefault%3E`` for a user literally named ``<default>``); ``clientId`` is raw
  unless it has characters outside ``[A-Za-z0-9_%. -]``, then it is JMX-quoted:
  the label value is ``"c,1=x"`` *with* the double quotes (``\"`` in the text
  format) and ``\\``/``\"`` escapes inside.
* ``kafka_server_brokertopicmetrics_bytesinpersec_total{topic}`` and
  ``kafka_server_brokertopicmetrics_bytesoutpersec_total{topic}`` (counters, from
  ``Count``), ``kafka_server_brokertopicmetrics_bytesinpersec_oneminuterate{topic}``
  and ``..._bytesoutpersec_oneminuterate{topic}`` (gauges); the same names
  without a ``topic`` label are the all-topics totals. Internal topics
  (``__consumer_offsets``) appear too.
"""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import cache, procs
from harness.tls import BrokerTls, Credential

DEFAULT_VERSION = os.environ.get("KQUOTA_KAFKA_VERSION", "4.3.1")
#: The last 3.x release: `make test` runs it in ZooKeeper mode (tests/e2e/test_kafka_versions.py).
LAST_3X_VERSION = "3.9.2"
JMX_EXPORTER_VERSION = "1.0.1"
JMX_RULES = Path(__file__).with_name("jmx-exporter.yaml")
START_TIMEOUT = float(os.environ.get("KQUOTA_KAFKA_START_TIMEOUT", "240"))

# Logging backends that bind slf4j 1.7.36 (what kafka_2.13's pom uses in 3.9 and 4.x).
_LOG4J2_VERSION = "2.25.4"
_RELOAD4J_VERSION = "1.2.25"
_SLF4J_VERSION = "1.7.36"

# Broker JVM: small heap (three brokers must fit next to everything else) and a
# serial collector, which is the cheapest on a two-core box.
_BROKER_JVM = ["-Xmx512m", "-Xms256m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
# Command-line tools live for a second: skip C2 to start faster.
#: The tools print entity names: UTF-8 whatever the locale (Java 17 reads sun.stdout.encoding,
#: 19+ stdout.encoding), or a CJK or emoji name comes out as '???' under LANG=C.
_TOOL_JVM = [
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
    "-Dsun.stdout.encoding=UTF-8",
    "-Dstdout.encoding=UTF-8",
]

_SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _major(version: str) -> int:
    return int(version.split(".", 1)[0])


def _dependencies(version: str) -> list[tuple[str, str, str, list[tuple[str, str]]]]:
    """(groupId, artifactId, version, exclusions) for the lib/ directory."""
    deps: list[tuple[str, str, str, list[tuple[str, str]]]] = [
        ("org.apache.kafka", "kafka_2.13", version, []),
        ("io.prometheus.jmx", "jmx_prometheus_javaagent", JMX_EXPORTER_VERSION, []),
    ]
    if _major(version) >= 4:
        deps += [
            # AclCommand moved here in 4.0; connect-runtime (Jetty, Jersey, ...) is
            # only needed by Connect tools and would triple the download.
            ("org.apache.kafka", "kafka-tools", version, [("org.apache.kafka", "connect-runtime")]),
            ("org.apache.logging.log4j", "log4j-core", _LOG4J2_VERSION, []),
            ("org.apache.logging.log4j", "log4j-slf4j-impl", _LOG4J2_VERSION, []),
        ]
    else:
        deps += [
            ("ch.qos.reload4j", "reload4j", _RELOAD4J_VERSION, []),
            ("org.slf4j", "slf4j-reload4j", _SLF4J_VERSION, []),
        ]
    return deps


def _pom(version: str) -> str:
    parts = []
    for group, artifact, ver, exclusions in _dependencies(version):
        excl = "".join(
            f"<exclusion><groupId>{g}</groupId><artifactId>{a}</artifactId></exclusion>" for g, a in exclusions
        )
        parts.append(
            f"    <dependency><groupId>{group}</groupId><artifactId>{artifact}</artifactId>"
            f"<version>{ver}</version>" + (f"<exclusions>{excl}</exclusions>" if excl else "") + "</dependency>"
        )
    deps = "\n".join(parts)
    return f"""<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kquota.harness</groupId>
  <artifactId>kafka-lib</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def agent_jar(home: Path) -> Path:
    return home / f"jmx_prometheus_javaagent-{JMX_EXPORTER_VERSION}.jar"


def ensure_kafka(version: str = DEFAULT_VERSION) -> Path:
    """Return ``cache.root()/kafka-<version>`` holding ``lib/*.jar`` and the JMX agent jar."""
    home = cache.root() / f"kafka-{version}"
    if home.exists():
        return home
    if shutil.which("mvn") is None or shutil.which("java") is None:
        raise procs.ComponentError("Kafka needs java (17+) and mvn on PATH")
    with cache.locked(f"kafka-{version}"):
        if home.exists():
            return home
        # Built next to its final place (same filesystem) so publish is a rename.
        tmp = Path(tempfile.mkdtemp(prefix=f".kafka-{version}-", dir=cache.root()))
        try:
            procs.maven_dependencies(
                _pom(version),
                tmp,
                what=f"downloading Kafka {version} from Maven Central",
                log=cache.root() / "logs" / f"kafka-{version}-download.log",
            )
            # The agent is a shaded jar: keep it off the broker's classpath.
            (tmp / "lib" / agent_jar(tmp).name).rename(agent_jar(tmp))
            if not any((tmp / "lib").glob(f"kafka_2.13-{version}.jar")):
                raise procs.ComponentError(f"Kafka {version}: core jar missing after download")
            cache.publish_dir(tmp, home)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return home


def _cluster_id() -> str:
    # Kafka's Uuid.toString: URL-safe base64 of 16 bytes, no padding; Kafka
    # refuses ids starting with '-' (they look like command-line flags).
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _log_configs(workdir: Path) -> tuple[list[str], list[str]]:
    """JVM flags for brokers (INFO to stdout) and tools (WARN to stderr, stdout stays parseable).

    Both backends' properties are always passed: each reads only its own.
    """
    out: list[list[str]] = []
    for name, level, target4j2, target4j in (
        ("broker", "INFO", "SYSTEM_OUT", "System.out"),
        ("tools", "WARN", "SYSTEM_ERR", "System.err"),
    ):
        log4j2 = workdir / f"log4j2-{name}.properties"
        log4j2.write_text(
            "status = warn\n"
            "appender.console.type = Console\n"
            "appender.console.name = CONSOLE\n"
            f"appender.console.target = {target4j2}\n"
            "appender.console.layout.type = PatternLayout\n"
            "appender.console.layout.pattern = [%d] %p %m (%c)%n\n"
            f"rootLogger.level = {level}\n"
            "rootLogger.appenderRef.console.ref = CONSOLE\n"
            # The state-change and request loggers are chatty at INFO and add nothing here.
            "logger.statechange.name = state.change.logger\nlogger.statechange.level = WARN\n"
        )
        log4j = workdir / f"log4j-{name}.properties"
        log4j.write_text(
            f"log4j.rootLogger={level}, console\n"
            "log4j.appender.console=org.apache.log4j.ConsoleAppender\n"
            f"log4j.appender.console.Target={target4j}\n"
            "log4j.appender.console.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.console.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            "log4j.logger.state.change.logger=WARN\n"
        )
        out.append([f"-Dlog4j2.configurationFile={log4j2}", f"-Dlog4j.configuration=file:{log4j}"])
    return out[0], out[1]


@dataclass(frozen=True)
class Listener:
    """A client listener more (``KafkaCluster.start(listeners=...)``): its name, security protocol and properties."""

    name: str
    protocol: str
    #: Broker properties the listener needs (e.g. ``listener.name.<name>.sasl.enabled.mechanisms``).
    properties: dict[str, str]


@dataclass
class ZooKeeper:
    """One standalone ZooKeeper server for a ZooKeeper-mode cluster (Kafka 3.x)."""

    port: int
    config: Path
    log: Path
    proc: procs.Process

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    @classmethod
    def start(cls, home: Path, workdir: Path, log_flags: Sequence[str], timeout: float) -> ZooKeeper:
        zk_dir = workdir / "zookeeper"
        (zk_dir / "data").mkdir(parents=True, exist_ok=True)
        port = procs.free_port()
        config = zk_dir / "zoo.cfg"
        config.write_text(
            "tickTime=2000\n"
            f"dataDir={zk_dir / 'data'}\n"
            f"clientPort={port}\n"
            "clientPortAddress=127.0.0.1\n"
            "maxClientCnxns=0\n"
            # The AdminServer is Jetty, which kafka_2.13 does not bring (and no test needs it).
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr\n"
        )
        log = zk_dir / "zookeeper.log"
        argv = [
            "java",
            "-Xmx128m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            *log_flags,
            "-cp",
            str(home / "lib" / "*"),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(config),
        ]
        proc = procs.Process("zookeeper", argv, log, cwd=zk_dir)
        proc.start()
        zk = cls(port, config, log, proc)
        try:
            proc.wait_until(zk.serving, timeout, "ZooKeeper serving")
        except BaseException:
            proc.stop()
            raise
        return zk

    def serving(self) -> bool:
        """ZooKeeper's ``srvr`` four-letter word answers with its mode (standalone)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as s:
            s.sendall(b"srvr")
            data = b""
            while chunk := s.recv(4096):
                data += chunk
        return b"Mode:" in data

    def stop(self) -> None:
        self.proc.stop(timeout=10)


@dataclass
class Broker:
    """One node: combined broker+controller in KRaft mode, a broker in ZooKeeper mode."""

    node_id: int
    plaintext_port: int
    sasl_port: int
    controller_port: int
    metrics_port: int
    config: Path
    data_dir: Path
    log: Path
    proc: procs.Process
    #: TLS listeners' ports; 0 when the cluster was started without ``tls=True``.
    ssl_port: int = 0
    sasl_ssl_port: int = 0
    #: With ``tls="extra"``: TLS without client authentication, with the CA's certificate and with a custom one.
    tls_port: int = 0
    custom_tls_port: int = 0
    #: The plaintext listener for pods (``start(..., pod_host=...)``), else 0.
    pod_port: int = 0
    #: The ports of ``start(..., listeners=...)``, by listener name.
    listener_ports: dict[str, int] = field(default_factory=dict)

    @property
    def ports(self) -> dict[str, int]:
        ports = {
            "PLAINTEXT": self.plaintext_port,
            "SASL_PLAINTEXT": self.sasl_port,
            "METRICS": self.metrics_port,
        }
        if self.controller_port:
            ports["CONTROLLER"] = self.controller_port
        if self.ssl_port:
            ports |= {"SSL": self.ssl_port, "SASL_SSL": self.sasl_ssl_port}
        if self.tls_port:
            ports |= {"TLS": self.tls_port, "CUSTOMTLS": self.custom_tls_port}
        if self.pod_port:
            ports["POD"] = self.pod_port
        return ports | self.listener_ports

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.plaintext_port}"

    @property
    def sasl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_port}"

    @property
    def ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.ssl_port}"

    @property
    def sasl_ssl_bootstrap(self) -> str:
        return f"127.0.0.1:{self.sasl_ssl_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def metrics_text(self, timeout: float = 10.0) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=timeout) as resp:  # noqa: S310 - loopback http
            return str(resp.read().decode())


@dataclass
class KafkaCluster:
    version: str
    home: Path
    workdir: Path
    cluster_id: str
    authorizer: bool
    admin_user: str
    admin_password: str = field(repr=False)
    brokers: list[Broker]
    _tool_log_flags: list[str] = field(repr=False)
    #: Seconds from starting the JVMs to every broker being ready (format excluded).
    start_seconds: float = 0.0
    #: The CA and keystore of the TLS listeners (``start(..., tls=True)``), else None.
    tls: BrokerTls | None = field(default=None, repr=False)
    #: Broker properties laid over the harness's own (e.g. a client.quota.callback.class).
    extra_properties: dict[str, str] = field(default_factory=dict)
    #: Jars or class directories added to the brokers' classpath (e.g. the callback's classes).
    extra_classpath: tuple[Path, ...] = ()
    #: The JMX exporter configuration the brokers' agent runs (``start(..., jmx_rules=...)``).
    jmx_rules: Path = JMX_RULES
    #: The ZooKeeper server of a ZooKeeper-mode cluster (``start(..., zookeeper=True)``), else None.
    zookeeper: ZooKeeper | None = None
    #: A host address pods can reach (``start(..., pod_host=...)``): each broker also listens
    #: and advertises a plaintext POD listener there, since pods cannot reach 127.0.0.1.
    pod_host: str = ""
    #: The client listeners more (``start(..., listeners=...)``).
    listeners: tuple[Listener, ...] = ()

    def listener_bootstrap(self, name: str) -> str:
        """The bootstrap servers of a listener given to ``start(..., listeners=...)``."""
        return ",".join(f"127.0.0.1:{b.listener_ports[name]}" for b in self.brokers)

    @property
    def pod_bootstrap(self) -> str:
        """The POD listeners' bootstrap servers (needs ``start(..., pod_host=...)``)."""
        if not self.pod_host:
            raise ValueError("the cluster was started without pod_host")
        return ",".join(f"{self.pod_host}:{b.pod_port}" for b in self.brokers)

    @property
    def mode(self) -> str:
        """``"kraft"`` or ``"zookeeper"``."""
        return "kraft" if self.zookeeper is None else "zookeeper"

    # -- lifecycle -------------------------------------------------------------

    @classmethod
    def start(
        cls,
        workdir: Path,
        brokers: int = 1,
        authorizer: bool = False,
        version: str = DEFAULT_VERSION,
        timeout: float = START_TIMEOUT,
        tls: bool | str = False,
        extra_properties: dict[str, str] | None = None,
        extra_classpath: Sequence[Path] = (),
        jmx_rules: Path | None = None,
        zookeeper: bool = False,
        pod_host: str = "",
        listeners: Sequence[Listener] = (),
        jvm_options: Sequence[str] = (),
    ) -> KafkaCluster:
        """Format storage, start ``brokers`` nodes and wait until every one is ready.

        ``jmx_rules`` is the JMX exporter configuration the brokers' agents run instead of
        harness/jmx-exporter.yaml (other rules, other metric names); the file must outlive the cluster.
        ``zookeeper=True`` (Kafka 3.x only) runs the brokers in ZooKeeper mode instead of KRaft.
        ``pod_host`` (an address of this machine, e.g. harness.node's bridge) adds a plaintext
        POD listener on it to every broker, advertised as such, for clients in pods.
        ``tls="extra"`` is ``tls=True`` plus two SSL listeners without client authentication:
        ``TLS`` with the CA's broker certificate, ``CUSTOMTLS`` with one from a second CA
        (``cluster.custom_cert``), as a Strimzi listener with a custom certificate presents.
        ``listeners`` adds client listeners (see the module docstring); ``jvm_options`` are
        added to each broker's JVM.
        """
        if brokers < 1:
            raise ValueError("a cluster needs at least one broker")
        if zookeeper and _major(version) >= 4:
            raise ValueError(f"Kafka {version} has no ZooKeeper mode (removed in 4.0)")
        home = ensure_kafka(version)
        workdir.mkdir(parents=True, exist_ok=True)
        broker_log_flags, tool_log_flags = _log_configs(workdir)
        password = secrets.token_hex(16)
        cluster = cls(
            version=version,
            home=home,
            workdir=workdir,
            cluster_id=_cluster_id(),
            authorizer=authorizer,
            admin_user="admin",
            admin_password=password,
            brokers=[],
            _tool_log_flags=tool_log_flags,
            tls=BrokerTls.create(workdir, custom=tls == "extra") if tls else None,
            extra_properties=dict(extra_properties or {}),
            extra_classpath=tuple(extra_classpath),
            jmx_rules=Path(jmx_rules) if jmx_rules is not None else JMX_RULES,
            pod_host=pod_host,
            listeners=tuple(listeners),
        )
        per_broker = 8 if tls == "extra" else 6 if tls else 4
        ports = [[procs.free_port() for _ in range(per_broker)] for _ in range(brokers)]
        if zookeeper:
            for group in ports:
                group[2] = 0  # no CONTROLLER listener
            cluster.zookeeper = ZooKeeper.start(home, workdir, broker_log_flags, timeout)
        voters = ",".join(f"{i + 1}@127.0.0.1:{group[2]}" for i, group in enumerate(ports))
        for i, (plain, sasl, ctrl, metrics, *tls_ports) in enumerate(ports):
            node_id = i + 1
            node_dir = workdir / f"node-{node_id}"
            data_dir = node_dir / "data"
            node_dir.mkdir(parents=True, exist_ok=True)
            config = node_dir / "server.properties"
            pod_port = procs.free_port() if pod_host else 0
            listener_ports = {listener.name: procs.free_port() for listener in cluster.listeners}
            config.write_text(
                cluster._server_properties(
                    node_id, plain, sasl, ctrl, voters, data_dir, brokers, tls_ports, pod_port, listener_ports
                )
            )
            log = node_dir / "broker.log"
            argv = [
                "java",
                *_BROKER_JVM,
                *jvm_options,
                *broker_log_flags,
                f"-javaagent:{agent_jar(home)}=127.0.0.1:{metrics}:{cluster.jmx_rules}",
                "-cp",
                cluster._classpath(),
                "kafka.Kafka",
                str(config),
            ]
            proc = procs.Process(f"kafka-{node_id}", argv, log, cwd=node_dir)
            broker = Broker(node_id, plain, sasl, ctrl, metrics, config, data_dir, log, proc)
            if tls_ports:
                broker.ssl_port, broker.sasl_ssl_port = tls_ports[:2]
            if len(tls_ports) == 4:
                broker.tls_port, broker.custom_tls_port = tls_ports[2:]
            broker.pod_port = pod_port
            broker.listener_ports = listener_ports
            cluster.brokers.append(broker)
        started = time.monotonic()
        try:
            if cluster.zookeeper is None:
                cluster._format()
            for broker in cluster.brokers:
                broker.proc.start()
            cluster._wait_ready(cluster.brokers, timeout)
            if cluster.zookeeper is not None:
                for mechanism in _SCRAM_MECHANISMS:
                    cluster.create_scram_user(cluster.admin_user, cluster.admin_password, mechanism)
        except BaseException:
            cluster.stop()
            raise
        cluster.start_seconds = time.monotonic() - started
        return cluster

    def _classpath(self) -> str:
        return os.pathsep.join([str(self.home / "lib" / "*"), *(str(p) for p in self.extra_classpath)])

    def _server_properties(
        self,
        node_id: int,
        plain: int,
        sasl: int,
        ctrl: int,
        voters: str,
        data_dir: Path,
        count: int,
        tls_ports: Sequence[int] = (),
        pod_port: int = 0,
        listener_ports: dict[str, int] | None = None,
    ) -> str:
        rf = min(3, count)
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        plain_jaas = (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{self.admin_user}="{self.admin_password}";'
        )
        client_listeners = f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}"
        if self.zookeeper is None:
            props = {
                "process.roles": "broker,controller",
                "node.id": str(node_id),
                "controller.quorum.voters": voters,
                "listeners": f"{client_listeners},CONTROLLER://127.0.0.1:{ctrl}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                "CONTROLLER:PLAINTEXT",
                "controller.listener.names": "CONTROLLER",
            }
        else:
            props = {
                "broker.id": str(node_id),
                "zookeeper.connect": self.zookeeper.connect,
                "zookeeper.connection.timeout.ms": "30000",
                "listeners": client_listeners,
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            }
        props |= {
            "advertised.listeners": client_listeners,
            "inter.broker.listener.name": "PLAINTEXT",
            # The default is GSSAPI, which would need Kerberos.
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
            "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config": scram,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": scram,
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas,
            "log.dirs": str(data_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": "1",
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "true",
        }
        if self.authorizer:
            props["authorizer.class.name"] = (
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
                if self.zookeeper is None
                else "kafka.security.authorizer.AclAuthorizer"
            )
            # ANONYMOUS is the PLAINTEXT principal, used between brokers and
            # controllers and by tests as an admin path (see the module docstring).
            props["super.users"] = f"User:{self.admin_user};User:ANONYMOUS"
        if self.tls is not None and tls_ports:
            ssl_port, sasl_ssl_port = tls_ports[:2]
            tls_listeners = f",SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}"
            protocols = ",SSL:SSL,SASL_SSL:SASL_SSL"
            if len(tls_ports) == 4 and self.tls.custom_keystore is not None:
                tls_listeners += f",TLS://127.0.0.1:{tls_ports[2]},CUSTOMTLS://127.0.0.1:{tls_ports[3]}"
                protocols += ",TLS:SSL,CUSTOMTLS:SSL"
                props["listener.name.customtls.ssl.keystore.type"] = "PKCS12"
                props["listener.name.customtls.ssl.keystore.location"] = str(self.tls.custom_keystore)
                props["listener.name.customtls.ssl.keystore.password"] = self.tls.keystore_password
            props["listeners"] += tls_listeners
            props["advertised.listeners"] += tls_listeners
            props["listener.security.protocol.map"] += protocols
            props |= self.tls.server_properties()
            props["listener.name.ssl.ssl.client.auth"] = "required"
            props["listener.name.sasl_ssl.sasl.enabled.mechanisms"] = ",".join(_SCRAM_MECHANISMS)
            props["listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config"] = scram
            props["listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"] = scram
        if self.pod_host and pod_port:
            pod_listener = f",POD://{self.pod_host}:{pod_port}"
            props["listeners"] += pod_listener
            props["advertised.listeners"] += pod_listener
            props["listener.security.protocol.map"] += ",POD:PLAINTEXT"
        for listener in self.listeners:
            address = f",{listener.name}://127.0.0.1:{(listener_ports or {})[listener.name]}"
            props["listeners"] += address
            props["advertised.listeners"] += address
            props["listener.security.protocol.map"] += f",{listener.name}:{listener.protocol}"
            props |= listener.properties
        props |= self.extra_properties
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _format(self) -> None:
        scram = []
        for mechanism in _SCRAM_MECHANISMS:
            scram += ["--add-scram", f"{mechanism}=[name={self.admin_user},password={self.admin_password}]"]
        running: list[tuple[Broker, subprocess.Popen[bytes], Path]] = []
        # Formatting is one JVM per node; run them side by side.
        for broker in self.brokers:
            log = broker.config.with_name("format.log")
            with log.open("wb") as fh:
                popen = subprocess.Popen(
                    [
                        "java",
                        *_TOOL_JVM,
                        *self._tool_log_flags,
                        "-cp",
                        self._classpath(),
                        "kafka.tools.StorageTool",
                        "format",
                        "-t",
                        self.cluster_id,
                        "-c",
                        str(broker.config),
                        *scram,
                    ],
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            running.append((broker, popen, log))
        for broker, popen, log in running:
            if popen.wait(300) != 0:
                raise procs.ComponentError(
                    f"formatting storage of node {broker.node_id} failed; log {log}:\n{procs.log_tail(log)}"
                )

    def _broker_ready(self, broker: Broker, expected_brokers: int) -> bool:
        if not (_port_open(broker.plaintext_port) and _port_open(broker.metrics_port)):
            return False
        if broker.ssl_port and not (_port_open(broker.ssl_port) and _port_open(broker.sasl_ssl_port)):
            return False
        if not all(_port_open(port) for port in broker.listener_ports.values()):
            return False
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        metadata = admin.list_topics(timeout=5)
        if len(metadata.brokers) < expected_brokers:
            return False
        return "jvm_" in broker.metrics_text(timeout=5)

    def _wait_ready(self, brokers: Sequence[Broker], timeout: float) -> None:
        """Wait until each broker serves metadata listing every live broker and its metrics."""
        deadline = time.monotonic() + timeout
        pending = list(brokers)
        while pending:
            for broker in list(pending):
                if not broker.proc.alive():
                    code = broker.proc.popen.returncode if broker.proc.popen else None
                    raise procs.ComponentError(
                        f"{broker.proc.name} exited (code {code}) before it was ready; "
                        f"log {broker.log}:\n{procs.log_tail(broker.log)}"
                    )
                try:
                    ready = self._broker_ready(broker, len([b for b in self.brokers if b.proc.alive()]))
                except Exception:  # noqa: BLE001 - any failure means "not ready yet"
                    ready = False
                if ready:
                    pending.remove(broker)
            if not pending:
                return
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {b.proc.name} ({b.log}):\n{procs.log_tail(b.log, 30)}" for b in pending)
                raise procs.ComponentError(
                    f"Kafka {self.version}: brokers {[b.node_id for b in pending]} not ready "
                    f"within {timeout:.0f}s\n{tails}"
                )
            time.sleep(0.3)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM every broker at once, then SIGKILL what is left after ``grace`` seconds.

        All at once: stopped one by one, the last node of a quorum waits in vain
        for a controller to acknowledge its controlled shutdown.
        """
        live = [b.proc for b in self.brokers if b.proc.alive()]
        for proc in live:
            proc.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in live:
            assert proc.popen is not None
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
        for broker in self.brokers:
            broker.proc.stop(timeout=1)
        if self.zookeeper is not None:
            self.zookeeper.stop()

    def stop_broker(self, index: int) -> None:
        """Graceful stop (SIGTERM) of ``brokers[index]``."""
        self.brokers[index].proc.stop()

    def kill_broker(self, index: int) -> None:
        """SIGKILL of ``brokers[index]``, for fault tests."""
        self.brokers[index].proc.kill()

    def start_broker(self, index: int, timeout: float = START_TIMEOUT) -> None:
        """Start a stopped or killed broker again on its old ports and data, and wait for it."""
        broker = self.brokers[index]
        if broker.proc.alive():
            return
        broker.proc = procs.Process(broker.proc.name, broker.proc.argv, broker.log, cwd=broker.proc.cwd)
        broker.proc.start()
        self._wait_ready([broker], timeout)

    def advertise_sasl_at(self, index: int, port: int) -> None:
        """Make ``brokers[index]`` advertise its SASL listener at ``port`` (a proxy's), and restart it.

        Clients that bootstrap through the proxy then keep going through it: the
        metadata they get back names the proxy, not the broker.
        """
        broker = self.brokers[index]
        direct = f"SASL_PLAINTEXT://127.0.0.1:{broker.sasl_port}"
        lines = broker.config.read_text().splitlines()
        for n, line in enumerate(lines):
            if line.startswith("advertised.listeners="):
                assert direct in line, line
                lines[n] = line.replace(direct, f"SASL_PLAINTEXT://127.0.0.1:{port}")
        broker.config.write_text("\n".join(lines) + "\n")
        self.stop_broker(index)
        self.start_broker(index)

    # -- clients -----------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def sasl_bootstrap(self) -> str:
        return ",".join(b.sasl_bootstrap for b in self.brokers)

    @property
    def ssl_bootstrap(self) -> str:
        self._tls()
        return ",".join(b.ssl_bootstrap for b in self.brokers)

    @property
    def sasl_ssl_bootstrap(self) -> str:
        self._tls()
        return ",".join(b.sasl_ssl_bootstrap for b in self.brokers)

    @property
    def tls_bootstrap(self) -> str:
        """The TLS listeners without client authentication (``start(..., tls="extra")``)."""
        return ",".join(f"127.0.0.1:{b.tls_port}" for b in self.brokers)

    @property
    def custom_tls_bootstrap(self) -> str:
        """The TLS listeners whose brokers present ``custom_cert`` (``start(..., tls="extra")``)."""
        return ",".join(f"127.0.0.1:{b.custom_tls_port}" for b in self.brokers)

    @property
    def custom_cert(self) -> Path:
        """PEM file of the certificate the CUSTOMTLS listeners present (signed by another CA)."""
        custom = self._tls().custom
        if custom is None:
            raise ValueError("the custom certificate needs a cluster started with tls='extra'")
        return custom.cert

    @property
    def ca_cert(self) -> Path:
        """PEM file of the CA that signed the brokers' certificates (and ``mint_client_cert``'s)."""
        return self._tls().ca.cert

    def mint_client_cert(self, dn: str, name: str | None = None) -> Credential:
        """A client certificate and key (PEM files) for ``dn``, e.g. ``CN=app,OU=team``, from the cluster's CA.

        On the SSL listener its principal is ``User:<dn>``.
        """
        return self._tls().ca.issue(dn, name=name)

    def tls_client_config(
        self,
        cert: Credential | None = None,
        user: str | None = None,
        password: str | None = None,
        mechanism: str = "SCRAM-SHA-512",
        ca: Path | None = None,
    ) -> dict[str, Any]:
        """confluent-kafka settings: SSL (mutual TLS with ``cert``) without ``user``, SASL_SSL with it.

        ``ca`` replaces the cluster's CA as the trusted one (to test a wrong CA).
        """
        config: dict[str, Any] = {"ssl.ca.location": str(ca or self.ca_cert)}
        if cert is not None:
            config |= {"ssl.certificate.location": str(cert.cert), "ssl.key.location": str(cert.key)}
        if user is None:
            return config | {"bootstrap.servers": self.ssl_bootstrap, "security.protocol": "SSL"}
        if password is None:
            if user != self.admin_user:
                raise ValueError("a password is needed for users other than admin")
            password = self.admin_password
        return config | {
            "bootstrap.servers": self.sasl_ssl_bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }

    def _tls(self) -> BrokerTls:
        if self.tls is None:
            raise ValueError("TLS listeners need a cluster started with tls=True")
        return self.tls

    def client_config(
        self, user: str | None = None, password: str | None = None, mechanism: str = "SCRAM-SHA-512"
    ) -> dict[str, Any]:
        """confluent-kafka settings: PLAINTEXT without ``user``, SASL_PLAINTEXT with it."""
        if user is None:
            return {"bootstrap.servers": self.bootstrap}
        if password is None:
            if user != self.admin_user:
                raise ValueError("a password is needed for users other than admin")
            password = self.admin_password
        return {
            "bootstrap.servers": self.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }

    def create_scram_user(self, name: str, password: str, mechanism: str = "SCRAM-SHA-512") -> None:
        """Create (or update) a SCRAM credential and wait until every live broker accepts it."""
        from confluent_kafka.admin import (
            AdminClient,
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        mech = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}[mechanism]
        admin = AdminClient(self.client_config())
        upsert = UserScramCredentialUpsertion(name, ScramCredentialInfo(mech, 8192), password.encode())
        for future in admin.alter_user_scram_credentials([upsert], request_timeout=30).values():
            future.result()
        # Brokers learn credentials from the metadata log asynchronously.
        deadline = time.monotonic() + 30
        for broker in self.brokers:
            if not broker.proc.alive():
                continue
            config = dict(self.client_config(name, password, mechanism), **{"bootstrap.servers": broker.sasl_bootstrap})
            while True:
                try:
                    AdminClient(dict(config, log_level=0)).list_topics(timeout=3)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)

    # -- Kafka's own command-line tools ------------------------------------------

    def run_tool(
        self, main_class: str, *args: str, check: bool = False, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        argv = ["java", *_TOOL_JVM, *self._tool_log_flags, "-cp", self._classpath(), main_class, *args]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and result.returncode != 0:
            raise procs.ComponentError(
                f"{main_class} {' '.join(args)} failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}"
            )
        return result

    def kafka_configs(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Kafka's ConfigCommand (kafka-configs.sh) against the PLAINTEXT listener."""
        return self.run_tool("kafka.admin.ConfigCommand", "--bootstrap-server", self.bootstrap, *args, check=check)

    def add_quota_configs(self, entries: Sequence[tuple[str, str, str]]) -> None:
        """Set quotas as an operator by hand would: one ``kafka-configs --alter`` per
        (entity type, entity name, configs) entry, side by side (each is a JVM)."""
        with concurrent.futures.ThreadPoolExecutor(max(1, len(entries))) as pool:
            futures = [
                pool.submit(
                    self.kafka_configs,
                    "--alter",
                    "--entity-type",
                    etype,
                    "--entity-name",
                    name,
                    "--add-config",
                    config,
                    check=True,
                )
                for etype, name, config in entries
            ]
            for f in futures:
                f.result()

    @property
    def acl_command_class(self) -> str:
        return "org.apache.kafka.tools.AclCommand" if _major(self.version) >= 4 else "kafka.admin.AclCommand"

    def kafka_acls(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """Kafka's AclCommand (kafka-acls.sh) against the PLAINTEXT listener (a super user)."""
        return self.run_tool(self.acl_command_class, "--bootstrap-server", self.bootstrap, *args, check=check)

    def create_acls(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``kafka-acls --add --force ARGS``, e.g. ``("--allow-principal", "User:bob", "--operation",
        "Describe", "--cluster")``; fails loudly."""
        if not self.authorizer:
            raise ValueError("ACLs need a cluster started with authorizer=True")
        return self.kafka_acls("--add", "--force", *args, check=True)


@contextlib.contextmanager
def running(
    workdir: Path,
    brokers: int = 1,
    authorizer: bool = False,
    version: str = DEFAULT_VERSION,
    tls: bool = False,
    zookeeper: bool = False,
) -> Iterator[KafkaCluster]:
    cluster = KafkaCluster.start(
        workdir, brokers=brokers, authorizer=authorizer, version=version, tls=tls, zookeeper=zookeeper
    )
    try:
        yield cluster
    finally:
        cluster.stop()
