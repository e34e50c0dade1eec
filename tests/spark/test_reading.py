"""Reading the exports: local files are read by the Python workers in byte-range splits, URLs by
Spark's text reader; both give every line once, and equal outputs and malformed counts, on a
generated log and on an adversarial one. The shuffle keys land where Spark's hash puts them."""

from __future__ import annotations

import gzip
import io
import json
import random
from pathlib import Path

import pytest

from m2mc.app.analytics import gen_logs, job, reading

G = "c" * 32
TIME = "2026-02-01T10:00:00.000Z"


def _record(mid, parent=None, gid=G, **fields):
    record = {"gid": gid, "group_desc": "adversaries", "mid": mid, "parent": parent, "sender": "s" * 32,
              "sender_name": "eve", "text": "hi", "sent_at": TIME, "received_at": TIME}
    record.update(fields)
    return record


def _compact(record) -> str:
    return json.dumps(record, separators=(",", ":"))


def adversarial_lines() -> list[str]:
    """Lines where Spark's JSON reader and the strict parser could disagree, each kind named."""
    good = _compact(_record("a:1"))
    lines = [
        # wrong types: Spark writes a number, boolean, array or object into a string field as its text
        _compact(_record("t:1", gid=["a"])), _compact(_record(12345)), _compact(_record("t:3", parent=7)),
        _compact(_record("t:4", parent=False)), _compact(_record("t:5", sender={"pid": "x"})),
        _compact(_record("t:6", text=5.5)), _compact(_record("t:7", sent_at=1767225600)), _compact(_record(-0.0)),
        _compact(_record("t:9", edited="3")), _compact(_record("t:10", edited=3.0)), _compact(_record("t:11", deleted=1)),
        _compact(_record("t:12", reactions="{}")), _compact(_record("t:13", reactions=5)), _compact(_record("t:14", reactions=[])),
        _compact(_record("t:15", group_desc=None, sender_name=None, text=None)),  # nulls are allowed
        # duplicate keys: the strict parser refuses a repeated export field, Spark keeps the last
        good[:-1] + ',"gid":"' + "d" * 32 + '"}', good[:-1] + ',"m\\u0069d":"dup:1"}',
        _compact(_record("dup:2"))[:-1] + ',"x":1,"x":2}',  # a repeated field the export does not have
        # huge numbers, NaN and Infinity, in fields the export does not have and in `edited`
        _compact(_record("n:1"))[:-1] + ',"x":1e999}', _compact(_record("n:2"))[:-1] + ',"x":123456789012345678901234567890}',
        _compact(_record("n:3"))[:-1] + ',"edited":99999999999999999999}', _compact(_record("n:4"))[:-1] + ',"x":NaN}',
        _compact(_record("n:5"))[:-1] + ',"x":-Infinity}', _compact(_record("n:6"))[:-1] + ',"edited":NaN}',
        # single quotes, comments, trailing garbage, two objects, leading and trailing white space
        _compact(_record("q:1")).replace('"hi"', "'hi'"), _compact(_record("q:2")).replace('"text"', "'text'"),
        _compact(_record("q:3")) + " x", _compact(_record("q:4")) + " {}", _compact(_record("q:5")) + " // c",
        _compact(_record("q:6")) + _compact(_record("q:7")), "  " + _compact(_record("q:8")) + "\t ",
        # escapes: non-ASCII raw and escaped, a lone surrogate, an escaped slash, control characters
        json.dumps(_record("e:1", text="café ☕ 日本"), ensure_ascii=False), json.dumps(_record("e:2", text="café ☕")),
        _compact(_record("e:3")).replace('"hi"', '"\\ud800"'), _compact(_record("e:4")).replace('"hi"', '"a\\/b"'),
        _compact(_record("e:5", text="tab\there\nnew \x7f")), _compact(_record("e:6")).replace('"hi"', '"a\x01b"'),
        _compact(_record("e:7", text='quote " and \\ and ":" and ","')), _compact(_record('g\\"id:1')),
        # a byte-order mark, not JSON at all, truncated, blank
        "\ufeff" + _compact(_record("b:1")), "not json", "[1, 2]", "null", '"s"', "5", "{}", good[:-20], "", "   ", "\t",
        # the app's own layout: spaced, ensure_ascii off, the operations' fields
        json.dumps({**_record("app:1", text="ça"), "sent_at_clamped": False, "edited": 2, "deleted": False,
                    "reactions": {"👍": ["p", "q"], "x": "no list"}, "pinned": True}, ensure_ascii=False),
        json.dumps({**_record("app:2"), "edited": 0, "deleted": True, "reactions": {}}),
        # missing or empty keys and unreadable times (malformed after parsing), an empty parent (a root)
        _compact({k: v for k, v in _record("m:1").items() if k != "mid"}), _compact(_record("m:2", sender="")),
        _compact(_record("m:3", sent_at="yesterday")), _compact(_record("m:4", parent="")), _compact(_record("m:5", gid="")),
        # cycles, a self-reply, an orphan
        _compact(_record("c:1", parent="c:2")), _compact(_record("c:2", parent="c:1")), _compact(_record("c:3", parent="c:3")),
        _compact(_record("o:1", parent="lost:1")),
        # file offers: an object with a whole size >= 0, else malformed
        _compact(_record("f:1", file={"name": "a.png", "size": 5, "mime": "image/png"})), _compact(_record("f:2", file=None)),
        _compact(_record("f:3", file="a.png")), _compact(_record("f:4", file={"size": -1})), _compact(_record("f:5", file={})),
        _compact(_record("f:6", file={"size": 2.5})), good,
    ]
    return lines


def generated_exports(tmp_path: Path, messages: int = 3000) -> list[str]:
    """A generated log split into two exports that share a third of their lines (copies), some of
    the copies received later and some with another text (conflicts), with the adversarial lines."""
    text = io.StringIO()
    gen_logs.write_jsonl(gen_logs.generate(messages, seed=7, file_rate=0.05), text)
    lines = text.getvalue().splitlines()
    rng = random.Random(7)
    first, second = lines[: 2 * len(lines) // 3], lines[len(lines) // 3:]
    changed = []
    for line in second[: len(second) // 4]:
        record = json.loads(line)
        if rng.random() < 0.5:
            record["received_at"] = "2026-03-01T00:00:00.000Z"
        else:
            record["text"] = "another text"
        changed.append(json.dumps(record) if rng.random() < 0.5 else _compact(record))
    second = changed + second[len(second) // 4:]
    # A gid written as the app writes it, escaped, or not first: one group all the same.
    record = json.loads(first[0])
    spaced = json.dumps(record)
    escaped = _compact(record).replace(record["gid"][:1], "\\u%04x" % ord(record["gid"][0]), 1)
    reordered = _compact(dict(reversed(list(record.items()))))
    bad = adversarial_lines()
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text("\ufeff" + "\n".join(first[:500] + bad + first[500:] + [spaced, escaped, reordered]) + "\n", encoding="utf-8")
    b.write_text("\n".join(second + bad[::-1]) + "\n\n", encoding="utf-8")
    return [str(a), str(b)]


def outputs(spark, paths: list[str], out: Path) -> dict:
    """Everything a run writes or returns, in an order-free form."""
    results = job.analyse(spark, paths, out, report=False)

    def rows(frame):
        return sorted(repr(tuple(row)) for row in frame.collect())

    return {
        "summary": results.summary,
        "histograms": {plot: sorted(points, key=repr) for plot, points in results.histograms.items()},
        "over_time": sorted(results.over_time, key=repr),
        "top_threads": [sorted(row.items(), key=repr) for row in results.top_threads],
        **{name: rows(getattr(results, name)) for name in ("messages", "threads", "groups", "participants")},
    }


@pytest.mark.parametrize("kind", ["generated", "adversarial"])
def test_files_read_in_splits_by_the_workers_equal_spark_s_text_reader(spark, tmp_path, kind, monkeypatch):
    paths = generated_exports(tmp_path) if kind == "generated" else [str(tmp_path / "bad.jsonl")]
    if kind == "adversarial":
        Path(paths[0]).write_text("\n".join(adversarial_lines() * 2) + "\n", encoding="utf-8")
    gz = tmp_path / "copy.jsonl.gz"
    gz.write_bytes(gzip.compress(Path(paths[0]).read_bytes()))
    paths.append(str(gz))
    monkeypatch.setattr(reading, "MIN_SPLIT_BYTES", 4096)  # many splits, cut anywhere in a line
    by_workers = outputs(spark, paths, tmp_path / "workers")
    by_spark = outputs(spark, [Path(path).as_uri() for path in paths], tmp_path / "spark")
    for name in by_workers:
        assert by_workers[name] == by_spark[name], name
    summary = by_workers["summary"]
    assert summary["input_lines"] == sum(len(gzip.open(path).read().split(b"\n")) - 1 if path.endswith(".gz")
                                         else len(Path(path).read_bytes().split(b"\n")) - 1 for path in paths)
    assert summary["malformed_lines"] > 70
    assert summary["conflicting_copies"] > 0 or kind == "adversarial"


def test_splits_give_every_line_once_whatever_the_split_size(tmp_path, monkeypatch):
    rng = random.Random(1)
    monkeypatch.setattr(reading, "CHUNK_BYTES", 5)
    for trial in range(150):
        lines = ["".join(rng.choice("ab{}\r x\u00e9") for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(0, 30))]
        data = (reading.UTF8_BOM if rng.random() < 0.2 else b"") + ("\n".join(lines) + rng.choice(["", "\n", "\n\n"])).encode()
        expected = data.removeprefix(reading.UTF8_BOM).split(b"\n")
        if expected and expected[-1] == b"":
            expected.pop()
        plain, packed = tmp_path / "f.jsonl", tmp_path / "f.jsonl.gz"
        plain.write_bytes(data)
        packed.write_bytes(gzip.compress(data))
        for path in (plain, packed):
            for split_bytes in (1, 2, 3, 7, 50, 1000):
                got = []
                for split in reading.splits_of([str(path)], [path.stat().st_size], split_bytes):
                    for chunk in reading.split_chunks(split):
                        got += [line.removesuffix(b"\n") for line in reading.lines_array(chunk).cast("binary").to_pylist()]
                assert got == expected, (trial, path.name, split_bytes, data)


@pytest.mark.parametrize("partitions", [1, 3, 16, 200])
def test_each_partition_key_lands_in_its_own_partition(spark, partitions):
    from pyspark.sql import functions as F

    keys = reading.partition_keys(partitions)
    frame = spark.createDataFrame([(key,) for key in keys], "key int").repartition(partitions, "key")
    landed = dict(frame.select("key", F.spark_partition_id().alias("p")).collect())
    assert [landed[key] for key in keys] == list(range(partitions))
