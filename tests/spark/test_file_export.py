"""A file offer's export line carries the offer's fields as ``file`` (as m2mc-peer's message objects
do), and m2mc-thread-stats counts the offers and their bytes per thread and per group."""

from __future__ import annotations

import json
from pathlib import Path

from m2mc.app.analytics import job
from m2mc.app.peer import message_json
from m2mc.middleware.files import FileOffer
from m2mc.middleware.manager import export_log
from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.types import format_mid
from tests.testbed.peer_sim import PeerLan


def test_an_exported_offer_carries_its_file_fields_and_the_stats_count_it(spark, tmp_path):
    lan = PeerLan([MemoryStore(), MemoryStore()])
    ann, bob = lan.nodes
    gid = lan.create_group(ann, "lab")
    lan.join_all(gid)
    offer = FileOffer("results.csv", 1_234_567, "text/csv", "ab" * 32, 262_144, "cd" * 32)
    root = lan.send(ann, gid, "the results are in")
    lan.settle(3.0)
    shared = lan.run(bob, lambda core: core.offer_file(gid, offer.to_text(), root, lan.now, lan.now))
    lan.settle(3.0)
    lan.send(ann, gid, "thanks", shared)
    lan.settle(3.0)
    path = tmp_path / "bob.jsonl"
    assert bob.core is not None and export_log(bob.core, path, gid) == 3
    rows = {row["mid"]: row for row in map(json.loads, path.read_text().splitlines())}
    assert rows[format_mid(shared)]["file"] == {"name": "results.csv", "size": 1_234_567, "mime": "text/csv",
                                                "sha256": "ab" * 32, "chunk_size": 262_144, "root": "cd" * 32}
    (message,) = [m for m in bob.core.history(gid) if m.mid == shared]
    assert rows[format_mid(shared)]["file"] == message_json(message)["file"]
    assert all("file" not in row for mid, row in rows.items() if mid != format_mid(shared))

    results = job.analyse(spark, [str(path)], Path(tmp_path) / "out")
    assert [(r.files, r.file_bytes) for r in results.groups.collect()] == [(1, 1_234_567)]
    assert [(r.size, r.files, r.file_bytes) for r in results.threads.collect()] == [(3, 1, 1_234_567)]
    assert (results.summary["files"], results.summary["file_bytes"], results.summary["malformed_lines"]) == (1, 1_234_567, 0)
