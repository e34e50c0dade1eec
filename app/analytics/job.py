"""The Spark side of m2mc-thread-stats: the session, the one-shuffle plan around the kernels,
the executors' reachability probe, and the staged, atomically committed output."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import reading
from .kernels import _children, _file_rows, median_of_counts, merge_senders, middle_bins, place_groups
from .schema import (
    FILES_SCHEMA, GROUP, GROUP_FIELDS, HIST, INFO, MESSAGES_PART, MESSAGE_FIELDS, PARQUET_MAGIC,
    PARTICIPANT_FIELDS, SENDER, SENDERS_PART, TOP, TOP_THREADS, TREE_THREADS, SENDER_PASS_SCHEMA, STRUCT_FIELDS, SUMMARY_PART, SUMMARY_SCHEMA,
    TABLE_NAMES, TABLE_SPECS, THREADS_PART, THREAD_FIELDS, _fields, _struct_ddl, arrow_schema, summary_arrow_schema,
)
from .thread_report import PLOT_FILES

log = logging.getLogger("m2mc.thread_stats")

EXPLORER_GROUPS = 1000  # the busiest groups the explorer's table lists


class UsageError(Exception):
    """A mistake in the command line or the inputs, reported without a traceback."""


def _has_jemalloc() -> bool:
    """Whether this pyarrow was built with jemalloc (the local workers run the same one)."""
    import pyarrow

    try:
        pyarrow.jemalloc_memory_pool()
    except NotImplementedError:
        return False
    return True


def build_session(master: str | None, driver_memory: str, archive=None):
    """A SparkSession whose Python workers run this interpreter; Spark logs at WARN.

    `archive` (a `jvm_archive.ClassArchive`) gives the driver JVM's class-data options,
    when this process launches that JVM itself.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ
    builder = SparkSession.builder.appName("m2mc-thread-stats")
    if master:
        builder = builder.master(master)
    elif not under_submit and not os.environ.get("MASTER"):
        builder = builder.master("local[*]")
    if not under_submit:
        # The throughput collector, not G1: the job is one batch of short-lived rows, and
        # 10M messages on local[2] took 88-97 s with it against 100-106 s with G1.
        # The C1 compiler only: since the workers parse before the shuffle, the JVM does no
        # work per line, only copies of blobs, and C2's compiling no longer repays itself
        # (at 10M on local[2]: 93-94 CPU s in all against 105 with C2 at four times its
        # thresholds; those thresholds had already cut the JIT's 24 CPU s of a 10M run).
        java_options = "-XX:+UseParallelGC -XX:TieredStopAtLevel=1 " + (archive.java_options() if archive else "")
        builder = builder.config("spark.driver.memory", driver_memory).config(
            "spark.driver.extraJavaOptions", java_options.strip())
    effective_master = master or ("" if under_submit else os.environ.get("MASTER", "local[*]"))
    if effective_master.startswith("local"):
        # A local run serves nobody: keep the driver on loopback and the web UI off.
        builder = (
            builder.config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.ui.enabled", "false")
        )
        if not under_submit and os.path.realpath(os.environ["PYSPARK_PYTHON"]) == os.path.realpath(sys.executable):
            # The workers run this interpreter, which has M2MC: see worker_daemon.
            builder = builder.config("spark.python.daemon.module", "m2mc.app.analytics.worker_daemon")
    builder = (
        builder.config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # The one big shuffle moves blobs the Python workers compressed (reading.BLOB_COMPRESSION):
        # Spark's lz4 over them again would spend CPU for nothing.
        .config("spark.shuffle.compress", "false")
        # Batches of the parsed rows' blobs (reading.PARTS_SCHEMA) stay well inside Arrow's 2 GB.
        .config("spark.sql.execution.arrow.maxBytesPerBatch", str(256 << 20))
        # Spark 4's order-independent shuffle checksum notices a map task whose retry wrote
        # other rows. This job's map tasks hash-partition lines of files by a function of each
        # line, so a retry writes the same rows; the checksum hashed every shuffled row (3 % of
        # the JVM's samples at 10M).
        .config("spark.sql.shuffle.orderIndependentChecksum.enabled", "false")
    )
    if effective_master.startswith("local") and _has_jemalloc():
        # The Python workers' Arrow buffers from jemalloc, not pyarrow's default mimalloc, which
        # hands pages back to the kernel and faults them in again: in one process, reading and
        # placing 3M generated messages took 16.8-17.6 CPU s with jemalloc against 18.5-21.4, and
        # peaked at 1.70 GB against 1.91.  Measured on one machine: a cluster's workers keep their
        # own pyarrow's default (some builds have no jemalloc).
        builder = builder.config("spark.executorEnv.ARROW_DEFAULT_MEMORY_POOL",
                                 os.environ.get("ARROW_DEFAULT_MEMORY_POOL", "jemalloc"))
    spark = builder.getOrCreate()
    # Ship the worker functions (this module, the kernels, the schema) by value, so executors need
    # not have M2MC installed.
    from pyspark import cloudpickle

    from . import hyperconvo, kernels, schema

    for module in (sys.modules[__name__], hyperconvo, kernels, reading, schema):
        cloudpickle.register_pickle_by_value(module)
    spark.sparkContext.setLogLevel("WARN")
    if not spark.conf.get("spark.sql.shuffle.partitions.userSet", None):
        if "spark.sql.shuffle.partitions" not in dict(spark.sparkContext.getConf().getAll()):
            # Spark's 200 is sized for clusters; AQE coalesces, but fewer map outputs is cheaper locally.
            spark.conf.set("spark.sql.shuffle.partitions", str(max(16, 8 * spark.sparkContext.defaultParallelism)))
    return spark


def _placer(lines_seen):
    """The mapInArrow body: place the task's rows (whole groups, thanks to the gid shuffle)
    and return its tables as Parquet files (see FILES_SCHEMA).

    `lines_seen` (an accumulator) adds up the lines every task read, for `analyse` to check
    that the committed output holds them all."""

    def place_batches(batches):
        import pyarrow.compute as pc

        table, blank, malformed = reading.unpacked(batches)
        lines_seen.add(table.num_rows + blank + malformed)
        placed = place_groups(table, blank, malformed)
        yield from _file_rows(placed.messages, MESSAGES_PART)
        yield from _file_rows(placed.threads, THREADS_PART)
        is_sender = pc.equal(placed.summary.column("kind"), SENDER)
        yield from _file_rows(placed.summary.filter(is_sender).select(["sender", "posts"]), SENDERS_PART)
        yield from _file_rows(placed.summary.filter(pc.invert(is_sender)), SUMMARY_PART)

    return place_batches


def place_all(spark, paths: list[str], lines_seen):
    """FILES_SCHEMA rows of the exports: the lines parsed where they are read, one shuffle of the
    parsed rows by gid (Arrow IPC blobs, each bound for one partition; see `reading`), one Arrow
    pass per task.

    Paths are files the Python workers read themselves, in byte-range splits; URLs (file://,
    hdfs://, s3a://...) go through Spark's text reader first."""
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    keys = reading.partition_keys(partitions)
    files = [path for path in paths if "://" not in path]
    urls = [path for path in paths if "://" in path]
    frames = []
    if files:
        sizes = [os.path.getsize(path) for path in files]
        splits = reading.splits_of(files, sizes, reading.split_size(sum(sizes), spark.sparkContext.defaultParallelism))
        frames.append(spark.range(0, len(splits), 1, len(splits)).mapInArrow(reading.read_splits(splits, keys), reading.PARTS_SCHEMA))
    if urls:
        lines = spark.read.option("lineSep", "\n").text(urls)
        frames.append(lines.mapInArrow(reading.parse_text(keys), reading.PARTS_SCHEMA))
    parsed = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    return parsed.repartition(partitions, "part").mapInArrow(_placer(lines_seen), FILES_SCHEMA)


def write_files(files, uri: str) -> None:
    """Write FILES_SCHEMA rows through Spark's text writer and committer (see PARQUET_MAGIC)."""
    from pyspark.sql import functions as F

    (files.select(F.col("file").cast("string").alias("file"), "part").write.partitionBy("part")
     .option("lineSep", PARQUET_MAGIC).option("maxRecordsPerFile", 1).text(uri))


class OutputLocation:
    """DIR as Spark resolves it (relative to the driver's folder, file://, hdfs://, s3a://...),
    and the Hadoop FileSystem that holds it, through the driver's JVM.

    The run writes everything into a staging folder beside the tables (`stage`), then
    `commit` replaces the old output by the new: the old tables, CSV copies, summary,
    report and plots are deleted, the staged ones renamed in, and each table folder gets
    its `_SUCCESS` marker only once its data is in place. A failed run leaves the old
    output as it was, and no marker beside anything of its own."""

    def __init__(self, spark, location: str) -> None:
        jvm = spark._jvm
        self._path = jvm.org.apache.hadoop.fs.Path
        path = self._path(location)
        try:
            self.fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
            self.uri = self.fs.makeQualified(path).toString().rstrip("/")
        except Exception as exc:  # noqa: BLE001 - py4j wraps the JVM's reasons
            raise UsageError(f"{location}: Spark cannot use this output location: {_java_reason(exc)}") from exc

    def child(self, *names: str) -> str:
        return "/".join([self.uri, *names])

    def exists(self, uri: str) -> bool:
        return bool(self.fs.exists(self._path(uri)))

    def delete(self, uri: str) -> None:
        if self.exists(uri):
            self.fs.delete(self._path(uri), True)

    def rename(self, source: str, target: str) -> None:
        if not self.fs.rename(self._path(source), self._path(target)):
            raise OSError(f"could not rename {source} to {target}")

    def touch(self, uri: str) -> None:
        self.fs.create(self._path(uri), True).close()

    def names(self, uri: str) -> list[str]:
        return [status.getPath().getName() for status in self.fs.listStatus(self._path(uri))] if self.exists(uri) else []

    def local_path(self, uri: str) -> str | None:
        """`uri` as a path of the driver's own file system, when it lies there."""
        path = self._path(uri)
        return str(path.toUri().getPath()) if self.fs.getScheme() == "file" else None

    def put(self, local_file: Path, uri: str) -> None:
        self.fs.copyFromLocalFile(False, True, self._path(Path(local_file).resolve().as_uri()), self._path(uri))

    def stage(self) -> str:
        import uuid

        staging = self.child(f"_staging-{uuid.uuid4().hex[:12]}")
        try:
            self.fs.mkdirs(self._path(staging))
        except Exception as exc:  # noqa: BLE001
            raise UsageError(f"{self.uri}: cannot create the output folder: {_java_reason(exc)}") from exc
        return staging

    def commit(self, staging: str, replaced: list[str]) -> None:
        staged = self.names(staging)
        for name in staged:
            self.delete(f"{staging}/{name}/_SUCCESS")
        for name in replaced:
            self.delete(self.child(name))
        for name in staged:
            self.rename(f"{staging}/{name}", self.child(name))
        for name in staged:
            if self.fs.getFileStatus(self._path(self.child(name))).isDirectory():
                self.touch(self.child(name, "_SUCCESS"))
        self.delete(staging)


def _java_reason(exc: Exception) -> str:
    """The first line of a JVM exception's message, without py4j's framing."""
    java = getattr(exc, "java_exception", None)
    text = str(java) if java is not None else str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith(("at ", "An error occurred"))]
    return lines[0] if lines else type(exc).__name__


def _probe_task(batches):
    """Each probe task's row, with its attempt number: an attempt > 0 means one failed."""
    import time

    import pyarrow as pa
    from pyspark import TaskContext

    time.sleep(0.3)  # long enough that every executor takes some of the tasks
    attempt = TaskContext.get().attemptNumber()
    for batch in batches:
        yield pa.RecordBatch.from_arrays([batch.column(0), pa.array([attempt] * batch.num_rows, pa.int32())], names=["id", "attempt"])


def check_executors_reach(spark, location: OutputLocation, staging: str) -> None:
    """Fail fast when the executors cannot write the output location, before the heavy stage.

    Tiny tasks, two per core, each write one row through Spark's committer into the staging
    folder. They fail on an executor that cannot write there; an executor that writes to a
    folder of its own (a local path on another host) commits files the driver never sees,
    so the driver counts them.
    """
    tasks = max(4, 2 * spark.sparkContext.defaultParallelism)
    probe = f"{staging}/_probe"
    hint = ("On a cluster, DIR must be a location every executor reaches at the same path: "
            "a shared folder, hdfs://... or s3a://... .")
    spark.sparkContext.setJobDescription("check that the executors can write the output location")
    try:
        (spark.range(0, tasks, 1, tasks).mapInArrow(_probe_task, "id long, attempt int")
         .write.partitionBy("attempt").parquet(probe))
    except Exception as exc:  # noqa: BLE001 - any reason the probe could not be written
        reason = _java_reason(exc)
        if "ModuleNotFoundError" in str(exc) or "No module named" in str(exc):
            raise UsageError(f"the executors' Python lacks a dependency ({reason}); set PYSPARK_PYTHON to an "
                             "interpreter with this project installed, at the same path on every host") from exc
        raise UsageError(f"{location.uri}: the executors cannot write there ({reason}). {hint}") from exc
    attempts = location.names(probe)
    written = sum(name.startswith("part-") for name in location.names(f"{probe}/attempt=0"))
    location.delete(probe)
    if attempts != ["_SUCCESS", "attempt=0"] and sorted(attempts) != ["_SUCCESS", "attempt=0"]:
        raise UsageError(f"{location.uri}: some executors failed to write there (retried probe tasks). {hint}")
    if written != tasks:
        raise UsageError(f"{location.uri}: the driver sees {written} of the {tasks} files the executors wrote there: "
                         f"they write to folders the driver does not see. {hint}")


def _sender_merger(median_bins: list):
    def merge(batches):
        import pyarrow as pa

        batches = [b for b in batches if b.num_rows]
        if batches:
            yield from merge_senders(pa.Table.from_batches(batches), median_bins).to_batches()

    return merge


# SENDER rows whose Parquet files on the driver's own file system hold no more than this are
# merged by the driver in one Arrow pass: the Spark pass cost two jobs, about 2 s of a run.
DRIVER_SENDER_BYTES = 256 << 20


def participants_and_latency_median(spark, sender_rows, latency_bin_counts):
    """The participants table (Arrow, by sender) and the exact median of all reply latencies.

    `sender_rows`: the placing tasks' SENDER rows, an Arrow table (merged here) or a DataFrame
    (one shuffle by sender and one Arrow pass: each task adds up its senders' partial
    counts and takes their latency medians with numpy).
    """
    import pyarrow as pa

    bins, below = middle_bins(latency_bin_counts)
    if isinstance(sender_rows, pa.Table):
        merged = merge_senders(sender_rows, bins) if sender_rows.num_rows else arrow_schema(SENDER_PASS_SCHEMA).empty_table()
    else:
        # A few rows per sender and task: one partition per core is plenty.
        partitions = spark.sparkContext.defaultParallelism
        merged = sender_rows.repartition(partitions, "sender").mapInArrow(_sender_merger(bins), SENDER_PASS_SCHEMA).toArrow()
    is_participant = merged.column("latency").is_null()
    participants = merged.filter(is_participant).select([name for name, _ in _fields(PARTICIPANT_FIELDS)]).sort_by("sender")
    middle = merged.filter(pa.compute.invert(is_participant)).group_by("latency").aggregate([("latency_count", "sum")])
    middle = sorted(zip(middle.column("latency").to_pylist(), middle.column("latency_count_sum").to_pylist()))
    n = sum(count for _, count in latency_bin_counts)
    return participants, median_of_counts(middle, below, n)


@dataclass(slots=True)
class Results:
    """The tables of one run, read back from DIR, with the figures the summary and the report need."""

    messages: object
    threads: object
    groups: object
    participants: object
    summary: dict
    histograms: dict  # plot -> [(value, count)] ascending, a null value first (see HIST)
    over_time: list  # [(gid, bin start, bin width in seconds, messages)], a width per task (see HIST)
    time_span_ms: tuple | None  # first and last sent_at of the valid messages
    group_names: dict  # gid -> group_desc
    top_threads: list = field(default_factory=list)  # the largest threads' rows (see TOP), largest first
    group_rows: list = field(default_factory=list)  # the busiest groups' rows of the groups table


def output_names() -> list[str]:
    """Every name a run may leave in DIR: a rerun deletes them all before renaming its own in."""
    return [*TABLE_NAMES, *(f"{name}.csv" for name in TABLE_NAMES), "summary.json", "report.html", "explore.html", *PLOT_FILES]


def analyse(spark, paths: list[str], out, fmt: str = "parquet", report: bool = False, read_back: bool = True) -> Results:
    """Run the whole analysis and commit the tables, summary.json and (with `report`) the
    report into `out`, a location as Spark resolves it. With `read_back`, the Results hold
    the committed tables as DataFrames (listing their files took about 0.5 s; the command
    does without them).

    One Spark job reads, shuffles, places and writes (the messages and threads tables, and
    the summary and per-sender rows; see PARQUET_MAGIC); the driver then merges the
    per-sender rows and writes the small tables (small jobs do, where the output or those
    rows are not on its own file system); `OutputLocation.commit` puts it all in place.
    """
    location = OutputLocation(spark, str(out))
    staging = location.stage()
    try:
        results = _analyse_into(spark, paths, location, staging, fmt, report)
        location.commit(staging, output_names())
    except BaseException:
        try:
            location.delete(staging)
        except Exception:  # noqa: BLE001 - the run's own error matters more
            log.warning("could not delete the staging folder %s", staging)
        raise
    for name, spec in TABLE_SPECS.items() if read_back else ():
        # With the schema given, reading back costs no job until a table is used.
        setattr(results, name, spark.read.schema(spec).parquet(location.child(name)))
    return results


def _analyse_into(spark, paths, location: OutputLocation, staging: str, fmt: str, report: bool) -> Results:
    import pyarrow as pa
    import pyarrow.compute as pc

    started = time.perf_counter()
    sc = spark.sparkContext
    if not sc.master.startswith("local"):
        # Local executors live in the driver's process: they reach whatever it reaches.
        check_executors_reach(spark, location, staging)
        log.info("the executors can write %s (%.1f s)", location.uri, time.perf_counter() - started)
    lines_seen = sc.accumulator(0)
    placed_uri = f"{staging}/_placed"
    sc.setJobDescription("read, merge, place and measure; write messages and threads")
    # Times as Parquet's standard microsecond timestamps (UTC), as pyarrow writes them, not
    # Spark's legacy INT96 (for the tables Spark writes itself when they are empty).
    spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    report_ready = None
    if report:
        import threading

        from . import thread_report

        report_ready = threading.Thread(target=thread_report.warm_up, name="report warm-up", daemon=True)
        report_ready.start()
    write_files(place_all(spark, paths, lines_seen), placed_uri)

    def part_uri(part: int) -> str | None:
        uri = f"{placed_uri}/part={part}"
        return uri if location.exists(uri) else None

    summary_uri = part_uri(SUMMARY_PART)
    small = _read_small(spark, location, summary_uri, SUMMARY_SCHEMA, summary_arrow_schema())

    def of_kind(k: int, column: str):
        return small.filter(pc.equal(small.column("kind"), k)).column(column).combine_chunks()

    info = _children(of_kind(INFO, "info"))
    lines = int(pc.sum(info["lines"]).as_py() or 0)
    if lines != lines_seen.value:
        raise UsageError(
            f"{location.uri}: the output holds the results of {lines:,} of the {lines_seen.value:,} lines the executors "
            "read: some executors wrote where the driver does not see it. On a cluster, DIR must be a location every "
            "executor reaches at the same path.")
    blank = int(pc.sum(info["blank_lines"]).as_py() or 0)
    malformed = int(pc.sum(info["malformed_lines"]).as_py() or 0)
    conflicts = int(pc.sum(info["conflicting_copies"]).as_py() or 0)
    rounds = int(pc.max(info["jump_rounds"]).as_py() or 0)
    log.info("read %d lines; messages and threads written (%.1f s)", lines, time.perf_counter() - started)

    def write_table(frame, name: str) -> None:
        frame.write.parquet(f"{staging}/{name}")

    for name, part, spec in (("messages", MESSAGES_PART, MESSAGE_FIELDS), ("threads", THREADS_PART, THREAD_FIELDS)):
        uri = part_uri(part)
        if uri is None:
            write_table(spark.createDataFrame([], spec), name)
            continue
        location.rename(uri, f"{staging}/{name}")
        for file_name in location.names(f"{staging}/{name}"):
            if file_name.endswith(".txt"):  # the text writer's extension; these are Parquet files
                location.rename(f"{staging}/{name}/{file_name}", f"{staging}/{name}/{file_name[:-4]}.parquet")

    group = _children(of_kind(GROUP, "group"))
    names = [name for name, _ in _fields(GROUP_FIELDS)]
    groups_table = pa.Table.from_arrays(
        [of_kind(GROUP, "gid"), group["desc"]] + [group[name] for name in names[2:]], schema=arrow_schema(GROUP_FIELDS)
    ).sort_by("gid")
    _write_small(spark, location, groups_table, GROUP_FIELDS, f"{staging}/groups")
    top_rows = pa.table({"gid": of_kind(TOP, "gid"), **_children(of_kind(TOP, "top"))}).to_pylist()
    top_rows = sorted(top_rows, key=lambda row: (-row["size"], row["gid"], row["root_mid"]))[:TOP_THREADS]
    for row in top_rows[TREE_THREADS:]:
        row["tree_parent"] = None  # each task sent the trees of its own largest: keep the run's
    busiest = groups_table.take(pc.sort_indices(groups_table, sort_keys=[("messages", "descending"), ("gid", "ascending")])[:EXPLORER_GROUPS])

    def total(name: str, how=pc.sum):
        return how(group[name]).as_py()

    hist = pa.table(_children(of_kind(HIST, "hist")))
    over_time = hist.filter(pc.equal(hist.column("plot"), "over_time"))
    over_time = list(zip(*(over_time.column(c).to_pylist() for c in ("series", "value", "width", "count"))))
    merged = hist.filter(pc.not_equal(hist.column("plot"), "over_time")).group_by(["plot", "value"]).aggregate([("count", "sum")])
    histograms: dict[str, list] = {}
    for plot, value, count in zip(*(merged.column(c).to_pylist() for c in ("plot", "value", "count_sum"))):
        histograms.setdefault(plot, []).append((value, count))
    for points in histograms.values():
        points.sort(key=lambda p: (p[0] is not None, p[0] or 0.0))
    n_messages = int(total("messages") or 0)
    threads_count = int(total("threads") or 0)
    pairs = int(total("pairs") or 0)
    first, last = total("first_ms", pc.min), total("last_ms", pc.max)
    if malformed:
        log.warning("skipped %d malformed line(s) of %d: not one JSON object, a field of the wrong type, "
                    "a missing gid/mid/sender or an unreadable time", malformed, lines)
    if conflicts:
        log.warning("%d message(s) have copies that disagree beyond received_at; kept the earliest received", conflicts)

    sc.setJobDescription("participants and the reply-latency median")
    senders_uri = part_uri(SENDERS_PART)
    sender_spec = f"sender string, posts {_struct_ddl(STRUCT_FIELDS['posts'])}"
    if senders_uri:
        local = location.local_path(senders_uri)
        if local is not None and sum(f.stat().st_size for f in Path(local).iterdir() if f.is_file()) <= DRIVER_SENDER_BYTES:
            import pyarrow.parquet as pq

            schema = pa.schema([pa.field("sender", pa.string()), summary_arrow_schema().field("posts")])
            sender_rows = pq.read_table(local, schema=schema, partitioning=None)
        else:
            sender_rows = spark.read.schema(sender_spec).parquet(senders_uri)
        participants, latency_median = participants_and_latency_median(
            spark, sender_rows, histograms.pop("latency_fine", []))
    else:
        participants, latency_median = arrow_schema(PARTICIPANT_FIELDS).empty_table(), None
    participants = participants.cast(arrow_schema(PARTICIPANT_FIELDS))
    _write_small(spark, location, participants, PARTICIPANT_FIELDS, f"{staging}/participants")
    location.delete(placed_uri)
    if fmt == "csv":
        sc.setJobDescription("CSV copies")
        from pyspark.sql import functions as F

        for name, spec in TABLE_SPECS.items():
            frame = spark.read.schema(spec).parquet(f"{staging}/{name}")
            # CSV has no lists: a list column is written as its JSON text, "[1,4,2]".
            frame = frame.select([F.to_json(field).alias(field) if kind.startswith("array<") else F.col(field)
                                  for field, kind in _fields(spec)])
            frame.write.option("header", True).csv(f"{staging}/{name}.csv")
    summary = {
        "input_lines": lines,
        "blank_lines": blank,
        "malformed_lines": malformed,
        "messages": n_messages,
        "duplicates_removed": lines - blank - malformed - n_messages,
        "conflicting_copies": conflicts,
        "threads": threads_count,
        "groups": groups_table.num_rows,
        "participants": participants.num_rows,
        "orphan_messages": int(total("orphan_messages") or 0),
        "invalid_messages": int(total("invalid_messages") or 0),
        "edited_messages": int(total("edited_messages") or 0),
        "deleted_messages": int(total("deleted_messages") or 0),
        "reactions": int(total("reactions") or 0),
        "files": int(total("files") or 0),
        "file_bytes": int(total("file_bytes") or 0),
        "max_depth": _maybe_int(total("max_depth", pc.max)),
        "mean_thread_size": total("size_sum") / threads_count if threads_count else None,
        "median_thread_size": median_of_counts(histograms.get("size", [])),
        "max_thread_size": _maybe_int(total("max_thread_size", pc.max)),
        "mean_depth": total("depth_sum") / threads_count if threads_count else None,
        "reply_latency_median_s": latency_median,
        "reciprocity": total("reciprocated_pairs") / pairs if pairs else None,
        "sender_pairs": pairs,
        "pointer_jumping_rounds": rounds,
    }
    log.info("tables written (%.1f s)", time.perf_counter() - started)
    results = Results(
        messages=None, threads=None, groups=None, participants=None,
        summary=summary, histograms=histograms, over_time=over_time,
        time_span_ms=None if first is None else (first, last),
        group_names=dict(zip(groups_table.column("gid").to_pylist(), groups_table.column("group_desc").to_pylist())),
        top_threads=top_rows, group_rows=busiest.to_pylist(),
    )
    import tempfile

    with tempfile.TemporaryDirectory(prefix="m2mc-thread-stats-") as local:
        local_dir = Path(local)
        (local_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        files = ["summary.json"]
        if report:
            from . import thread_report

            report_started = time.perf_counter()
            if report_ready is not None:
                report_ready.join()
            thread_report.write_report(results, local_dir)
            from . import thread_explorer

            thread_explorer.write_explorer(results, local_dir)
            files += [p.name for p in local_dir.iterdir() if p.name != "summary.json"]
            log.info("report (%.1f s)", time.perf_counter() - report_started)
        for name in files:
            location.put(local_dir / name, f"{staging}/{name}")
    return results


def _read_small(spark, location: OutputLocation, uri: str | None, spec: str, schema):
    """A folder of a few small Parquet files as one Arrow table (`schema`; empty without `uri`).

    On the driver's own file system pyarrow reads them: a Spark job took 1.3 s for the
    16 summary files of a 10M run, running cold code in two tasks. Elsewhere Spark reads."""
    import pyarrow.parquet as pq

    if uri is None:
        return schema.empty_table()
    local = location.local_path(uri)
    if local is not None:
        return pq.read_table(local, schema=schema, partitioning=None)
    return spark.read.schema(spec).parquet(uri).toArrow()


def _write_small(spark, location: OutputLocation, table, spec: str, uri: str) -> None:
    """Write a small Arrow table (`spec`'s columns) as one Parquet file in the folder `uri`.

    On the driver's own file system pyarrow writes it: through Spark, the groups and
    participants tables cost two jobs and a pandas conversion, about 1.5 s of every run
    (the commit adds `_SUCCESS` either way). Elsewhere Spark writes."""
    local = location.local_path(uri)
    if local is None:
        _frame(spark, table, spec).write.parquet(uri)
        return
    import pyarrow.parquet as pq

    os.makedirs(local)
    pq.write_table(table.cast(arrow_schema(spec)), os.path.join(local, "part-00000.parquet"), compression="snappy")


def _frame(spark, table, spec: str):
    """A one-partition DataFrame of a small Arrow table."""
    return spark.createDataFrame(table.to_pandas(), spec).coalesce(1) if table.num_rows else spark.createDataFrame([], spec)


def _maybe_int(value):
    return None if value is None else int(value)
