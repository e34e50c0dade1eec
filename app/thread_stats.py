"""m2mc-thread-stats: conversation-thread statistics of chat exports, computed with PySpark.

Reads JSON Lines exports (files or folders of `.jsonl` / `.jsonl.gz`) and shuffles the
lines once, by group: threads never cross groups, so each task then holds whole
groups and finishes them with vectorised numpy in one Arrow pass (`place_groups`):
it merges the overlapping exports of several peers by (gid, mid), links replies to
parents, finds every message's thread root and depth by pointer jumping (about
log2(depth) numpy gathers, no loop over messages), and computes the per-thread tree
measures and the flags the per-group and per-participant tables count. Spark then
aggregates that one cached frame into the tables, `summary.json` and `report.html`.

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
TIME_FIELDS = ("sent_at", "received_at")
CORRUPT = "_corrupt_record"


class UsageError(Exception):
    """A mistake in the command line or the inputs, reported without a traceback."""


# ---------------------------------------------------------------- command line


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="m2mc-thread-stats", description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="+", metavar="INPUT", help="export files (.jsonl, .jsonl.gz) or folders of them")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR", help="output folder")
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


def build_session(master: str | None, driver_memory: str):
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
            spark.conf.set("spark.sql.shuffle.partitions", str(max(16, 8 * spark.sparkContext.defaultParallelism)))
    return spark


# ---------------------------------------------------------------- reading


def export_schema():
    """Every export field but `text`, as strings; lines that are not JSON objects land in CORRUPT.

    Times stay strings here: `place_groups` parses them with Arrow, many times faster than
    the JSON reader's per-row parser.
    """
    from pyspark.sql import types as T

    fields = [T.StructField(name, T.StringType()) for name in EXPORT_FIELDS if name != "text"]
    return T.StructType(fields + [T.StructField(CORRUPT, T.StringType())])


def read_exports(spark, paths: list[str]):
    """Export lines as string columns plus the corrupt-record column (set for bad JSON)."""
    return (
        spark.read.schema(export_schema())
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(paths)
    )


def export_rows(raw):
    """The columns `place_groups` reads; malformed lines keep a null gid so they can be counted.

    Malformed: bad JSON, a missing or empty gid/mid/sender, a missing time (an unreadable
    one is caught by `place_groups`). An empty parent means a thread root, like a null one.
    """
    from pyspark.sql import functions as F

    valid = (
        F.col(CORRUPT).isNull()
        & (F.coalesce(F.length("gid"), F.lit(0)) > 0)
        & (F.coalesce(F.length("mid"), F.lit(0)) > 0)
        & (F.coalesce(F.length("sender"), F.lit(0)) > 0)
        & F.col("sent_at").isNotNull()
        & F.col("received_at").isNotNull()
    )
    return raw.select(
        F.when(valid, F.col("gid")).alias("gid"),
        "mid",
        F.when(F.col("parent") != "", F.col("parent")).alias("parent"),
        "sender",
        "sender_name",
        "group_desc",
        "sent_at",
        "received_at",
    )


# ---------------------------------------------------------------- one group-complete partition in numpy

def parse_times(strings):
    """ISO 8601 strings to an Arrow timestamp[us, UTC] array; null where unreadable.

    Arrow's vectorised cast reads the export's own format ("...T08:00:14.143Z"); only a
    column it refuses (no zone, a typo) goes value by value through `fromisoformat`, a
    time without a zone taken as UTC.
    """
    import datetime as dt

    import pyarrow as pa

    target = pa.timestamp("us", tz="UTC")
    try:
        return strings.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    values = []
    for text in strings.to_pylist():
        try:
            stamp = dt.datetime.fromisoformat(text)
        except (TypeError, ValueError):
            values.append(None)
            continue
        values.append(stamp if stamp.tzinfo else stamp.replace(tzinfo=dt.timezone.utc))
    return pa.array(values, type=target)


# What `place_groups` returns: rows of five kinds in one frame (Spark's mapInArrow has one
# output schema). MESSAGE rows: one per distinct (gid, mid). THREAD rows: one per thread
# (gid, root_mid, orphan flag in parent_missing, measures). GROUP rows: one per gid, the
# whole groups table row plus sums the summary adds up. SENDER rows: one per sender of
# the task, partial counts and that sender's reply latencies, merged across tasks by
# Spark. One INFO row per task: malformed lines, conflicting keys, pointer-jumping rounds.
# Each kind comes out in one run of rows, so the cache's per-batch min/max of `kind` lets
# a scan of the small kinds skip the message batches (`kind` is an int: a filter on a
# byte column compares through a cast, which the cache cannot prune with).
MESSAGE, THREAD, GROUP, SENDER, INFO = 0, 1, 2, 3, 4
MESSAGE_FIELDS = (
    "kind int, gid string, mid string, parent string, sender string, sent_at timestamp, received_at timestamp, "
    "copies long, root_mid string, depth int, reply_latency_s double, parent_missing boolean, invalid boolean"
)
# The measures of the other kinds sit in one struct column each: Spark's cache stores a
# null as a 4-byte position, so 40 mostly-null flat columns would cost 160 bytes a message.
STRUCT_FIELDS = {
    "thread": (
        "size long, depth int, max_width long, leaves long, participants long, first_ms long, last_ms long, "
        "median_latency_s double, root_reply_fraction double, wiener_index double, h_index int"
    ),
    "group": (
        "desc string, lines long, messages long, threads long, participants long, mean_thread_size double, "
        "median_thread_size double, max_thread_size long, max_depth int, orphan_messages long, invalid_messages long, "
        "reciprocity double, size_sum long, depth_sum long, pairs long, reciprocated_pairs long"
    ),
    "posts": (
        "name string, messages long, threads long, threads_started long, replies_sent long, replies_received long, "
        "reentry long, latencies array<double>"
    ),
    "info": "malformed_lines long, conflicting_copies long, jump_rounds int",
}


def _fields(spec: str) -> list[tuple[str, str]]:
    return [tuple(part.split(" ", 1)) for part in spec.split(", ")]


PLACED_SCHEMA = MESSAGE_FIELDS + "".join(
    f", {name} struct<{', '.join(f'{field}: {kind}' for field, kind in _fields(spec))}>" for name, spec in STRUCT_FIELDS.items()
)


def placed_arrow_schema(timestamp_type):
    import pyarrow as pa

    kinds = {
        "byte": pa.int8(), "string": pa.string(), "timestamp": timestamp_type, "long": pa.int64(), "int": pa.int32(),
        "double": pa.float64(), "boolean": pa.bool_(), "array<double>": pa.list_(pa.float64()),
    }
    fields = [pa.field(name, kinds[kind]) for name, kind in _fields(MESSAGE_FIELDS)]
    for name, spec in STRUCT_FIELDS.items():
        fields.append(pa.field(name, pa.struct([pa.field(field, kinds[kind]) for field, kind in _fields(spec)])))
    return pa.schema(fields)


def _codes(column):
    """Dense int64 codes of a (chunked) Arrow column's values, equal values equal codes; and how many."""
    encoded = column.combine_chunks().dictionary_encode()
    return encoded.indices.to_numpy(zero_copy_only=False).astype("int64"), encoded.dictionary


def _same(left, right):
    """Null-aware equality of two Arrow arrays (null equals null)."""
    import pyarrow.compute as pc

    both_null = pc.and_(pc.is_null(left), pc.is_null(right))
    return pc.or_(both_null, pc.fill_null(pc.equal(left, right), False))


def _first_rows(code, k):
    """Row index of the first occurrence of each code 0..k-1."""
    import numpy as np

    first = np.zeros(k, dtype=np.int64)
    first[code[::-1]] = np.arange(code.size - 1, -1, -1)
    return first


def _max_strings(code, strings, k):
    """Per code 0..k-1, the largest non-null string of `strings` (null when all are null)."""
    import numpy as np
    import pyarrow as pa

    grouped = pa.table({"code": code, "value": strings}).group_by("code").aggregate([("value", "max")])
    positions = np.full(k, -1, dtype=np.int64)
    positions[grouped.column("code").to_numpy()] = np.arange(grouped.num_rows)
    return grouped.column("value_max").take(pa.array(positions, mask=positions < 0))


def grouped_median(group, values, k):
    """Per group 0..k-1, the median of `values` (NaN for an empty group), as Spark's percentile
    computes it: the middle value, or 0.5 * lower + 0.5 * upper of the middle two."""
    import numpy as np

    order = np.lexsort((values, group))
    ordered = values[order].astype(np.float64)
    counts = np.bincount(group, minlength=k)
    start = np.r_[0, np.cumsum(counts)[:-1]]
    has = counts > 0
    lo = np.where(has, start + (counts - 1) // 2, 0)
    hi = np.where(has, start + counts // 2, 0)
    if not ordered.size:
        return np.full(k, np.nan)
    return np.where(has, 0.5 * ordered[lo] + 0.5 * ordered[hi], np.nan)


def merge_copies(table, key):
    """Rows to keep, their copy counts and the number of conflicting keys.

    Copies of one (gid, mid) — equal `key` — come from several exports. The earliest
    received copy wins (then earliest sent_at, then sender, then parent, nulls first); its
    `copies` counts every line of the key. A key whose copies disagree on anything but
    received_at is a conflict. Returns (kept row indices ascending, or None when every key
    is distinct; copies per kept row; conflicting keys).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    order = np.argsort(key, kind="stable")
    sorted_key = key[order]
    starts = np.flatnonzero(np.r_[True, sorted_key[1:] != sorted_key[:-1]])
    counts = np.diff(np.r_[starts, key.size])
    if starts.size == key.size:
        return None, np.ones(key.size, dtype=np.int64), 0
    keep = order[starts]
    multi = np.flatnonzero(counts > 1)
    rows = order[np.repeat(counts > 1, counts)]
    candidates = table.select(["received_at", "sent_at", "sender", "parent", "sender_name", "group_desc"]).take(pa.array(rows))
    candidates = candidates.append_column("key", pa.array(key[rows]))
    ranked = pc.sort_indices(
        candidates,
        sort_keys=[("key", "ascending"), ("received_at", "ascending"), ("sent_at", "ascending"), ("sender", "ascending"), ("parent", "ascending")],
        null_placement="at_start",
    ).to_numpy()
    ranked_key = key[rows][ranked]
    group_start = np.flatnonzero(np.r_[True, ranked_key[1:] != ranked_key[:-1]])
    winner_of = np.repeat(group_start, np.diff(np.r_[group_start, ranked.size]))
    mine = candidates.take(pa.array(ranked))
    winners = candidates.take(pa.array(ranked[winner_of]))
    agree = np.ones(ranked.size, dtype=bool)
    for name in ("parent", "sender", "sender_name", "group_desc", "sent_at"):
        agree &= _same(mine.column(name), winners.column(name)).to_numpy(zero_copy_only=False)
    conflicts = np.unique(ranked_key[~agree]).size
    keep[multi] = rows[ranked[group_start]]
    ascending = np.argsort(keep)
    return keep[ascending], counts[ascending].astype(np.int64), int(conflicts)


def jump_to_roots(parent_pos):
    """Root position and depth of every node by pointer jumping; -1 roots for invalid nodes.

    `parent_pos[i]` is the position of i's parent, or -1 for a root. Each round every
    node whose ancestor is not yet a root replaces it by that ancestor's ancestor, adding
    up the distance, so a node at depth d is done after ceil(log2(d)) rounds. Nodes that
    can never reach a root (self-parents, cycles and what hangs below them) stop the loop
    as soon as a round resolves nothing more, or after ceil(log2(n)) + 1 rounds.
    Returns (root position, depth, rounds run).
    """
    import numpy as np

    n = parent_pos.size
    is_root = parent_pos < 0
    anc = np.where(is_root, np.arange(n), parent_pos)
    dist = (~is_root).astype(np.int64)
    active = np.flatnonzero(~is_root[anc])
    max_rounds = math.ceil(math.log2(max(n, 2))) + 1
    rounds = 0
    while active.size and rounds < max_rounds:
        rounds += 1
        hop = anc[active]
        dist[active] += dist[hop]
        anc[active] = anc[hop]
        left = active[~is_root[anc[active]]]
        if left.size == active.size:
            break  # nothing resolved this round: only nodes that never reach a root are left
        active = left
    valid = is_root[anc]
    return np.where(valid, anc, -1), np.where(valid, dist, -1), rounds


def distinct_pairs(major, minor, n_minor):
    """Distinct (major, minor) pairs of two code arrays: their majors, minors and row counts."""
    import numpy as np

    width = max(n_minor, 1)
    pairs, counts = np.unique(major.astype(np.int64) * width + minor, return_counts=True)
    return pairs // width, pairs % width, counts


def thread_measures(parent_pos, root_pos, depth, sent_ms, latency_s, sender_code, n_senders):
    """Per-thread measures over the valid nodes (root_pos >= 0), one numpy pass.

    Returns (root row positions, dict of per-thread arrays in that order, and per sender
    the number of threads posted in and of threads posted in more than once).
    """
    import numpy as np

    n = parent_pos.size
    valid = root_pos >= 0
    root_rows = np.flatnonzero(valid & (depth == 0))
    k = root_rows.size
    rows = np.flatnonzero(valid)
    thread = np.searchsorted(root_rows, root_pos[rows])
    d = depth[rows]
    reply = d > 0

    size = np.bincount(thread, minlength=k)
    depth_sum = np.bincount(thread, weights=d, minlength=k)
    max_depth = np.zeros(k, dtype=np.int64)
    np.maximum.at(max_depth, thread, d)
    first = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, thread, sent_ms[rows])
    last = np.full(k, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, thread, sent_ms[rows])

    # Subtree sizes, summed into parents level by level from the deepest up.
    subtree = np.ones(n, dtype=np.int64)
    by_depth = rows[np.argsort(-d, kind="stable")]
    cuts = np.flatnonzero(np.diff(depth[by_depth])) + 1
    for level in np.split(by_depth, cuts) if by_depth.size else []:
        if depth[level[0]] == 0:
            break
        np.add.at(subtree, parent_pos[level], subtree[level])
    replies = rows[reply]
    sum_sq = np.bincount(thread[reply], weights=(subtree[replies] ** 2).astype(np.float64), minlength=k)
    pairs = size * (size - 1) / 2.0
    depth1 = np.bincount(thread, weights=(d == 1), minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        # Each edge above v lies on s(v) * (n - s(v)) paths: sum = n * sum(depth) - sum(s^2).
        wiener = np.where(size > 1, (size * depth_sum - sum_sq) / pairs, np.nan)
        root_fraction = np.where(size > 1, depth1 / (size - 1), np.nan)
    children = np.bincount(parent_pos[replies], minlength=n)
    leaves = np.bincount(thread, weights=(children[rows] == 0), minlength=k).astype(np.int64)

    level_order = np.lexsort((d, thread))
    level_thread, level_depth = thread[level_order], d[level_order]
    level_start = np.flatnonzero(np.r_[True, (np.diff(level_thread) != 0) | (np.diff(level_depth) != 0)])
    level_count = np.diff(np.r_[level_start, rows.size])
    max_width = np.zeros(k, dtype=np.int64)
    np.maximum.at(max_width, level_thread[level_start], level_count)
    h_index = np.zeros(k, dtype=np.int64)
    qualifies = level_count >= level_depth[level_start]
    np.maximum.at(h_index, level_thread[level_start][qualifies], level_depth[level_start][qualifies])

    poster_thread, poster, posts = distinct_pairs(thread, sender_code[rows], n_senders)
    participants = np.bincount(poster_thread, minlength=k).astype(np.int64)
    sender_threads = np.bincount(poster, minlength=n_senders).astype(np.int64)
    sender_reentry = np.bincount(poster, weights=posts > 1, minlength=n_senders).astype(np.int64)

    median = grouped_median(thread[reply], latency_s[replies], k)

    measures = {
        "size": size.astype(np.int64),
        "depth": max_depth.astype(np.int32),
        "max_width": max_width,
        "leaves": leaves,
        "participants": participants,
        "first_ms": first,
        "last_ms": last,
        "median_latency_s": median,
        "root_reply_fraction": root_fraction,
        "wiener_index": wiener,
        "h_index": h_index.astype(np.int32),
    }
    return root_rows, measures, sender_threads, sender_reentry


def reply_pairs(gid_code, sender_code, parent_pos, n_senders, n_groups):
    """Per group: distinct directed sender pairs A->B (A replied to B, A != B), and how many
    of them are reciprocated (B->A occurs in the group too)."""
    import numpy as np

    linked = np.flatnonzero(parent_pos >= 0)
    a = sender_code[linked]
    b = sender_code[parent_pos[linked]]
    cross = a != b
    g, a, b = gid_code[linked[cross]], a[cross], b[cross]
    s = max(n_senders, 1)
    if n_groups * s * s < 2**62:
        key, back = (g * s + a) * s + b, (g * s + b) * s + a
    else:
        # Two dense steps keep the keys inside int64: (A, B) first, then (group, pair).
        both = np.unique(np.concatenate([a * s + b, b * s + a]))
        key = g * both.size + np.searchsorted(both, a * s + b)
        back = g * both.size + np.searchsorted(both, b * s + a)
    distinct, first = np.unique(key, return_index=True)
    position = np.minimum(np.searchsorted(distinct, back[first]), max(distinct.size - 1, 0))
    reciprocated = distinct[position] == back[first] if distinct.size else np.zeros(0, bool)
    pairs = np.bincount(g[first], minlength=n_groups).astype(np.int64)
    return pairs, np.bincount(g[first], weights=reciprocated, minlength=n_groups).astype(np.int64)


def place_groups(table):
    """Everything per message, per group and per task's sender for a Table of whole groups.

    `table` has the columns of `export_rows`. Returns a Table with PLACED_SCHEMA: MESSAGE
    rows (merged messages with roots, depths and, on root rows, thread measures), GROUP
    rows, SENDER rows and one INFO row.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = placed_arrow_schema(pa.timestamp("us", tz="UTC"))
    lines = table.num_rows
    table = table.filter(pc.is_valid(table.column("gid"))).combine_chunks()
    for name in TIME_FIELDS:
        table = table.set_column(table.schema.get_field_index(name), name, parse_times(table.column(name).combine_chunks()))
    table = table.filter(pc.and_(pc.is_valid(table.column("sent_at")), pc.is_valid(table.column("received_at"))))
    malformed = lines - table.num_rows
    if not table.num_rows:
        return _info_part(schema, malformed, 0, 0)

    gid_code, gids = _codes(table.column("gid"))
    mid_code, mid_values = _codes(table.column("mid"))
    m = len(mid_values)
    key = gid_code * m + mid_code
    keep, copies, conflicts = merge_copies(table, key)
    if keep is not None:
        table = table.take(pa.array(keep))
        key, gid_code = key[keep], gid_code[keep]
    n, n_groups = table.num_rows, len(gids)

    # Parent links: the parent's key in the same group, looked up among the sorted keys.
    parent = table.column("parent")
    parent_code = pc.fill_null(pc.index_in(parent, value_set=mid_values), -1).to_numpy(zero_copy_only=False).astype(np.int64)
    parent_key = gid_code * m + parent_code
    by_key = np.argsort(key)
    sorted_key = key[by_key]
    position = np.minimum(np.searchsorted(sorted_key, parent_key), n - 1)
    found = (parent_code >= 0) & (sorted_key[position] == parent_key)
    parent_pos = np.where(found, by_key[position], -1)
    parent_missing = pc.is_valid(parent).to_numpy(zero_copy_only=False) & ~found

    root_pos, depth, rounds = jump_to_roots(parent_pos)
    valid = root_pos >= 0
    sent_ms = np.floor_divide(table.column("sent_at").cast(pa.int64()).to_numpy(zero_copy_only=False), 1000)
    has_latency = valid & (depth > 0)
    latency = np.full(n, np.nan)
    latency[has_latency] = (sent_ms[has_latency] - sent_ms[parent_pos[has_latency]]) / 1000.0

    sender_code, senders = _codes(table.column("sender"))
    n_senders = len(senders)
    root_rows, measures, sender_threads, sender_reentry = thread_measures(parent_pos, root_pos, depth, sent_ms, latency, sender_code, n_senders)

    message_columns = {
        "gid": table.column("gid"),
        "mid": table.column("mid"),
        "parent": parent,
        "sender": table.column("sender"),
        "sent_at": table.column("sent_at"),
        "received_at": table.column("received_at"),
        "copies": pa.array(copies),
        "root_mid": table.column("mid").take(pa.array(np.maximum(root_pos, 0), mask=~valid)),
        "depth": pa.array(depth.astype(np.int32), mask=~valid),
        "reply_latency_s": pa.array(latency, mask=~has_latency),
        "parent_missing": pa.array(parent_missing),
        "invalid": pa.array(~valid),
    }
    k = root_rows.size
    root_index = pa.array(root_rows)
    thread_part = {
        "gid": table.column("gid").take(root_index),
        "root_mid": table.column("mid").take(root_index),
        "parent_missing": pa.array(parent_missing[root_rows]),
        "thread": _struct(
            schema.field("thread").type,
            {name: _arrow(values, np.zeros(k, dtype=bool)) for name, values in measures.items()},
            np.zeros(k, dtype=bool),
        ),
    }

    member_group, _, _ = distinct_pairs(gid_code, sender_code, n_senders)
    thread_gid = gid_code[root_rows]
    sizes, thread_depths = measures["size"], measures["depth"]
    threads = np.bincount(thread_gid, minlength=n_groups)
    no_threads = threads == 0
    size_sum = np.bincount(thread_gid, weights=sizes, minlength=n_groups).astype(np.int64)
    max_size = np.zeros(n_groups, dtype=np.int64)
    np.maximum.at(max_size, thread_gid, sizes)
    max_depth = np.zeros(n_groups, dtype=np.int32)
    np.maximum.at(max_depth, thread_gid, thread_depths)
    pairs, reciprocated = reply_pairs(gid_code, sender_code, parent_pos, n_senders, n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_size = size_sum / threads
        reciprocity = reciprocated / pairs
    group_columns = {
        "desc": _max_strings(gid_code, table.column("group_desc"), n_groups),
        "lines": _counts(gid_code, n_groups, copies),
        "messages": _counts(gid_code, n_groups),
        "threads": pa.array(threads.astype(np.int64)),
        "participants": _counts(member_group, n_groups),
        "mean_thread_size": _arrow(mean_size, no_threads),
        "median_thread_size": _arrow(grouped_median(thread_gid, sizes, n_groups), no_threads),
        "max_thread_size": _arrow(max_size, no_threads),
        "max_depth": _arrow(max_depth, no_threads),
        "orphan_messages": _counts(gid_code, n_groups, parent_missing),
        "invalid_messages": _counts(gid_code, n_groups, ~valid),
        "reciprocity": _arrow(reciprocity, pairs == 0),
        "size_sum": pa.array(size_sum),
        "depth_sum": pa.array(np.bincount(thread_gid, weights=thread_depths, minlength=n_groups).astype(np.int64)),
        "pairs": pa.array(pairs),
        "reciprocated_pairs": pa.array(reciprocated),
    }

    # Each sender's reply latencies in this task, as one list per sender.
    latency_sender = sender_code[has_latency]
    by_sender = np.argsort(latency_sender, kind="stable")
    offsets = np.r_[0, np.cumsum(np.bincount(latency_sender, minlength=n_senders))].astype(np.int32)
    sender_columns = {
        "name": _max_strings(sender_code, table.column("sender_name"), n_senders),
        "messages": _counts(sender_code, n_senders),
        "threads": pa.array(sender_threads),
        "threads_started": _counts(sender_code, n_senders, valid & (depth == 0)),
        "replies_sent": _counts(sender_code, n_senders, pc.is_valid(parent).to_numpy(zero_copy_only=False)),
        "replies_received": _counts(sender_code[parent_pos[found]], n_senders),
        "reentry": pa.array(sender_reentry),
        "latencies": pa.ListArray.from_arrays(pa.array(offsets), pa.array(latency[has_latency][by_sender])),
    }
    no_mask = np.zeros(n_groups, dtype=bool)
    group_part = {"gid": gids, "group": _struct(schema.field("group").type, group_columns, no_mask)}
    no_mask = np.zeros(n_senders, dtype=bool)
    sender_part = {"sender": senders, "posts": _struct(schema.field("posts").type, sender_columns, no_mask)}
    return pa.concat_tables([
        _part(schema, MESSAGE, n, message_columns),
        _part(schema, THREAD, k, thread_part),
        _part(schema, GROUP, n_groups, group_part),
        _part(schema, SENDER, n_senders, sender_part),
        _info_part(schema, malformed, conflicts, rounds),
    ])


def _counts(code, k, weights=None):
    """Per code 0..k-1: how many rows (or the sum of `weights`), as an Arrow int64 array."""
    import numpy as np
    import pyarrow as pa

    return pa.array(np.bincount(code, weights=weights, minlength=k).astype(np.int64))


def _arrow(values, missing):
    """An Arrow array of numpy `values`, null where `missing` (and where a float is NaN)."""
    import numpy as np
    import pyarrow as pa

    if values.dtype.kind == "f":
        missing = missing | np.isnan(values)
    return pa.array(values, mask=missing)


def _struct(struct_type, children: dict, missing):
    """A struct array of `struct_type` from named child arrays, null where `missing`."""
    import pyarrow as pa

    arrays = [children[field.name].cast(field.type) for field in struct_type]
    arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    return pa.StructArray.from_arrays(arrays, fields=list(struct_type), mask=pa.array(missing))


def _part(schema, kind: int, rows: int, columns: dict):
    """`rows` rows of one kind: the given columns, nulls in all the others."""
    import numpy as np
    import pyarrow as pa

    arrays = []
    for field in schema:
        if field.name == "kind":
            arrays.append(pa.array(np.full(rows, kind, dtype=np.int32)))
        elif field.name in columns:
            arrays.append(columns[field.name].cast(field.type))
        else:
            arrays.append(pa.nulls(rows, field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _info_part(schema, malformed: int, conflicts: int, rounds: int):
    import pyarrow as pa

    import numpy as np

    counts = {
        "malformed_lines": pa.array([malformed], pa.int64()),
        "conflicting_copies": pa.array([conflicts], pa.int64()),
        "jump_rounds": pa.array([rounds], pa.int32()),
    }
    return _part(schema, INFO, 1, {"info": _struct(schema.field("info").type, counts, np.zeros(1, dtype=bool))})


def _place_batches(batches):
    """mapInArrow body: gather the task's rows (whole groups, thanks to the gid shuffle) and place them."""
    import pyarrow as pa

    batches = [b for b in batches if b.num_rows]
    if not batches:
        return
    placed = place_groups(pa.Table.from_batches(batches))
    yield from placed.to_batches(max_chunksize=65_536)


# ---------------------------------------------------------------- Spark: the shuffle and the tables


def place_all(spark, paths: list[str]):
    """The placed frame (PLACED_SCHEMA) of the exports: one shuffle by gid, one Arrow pass."""
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    rows = export_rows(read_exports(spark, paths))
    return rows.repartition(partitions, "gid").mapInArrow(_place_batches, PLACED_SCHEMA)


def message_table(placed):
    """Per message: its root, depth and flags."""
    from pyspark.sql import functions as F

    return placed.filter(F.col("kind") == MESSAGE)


def thread_table(placed):
    """Per thread: the measures of `place_groups`."""
    from pyspark.sql import functions as F

    thread = lambda name: F.col(f"thread.{name}")  # noqa: E731
    return placed.filter(F.col("kind") == THREAD).select(
        "gid",
        "root_mid",
        thread("size").alias("size"),
        thread("depth").alias("depth"),
        thread("max_width").alias("max_width"),
        thread("leaves").alias("leaves"),
        thread("participants").alias("participants"),
        F.timestamp_millis(thread("first_ms")).alias("first_at"),
        F.timestamp_millis(thread("last_ms")).alias("last_at"),
        ((thread("last_ms") - thread("first_ms")) / F.lit(1000.0)).alias("duration_s"),
        thread("median_latency_s").alias("median_reply_latency_s"),
        thread("root_reply_fraction").alias("root_reply_fraction"),
        thread("wiener_index").alias("wiener_index"),
        thread("h_index").alias("h_index"),
        F.col("parent_missing").alias("orphan"),
    )


GROUP_COLUMNS = (
    "gid", "group_desc", "messages", "threads", "participants", "mean_thread_size", "median_thread_size",
    "max_thread_size", "max_depth", "orphan_messages", "invalid_messages", "reciprocity",
)


def group_table(placed):
    """Per group: finished by `place_groups`, since a group never spans tasks."""
    from pyspark.sql import functions as F

    rows = placed.filter(F.col("kind") == GROUP)
    fields = {"gid": "gid", "group_desc": "group.desc"}
    return rows.select(*(F.col(fields.get(name, f"group.{name}")).alias(name) for name in GROUP_COLUMNS))


def _sorted_median(values):
    """Median of a sorted array column, as Spark's percentile computes it (null when empty)."""
    from pyspark.sql import functions as F

    n = F.size(values)
    lower = F.element_at(values, F.floor((n - 1) / 2).cast("int") + 1)
    upper = F.element_at(values, F.floor(n / 2).cast("int") + 1)
    return F.when(n > 0, F.lit(0.5) * lower + F.lit(0.5) * upper)


def participant_table(placed):
    """Per sender: the tasks' partial counts added up, latencies merged for the exact median."""
    from pyspark.sql import functions as F

    merged = placed.filter(F.col("kind") == SENDER).groupBy("sender").agg(
        F.max("posts.name").alias("sender_name"),
        F.sum("posts.messages").alias("messages"),
        F.sum("posts.threads").alias("threads"),
        F.sum("posts.threads_started").alias("threads_started"),
        F.sum("posts.replies_sent").alias("replies_sent"),
        F.sum("posts.replies_received").alias("replies_received"),
        F.array_sort(F.flatten(F.collect_list("posts.latencies"))).alias("latencies"),
        F.sum("posts.reentry").alias("reentry"),
    )
    return merged.select(
        "sender", "sender_name", "messages", "threads", "threads_started", "replies_sent", "replies_received",
        _sorted_median(F.col("latencies")).alias("median_reply_latency_s"), "reentry",
    )


def exact_median(frame, column: str):
    """Exact median of a numeric column, as Spark's percentile computes it, in one or two cheap passes.

    Pass one counts the values per bin (64 bins per octave, monotone in the value); pass
    two, needed only when such a bin holds several distinct values, counts the distinct
    values of the one or two bins holding the middle ranks. With
    values in whole milliseconds (latencies) or whole numbers (sizes) a bin holds few
    distinct values, so nothing like a column of millions reaches the driver.
    """
    from pyspark.sql import functions as F

    value = F.col(column).cast("double")
    magnitude = F.floor(F.log2(F.abs(value) + 1) * 64)
    bin_of = F.when(value >= 0, magnitude).otherwise(-magnitude - 1)
    present = frame.filter(F.col(column).isNotNull()).select(value.alias("value"), bin_of.alias("bin"))
    bins = sorted(
        (r["bin"], r["count"], r["lo"], r["hi"])
        for r in present.groupBy("bin").agg(F.count(F.lit(1)).alias("count"), F.min("value").alias("lo"), F.max("value").alias("hi")).collect()
    )
    n = sum(b[1] for b in bins)
    if not n:
        return None
    ranks = ((n - 1) // 2, n // 2)
    holding, seen = {}, 0
    for bin_id, count, lo, hi in bins:
        for rank in ranks:
            if seen <= rank < seen + count:
                holding[rank] = (bin_id, seen, lo, hi)
        seen += count
    picked, distinct = [], {}
    for rank in ranks:
        bin_id, below, lo, hi = holding[rank]
        if lo == hi:  # one distinct value in the bin (small whole numbers): no second pass
            picked.append(lo)
            continue
        if bin_id not in distinct:
            rows = present.filter(F.col("bin") == bin_id).groupBy("value").count().collect()
            distinct[bin_id] = sorted((r["value"], r["count"]) for r in rows)
        for v, count in distinct[bin_id]:
            if below <= rank < below + count:
                picked.append(v)
                break
            below += count
    lower, upper = picked
    return lower if lower == upper else 0.5 * lower + 0.5 * upper


# ---------------------------------------------------------------- the whole job


@dataclass(slots=True)
class Results:
    """DataFrames and figures of one run (kept for tests and the report)."""

    messages: object
    threads: object
    groups: object
    participants: object
    summary: dict


def analyse(spark, paths: list[str]) -> Results:
    """Run the whole analysis; the placed frame is cached once and every table reads it."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    started = time.perf_counter()
    placed = place_all(spark, paths).persist(StorageLevel.MEMORY_AND_DISK)
    spark.sparkContext.setJobDescription("read, merge, place and measure")
    small = placed.filter(F.col("kind").isin(GROUP, INFO))
    totals = small.agg(
        F.sum("info.malformed_lines").alias("malformed"),
        F.sum("info.conflicting_copies").alias("conflicts"),
        F.max("info.jump_rounds").alias("rounds"),
        F.sum("group.lines").alias("kept_lines"),
        F.sum("group.messages").alias("messages"),
        F.count("group").alias("groups"),
        F.sum("group.orphan_messages").alias("orphans"),
        F.sum("group.invalid_messages").alias("invalid"),
        F.sum("group.threads").alias("threads"),
        F.max("group.max_depth").alias("max_depth"),
        F.sum("group.size_sum").alias("size_sum"),
        F.max("group.max_thread_size").alias("max_size"),
        F.sum("group.depth_sum").alias("depth_sum"),
        F.sum("group.pairs").alias("pairs"),
        F.sum("group.reciprocated_pairs").alias("reciprocated"),
    ).first()
    malformed = int(totals["malformed"] or 0)
    conflicts = int(totals["conflicts"] or 0)
    n_messages = int(totals["messages"] or 0)
    lines = int(totals["kept_lines"] or 0) + malformed
    threads_count = int(totals["threads"] or 0)
    pairs = int(totals["pairs"] or 0)
    log.info("read %d lines: %d distinct messages, roots found in %d pointer-jumping rounds (%.1f s)",
             lines, n_messages, int(totals["rounds"] or 0), time.perf_counter() - started)
    if malformed:
        log.warning("skipped %d malformed line(s) of %d: bad JSON, a missing gid/mid/sender or an unreadable time", malformed, lines)
    if conflicts:
        log.warning("%d message(s) have copies that disagree beyond received_at; kept the earliest received", conflicts)

    messages = message_table(placed)
    threads = thread_table(placed)
    groups = group_table(placed)
    spark.sparkContext.setJobDescription("participants")
    participants = participant_table(placed).persist(StorageLevel.MEMORY_AND_DISK)
    n_participants = participants.count()
    spark.sparkContext.setJobDescription("medians")
    summary = {
        "input_lines": lines,
        "malformed_lines": malformed,
        "messages": n_messages,
        "duplicates_removed": lines - malformed - n_messages,
        "conflicting_copies": conflicts,
        "threads": threads_count,
        "groups": int(totals["groups"]),
        "participants": n_participants,
        "orphan_messages": int(totals["orphans"] or 0),
        "invalid_messages": int(totals["invalid"] or 0),
        "max_depth": _maybe_int(totals["max_depth"]),
        "mean_thread_size": totals["size_sum"] / threads_count if threads_count else None,
        "median_thread_size": exact_median(threads, "size"),
        "max_thread_size": _maybe_int(totals["max_size"]),
        "mean_depth": totals["depth_sum"] / threads_count if threads_count else None,
        "reply_latency_median_s": exact_median(messages, "reply_latency_s"),
        "reciprocity": totals["reciprocated"] / pairs if pairs else None,
        "sender_pairs": pairs,
        "pointer_jumping_rounds": int(totals["rounds"] or 0),
    }
    log.info("tables aggregated (%.1f s)", time.perf_counter() - started)
    return Results(messages=messages, threads=threads, groups=groups, participants=participants, summary=summary)


def _maybe_int(value):
    return None if value is None else int(value)


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
        "groups": results.groups.select(*GROUP_COLUMNS).repartition(1),
        "participants": results.participants.coalesce(1),
    }
    out_uri = str(out)
    for name, frame in tables.items():
        started = time.perf_counter()
        frame.sparkSession.sparkContext.setJobDescription(f"write {name}")
        writer = frame.write.mode("overwrite")
        if name in ("messages", "threads"):
            # Building dictionaries (and dropping them again for the unique mids) cost a
            # third of these writes; snappy still packs the repeated gids and senders.
            writer = writer.option("parquet.enable.dictionary", "false")
        writer.parquet(f"{out_uri}/{name}")
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
    spark = build_session(args.master, args.driver_memory)
    log.info("Spark session ready (%.1f s)", time.perf_counter() - started)
    try:
        results = analyse(spark, paths)
        write_outputs(results, args.out, args.format)
        if not args.no_report:
            from app import thread_report

            report_started = time.perf_counter()
            thread_report.write_report(results, args.out)
            log.info("report (%.1f s)", time.perf_counter() - report_started)
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
