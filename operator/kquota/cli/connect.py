"""How the CLI reaches a Kafka cluster, and what it learns from Kubernetes about it.

Three ways, combinable:

* ``--bootstrap-server HOST:PORT``: straight to the brokers, PLAINTEXT unless
  ``--command-config`` says otherwise.
* ``--command-config FILE``: the client properties file ``kafka-configs
  --command-config`` takes (``security.protocol``, ``sasl.mechanism``,
  ``sasl.jaas.config`` with username and password, PEM ``ssl.*`` files), so
  the same file serves both tools.
* ``--cluster NAME``: a KafkaCluster resource, read through the current
  kubeconfig (``--kubeconfig``, ``--context``), with its Secret for the
  credentials, as the operator reads it. This also gives what only the
  cluster knows: the ownership ledger (what kquota owns and would remove),
  the quota resources already applied, the unmanaged policy, protected
  principals and tenancy grants. ``--bootstrap-server``/``--command-config``
  still override the connection (a port-forward from a desk).

Credentials never reach the output: :class:`ConnectionSettings` keeps the
password out of its repr, and no message here quotes a property value.

Before kafka-python is given the bootstrap servers, each is tried with a
plain TCP connect (:func:`probe`): kafka-python retries a refused port or an
unknown host until its timeout and then says only "Unable to bootstrap",
while a CI log should say at once which address failed and why.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import os
import queue
import re
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kquota.api.manifest import QUOTA_KINDS as PLURALS
from kquota.cli import common
from kquota.domain.callback import CALLBACK_CONFIG, callbacks_from_configs
from kquota.domain.claims import ResourceClaim as Claimant
from kquota.domain.claims import claim_from_body as claimant_from_object
from kquota.domain.entities import Entity, QuotaKey
from kquota.domain.explain import number
from kquota.domain.guard import APPROVAL_ANNOTATION, GuardLimits
from kquota.domain.plan import EntityChange, Protection, UnmanagedPolicy
from kquota.domain.tenancy import Grant
from kquota.kafka.admin import QuotaAdmin
from kquota.kafka.errors import EntityResult, KafkaNotAuthorized, KafkaUnavailable, QuotaRequestError
from kquota.kafka.settings import ConnectionSettings

if TYPE_CHECKING:
    from kquota.k8s.api import Kube
    from kquota.k8s.published import PublishedSettings
    from kquota.reconcile.settings import OperatorSettings

#: The ConfigMap where the operator publishes its default cluster (kquota.k8s.published.NAME, which
#: imports the Kubernetes client: offline commands do not pay for it).
PUBLISHED_NAME: Final = "kquota-operator"

DEFAULT_LEDGER_NAMESPACE: Final = "kquota-system"
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
PROTOCOLS: Final = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

Quotas = dict[Entity, dict[QuotaKey, float]]


class TargetError(Exception):
    """The cluster cannot be reached or described; the message says what to fix."""


# --- kafka-configs --command-config files ------------------------------------------


def _unescape(text: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", text[i + 2 : i + 6]):
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    current = ""
    continuing = False
    for raw in text.splitlines():
        line = raw.lstrip() if continuing or not current else raw
        if not continuing and (not line.strip() or line.lstrip()[:1] in ("#", "!")):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            current += line[:-1]
            continuing = True
            continue
        lines.append((current + line).lstrip())
        current, continuing = "", False
    if current:
        lines.append(current.lstrip())
    return lines


def parse_properties(text: str) -> dict[str, str]:
    """A Java ``.properties`` file as ``java.util.Properties.load`` reads it (comments, continuations, escapes)."""
    out: dict[str, str] = {}
    for line in _logical_lines(text):
        match = re.match(r"((?:\\.|[^\\=:\s])*)\s*[=:]?\s*(.*)$", line, re.S)
        assert match is not None  # the pattern matches any string
        out[_unescape(match.group(1))] = _unescape(match.group(2))
    return out


_JAAS_OPTION: Final = re.compile(r'([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def parse_jaas(text: str) -> dict[str, str]:
    """The options of a ``sasl.jaas.config`` value: ``LoginModule required username="u" password="p";``."""
    match = re.match(r"\s*[A-Za-z0-9_.$]+\s+(required|requisite|sufficient|optional)\b(.*)$", text, re.S)
    if not match:
        raise TargetError("sasl.jaas.config is not '<LoginModule> required key=\"value\" ...;'")
    body = match.group(2).strip()
    options: dict[str, str] = {}
    pos = 0
    while pos < len(body):
        if body[pos].isspace():
            pos += 1
            continue
        if body[pos] == ";":
            break
        option = _JAAS_OPTION.match(body, pos)
        if option is None:
            raise TargetError('sasl.jaas.config has an option that is not key=value or key="value"')
        quoted = option.group(2)
        options[option.group(1)] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else option.group(3)
        pos = option.end()
    return options


def _pem_file(props: Mapping[str, str], prefix: str) -> str | None:
    location = props.get(f"{prefix}.location")
    if not location:
        return None
    kind = props.get(f"{prefix}.type", "").upper()
    if kind not in ("", "PEM"):
        raise TargetError(
            f"{prefix}.type {kind} is not supported: kquota reads PEM files (convert with keytool/openssl)"
        )
    return location


def settings_from_properties(props: Mapping[str, str], bootstrap: str | None, timeout: float) -> ConnectionSettings:
    """Connection settings from client properties; ``bootstrap`` overrides ``bootstrap.servers``."""
    servers = bootstrap or props.get("bootstrap.servers")
    if not servers:
        raise TargetError("no brokers: give --bootstrap-server, bootstrap.servers in --command-config, or --cluster")
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise TargetError(f"security.protocol {protocol} is not one of {', '.join(PROTOCOLS)}")
    conn: dict[str, Any] = {
        "bootstrap_servers": servers,
        "security_protocol": protocol,
        "request_timeout_ms": int(timeout * 1000),
        "connect_timeout_ms": int(timeout * 1000),
    }
    if protocol.startswith("SASL_"):
        mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
        if mechanism not in SASL_MECHANISMS:
            raise TargetError(f"sasl.mechanism {mechanism} is not supported; use one of {', '.join(SASL_MECHANISMS)}")
        jaas = props.get("sasl.jaas.config")
        if not jaas:
            raise TargetError("SASL needs sasl.jaas.config with username and password in --command-config")
        options = parse_jaas(jaas)
        if "username" not in options or "password" not in options:
            raise TargetError('sasl.jaas.config needs username="..." and password="..."')
        conn |= {
            "sasl_mechanism": mechanism,
            "sasl_username": options["username"],
            "sasl_password": options["password"],
        }
    if protocol.endswith("SSL"):
        conn["ssl_cafile"] = _pem_file(props, "ssl.truststore")
        keystore = _pem_file(props, "ssl.keystore")
        if keystore:
            # A PEM keystore file holds the certificate chain and the key, which Python's ssl loads from one file.
            conn["ssl_certfile"] = keystore
        if props.get("ssl.key.password") or props.get("ssl.keystore.password"):
            raise TargetError("encrypted private keys are not supported: use an unencrypted PEM key")
    return ConnectionSettings(**conn)


def read_command_config(path: str) -> dict[str, str]:
    try:
        return parse_properties(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise TargetError(f"--command-config {path}: cannot read: {exc.strerror}") from None


# --- arguments -----------------------------------------------------------------------


def add_connection_args(parser: argparse.ArgumentParser, kube_help: str) -> None:
    """The flags every command that talks to a cluster takes."""
    group = parser.add_argument_group("connection")
    group.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]", help="brokers to connect to")
    group.add_argument(
        "--command-config",
        metavar="FILE",
        help="Kafka client properties, as for kafka-configs (security.protocol, sasl.mechanism, sasl.jaas.config)",
    )
    group.add_argument("--cluster", metavar="NAME", help=kube_help)
    group.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
    group.add_argument("--context", metavar="NAME", help="kubeconfig context (default: the current one)")
    group.add_argument(
        "--ledger-namespace",
        metavar="NS",
        default=os.environ.get("KQUOTA_NAMESPACE", DEFAULT_LEDGER_NAMESPACE),
        help="the operator's namespace, where the ownership ledger is (default %(default)s)",
    )
    group.add_argument(
        "--default-cluster",
        metavar="NAME",
        default=os.environ.get("KQUOTA_DEFAULT_CLUSTER") or None,
        help="the operator's default KafkaCluster, for resources without clusterRef (default $KQUOTA_DEFAULT_CLUSTER, "
        "else what the operator publishes in ConfigMap kquota-operator of --ledger-namespace)",
    )
    group.add_argument(
        "--timeout", type=float, default=30.0, metavar="SECONDS", help="Kafka connect and request timeout"
    )


def has_connection(args: argparse.Namespace) -> bool:
    return bool(args.bootstrap_server or args.command_config or args.cluster)


def direct_connection(args: argparse.Namespace, fallback_bootstrap: str | None = None) -> ConnectionSettings | None:
    """Settings from --bootstrap-server / --command-config, or None when neither is given.

    ``fallback_bootstrap`` (the KafkaCluster's) is used when neither the flag nor
    the properties file names the brokers.
    """
    if not args.bootstrap_server and not args.command_config:
        return None
    props = read_command_config(args.command_config) if args.command_config else {}
    bootstrap = args.bootstrap_server or props.get("bootstrap.servers") or fallback_bootstrap
    return settings_from_properties(props, bootstrap, args.timeout)


# --- the target cluster ------------------------------------------------------------


@dataclass(slots=True)
class Target:
    """A Kafka cluster and what is known about it. None means "not known" (no Kubernetes access)."""

    connection: ConnectionSettings
    #: The KafkaCluster's name, with --cluster.
    cluster: str | None = None
    policy: UnmanagedPolicy = UnmanagedPolicy.IGNORE
    protection: Protection = dataclasses.field(default_factory=Protection)
    grants: tuple[Grant, ...] | None = None
    ledger: Quotas | None = None
    #: The quota resources in the Kubernetes cluster that target this KafkaCluster.
    claimants: list[Claimant] | None = None
    ledger_namespace: str = DEFAULT_LEDGER_NAMESPACE
    #: With --cluster, why the ledger could not be read (when the command could do without it).
    ledger_problem: str | None = None
    #: The operator's default cluster (resources without clusterRef target it), when known.
    default_cluster: str | None = None
    #: Where ``default_cluster`` comes from, in words.
    default_cluster_source: str | None = None
    #: The operator's settings as far as the CLI knows them (published ones, else the defaults).
    settings: OperatorSettings | None = None
    #: The operator's own principals on this cluster (always protected).
    principals: frozenset[str] = frozenset()
    #: The mass-removal guard's limits, and the KafkaCluster's current approval annotation.
    guard: GuardLimits = dataclasses.field(default_factory=GuardLimits)
    approval: str | None = None
    #: The KafkaCluster's spec.quotaCallback.honoursEntityQuotas.
    callback_honoured: bool = False

    def describe(self) -> str:
        where = self.connection.bootstrap_servers
        return f"cluster {self.cluster} ({where})" if self.cluster else where


async def _open_kube(kubeconfig: str | None, context: str | None) -> Kube:
    from kquota.k8s.api import Kube, connect

    if context is None:
        return Kube(await connect(kubeconfig))
    # kquota.k8s.api.connect has no context parameter yet; until it does, the
    # context is chosen here with the same client library it uses.
    from kubernetes.aio import client, config

    cfg = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)  # type: ignore[no-untyped-call]
    return Kube(client.ApiClient(configuration=cfg))


def _api_error(exc: Exception, what: str) -> TargetError:
    status = getattr(exc, "status", None)
    if status == 404:
        return TargetError(f"{what}: not found")
    if status in (401, 403):
        return TargetError(f"{what}: not allowed (HTTP {status}); check your kubeconfig and RBAC")
    if status is not None:
        return TargetError(f"{what}: HTTP {status} {getattr(exc, 'reason', '')}".rstrip())
    return TargetError(f"{what}: cannot reach the Kubernetes API: {type(exc).__name__}: {exc}")


def choose_default_cluster(
    flag: str | None, published: PublishedSettings | None, problem: str | None, namespace: str
) -> tuple[str, str, str | None]:
    """The default cluster, where it comes from, and a warning when the flag and the operator disagree.

    ``flag`` is --default-cluster (or $KQUOTA_DEFAULT_CLUSTER); ``published``
    what the operator wrote in ConfigMap kquota-operator, None when absent or
    unreadable (``problem`` says why). Without either there is no guessing:
    a wrong default cluster puts every resource without clusterRef on the
    wrong cluster, and the plan shows removals that will not happen.
    """
    where = f"ConfigMap {namespace}/{PUBLISHED_NAME}"
    if flag:
        warning = None
        if published is not None and published.default_cluster != flag:
            warning = (
                f"--default-cluster {flag} is not the operator's: it runs with {published.default_cluster} "
                f"({where}); using {flag} as asked"
            )
        return flag, "--default-cluster", warning
    if published is not None:
        return published.default_cluster, f"the operator's, from {where}", None
    why = problem or f"no {where}: no kquota operator that publishes it has started with this ledger namespace"
    raise TargetError(
        f"the operator's default cluster is unknown ({why}); pass --default-cluster NAME, the operator's "
        "KQUOTA_DEFAULT_CLUSTER (Helm: operator.defaultCluster, else the first of kafka.clusters), or "
        "--ledger-namespace if the operator runs in another namespace"
    )


async def _published(kube: Kube, args: argparse.Namespace) -> tuple[PublishedSettings | None, str | None]:
    """The operator's published settings, or why they cannot be read."""
    from kquota.k8s.published import read

    try:
        return await read(kube, args.ledger_namespace), None
    except ValueError as exc:
        return None, f"ConfigMap {args.ledger_namespace}/{PUBLISHED_NAME} cannot be read: {exc}"
    except Exception as exc:  # noqa: BLE001 - translated into a message for the user
        return None, str(_api_error(exc, f"ConfigMap {args.ledger_namespace}/{PUBLISHED_NAME}"))


def _default_cluster(args: argparse.Namespace, found: PublishedSettings | None, problem: str | None) -> tuple[str, str]:
    """:func:`choose_default_cluster` with the ConfigMap read from the cluster (a mismatch is warned about)."""
    name, source, warning = choose_default_cluster(args.default_cluster, found, problem, args.ledger_namespace)
    if warning:
        common.warn(warning)
    return name, source


async def _from_kubernetes(args: argparse.Namespace, with_claimants: bool, need_ledger: bool) -> Target:
    from kquota.k8s.api import SecretNotFound
    from kquota.k8s.ledger import LedgerStore
    from kquota.reconcile.build import cluster_config
    from kquota.reconcile.settings import OperatorSettings

    name: str = args.cluster
    try:
        kube = await _open_kube(args.kubeconfig, args.context)
    except Exception as exc:  # noqa: BLE001 - any kubeconfig problem ends here, with its message
        raise TargetError(f"cannot load the kubeconfig: {type(exc).__name__}: {exc}") from None
    try:
        try:
            body = await kube.get_cluster_object("kafkaclusters", name)
        except Exception as exc:  # noqa: BLE001 - translated into a message for the user
            raise _api_error(exc, f"KafkaCluster {name}") from None
        published, published_problem = await _published(kube, args)
        # The operator's own protected principals and guard settings, as it publishes them.
        # model_construct: the defaults, not this shell's KQUOTA_* variables (the operator's environment
        # is not the user's).
        overrides: dict[str, Any] = {"namespace": args.ledger_namespace}
        if published is not None:
            overrides["protected_users"] = list(published.protected_users)
            overrides["protected_client_ids"] = list(published.protected_client_ids)
        settings = OperatorSettings.model_construct(**overrides)
        limits = GuardLimits()
        if published is not None and published.deletion_guard is not None:
            limits = GuardLimits(*published.deletion_guard)
        try:
            cfg = await cluster_config(body, kube, settings)
        except SecretNotFound as exc:
            raise TargetError(f"KafkaCluster {name}: {exc}") from None
        if cfg is None:
            raise TargetError(f"KafkaCluster {name} has an invalid spec")
        ledger: Quotas | None = None
        ledger_problem: str | None = None
        try:
            ledger = await LedgerStore(kube, args.ledger_namespace, name).load()
        except ValueError as exc:
            ledger_problem = f"the ownership ledger of {name} cannot be read: {exc}"
        except Exception as exc:  # noqa: BLE001 - translated into a message for the user
            ledger_problem = str(_api_error(exc, f"ownership ledger in namespace {args.ledger_namespace}"))
        if ledger_problem is not None and need_ledger:
            raise TargetError(ledger_problem)
        claimants: list[Claimant] | None = None
        default_cluster: str | None = None
        default_source: str | None = None
        if with_claimants:
            default_cluster, default_source = _default_cluster(args, published, published_problem)
            claimants = []
            for kind, plural in PLURALS.items():
                try:
                    listing = await kube.list_cluster_objects(plural)
                except Exception as exc:  # noqa: BLE001 - translated into a message for the user
                    raise _api_error(exc, f"listing {plural}") from None
                for item in listing.get("items") or []:
                    found = claimant_from_object(kind, item, default_cluster)
                    if found.cluster == name:
                        claimants.append(found)
    finally:
        await kube.close()
    connection = cfg.connection
    direct = direct_connection(args, connection.bootstrap_servers)
    if direct is not None:
        # A properties file replaces the security settings; a bare --bootstrap-server
        # (a port-forward) keeps the KafkaCluster's credentials.
        connection = (
            direct
            if args.command_config
            else dataclasses.replace(connection, bootstrap_servers=direct.bootstrap_servers)
        )
    connection = dataclasses.replace(
        connection, request_timeout_ms=int(args.timeout * 1000), connect_timeout_ms=int(args.timeout * 1000)
    )
    return Target(
        connection=connection,
        cluster=name,
        policy=cfg.policy,
        protection=cfg.protection,
        grants=cfg.grants,
        ledger=ledger,
        claimants=claimants,
        ledger_namespace=args.ledger_namespace,
        ledger_problem=ledger_problem,
        default_cluster=default_cluster,
        default_cluster_source=default_source,
        settings=settings,
        principals=cfg.principals,
        guard=limits,
        approval=((body.get("metadata") or {}).get("annotations") or {}).get(APPROVAL_ANNOTATION),
        callback_honoured=cfg.callback_honoured,
    )


async def load_target(args: argparse.Namespace, with_claimants: bool = True, need_ledger: bool = True) -> Target:
    """The cluster the flags name; with --cluster, everything Kubernetes knows about it.

    An ownership ledger that cannot be read is an error, unless ``need_ledger``
    is False: then ``Target.ledger`` is None and ``Target.ledger_problem`` says why.
    """
    if args.cluster:
        return await _from_kubernetes(args, with_claimants, need_ledger)
    direct = direct_connection(args)
    if direct is None:
        raise TargetError("no cluster: give --bootstrap-server (and --command-config), or --cluster NAME")
    source = "--default-cluster" if args.default_cluster else None
    return Target(
        connection=direct,
        ledger_namespace=args.ledger_namespace,
        default_cluster=args.default_cluster,
        default_cluster_source=source,
    )


# --- reaching the brokers ----------------------------------------------------------

#: The port kafka-python assumes for a bootstrap server given without one.
DEFAULT_KAFKA_PORT: Final = 9092


def split_address(server: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``host`` (port 9092, as kafka-python) as (host, port)."""
    server = server.strip()
    if server.startswith("["):
        host, _, rest = server[1:].partition("]")
        port = rest.removeprefix(":")
    elif server.count(":") == 1:
        host, port = server.split(":")
    else:  # a bare host name, or a bare IPv6 address
        host, port = server, ""
    if not port:
        return host, DEFAULT_KAFKA_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise TargetError(f"bootstrap server {server!r}: the port is not a number from 1 to 65535")
    return host, int(port)


def connect_failure(host: str, port: int, exc: OSError, timeout: float) -> str:
    """Why a TCP connect to ``host:port`` failed, in words a CI log can act on."""
    if isinstance(exc, socket.gaierror):
        return f"DNS lookup of {host} failed ({exc.strerror or exc})"
    if isinstance(exc, TimeoutError):
        return f"no answer within {number(timeout)} s (timeout; a firewall, or the wrong host)"
    if isinstance(exc, ConnectionRefusedError) or exc.errno == errno.ECONNREFUSED:
        return f"connection refused (nothing listens on port {port} of {host})"
    return f"cannot connect: {exc.strerror or exc}"


Connector = Callable[[tuple[str, int], float], object]


def _tcp_connect(address: tuple[str, int], timeout: float) -> object:
    with socket.create_connection(address, timeout=timeout):
        return None


def probe(bootstrap_servers: str, timeout: float, connect: Connector = _tcp_connect) -> None:
    """Raise TargetError, naming each address and its cause, when no bootstrap server accepts a TCP connection.

    All are tried at once, each for at most ``timeout`` seconds (what
    kafka-python would wait for it anyway), and the first that answers ends
    the probe: the brokers it names are kafka-python's business from there.
    """
    servers = [s.strip() for s in bootstrap_servers.split(",") if s.strip()]
    addresses = [split_address(s) for s in servers]
    results: queue.Queue[tuple[int, str | None]] = queue.Queue()

    def attempt(i: int) -> None:
        host, port = addresses[i]
        try:
            connect((host, port), timeout)
        except OSError as exc:  # socket.gaierror and TimeoutError are OSErrors
            results.put((i, connect_failure(host, port, exc, timeout)))
        except Exception as exc:  # noqa: BLE001 - e.g. UnicodeError: a host name IDNA cannot encode
            results.put((i, f"cannot connect: {type(exc).__name__}: {exc}"))
        else:
            results.put((i, None))

    # Daemon threads, not a pool: once one server answers, the others' attempts
    # may run on to their timeout without holding up the command or its exit.
    for i in range(len(addresses)):
        threading.Thread(target=attempt, args=(i,), name=f"kquota-probe-{i}", daemon=True).start()
    failures: dict[int, str] = {}
    for _ in addresses:
        i, why = results.get()
        if why is None:
            return
        failures[i] = why
    if failures:
        causes = "; ".join(f"{servers[i]}: {failures[i]}" for i in range(len(servers)))
        raise TargetError(f"cannot reach any bootstrap server: {causes}")


def _admin(connection: ConnectionSettings) -> QuotaAdmin:
    return QuotaAdmin(dataclasses.replace(connection, client_id="kquota-cli"))


#: Per topic: partition -> leader broker id (-1 without a leader).
Leaders = dict[str, dict[int, int]]


def read_live(connection: ConnectionSettings, topics: Sequence[str] = ()) -> tuple[Quotas, Leaders]:
    """Every quota on the brokers, and the leader layout of ``topics`` (for TopicQuotas)."""
    probe(connection.bootstrap_servers, connection.connect_timeout_ms / 1000)
    admin = _admin(connection)
    try:
        return admin.describe_all(), admin.topic_leaders(list(topics))
    except (KafkaUnavailable, QuotaRequestError) as exc:
        raise TargetError(str(exc)) from None
    finally:
        admin.close()


def read_callbacks(connection: ConnectionSettings) -> dict[int, str] | None:
    """Each broker's client.quota.callback.class (brokers without one left out); None if the brokers refuse."""
    admin = _admin(connection)
    try:
        _, brokers = admin.cluster_info()
        configs = {b: admin.broker_configs(b, [CALLBACK_CONFIG]) for b in brokers}
    except KafkaNotAuthorized:
        return None
    except (KafkaUnavailable, QuotaRequestError) as exc:
        raise TargetError(str(exc)) from None
    finally:
        admin.close()
    return callbacks_from_configs(configs)


def broker_validate(connection: ConnectionSettings, changes: Sequence[EntityChange]) -> list[EntityResult]:
    """Ask the brokers to validate ``changes`` without applying them (validate_only)."""
    if not changes:
        return []
    admin = _admin(connection)
    try:
        return admin.alter(changes, validate_only=True)
    except (KafkaUnavailable, QuotaRequestError) as exc:
        raise TargetError(str(exc)) from None
    finally:
        admin.close()
