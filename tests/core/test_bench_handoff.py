"""The benchmarks' hand-off files: a reader that polls for one never reads it partly written."""

from __future__ import annotations

import threading

from m2mc.app.bench.handoff import publish

GID = "qeqmc735x2awx6jllbozn4afja"


def test_a_reader_polling_for_published_files_reads_each_whole(tmp_path):
    # As bench.lan's receivers do: read a file the moment it exists.  Written with
    # Path.write_text, about 7 % of these reads found the file still empty.
    paths = [tmp_path / f"gid-{i}" for i in range(1_000)]
    read: list[str] = []
    done = threading.Event()

    def reader() -> None:
        for path in paths:
            while not path.exists():
                if done.is_set() and not path.exists():
                    return
            read.append(path.read_text())

    thread = threading.Thread(target=reader)
    thread.start()
    for path in paths:
        publish(path, GID)
    done.set()
    thread.join(10)
    assert len(read) == len(paths)
    assert [text for text in read if text != GID] == []
