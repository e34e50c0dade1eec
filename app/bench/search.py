"""Search and paging benchmark: a store of many messages in 20 groups, built once, then measured.

Figures (issue 31's targets in brackets):
  * a history page of 50 from the largest group, at random places [< 20 ms];
  * search over all groups, p95 of 20 queries of common and rare words [< 100 ms];
  * the store's delivery throughput and CPU a message (flushes each committed) with and without
    the index, in one run, alternating, for chat messages and for the LAN benchmark's short ones
    (the target, indexing costs < 10 % of delivery, is measured on the whole peer by
    ``bench.lan --index-cost``: the LAN benchmark's receivers spend 11-25 µs a message);
  * the index's size on disk against the text's [< 1.5x].

The store is kept at --store (built when absent, reused after), so a second run measures at once.

    python -m m2mc.app.bench.search [--messages 1000000] [--store /tmp/m2mc-search-bench.db] [--merging]

--merging adds a third way of storing to the alternation: the index merged as every commit goes
(FTS5's automerge, the store's way before merging waited for idle commits).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from pathlib import Path

from ...middleware import store_search
from ...middleware.store import Store
from ...middleware.types import ChatMessage

GROUPS = 20
LARGEST_SHARE = 0.2  # 200,000 of 1,000,000 in the largest group, the rest spread evenly
FLUSH = 90  # messages per delivery flush, as a busy group's
SENDERS = 50


def vocabulary(rng: random.Random, size: int = 20_000) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyzéèàüöñ"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(2, 10))) for _ in range(size)]


def texts(rng: random.Random, words: list[str]):
    """Zipf-like talk: a few words very common, most rare; 3 to 25 words a message."""
    weights = [1 / (rank + 1) for rank in range(len(words))]
    while True:
        batch = rng.choices(words, weights, k=50_000)
        position = 0
        while position < len(batch) - 25:
            count = rng.randint(3, 25)
            yield " ".join(batch[position:position + count])
            position += count


def messages(count: int, rng: random.Random, words: list[str], first_seqno: int = 1, tag: str = ""):
    """``count`` messages in flushes of FLUSH, each flush to one group."""
    source = texts(rng, words)
    now = int(time.time() * 1000)
    seqnos: dict[tuple[str, str], int] = {}
    made = 0
    while made < count:
        group = 0 if rng.random() < LARGEST_SHARE else rng.randrange(1, GROUPS)
        gid = f"group-{group}{tag}"
        flush = []
        for _ in range(min(FLUSH, count - made)):
            sender = f"sender-{rng.randrange(SENDERS)}"
            seqno = seqnos[(gid, sender)] = seqnos.get((gid, sender), first_seqno - 1) + 1
            flush.append(ChatMessage(gid, (sender, seqno), None, sender, next(source), now + made, now + made,
                                     0, b"\x01" * 64, b"\x02" * 32))
            made += 1
        yield flush


def build(path: Path, count: int) -> None:
    rng = random.Random(31)
    words = vocabulary(rng)
    store = Store(path)
    started = time.perf_counter()
    for done, flush in enumerate(messages(count, rng, words), 1):
        store.add_messages(flush)
        store.commit()
        if done % 1000 == 0:
            print(f"  built {done * FLUSH:,} messages in {time.perf_counter() - started:.0f} s", flush=True)
    store.close()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def delivery_cost(path: Path, flushes: list[list[ChatMessage]], index: str) -> tuple[float, float]:
    """(messages a second, CPU µs a message) of storing fresh flushes, each committed, with the
    index (``on``), without it (``off``) or with it merged as every commit goes (``merged``).  CPU
    is this process's (the checkpointer thread's included): on a busy machine it moves much less
    than the wall clock."""
    path.unlink(missing_ok=True)
    store = Store(path)
    store.commit()  # as a peer's first commits (joining, presence), which index nothing: the index is found merged
    if index == "off":
        store.indexing = False  # what delivery cost before the index
    backlog = store_search.MERGE_BACKLOG
    if index == "merged":
        store_search.MERGE_BACKLOG = 1
    started, cpu = time.perf_counter(), time.process_time()
    for flush in flushes:
        store.add_messages(flush)
        store.commit()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    store_search.MERGE_BACKLOG = backlog
    store.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    count = sum(len(f) for f in flushes)
    return count / elapsed, cpu / count * 1e6


def short_flushes(count: int, flush: int) -> list[list[ChatMessage]]:
    """The LAN benchmark's messages ("fast <n> <send time>", three words), in flushes of ``flush``."""
    now = int(time.time() * 1000)
    made = [ChatMessage("group-lan", ("sender-0", n), None, "sender", f"fast {n} {now / 1000 + n / 1e4:.6f}",
                        now + n, now + n, 0, b"\x01" * 64, b"\x02" * 32) for n in range(1, count + 1)]
    return [made[i:i + flush] for i in range(0, count, flush)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--store", type=Path, default=None, help="default /tmp/m2mc-search-bench-<messages>.db")
    parser.add_argument("--delivery", type=int, default=50_000, help="messages delivered in each throughput round")
    parser.add_argument("--merging", action="store_true", help="also store with the index merged as it goes")
    args = parser.parse_args(argv)
    path = args.store or Path(f"/tmp/m2mc-search-bench-{args.messages}.db")
    if not path.exists():
        print(f"building {args.messages:,} messages in {GROUPS} groups at {path} (once)", flush=True)
        build(path, args.messages)
    store = Store(path)
    db = store._db
    sizes = dict(db.execute("SELECT gid, SUM(count) FROM segments GROUP BY gid"))
    largest = max(sizes, key=lambda gid: sizes[gid])
    print(f"store: {sum(sizes.values()):,} messages, largest group {sizes[largest]:,}")

    rng = random.Random(7)
    orders = [row[0] for row in db.execute("SELECT first_order FROM segments WHERE gid = ?", (largest,))]
    page_times = []
    for _ in range(100):
        before = rng.choice(orders) + 1
        started = time.perf_counter()
        page = store.history_page(largest, before=before, limit=50)
        page_times.append((time.perf_counter() - started) * 1000)
        assert page
    started = time.perf_counter()
    store.history_page(largest, limit=50)
    last_page = (time.perf_counter() - started) * 1000
    print(f"history page of 50 (largest group, 100 random places): median {statistics.median(page_times):.2f} ms, "
          f"p95 {percentile(page_times, 0.95):.2f} ms; the last page {last_page:.2f} ms")

    # common words are the vocabulary's first (Zipf), rare ones from its tail
    words = vocabulary(random.Random(31))
    queries = words[:10] + words[-10:]
    for by_time in (False, True):
        times = []
        for query in queries:
            started = time.perf_counter()
            store.search(f'"{query}"', limit=20, by_time=by_time)
            times.append((time.perf_counter() - started) * 1000)
        common, rare = times[:10], times[10:]
        print(f"search over all groups, {'time' if by_time else 'relevance'} order, 20 queries: "
              f"p95 {percentile(times, 0.95):.1f} ms, max {max(times):.1f} ms "
              f"(common words median {statistics.median(common):.1f} ms, rare {statistics.median(rare):.1f} ms)")
    started = time.perf_counter()
    store.search(f'"{words[0][:2]}"*', limit=20)
    print(f"prefix search {words[0][:2]}*: {(time.perf_counter() - started) * 1000:.1f} ms")

    text_bytes = sum(len(row[5].encode()) for _, _, _, rows in store._segments("1", ()) for row in rows)
    stat = dict(db.execute("SELECT name, SUM(pgsize) FROM dbstat WHERE name LIKE 'message_search%' GROUP BY name"))
    index_bytes = sum(stat.values())
    segments_bytes = db.execute("SELECT SUM(pgsize) FROM dbstat WHERE name = 'segments'").fetchone()[0]
    print(f"text {text_bytes / 2**20:.1f} MiB; index (all its tables, no copy of the text) "
          f"{index_bytes / 2**20:.1f} MiB = {index_bytes / text_bytes:.2f}x the text; "
          f"segments (messages as stored) {segments_bytes / 2**20:.1f} MiB")
    store.close()

    scratch = path.with_name(path.stem + "-delivery.db")
    chat = list(messages(args.delivery, random.Random(11), words, tag="-fresh"))
    for label, flushes in ((f"chat messages (3-25 words), flushes of {FLUSH}", chat),
                           ("the LAN benchmark's messages (3 words), flushes of 90", short_flushes(args.delivery, 90)),
                           ("the LAN benchmark's messages (3 words), flushes of 20", short_flushes(args.delivery, 20))):
        costs: dict[str, list[tuple[float, float]]] = {"off": [], "on": [], **({"merged": []} if args.merging else {})}
        for _ in range(3):  # alternating, so the machine's noise falls on all
            for index in costs:
                costs[index].append(delivery_cost(scratch, flushes, index))
        rate = {index: max(rate for rate, _ in runs) for index, runs in costs.items()}
        cpu = {index: statistics.median(cpu for _, cpu in runs) for index, runs in costs.items()}
        print(f"storing {args.delivery:,} {label}, each committed: best of 3 {rate['off']:,.0f}/s without the "
              f"index, {rate['on']:,.0f}/s with it ({(1 - rate['on'] / rate['off']) * 100:.1f} % fewer); "
              f"CPU a message (median of 3) {cpu['off']:.1f} µs without, {cpu['on']:.1f} µs with "
              f"(+{cpu['on'] - cpu['off']:.1f} µs)"
              + (f"; merged as it goes {cpu['merged']:.1f} µs (+{cpu['merged'] - cpu['off']:.1f})" if args.merging else ""),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
