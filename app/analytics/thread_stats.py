"""m2mc-thread-stats: conversation-thread statistics of chat exports, computed with PySpark.

Reads JSON Lines exports (files or folders of `.jsonl` / `.jsonl.gz`) and shuffles the
lines once, by group: threads never cross groups, so each task then holds whole
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
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .submit import EXAMPLE
from .thread_report import OVER_TIME_GROUPS, PLOT_FILES

log = logging.getLogger("m2mc.thread_stats")

EXPORT_FIELDS = ("gid", "group_desc", "mid", "parent", "sender", "sender_name", "text", "sent_at", "received_at")
# What operations (edits, deletes, reactions; issue 20) made of a message: `edited` a count,
# `deleted` a boolean, `reactions` an object {emoji: [pid, ...]}, parsed into the number of
# reactions (`reaction_count`). Exports from before them lack the fields, and count none.
OPERATION_FIELDS = ("edited", "deleted", "reaction_count")
REACTIONS = r'"reactions":\s*(?P<reactions>\{[^{}]*\})'  # a JSON key: its quotes cannot be inside a string
TIME_FIELDS = ("sent_at", "received_at")


class UsageError(Exception):
    """A mistake in the command line or the inputs, reported without a traceback."""


# ---------------------------------------------------------------- command line


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
        java_options = "-XX:+UseParallelGC " + (archive.java_options() if archive else "")
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


# A line's gid as the shuffle key, without parsing the line in the JVM: our exports write
# gid first, so a regular expression anchored at the line's start finds it (it cannot match
# inside a string value or a nested object). Any other line takes the JSON parser's value,
# so equal gids always meet in one task however they are written.
GID_PREFIX = r'^\s*\{\s*"gid"\s*:\s*"([^"\\]*)"'


def group_key():
    from pyspark.sql import functions as F

    fast = F.regexp_extract("value", GID_PREFIX, 1)
    return F.when(fast != "", fast).otherwise(F.coalesce(F.get_json_object("value", "$.gid"), F.lit("")))


def read_lines(spark, paths: list[str]):
    """The export lines, one string column `value`, blank lines included (they are counted)."""
    return spark.read.text(paths)


def export_arrow_schema():
    import pyarrow as pa

    return pa.schema([pa.field(name, pa.string()) for name in EXPORT_FIELDS]
                     + [pa.field("edited", pa.int64()), pa.field("deleted", pa.bool_())])


def parsed_arrow_schema():
    """What `parse_lines` returns: the export's fields and each line's reaction count."""
    import pyarrow as pa

    return export_arrow_schema().append(pa.field("reaction_count", pa.int64()))


def reaction_counts(lines):
    """Per line, the number of reactions (one per reactor and emoji); 0 without any.

    Arrow's JSON reader cannot read an object of free keys, so the object is found in the
    line's text and only the few non-empty ones are parsed, in Python.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    counts = np.zeros(len(lines), dtype=np.int64)
    found = pc.struct_field(pc.extract_regex(lines, REACTIONS), "reactions")
    some = pc.fill_null(pc.not_equal(found, "{}"), False).to_numpy(zero_copy_only=False)
    for row in np.flatnonzero(some):
        try:
            value = json.loads(found[int(row)].as_py())
            counts[row] = sum(len(pids) for pids in value.values() if isinstance(pids, list))
        except (ValueError, AttributeError):
            pass  # not an object of lists: no reactions counted
    return pa.array(counts)


# Lines are parsed in blocks; a block the strict parser refuses is parsed again line by line.
PARSE_BLOCK = 4096


def parse_lines(lines):
    """Strictly parsed export lines: (Table of EXPORT_FIELDS as strings with the operations' fields,
    blank lines, malformed lines).

    A line is well-formed JSON here when it is one JSON object whose export fields are
    strings or null (missing counts as null); other fields are ignored, whatever their
    type. A number, boolean, array or object where a string belongs makes the line
    malformed, as does anything but one object on the line. Blank (whitespace-only)
    lines are counted apart. Arrow's JSON reader checks the types (Spark's would turn
    12345 or ["a"] into a string); it refuses a whole block for one bad line, so such a
    block goes line by line.
    """
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    blank_count = int(pc.sum(pc.match_substring_regex(lines, r"^\s*$")).as_py() or 0)
    # Only lines that open an object go to the parser: a bare `null` as a block's first line
    # crashes pyarrow 26's reader.
    candidate = pc.match_substring_regex(lines, r"^\s*\{")
    malformed = len(lines) - blank_count - int(pc.sum(candidate).as_py() or 0)
    if malformed + blank_count:
        lines = lines.filter(candidate)
    schema = export_arrow_schema()
    longest = int(pc.max(pc.binary_length(lines)).as_py() or 0) if len(lines) else 0
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    read = pj.ReadOptions(block_size=max(1 << 20, 2 * longest + 64), use_threads=False)

    def parse(chunk):
        joined = pc.binary_join_element_wise(chunk, pa.scalar(""), "\n")
        if not len(joined):
            return parsed_arrow_schema().empty_table()
        offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32)[joined.offset:joined.offset + len(joined) + 1]
        data = joined.buffers()[2][int(offsets[0]):int(offsets[-1])]
        try:
            table = pj.read_json(io.BytesIO(data), read_options=read, parse_options=options)
        except pa.ArrowInvalid:
            return None
        # Two objects on one line make more rows than lines.
        if table.num_rows != len(chunk):
            return None
        return table.append_column("reaction_count", reaction_counts(chunk))

    parsed = []
    for start in range(0, len(lines), PARSE_BLOCK):
        block = lines.slice(start, PARSE_BLOCK)
        table = parse(block)
        if table is None:
            good = [i for i in range(len(block)) if parse(block.slice(i, 1)) is not None]
            malformed += len(block) - len(good)
            table = parse(block.take(pa.array(good, pa.int64()))) if good else None
        if table is not None:
            parsed.append(table)
    table = pa.concat_tables(parsed) if parsed else parsed_arrow_schema().empty_table()
    return table.cast(parsed_arrow_schema()), blank_count, malformed


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


def well_formed(table):
    """The well-formed rows of parsed export lines (a Table of `parse_lines`), times parsed.

    Malformed beyond `parse_lines`' checks: a missing or empty gid/mid/sender, a missing or
    unreadable time. An empty parent means a thread root, like a null one.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    def non_empty(name):
        return pc.fill_null(pc.greater(pc.binary_length(table.column(name)), 0), False)

    keep = None
    for name in ("gid", "mid", "sender"):
        keep = non_empty(name) if keep is None else pc.and_(keep, non_empty(name))
    for name in TIME_FIELDS:
        parsed = parse_times(table.column(name).combine_chunks())
        table = table.set_column(table.schema.get_field_index(name), name, parsed)
        keep = pc.and_(keep, pc.is_valid(parsed))
    # Filters only when something is to be dropped: a filter copies every column.
    if not pc.all(keep).as_py():
        table = table.filter(keep)
    parent = table.column("parent")
    if pc.any(pc.equal(parent, "")).as_py():
        table = table.set_column(table.schema.get_field_index("parent"), "parent", pc.if_else(pc.equal(parent, ""), pa.scalar(None, pa.string()), parent))
    return table.select([name for name in EXPORT_FIELDS + OPERATION_FIELDS if name in table.column_names])


# What `place_groups` makes of a task's groups. The two big tables, one row per message
# and one per thread, go straight from the task to Parquet files (`write_part`): they never
# cross back into the JVM, which would copy every string twice more (Arrow to rows, rows to
# the cache) before Spark's writer copied them again. Only SUMMARY rows return to Spark,
# a few per group and per sender: GROUP rows (the whole groups-table row plus sums the
# summary adds up), SENDER rows (one per sender of the task: partial counts and that
# sender's reply latencies, merged across tasks by the sender pass), HIST rows (value counts the
# summary medians and the report's plots need) and one INFO row per task (malformed
# lines, conflicting keys, pointer-jumping rounds). Spark's mapInArrow has one output
# schema, so the kinds share it, each kind's measures in one struct column.
GROUP, SENDER, HIST, INFO = 0, 1, 2, 3
MESSAGE_FIELDS = (
    "gid string, mid string, parent string, sender string, sent_at timestamp, received_at timestamp, "
    "root_mid string, depth int, reply_latency_s double, parent_missing boolean, invalid boolean, copies long"
)
THREAD_FIELDS = (
    "gid string, root_mid string, size long, depth int, max_width long, leaves long, participants long, "
    "first_at timestamp, last_at timestamp, duration_s double, median_reply_latency_s double, "
    "root_reply_fraction double, wiener_index double, h_index int, orphan boolean"
)
STRUCT_FIELDS = {
    "group": (
        "desc string, lines long, messages long, threads long, participants long, mean_thread_size double, "
        "median_thread_size double, max_thread_size long, max_depth int, orphan_messages long, invalid_messages long, "
        "reciprocity double, size_sum long, depth_sum long, pairs long, reciprocated_pairs long, first_ms long, last_ms long, "
        "edited_messages long, deleted_messages long, reactions long"
    ),
    "posts": (
        "name string, messages long, threads long, threads_started long, replies_sent long, replies_received long, "
        "reentry long, latencies array<double>"
    ),
    # plot: which histogram; series: a gid for "over_time" (null: other groups), else null; value: null for
    # latencies <= 0 in "latency" (whose values are log10 bins, 10 per decade); width: the
    # time bin's width in seconds for "over_time" (value: its start), else null.
    "hist": "plot string, series string, value double, width long, count long",
    "info": "lines long, blank_lines long, malformed_lines long, conflicting_copies long, jump_rounds int",
}
# HIST plots: value counts of thread size, depth and width; messages per depth level;
# reply latencies in log bins, and in the fine bins of the median (`latency_bins`); valid
# messages per group and time bin (re-binned for the plot).
THREAD_PLOTS = {"size": "size", "depth": "depth", "width": "max_width"}
# Each width divides the next, so the driver can re-bin every task's bins exactly into
# bins of a multiple of the widest.
OVER_TIME_WIDTHS_S = (1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400, 28 * 86400, 364 * 86400)


def _fields(spec: str) -> list[tuple[str, str]]:
    return [tuple(part.split(" ", 1)) for part in spec.split(", ")]


def _struct_ddl(spec: str) -> str:
    return f"struct<{', '.join(f'{field}: {kind}' for field, kind in _fields(spec))}>"


SUMMARY_SCHEMA = "kind int, gid string, sender string" + "".join(f", {name} {_struct_ddl(spec)}" for name, spec in STRUCT_FIELDS.items())


def _arrow_type(kind: str):
    import pyarrow as pa

    return {
        "string": pa.string(), "timestamp": pa.timestamp("us", tz="UTC"), "long": pa.int64(), "int": pa.int32(),
        "double": pa.float64(), "boolean": pa.bool_(), "array<double>": pa.list_(pa.float64()), "binary": pa.binary(),
    }[kind]


def arrow_schema(spec: str):
    """The Arrow schema of a flat "name type, ..." spec."""
    import pyarrow as pa

    return pa.schema([pa.field(name, _arrow_type(kind)) for name, kind in _fields(spec)])


def summary_arrow_schema():
    import pyarrow as pa

    fields = list(arrow_schema("kind int, gid string, sender string"))
    for name, spec in STRUCT_FIELDS.items():
        fields.append(pa.field(name, pa.struct(list(arrow_schema(spec)))))
    return pa.schema(fields)


def _codes(column):
    """Dense int64 codes of a (chunked) Arrow column's values, equal values equal codes, -1 for
    null; and the distinct values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    encoded = column.dictionary_encode()
    return pc.fill_null(encoded.indices, -1).to_numpy(zero_copy_only=False).astype("int64"), encoded.dictionary


def _same(left, right):
    """Null-aware equality of two Arrow arrays (null equals null)."""
    import pyarrow.compute as pc

    both_null = pc.and_(pc.is_null(left), pc.is_null(right))
    return pc.or_(both_null, pc.fill_null(pc.equal(left, right), False))


def _max_strings(code, strings, k):
    """Per code 0..k-1, the largest non-null string of `strings` (null when all are null)."""
    import numpy as np
    import pyarrow as pa

    grouped = pa.table({"code": code, "value": strings}).group_by("code").aggregate([("value", "max")])
    positions = np.full(k, -1, dtype=np.int64)
    positions[grouped.column("code").to_numpy()] = np.arange(grouped.num_rows)
    return grouped.column("value_max").take(pa.array(positions, mask=positions < 0))


def grouped_median(group, values, k, divisor: float = 1.0):
    """Per group 0..k-1, the median of `values` / `divisor` (NaN for an empty group), as Spark's
    percentile computes it: the middle value, or 0.5 * lower + 0.5 * upper of the middle two.

    `values` are whole numbers (int64: latencies in ms, sizes), so one sort of an integer
    key (group, value) orders them, many times faster than a lexsort; the doubles are the
    same `value / divisor` the tables hold.
    """
    import numpy as np

    counts = np.bincount(group, minlength=k)
    if not values.size:
        return np.full(k, np.nan)
    low = int(values.min())
    span = int(values.max()) - low + 1
    if k * span < 2**62:
        ordered = np.sort(group.astype(np.int64) * span + (values - low)) % span + low
    else:
        ordered = values[np.lexsort((values, group))]
    ordered = ordered / divisor
    start = np.r_[0, np.cumsum(counts)[:-1]]
    has = counts > 0
    lo = np.where(has, start + (counts - 1) // 2, 0)
    hi = np.where(has, start + counts // 2, 0)
    return np.where(has, 0.5 * ordered[lo] + 0.5 * ordered[hi], np.nan)


def operation_counts(table, gid_code, n_groups) -> dict:
    """Per group: messages edited, messages deleted, reactions (see OPERATION_FIELDS)."""
    import numpy as np
    import pyarrow.compute as pc

    def column(name, default):
        if name not in table.column_names:
            return np.full(table.num_rows, default)
        return pc.fill_null(table.column(name), default).to_numpy(zero_copy_only=False)

    return {
        "edited_messages": _counts(gid_code, n_groups, column("edited", 0) > 0),
        "deleted_messages": _counts(gid_code, n_groups, column("deleted", False).astype(bool)),
        "reactions": _counts(gid_code, n_groups, column("reaction_count", 0)),
    }


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
    candidates = table.select(["received_at", "sent_at", "sender", "parent", "sender_name", "group_desc", "text"]).take(pa.array(rows))
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
    for name in ("parent", "sender", "sender_name", "group_desc", "text", "sent_at"):
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


def thread_measures(parent_pos, root_pos, depth, sent_ms, latency_ms, sender_code, n_senders):
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

    median = grouped_median(thread[reply], latency_ms[replies], k, divisor=1000.0)

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


def reply_pairs(gid_code, sender_code, parent_pos, valid, n_senders, n_groups):
    """Per group: distinct directed sender pairs A->B (a valid message of A replies to one of
    B, A != B), and how many of them are reciprocated (B->A occurs in the group too)."""
    import numpy as np

    linked = np.flatnonzero((parent_pos >= 0) & valid)
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


@dataclass(slots=True)
class Placed:
    """What `place_groups` makes of a Table of whole groups (Arrow tables)."""

    messages: object  # MESSAGE_FIELDS, one row per distinct (gid, mid)
    threads: object  # THREAD_FIELDS, one row per thread
    summary: object  # SUMMARY_SCHEMA: GROUP, SENDER, HIST and one INFO row


def place_groups(table, blank: int = 0, malformed: int = 0) -> Placed:
    """Everything per message, per thread, per group and per task's sender for a Table of whole groups.

    `table` holds the lines `parse_lines` parsed (EXPORT_FIELDS); `blank` and `malformed`
    count the lines it set aside.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = summary_arrow_schema()
    parsed = table.num_rows
    lines = parsed + blank + malformed
    table = well_formed(table.combine_chunks())
    malformed += parsed - table.num_rows
    if not table.num_rows:
        return Placed(None, None, _info_part(schema, lines, blank, malformed, 0, 0))

    gid_code, gids = _codes(table.column("gid"))
    # mids and parents in one dictionary: equal strings, equal codes (a null parent: -1).
    rows = table.num_rows
    mid_or_parent = pa.concat_arrays([table.column("mid").combine_chunks(), table.column("parent").combine_chunks()])
    codes, dictionary = _codes(mid_or_parent)
    m = len(dictionary)
    mid_code, parent_code = codes[:rows], codes[rows:]
    key = gid_code * m + mid_code
    keep, copies, conflicts = merge_copies(table, key)
    table = table.drop_columns(["text"])  # only copies compare it
    if keep is not None:
        table = table.take(pa.array(keep))
        key, gid_code, mid_code, parent_code = key[keep], gid_code[keep], mid_code[keep], parent_code[keep]
    n, n_groups = table.num_rows, len(gids)

    # Parent links: the row of the parent's mid in the same group.
    parent = table.column("parent")
    row_of_mid = np.full(m, -1, dtype=np.int64)
    row_of_mid[mid_code] = np.arange(n)
    if np.bincount(mid_code, minlength=m).max(initial=0) <= 1:
        # Each mid in one group only (the usual case): a direct lookup by mid code.
        position = row_of_mid[np.maximum(parent_code, 0)]
        found = (parent_code >= 0) & (position >= 0)
        found[found] = gid_code[position[found]] == gid_code[found]
        parent_pos = np.where(found, position, -1)
    else:
        # A mid in several groups: look the parent's (gid, mid) key up among the sorted keys.
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
    latency_ms = np.zeros(n, dtype=np.int64)
    latency_ms[has_latency] = sent_ms[has_latency] - sent_ms[parent_pos[has_latency]]
    latency = np.where(has_latency, latency_ms / 1000.0, np.nan)

    sender_code, senders = _codes(table.column("sender"))
    n_senders = len(senders)
    root_rows, measures, sender_threads, sender_reentry = thread_measures(parent_pos, root_pos, depth, sent_ms, latency_ms, sender_code, n_senders)

    mid = table.column("mid")
    messages = pa.Table.from_arrays([
        table.column("gid"), mid, parent, table.column("sender"), table.column("sent_at"), table.column("received_at"),
        mid.take(pa.array(np.maximum(root_pos, 0), mask=~valid)),
        pa.array(depth.astype(np.int32), mask=~valid),
        pa.array(latency, mask=~has_latency),
        pa.array(parent_missing),
        pa.array(~valid),
        pa.array(copies),
    ], schema=arrow_schema(MESSAGE_FIELDS))
    k = root_rows.size
    root_index = pa.array(root_rows)
    no_mask = np.zeros(k, dtype=bool)
    first_ms, last_ms = measures["first_ms"], measures["last_ms"]
    threads = pa.Table.from_arrays([
        table.column("gid").take(root_index),
        mid.take(root_index),
        pa.array(measures["size"]),
        pa.array(measures["depth"]),
        pa.array(measures["max_width"]),
        pa.array(measures["leaves"]),
        pa.array(measures["participants"]),
        pa.array(first_ms * 1000).cast(pa.timestamp("us", tz="UTC")),
        pa.array(last_ms * 1000).cast(pa.timestamp("us", tz="UTC")),
        pa.array((last_ms - first_ms) / 1000.0),
        _arrow(measures["median_latency_s"], no_mask),
        _arrow(measures["root_reply_fraction"], no_mask),
        _arrow(measures["wiener_index"], no_mask),
        pa.array(measures["h_index"]),
        pa.array(parent_missing[root_rows]),
    ], schema=arrow_schema(THREAD_FIELDS))

    member_group, _, _ = distinct_pairs(gid_code, sender_code, n_senders)
    thread_gid = gid_code[root_rows]
    sizes, thread_depths = measures["size"], measures["depth"]
    thread_count = np.bincount(thread_gid, minlength=n_groups)
    no_threads = thread_count == 0
    size_sum = np.bincount(thread_gid, weights=sizes, minlength=n_groups).astype(np.int64)
    max_size = np.zeros(n_groups, dtype=np.int64)
    np.maximum.at(max_size, thread_gid, sizes)
    max_depth = np.zeros(n_groups, dtype=np.int32)
    np.maximum.at(max_depth, thread_gid, thread_depths)
    group_first = np.full(n_groups, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(group_first, thread_gid, first_ms)
    group_last = np.full(n_groups, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(group_last, thread_gid, last_ms)
    pairs, reciprocated = reply_pairs(gid_code, sender_code, parent_pos, valid, n_senders, n_groups)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_size = size_sum / thread_count
        reciprocity = reciprocated / pairs
    group_columns = {
        "desc": _max_strings(gid_code, table.column("group_desc"), n_groups),
        "lines": _counts(gid_code, n_groups, copies),
        "messages": _counts(gid_code, n_groups),
        "threads": pa.array(thread_count.astype(np.int64)),
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
        "first_ms": _arrow(group_first, no_threads),
        "last_ms": _arrow(group_last, no_threads),
        **operation_counts(table, gid_code, n_groups),
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
    group_part = {"gid": gids, "group": _struct(schema.field("group").type, group_columns, np.zeros(n_groups, dtype=bool))}
    sender_part = {"sender": senders, "posts": _struct(schema.field("posts").type, sender_columns, np.zeros(n_senders, dtype=bool))}

    latencies = latency[has_latency]
    positive = latencies > 0
    latency_bin = np.floor(np.log10(latencies[positive]) * 10)
    # Messages per group and time bin. The plot's bins need the whole run's span, which a
    # task does not know: it counts in bins of a round width giving at most ~1000 bins over
    # its own span, and the driver re-bins these (start and width in seconds) to the plot's.
    # Only the task's OVER_TIME_GROUPS busiest groups get series of their own, the others
    # one pooled series (null): a task holds whole groups, so each of the run's busiest
    # groups is among its task's busiest, and the rows stay few however many groups.
    sent_s = sent_ms[valid] // 1000
    span_s = int(sent_s.max() - sent_s.min()) if sent_s.size else 0
    width_s = next((w for w in OVER_TIME_WIDTHS_S if span_s <= 1000 * w), OVER_TIME_WIDTHS_S[-1])
    time_bin = sent_s // width_s
    origin = int(time_bin.min()) if time_bin.size else 0
    valid_messages = np.bincount(gid_code[valid], minlength=n_groups)
    busiest = np.lexsort((pc.rank(gids, sort_keys="ascending").to_numpy(), -valid_messages))[:OVER_TIME_GROUPS]
    series_of_group = np.full(n_groups, n_groups, dtype=np.int64)
    series_of_group[busiest] = busiest
    bin_offset, bin_series, bin_count = distinct_pairs(time_bin - origin, series_of_group[gid_code[valid]], n_groups + 1)
    series = gids.take(pa.array(np.minimum(bin_series, n_groups - 1), mask=bin_series == n_groups))
    histograms = [
        *(_hist_part(schema, plot, measures[name]) for plot, name in THREAD_PLOTS.items()),
        _hist_part(schema, "per_depth", depth[valid]),
        _hist_part(schema, "latency", latency_bin, nulls=int((~positive).sum())),
        _hist_part(schema, "latency_fine", latency_bins(latencies)),
        _hist_part(schema, "over_time", ((bin_offset + origin) * width_s).astype(np.float64),
                   series=series, counts=bin_count, width=width_s),
    ]
    summary = pa.concat_tables([
        _part(schema, GROUP, n_groups, group_part),
        _part(schema, SENDER, n_senders, sender_part),
        *histograms,
        _info_part(schema, lines, blank, malformed, conflicts, rounds),
    ])
    return Placed(messages, threads, summary)


def _hist_part(schema, plot: str, values, nulls: int = 0, series=None, counts=None, width=None):
    """HIST rows of one plot: the distinct `values` with their counts (or `counts` given per value),
    plus one null-valued row counting `nulls`."""
    import numpy as np
    import pyarrow as pa

    if counts is None:
        values, counts = np.unique(values, return_counts=True)
    rows = values.size + (1 if nulls else 0)
    value = pa.array(np.r_[values.astype(np.float64), np.zeros(1 if nulls else 0)], mask=np.arange(rows) >= values.size)
    children = {
        "plot": pa.array([plot] * rows, pa.string()),
        "series": series if series is not None else pa.nulls(rows, pa.string()),
        "value": value,
        "width": pa.nulls(rows, pa.int64()) if width is None else pa.array(np.full(rows, width, dtype=np.int64)),
        "count": pa.array(np.r_[counts, [nulls] if nulls else []].astype(np.int64)),
    }
    return _part(schema, HIST, rows, {"hist": _struct(schema.field("hist").type, children, np.zeros(rows, dtype=bool))})


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


def _info_part(schema, lines: int, blank: int, malformed: int, conflicts: int, rounds: int):
    import numpy as np
    import pyarrow as pa

    counts = {
        "lines": pa.array([lines], pa.int64()),
        "blank_lines": pa.array([blank], pa.int64()),
        "malformed_lines": pa.array([malformed], pa.int64()),
        "conflicting_copies": pa.array([conflicts], pa.int64()),
        "jump_rounds": pa.array([rounds], pa.int32()),
    }
    return _part(schema, INFO, 1, {"info": _struct(schema.field("info").type, counts, np.zeros(1, dtype=bool))})


# What the placing tasks hand to Spark's writer: whole Parquet files, one row each. A task
# writes its share of the messages and threads tables with pyarrow, as before, but into
# memory; Spark's own writer and commit protocol put the bytes on DIR's filesystem,
# wherever Spark resolves DIR. Spark has no writer for raw bytes, but its text writer
# writes a string column's bytes as they are, each followed by the line separator: with
# the separator set to Parquet's closing magic "PAR1", a file minus its last four bytes
# comes out whole, one per output file (maxRecordsPerFile 1). Partitioned by `part`:
# messages and threads files become the tables; the other summary rows (GROUP, HIST,
# INFO) for the driver and the SENDER rows for the sender pass go the same way.
# Going through Spark's Parquet writer instead cost half as much CPU again at 10M: every
# row crossed from Arrow into the JVM and was encoded there, value by value.
MESSAGES_PART, THREADS_PART, SUMMARY_PART, SENDERS_PART = 0, 1, 2, 3
PARQUET_MAGIC = "PAR1"
FILES_SCHEMA = "file binary, part int"
TABLE_NAMES = ("messages", "threads", "groups", "participants")
FILE_ROWS = 1 << 20  # rows per Parquet file: bounds each file row Spark holds


def parquet_file(table) -> bytes:
    """`table` as the bytes of a Parquet file (snappy, as Spark's writer; dictionaries only
    where values repeat: building one for the unique mids costs, then is dropped)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    dictionary = [column for column in ("gid", "sender") if column in table.column_names]
    pq.write_table(table, sink, compression="snappy", use_dictionary=dictionary)
    return sink.getvalue().to_pybytes()


def _file_rows(table, part: int):
    """FILES_SCHEMA rows holding `table` as Parquet files, each without its closing magic
    (the text writer adds it back)."""
    import pyarrow as pa

    if table is None or not table.num_rows:
        return
    files = []
    for start in range(0, table.num_rows, FILE_ROWS):
        data = parquet_file(table.slice(start, FILE_ROWS))
        files.append(data[: -len(PARQUET_MAGIC)])
    yield pa.RecordBatch.from_arrays([pa.array(files, pa.binary()), pa.array([part] * len(files), pa.int32())], names=["file", "part"])


def _placer(lines_seen):
    """The mapInArrow body: place the task's rows (whole groups, thanks to the gid shuffle)
    and return its tables as Parquet files (see FILES_SCHEMA).

    `lines_seen` (an accumulator) adds up the lines every task read, for `analyse` to check
    that the committed output holds them all."""

    def place_batches(batches):
        import pyarrow as pa
        import pyarrow.compute as pc

        # Parsed batch by batch as they arrive, so the raw lines of one batch at a time stay in memory.
        parsed, blank, malformed = [], 0, 0
        for batch in batches:
            if batch.num_rows:
                table, batch_blank, batch_malformed = parse_lines(batch.column(0))
                parsed.append(table)
                blank += batch_blank
                malformed += batch_malformed
        table = pa.concat_tables(parsed) if parsed else parsed_arrow_schema().empty_table()
        lines_seen.add(table.num_rows + blank + malformed)
        placed = place_groups(table, blank, malformed)
        yield from _file_rows(placed.messages, MESSAGES_PART)
        yield from _file_rows(placed.threads, THREADS_PART)
        is_sender = pc.equal(placed.summary.column("kind"), SENDER)
        yield from _file_rows(placed.summary.filter(is_sender).select(["sender", "posts"]), SENDERS_PART)
        yield from _file_rows(placed.summary.filter(pc.invert(is_sender)), SUMMARY_PART)

    return place_batches


# ---------------------------------------------------------------- Spark: the shuffle, the output


def place_all(spark, paths: list[str], lines_seen):
    """FILES_SCHEMA rows of the exports: one shuffle by gid, one Arrow pass per task."""
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    return read_lines(spark, paths).repartition(partitions, group_key()).mapInArrow(_placer(lines_seen), FILES_SCHEMA)


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


# The exact median of all reply latencies without a column of millions on the driver: the
# placing pass counts the latencies per fine bin (monotone in the value), the driver finds
# the one or two bins holding the middle ranks, and the sender pass returns the distinct
# values of just those bins with their counts.
LATENCY_BINS_PER_OCTAVE = 256


def latency_bins(values):
    """Fine bin of each value: 256 per octave of |v| + 1, negative values below the others."""
    import numpy as np

    magnitude = np.floor(np.log2(np.abs(values) + 1) * LATENCY_BINS_PER_OCTAVE)
    return np.where(values >= 0, magnitude, -magnitude - 1).astype(np.int64)


def middle_bins(bin_counts) -> tuple[list, int]:
    """The bins holding the middle ranks of a [(bin, count)] histogram (ascending), and how
    many values lie in lower bins."""
    n = sum(count for _, count in bin_counts)
    picked, below, seen = [], None, 0
    for bin_id, count in bin_counts:
        if any(seen <= rank < seen + count for rank in ((n - 1) // 2, n // 2)):
            picked.append(bin_id)
            below = seen if below is None else below
        seen += count
    return picked, below or 0


def median_of_counts(value_counts, below: int = 0, n: int | None = None):
    """Median, as Spark's percentile computes it, of values given as [(value, count)] ascending;
    `below` values lie under the first of them, out of `n` in all (default: just these)."""
    n = below + sum(count for _, count in value_counts) if n is None else n
    if not n:
        return None
    picked = []
    for rank in ((n - 1) // 2, n // 2):
        seen = below
        for value, count in value_counts:
            if rank < seen + count:
                picked.append(value)
                break
            seen += count
    lower, upper = picked
    return lower if lower == upper else 0.5 * lower + 0.5 * upper


PARTICIPANT_FIELDS = (
    "sender string, sender_name string, messages long, threads long, threads_started long, replies_sent long, "
    "replies_received long, median_reply_latency_s double, reentry long"
)
# The sender pass returns participant rows (latency null) and rows of the middle bins'
# distinct latencies with their counts (sender null).
SENDER_PASS_SCHEMA = PARTICIPANT_FIELDS + ", latency double, latency_count long"


def _children(struct_array) -> dict:
    """A struct array's fields by name, offsets and nulls of the parent applied."""
    return dict(zip((field.name for field in struct_array.type), struct_array.flatten()))


def merge_senders(table, median_bins):
    """Participant rows of a Table of SENDER rows (all the rows of each of its senders), plus
    the distinct latencies in `median_bins` with their counts."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    code, senders = _codes(table.column("sender"))
    k = len(senders)
    posts = _children(table.column("posts").combine_chunks())

    def added(name):
        return pa.array(np.bincount(code, weights=posts[name].to_numpy(zero_copy_only=False), minlength=k).astype(np.int64))

    lists = posts["latencies"]
    values = pc.list_flatten(lists).to_numpy(zero_copy_only=False)
    owner = code[pc.list_parent_indices(lists).to_numpy(zero_copy_only=False)]
    # The latencies are whole milliseconds / 1000: back to those integers, exactly.
    values_ms = np.rint(values * 1000.0).astype(np.int64)
    columns = [
        senders, _max_strings(code, posts["name"], k), added("messages"), added("threads"), added("threads_started"),
        added("replies_sent"), added("replies_received"), _arrow(grouped_median(owner, values_ms, k, divisor=1000.0), np.zeros(k, dtype=bool)),
        added("reentry"), pa.nulls(k, pa.float64()), pa.nulls(k, pa.int64()),
    ]
    participants = pa.Table.from_arrays(columns, schema=arrow_schema(SENDER_PASS_SCHEMA))
    middle, counts = np.unique(values[np.isin(latency_bins(values), median_bins)], return_counts=True)
    m = middle.size
    latency_rows = pa.Table.from_arrays(
        [pa.nulls(m, field.type) for field in arrow_schema(PARTICIPANT_FIELDS)] + [pa.array(middle), pa.array(counts.astype(np.int64))],
        schema=arrow_schema(SENDER_PASS_SCHEMA),
    )
    return pa.concat_tables([participants, latency_rows])


def _sender_merger(median_bins: list):
    def merge(batches):
        import pyarrow as pa

        batches = [b for b in batches if b.num_rows]
        if batches:
            yield from merge_senders(pa.Table.from_batches(batches), median_bins).to_batches()

    return merge


def participants_and_latency_median(spark, sender_rows, latency_bin_counts):
    """The participants table (Arrow, by sender) and the exact median of all reply latencies.

    `sender_rows`: the placing tasks' SENDER rows (a DataFrame); one shuffle by sender and
    one Arrow pass: each task adds up its senders' partial counts and takes their latency
    medians with numpy.
    """
    import pyarrow as pa

    bins, below = middle_bins(latency_bin_counts)
    # A few rows per sender and task: one partition per core is plenty.
    partitions = spark.sparkContext.defaultParallelism
    merged = sender_rows.repartition(partitions, "sender").mapInArrow(_sender_merger(bins), SENDER_PASS_SCHEMA).toArrow()
    is_participant = merged.column("latency").is_null()
    participants = merged.filter(is_participant).select([name for name, _ in _fields(PARTICIPANT_FIELDS)]).sort_by("sender")
    middle = merged.filter(pa.compute.invert(is_participant)).group_by("latency").aggregate([("latency_count", "sum")])
    middle = sorted(zip(middle.column("latency").to_pylist(), middle.column("latency_count_sum").to_pylist()))
    n = sum(count for _, count in latency_bin_counts)
    return participants, median_of_counts(middle, below, n)


# ---------------------------------------------------------------- the whole job

GROUP_FIELDS = (
    "gid string, group_desc string, messages long, threads long, participants long, mean_thread_size double, "
    "median_thread_size double, max_thread_size long, max_depth int, orphan_messages long, invalid_messages long, "
    "reciprocity double, edited_messages long, deleted_messages long, reactions long"
)
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


TABLE_SPECS = {"messages": MESSAGE_FIELDS, "threads": THREAD_FIELDS, "groups": GROUP_FIELDS, "participants": PARTICIPANT_FIELDS}


def output_names() -> list[str]:
    """Every name a run may leave in DIR: a rerun deletes them all before renaming its own in."""
    return [*TABLE_NAMES, *(f"{name}.csv" for name in TABLE_NAMES), "summary.json", "report.html", *PLOT_FILES]


def analyse(spark, paths: list[str], out, fmt: str = "parquet", report: bool = False) -> Results:
    """Run the whole analysis and commit the tables, summary.json and (with `report`) the
    report into `out`, a location as Spark resolves it.

    One Spark job reads, shuffles, places and writes (the messages and threads tables, and
    the summary and per-sender rows; see PARQUET_MAGIC); small jobs then merge the
    per-sender rows and write the small tables; `OutputLocation.commit` puts it all in place.
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
    for name, spec in TABLE_SPECS.items():
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
    write_files(place_all(spark, paths, lines_seen), placed_uri)

    def part_uri(part: int) -> str | None:
        uri = f"{placed_uri}/part={part}"
        return uri if location.exists(uri) else None

    summary_uri = part_uri(SUMMARY_PART)
    small = (spark.read.schema(SUMMARY_SCHEMA).parquet(summary_uri).toArrow() if summary_uri
             else summary_arrow_schema().empty_table())

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
    write_table(_frame(spark, groups_table, GROUP_FIELDS), "groups")

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
        participants, latency_median = participants_and_latency_median(
            spark, spark.read.schema(sender_spec).parquet(senders_uri), histograms.pop("latency_fine", []))
    else:
        participants, latency_median = arrow_schema(PARTICIPANT_FIELDS).empty_table(), None
    participants = participants.cast(arrow_schema(PARTICIPANT_FIELDS))
    write_table(_frame(spark, participants, PARTICIPANT_FIELDS), "participants")
    location.delete(placed_uri)
    if fmt == "csv":
        sc.setJobDescription("CSV copies")
        for name, spec in TABLE_SPECS.items():
            spark.read.schema(spec).parquet(f"{staging}/{name}").write.option("header", True).csv(f"{staging}/{name}.csv")
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
    )
    import tempfile

    with tempfile.TemporaryDirectory(prefix="m2mc-thread-stats-") as local:
        local_dir = Path(local)
        (local_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        files = ["summary.json"]
        if report:
            from . import thread_report

            report_started = time.perf_counter()
            thread_report.write_report(results, local_dir)
            files += [p.name for p in local_dir.iterdir() if p.name != "summary.json"]
            log.info("report (%.1f s)", time.perf_counter() - report_started)
        for name in files:
            location.put(local_dir / name, f"{staging}/{name}")
    return results


def _frame(spark, table, spec: str):
    """A one-partition DataFrame of a small Arrow table."""
    return spark.createDataFrame(table.to_pandas(), spec).coalesce(1) if table.num_rows else spark.createDataFrame([], spec)


def _maybe_int(value):
    return None if value is None else int(value)


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
        results = analyse(spark, paths, args.out, args.format, report=not args.no_report)
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
