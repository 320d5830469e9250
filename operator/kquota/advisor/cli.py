"""The ``kquota advise`` and ``kquota collect`` command lines: their arguments, checked as they are parsed.

:func:`add_subcommands` registers both on the ``kquota`` command's subparsers;
:mod:`kquota.advisor.commands` runs them. Nothing here imports pyspark at
module level: the rest of the CLI works without Spark installed, and only
running one of these two subcommands needs it (``pip install 'kquota[spark]'``).
``python -m kquota.advisor`` runs the two subcommands on their own (for
spark-submit, see docs/advisor.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
from pathlib import Path
from typing import Any

from kquota.advisor.commands import REMOVED_FLAGS, run_advise, run_collect, run_executor
from kquota.advisor.params import FORMATS, LEVELS, SKEW_POLICIES, Params
from kquota.api.quantity import QuantityError, byte_rate

_DEFAULTS = Params()

ADVISE_EPILOG = """\
examples:
  kquota advise --input samples/ --out advice/ --broker-capacity 100Mi --namespace team-a
  kquota advise --input usage.csv --headroom 0.3 --outlier-top-k 5 --cluster-ref prod
  kquota advise --master spark://spark-master:7077 --input s3a://bucket/usage/ --out advice/

Writes advice/manifests/*.yaml (+ kustomization.yaml, for `kubectl apply -k`), advice/report.json
(or report.parquet/) and advice/report.html. See docs/advisor.md for the method.
"""

COLLECT_EPILOG = """\
examples:
  kquota collect --scrape http://broker-0:7071/metrics --scrape http://broker-1:7071/metrics \\
      --duration 600 --interval 10 --out samples/
  kquota collect --prometheus http://prometheus:9090 --start 2024-05-01T00:00:00Z \\
      --end 2024-05-08T00:00:00Z --step 60 --out samples/
"""


def _byte_rate(text: str) -> int:

    try:
        return byte_rate(text if not text.isdigit() else int(text))
    except (QuantityError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a byte rate such as 100Mi or 104857600: {exc}") from None


def _fraction(text: str) -> float:
    value = float(text)
    if not (0 <= value <= 100):
        raise argparse.ArgumentTypeError("headroom is a fraction: 0.2 for 20%")
    return value


def _timestamp(text: str) -> dt.datetime:
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO-8601 time such as 2024-05-01T00:00:00Z") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def _conf(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--conf takes KEY=VALUE, got {text!r}")
    return key, value


def add_subcommands(subparsers: Any) -> None:
    """Register ``advise`` and ``collect`` on an argparse subparsers object."""
    advise = subparsers.add_parser(
        "advise",
        help="recommend quotas from usage history (PySpark)",
        description="Turn usage samples into recommended ClientQuota / TopicQuota manifests, a JSON or "
        "Parquet report and an HTML report. Runs Spark in local mode unless --master says otherwise.",
        epilog=ADVISE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    io = advise.add_argument_group("input and output")
    io.add_argument("--input", required=True, help="client samples: a file, a directory, or `kquota collect` output")
    io.add_argument("--topic-input", help="topic samples (default: DIR/topics when --input is collect output)")
    io.add_argument("--format", choices=FORMATS, help="input format (default: from the file names)")
    io.add_argument("--out", type=Path, default=Path("kquota-advice"), help="output directory (default %(default)s)")
    io.add_argument(
        "--report-format",
        choices=("json", "parquet", "both"),
        default="json",
        help="machine-readable report format (default %(default)s); report.html is always written",
    )
    io.add_argument("--namespace", help="metadata.namespace of the manifests (and of kustomization.yaml)")
    io.add_argument("--cluster-ref", help="spec.clusterRef of the manifests (a KafkaCluster name)")
    io.add_argument("--quiet", action="store_true", help="no progress output, only the summary")
    io.add_argument(
        "--current",
        help="the ClientQuotas applied now (a YAML file or directory: the manifests in Git, or `kquota export` "
        "output): the report then says what the advice adds, raises, lowers and drops",
    )

    method = advise.add_argument_group("method (see docs/advisor.md)")
    method.add_argument(
        "--headroom",
        type=_fraction,
        default=_DEFAULTS.headroom,
        help="added on top of p99 before rounding up, as a fraction (default %(default)s = 20%%)",
    )
    method.add_argument(
        "--default-percentile",
        type=float,
        default=_DEFAULTS.default_percentile,
        help="which percentile of the non-outliers' p99s sets the default (default %(default)s = "
        "the largest); entities above the default get overrides",
    )
    method.add_argument(
        "--outlier-alpha",
        type=float,
        default=_DEFAULTS.outlier_alpha,
        help="chance that a population with no outliers gets one anyway; the fence is median x exp(z x sigma) "
        "of the p99s in log space with P(Z > z) = alpha / population (default %(default)s)",
    )
    # Removed in 0.2.0; kept so a script that passes them gets a message naming what replaced them.
    for removed in REMOVED_FLAGS:
        method.add_argument(removed, dest=f"removed_{removed.strip('-').replace('-', '_')}", help=argparse.SUPPRESS)
    method.add_argument(
        "--outlier-top-k",
        type=int,
        default=_DEFAULTS.outlier_top_k,
        help="at most this many outliers per population (default %(default)s)",
    )
    method.add_argument(
        "--outlier-min-population",
        type=int,
        default=_DEFAULTS.min_population,
        help="no outliers in populations smaller than this (default %(default)s)",
    )
    method.add_argument(
        "--level",
        choices=LEVELS,
        default=_DEFAULTS.level,
        help="recommend per bucket as measured, or merge (user, client-id) buckets into users "
        "or client-ids first (default %(default)s)",
    )
    method.add_argument(
        "--min-byte-rate",
        type=_byte_rate,
        default=int(_DEFAULTS.min_byte_rate),
        help="smallest byte-rate quota recommended (default %(default)s bytes/s)",
    )
    method.add_argument(
        "--broker-capacity",
        type=_byte_rate,
        help="bytes/s each broker can serve per direction, for the capacity check (e.g. 100Mi)",
    )
    method.add_argument("--broker-capacity-produce", type=_byte_rate, help="produce capacity, if it differs")
    method.add_argument("--broker-capacity-fetch", type=_byte_rate, help="fetch capacity, if it differs")
    method.add_argument(
        "--broker-request-capacity",
        type=float,
        help="request capacity in percent: (num.io.threads + num.network.threads) x 100",
    )
    method.add_argument(
        "--topic-bucket",
        type=int,
        default=_DEFAULTS.topic_bucket_seconds,
        help="seconds per bucket when summing topic rates over brokers (default %(default)s)",
    )
    method.add_argument("--include-internal-topics", action="store_true", help="also budget __consumer_offsets etc.")

    bad = advise.add_argument_group("bad input")
    bad.add_argument(
        "--clock-skew",
        choices=SKEW_POLICIES,
        default="error",
        help="offset brokers / future samples: fail (default), align brokers and drop future samples, or ignore",
    )
    bad.add_argument(
        "--skew-tolerance",
        type=float,
        default=300.0,
        help="seconds of clock difference tolerated (default %(default)s)",
    )

    spark = advise.add_argument_group("spark")
    spark.add_argument(
        "--master",
        help="Spark master: local[*] (default; under spark-submit, spark-submit's), spark://HOST:7077, "
        "k8s://https://API:443, yarn",
    )
    spark.add_argument(
        "--conf",
        type=_conf,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration (repeatable), e.g. spark.driver.memory=4g",
    )
    advise.set_defaults(func=run_advise)

    collect = subparsers.add_parser(
        "collect",
        help="export usage samples to Parquet from Prometheus or broker metrics endpoints",
        description="Collect the advisor's input: quota metrics and per-topic byte rates, from a Prometheus "
        "server (range queries) or by scraping the brokers' /metrics endpoints over a period.",
        epilog=COLLECT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = collect.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--scrape",
        action="append",
        metavar="[NAME=]URL",
        help="a broker's metrics URL (repeatable); NAME is the broker's name in the samples",
    )
    source.add_argument("--prometheus", metavar="URL", help="Prometheus base URL, e.g. http://prometheus:9090")
    collect.add_argument(
        "--duration", type=float, default=60.0, help="scrape: seconds to collect (default %(default)s)"
    )
    collect.add_argument(
        "--interval", type=float, default=5.0, help="scrape: seconds between scrapes (default %(default)s)"
    )
    collect.add_argument("--start", type=_timestamp, help="prometheus: range start (ISO-8601)")
    collect.add_argument("--end", type=_timestamp, help="prometheus: range end (default now)")
    collect.add_argument(
        "--step", type=float, default=60.0, help="prometheus: seconds between points (default %(default)s)"
    )
    collect.add_argument("--broker-label", default="instance", help="prometheus: label naming the broker")
    collect.add_argument("--rate-window", default="5m", help="prometheus: rate() window of topic counters")
    collect.add_argument("--out", type=Path, required=True, help="output directory (clients/ and topics/ Parquet)")
    collect.add_argument(
        "--master", default="local[1]", help="Spark master used to write Parquet (default %(default)s)"
    )
    collect.add_argument("--quiet", action="store_true")
    collect.set_defaults(func=run_collect)

    # Spark's Kubernetes backend starts executor pods with the argument "executor" (see
    # kquota.advisor.executor). Left out of --help and the completions: no help text.
    executor = subparsers.add_parser(
        "executor",
        description="Run a Spark executor in a pod Spark's Kubernetes backend started from the advisor image "
        "(--master k8s://...); settings come from the environment Spark sets. Not for direct use.",
    )
    executor.set_defaults(func=run_executor)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kquota", description="kquota's quota advisor.")
    add_subcommands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code
