"""Tests of the m2mc-thread-stats Spark job: hand-built logs with known answers, a random
forest against the plain-Python reference, and one end-to-end run of the command."""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import random
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from m2mc.app.analytics import gen_logs, job, kernels, thread_report, thread_stats, thread_stats_reference

BASE = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
G1 = "a" * 32
G2 = "b" * 32
ALICE, BOB, CAROL = "1" * 32, "2" * 32, "3" * 32
NAMES = {ALICE: "alice", BOB: "bob", CAROL: "carol"}


def iso(seconds: float) -> str:
    return (BASE + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def line(gid, mid, parent, sender, sent, received=None, desc="group"):
    return json.dumps(
        {
            "gid": gid,
            "group_desc": desc,
            "mid": mid,
            "parent": parent,
            "sender": sender,
            "sender_name": NAMES.get(sender, "someone"),
            "text": "hello",
            "sent_at": iso(sent),
            "received_at": iso(sent + 0.5 if received is None else received),
        }
    )


def write_export(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def analyse(spark, paths):
    return job.analyse(spark, paths, Path(paths[0]).parent / "out")


def placements(results):
    return results.messages.select("gid", "mid", "root_mid", "depth", "invalid", "parent_missing")


# ---------------------------------------------------------------- known answers


def test_chain_gets_depths_and_path_measures(spark, tmp_path):
    # a <- b <- c <- d, alternating alice and bob, 10 s, 20 s, 40 s apart.
    path = write_export(
        tmp_path,
        "chain.jsonl",
        [
            line(G1, "a:1", None, ALICE, 0),
            line(G1, "b:1", "a:1", BOB, 10),
            line(G1, "a:2", "b:1", ALICE, 30),
            line(G1, "b:2", "a:2", BOB, 70),
        ],
    )
    results = analyse(spark, [path])
    assertDataFrameEqual(
        placements(results),
        [
            Row(gid=G1, mid="a:1", root_mid="a:1", depth=0, invalid=False, parent_missing=False),
            Row(gid=G1, mid="b:1", root_mid="a:1", depth=1, invalid=False, parent_missing=False),
            Row(gid=G1, mid="a:2", root_mid="a:1", depth=2, invalid=False, parent_missing=False),
            Row(gid=G1, mid="b:2", root_mid="a:1", depth=3, invalid=False, parent_missing=False),
        ],
    )
    thread = results.threads.select(
        "root_mid", "size", "depth", "max_width", "leaves", "participants", "duration_s",
        "median_reply_latency_s", "root_reply_fraction", "wiener_index", "h_index", "orphan",
    )
    # Path of 4: pair distances 1+1+1+2+2+3 = 10 over 6 pairs.
    assertDataFrameEqual(
        thread,
        [Row(root_mid="a:1", size=4, depth=3, max_width=1, leaves=1, participants=2, duration_s=70.0,
             median_reply_latency_s=20.0, root_reply_fraction=1 / 3, wiener_index=10 / 6, h_index=1, orphan=False)],
    )
    participants = results.participants.select("sender", "messages", "threads", "threads_started", "replies_sent", "replies_received", "median_reply_latency_s", "reentry")
    assertDataFrameEqual(
        participants,
        [
            Row(sender=ALICE, messages=2, threads=1, threads_started=1, replies_sent=1, replies_received=2, median_reply_latency_s=20.0, reentry=1),
            Row(sender=BOB, messages=2, threads=1, threads_started=0, replies_sent=2, replies_received=1, median_reply_latency_s=25.0, reentry=1),
        ],
    )
    assert results.summary["reciprocity"] == 1.0
    assert results.summary["pointer_jumping_rounds"] == 2


def test_star_is_one_level_wide(spark, tmp_path):
    lines = [line(G1, "r:1", None, ALICE, 0)] + [line(G1, f"s:{i}", "r:1", BOB if i % 2 else CAROL, 5 * i) for i in range(1, 5)]
    results = analyse(spark, [write_export(tmp_path, "star.jsonl", lines)])
    thread = results.threads.select("size", "depth", "max_width", "leaves", "participants", "median_reply_latency_s", "root_reply_fraction", "wiener_index", "h_index")
    # Star of 5: 4 pairs at distance 1, 6 at distance 2 -> 16 / 10.
    assertDataFrameEqual(
        thread,
        [Row(size=5, depth=1, max_width=4, leaves=4, participants=3, median_reply_latency_s=12.5, root_reply_fraction=1.0, wiener_index=1.6, h_index=1)],
    )
    # Bob and Carol replied to Alice, never the other way: no reciprocated pair.
    assert results.summary["reciprocity"] == 0.0
    assert results.summary["sender_pairs"] == 2


def test_orphan_starts_its_own_flagged_thread(spark, tmp_path):
    lines = [
        line(G1, "o:1", "lost:7", ALICE, 0),  # its parent is not in any export
        line(G1, "o:2", "o:1", BOB, 3),
        line(G1, "r:1", None, CAROL, 1),
    ]
    results = analyse(spark, [write_export(tmp_path, "orphan.jsonl", lines)])
    assertDataFrameEqual(
        placements(results),
        [
            Row(gid=G1, mid="o:1", root_mid="o:1", depth=0, invalid=False, parent_missing=True),
            Row(gid=G1, mid="o:2", root_mid="o:1", depth=1, invalid=False, parent_missing=False),
            Row(gid=G1, mid="r:1", root_mid="r:1", depth=0, invalid=False, parent_missing=False),
        ],
    )
    assertDataFrameEqual(
        results.threads.select("root_mid", "size", "orphan", "median_reply_latency_s"),
        [Row(root_mid="o:1", size=2, orphan=True, median_reply_latency_s=3.0), Row(root_mid="r:1", size=1, orphan=False, median_reply_latency_s=None)],
    )
    summary = results.summary
    assert (summary["orphan_messages"], summary["threads"], summary["invalid_messages"]) == (1, 2, 0)
    # An orphan is still a reply its sender wrote.
    alice = results.participants.filter(F.col("sender") == ALICE).select("replies_sent", "threads_started").first()
    assert (alice["replies_sent"], alice["threads_started"]) == (1, 1)


def test_parent_in_another_group_only_is_missing(spark, tmp_path):
    # Each mid occurs in one group, so parents are found by mid alone: the group must still match.
    lines = [line(G1, "a:1", None, ALICE, 0), line(G2, "b:1", "a:1", BOB, 10), line(G2, "b:2", "b:1", ALICE, 20)]
    results = analyse(spark, [write_export(tmp_path, "cross.jsonl", lines)])
    assertDataFrameEqual(
        placements(results),
        [
            Row(gid=G1, mid="a:1", root_mid="a:1", depth=0, invalid=False, parent_missing=False),
            Row(gid=G2, mid="b:1", root_mid="b:1", depth=0, invalid=False, parent_missing=True),
            Row(gid=G2, mid="b:2", root_mid="b:1", depth=1, invalid=False, parent_missing=False),
        ],
    )


def test_cycle_and_self_reply_are_invalid_and_terminate(spark, tmp_path):
    lines = [
        line(G1, "x:1", "y:1", ALICE, 0),  # x <-> y: a cycle
        line(G1, "y:1", "x:1", BOB, 1),
        line(G1, "z:1", "x:1", CAROL, 2),  # hangs below the cycle
        line(G1, "s:1", "s:1", ALICE, 3),  # replies to itself
        line(G1, "t:1", "s:1", BOB, 4),
        line(G1, "ok:1", None, CAROL, 5),
    ]
    results = analyse(spark, [write_export(tmp_path, "cycle.jsonl", lines)])
    assertDataFrameEqual(
        placements(results),
        [
            Row(gid=G1, mid="x:1", root_mid=None, depth=None, invalid=True, parent_missing=False),
            Row(gid=G1, mid="y:1", root_mid=None, depth=None, invalid=True, parent_missing=False),
            Row(gid=G1, mid="z:1", root_mid=None, depth=None, invalid=True, parent_missing=False),
            Row(gid=G1, mid="s:1", root_mid=None, depth=None, invalid=True, parent_missing=False),
            Row(gid=G1, mid="t:1", root_mid=None, depth=None, invalid=True, parent_missing=False),
            Row(gid=G1, mid="ok:1", root_mid="ok:1", depth=0, invalid=False, parent_missing=False),
        ],
    )
    assert results.summary["invalid_messages"] == 5
    assert results.summary["threads"] == 1
    assert results.summary["pointer_jumping_rounds"] <= math.ceil(math.log2(6)) + 2


def test_duplicates_across_exports_and_groups(spark, tmp_path):
    shared = [line(G1, "a:1", None, ALICE, 0, received=0.2), line(G1, "b:1", "a:1", BOB, 60, received=60.1)]
    first = write_export(tmp_path, "peer1.jsonl", shared + [line(G1, "c:1", "b:1", CAROL, 90)])
    # The second peer received a:1 later and also saw the same mid in another group.
    second = write_export(
        tmp_path,
        "peer2.jsonl",
        [line(G1, "a:1", None, ALICE, 0, received=5.0), shared[1], line(G2, "a:1", None, ALICE, 100, desc="other")],
    )
    results = analyse(spark, [first, second])
    summary = results.summary
    assert (summary["input_lines"], summary["messages"], summary["duplicates_removed"], summary["groups"]) == (6, 4, 2, 2)
    kept = results.messages.filter((F.col("gid") == G1) & (F.col("mid") == "a:1")).select("received_at", "copies").first()
    assert kept["received_at"] == (BASE + dt.timedelta(seconds=0.2)).replace(tzinfo=None) or kept["received_at"].timestamp() == (BASE + dt.timedelta(seconds=0.2)).timestamp()
    assert kept["copies"] == 2
    groups = results.groups.select("gid", "group_desc", "messages", "threads", "participants", "mean_thread_size", "median_thread_size", "max_thread_size", "max_depth")
    assertDataFrameEqual(
        groups,
        [
            Row(gid=G1, group_desc="group", messages=3, threads=1, participants=3, mean_thread_size=3.0, median_thread_size=3.0, max_thread_size=3, max_depth=2),
            Row(gid=G2, group_desc="other", messages=1, threads=1, participants=1, mean_thread_size=1.0, median_thread_size=1.0, max_thread_size=1, max_depth=0),
        ],
    )


def test_a_gid_written_any_way_meets_its_group_in_one_task(spark, tmp_path):
    # The shuffle key comes from the line's opening text when an export wrote it plainly,
    # else from Spark's JSON path function. A reply whose line spells its gid otherwise
    # must still reach the task holding its parent, or it would count as an orphan.
    def spelled(record_line, text):
        return record_line.replace(f'"gid": "{G1}"', text, 1)

    chain = [
        line(G1, "k:0", None, ALICE, 0),  # the app's spacing: {"gid": "...
        spelled(line(G1, "k:1", "k:0", BOB, 1), f'"gid":"{G1}"'),  # compact
        spelled(line(G1, "k:2", "k:1", CAROL, 2), '"gid": "\\u0061' + G1[1:] + '"'),  # an escape
        spelled(line(G1, "k:3", "k:2", ALICE, 3), f' "gid" :  "{G1}"'),  # other spacing
        json.dumps({"mid": "k:4", **json.loads(line(G1, "k:4", "k:3", BOB, 4))}),  # gid not first
        spelled(line(G1, "k:5", "k:4", CAROL, 5), '"gid": "' + G1[:3] + '\\"' + '"'),  # a quote in the gid: another group
    ]
    many = [line(G2 if i % 2 else G1[:-1] + str(i % 10), f"x:{i}", None, ALICE, i) for i in range(40)]  # other keys in the partitions
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "64")
    try:
        results = analyse(spark, [write_export(tmp_path, "spelled.jsonl", chain + many)])
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    rows = {r["mid"]: r for r in results.messages.filter(F.col("mid").startswith("k:")).collect()}
    assert [rows[f"k:{i}"]["depth"] for i in range(5)] == [0, 1, 2, 3, 4]
    assert {rows[f"k:{i}"]["gid"] for i in range(5)} == {G1} and rows["k:5"]["gid"] == G1[:3] + '"'
    assert results.summary["orphan_messages"] == 1  # only k:5, in a group of its own


def test_malformed_lines_are_counted_and_skipped(spark, tmp_path):
    bad_time = json.loads(line(G1, "q:1", None, ALICE, 0))
    bad_time["sent_at"] = "yesterday"
    no_mid = json.loads(line(G1, "q:2", None, ALICE, 0))
    del no_mid["mid"]
    empty_sender = json.loads(line(G1, "q:3", None, ALICE, 0))
    empty_sender["sender"] = ""
    truncated = line(G1, "q:4", None, ALICE, 0)[:-20]
    lines = [
        "this is not json", json.dumps(bad_time), json.dumps(no_mid), "[1, 2]", json.dumps(empty_sender), truncated,
        line("", "q:5", None, ALICE, 0),
        line(G1, "good:1", None, BOB, 0),
        line(G1, "good:2", "", BOB, 1),  # an empty parent: a thread root
    ]
    results = analyse(spark, [write_export(tmp_path, "bad.jsonl", lines)])
    summary = results.summary
    assert (summary["malformed_lines"], summary["messages"], summary["duplicates_removed"]) == (7, 2, 0)
    assert (summary["threads"], summary["orphan_messages"]) == (2, 0)


def test_reciprocity_per_group(spark, tmp_path):
    lines = [
        line(G1, "a:1", None, ALICE, 0),
        line(G1, "b:1", "a:1", BOB, 1),  # bob -> alice
        line(G1, "a:2", "b:1", ALICE, 2),  # alice -> bob: reciprocated
        line(G1, "c:1", "a:1", CAROL, 3),  # carol -> alice: not reciprocated
        line(G2, "a:1", None, ALICE, 0),
        line(G2, "b:1", "a:1", BOB, 1),  # bob -> alice in G2 only
    ]
    results = analyse(spark, [write_export(tmp_path, "recip.jsonl", lines)])
    assertDataFrameEqual(results.groups.select("gid", "reciprocity"), [Row(gid=G1, reciprocity=2 / 3), Row(gid=G2, reciprocity=0.0)])
    assert results.summary["reciprocity"] == pytest.approx(2 / 4)


def test_wrong_json_types_are_malformed(spark, tmp_path):
    def with_field(key, **fields):
        record = json.loads(line(G1, key, None, ALICE, 0))
        record.update(fields)
        return json.dumps(record)

    lines = [
        with_field("t:1", gid=["a"]),
        with_field("t:2", mid=12345),
        with_field("t:3", parent=7),
        with_field("t:4", parent=False),
        with_field("t:5", sender={"pid": ALICE}),
        with_field("t:6", text=5),
        with_field("t:7", sent_at=1767225600),
        with_field("t:8", group_desc=None, sender_name=None, text=None),  # nulls are allowed
        with_field("t:9", extra=[1, {"x": 2}], gid2=3),  # fields the export does not have are ignored
        "null",  # a first line of `null` crashes pyarrow's reader if it gets there
        line(G1, "t:10", None, BOB, 1) + " " + line(G1, "t:11", None, BOB, 2),  # two objects on one line
        '"just a string"',
    ]
    results = analyse(spark, [write_export(tmp_path, "types.jsonl", ["null"] + lines)])
    summary = results.summary
    assert (summary["input_lines"], summary["malformed_lines"], summary["messages"]) == (13, 11, 2)
    assert sorted(r["mid"] for r in results.messages.select("mid").collect()) == ["t:8", "t:9"]
    assert results.groups.count() == 1  # no group named '["a"]'
    assert summary["orphan_messages"] == 0  # parents 7 and false made no fake orphans


def test_line_classes_and_reaction_counts():
    # parse_lines classifies lines by their first byte instead of running regular expressions
    # on every line (same answers), and counts the top-level reactions only in the lines
    # where Arrow's reader found a reactions object.
    import pyarrow as pa
    import pyarrow.compute as pc

    lines = ["skipped by the slice", "", "   \t", "\t", ' {"a": 1}', "{", "null", "x", " x", None, "{}"]
    block = pa.array(lines, pa.string()).slice(1)  # starts inside its buffers, as Spark's batches may
    blank, candidate = kernels._classify_lines(block)
    assert blank.tolist() == pc.fill_null(pc.match_substring_regex(block, r"^\s*$"), False).to_pylist()
    assert candidate.tolist() == pc.fill_null(pc.match_substring_regex(block, r"^\s*\{"), False).to_pylist()
    assert (int(blank.sum()), int(candidate.sum())) == (3, 3)

    counted = {
        '{"reactions": {"x": ["p", "q"], "y": ["p"]}}': 3,
        '{"text": "\\"reactions\\": {\\"z\\": [1]}", "reactions": {"y": ["p"]}}': 1,  # the key in a string is no key
        '{"reactions":{}}': 0,
        '{"reactions": { }}': 0,
        '{"text": "reactions"}': 0,
        '{"reactions": {"x": "p"}}': 0,  # not lists of reactors
        '{"reactions": null}': 0,
        '{"reactions": {"}": ["p"]}}': 1,  # a brace in an emoji key
        '{"meta": {"reactions": {"z": ["q"]}}, "reactions": {}}': 0,  # only the top-level key counts
        '{"meta": {"reactions": {"z": ["q"]}}, "reactions": {"y": ["p", "q"]}}': 2,
    }
    wrong = ['{"reactions": 5}', '{"reactions": "x"}', '{"reactions": []}']
    table, blank_lines, malformed = kernels.parse_lines(pa.array([*counted, *wrong]))
    assert table.column("reaction_count").to_pylist() == list(counted.values())
    assert (blank_lines, malformed) == (0, len(wrong))


def test_malformed_lines_in_a_big_block_are_found_by_halving_it(monkeypatch):
    # A block the strict parser refuses is halved down to small blocks parsed line by line:
    # the lines around each malformed one are not all parsed one at a time.
    import pyarrow as pa
    import pyarrow.json as pj

    n = kernels.PARSE_BLOCK + 5000
    bad_at = {0: "not json", 1000: '{"gid": 12345, "mid": "m", "sender": "s"}', kernels.PARSE_BLOCK - 1: '{"a": 1}{"b": 2}',
              kernels.PARSE_BLOCK: '["a"]', n - 1: '{"gid": "g", "mid": "m", "sender": "s", "text": ["a"]}'}
    lines = [bad_at.get(i) or line(G1, f"m{i}", None, ALICE, i) for i in range(n)]
    calls = []
    read_json = pj.read_json
    monkeypatch.setattr(pj, "read_json", lambda *args, **kwargs: calls.append(1) or read_json(*args, **kwargs))
    table, blank, malformed, rows = kernels.parse_lines(pa.array(lines), with_rows=True)
    assert (blank, malformed) == (0, len(bad_at))
    good = [i for i in range(n) if i not in bad_at]
    assert rows.tolist() == good
    assert table.column("mid").to_pylist() == [f"m{i}" for i in good]
    # Per malformed line about 2 log2(PARSE_BLOCK) halves and LINE_BY_LINE single lines; a
    # block of 4,096 lines parsed line by line took 4,096 calls per malformed line.
    assert len(calls) < len(bad_at) * (2 * 17 + kernels.LINE_BY_LINE) + 2


def test_copies_differing_only_in_text_are_conflicts(spark, tmp_path):
    def with_text(mid, text, received):
        record = json.loads(line(G1, mid, None, ALICE, 0, received=received))
        record["text"] = text
        return json.dumps(record)

    lines = [
        with_text("c:1", "hello", 1), with_text("c:1", "hello, edited", 2),  # text differs: a conflict
        with_text("c:2", "same", 1), with_text("c:2", "same", 5),  # only received_at differs: no conflict
    ]
    summary = analyse(spark, [write_export(tmp_path, "text.jsonl", lines)]).summary
    assert (summary["messages"], summary["duplicates_removed"], summary["conflicting_copies"]) == (2, 2, 1)


def test_definitions_on_a_hand_computed_log(spark, tmp_path):
    lines = [
        line(G1, "a:1", None, ALICE, 0),
        line(G1, "b:1", "a:1", BOB, 10),  # bob -> alice
        line(G1, "a:2", "b:1", ALICE, 20),  # alice -> bob: reciprocates
        line(G1, "a:3", "a:2", ALICE, 30),  # alice -> alice: a self-pair, not counted
        line(G1, "c:1", "a:1", CAROL, 40),  # carol -> alice: not reciprocated
        line(G1, "x:1", "y:1", BOB, 50),  # bob <-> carol in a cycle: invalid, not counted
        line(G1, "y:1", "x:1", CAROL, 60),
        "",
        "   \t",
        line(G2, "b:9", None, BOB, 0),
        line(G2, "a:9", "b:9", ALICE, 5),  # alice -> bob in G2; bob -> alice happened in G1 only
    ]
    results = analyse(spark, [write_export(tmp_path, "defs.jsonl", lines)])
    summary = results.summary
    # Blank lines are input lines, counted apart, neither malformed nor messages.
    assert (summary["input_lines"], summary["blank_lines"], summary["malformed_lines"], summary["messages"]) == (11, 2, 0, 9)
    assert summary["duplicates_removed"] == 0
    # Reciprocity is per group: G1 has pairs bob->alice, alice->bob, carol->alice (2 reciprocated),
    # G2 alice->bob (none); the summary divides the sums: 2 / 4.
    assertDataFrameEqual(results.groups.select("gid", "reciprocity"), [Row(gid=G1, reciprocity=2 / 3), Row(gid=G2, reciprocity=0.0)])
    assert (summary["sender_pairs"], summary["reciprocity"]) == (4, 0.5)
    # mean_depth: the mean of the threads' depths (3 and 1), not of the messages' depths (8 / 7).
    assert (summary["threads"], summary["mean_depth"], summary["invalid_messages"]) == (2, 2.0, 2)


def test_summary_read_by_spark_equals_the_driver_reading_its_own_files(spark, tmp_path, monkeypatch):
    # Output on hdfs:// or s3a:// has no local path: Spark reads the small summary files there.
    lines = [line(G1, "a:1", None, ALICE, 0), line(G1, "b:1", "a:1", BOB, 10), line(G2, "c:1", None, CAROL, 5), "", "{"]
    path = write_export(tmp_path, "small.jsonl", lines)
    local = job.analyse(spark, [path], tmp_path / "local")
    spark_reads = []
    original = job._read_small

    def through_spark(spark_, location, uri, spec, schema):
        monkeypatch.setattr(location, "local_path", lambda _uri: None)
        table = original(spark_, location, uri, spec, schema)
        spark_reads.append(table.num_rows)
        return table

    monkeypatch.setattr(job, "_read_small", through_spark)
    remote = job.analyse(spark, [path], tmp_path / "remote")
    assert spark_reads and spark_reads[0] > 0
    assert remote.summary == local.summary and remote.histograms == local.histograms
    assert remote.group_names == local.group_names


def test_rerun_replaces_the_old_output_and_a_failed_run_marks_nothing(spark, tmp_path, monkeypatch):
    first = write_export(tmp_path, "first.jsonl", [line(G1, "a:1", None, ALICE, 0), line(G1, "b:1", "a:1", BOB, 10)])
    out = tmp_path / "out"
    assert thread_stats.main([first, "--out", str(out), "--format", "csv"]) == 0
    assert (out / "report.html").exists() and (out / "messages.csv" / "_SUCCESS").exists()

    # A second run that fails after the heavy stage leaves the first run's output as it was.
    second = write_export(tmp_path, "second.jsonl", [line(G2, "c:1", None, CAROL, 0)])

    def broken(*args, **kwargs):
        raise RuntimeError("injected failure")

    monkeypatch.setattr(job, "participants_and_latency_median", broken)
    with pytest.raises(RuntimeError, match="injected"):
        thread_stats.main([second, "--out", str(out), "--no-report"])
    assert not [p for p in out.iterdir() if p.name.startswith("_")]  # no staging left behind
    assert json.loads((out / "summary.json").read_text())["messages"] == 2
    assert spark.read.parquet(str(out / "messages")).count() == 2
    monkeypatch.undo()

    # A rerun without the report and CSV replaces all of it: no stale report, plots or CSV.
    assert thread_stats.main([second, "--out", f"file://{out}", "--no-report"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["groups", "messages", "participants", "summary.json", "threads"]
    for table in ("groups", "messages", "participants", "threads"):
        assert (out / table / "_SUCCESS").exists()
    assert spark.read.parquet(str(out / "messages")).select("gid").collect() == [Row(gid=G2)]


# ---------------------------------------------------------------- deep chain and random forests


def test_deep_chain_resolves_in_logarithmic_rounds(spark, tmp_path):
    depth = 3000
    lines = [line(G1, "m:0", None, ALICE, 0)] + [line(G1, f"m:{i}", f"m:{i - 1}", BOB if i % 2 else ALICE, i) for i in range(1, depth + 1)]
    results = analyse(spark, [write_export(tmp_path, "deep.jsonl", lines)])
    assert results.summary["max_depth"] == depth
    assert results.summary["pointer_jumping_rounds"] <= math.ceil(math.log2(depth)) + 1
    n = depth + 1
    expected_wiener = (n + 1) / 3  # mean distance on a path of n nodes
    assert results.threads.first()["wiener_index"] == pytest.approx(expected_wiener)


def random_forest_lines(rng: random.Random, n: int) -> list[str]:
    lines, mids = [], {G1: [], G2: []}
    for i in range(n):
        gid = G1 if rng.random() < 0.7 else G2
        mid = f"{rng.choice([ALICE, BOB, CAROL])[:4]}:{i}"
        known = mids[gid]
        roll = rng.random()
        if not known or roll < 0.15:
            parent = None
        elif roll < 0.2:
            parent = f"lost:{i}"  # an orphan
        elif roll < 0.5:
            parent = known[-1]  # keeps chains going
        else:
            parent = rng.choice(known)
        known.append(mid)
        lines.append(line(gid, mid, parent, rng.choice([ALICE, BOB, CAROL]), rng.uniform(0, 1000)))
    # A two-cycle with a tail, and duplicates of random lines.
    lines += [line(G2, "cy:1", "cy:2", ALICE, 1), line(G2, "cy:2", "cy:1", BOB, 2), line(G2, "cy:3", "cy:2", BOB, 3)]
    lines += rng.sample(lines, 25)
    rng.shuffle(lines)
    return lines


def test_random_forest_matches_reference(spark, tmp_path):
    rng = random.Random(20260301)
    path = write_export(tmp_path, "forest.jsonl", random_forest_lines(rng, 600))
    parents, _ = thread_stats_reference.read_messages([path])
    placed = thread_stats_reference.place_all(parents)
    expected_messages = [
        Row(gid=g, mid=m, root_mid=None if p.root is None else p.root[1], depth=p.depth) for (g, m), p in placed.items()
    ]
    results = analyse(spark, [path])
    assertDataFrameEqual(results.messages.select("gid", "mid", "root_mid", "depth"), expected_messages)

    measures = thread_stats_reference.tree_measures(parents, placed)
    expected_threads = [
        Row(gid=root[0], root_mid=root[1], size=m["size"], depth=m["depth"], leaves=m["leaves"], max_width=m["max_width"],
            h_index=m["h_index"], wiener_index=m["wiener_index"], root_reply_fraction=m["root_reply_fraction"])
        for root, m in measures.items()
    ]
    actual_threads = results.threads.select("gid", "root_mid", "size", "depth", "leaves", "max_width", "h_index", "wiener_index", "root_reply_fraction")
    assertDataFrameEqual(actual_threads, expected_threads, rtol=1e-9)
    assert results.summary["invalid_messages"] == 3

    # The report's histograms count every valid message once, whatever the tasks' time bins.
    plots = thread_report.collect_plot_data(results)
    valid = results.summary["messages"] - results.summary["invalid_messages"]
    assert sum(count for _, _, count in plots["over_time"]) == valid
    assert sum(count for _, count in plots["per_depth"]) == valid
    assert sum(count for _, count in plots["size"]) == results.summary["threads"]


def test_over_time_plot_keeps_the_busiest_groups_and_pools_the_rest(spark, tmp_path):
    # Ten groups in one task, group i with i + 1 messages: the eight busiest get their own line.
    lines = [
        line(f"{i:032x}", f"m{i}:{k}", None, ALICE, 3600 * k, desc=f"group {i}") for i in range(10) for k in range(i + 1)
    ]
    results = analyse(spark, [write_export(tmp_path, "groups.jsonl", lines)])
    totals: dict[str, int] = {}
    for series, _, count in thread_report.collect_plot_data(results)["over_time"]:
        totals[series] = totals.get(series, 0) + count
    assert totals == {**{f"group {i}": i + 1 for i in range(2, 10)}, "other groups": 1 + 2}


# ---------------------------------------------------------------- the command end to end


def test_command_writes_tables_summary_and_report(spark, tmp_path):
    export = tmp_path / "gen.jsonl"
    assert gen_logs.main(["--messages", "3000", "--out", str(export), "--seed", "7"]) == 0
    out = tmp_path / "out"
    # The same export twice: two peers that saw everything.
    assert thread_stats.main([str(export), str(tmp_path), "--out", str(out), "--format", "csv"]) == 0

    summary = json.loads((out / "summary.json").read_text())
    assert summary["input_lines"] == 6000
    assert summary["messages"] == 3000
    assert summary["duplicates_removed"] == 3000
    reference = thread_stats_reference.summarise([export])
    for key in ("threads", "max_depth", "max_thread_size", "median_thread_size", "invalid_messages"):
        assert summary[key] == reference[key], key

    messages = spark.read.parquet(str(out / "messages"))
    threads = spark.read.parquet(str(out / "threads"))
    groups = spark.read.parquet(str(out / "groups"))
    participants = spark.read.parquet(str(out / "participants"))
    assert messages.count() == summary["messages"]
    assert threads.count() == summary["threads"]
    assert groups.count() == summary["groups"]
    assert participants.count() == summary["participants"]
    assert threads.agg(F.sum("size")).first()[0] == summary["messages"] - summary["invalid_messages"]
    assert summary["reply_latency_median_s"] == messages.agg(F.median("reply_latency_s")).first()[0]
    assert summary["median_thread_size"] == threads.agg(F.median("size")).first()[0]
    assert groups.agg(F.sum("messages")).first()[0] == summary["messages"]
    assert messages.filter(F.col("parent_missing")).count() == summary["orphan_messages"] > 0
    assert threads.filter(F.col("orphan")).count() == summary["orphan_messages"]
    csv_threads = spark.read.option("header", True).csv(str(out / "threads.csv"))
    assert csv_threads.count() == summary["threads"]

    report = (out / "report.html").read_text()
    for png in ("ccdf_threads.png", "messages_per_depth.png", "reply_latency.png", "messages_over_time.png"):
        assert f'src="{png}"' in report
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_worker_daemon_puts_the_installed_pyspark_ahead_of_spark_s_zips():
    # Spark's zips hold no compiled modules: each worker compiled ~100 of them from source.
    from m2mc.app.analytics.worker_daemon import installed_first

    lib = "/venv/site-packages/pyspark/python/lib"
    users = "/home/me/pyspark-jobs/deps.zip"  # a user's --py-files in a folder so named stays where it is
    path = ["/tmp/job", users, f"{lib}/pyspark.zip", f"{lib}/py4j-0.10.9.9-src.zip", "/py/lib/python311.zip",
            "/venv/site-packages"]
    assert installed_first(path) == ["/tmp/job", users, "/py/lib/python311.zip", "/venv/site-packages",
                                     f"{lib}/pyspark.zip", f"{lib}/py4j-0.10.9.9-src.zip"]


def test_command_reports_missing_input(tmp_path, capsys):
    assert thread_stats.main([str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "out")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_spark_submit_script_under_a_python_without_m2mc_says_which_interpreter_to_use(tmp_path):
    """Plain spark-submit runs the system python3, where M2MC is not installed: the script says so."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "app" / "analytics" / "submit.py"
    bare = subprocess.run([sys.executable, "-I", "-S", str(script), "in.jsonl", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert bare.returncode == 2, bare.stderr
    assert "PYSPARK_PYTHON=" in bare.stderr and "cannot import M2MC" in bare.stderr
    assert not (tmp_path / "out").exists()
    helped = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True, cwd=tmp_path,
                            timeout=120)
    assert helped.returncode == 0 and "--out" in helped.stdout, helped.stderr


# ---------------------------------------------------------------- the numpy core, without Spark


def test_pointer_jumping_on_a_chain_of_depth_100000():
    import numpy as np

    depth = 100_000
    parent_pos = np.arange(-1, depth)  # node i replies to node i - 1; node 0 is the root
    rng = np.random.default_rng(3)
    shuffled = rng.permutation(depth + 1)  # positions in a task are in no particular order
    where = np.empty_like(shuffled)
    where[shuffled] = np.arange(depth + 1)
    scrambled = np.full(depth + 1, -1)
    scrambled[where[1:]] = where[parent_pos[1:]]
    root, depths, rounds = kernels.jump_to_roots(scrambled)
    assert (root == where[0]).all()
    assert (depths[where] == np.arange(depth + 1)).all()
    assert rounds == math.ceil(math.log2(depth))


def test_pointer_jumping_marks_cycles_and_their_tails_invalid():
    import numpy as np

    # 0 root <- 1 <- 2;  3 <-> 4 cycle with 5 below it;  6 replies to itself, 7 below it.
    parent_pos = np.array([-1, 0, 1, 4, 3, 4, 6, 6])
    root, depth, rounds = kernels.jump_to_roots(parent_pos)
    assert root.tolist() == [0, 0, 0, -1, -1, -1, -1, -1]
    assert depth.tolist() == [0, 1, 2, -1, -1, -1, -1, -1]
    assert rounds <= math.ceil(math.log2(8)) + 1


def binned_median(values):
    """The job's exact median: fine-bin counts, then the distinct values of the middle bins."""
    import numpy as np

    values = np.array(values, dtype=float)
    bins, counts = np.unique(kernels.latency_bins(values), return_counts=True)
    middle, below = kernels.middle_bins(list(zip(bins.tolist(), counts.tolist())))
    distinct, counts = np.unique(values[np.isin(kernels.latency_bins(values), middle)], return_counts=True)
    return kernels.median_of_counts(list(zip(distinct.tolist(), counts.tolist())), below, values.size)


def test_binned_median_matches_spark_percentile(spark):
    rng = random.Random(11)
    # Whole milliseconds like the latencies, with ties, negatives (clock skew) and a long tail.
    values = [round(rng.lognormvariate(5, 2) * rng.choice([1, 1, 1, -1]), 3) for _ in range(2001)] + [0.0] * 7
    frame = spark.createDataFrame([(v,) for v in values], "x double")
    for rows in (frame, frame.limit(1000), frame.filter(F.col("x") > 0), frame.filter(F.col("x") < 0)):
        assert binned_median([r["x"] for r in rows.collect()]) == rows.agg(F.median("x")).first()[0]
    assert binned_median([1, 1, 2, 2, 2, 3, 500, 501]) == 2.0
    assert binned_median([2, 2, 2, 3, 500, 501]) == 2.5
    assert binned_median([500, 501]) == 500.5
    assert binned_median([]) is None
    assert kernels.median_of_counts([(1, 2), (2, 3), (3, 1)]) == 2
    assert kernels.median_of_counts([(2, 1), (3, 1)]) == 2.5


# ---------------------------------------------------------------- the report, without Spark


def report_results(over_time, span_s, names):
    return job.Results(
        messages=None, threads=None, groups=None, participants=None, summary={"messages": 1}, histograms={},
        over_time=over_time, time_span_ms=(0, span_s * 1000), group_names=names,
    )


def test_over_time_lines_are_visible_round_and_without_the_partial_last_bin(tmp_path):
    hour = 3600
    # A burst group (a deep chain posted within minutes: one bin) and a steady one; the log
    # ends 10 minutes into its last hour-long bin.
    over_time = [(G1, 600.0, 600, 5000)] + [(G2, float(k * 600), 600, 3) for k in range(0, 6 * 30 + 1)]
    results = report_results(over_time, span_s=30 * hour + 600, names={G1: "深い鎖", G2: "𐀀𐀁 linear b"})
    data = thread_report.collect_plot_data(results)
    assert data["bin_s"] == hour and data["partial_last_bin"]
    families, covered = thread_report.label_fonts()
    times, series, per = thread_report.over_time_series(data, covered)
    assert per == "hour" and len(times) == 30  # the 31st, partial hour is left out
    # Every legend entry has a line with a visible (non-zero) point; the CJK name is drawn
    # when a CJK font is installed (make setup installs one), the uncovered name falls back to its gid.
    assert all(max(counts) > 0 and len(counts) == len(times) for counts in series.values())
    cjk = "Droid Sans Fallback" in families
    assert set(series) == {"深い鎖" if cjk else G1, G2}
    assert thread_report.write_report(results, tmp_path).exists()
    assert (tmp_path / "messages_over_time.png").read_bytes()[:4] == b"\x89PNG"


def test_edits_deletes_and_reactions_are_counted_per_group_and_older_lines_count_none(spark, tmp_path):
    def with_operations(export_line, **fields):
        row = json.loads(export_line)
        row.update(fields)
        return json.dumps(row, ensure_ascii=False)

    path = write_export(tmp_path, "ops.jsonl", [
        with_operations(line(G1, "a:1", None, ALICE, 0), edited=2, deleted=False,
                        reactions={"👍": [BOB, CAROL], "🎉": [BOB]}, pinned=True),
        with_operations(line(G1, "b:1", "a:1", BOB, 10), text="", edited=1, deleted=True, reactions={}, pinned=False),
        with_operations(line(G1, "c:1", "a:1", CAROL, 20), text='"reactions": {"x": ["fake"]}', edited=0,
                        deleted=False, reactions={}, pinned=False),
        line(G2, "a:9", None, ALICE, 0),  # an export from before operations
        line(G2, "b:9", "a:9", BOB, 5),
    ])
    results = analyse(spark, [path])
    summary = results.summary
    assert (summary["edited_messages"], summary["deleted_messages"], summary["reactions"]) == (2, 1, 3)
    assert summary["messages"] == 5 and summary["malformed_lines"] == 0
    rows = {r["gid"]: r for r in results.groups.collect()}
    assert (rows[G1]["edited_messages"], rows[G1]["deleted_messages"], rows[G1]["reactions"]) == (2, 1, 3)
    assert (rows[G2]["edited_messages"], rows[G2]["deleted_messages"], rows[G2]["reactions"]) == (0, 0, 0)



def test_mentions_are_counted_per_thread_and_older_lines_count_none(spark, tmp_path):
    def with_mentions(export_line, mentions):
        row = json.loads(export_line)
        row["mentions"] = mentions
        return json.dumps(row)

    path = write_export(tmp_path, "mentions.jsonl", [
        with_mentions(line(G1, "a:1", None, ALICE, 0), [BOB, CAROL]),
        with_mentions(line(G1, "b:1", "a:1", BOB, 10), [ALICE]),
        with_mentions(line(G1, "c:1", None, CAROL, 20), []),
        line(G2, "a:9", None, ALICE, 0),  # an export from before mentions
        with_mentions(line(G2, "b:9", "a:9", BOB, 5), None),
        with_mentions(line(G2, "c:9", "a:9", BOB, 6), "not a list"),
    ])
    results = analyse(spark, [path])
    threads = {(r["gid"], r["root_mid"]): r["mentions"] for r in results.threads.collect()}
    assert threads == {(G1, "a:1"): 3, (G1, "c:1"): 0, (G2, "a:9"): 0}
    assert results.summary["malformed_lines"] == 1


def _offer(export_line, size):
    row = json.loads(export_line)
    row["file"] = {"name": "notes.pdf", "size": size, "mime": "application/pdf", "sha256": "0" * 64}
    return json.dumps(row)


def test_file_offers_are_counted_per_thread_and_group_as_a_plain_count_finds_them(spark, tmp_path):
    text = io.StringIO()
    gen_logs.write_jsonl(gen_logs.generate(4000, seed=11, file_rate=0.05), text)
    lines = text.getvalue().splitlines()
    # A copy of an offer from another export counts once; an export from before files counts none.
    offers = [line for line in lines if '"file"' in line]
    extra = [offers[0], _offer(line(G2, "a:9", None, ALICE, 0), 7), line(G2, "b:9", "a:9", BOB, 5),
             _offer(line(G2, "c:9", "a:9", CAROL, 6), 2**60)]
    path = write_export(tmp_path, "files.jsonl", lines + extra)

    records = {(r["gid"], r["mid"]): r for r in map(json.loads, lines + extra)}
    placed = thread_stats_reference.place_all({key: r["parent"] for key, r in records.items()})
    group_files, group_bytes, thread_files, thread_bytes = Counter(), Counter(), Counter(), Counter()
    for key, record in records.items():
        if "file" in record:
            group_files[key[0]] += 1
            group_bytes[key[0]] += record["file"]["size"]
            root = placed[key].root
            thread_files[root] += 1
            thread_bytes[root] += record["file"]["size"]
    assert len(offers) > 150 and group_bytes[G2] == 2**60 + 7

    results = analyse(spark, [path])
    groups = {r["gid"]: (r["files"], r["file_bytes"]) for r in results.groups.collect()}
    assert groups == {gid: (group_files[gid], group_bytes[gid]) for gid in groups}
    threads = {(r["gid"], r["root_mid"]): (r["files"], r["file_bytes"]) for r in results.threads.collect()}
    assert threads == {root: (thread_files[root], thread_bytes[root]) for root in threads}
    summary = results.summary
    assert (summary["files"], summary["file_bytes"]) == (sum(group_files.values()), sum(group_bytes.values()))
    assert summary["malformed_lines"] == 0


def test_a_file_that_is_no_object_with_a_whole_size_makes_the_line_malformed():
    import pyarrow as pa

    base = line(G1, "a:1", None, ALICE, 0)
    good = {None: base, 0: _offer(base, 0), 5: _offer(base, 5)}
    with_null = json.loads(base)
    with_null["file"] = None
    bad = []
    for value in ("x", [], {}, {"size": -1}, {"size": 2.5}, {"size": "5"}, {"size": None}, {"size": 2**64}):
        row = json.loads(base)
        row["file"] = value
        bad.append(json.dumps(row))
    table, blank, malformed = kernels.parse_lines(pa.array([*good.values(), json.dumps(with_null), *bad]))
    kept = kernels.well_formed(table)
    assert kept.column("file_size").to_pylist() == [None, 0, 5, None]
    assert malformed + table.num_rows - kept.num_rows == len(bad)


def test_participants_merged_by_the_driver_equal_those_of_spark_s_sender_pass(spark, tmp_path, monkeypatch):
    text = io.StringIO()
    gen_logs.write_jsonl(gen_logs.generate(3000, seed=3), text)
    path = write_export(tmp_path, "senders.jsonl", text.getvalue().splitlines())
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "4")  # each sender's rows come from several tasks
    try:
        by_driver = job.analyse(spark, [path], tmp_path / "driver")
        monkeypatch.setattr(job, "DRIVER_SENDER_BYTES", -1)
        by_spark = job.analyse(spark, [path], tmp_path / "spark")
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    assertDataFrameEqual(by_driver.participants, by_spark.participants)
    assert by_driver.summary == by_spark.summary and by_driver.summary["reply_latency_median_s"] is not None
