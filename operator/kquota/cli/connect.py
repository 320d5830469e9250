"""How the CLI reaches a Kafka cluster: the connection flags, and which of them names the target.

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

These are the flags and the choice between them; the properties file is read
in :mod:`kquota.cli.properties`, the KafkaCluster in :mod:`kquota.cli.kafkacluster`,
and the brokers are reached through :mod:`kquota.cli.brokers`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from kquota.cli.kafkacluster import from_kubernetes
from kquota.cli.properties import read_command_config, settings_from_properties
from kquota.cli.target import DEFAULT_LEDGER_NAMESPACE, Target, TargetError
from kquota.kafka.settings import ConnectionSettings


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


def _with_flags(args: argparse.Namespace, connection: ConnectionSettings) -> ConnectionSettings:
    """A KafkaCluster's connection with what the connection flags override, and their timeout."""
    direct = direct_connection(args, connection.bootstrap_servers)
    if direct is not None:
        # A properties file replaces the security settings; a bare --bootstrap-server
        # (a port-forward) keeps the KafkaCluster's credentials.
        connection = (
            direct
            if args.command_config
            else dataclasses.replace(connection, bootstrap_servers=direct.bootstrap_servers)
        )
    return dataclasses.replace(
        connection, request_timeout_ms=int(args.timeout * 1000), connect_timeout_ms=int(args.timeout * 1000)
    )


async def load_target(args: argparse.Namespace, with_claimants: bool = True, need_ledger: bool = True) -> Target:
    """The cluster the flags name; with --cluster, everything Kubernetes knows about it.

    An ownership ledger that cannot be read is an error, unless ``need_ledger``
    is False: then ``Target.ledger`` is None and ``Target.ledger_problem`` says why.
    """
    if args.cluster:
        target = await from_kubernetes(args, with_claimants, need_ledger)
        return dataclasses.replace(target, connection=_with_flags(args, target.connection))
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
