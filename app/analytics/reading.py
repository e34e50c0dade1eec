"""The map side of m2mc-thread-stats, no Spark: export files read in the Python workers as byte-range
splits cut at line ends, their lines parsed strictly, and the parsed rows packed per shuffle partition.

Parsing before the shuffle lets the shuffle move a few large Arrow IPC blobs, each bound for
one partition, instead of millions of raw lines keyed by a gid the JVM had to find in each
line's text: at 10M messages the JVM spent about half the job's CPU reading lines, finding
that key, writing the shuffle and moving the lines into Arrow again for the Python workers.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass

from .kernels import parse_lines
from .schema import parsed_arrow_schema

# Lines gathered from Spark's text reader (URL inputs) before they are parsed and packed.
GATHER_ROWS = 1 << 18

# Lines end at "\n" only: a "\r" before it stays in the line, where JSON reads it as white
# space (Spark's text reader is given lineSep "\n" for URLs, so both readings agree).
NEWLINE = 0x0A
CHUNK_BYTES = 32 << 20  # raw bytes parsed at a time: bounds a worker's memory whatever the split
# A split is a quarter core's share of the input, within these bounds (Spark's text source
# cuts at 128 MB).
MIN_SPLIT_BYTES, MAX_SPLIT_BYTES = 8 << 20, 128 << 20
BLOB_ROWS = 1 << 18  # parsed rows per blob: bounds each row Spark holds and each Arrow batch
PARTS_SCHEMA = "part int, blank long, malformed long, rows binary"
# The blobs' buffers are compressed here, in one pass of C++, so the JVM copies, shuffles and
# hands back a third of the bytes (Spark's own shuffle compression is off: see build_session).
BLOB_COMPRESSION = "lz4"


@dataclass(frozen=True, slots=True)
class Split:
    """The lines of `path` that start in [start, end); a gzip file is one split, read whole."""

    path: str
    start: int
    end: int


def split_size(total_bytes: int, cores: int) -> int:
    """Four splits per core at least, so the cores finish together."""
    return min(MAX_SPLIT_BYTES, max(MIN_SPLIT_BYTES, -(-total_bytes // (4 * cores))))


def splits_of(paths: list[str], sizes: list[int], split_bytes: int) -> list[Split]:
    splits = []
    for path, size in zip(paths, sizes):
        if path.endswith(".gz") or size == 0:
            splits.append(Split(path, 0, size))
            continue
        splits.extend(Split(path, start, min(start + split_bytes, size)) for start in range(0, size, split_bytes))
    return splits


UTF8_BOM = b"\xef\xbb\xbf"


def split_chunks(split: Split):
    """The bytes of the split's lines, in chunks of whole lines (each but the file's last ends
    with a newline), about CHUNK_BYTES each. A byte-order mark opening the file is dropped, as
    Hadoop's line reader (Spark's text source) drops it."""
    chunks = _split_chunks(split)
    if split.start == 0:
        first = next(chunks, None)
        if first is None:
            return
        yield first[len(UTF8_BOM):] if bytes(first[:len(UTF8_BOM)]) == UTF8_BOM else first
    yield from chunks


def _split_chunks(split: Split):
    if split.path.endswith(".gz"):
        with gzip.open(split.path, "rb") as stream:
            yield from _whole_lines(iter(lambda: stream.read(CHUNK_BYTES), b""))
        return
    with open(split.path, "rb") as stream:
        position = split.start
        if split.start > 0:
            # The split's first line starts after the first newline at or past start - 1; the
            # line running over `start` belongs to the split before.
            stream.seek(split.start - 1)
            position = split.start - 1 + len(stream.readline())
        if position >= split.end:
            return
        data = stream.read(split.end - position)
        # The last line starting before `end` runs on to its newline.
        tail = stream.readline() if data and not data.endswith(b"\n") else b""
    view = memoryview(data)
    whole = data.rfind(b"\n") + 1 if tail else len(data)
    begin = 0
    while begin < whole:
        cut = data.find(b"\n", begin + CHUNK_BYTES, whole) + 1 or whole
        yield view[begin:cut]
        begin = cut
    if tail:
        yield data[whole:] + tail


def _whole_lines(pieces):
    """Re-cut byte pieces so each ends at a newline (but the last)."""
    carry = b""
    for piece in pieces:
        data = carry + piece if carry else piece
        cut = data.rfind(b"\n") + 1
        if cut:
            yield data[:cut]
            carry = data[cut:]
        else:
            carry = data
    if carry:
        yield carry


def lines_array(data):
    """The lines of `data` (whole lines) as an Arrow string array over the same bytes, each with
    its newline (the last may have none): `parse_lines(..., terminated=True)` reads them.
    The bytes are as they are: invalid UTF-8 makes its line malformed."""
    import numpy as np
    import pyarrow as pa

    raw = np.frombuffer(data, dtype=np.uint8)
    starts = np.flatnonzero(raw == NEWLINE) + 1
    if not raw.size or starts.size and starts[-1] == raw.size:
        offsets = np.r_[0, starts]
    else:
        offsets = np.r_[0, starts, raw.size]  # a last line without a newline
    return pa.Array.from_buffers(pa.string(), offsets.size - 1, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)])


def partition_of_key(key: int, partitions: int) -> int:
    """The shuffle partition Spark's hash partitioning gives an int column's `key`:
    pmod(Murmur3_x86_32.hashInt(key, seed 42), partitions)."""
    mask = 0xFFFFFFFF

    def rotl(value, bits):
        return ((value << bits) | (value >> (32 - bits))) & mask

    k1 = (key & mask) * 0xCC9E2D51 & mask
    k1 = rotl(k1, 15) * 0x1B873593 & mask
    h1 = 42 ^ k1
    h1 = (rotl(h1, 13) * 5 + 0xE6546B64) & mask
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & mask
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & mask
    h1 ^= h1 >> 16
    signed = h1 - (1 << 32) if h1 & 0x80000000 else h1
    return signed % partitions


def partition_keys(partitions: int) -> list[int]:
    """For each shuffle partition, the smallest int key Spark hashes into it."""
    keys: dict[int, int] = {}
    key = 0
    while len(keys) < partitions:
        keys.setdefault(partition_of_key(key, partitions), key)
        key += 1
    return [keys[p] for p in range(partitions)]


def gid_buckets(gids, buckets: int):
    """Per row, its group's bucket in 0..buckets-1 (CRC-32 of the gid: the same in every process);
    rows without a gid in bucket 0 (they are malformed, only counted)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(gids, pa.ChunkedArray):
        gids = gids.combine_chunks()
    encoded = gids.dictionary_encode()
    of_value = np.array([zlib.crc32(value) % buckets for value in encoded.dictionary.cast(pa.binary()).to_pylist()] + [0],
                        dtype=np.int64)
    indices = pc.fill_null(encoded.indices, len(encoded.dictionary)).to_numpy(zero_copy_only=False)
    return of_value[indices]


def packed_parts(lines, keys: list[int], terminated: bool = False):
    """PARTS_SCHEMA batches of one array of lines: its parsed rows per partition as Arrow IPC
    streams (BLOB_ROWS rows at most each), and its blank and malformed counts on the first."""
    import numpy as np
    import pyarrow as pa

    table, blank, malformed = parse_lines(lines, terminated=terminated)
    bucket = gid_buckets(table.column("gid"), len(keys))
    order = np.argsort(bucket, kind="stable")
    ordered = table.take(pa.array(order)) if table.num_rows else table
    counts = np.bincount(bucket, minlength=len(keys))
    starts = np.r_[0, np.cumsum(counts)]
    # The blobs back to back in one buffer, each a whole IPC stream: the binary column is
    # made over it without a copy.
    sink, parts, ends = pa.BufferOutputStream(), [], []
    options = pa.ipc.IpcWriteOptions(compression=BLOB_COMPRESSION, use_threads=False)
    for part in np.flatnonzero(counts) if table.num_rows else [0]:
        for start in range(int(starts[part]), max(int(starts[part + 1]), int(starts[part]) + 1), BLOB_ROWS):
            writer = pa.ipc.new_stream(sink, ordered.schema, options=options)
            writer.write_table(ordered.slice(start, min(BLOB_ROWS, int(starts[part + 1]) - start)))
            writer.close()
            parts.append(keys[part])
            ends.append(sink.tell())
    offsets = pa.py_buffer(np.r_[0, ends].astype(np.int32))
    blobs = pa.Array.from_buffers(pa.binary(), len(ends), [None, offsets, sink.getvalue()])
    blanks, malformeds = np.zeros(len(ends), dtype=np.int64), np.zeros(len(ends), dtype=np.int64)
    blanks[0], malformeds[0] = blank, malformed
    yield pa.RecordBatch.from_arrays([pa.array(parts, pa.int32()), pa.array(blanks), pa.array(malformeds), blobs],
                                     names=["part", "blank", "malformed", "rows"])


def unpacked(batches):
    """The parsed rows of PARTS_SCHEMA batches as one Table, and their blank and malformed counts."""
    import pyarrow as pa
    import pyarrow.compute as pc

    tables, blank, malformed = [], 0, 0
    for batch in batches:
        if not batch.num_rows:
            continue
        blank += int(pc.sum(batch.column(1)).as_py() or 0)
        malformed += int(pc.sum(batch.column(2)).as_py() or 0)
        for blob in batch.column(3):
            tables.append(pa.ipc.open_stream(blob.as_buffer()).read_all())
    table = pa.concat_tables(tables) if tables else parsed_arrow_schema().empty_table()
    return table, blank, malformed


def read_splits(splits: list[Split], keys: list[int]):
    """The map function over split indices (a column of ints): each split read, parsed and packed."""

    def read(batches):
        for batch in batches:
            for index in batch.column(0).to_pylist():
                for chunk in split_chunks(splits[index]):
                    yield from packed_parts(lines_array(chunk), keys, terminated=True)

    return read


def parse_text(keys: list[int]):
    """The map function over Spark's text rows (one string column): lines parsed and packed, GATHER_ROWS at a time."""

    def parse(batches):
        import pyarrow as pa

        gathered, rows = [], 0
        for batch in batches:
            gathered.append(batch.column(0))
            rows += batch.num_rows
            if rows >= GATHER_ROWS:
                yield from packed_parts(pa.concat_arrays(gathered), keys)
                gathered, rows = [], 0
        if gathered:
            yield from packed_parts(pa.concat_arrays(gathered), keys)

    return parse
