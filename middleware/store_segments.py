"""How the store packs a group's messages: a segment (one row of the segments table) and reading them back.

A segment holds the messages one flush delivered to a group, in delivery order, as msgpack
``[rows, proofs]``: each row is (sender, seqno, parent_sender, parent_seqno, name, text, sent_at,
received_at), and the proofs are the rows' signature proofs, each written against the one before it
(:func:`middleware.crypto.compact_proofs`).  Decoded, a row carries its proof as a ninth field.
The messages part (:mod:`middleware.store`), the schema's migrations (:mod:`middleware.store_schema`)
and the search index (:mod:`middleware.store_search`) all read segments through here.
"""

from __future__ import annotations

import sqlite3
from typing import Iterator

import msgpack

from . import crypto
from .rangeset import RangeSet

# A segment holds at most this many messages, so finding one message decodes little.
SEGMENT_MESSAGES = 256


def pack_segment(packer: msgpack.Packer, rows: list, proofs: list[bytes]) -> bytes:
    """A segment's body: ``rows`` of (sender, seqno, parent_sender, parent_seqno, name, text,
    sent_at, received_at) in delivery order and their signature proofs."""
    return packer.pack([rows, crypto.compact_proofs(proofs)])


def write_segment(db: sqlite3.Connection, packer: msgpack.Packer, gid: str, first_order: int, rows: list,
                  proofs: list[bytes]) -> None:
    """One segment of ``gid``: ``rows`` as :func:`pack_segment` takes them, the first delivered as
    ``first_order``, and a segment_runs row per run of consecutive seqnos of a sender in it."""
    cursor = db.execute(
        "INSERT INTO segments (gid, first_order, count, messages) VALUES (?, ?, ?, ?)",
        (gid, first_order, len(rows), pack_segment(packer, rows, proofs)),
    )
    segment = cursor.lastrowid
    seqnos: dict[str, list[int]] = {}
    for row in rows:
        seqnos.setdefault(row[0], []).append(row[1])
    runs = [(gid, sender, first, last, segment)
            for sender, values in seqnos.items() for first, last in RangeSet(values).ranges()]
    db.executemany("INSERT OR IGNORE INTO segment_runs VALUES (?, ?, ?, ?, ?)", runs)


def decode_segment(blob: bytes) -> list[tuple]:
    """A segment's rows, each with its proof as the last field."""
    rows, proofs = msgpack.unpackb(blob, raw=False)
    return [(*row, proof) for row, proof in zip(rows, crypto.expand_proofs(proofs))]


def segment_rows_at(blob: bytes, indexes: list[int], first_order: int) -> dict[int, tuple]:
    """Some rows of a segment (ascending ``indexes``), by delivery order, each with its proof: the
    rows between are skipped unbuilt, so a thread spread over many segments decodes little of each."""
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(blob)
    unpacker.read_array_header()
    count = unpacker.read_array_header()
    rows: dict[int, list] = {}
    position = 0
    for index in indexes:
        for _ in range(index - position):
            unpacker.skip()
        rows[index] = unpacker.unpack()
        position = index + 1
    for _ in range(count - position):
        unpacker.skip()
    proofs = crypto.expand_proofs(unpacker.unpack())
    return {first_order + index: (*row, proofs[index]) for index, row in rows.items()}


def read_segments(db: sqlite3.Connection, where: str, args: tuple) -> Iterator[tuple[int, str, int, list]]:
    """(segment, gid, first order, rows) of the segments matching ``where``, in delivery order."""
    for segment, gid, first_order, blob in db.execute(
        f"SELECT segment, gid, first_order, messages FROM segments WHERE {where} ORDER BY segment", args
    ):
        yield segment, gid, first_order, decode_segment(blob)
