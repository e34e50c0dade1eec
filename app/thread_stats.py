"""m2mc-thread-stats: conversation-thread statistics of chat exports, computed with PySpark.

Reads JSON Lines exports (files or folders of `.jsonl` / `.jsonl.gz`), merges the
overlapping exports of several peers by (gid, mid), finds every message's thread root
and depth by pointer jumping (O(log depth) Spark rounds, each one checkpointed), and
writes per-message, per-thread, per-group and per-participant tables, `summary.json`
and `report.html` with PNG plots.

Also runs as `spark-submit app/thread_stats.py INPUT... --out DIR`; then the master and
the rest of the Spark configuration come from spark-submit.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("m2mc.thread_stats")

EXPORT_FIELDS = ("gid", "group_desc", "mid", "parent", "sender", "sender_name", "text", "sent_at", "received_at")
CORRUPT = "_corrupt_record"
TABLES = ("messages", "threads", "groups", "participants")
# Up to this many unresolved nodes are broadcast, so a round scans the resolved nodes
# instead of shuffling them (about 24 bytes a node).
BROADCAST_ACTIVE_ROWS = 2_000_000


class UsageError(Exception):
    """A mistake in the command line or the inputs, reported without a traceback."""


@dataclass(frozen=True, slots=True)
class JumpResult:
    """Outcome of pointer jumping: resolved nodes, unresolved (invalid) ids, rounds run."""

    resolved: object  # DataFrame(id, root_id, root_mid, depth)
    unresolved: object  # DataFrame(id)
    rounds: int


# ---------------------------------------------------------------- command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="m2mc-thread-stats", description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="export files (.jsonl, .jsonl.gz) or folders of them")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="output folder")
    parser.add_argument("--master", help="Spark master URL (default: spark-submit's, else local[*])")
    parser.add_argument("--format", choices=("parquet", "csv"), default="parquet", help="csv also writes CSV copies")
    parser.add_argument("--driver-memory", default="4g", help="driver JVM heap when not under spark-submit (default 4g)")
    parser.add_argument("--checkpoint-dir", help="reliable checkpoints here (needed on a cluster); default: local checkpoints")
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


def build_session(master: str | None, driver_memory: str, checkpoint_dir: str | None):
    """A SparkSession whose Python workers run this interpreter; Spark logs at WARN."""
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
        builder = builder.config("spark.driver.memory", driver_memory)
    effective_master = master or ("" if under_submit else os.environ.get("MASTER", "local[*]"))
    if effective_master.startswith("local"):
        # A local run serves nobody: keep the driver on loopback and the web UI off.
        builder = (
            builder.config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.ui.enabled", "false")
        )
    builder = (
        builder.config("spark.pyspark.python", os.environ["PYSPARK_PYTHON"])
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    spark = builder.getOrCreate()
    # Ship this module's worker functions by value, so executors need not have `app` installed.
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.sparkContext.setLogLevel("WARN")
    if not spark.conf.get("spark.sql.shuffle.partitions.userSet", None):
        if "spark.sql.shuffle.partitions" not in dict(spark.sparkContext.getConf().getAll()):
            # Spark's 200 is sized for clusters; AQE coalesces, but fewer map outputs is cheaper locally.
            spark.conf.set("spark.sql.shuffle.partitions", str(max(8, 4 * spark.sparkContext.defaultParallelism)))
    if checkpoint_dir:
        spark.sparkContext.setCheckpointDir(checkpoint_dir)
    return spark


# ---------------------------------------------------------------- reading and merging


def export_schema():
    from pyspark.sql import types as T

    return T.StructType([T.StructField(name, T.StringType()) for name in EXPORT_FIELDS] + [T.StructField(CORRUPT, T.StringType())])


def read_exports(spark, paths: list[str]):
    """Raw export lines as a DataFrame of strings plus the corrupt-record column."""
    return (
        spark.read.schema(export_schema())
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(paths)
    )


def merge_exports(raw):
    """Deduplicate by (gid, mid), keeping the earliest-received copy; tag ids.

    Malformed lines (bad JSON, missing gid/mid/sender, unparsable times) all fall into a
    single group with null keys, so one shuffle both merges copies and counts them.
    Returns a DataFrame(id, gid, mid, parent, sender, sender_name, group_desc, sent_at,
    received_at, copies) whose null-gid row, if any, holds the malformed count in `copies`.
    """
    from pyspark.sql import functions as F

    sent = F.try_to_timestamp(F.col("sent_at"))
    received = F.try_to_timestamp(F.col("received_at"))
    parent = F.when(F.col("parent") != "", F.col("parent"))
    valid = (
        F.col(CORRUPT).isNull()
        & (F.coalesce(F.length("gid"), F.lit(0)) > 0)
        & (F.coalesce(F.length("mid"), F.lit(0)) > 0)
        & (F.coalesce(F.length("sender"), F.lit(0)) > 0)
        & sent.isNotNull()
        & received.isNotNull()
    )
    fields = [
        F.when(valid, F.col("gid")).alias("gid"),
        F.when(valid, F.col("mid")).alias("mid"),
        F.when(valid, parent).alias("parent"),
        F.when(valid, F.col("sender")).alias("sender"),
        F.when(valid, F.col("sender_name")).alias("sender_name"),
        F.when(valid, F.col("group_desc")).alias("group_desc"),
        F.when(valid, sent).alias("sent_at"),
    ]
    # Copies of one message differ only in received_at, so grouping on every other field
    # merges them with fixed-width buffers: a hash aggregation, no sort. Copies that
    # disagree elsewhere stay apart here and are settled by `settle_conflicts`.
    merged = raw.select(*fields, F.when(valid, received).alias("received_at")).groupBy(
        "gid", "mid", "parent", "sender", "sender_name", "group_desc", "sent_at"
    ).agg(F.min("received_at").alias("received_at"), F.count(F.lit(1)).alias("copies"))
    return merged.select(
        F.monotonically_increasing_id().alias("id"),
        "gid", "mid", "parent", "sender", "sender_name", "group_desc", "sent_at", "received_at", "copies",
    )


def settle_conflicts(merged):
    """Keep one row per (gid, mid) when exports disagree on a message's fields.

    Returns (frame, number of (gid, mid) keys that had conflicting copies). The earliest
    received copy wins; its `copies` counts every line of that (gid, mid).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    valid = merged.filter(F.col("gid").isNotNull())
    conflicted = valid.groupBy("gid", "mid").agg(F.count(F.lit(1)).alias("versions")).filter(F.col("versions") > 1)
    n_conflicts = conflicted.count()
    if not n_conflicts:
        return merged, 0
    key = Window.partitionBy("gid", "mid")
    ranked = valid.select(
        "*",
        F.row_number().over(key.orderBy("received_at", "sent_at", "sender", "parent")).alias("rank"),
        F.sum("copies").over(key).alias("all_copies"),
    )
    settled = ranked.filter(F.col("rank") == 1).drop("copies", "rank").withColumnRenamed("all_copies", "copies")
    return settled.unionByName(merged.filter(F.col("gid").isNull())), n_conflicts


def link_parents(messages):
    """Attach each reply's parent id, sender and send time (null when the parent is absent)."""
    from pyspark.sql import functions as F

    parents = messages.select(
        F.col("gid"),
        F.col("mid").alias("parent"),
        F.col("id").alias("parent_id"),
        F.col("sender").alias("parent_sender"),
        F.col("sent_at").alias("parent_sent_at"),
    )
    return messages.join(parents, on=["gid", "parent"], how="left")


# ---------------------------------------------------------------- pointer jumping


def _freeze(df, reliable: bool):
    """Materialise `df` and cut its lineage so plans stay small across rounds."""
    return df.checkpoint(eager=True) if reliable else df.localCheckpoint(eager=True)


def find_roots(linked, reliable_checkpoints: bool = False) -> JumpResult:
    """Thread root and depth of every message by pointer jumping.

    `linked` has (id, mid, parent_id): parent_id is null for roots, including orphans
    whose parent is absent. Every round each unresolved node replaces its ancestor by
    that ancestor's ancestor and adds up the distance, so a node at depth d resolves in
    about log2(d) rounds. Once resolved a node never changes, so resolved pieces are
    frozen and only the shrinking unresolved set is rewritten. Nodes that can never reach
    a root (self-parents, cycles and whatever hangs below them) keep the unresolved set
    from shrinking; the loop stops at that point, or after ceil(log2(n)) + 2 rounds.
    """
    from pyspark.sql import functions as F

    roots = linked.filter(F.col("parent_id").isNull()).select(
        "id", F.col("id").alias("root_id"), F.col("mid").alias("root_mid"), F.lit(0).cast("long").alias("dist")
    )
    active = linked.filter(F.col("parent_id").isNotNull()).select(
        "id", F.col("parent_id").alias("anc"), F.lit(1).cast("long").alias("dist")
    )
    partitions = int(linked.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    resolved_pieces = [_freeze(roots, reliable_checkpoints)]
    active = _freeze(active, reliable_checkpoints)
    remaining = active.count()
    total = remaining + resolved_pieces[0].count()
    max_rounds = math.ceil(math.log2(max(total, 2))) + 2
    rounds = 0
    while remaining and rounds < max_rounds:
        rounds += 1
        lookup = _union(
            [p.select("id", "root_id", "root_mid", "dist", F.lit(None).cast("long").alias("anc")) for p in resolved_pieces]
            + [active.select("id", F.lit(None).cast("long").alias("root_id"), F.lit(None).cast("string").alias("root_mid"), "dist", "anc")]
        )
        probe = F.broadcast(active) if remaining <= BROADCAST_ACTIVE_ROWS else active
        stepped = probe.alias("a").join(lookup.alias("l"), F.col("a.anc") == F.col("l.id"), "inner").select(
            F.col("a.id").alias("id"),
            F.col("l.root_id").alias("root_id"),
            F.col("l.root_mid").alias("root_mid"),
            F.col("l.anc").alias("anc"),
            (F.col("a.dist") + F.col("l.dist")).alias("dist"),
        )
        # A broadcast join keeps the lookup's partitions, the sum of all pieces' so far:
        # without coalescing, the task count would grow like Fibonacci across rounds.
        stepped = _freeze(stepped.coalesce(partitions), reliable_checkpoints)
        resolved_pieces.append(stepped.filter(F.col("root_id").isNotNull()).select("id", "root_id", "root_mid", "dist"))
        next_active = stepped.filter(F.col("root_id").isNull()).select("id", "anc", "dist")
        left = next_active.count()
        log.info("pointer jumping round %d: %d of %d messages still unresolved", rounds, left, total)
        active = next_active
        if left == remaining:
            break  # only nodes that can never reach a root are left
        remaining = left
    resolved = _union(resolved_pieces).select("id", "root_id", "root_mid", F.col("dist").alias("depth"))
    return JumpResult(resolved=resolved, unresolved=active.select("id"), rounds=rounds)


def _union(frames):
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


# ---------------------------------------------------------------- per-thread tree measures


def _tree_measures(batches):
    """mapInArrow body: every per-thread measure of the threads in one partition.

    The input is repartitioned by root_id, so each partition holds whole threads and
    they are finished here with numpy in one pass. Subtree sizes are summed level by
    level from the deepest up: one vectorised step per depth level of the partition.
    """
    import numpy as np
    import pyarrow as pa

    tables = [pa.Table.from_batches([b]) for b in batches if b.num_rows]
    if not tables:
        return
    table = pa.concat_tables(tables)
    root = table.column("root_id").to_numpy()
    node = table.column("id").to_numpy()
    parent = table.column("parent_id").fill_null(-1).to_numpy()
    depth = table.column("depth").to_numpy().astype(np.int64)
    sent = table.column("sent_ms").to_numpy()
    latency = table.column("latency").to_numpy(zero_copy_only=False).astype(np.float64)
    sender = table.column("sender_key").to_numpy()
    n = node.size

    by_id = np.argsort(node, kind="stable")
    has_parent = depth > 0
    parent_pos = np.full(n, -1, dtype=np.int64)
    parent_pos[has_parent] = by_id[np.searchsorted(node[by_id], parent[has_parent])]

    subtree = np.ones(n, dtype=np.int64)
    by_depth = np.argsort(-depth, kind="stable")
    cuts = np.flatnonzero(np.diff(depth[by_depth])) + 1
    for level in np.split(by_depth, cuts):
        if depth[level[0]] == 0:
            break
        np.add.at(subtree, parent_pos[level], subtree[level])

    thread_ids, thread_of = np.unique(root, return_inverse=True)
    k = thread_ids.size
    size = np.bincount(thread_of, minlength=k)
    depth_sum = np.bincount(thread_of, weights=depth, minlength=k)
    max_depth = np.zeros(k, dtype=np.int64)
    np.maximum.at(max_depth, thread_of, depth)
    depth1 = np.bincount(thread_of, weights=(depth == 1), minlength=k)
    first = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, thread_of, sent)
    last = np.full(k, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, thread_of, sent)

    sum_sq = np.bincount(thread_of[has_parent], weights=(subtree[has_parent] ** 2).astype(np.float64), minlength=k)
    pairs = size * (size - 1) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        # Each edge above v lies on s(v) * (n - s(v)) paths: sum = n * sum(depth) - sum(s^2).
        wiener = np.where(size > 1, (size * depth_sum - sum_sq) / pairs, np.nan)
        root_fraction = np.where(size > 1, depth1 / (size - 1), np.nan)
    children = np.bincount(parent_pos[has_parent], minlength=n)
    leaves = np.bincount(thread_of, weights=(children == 0), minlength=k).astype(np.int64)

    level_order = np.lexsort((depth, thread_of))
    level_thread, level_depth = thread_of[level_order], depth[level_order]
    level_start = np.flatnonzero(np.r_[True, (np.diff(level_thread) != 0) | (np.diff(level_depth) != 0)])
    level_count = np.diff(np.r_[level_start, n])
    max_width = np.zeros(k, dtype=np.int64)
    np.maximum.at(max_width, level_thread[level_start], level_count)
    h_index = np.zeros(k, dtype=np.int64)
    qualifies = level_count >= level_depth[level_start]
    np.maximum.at(h_index, level_thread[level_start][qualifies], level_depth[level_start][qualifies])

    pair_order = np.lexsort((sender, thread_of))
    new_pair = np.r_[True, (np.diff(thread_of[pair_order]) != 0) | (np.diff(sender[pair_order]) != 0)]
    participants = np.bincount(thread_of[pair_order][new_pair], minlength=k)

    # Median reply latency: NaN (roots, orphans) sorts last within each thread.
    lat_order = np.lexsort((latency, thread_of))
    lat_sorted = latency[lat_order]
    valid_count = np.bincount(thread_of, weights=~np.isnan(latency), minlength=k).astype(np.int64)
    start = np.r_[0, np.cumsum(size)[:-1]]
    has_latency = valid_count > 0
    lo = np.where(has_latency, start + (valid_count - 1) // 2, 0)
    hi = np.where(has_latency, start + valid_count // 2, 0)
    median = np.where(has_latency, (lat_sorted[lo] + lat_sorted[hi]) / 2.0, np.nan)

    yield pa.RecordBatch.from_arrays(
        [
            pa.array(thread_ids),
            pa.array(size.astype(np.int64)),
            pa.array(max_depth.astype(np.int32)),
            pa.array(max_width),
            pa.array(leaves),
            pa.array(participants.astype(np.int64)),
            pa.array(first),
            pa.array(last),
            pa.array(median, from_pandas=True),
            pa.array(root_fraction, from_pandas=True),
            pa.array(wiener, from_pandas=True),
            pa.array(h_index.astype(np.int32)),
        ],
        schema=TREE_SCHEMA_ARROW(),
    )


TREE_SCHEMA = (
    "root_id long, size long, depth int, max_width long, leaves long, participants long, first_ms long, "
    "last_ms long, median_reply_latency_s double, root_reply_fraction double, wiener_index double, h_index int"
)


def TREE_SCHEMA_ARROW():  # noqa: N802 - a constant built lazily, pyarrow is imported on workers only
    import pyarrow as pa

    longs = ("root_id", "size", "max_width", "leaves", "participants", "first_ms", "last_ms")
    doubles = ("median_reply_latency_s", "root_reply_fraction", "wiener_index")
    fields = []
    for part in TREE_SCHEMA.split(", "):
        name = part.split()[0]
        fields.append(pa.field(name, pa.int64() if name in longs else pa.float64() if name in doubles else pa.int32()))
    return pa.schema(fields)


def tree_measures(messages):
    """Per-thread measures computed on the executors, one numpy pass per partition."""
    from pyspark.sql import functions as F

    nodes = messages.filter(~F.col("invalid")).select(
        "root_id",
        "id",
        F.when(F.col("depth") > 0, F.col("parent_id")).alias("parent_id"),
        "depth",
        F.unix_millis("sent_at").alias("sent_ms"),
        F.col("reply_latency_s").alias("latency"),
        F.xxhash64("sender").alias("sender_key"),
    )
    partitions = int(messages.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    return nodes.repartition(partitions, "root_id").mapInArrow(_tree_measures, TREE_SCHEMA)


# ---------------------------------------------------------------- tables


def seconds_between(later, earlier):
    from pyspark.sql import functions as F

    return (F.unix_millis(later) - F.unix_millis(earlier)) / F.lit(1000.0)


def message_table(linked, jump: JumpResult):
    """Per message: its root, depth and flags, plus the parent fields the other tables need."""
    from pyspark.sql import functions as F

    joined = linked.join(jump.resolved, on="id", how="left")
    return joined.select(
        "id",
        "gid",
        "mid",
        "parent",
        "sender",
        "sent_at",
        "received_at",
        "copies",
        "parent_id",
        "parent_sender",
        "root_id",
        "root_mid",
        F.col("depth").cast("int").alias("depth"),
        (F.col("parent").isNotNull() & F.col("parent_id").isNull()).alias("parent_missing"),
        F.col("root_id").isNull().alias("invalid"),
        F.when(F.col("depth") > 0, seconds_between(F.col("sent_at"), F.col("parent_sent_at"))).alias("reply_latency_s"),
    )


def thread_table(messages, measures):
    """Per thread: the root's identity joined to the measures of `tree_measures`."""
    from pyspark.sql import functions as F

    roots = messages.filter(F.col("depth") == 0).select(
        F.col("id").alias("root_id"), "gid", "root_mid", F.col("parent_missing").alias("orphan")
    )
    return roots.join(measures, "root_id").select(
        "root_id",
        "gid",
        "root_mid",
        "size",
        "depth",
        "max_width",
        "leaves",
        "participants",
        F.timestamp_millis("first_ms").alias("first_at"),
        F.timestamp_millis("last_ms").alias("last_at"),
        ((F.col("last_ms") - F.col("first_ms")) / F.lit(1000.0)).alias("duration_s"),
        "median_reply_latency_s",
        "root_reply_fraction",
        "wiener_index",
        "h_index",
        "orphan",
    )


def reciprocity_pairs(messages):
    """Per group, directed sender pairs A->B (A replied to B, A != B) and whether B->A exists."""
    from pyspark.sql import functions as F

    pairs = (
        messages.filter(F.col("parent_sender").isNotNull() & (F.col("sender") != F.col("parent_sender")))
        .select("gid", F.col("sender").alias("a"), F.col("parent_sender").alias("b"))
        .distinct()
    )
    back = pairs.select("gid", F.col("b").alias("a"), F.col("a").alias("b"), F.lit(True).alias("reciprocated"))
    return pairs.join(back, ["gid", "a", "b"], "left").select("gid", "a", "b", F.coalesce("reciprocated", F.lit(False)).alias("reciprocated"))


def group_table(merged, messages, threads, pairs):
    from pyspark.sql import functions as F

    per_group_messages = messages.groupBy("gid").agg(
        F.count(F.lit(1)).alias("messages"),
        F.count(F.when(F.col("parent_missing"), 1)).alias("orphan_messages"),
        F.count(F.when(F.col("invalid"), 1)).alias("invalid_messages"),
    )
    desc = merged.groupBy("gid").agg(F.max("group_desc").alias("group_desc"))
    people = messages.select("gid", "sender").distinct().groupBy("gid").agg(F.count(F.lit(1)).alias("participants"))
    per_group_threads = threads.groupBy("gid").agg(
        F.count(F.lit(1)).alias("threads"),
        F.mean("size").alias("mean_thread_size"),
        F.median("size").alias("median_thread_size"),
        F.max("size").alias("max_thread_size"),
        F.max("depth").alias("max_depth"),
    )
    recip = pairs.groupBy("gid").agg(F.mean(F.col("reciprocated").cast("double")).alias("reciprocity"))
    return (
        per_group_messages.join(desc, "gid", "left")
        .join(people, "gid", "left")
        .join(per_group_threads, "gid", "left")
        .join(recip, "gid", "left")
        .select(
            "gid",
            "group_desc",
            "messages",
            F.coalesce("threads", F.lit(0)).alias("threads"),
            "participants",
            "mean_thread_size",
            "median_thread_size",
            "max_thread_size",
            "max_depth",
            "orphan_messages",
            "invalid_messages",
            "reciprocity",
        )
    )


def participant_table(merged, messages):
    from pyspark.sql import functions as F

    names = merged.groupBy("sender").agg(F.max("sender_name").alias("sender_name"))
    own = messages.groupBy("sender").agg(
        F.count(F.lit(1)).alias("messages"),
        F.count(F.when(F.col("depth") == 0, 1)).alias("threads_started"),
        F.count(F.when(F.col("parent").isNotNull(), 1)).alias("replies_sent"),
        F.median("reply_latency_s").alias("median_reply_latency_s"),
    )
    received = (
        messages.filter(F.col("parent_sender").isNotNull())
        .groupBy(F.col("parent_sender").alias("sender"))
        .agg(F.count(F.lit(1)).alias("replies_received"))
    )
    posts = messages.filter(~F.col("invalid")).groupBy("root_id", "sender").agg(F.count(F.lit(1)).alias("posts"))
    threads = posts.groupBy("sender").agg(
        F.count(F.lit(1)).alias("threads"), F.count(F.when(F.col("posts") > 1, 1)).alias("reentry")
    )
    return (
        own.join(names, "sender", "left")
        .join(received, "sender", "left")
        .join(threads, "sender", "left")
        .select(
            "sender",
            "sender_name",
            "messages",
            F.coalesce("threads", F.lit(0)).alias("threads"),
            "threads_started",
            "replies_sent",
            F.coalesce("replies_received", F.lit(0)).alias("replies_received"),
            "median_reply_latency_s",
            F.coalesce("reentry", F.lit(0)).alias("reentry"),
        )
    )


# ---------------------------------------------------------------- the whole job


@dataclass(slots=True)
class Results:
    """DataFrames and figures of one run (kept for tests and the report)."""

    merged: object
    messages: object
    threads: object
    groups: object
    participants: object
    summary: dict


def analyse(spark, paths: list[str], reliable_checkpoints: bool = False) -> Results:
    """Run the whole analysis; DataFrames are cached or checkpointed where reused."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    started = time.perf_counter()
    merged_all = _freeze(merge_exports(read_exports(spark, paths)), reliable_checkpoints)
    merged_all, conflicts = settle_conflicts(merged_all)
    if conflicts:
        log.warning("%d message(s) have copies that disagree beyond received_at; kept the earliest received", conflicts)
        merged_all = _freeze(merged_all, reliable_checkpoints)
    counts = merged_all.agg(
        F.sum("copies").alias("lines"),
        F.sum(F.when(F.col("gid").isNull(), F.col("copies"))).alias("malformed"),
        F.count(F.when(F.col("gid").isNotNull(), 1)).alias("messages"),
    ).first()
    malformed = int(counts["malformed"] or 0)
    lines = int(counts["lines"] or 0)
    n_messages = int(counts["messages"])
    if malformed:
        log.warning("skipped %d malformed line(s) of %d: bad JSON, a missing gid/mid/sender or an unreadable time", malformed, lines)
    log.info("read %d lines: %d distinct messages (%.1f s)", lines, n_messages, time.perf_counter() - started)
    merged = merged_all.filter(F.col("gid").isNotNull())

    linked = _freeze(link_parents(merged), reliable_checkpoints)
    jump = find_roots(linked, reliable_checkpoints)
    log.info("thread roots found in %d pointer-jumping rounds (%.1f s)", jump.rounds, time.perf_counter() - started)

    messages = message_table(linked, jump).persist(StorageLevel.MEMORY_AND_DISK)
    measures = tree_measures(messages)
    threads = thread_table(messages, measures).persist(StorageLevel.MEMORY_AND_DISK)
    pairs = reciprocity_pairs(messages).persist(StorageLevel.MEMORY_AND_DISK)
    groups = group_table(merged, messages, threads, pairs).persist(StorageLevel.MEMORY_AND_DISK)
    participants = participant_table(merged, messages).persist(StorageLevel.MEMORY_AND_DISK)

    msg_stats = messages.agg(
        F.count(F.when(F.col("parent_missing"), 1)).alias("orphans"),
        F.count(F.when(F.col("invalid"), 1)).alias("invalid"),
        F.median("reply_latency_s").alias("latency"),
    ).first()
    thread_stats = threads.agg(
        F.count(F.lit(1)).alias("threads"),
        F.max("depth").alias("max_depth"),
        F.mean("size").alias("mean_size"),
        F.median("size").alias("median_size"),
        F.max("size").alias("max_size"),
        F.mean("depth").alias("mean_depth"),
    ).first()
    pair_stats = pairs.agg(F.count(F.lit(1)).alias("pairs"), F.mean(F.col("reciprocated").cast("double")).alias("share")).first()
    summary = {
        "input_lines": lines,
        "malformed_lines": malformed,
        "messages": n_messages,
        "duplicates_removed": lines - malformed - n_messages,
        "conflicting_copies": conflicts,
        "threads": int(thread_stats["threads"]),
        "groups": groups.count(),
        "participants": participants.count(),
        "orphan_messages": int(msg_stats["orphans"]),
        "invalid_messages": int(msg_stats["invalid"]),
        "max_depth": _maybe_int(thread_stats["max_depth"]),
        "mean_thread_size": _maybe_float(thread_stats["mean_size"]),
        "median_thread_size": _maybe_float(thread_stats["median_size"]),
        "max_thread_size": _maybe_int(thread_stats["max_size"]),
        "mean_depth": _maybe_float(thread_stats["mean_depth"]),
        "reply_latency_median_s": _maybe_float(msg_stats["latency"]),
        "reciprocity": _maybe_float(pair_stats["share"]),
        "sender_pairs": int(pair_stats["pairs"]),
        "pointer_jumping_rounds": jump.rounds,
    }
    return Results(merged=merged, messages=messages, threads=threads, groups=groups, participants=participants, summary=summary)


def _maybe_int(value):
    return None if value is None else int(value)


def _maybe_float(value):
    return None if value is None else float(value)


MESSAGE_COLUMNS = (
    "gid", "mid", "parent", "sender", "sent_at", "received_at", "root_mid", "depth",
    "reply_latency_s", "parent_missing", "invalid", "copies",
)
THREAD_COLUMNS = (
    "gid", "root_mid", "size", "depth", "max_width", "leaves", "participants", "first_at", "last_at",
    "duration_s", "median_reply_latency_s", "root_reply_fraction", "wiener_index", "h_index", "orphan",
)


def write_outputs(results: Results, out: Path, fmt: str) -> None:
    tables = {
        "messages": results.messages.select(*MESSAGE_COLUMNS),
        "threads": results.threads.select(*THREAD_COLUMNS),
        "groups": results.groups,
        "participants": results.participants,
    }
    out_uri = str(out)
    for name, frame in tables.items():
        started = time.perf_counter()
        if name != "messages":
            frame = frame.coalesce(1) if name != "threads" else frame
        frame.write.mode("overwrite").parquet(f"{out_uri}/{name}")
        if fmt == "csv":
            frame.write.mode("overwrite").option("header", True).csv(f"{out_uri}/{name}.csv")
        log.info("wrote %s (%.1f s)", name, time.perf_counter() - started)
    (out / "summary.json").write_text(json.dumps(results.summary, indent=2) + "\n")


def run(args: argparse.Namespace) -> int:
    paths = expand_inputs(args.inputs)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    from pyspark.sql import SparkSession

    # A session that already exists (tests, notebooks) belongs to the caller: don't stop it.
    borrowed = SparkSession.getActiveSession() is not None
    spark = build_session(args.master, args.driver_memory, args.checkpoint_dir)
    try:
        results = analyse(spark, paths, reliable_checkpoints=bool(args.checkpoint_dir))
        write_outputs(results, args.out, args.format)
        if not args.no_report:
            from app import thread_report

            thread_report.write_report(results, args.out)
    finally:
        if not borrowed:
            spark.stop()
    log.info("done in %.1f s: %s", time.perf_counter() - started, json.dumps(results.summary))
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parse_args(argv)
    try:
        return run(args)
    except UsageError as exc:
        print(f"m2mc-thread-stats: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    # Under spark-submit this file runs as a script: make the `app` package importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
