"""The thread-statistics tables' shapes: the export's fields, the output tables' columns and
their Arrow and Spark schemas. Plain data, shared by the kernels, the job and the report."""

from __future__ import annotations

from .hyperconvo import columns as hyperconvo_columns


EXPORT_FIELDS = ("gid", "group_desc", "mid", "parent", "sender", "sender_name", "text", "sent_at", "received_at")


# What operations (edits, deletes, reactions; issue 20) made of a message: `edited` a count,
# `deleted` a boolean, `reactions` an object {emoji: [pid, ...]}, parsed into the number of
# reactions (`reaction_count`). Exports from before them lack the fields, and count none.
OPERATION_FIELDS = ("edited", "deleted", "reaction_count")


# The members a message mentions (issue 32): `mentions`, a list of pids in the export, parsed
# into its length (`mention_count`). Exports from before mentions lack the field, and count none.
MENTION_FIELDS = ("mention_count",)


# The file a message offers (issue 30): `file`, an object in the export (name, size, mime,
# sha256, ...), parsed into its `size` (`file_size`), null for a message that offers none.
# A `file` that is not an object, or whose size is not a whole number >= 0, makes the line
# malformed. Exports from before files lack the field, and count none.
FILE_FIELDS = ("file_size",)


# A "reactions" key (its quotes cannot be inside a string) holding an object with a key.
NON_EMPTY_REACTIONS = r'"reactions":\s*\{\s*"'


TIME_FIELDS = ("sent_at", "received_at")


def export_arrow_schema():
    import pyarrow as pa

    return pa.schema([pa.field(name, pa.string()) for name in EXPORT_FIELDS]
                     + [pa.field("edited", pa.int64()), pa.field("deleted", pa.bool_())])


def parsed_arrow_schema():
    """What `parse_lines` returns: the export's fields, each line's reaction and mention counts and its
    offered file's size."""
    import pyarrow as pa

    return export_arrow_schema().append(pa.field("reaction_count", pa.int64())).append(
        pa.field("mention_count", pa.int64())).append(pa.field("file_size", pa.int64()))


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
# TOP rows: each task's TOP_THREADS largest threads for the explorer's table, the
# TREE_THREADS largest of them with their first TREE_NODES messages as a tree.
TOP = 4
TOP_THREADS, TREE_THREADS, TREE_NODES = 200, 20, 500


MESSAGE_FIELDS = (
    "gid string, mid string, parent string, sender string, sent_at timestamp, received_at timestamp, "
    "root_mid string, depth int, reply_latency_s double, parent_missing boolean, invalid boolean, copies long"
)


THREAD_FIELDS = (
    "gid string, root_mid string, size long, depth int, max_width long, leaves long, participants long, "
    "first_at timestamp, last_at timestamp, duration_s double, median_reply_latency_s double, "
    "root_reply_fraction double, wiener_index double, h_index int, orphan boolean, p90_reply_latency_s double, "
    "participation_gini double, mentions long, width_per_depth array<long>, files long, file_bytes long"
    # ConvoKit's HyperConvo measures (hyperconvo.py), null for threads under its minimum size.
    + "".join(f", {name} {kind}" for name, kind, _ in hyperconvo_columns())
)


STRUCT_FIELDS = {
    "group": (
        "desc string, lines long, messages long, threads long, participants long, mean_thread_size double, "
        "median_thread_size double, max_thread_size long, max_depth int, orphan_messages long, invalid_messages long, "
        "reciprocity double, size_sum long, depth_sum long, pairs long, reciprocated_pairs long, first_ms long, last_ms long, "
        "edited_messages long, deleted_messages long, reactions long, participation_gini double, files long, file_bytes long"
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
    # tree_parent: for the tree threads, each drawn message's parent as an index into the list
    # (-1 for the root), messages by depth then time; null for the others.
    "top": (
        "root_mid string, size long, depth int, max_width long, leaves long, participants long, first_at_ms long, "
        "duration_s double, median_reply_latency_s double, p90_reply_latency_s double, participation_gini double, "
        "wiener_index double, h_index int, orphan boolean, files long, file_bytes long, tree_parent array<long>"
    ),
}


# HIST plots: value counts of thread size, depth and width; messages per depth level;
# reply latencies in log bins, and in the fine bins of the median (`latency_bins`); valid
# messages per group and time bin (re-binned for the plot).
THREAD_PLOTS = {"size": "size", "depth": "depth", "width": "max_width"}


# Each width divides the next, so the driver can re-bin every task's bins exactly into
# bins of a multiple of the widest.
OVER_TIME_WIDTHS_S = (1, 10, 60, 600, 3600, 6 * 3600, 86400, 7 * 86400, 28 * 86400, 364 * 86400)


def _fields(spec: str) -> list[tuple[str, str]]:
    fields = []
    for part in spec.split(", "):
        name, kind = part.split(" ", 1)
        fields.append((name, kind))
    return fields


def _struct_ddl(spec: str) -> str:
    return f"struct<{', '.join(f'{field}: {kind}' for field, kind in _fields(spec))}>"


SUMMARY_SCHEMA = "kind int, gid string, sender string" + "".join(f", {name} {_struct_ddl(spec)}" for name, spec in STRUCT_FIELDS.items())


def _arrow_type(kind: str):
    import pyarrow as pa

    return {
        "string": pa.string(), "timestamp": pa.timestamp("us", tz="UTC"), "long": pa.int64(), "int": pa.int32(),
        "double": pa.float64(), "boolean": pa.bool_(), "array<double>": pa.list_(pa.float64()), "binary": pa.binary(),
        "array<long>": pa.list_(pa.int64()),
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


FILE_ROWS = 1 << 18  # rows per Parquet file: bounds each file row Spark holds


# The exact median of all reply latencies without a column of millions on the driver: the
# placing pass counts the latencies per fine bin (monotone in the value), the driver finds
# the one or two bins holding the middle ranks, and the sender pass returns the distinct
# values of just those bins with their counts.
LATENCY_BINS_PER_OCTAVE = 256


PARTICIPANT_FIELDS = (
    "sender string, sender_name string, messages long, threads long, threads_started long, replies_sent long, "
    "replies_received long, median_reply_latency_s double, reentry long"
)


# The sender pass returns participant rows (latency null) and rows of the middle bins'
# distinct latencies with their counts (sender null).
SENDER_PASS_SCHEMA = PARTICIPANT_FIELDS + ", latency double, latency_count long"


GROUP_FIELDS = (
    "gid string, group_desc string, messages long, threads long, participants long, mean_thread_size double, "
    "median_thread_size double, max_thread_size long, max_depth int, orphan_messages long, invalid_messages long, "
    "reciprocity double, edited_messages long, deleted_messages long, reactions long, participation_gini double, "
    "files long, file_bytes long"
)


TABLE_SPECS = {"messages": MESSAGE_FIELDS, "threads": THREAD_FIELDS, "groups": GROUP_FIELDS, "participants": PARTICIPANT_FIELDS}
