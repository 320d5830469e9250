"""Running ``kquota advise`` and ``kquota collect``: options from the parsed arguments, Spark started, failures said
in one readable message and an exit code.

Spark is imported only when a subcommand runs, so the rest of the CLI works without it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from typing import Final

from kquota.advisor.params import Params

#: Flags of 0.1.0 that no longer exist, and what to do instead.
REMOVED_FLAGS: Final = {
    "--outlier-iqr": "the outlier fence is now in log space: use --outlier-alpha (see docs/advisor.md)",
    "--accuracy": "percentiles are now exact; drop --accuracy",
}


def is_spark_failure(exc: BaseException) -> bool:
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
        from kquota.advisor.pipeline import AdviseOptions, advise  # noqa: PLC0415
        from kquota.advisor.schema import InputError  # noqa: PLC0415
        from kquota.advisor.session import MemoryTooSmall, spark_session  # noqa: PLC0415
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
        if not is_spark_failure(exc):
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
        if not is_spark_failure(exc):
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
        from kquota.advisor.session import spark_session  # noqa: PLC0415
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


def run_executor(args: argparse.Namespace) -> int:
    """``kquota executor``: become the Spark executor this pod was started for (returns only on failure)."""
    from kquota.advisor import executor  # noqa: PLC0415

    try:
        executor.run()
    except executor.NotAnExecutorPod as exc:
        print(f"kquota executor: {exc}", file=sys.stderr)
        return 1
    return 1  # pragma: no cover - run() replaces the process
