"""Benchmark of the mentions index (middleware.store): what it adds to storing, and the query at 100,000 messages.

    python -m m2mc.app.bench.mentions        # 100,000 messages, one in 1,000 mentioning this peer

- Storing: wall time of ``Store.add_messages`` + commit for the messages without a
  mention and with one in 1,000 mentioning (the index's rows are written with them).
- Query: ``Store.mentions(pid, 50)``, the newest 50, averaged over 20 calls.
- Backfill: opening a store whose mentions table is missing (a data dir from before
  mentions), which indexes the messages it already holds.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ...middleware import crypto
from ...middleware.mentions import token
from ...middleware.store import Store
from ...middleware.types import ChatMessage

ME = "a" * 32


def fill(path: Path, count: int, every: int) -> float:
    author = crypto.Identity.generate()
    store = Store(path)
    started = time.perf_counter()
    store.add_messages(
        ChatMessage("g", (author.pid, i), None, "Author", f"message {i} " + (token(ME) if every and i % every == 0 else ""),
                    i, i, 0, b"s" * 66, author.public_key)
        for i in range(1, count + 1))
    store.commit()
    elapsed = time.perf_counter() - started
    store.close()
    return elapsed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        plain = fill(Path(folder) / "plain.db", args.messages, 0)
        path = Path(folder) / "mentions.db"
        mentioning = fill(path, args.messages, 1000)
        print(f"store {args.messages:,} messages: {plain:.2f} s without mentions, {mentioning:.2f} s with 1 in 1,000")
        store = Store(path)
        started = time.perf_counter()
        for _ in range(20):
            found = store.mentions(ME, 50)
        print(f"mentions(50): {(time.perf_counter() - started) / 20 * 1000:.1f} ms ({len(found)} found)")
        store._db.execute("DROP TABLE mentions")  # as a data dir from before mentions
        store.commit()
        store.close()
        started = time.perf_counter()
        store = Store(path)
        print(f"open with backfill: {time.perf_counter() - started:.2f} s")
        store.close()


if __name__ == "__main__":
    main()
