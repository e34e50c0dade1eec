"""GUI benchmark of scroll-back: open the largest group of a big SQLite store in the app, and a long thread.

A store of --messages messages in 20 groups is built first (the largest holds a fifth: 200,000 of
1,000,000), as a peer that has been in them for long keeps them; the app then runs over it with the
in-memory backend (no sockets) and the real SQLite store.  Figures (issue 31's targets in brackets):
  * open: from selecting the group to its first page laid out and painted at its end [< 1 s];
  * RSS growth of the process across the open [< 150 MB];
  * scroll back: a page of older history loaded above the reader (each of 5), and the model's size after;
  * thread: a thread of --thread messages, spread through the whole history, opened from the
    Threads pane's store query to its rows laid out and painted [< 200 ms].

    python -m m2mc.app.bench.gui_open [--messages 1000000] [--thread 1000] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import psutil  # noqa: E402

from ...middleware.store import Store  # noqa: E402
from ...middleware.types import ChatMessage, Member  # noqa: E402
from ...ui.controllers.sessions import HISTORY_PAGE  # noqa: E402
from ...ui.main_window import MainWindow  # noqa: E402
from ...ui.memory_backend import MemoryBackend, sim_member  # noqa: E402
from ...ui.resources import apply_theme  # noqa: E402
from ..qt_app import application  # noqa: E402
from .gui import WORDS  # noqa: E402

GROUPS = 20
LARGEST_SHARE = 0.2
FLUSH = 90  # messages a delivery flush stores, as a busy group's


def group_history(gid: str, count: int, senders: list[Member], rng: random.Random, thread: int,
                  now: int) -> tuple[list[ChatMessage], ChatMessage]:
    """Threaded talk as app.bench.gui makes it, with one thread of ``thread`` messages spread evenly through it."""
    seqnos = {m.pid: 0 for m in senders}
    out: list[ChatMessage] = []
    ordinary: list[ChatMessage] = []  # what the other messages answer: the long thread grows by its own only
    long_thread: list[ChatMessage] = []
    every = max(1, count // thread)
    for i in range(count):
        sender = rng.choice(senders)
        seqnos[sender.pid] += 1
        if i % every == every // 2 and len(long_thread) < thread:
            parent = rng.choice(long_thread[-20:]).mid if long_thread else None
        else:
            parent = rng.choice(ordinary[-500:]).mid if ordinary and rng.random() < 0.7 else None
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 30)))
        message = ChatMessage(gid, (sender.pid, seqnos[sender.pid]), parent, sender.name, text, now + i, now + i)
        if i % every == every // 2 and len(long_thread) < thread:
            long_thread.append(message)
        else:
            ordinary.append(message)
        out.append(message)
    return out, long_thread[0]


def rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="in all groups; the largest holds a fifth")
    parser.add_argument("--thread", type=int, default=1000, help="messages in the long thread")
    parser.add_argument("--runs", type=int, default=3, help="times the thread is opened")
    args = parser.parse_args(argv)

    app = application()
    apply_theme(app)
    rng = random.Random(7)
    senders = [sim_member(name) for name in ["Ann", "Bob", "Cat", "Dev", "Eve"]]
    with tempfile.TemporaryDirectory(prefix="m2mc-gui-open-") as tmp:
        path = Path(tmp) / "m2mc.db"
        store = Store(path)
        backend = MemoryBackend(name="Bench", store=lambda _identity: store)
        largest = int(args.messages * LARGEST_SHARE)
        gids = [backend.manager.inject_group(f"Group {n}", members=tuple(senders), joined=True, notify=False).gid
                for n in range(GROUPS)]
        built = time.perf_counter()
        now = int(time.time() * 1000)
        history, root = group_history(gids[0], largest, senders, rng, args.thread, now)
        others = [group_history(gid, (args.messages - largest) // (GROUPS - 1), senders, rng, 1, now)[0]
                  for gid in gids[1:]]
        # Stored in flushes, the groups' talk interleaved, as a peer that has been in them for long holds it;
        # signing and checking a million messages on six in-memory peers would take an hour, and the figure
        # is the app's.
        streams = [history, *others]
        positions = [0] * len(streams)
        stored_orders: dict[str, tuple[int, int]] = {}
        while any(p < len(s) for p, s in zip(positions, streams)):
            for index, stream in enumerate(streams):
                if positions[index] >= len(stream):
                    continue
                take = FLUSH * (GROUPS - 1) if index == 0 else FLUSH
                flush = stream[positions[index]:positions[index] + take]
                positions[index] += len(flush)
                done = store.add_messages(flush)
                if done:
                    first, _ = stored_orders.get(done[0].gid, (done[0].order, 0))
                    stored_orders[done[0].gid] = (first, done[-1].order)
            store.commit()
        for gid, (first, last) in stored_orders.items():  # read here before: it opens at its end
            backend.manager.mark_read(gid, [(first, last)])
        built = time.perf_counter() - built
        # The threads tables follow the store when asked (middleware/store.py): a peer whose app has been
        # open has them up to date; this is what catching up on all of it costs (an old data dir's first open).
        caught_up = time.perf_counter()
        store.catch_up_threads()
        store.commit()
        caught_up = time.perf_counter() - caught_up
        print(f"store: {args.messages:,} messages in {GROUPS} groups ({largest:,} in the largest) built in "
              f"{built:.0f} s, {sum(p.stat().st_size for p in path.parent.iterdir()) / 2**20:,.0f} MiB; its threads "
              f"tables caught up on all of it in {caught_up:.1f} s")

        window = MainWindow(backend)
        window.resize(1100, 700)
        window.show()
        app.processEvents()
        before = rss_mb()
        started = time.perf_counter()
        session = window.session_controller.session(gids[0], load_history=True)
        window.select_group(gids[0])
        while window.current is not session or not session.loaded or not session.opened:
            app.processEvents()
        window.repaint()
        opened = time.perf_counter() - started
        grown = rss_mb() - before
        print(f"open: the {largest:,}-message group at its end, {len(session.tree):,} messages in the model "
              f"(a page is {HISTORY_PAGE}), laid out and painted in {1000 * opened:.0f} ms (target < 1,000 ms); "
              f"RSS grew {grown:.1f} MB (target < 150 MB)")

        pages = []
        for _ in range(5):
            held = len(session.tree)
            started = time.perf_counter()
            window.conversation.tree_view.scrollToTop()
            while len(session.tree) == held or session.loading_older:
                app.processEvents()
            window.repaint()
            pages.append(1000 * (time.perf_counter() - started))
        print(f"scroll back: 5 older pages, each loaded above the reader and painted in "
              f"{', '.join(f'{t:.0f}' for t in pages)} ms; {len(session.tree):,} messages in the model")

        query = []
        for _ in range(args.runs):
            started = time.perf_counter()
            thread = backend.manager.thread(gids[0], root.mid)
            query.append(1000 * (time.perf_counter() - started))
        shown = []
        for _ in range(args.runs):
            window.conversation.close_thread()
            app.processEvents()
            started = time.perf_counter()
            window.conversation.open_thread(root.mid)
            while session.thread is None or session.thread.root.message.mid != root.mid:
                app.processEvents()
            window.repaint()
            shown.append(1000 * (time.perf_counter() - started))
            assert len(session.thread.tree) == len(thread)
        print(f"thread: {len(thread):,} messages over {thread[-1].order - thread[0].order:,} deliveries; the store's "
              f"query {', '.join(f'{t:.0f}' for t in query)} ms; opened, laid out and painted in "
              f"{', '.join(f'{t:.0f}' for t in shown)} ms (median {statistics.median(shown):.0f}, target < 200 ms)")
        print(f"load average {os.getloadavg()[0]:.1f}")
        window.close()
        store.close()
    return 0 if opened < 1 and grown < 150 and statistics.median(shown) < 200 else 1


if __name__ == "__main__":
    sys.exit(main())
