"""The ``kquota`` command: operator, plan, explain, export, validate, completion (and advise, collect).

Each subcommand lives in its own module with an ``add_parser`` and a
``run``; heavy imports (Kopf, the Kubernetes client, Spark) happen only in
the subcommand that needs them, so ``kquota validate`` in a pre-commit hook
starts fast.

Exit codes: 0 success, 1 error (usage errors too: argparse's usual 2 would
read as "changes" to a CI step running ``kquota plan``), 2 from ``plan``
when there are changes, 3 when it has removals the mass-removal guard will
hold, 4 from ``plan --impact`` when a change throttles an entity more than
``--throttle-threshold`` of the time. A reader that closes the pipe early
(``kquota plan | head``) changes none of them: the command stops writing, prints no
traceback, and exits as it would have.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Final, NoReturn

from kquota import __version__

DESCRIPTION: Final = """\
Kafka quotas as Kubernetes resources.

commands for a desk and for CI:
  validate   check manifests offline, with the API server's messages
  plan       what applying manifests would change on the brokers (exit 2 when something would;
             with --impact USAGE, who it throttles: exit 4 when it throttles an entity)
  explain    the effective quota of a client, key by key, and who set it
  export     every live quota as manifests: the migration from kafka-configs
"""

EPILOG: Final = """\
examples:
  kquota validate -f quotas/
  kquota plan -f quotas/ --cluster prod
  kquota explain --user alice --client-id billing --cluster prod
  kquota export --bootstrap-server kafka:9092 --out quotas/ --namespace kafka-quotas
  source <(kquota completion bash)

Run `kquota COMMAND --help` for a command's options. Documentation: docs/cli.md.
"""


class Parser(argparse.ArgumentParser):
    """argparse with usage errors exiting 1, so exit code 2 keeps meaning "plan has changes"."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(1, f"{self.prog}: error: {message}\n")


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
    parser = Parser(
        prog="kquota",
        description=DESCRIPTION,
        epilog=EPILOG,
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

    from kquota.cli import completion, explain, export, plan, validate

    validate.add_parser(sub)
    plan.add_parser(sub)
    explain.add_parser(sub)
    export.add_parser(sub)
    add_advisor_subcommands(sub)
    # Last, so the completion scripts it prints include every other subcommand.
    completion.add_parser(sub, parser)
    return parser


def add_advisor_subcommands(sub: Any) -> None:
    """Hook for the quota advisor's ``advise`` and ``collect`` (``kquota.advisor.cli.add_subcommands``).

    The advisor may be absent from a build (it is developed separately and
    needs Spark only when run); the CLI works without it.
    """
    try:
        from kquota.advisor.cli import add_subcommands
    except ModuleNotFoundError as exc:
        if exc.name not in ("kquota.advisor", "kquota.advisor.cli"):
            raise
        return
    add_subcommands(sub)


def main(argv: list[str] | None = None) -> int:
    from kquota.cli.common import quiet_on_closed_pipe

    # --help, --version and usage errors write too: they are inside the guard.
    with quiet_on_closed_pipe():
        args = build_parser().parse_args(argv)
        if args.command != "operator":
            result: int = args.func(args)
            return result
    # A long-running service: its logging owns the streams.
    operator_result: int = args.func(args)
    return operator_result


if __name__ == "__main__":
    sys.exit(main())
