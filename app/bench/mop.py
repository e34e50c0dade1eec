"""Benchmark of the S_b orderer: throughput in order and shuffled, memory, and the paper's OSMT.

    python -m m2mc.app.bench.mop            # 1,000,000 messages, 10,000 threads, 50 senders
    python -m m2mc.app.bench.mop --quick    # 100,000 messages

The shuffled trace is decoded from msgpack in arrival order, as a receiver decodes
datagrams, so its objects lie in memory in the order they arrive.  Shuffling a list
of objects made in send order instead scatters every access over the heap, a cost
no receiver has; that figure is printed too, for comparison.

Both orderers run: the compiled ``SbOrderer`` the middleware uses, and the
pure-Python reference ``PySbOrderer``.

The baseline is a paper-faithful transcription of the thesis's data structures
(per-sender Ordering Lists searched linearly, and an Out-of-Sequence Message
Table scanned from its start by getRow), run on 20,000 messages for the ratio.
"""

from __future__ import annotations

import argparse
import gc
import random
import sys
import time
import tracemalloc

import msgpack

from ...middleware.mop import COMPILED, PySbOrderer, SbOrderer


def make_workload(messages: int, threads: int, senders: int, seed: int = 1) -> list[tuple]:
    """Messages in send order: each joins a random thread and answers a recent message in it."""
    rng = random.Random(seed)
    next_seqno = [0] * senders
    thread_messages: list[list] = [[] for _ in range(threads)]
    workload = []
    for _ in range(messages):
        sender = rng.randrange(senders)
        next_seqno[sender] += 1
        mid = (f"peer{sender:02d}", next_seqno[sender])
        thread = thread_messages[rng.randrange(threads)]
        # Replies favour recent messages, as chat replies do.
        parent = thread[-1 - min(int(rng.expovariate(0.5)), len(thread) - 1)] if thread else None
        thread.append(mid)
        workload.append((mid, parent))
    return workload


class PaperOrderer:
    """The thesis's MOP data structures, transcribed literally (linear scans)."""

    def __init__(self) -> None:
        self.ordering_lists: dict[str, list[int]] = {}  # OL_i[j]: seqnos delivered from j
        self.osmt: list[list] = []  # rows [mid_c, mid_p, data]

    def _in_ol(self, mid) -> bool:
        return mid[1] in self.ordering_lists.get(mid[0], ())

    def _get_row(self, mid_y):
        for index, row in enumerate(self.osmt):
            if row[1] == mid_y:
                return index
        return None

    def receive(self, mid, parent, data=None) -> list:
        if self._in_ol(mid) or any(row[0] == mid for row in self.osmt):
            return []
        if parent is not None and not self._in_ol(parent):
            self.osmt.append([mid, parent, data])
            return []
        delivered: list[tuple] = []
        self._deliver(mid, parent, data, delivered)
        return delivered

    def _deliver(self, mid, parent, data, delivered) -> None:
        self.ordering_lists.setdefault(mid[0], []).append(mid[1])
        delivered.append((mid, parent, data))
        while (index := self._get_row(mid)) is not None:
            child, _, child_data = self.osmt.pop(index)
            self._deliver(child, mid, child_data, delivered)


def as_received(messages: list[tuple]) -> tuple[tuple, ...]:
    """The messages as a receiver's decoder makes them: fresh objects, in arrival order."""
    return msgpack.unpackb(msgpack.packb(messages), use_list=False)


def run(orderer, workload) -> tuple[float, int]:
    receive = orderer.receive
    # The input trace is the benchmark's, not the orderer's: keep the cyclic GC from
    # rescanning its million tuples, so what is timed is the orderer's own cost.
    gc.collect()
    gc.freeze()
    start = time.perf_counter()
    delivered = 0
    for mid, parent in workload:
        delivered += len(receive(mid, parent, None))
    return time.perf_counter() - start, delivered


def peak_memory(workload, **kwargs) -> int:
    gc.collect()
    tracemalloc.start()
    orderer = SbOrderer(**kwargs)
    for mid, parent in workload:
        orderer.receive(mid, parent, None)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def delivered_state_bytes(messages: int) -> int:
    gc.collect()
    tracemalloc.start()
    orderer = SbOrderer()
    for seqno in range(1, messages + 1):
        orderer.receive(("one-sender", seqno), None, None)
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return current


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 messages instead of 1,000,000")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    total = 100_000 if args.quick else 1_000_000
    threads, senders, baseline_n = 10_000, 50, 20_000
    print(f"workload: {total:,} messages, {threads:,} threads, {senders} senders (seed {args.seed})")
    workload = make_workload(total, threads, senders, args.seed)
    shuffled = workload[:]
    random.Random(args.seed).shuffle(shuffled)

    received = as_received(shuffled)
    implementations = [("SbOrderer", SbOrderer)] + ([("PySbOrderer", PySbOrderer)] if COMPILED else [])
    print(f"SbOrderer is the {'compiled core (middleware/_sborder.c)' if COMPILED else 'pure-Python reference'}")
    for name, orderer_class in implementations:
        for label, order in (("in order", workload), ("shuffled", received), ("shuffled, objects in send order", shuffled)):
            seconds, delivered = run(orderer_class(max_held=total), order)
            assert delivered == total, f"{name} {label}: delivered {delivered} of {total}"
            print(f"{name:11s} {label:31s} {total / seconds:>12,.0f} msg/s  ({seconds:.2f} s)")

    peak = peak_memory(received, max_held=total)
    print(f"SbOrderer peak memory, shuffled (held store included): {peak / 2**20:.1f} MiB")
    state = delivered_state_bytes(total)
    print(f"delivered-id state for {total:,} contiguous seqnos: {state / 1024:.1f} KiB")

    small = make_workload(baseline_n, threads // 50, senders, args.seed)
    small_shuffled = small[:]
    random.Random(args.seed).shuffle(small_shuffled)
    for label, order in (("in order", small), ("shuffled", small_shuffled)):
        paper_s, paper_n = run(PaperOrderer(), order)
        ours_s, ours_n = run(SbOrderer(), order)
        assert paper_n == ours_n == baseline_n
        print(
            f"{baseline_n:,} msgs {label:9s}: paper OSMT {baseline_n / paper_s:>10,.0f} msg/s, "
            f"SbOrderer {baseline_n / ours_s:>10,.0f} msg/s, ratio {paper_s / ours_s:,.0f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
