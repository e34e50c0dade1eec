"""m2mc-thread-stats reads exported direct messages as conversations of two: both sides' exports
of one conversation name it alike (``dm:<pid>:<pid>``), so their copies merge."""

from __future__ import annotations

from pathlib import Path

from m2mc.app.analytics import job
from m2mc.middleware.manager import export_log
from m2mc.middleware.memory_store import MemoryStore
from tests.testbed.peer_sim import PeerLan


def test_a_direct_conversation_exported_by_both_sides_is_one_group_of_two(spark, tmp_path):
    lan = PeerLan([MemoryStore(), MemoryStore()], unicast=True)
    ann, bob = lan.nodes
    lan.join_all(lan.create_group(ann, "lunch"))
    first = lan.run(ann, lambda core: core.send_direct(bob.pid, "build broken?", None, lan.now))
    lan.settle(3.0)
    lan.run(bob, lambda core: core.send_direct(ann.pid, "yes", first, lan.now))
    lan.run(ann, lambda core: core.send_direct(bob.pid, "thanks", None, lan.now))
    lan.settle(3.0)
    paths = []
    for node in (ann, bob):
        path = tmp_path / f"{node.name}.jsonl"
        assert node.core is not None and export_log(node.core, path, direct=True) == 3
        paths.append(str(path))
    results = job.analyse(spark, paths, Path(tmp_path) / "out")
    conversation = "dm:" + ":".join(sorted((ann.pid, bob.pid)))
    (row,) = results.groups.filter(results.groups.gid == conversation).collect()
    assert (row.messages, row.threads, row.participants) == (3, 2, 2)
    assert results.summary["malformed_lines"] == 0
