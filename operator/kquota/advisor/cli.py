"""The ``kquota advise`` and ``kquota collect`` subcommands.

:func:`add_subcommands` registers both on the ``kquota`` command's subparsers.
Nothing here imports pyspark at module level: the rest of the CLI works
without Spark installed, and only running one of these two subcommands needs
it (``pip install 'kquota[spark]'``). ``python -m kquota.advisor`` runs the two
subcommands on their own (for spark-submit, see docs/advisor.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path
from typing import Any, Final

from kquota.advisor.params import FORMATS, LEVELS, SKEW_POLICIES, Params
from kquota.api.quantity import QuantityError, byte_rate

#: Flags of 0.1.0 that no longer exist, and what to do instead.
REMOVED_FLAGS: Final = {
    "--outlier-iqr": "the outlier fence is now in log space: use --outlier-alpha (see docs/advisor.md)",
    "--accuracy": "percentiles are now exact; drop --accuracy",
}

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


def _is_spark_failure(exc: BaseException) -> bool:
    """An error raised by Spark or its JVM (Py4J), as opposed to a bug in kquota's own Python."""
    kinds = {cls.__module__.split(".")[0] for cls in type(exc).__mro__}
    return bool(kinds & {"py4j", "pyspark"})


def spark_failure_message(text: str, driver_memory: str) -> str:
    """One paragraph for a failed Spark job: the Java error's first line and, for memory, what to change."""
    lines = [line.strip().lstrip(": ") for line in text.splitlines() if line.strip().lstrip(": ")]
    oom = next((line for line in lines if "OutOfMemoryError" in line), None)
    if oom is not None:
        return (
            f"Spark ran out of memory ({oom[:200]}) with spark.driver.memory={driver_memory}. In local mode "
            "the driver's heap holds every executor's work: give it more with --conf spark.driver.memory=16g "
            "(or SPARK_DRIVER_MEMORY), or run on a cluster with --master spark://... (see docs/advisor.md)."
        )
    cause = next((line for line in lines if "Exception" in line or "Error" in line), lines[0] if lines else "")
    return f"Spark failed: {cause[:400]} (Spark's own log lines above say more)"


def run_advise(args: argparse.Namespace) -> int:
    for flag, instead in REMOVED_FLAGS.items():
        if getattr(args, f"removed_{flag.strip('-').replace('-', '_')}", None) is not None:
            print(f"kquota advise: {flag} was removed in 0.2.0: {instead}", file=sys.stderr)
            return 2
    # Spark is imported only now, so `kquota --help` and the other subcommands work without it.
    try:
        from kquota.advisor.pipeline import AdviseOptions, MemoryTooSmall, advise, spark_session  # noqa: PLC0415
        from kquota.advisor.schema import InputError  # noqa: PLC0415
    except ImportError as exc:
        print(f"kquota advise needs Spark: pip install 'kquota[spark]' ({exc})", file=sys.stderr)
        return 2

    capacity: dict[str, float] = {}
    for resource, value in (
        ("produce", args.broker_capacity_produce or args.broker_capacity),
        ("fetch", args.broker_capacity_fetch or args.broker_capacity),
        ("request", args.broker_request_capacity),
    ):
        if value is not None:
            capacity[resource] = float(value)
    params = Params(
        headroom=args.headroom,
        default_percentile=args.default_percentile,
        outlier_alpha=args.outlier_alpha,
        outlier_top_k=args.outlier_top_k,
        min_population=args.outlier_min_population,
        min_byte_rate=float(args.min_byte_rate),
        level=args.level,
        capacity=capacity,
        topic_bucket_seconds=args.topic_bucket,
        include_internal_topics=args.include_internal_topics,
    )
    try:
        params.check()
    except ValueError as exc:
        print(f"kquota advise: {exc}", file=sys.stderr)
        return 2
    options = AdviseOptions(
        input=args.input,
        out=args.out,
        topic_input=args.topic_input,
        format=args.format,
        params=params,
        namespace=args.namespace,
        cluster_ref=args.cluster_ref,
        report_format=args.report_format,
        skew=args.clock_skew,
        skew_tolerance=dt.timedelta(seconds=args.skew_tolerance),
        progress=not args.quiet,
        current=args.current,
    )
    try:
        spark = spark_session(args.master, conf=dict(args.conf))
    except MemoryTooSmall as exc:
        print(f"kquota advise: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:
        if not _is_spark_failure(exc):
            raise
        # The JVM did not start (no Java, a bad --conf): Java's own error is above, on stderr.
        print(f"kquota advise: Spark did not start: {str(exc).strip()[:400]}", file=sys.stderr)
        return 1
    try:
        result = advise(spark, options)
    except InputError as exc:
        print(f"kquota advise: bad input: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        # A Spark/JVM failure becomes one readable message instead of a Py4J dump; kquota's own bugs still raise.
        if not _is_spark_failure(exc):
            raise
        memory = spark.sparkContext.getConf().get("spark.driver.memory", "1g")
        print(f"kquota advise: {spark_failure_message(str(exc), memory)}", file=sys.stderr)
        return 1
    print(result.summary)
    print(
        f"Wrote {len(result.manifests)} manifest(s) to {args.out / 'manifests'} and "
        f"{', '.join(str(p) for p in result.report_paths)}."
    )
    return 0


def run_collect(args: argparse.Namespace) -> int:
    try:
        from kquota.advisor import collect  # noqa: PLC0415 - needs Spark, imported on use
        from kquota.advisor.pipeline import spark_session  # noqa: PLC0415
    except ImportError as exc:
        print(f"kquota collect needs Spark to write Parquet: pip install 'kquota[spark]' ({exc})", file=sys.stderr)
        return 2

    def say(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr)

    try:
        if args.scrape:
            say(
                f"kquota collect: scraping {len(args.scrape)} endpoint(s) every {args.interval:g} s "
                f"for {args.duration:g} s"
            )
            result = collect.scrape(
                args.scrape,
                args.duration,
                args.interval,
                on_round=lambda n, total, rows: say(f"  scrape {n}/{total}: {rows} client samples so far"),
            )
            spark = spark_session(args.master, "kquota-collect")
            collect.write_parquet(spark, result.clients, result.topics, args.out)
            clients, topics = len(result.clients), len(result.topics)
        else:
            if args.start is None:
                print("kquota collect: --prometheus needs --start", file=sys.stderr)
                return 2
            end = args.end or dt.datetime.now(dt.UTC)
            spark = spark_session(args.master, "kquota-collect")
            clients = topics = 0
            for n, (c, t) in enumerate(
                collect.prometheus_rows(
                    args.prometheus, args.start, end, args.step, args.broker_label, args.rate_window
                )
            ):
                collect.write_parquet(spark, c, t, args.out, append=n > 0)
                clients, topics = clients + len(c), topics + len(t)
                say(f"  chunk {n + 1}: {clients} client and {topics} topic samples so far")
    except (collect.CollectError, ValueError) as exc:
        print(f"kquota collect: {exc}", file=sys.stderr)
        return 1
    print(
        f"Wrote {clients} client samples to {args.out / 'clients'} and {topics} topic samples to {args.out / 'topics'}."
    )
    if clients == 0:
        print(
            "No quota metrics found: Kafka exports kafka_server_quota_* only once some quota is configured "
            "on the brokers, and the JMX exporter rules must map them (see docs/advisor.md).",
            file=sys.stderr,
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kquota", description="kquota's quota advisor.")
    add_subcommands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code
