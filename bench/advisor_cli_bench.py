"""`kquota advise` as a user runs it, with its default settings, on tens of millions of samples.

``bench/advisor_bench.py`` times the advisor's transforms inside one Spark
session with a chosen driver memory. This one answers the user's question
instead: does the documented command, with nothing tuned, finish on this
machine, how long does it take, and how much memory does its driver hold?

1. The synthetic samples of ``advisor_bench.spark_samples`` (same formula:
   E users, B brokers, a heavy tail of every 97th user) are written once as
   Parquet under ``--workdir`` (kept between runs: generation is not timed).
2. ``kquota advise --input DIR --out OUT`` runs as a subprocess with the
   defaults (no ``--conf``, no ``SPARK_DRIVER_MEMORY``): wall time, CPU
   seconds of its whole process tree (Python and the driver JVM, sampled from
   ``/proc``), the driver's peak resident memory as the report records it, and
   the seconds and CPU seconds of each step from its progress lines (the
   stage profile).
3. The baseline in the same run: a minimal hand-written PySpark job on the same
   files and the same machine, also with Spark's defaults except the driver
   memory the advisor chose: read, one row per (user, resource), the exact
   p99 per group, collect. It is the least work any advisor must do on this
   input (the statistics the recommendation rests on), so ``kquota advise``
   is printed as a multiple of it, in wall time and in CPU.

Usage: ``python -m bench.advisor_cli_bench --samples 5e7 [--out bench/results/advisor_cli.json]``

Not a test: it prints figures and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.advisor_bench import spark_samples

MINIMAL_JOB = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession, functions as sf
    spark = (SparkSession.builder.master("local[*]").config("spark.driver.memory", sys.argv[2])
             .config("spark.ui.enabled", "false").getOrCreate())
    df = spark.read.parquet(sys.argv[1])
    long = df.select("user", sf.explode(sf.create_map(
        sf.lit("produce"), sf.col("produce_byte_rate"), sf.lit("fetch"), sf.col("fetch_byte_rate"))
    ).alias("resource", "rate")).where(sf.col("rate").isNotNull())
    rows = long.groupBy("user", "resource").agg(sf.percentile("rate", 0.99).alias("p99")).collect()
    print(len(rows))
    spark.stop()
    """
)


def _tree_cpu(root: int, seen: dict[int, float]) -> None:
    """Add the CPU seconds of ``root`` and its descendants to ``seen`` (pid -> latest utime + stime)."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    stats: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        stats[pid] = (int(fields[11]) + int(fields[12])) / ticks
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in stats:
            seen[pid] = stats[pid]
        stack.extend(children.get(pid, []))


STEP_DONE = re.compile(r"^  (.+): done in ([0-9.]+) s$", re.MULTILINE)


def timed(cmd: list[str], log: Path, step_cpu: dict[str, float] | None = None) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds of the process tree, exit code) of ``cmd``, output to ``log``.

    With ``step_cpu``, the CPU seconds of each step of ``kquota advise`` go there too: the tree's CPU
    between one "<step>: done in X s" progress line and the next (read every 0.5 s, so within ~1 s of
    the two cores' time).
    """
    seen: dict[int, float] = {}
    t0 = time.monotonic()
    before = 0.0
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=_defaults_env())
        while proc.poll() is None:
            _tree_cpu(proc.pid, seen)
            if step_cpu is not None:
                done = STEP_DONE.findall(log.read_text(errors="replace"))
                for name, _seconds in done[len(step_cpu) :]:
                    now = sum(seen.values())
                    step_cpu[name] = round(now - before, 1)
                    before = now
            time.sleep(0.5)
    wall = time.monotonic() - t0
    if step_cpu is not None:
        # Steps that ended after the last reading (the last one, usually): the CPU left over.
        for name, _seconds in STEP_DONE.findall(log.read_text(errors="replace"))[len(step_cpu) :]:
            step_cpu[name] = round(sum(seen.values()) - before, 1)
            before = sum(seen.values())
    return wall, sum(seen.values()), proc.returncode


def _defaults_env() -> dict[str, str]:
    # The user's defaults: nothing that sizes Spark from outside.
    return {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}


def generate(path: Path, n: int, entities: int, brokers: int) -> None:
    marker = path / f"_KQUOTA_{n}_{entities}_{brokers}"
    if marker.exists():
        return
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[*]")
        .config("spark.driver.memory", "4g")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        spark_samples(spark, n, entities, brokers).write.mode("overwrite").parquet(str(path))
    finally:
        spark.stop()
    marker.touch()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=lambda s: int(float(s)), default=50_000_000)
    parser.add_argument("--entities", type=int, default=2000)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "kquota-advisor-cli-bench")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("bench/results/advisor_cli.json"))
    args = parser.parse_args(argv)
    data = args.workdir / f"samples-{args.samples}"
    args.workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    generate(data, args.samples, args.entities, args.brokers)
    print(f"samples: {args.samples:,} in {data} ({time.monotonic() - t0:.0f} s to generate or find)", flush=True)

    out = args.workdir / "advice"
    kquota = str(Path(sys.executable).with_name("kquota"))
    step_cpu: dict[str, float] = {}
    wall, cpu, rc = timed(
        [kquota, "advise", "--input", str(data), "--format", "parquet", "--out", str(out)],
        args.workdir / "advise.log",
        step_cpu,
    )
    result: dict[str, Any] = {
        "samples": args.samples,
        "entities": args.entities,
        "brokers": args.brokers,
        "advise": {"exit_code": rc, "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1)},
    }
    if rc != 0:
        print((args.workdir / "advise.log").read_text()[-3000:])
    else:
        report = json.loads((out / "report.json").read_text())
        spark = report.get("spark", {})
        # The stage profile: the advisor's own progress lines ("  <step>: done in X s").
        steps = STEP_DONE.findall((args.workdir / "advise.log").read_text())
        result["advise"].update(
            steps_seconds={name: float(seconds) for name, seconds in steps},
            # The first step's CPU includes the JVM's start.
            steps_cpu_seconds=step_cpu,
            samples_per_second=round(args.samples / wall),
            driver_memory=spark.get("driver_memory"),
            driver_peak_rss_mib=spark.get("driver_peak_rss_mib"),
            master=spark.get("master"),
        )
    print(f"kquota advise (defaults): {json.dumps(result['advise'])}", flush=True)

    if not args.no_baseline:
        script = args.workdir / "minimal_job.py"
        script.write_text(MINIMAL_JOB)
        memory = str(result["advise"].get("driver_memory") or "1g")
        bwall, bcpu, brc = timed([sys.executable, str(script), str(data), memory], args.workdir / "minimal.log")
        result["minimal_job"] = {"exit_code": brc, "wall_seconds": round(bwall, 1), "cpu_seconds": round(bcpu, 1)}
        if brc == 0 and rc == 0:
            result["advise_vs_minimal"] = {"wall": round(wall / bwall, 2), "cpu": round(cpu / bcpu, 2)}
        print(f"minimal job (exact p99 per user and resource): {json.dumps(result['minimal_job'])}")
        if "advise_vs_minimal" in result:
            print(f"kquota advise as a multiple of it: {json.dumps(result['advise_vs_minimal'])}")

    result["machine"] = {"node": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
