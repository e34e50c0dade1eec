"""What each FTS5 option costs a stored message: the search index's choices, measured one at a time.

Each variant indexes the same texts on a scratch database in WAL mode, one transaction a
flush, and prints the CPU a message (median of --rounds) and, for chat texts, the index's
size against the text's.  The store itself uses the variant marked "kept"
(middleware/store_search.py's SEARCH_SCHEMA); resources/docs/benchmarks.md quotes a run.

    python -m m2mc.app.bench.search_options [--messages 100000] [--flush 90] [--texts lan|chat]
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from .search import texts, vocabulary

TOKENIZER = "tokenize = 'unicode61 remove_diacritics 2'"
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "no index": ("", []),
    "a copy of the text and 4 columns (s10-search)":
        (f"text, gid UNINDEXED, sender UNINDEXED, seqno UNINDEXED, sent_at UNINDEXED, {TOKENIZER}", []),
    "contentless": (f"text, content='', {TOKENIZER}", []),
    "contentless, columnsize=0": (f"text, content='', columnsize=0, {TOKENIZER}", []),
    "contentless, columnsize=0, automerge=16 (kept)": (f"text, content='', columnsize=0, {TOKENIZER}", ["automerge=16"]),
    "  ... pgsz=2000": (f"text, content='', columnsize=0, {TOKENIZER}", ["automerge=16", "pgsz=2000"]),
    "  ... pgsz=1000": (f"text, content='', columnsize=0, {TOKENIZER}", ["automerge=16", "pgsz=1000"]),
    "  ... detail=column": (f"text, content='', columnsize=0, detail=column, {TOKENIZER}", ["automerge=16"]),
    "  ... detail=none": (f"text, content='', columnsize=0, detail=none, {TOKENIZER}", ["automerge=16"]),
    "  ... by one statement over json_each": (f"text, content='', columnsize=0, {TOKENIZER}", ["automerge=16"]),
}


def cost(path: Path, name: str, columns: str, settings: list[str], batches: list[list[str]]) -> tuple[float, int]:
    """(CPU µs a message, the index's bytes) of indexing ``batches``, a transaction each."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    if columns:
        db.execute(f"CREATE VIRTUAL TABLE f USING fts5({columns})")
    for setting in settings:
        key, value = setting.split("=")
        db.execute(f"INSERT INTO f (f, rank) VALUES ('{key}', {value})")
    copy = "s10" in name
    started, order = time.process_time(), 1
    for batch in batches:
        db.execute("BEGIN")
        if "json_each" in name:
            db.execute("INSERT INTO f (rowid, text) SELECT ? + key, value FROM json_each(?)", (order, json.dumps(batch)))
        elif copy:
            db.executemany("INSERT INTO f (rowid, text, gid, sender, seqno, sent_at) VALUES (?, ?, ?, ?, ?, ?)",
                           [(order + i, text, "group-1", f"sender-{i}", i, 1_700_000_000_000 + i)
                            for i, text in enumerate(batch)])
        elif columns:
            db.executemany("INSERT INTO f (rowid, text) VALUES (?, ?)", [(order + i, t) for i, t in enumerate(batch)])
        order += len(batch)
        db.execute("COMMIT")
    cpu = time.process_time() - started
    size = db.execute("SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name LIKE 'f%'").fetchone()[0] if columns else 0
    db.close()
    return cpu / (order - 1) * 1e6, size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--flush", type=int, default=90, help="messages a transaction")
    parser.add_argument("--texts", choices=["lan", "chat"], default="lan",
                        help="the LAN benchmark's 3-word messages, or chat messages of 3-25 words")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="", help="only the variants whose name holds this")
    args = parser.parse_args(argv)
    if args.texts == "lan":
        all_texts = [f"fast {n} {1_764_200_000 + n / 1e4:.6f}" for n in range(args.messages)]
    else:
        source = texts(random.Random(31), vocabulary(random.Random(31)))
        all_texts = [next(source) for _ in range(args.messages)]
    text_bytes = sum(len(text.encode()) for text in all_texts)
    batches = [all_texts[i:i + args.flush] for i in range(0, len(all_texts), args.flush)]
    print(f"{args.messages:,} {args.texts} texts, {args.flush} a transaction; CPU a message, median of {args.rounds}")
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "index.db"
        for name, (columns, settings) in VARIANTS.items():
            if args.only not in name and name != "no index":
                continue
            runs = [cost(path, name, columns, settings, batches) for _ in range(args.rounds)]
            size = runs[-1][1]
            print(f"  {name:50s} {statistics.median(us for us, _ in runs):5.2f} µs"
                  + (f"   index {size / text_bytes:.2f}x the text" if size else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
