"""Plain-Python reference for m2mc-thread-stats: roots, depths and tree measures in one process.

It is the oracle of the Spark job's randomised tests and the single-process baseline of
its benchmark, so it favours obviousness over speed: a dict walk up the parent links
with memoisation, nothing clever.
"""

from __future__ import annotations

import gzip
import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a message sits: its thread root and depth, or invalid (no root reachable)."""

    root: tuple[str, str] | None
    depth: int | None


def read_messages(paths, file_sizes: dict[tuple[str, str], int] | None = None) -> tuple[dict[tuple[str, str], str | None], int]:
    """(gid, mid) -> parent mid, merged over the exports; also the number of lines read.
    With `file_sizes`, fills it with (gid, mid) -> size of the file the message offers.

    Lines that are not JSON objects with gid, mid and sender are skipped (the Spark job
    counts them as malformed; the reference only needs the graph).
    """
    parents: dict[tuple[str, str], str | None] = {}
    lines = 0
    for path in paths:
        opener = gzip.open if str(path).endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as stream:
            for line in stream:
                lines += 1
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(record, dict) or not record.get("gid") or not record.get("mid") or not record.get("sender"):
                    continue
                parents[(record["gid"], record["mid"])] = record.get("parent") or None
                if file_sizes is not None and isinstance(record.get("file"), dict):
                    file_sizes[(record["gid"], record["mid"])] = record["file"].get("size", 0)
    return parents, lines


def place_all(parents: dict[tuple[str, str], str | None]) -> dict[tuple[str, str], Placement]:
    """Root and depth of every message; self-parents, cycles and their descendants are invalid."""
    placed: dict[tuple[str, str], Placement] = {}
    for start in parents:
        if start in placed:
            continue
        path: list[tuple[str, str]] = []
        on_path: set[tuple[str, str]] = set()
        node = start
        base: Placement | None
        while True:
            if node in placed:
                base = placed[node]
                break
            if node in on_path:
                base = Placement(None, None)  # a cycle: nothing on this path reaches a root
                break
            path.append(node)
            on_path.add(node)
            parent_mid = parents[node]
            parent_key = (node[0], parent_mid)
            if parent_mid is None or parent_key not in parents:
                base = None  # `node` is a root (possibly an orphan)
                break
            node = parent_key
        if base is None:
            root = path[-1]
            placed[root] = Placement(root, 0)
            base = placed[root]
            path.pop()
        for offset, member in enumerate(reversed(path), start=1):
            placed[member] = (Placement(None, None) if base.root is None or base.depth is None
                              else Placement(base.root, base.depth + offset))
    return placed


def thread_sizes(placed: dict[tuple[str, str], Placement]) -> Counter:
    return Counter(p.root for p in placed.values() if p.root is not None)


def tree_measures(parents, placed) -> dict[tuple[str, str], dict]:
    """Per thread root: size, depth, leaves, max_width, h_index, wiener_index (mean pair distance)."""
    members: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for key, where in placed.items():
        if where.root is not None:
            members[where.root].append(key)
    result = {}
    for root, nodes in members.items():
        children: Counter[tuple[str, str]] = Counter()
        for key in nodes:
            if placed[key].depth:
                children[(key[0], parents[key])] += 1
        subtree = Counter({key: 1 for key in nodes})
        for key in sorted(nodes, key=lambda k: -placed[k].depth):
            if placed[key].depth:
                subtree[(key[0], parents[key])] += subtree[key]
        widths = Counter(placed[key].depth for key in nodes)
        n = len(nodes)
        # Each edge above v is on the path of s(v) * (n - s(v)) pairs.
        total_distance = sum(subtree[k] * (n - subtree[k]) for k in nodes if placed[k].depth)
        result[root] = {
            "size": n,
            "depth": max(widths),
            "leaves": sum(1 for k in nodes if children[k] == 0),
            "max_width": max(widths.values()),
            "h_index": max(h for h, w in widths.items() if w >= h),
            "wiener_index": total_distance / (n * (n - 1) / 2) if n > 1 else None,
            "root_reply_fraction": widths[1] / (n - 1) if n > 1 else None,
        }
    return result


def summarise(paths) -> dict:
    """Roots, depths, thread sizes and offered files of the exports: the benchmark's baseline figures."""
    file_sizes: dict[tuple[str, str], int] = {}
    parents, lines = read_messages(paths, file_sizes)
    placed = place_all(parents)
    sizes = thread_sizes(placed)
    depths = [p.depth for p in placed.values() if p.depth is not None]
    return {
        "lines": lines,
        "messages": len(parents),
        "threads": len(sizes),
        "invalid_messages": sum(1 for p in placed.values() if p.root is None),
        "max_depth": max(depths, default=None),
        "max_thread_size": max(sizes.values(), default=None),
        "median_thread_size": statistics.median(sizes.values()) if sizes else None,
        "files": len(file_sizes),
        "file_bytes": sum(file_sizes.values()),
    }


def main(argv: list[str] | None = None) -> int:
    import sys

    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    print(json.dumps(summarise(paths), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
