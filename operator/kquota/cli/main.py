"""The ``kquota`` command: operator, plan, explain, export, validate."""

from __future__ import annotations

import argparse
import sys

from kquota import __version__


def _operator(args: argparse.Namespace) -> int:
    from kquota.handlers.main import run
    from kquota.reconcile.settings import OperatorSettings

    overrides = {
        k: v
        for k, v in {
            "namespace": args.namespace,
            "default_cluster": args.default_cluster,
            "drift_interval": args.drift_interval,
            "metrics_port": args.metrics_port,
            "liveness_port": args.liveness_port,
            "kubeconfig": args.kubeconfig,
            "peering": args.peering,
            "watch_namespaces": args.watch_namespace or None,
        }.items()
        if v is not None
    }
    return run(OperatorSettings(**overrides), verbose=args.verbose)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kquota",
        description="Kafka quotas as Kubernetes resources.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"kquota {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    op = sub.add_parser(
        "operator",
        help="run the operator (settings also from KQUOTA_* environment variables)",
        description="Run the kquota operator. Every flag can also be set as KQUOTA_<NAME> in the environment.",
        epilog="example:\n  KQUOTA_DEFAULT_CLUSTER=prod kquota operator --namespace kquota-system",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    op.add_argument("--namespace", help="namespace of the ownership ledger (default kquota-system)")
    op.add_argument("--default-cluster", help="KafkaCluster for resources without clusterRef (default 'default')")
    op.add_argument("--drift-interval", type=float, help="seconds between drift checks (default 60)")
    op.add_argument("--metrics-port", type=int, help="port of /metrics (default 9090, 0 disables)")
    op.add_argument("--liveness-port", type=int, help="port of /healthz (default 8080, 0 disables)")
    op.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster, then $KUBECONFIG)")
    op.add_argument("--peering", help="Kopf peering name for several replicas (default: standalone)")
    op.add_argument("--watch-namespace", action="append", help="only watch this namespace (repeatable; default all)")
    op.add_argument("-v", "--verbose", action="store_true")
    op.set_defaults(func=_operator)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
