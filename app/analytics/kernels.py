"""The thread-statistics kernels: numpy and Arrow over one shuffle partition's groups, no Spark.

Parse and check lines strictly, merge copies of a message, find roots by pointer jumping,
measure threads, reply pairs and latencies, and encode the output rows and Parquet files.
Each function takes and returns arrays, so tests and the reference run them directly."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from .schema import (
    EXPORT_FIELDS, FILE_FIELDS, FILE_ROWS, GROUP, HIST, INFO, LATENCY_BINS_PER_OCTAVE, MESSAGE_FIELDS, NON_EMPTY_REACTIONS,
    MENTION_FIELDS, OPERATION_FIELDS, OVER_TIME_WIDTHS_S, PARQUET_MAGIC, PARTICIPANT_FIELDS, SENDER, SENDER_PASS_SCHEMA, THREAD_FIELDS,
    THREAD_PLOTS, TIME_FIELDS, TOP, TOP_THREADS, TREE_NODES, TREE_THREADS, arrow_schema, export_arrow_schema, parsed_arrow_schema, summary_arrow_schema,
)
from . import hyperconvo
from .thread_report import OVER_TIME_GROUPS


def reaction_counts(lines, has_reactions):
    """Per line, the number of reactions (one per reactor and emoji); 0 without any.

    Arrow's JSON reader cannot read an object of free keys, but it tells which lines hold a
    `reactions` object (`has_reactions`, a numpy bool array). Of those, a line whose text
    has no non-empty object under a "reactions" key anywhere (NON_EMPTY_REACTIONS) has
    none; the others, few in any export, are parsed whole by Python's json module, which
    reads the top-level object exactly.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    counts = np.zeros(len(lines), dtype=np.int64)
    rows = np.flatnonzero(has_reactions)
    if not rows.size:
        return pa.array(counts)
    candidates = lines.take(pa.array(rows))
    some = pc.fill_null(pc.match_substring_regex(candidates, NON_EMPTY_REACTIONS), False).to_numpy(zero_copy_only=False)
    for row in np.flatnonzero(some):
        value = json.loads(candidates[int(row)].as_py()).get("reactions")
        counts[rows[row]] = sum(len(pids) for pids in value.values() if isinstance(pids, list))
    return pa.array(counts)


def offered_sizes(files):
    """Per line, the size of the file it offers (a `file` object's `size`): null for no file, -1
    for an object without a whole size >= 0, which `well_formed` drops as malformed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    files = files.combine_chunks() if isinstance(files, pa.ChunkedArray) else files
    size = pc.struct_field(files, "size")
    usable = pc.fill_null(pc.greater_equal(size, 0), False)
    return pc.if_else(pc.is_valid(files), pc.if_else(usable, size, -1), pa.scalar(None, pa.int64()))


def _string_offsets(strings):
    """The int32 offsets of a StringArray's values into its data buffer (len + 1 of them)."""
    import numpy as np

    return np.frombuffer(strings.buffers()[1], dtype=np.int32)[strings.offset:strings.offset + len(strings) + 1]


# Lines are parsed in blocks of PARSE_BLOCK. A block the strict parser refuses is cut in
# halves, and each half parsed again, down to blocks of LINE_BY_LINE lines, parsed line by
# line: a malformed line costs about 20 + 64 small parses, where going through its block of
# 4,096 line by line cost 4,096 (0.6 s); a log of nothing but malformed lines costs about
# one parse per line either way. Blocks of 65,536 lines cost about a tenth less per line
# than blocks of 4,096.
PARSE_BLOCK = 1 << 16
LINE_BY_LINE = 64


def _classify_lines(lines):
    """Which lines are blank (whitespace only), and which open an object (whitespace, then `{`):
    two numpy bool arrays.

    Only lines that open an object go to the parser: a bare `null` as a block's first line
    crashes pyarrow 26's reader. Nearly every line is empty or starts with `{` itself,
    which its first byte shows; only the others go through the regular expressions (two
    of them on every line cost a tenth of the job's parsing).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets = _string_offsets(lines)
    lengths = np.diff(offsets)
    data = lines.buffers()[2]
    first = np.zeros(len(lines), dtype=np.uint8)
    if data is not None and data.size:
        nonempty = lengths > 0
        first[nonempty] = np.frombuffer(data, dtype=np.uint8)[offsets[:-1][nonempty]]
    present = np.ones(len(lines), dtype=bool) if lines.null_count == 0 else lines.is_valid().to_numpy(zero_copy_only=False)
    blank = present & (lengths == 0)
    candidate = present & (first == ord("{"))
    other = np.flatnonzero(present & (lengths > 0) & (first != ord("{")))
    if other.size:
        rest = lines.take(pa.array(other))
        blank[other] = pc.fill_null(pc.match_substring_regex(rest, r"^\s*$"), False).to_numpy(zero_copy_only=False)
        candidate[other] = pc.fill_null(pc.match_substring_regex(rest, r"^\s*\{"), False).to_numpy(zero_copy_only=False)
    return blank, candidate


def parse_lines(lines, *, with_rows: bool = False, terminated: bool = False):
    """Strictly parsed export lines: (Table of EXPORT_FIELDS as strings with the operations' fields,
    blank lines, malformed lines), and with `with_rows` the index of each parsed row's line.

    A line is well-formed JSON here when it is one JSON object whose export fields are
    strings or null (missing counts as null); other fields are ignored, whatever their
    type. A number, boolean, array or object where a string belongs makes the line
    malformed, as does anything but one object on the line. Blank (whitespace-only)
    lines are counted apart. Arrow's JSON reader checks the types (Spark's would turn
    12345 or ["a"] into a string); it refuses a whole block for one bad line, so such a
    block goes line by line. With `terminated`, each line but the last ends with its
    newline (as `reading.lines_array` cuts them), so a block's bytes are parsed as they lie.
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj

    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    blank, candidate = _classify_lines(lines)
    blank_count = int(blank.sum())
    malformed = len(lines) - blank_count - int(candidate.sum())
    line_of = np.flatnonzero(candidate)
    if malformed + blank_count:
        lines = lines.filter(pa.array(candidate))
    # `reactions` as an object of no fields: Arrow checks the type and skips the content.
    schema = export_arrow_schema().append(pa.field("reactions", pa.struct([]))).append(
        pa.field("mentions", pa.list_(pa.string()))).append(pa.field("file", pa.struct([pa.field("size", pa.int64())])))
    longest = int(pc.max(pc.binary_length(lines)).as_py() or 0) if len(lines) else 0
    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    read = pj.ReadOptions(block_size=max(1 << 20, 2 * longest + 64), use_threads=False)

    def parse(chunk):
        # An Arrow string array's values lie back to back: with their newlines, they are the text.
        joined = chunk if terminated else pc.binary_join_element_wise(chunk, pa.scalar(""), "\n")
        if not len(joined):
            return parsed_arrow_schema().empty_table()
        offsets = _string_offsets(joined)
        data = joined.buffers()[2][int(offsets[0]):int(offsets[-1])]
        try:
            # A BufferReader hands Arrow the joined bytes as they are; io.BytesIO copied them.
            table = pj.read_json(pa.BufferReader(data), read_options=read, parse_options=options)
        except pa.ArrowInvalid:
            return None
        # Two objects on one line make more rows than lines.
        if table.num_rows != len(chunk):
            return None
        has_reactions = table.column("reactions").is_valid().to_numpy(zero_copy_only=False)
        mention_count = pc.fill_null(pc.list_value_length(table.column("mentions")), 0).cast(pa.int64())
        return (table.drop_columns(["reactions", "mentions", "file"])
                .append_column("reaction_count", reaction_counts(chunk, has_reactions))
                .append_column("mention_count", mention_count)
                .append_column("file_size", offered_sizes(table.column("file"))))

    parsed, rows = [], []

    def parse_block(start: int, end: int) -> int:
        """Parse lines[start:end], halving what the parser refuses; the malformed lines found."""
        table = parse(lines.slice(start, end - start))
        if table is not None:
            parsed.append(table)
            rows.append(line_of[start:end])
            return 0
        if end - start <= LINE_BY_LINE:
            return sum(parse_block(line, line + 1) for line in range(start, end)) if end - start > 1 else 1
        middle = (start + end) // 2
        return parse_block(start, middle) + parse_block(middle, end)

    for start in range(0, len(lines), PARSE_BLOCK):
        malformed += parse_block(start, min(start + PARSE_BLOCK, len(lines)))
    table = pa.concat_tables(parsed) if parsed else parsed_arrow_schema().empty_table()
    table = table.cast(parsed_arrow_schema())
    if with_rows:
        return table, blank_count, malformed, np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    return table, blank_count, malformed


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
    unreadable time, a `file` without a whole size >= 0 (`offered_sizes`). An empty parent means a thread root, like a null one.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    def non_empty(name):
        return pc.fill_null(pc.greater(pc.binary_length(table.column(name)), 0), False)

    keep = None
    for name in ("gid", "mid", "sender"):
        keep = non_empty(name) if keep is None else pc.and_(keep, non_empty(name))
    if "file_size" in table.column_names:
        keep = pc.and_(keep, pc.fill_null(pc.greater_equal(table.column("file_size"), 0), True))
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
    return table.select([name for name in EXPORT_FIELDS + OPERATION_FIELDS + MENTION_FIELDS + FILE_FIELDS
                         if name in table.column_names])


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
    percentile computes it: the middle value, or lower + 0.5 * (upper - lower) of the middle two."""
    return grouped_percentiles(group, values, k, (0.5,), divisor)[0]


def grouped_percentiles(group, values, k, quantiles, divisor: float = 1.0) -> list:
    """Per group 0..k-1 and per quantile q, the percentile of `values` / `divisor` (NaN for an
    empty group) as Spark's `percentile` computes it: at position q * (n - 1) of the sorted
    values, lower + (position - below) * (upper - lower) of the two values around it.

    `values` are whole numbers (int64: latencies in ms, sizes), so one sort of an integer
    key (group, value) orders them, many times faster than a lexsort; the doubles are the
    same `value / divisor` the tables hold.
    """
    import numpy as np

    counts = np.bincount(group, minlength=k)
    if not values.size:
        return [np.full(k, np.nan) for _ in quantiles]
    low = int(values.min())
    span = int(values.max()) - low + 1
    if k * span < 2**62:
        ordered = np.sort(group.astype(np.int64) * span + (values - low)) % span + low
    else:
        ordered = values[np.lexsort((values, group))]
    ordered = ordered / divisor
    start = np.r_[0, np.cumsum(counts)[:-1]]
    has = counts > 0
    found = []
    for q in quantiles:
        position = q * np.maximum(counts - 1, 0)
        below = np.floor(position)
        above = np.ceil(position)
        lo = np.where(has, start + below.astype(np.int64), 0)
        hi = np.where(has, start + above.astype(np.int64), 0)
        # Spark's own arithmetic (PercentileBase.getPercentile), to the last bit.
        mixed = ordered[lo] + (position - below) * (ordered[hi] - ordered[lo])
        found.append(np.where(has, np.where(ordered[lo] == ordered[hi], ordered[lo], mixed), np.nan))
    return found


def grouped_gini(group, values, k):
    """Per group 0..k-1, the Gini coefficient of its non-negative whole `values` (NaN for an
    empty group): sum |x_i - x_j| over all ordered pairs / (2 n^2 mean), computed from the
    sorted values as 2 sum(i x_(i)) / (n sum x) - (n + 1) / n, i from 1."""
    import numpy as np

    counts = np.bincount(group, minlength=k)
    if not values.size:
        return np.full(k, np.nan)
    span = int(values.max()) + 1
    if k * span < 2**62:
        ordered_key = np.sort(group.astype(np.int64) * span + values)
        ordered_group, ordered = ordered_key // span, ordered_key % span
    else:
        order = np.lexsort((values, group))
        ordered_group, ordered = group[order], values[order]
    start = np.r_[0, np.cumsum(counts)[:-1]]
    rank = np.arange(1, ordered.size + 1) - start[ordered_group]
    total = np.bincount(ordered_group, weights=ordered, minlength=k)
    weighted = np.bincount(ordered_group, weights=rank * ordered.astype(np.float64), minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        gini = 2.0 * weighted / (counts * total) - (counts + 1.0) / counts
    return np.where(counts > 0, gini, np.nan)


def thread_sums(root_pos, valid, table, name):
    """Per row, the sum of column ``name`` over the thread that row roots (0 for other rows, and
    for a table without the column); invalid rows (in a cycle) count in no thread."""
    import numpy as np
    import pyarrow.compute as pc

    if name not in table.column_names:
        return np.zeros(len(root_pos), dtype=np.int64)
    values = pc.fill_null(table.column(name), 0).to_numpy(zero_copy_only=False)
    return np.bincount(root_pos[valid], weights=values[valid], minlength=len(root_pos)).astype(np.int64)


def offered_files(table):
    """Per row, whether it offers a file and the file's size (0 where none): two numpy arrays.
    A table without `file_size` offers none."""
    import numpy as np
    import pyarrow.compute as pc

    if "file_size" not in table.column_names:
        return np.zeros(table.num_rows, dtype=bool), np.zeros(table.num_rows, dtype=np.int64)
    size = table.column("file_size")
    return (pc.is_valid(size).to_numpy(zero_copy_only=False),
            pc.fill_null(size, 0).to_numpy(zero_copy_only=False).astype(np.int64))


def _int_sums(code, values, k):
    """Per code 0..k-1, the exact int64 sum of `values` (bincount's float weights round past 2**53)."""
    import numpy as np

    sums = np.zeros(k, dtype=np.int64)
    np.add.at(sums, code, values)
    return sums


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


def _run_starts(ordered):
    """Where each run of equal values begins in a sorted numpy array (positions ascending)."""
    import numpy as np

    fresh = np.ones(ordered.size, dtype=bool)
    fresh[1:] = ordered[1:] != ordered[:-1]
    return np.flatnonzero(fresh)


def _each_once(codes, k) -> bool:
    """Whether no code 0..k-1 occurs twice."""
    import numpy as np

    return np.bincount(codes, minlength=k).max(initial=0) <= 1


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
    starts = _run_starts(sorted_key)
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
    group_start = _run_starts(ranked_key)
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


def thread_measures(parent_pos, root_pos, depth, sent_ms, latency_ms, sender_code, n_senders, mid):
    """Per-thread measures over the valid nodes (root_pos >= 0), one numpy pass.

    `mid` (Arrow strings) orders messages sent in the same millisecond, for HyperConvo's
    first messages. Returns (root row positions, dict of per-thread arrays in that order
    (a (values, null mask) pair for each HyperConvo column), and per sender the number of
    threads posted in and of threads posted in more than once).
    """
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    n = parent_pos.size
    valid = root_pos >= 0
    root_rows = np.flatnonzero(valid & (depth == 0))
    k = root_rows.size
    rows = np.flatnonzero(valid)
    thread_of_root = np.full(n, -1, dtype=np.int64)
    thread_of_root[root_rows] = np.arange(k)
    thread = thread_of_root[root_pos[rows]]
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

    # Subtree sizes, summed into parents level by level from the deepest up (the order
    # within a level does not matter: a quicksort, 4 times faster than a stable one).
    subtree = np.ones(n, dtype=np.int64)
    by_depth = rows[np.argsort(-d)]
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

    # Nodes per (thread, depth), as counts of one integer key: a fifth of a lexsort's time.
    levels = int(d.max(initial=0)) + 1
    level_key, level_count = np.unique(thread * levels + d, return_counts=True)
    level_thread, level_depth = level_key // levels, level_key % levels
    max_width = np.zeros(k, dtype=np.int64)
    np.maximum.at(max_width, level_thread, level_count)
    # Every level from 0 to a thread's depth holds a node, so the counts, in (thread, depth)
    # order, are the threads' width lists back to back.
    width_per_depth = pa.ListArray.from_arrays(pa.array(np.r_[0, np.cumsum(max_depth + 1)].astype(np.int32)), pa.array(level_count.astype(np.int64)))
    h_index = np.zeros(k, dtype=np.int64)
    qualifies = level_count >= level_depth
    np.maximum.at(h_index, level_thread[qualifies], level_depth[qualifies])

    poster_thread, poster, posts = distinct_pairs(thread, sender_code[rows], n_senders)
    participants = np.bincount(poster_thread, minlength=k).astype(np.int64)
    sender_threads = np.bincount(poster, minlength=n_senders).astype(np.int64)
    sender_reentry = np.bincount(poster, weights=posts > 1, minlength=n_senders).astype(np.int64)

    median, p90 = grouped_percentiles(thread[reply], latency_ms[replies], k, (0.5, 0.9), divisor=1000.0)
    gini = grouped_gini(poster_thread, posts, k)

    # HyperConvo's first messages: the big threads' rows by (thread, time, mid). Arrow's
    # sort compares the mids only where thread and time tie.
    in_big = (size >= hyperconvo.MIN_SIZE)[thread]
    big_rows = rows[in_big]
    prefix_order = pa.table({"thread": thread[in_big], "sent": sent_ms[big_rows], "mid": mid.take(pa.array(big_rows))})
    order = pc.sort_indices(prefix_order, sort_keys=[("thread", "ascending"), ("sent", "ascending"), ("mid", "ascending")]).to_numpy()
    thread_of_row = np.full(n, -1, dtype=np.int64)
    thread_of_row[rows] = thread
    convo = hyperconvo.thread_prefix_measures(thread_of_row, big_rows[order], parent_pos, sender_code, k)

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
        "p90_latency_s": p90,
        "participation_gini": gini,
        "width_per_depth": width_per_depth,
        **convo,
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
    # One row per distinct key, whichever: an unstable sort, not np.unique's stable one.
    by_key = np.argsort(key)
    sorted_key = key[by_key]
    starts = _run_starts(sorted_key)
    distinct, first = sorted_key[starts], by_key[starts]
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
    each_mid_once = _each_once(mid_code, m)
    if each_mid_once:
        # One export, or generated logs: no copies, and no sort to find them.
        keep, copies, conflicts = None, np.ones(rows, dtype=np.int64), 0
    else:
        keep, copies, conflicts = merge_copies(table, key)
    table = table.drop_columns(["text"])  # only copies compare it
    if keep is not None:
        table = table.take(pa.array(keep))
        key, gid_code, mid_code, parent_code = key[keep], gid_code[keep], mid_code[keep], parent_code[keep]
        each_mid_once = _each_once(mid_code, m)
    n, n_groups = table.num_rows, len(gids)

    # Parent links: the row of the parent's mid in the same group.
    parent = table.column("parent")
    row_of_mid = np.full(m, -1, dtype=np.int64)
    row_of_mid[mid_code] = np.arange(n)
    if each_mid_once:
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
    root_rows, measures, sender_threads, sender_reentry = thread_measures(
        parent_pos, root_pos, depth, sent_ms, latency_ms, sender_code, n_senders, table.column("mid").combine_chunks())

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
    offered, file_size = offered_files(table)
    in_thread = valid & offered
    thread_files = np.bincount(root_pos[in_thread], minlength=n).astype(np.int64)
    thread_file_bytes = _int_sums(root_pos[in_thread], file_size[in_thread], n)
    k = root_rows.size
    root_index = pa.array(root_rows)
    no_mask = np.zeros(k, dtype=bool)
    first_ms, last_ms = measures["first_ms"], measures["last_ms"]
    thread_columns = {
        "gid": table.column("gid").take(root_index),
        "root_mid": mid.take(root_index),
        "size": pa.array(measures["size"]),
        "depth": pa.array(measures["depth"]),
        "max_width": pa.array(measures["max_width"]),
        "leaves": pa.array(measures["leaves"]),
        "participants": pa.array(measures["participants"]),
        "first_at": pa.array(first_ms * 1000).cast(pa.timestamp("us", tz="UTC")),
        "last_at": pa.array(last_ms * 1000).cast(pa.timestamp("us", tz="UTC")),
        "duration_s": pa.array((last_ms - first_ms) / 1000.0),
        "median_reply_latency_s": _arrow(measures["median_latency_s"], no_mask),
        "root_reply_fraction": _arrow(measures["root_reply_fraction"], no_mask),
        "wiener_index": _arrow(measures["wiener_index"], no_mask),
        "h_index": pa.array(measures["h_index"]),
        "orphan": pa.array(parent_missing[root_rows]),
        "p90_reply_latency_s": _arrow(measures["p90_latency_s"], no_mask),
        "participation_gini": _arrow(measures["participation_gini"], no_mask),
        "mentions": pa.array(thread_sums(root_pos, valid, table, "mention_count")[root_rows]),
        "files": pa.array(thread_files[root_rows]),
        "file_bytes": pa.array(thread_file_bytes[root_rows]),
        "width_per_depth": measures["width_per_depth"],
    }
    for name, _, _ in hyperconvo.columns():
        values, missing = measures[name]
        thread_columns[name] = _arrow(values, missing)
    thread_schema = arrow_schema(THREAD_FIELDS)
    threads = pa.Table.from_arrays([thread_columns[f.name].cast(f.type) for f in thread_schema], schema=thread_schema)

    member_group, _, member_messages = distinct_pairs(gid_code, sender_code, n_senders)
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
        "participation_gini": _arrow(grouped_gini(member_group, member_messages, n_groups), np.zeros(n_groups, dtype=bool)),
        "size_sum": pa.array(size_sum),
        "depth_sum": pa.array(np.bincount(thread_gid, weights=thread_depths, minlength=n_groups).astype(np.int64)),
        "pairs": pa.array(pairs),
        "reciprocated_pairs": pa.array(reciprocated),
        "first_ms": _arrow(group_first, no_threads),
        "last_ms": _arrow(group_last, no_threads),
        **operation_counts(table, gid_code, n_groups),
        "files": _counts(gid_code, n_groups, offered),
        "file_bytes": pa.array(_int_sums(gid_code[offered], file_size[offered], n_groups)),
    }

    # Each sender's reply latencies in this task, as one list per sender.
    latency_sender = sender_code[has_latency]
    by_sender = np.argsort(latency_sender)  # the order within a sender's list does not matter
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
        _top_part(schema, threads, root_rows, root_pos, depth, sent_ms, parent_pos),
    ])
    return Placed(messages, threads, summary)


def _top_part(schema, threads, root_rows, root_pos, depth, sent_ms, parent_pos):
    """TOP rows: the task's TOP_THREADS largest threads (size, then gid and root mid), the
    TREE_THREADS largest with their tree: the first TREE_NODES messages by depth then time
    (a node's parent always comes before it, so the cut keeps a tree)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if not threads.num_rows:
        return schema.empty_table()
    order = pc.sort_indices(threads, sort_keys=[("size", "descending"), ("gid", "ascending"), ("root_mid", "ascending")])
    top = order.to_numpy()[:TOP_THREADS]
    drawn = top[:TREE_THREADS]
    tree_of_root = np.full(root_pos.size, -1, dtype=np.int64)
    tree_of_root[root_rows[drawn]] = np.arange(drawn.size)
    members = np.flatnonzero(root_pos >= 0)
    members = members[tree_of_root[root_pos[members]] >= 0]
    tree = tree_of_root[root_pos[members]]
    members = members[np.lexsort((sent_ms[members], depth[members], tree))]
    tree = tree_of_root[root_pos[members]]
    counts = np.bincount(tree, minlength=drawn.size)
    rank = np.arange(members.size) - np.r_[0, np.cumsum(counts)[:-1]][tree]
    kept = rank < TREE_NODES
    members, tree, rank = members[kept], tree[kept], rank[kept]
    index_of_row = np.full(root_pos.size, -1, dtype=np.int64)
    index_of_row[members] = rank
    parent_index = np.where(depth[members] > 0, index_of_row[np.maximum(parent_pos[members], 0)], -1)
    sizes = np.bincount(tree, minlength=drawn.size)
    offsets = np.r_[0, np.cumsum(sizes), np.full(top.size - drawn.size, sizes.sum())].astype(np.int32)
    tree_parent = pa.ListArray.from_arrays(pa.array(offsets), pa.array(parent_index), mask=pa.array(np.arange(top.size) >= drawn.size))
    chosen = threads.take(pa.array(top))
    columns = {name: chosen.column(name) for name in chosen.column_names}
    columns["first_at_ms"] = pc.divide(chosen.column("first_at").cast(pa.int64()), 1000)
    columns["tree_parent"] = tree_parent
    return _part(schema, TOP, top.size, {"gid": chosen.column("gid"), "top": _struct(schema.field("top").type, columns, np.zeros(top.size, dtype=bool))})


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


# Message ids are unique and random: a row group's min and max of them span nearly all ids
# and prune nothing, yet computing them cost a tenth of the writing.
UNIQUE_ID_COLUMNS = ("mid", "parent", "root_mid")


def parquet_file(table):
    """`table` as the bytes of a Parquet file, a pyarrow Buffer (snappy, as Spark's writer;
    dictionaries only where values repeat: building one for the unique mids costs, then is
    dropped; statistics on all but UNIQUE_ID_COLUMNS)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = pa.BufferOutputStream()
    dictionary = [column for column in ("gid", "sender") if column in table.column_names]
    statistics = [column for column in table.column_names if column not in UNIQUE_ID_COLUMNS]
    pq.write_table(table, sink, compression="snappy", use_dictionary=dictionary, write_statistics=statistics)
    return sink.getvalue()


def _file_rows(table, part: int):
    """FILES_SCHEMA rows holding `table` as Parquet files, each without its closing magic
    (the text writer adds it back); a batch per file, over the file's own buffer (no copy)."""
    import numpy as np
    import pyarrow as pa

    if table is None or not table.num_rows:
        return
    for start in range(0, table.num_rows, FILE_ROWS):
        data = parquet_file(table.slice(start, FILE_ROWS))
        offsets = pa.py_buffer(np.array([0, data.size - len(PARQUET_MAGIC)], dtype=np.int32).tobytes())
        file = pa.Array.from_buffers(pa.binary(), 1, [None, offsets, data])
        yield pa.RecordBatch.from_arrays([file, pa.array([part], pa.int32())], names=["file", "part"])


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
