"""m2mc-thread-stats: conversation-thread statistics of chat exports, computed with PySpark.

Reads JSON Lines exports (files or folders of `.jsonl` / `.jsonl.gz`), parses them
strictly where they are read (`reading`), and shuffles the parsed rows once, by group:
threads never cross groups, so each task then holds whole
groups and finishes them with vectorised numpy in one Arrow pass (`place_groups`):
it merges the overlapping exports of several peers by (gid, mid), links replies to
parents, finds every message's thread root and depth by pointer jumping (about
log2(depth) numpy gathers, no loop over messages), computes the per-thread tree
measures, writes its share of the messages and threads tables as Parquet files, and
returns only small rows: per group, per sender, histograms. The driver finishes the
groups table and the summary from those; one more small pass, shuffled by sender, merges
the per-sender rows into the participants table and finds the exact median reply
latency. The report's plots are drawn from the histograms.

Also runs as `spark-submit app/analytics/submit.py INPUT... --out DIR`; then the master and
the rest of the Spark configuration come from spark-submit.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

from .job import UsageError, analyse, build_session
from .submit import EXAMPLE

log = logging.getLogger("m2mc.thread_stats")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="m2mc-thread-stats", description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="export files (.jsonl, .jsonl.gz) or folders of them")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder or URL (file://, hdfs://, s3a://), as Spark resolves it")
    parser.add_argument("--master", help="Spark master URL (default: spark-submit's, else local[*])")
    parser.add_argument("--format", choices=("parquet", "csv"), default="parquet", help="csv also writes CSV copies")
    parser.add_argument("--driver-memory", default="4g", help="driver JVM heap when not under spark-submit (default 4g)")
    parser.add_argument("--no-report", action="store_true", help="skip report.html and its plots")
    return parser.parse_args(argv)


def expand_inputs(inputs: list[str]) -> list[str]:
    """Files as given, folders as their .jsonl/.jsonl.gz files; URLs pass through to Spark."""
    found: list[str] = []
    for item in inputs:
        if "://" in item:
            found.append(item)
            continue
        path = Path(item)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith((".jsonl", ".jsonl.gz")))
            if not files:
                raise UsageError(f"{item}: folder holds no .jsonl or .jsonl.gz files")
            found.extend(str(p.resolve()) for p in files)
        elif path.is_file():
            found.append(str(path.resolve()))
        else:
            raise UsageError(f"{item}: no such file or folder")
    return found


def run(args: argparse.Namespace) -> int:
    paths = expand_inputs(args.inputs)
    started = time.perf_counter()
    from pyspark.sql import SparkSession

    # A session that already exists (tests, notebooks) belongs to the caller: don't stop it.
    borrowed = SparkSession.getActiveSession() is not None
    if borrowed or "PYSPARK_GATEWAY_PORT" in os.environ:
        archive = None  # the JVM is not ours to configure
    else:
        from .jvm_archive import ClassArchive

        archive = ClassArchive()
    spark = build_session(args.master, args.driver_memory, archive)
    log.info("Spark session ready (%.1f s)", time.perf_counter() - started)
    try:
        results = analyse(spark, paths, args.out, args.format, report=not args.no_report, read_back=False)
    finally:
        if not borrowed:
            spark.stop()
            if archive is not None:
                archive.finish()
    log.info("done in %.1f s: %s", time.perf_counter() - started, json.dumps(results.summary))
    return 0


REQUIRED_MODULES = ("numpy", "pyarrow", "pandas", "matplotlib", "pyspark")


def missing_modules() -> list[str]:
    import importlib.util

    return [name for name in REQUIRED_MODULES if importlib.util.find_spec(name) is None]


def main(argv: list[str] | None = None) -> int:
    from ..extras import require_extra

    require_extra("m2mc-thread-stats", "analytics")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    missing = missing_modules()
    if missing:
        # Plain spark-submit runs the system python3 unless told otherwise.
        print(f"m2mc-thread-stats: this Python ({sys.executable}) lacks {', '.join(missing)}. Run the job with the "
              "interpreter of the environment M2MC is installed in, e.g.\n"
              "  " + EXAMPLE,
              file=sys.stderr)
        return 2
    args = parse_args(argv)
    try:
        return run(args)
    except UsageError as exc:
        print(f"m2mc-thread-stats: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
