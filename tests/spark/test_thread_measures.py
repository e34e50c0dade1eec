"""The thread measures researchers cite, checked against their definitions' own implementations:
HyperConvo's against ConvoKit itself (in a venv of its own, not a dependency of M2MC),
the latency percentiles against Spark's `percentile`, the participation Gini and the
width per depth against plain-Python recomputations from the messages table."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import venv
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from m2mc.app.analytics import gen_logs, hyperconvo, job
from m2mc.app.analytics.thread_explorer import THREAD_COLUMNS
from tests.spark.test_thread_stats import ALICE, BOB, CAROL, G1, line, write_export

CONVOKIT_VERSION = "5.0.0"
# What `convokit.hyperconvo` and `convokit.model` import. ConvoKit's full requirements pull in
# sentence-transformers, hence torch and CUDA wheels (gigabytes) that HyperConvo never uses.
CONVOKIT_IMPORTS = ("numpy", "scipy", "pandas", "pyyaml", "requests", "tqdm", "pymongo", "scikit-learn")
CONVOKIT_SCRIPT = Path(__file__).with_name("convokit_features.py")


def convokit_venv() -> Path:
    """The interpreter of a venv holding ConvoKit, made once and kept in the user's cache."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "m2mc" / f"convokit-{CONVOKIT_VERSION}"
    if not (cache / "ready").exists():
        building = cache.with_name(f"{cache.name}.building-{os.getpid()}")
        venv.create(building, with_pip=True, clear=True)
        pip = [str(building / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        for args in (["--no-deps", f"convokit=={CONVOKIT_VERSION}"], list(CONVOKIT_IMPORTS)):
            done = subprocess.run(pip + args, capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, f"pip install {' '.join(args)} failed:\n{done.stderr[-3000:]}"
        # A venv's python finds its packages relative to itself: the finished venv can move into place.
        try:
            building.rename(cache)
        except OSError:  # another test process finished first
            shutil.rmtree(building, ignore_errors=True)
        (cache / "ready").touch()
    return cache / "bin" / "python"


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    """One job over a generated log plus threads built to hit ConvoKit's corner cases: its
Results and its output folder."""
    tmp_path = tmp_path_factory.mktemp("measures")
    export = tmp_path / "gen.jsonl"
    assert gen_logs.main(["--messages", "4000", "--out", str(export), "--seed", "5"]) == 0
    corner = [line(G1, "t:0", None, ALICE, 0)]
    # Same-millisecond replies (ordered by mid), a speaker answering one message twice,
    # self-replies, and a reply to the first message only (gone mid-thread).
    for i, (parent, sender, at) in enumerate([
        ("t:0", BOB, 1), ("t:1", ALICE, 2), ("t:1", ALICE, 2), ("t:2", BOB, 3), ("t:4", BOB, 3),
        ("t:0", CAROL, 4), ("t:6", ALICE, 5), ("t:6", CAROL, 5), ("t:5", ALICE, 6), ("t:9", BOB, 6), ("t:3", CAROL, 7),
    ], start=1):
        corner.append(line(G1, f"t:{i}", parent, sender, at))
    orphan = [line(G1, "o:0", "gone:1", CAROL, 100)] + [line(G1, f"o:{i}", f"o:{i // 2}", (ALICE, BOB, CAROL)[i % 3], 100 + i) for i in range(1, 12)]
    paths = [str(export), write_export(tmp_path, "corner.jsonl", corner + orphan)]
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    # Several tasks, each sending its own largest threads and their trees to the driver.
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    try:
        return job.analyse(spark, paths, tmp_path / "out", report=True), tmp_path / "out"
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)


def test_hyperconvo_measures_match_convokit(run, tmp_path):
    measured, _ = run
    messages = measured.messages.filter(~F.col("invalid")).select(
        "mid", "parent", "sender", "sent_at", "root_mid", "parent_missing").collect()
    threads = {row["root_mid"]: row.asDict() for row in measured.threads.collect()}
    # ConvoKit orders a conversation by timestamp, ties in corpus order: give it (time, mid) order.
    utterances = sorted(({
        "id": row["mid"], "speaker": row["sender"], "conversation_id": row["root_mid"],
        "reply_to": None if row["parent"] is None or row["parent_missing"] else row["parent"],
        "timestamp": int(row["sent_at"].timestamp() * 1000),
    } for row in messages), key=lambda u: (u["timestamp"], u["id"]))
    # A HOME of its own, new each run: ConvoKit's first-run notice (printed on a machine where
    # ~/.convokit does not exist yet) is what a fresh CI machine sees, so every run sees it.
    home = tmp_path / "home"
    home.mkdir()
    result = tmp_path / "convokit.json"
    done = subprocess.run([str(convokit_venv()), str(CONVOKIT_SCRIPT), str(result)], input=json.dumps(utterances),
                          capture_output=True, text=True, timeout=600, env={**os.environ, "HOME": str(home)})
    assert done.returncode == 0, done.stderr[-3000:]
    expected = json.loads(result.read_text(encoding="utf-8"))

    big = {root for root, row in threads.items() if row["size"] >= hyperconvo.MIN_SIZE}
    assert set(expected) == big and len(big) >= 30 and {"t:0", "o:0"} <= big
    checked = 0
    for root, features in expected.items():
        for column, _, feature in hyperconvo.columns():
            ours, theirs = threads[root][column], features[feature]
            assert (ours is None) == (theirs is None), (root, column, ours, theirs)
            if theirs is not None:
                assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-12), (root, column)
                checked += 1
    assert checked > 60 * len(big)
    small = [row for row in threads.values() if row["size"] < hyperconvo.MIN_SIZE]
    assert small and all(row[column] is None for row in small for column, _, _ in hyperconvo.columns())


def test_latency_percentiles_are_sparks_percentile(run):
    measured, _ = run
    spark_percentiles = (measured.messages.filter(F.col("reply_latency_s").isNotNull()).groupBy("root_mid")
                         .agg(F.percentile("reply_latency_s", 0.5).alias("p50"), F.percentile("reply_latency_s", 0.9).alias("p90")))
    rows = spark_percentiles.join(measured.threads, "root_mid").select("p50", "p90", "median_reply_latency_s", "p90_reply_latency_s").collect()
    assert len(rows) > 100
    assert [r for r in rows if (r["p50"], r["p90"]) != (r["median_reply_latency_s"], r["p90_reply_latency_s"])] == []
    single = measured.threads.filter(F.col("size") == 1).select("p90_reply_latency_s").collect()
    assert single and all(r[0] is None for r in single)


def gini(counts: list[int]) -> float:
    """The mean absolute difference over all ordered pairs, over twice the mean."""
    n, mean = len(counts), sum(counts) / len(counts)
    return sum(abs(a - b) for a in counts for b in counts) / (2 * n * n * mean)


def test_participation_gini_and_width_per_depth(run):
    measured, _ = run
    posts: dict[str, Counter] = defaultdict(Counter)
    group_posts: dict[str, Counter] = defaultdict(Counter)
    levels: dict[str, Counter] = defaultdict(Counter)
    for row in measured.messages.select("gid", "sender", "root_mid", "depth").collect():
        group_posts[row["gid"]][row["sender"]] += 1
        if row["root_mid"] is not None:
            posts[row["root_mid"]][row["sender"]] += 1
            levels[row["root_mid"]][row["depth"]] += 1
    threads = measured.threads.select("root_mid", "depth", "participation_gini", "width_per_depth").collect()
    for row in threads:
        assert row["participation_gini"] == pytest.approx(gini(list(posts[row["root_mid"]].values())), abs=1e-12)
        assert row["width_per_depth"] == [levels[row["root_mid"]][d] for d in range(row["depth"] + 1)]
    assert any(row["participation_gini"] > 0.3 for row in threads)
    for row in measured.groups.select("gid", "participation_gini").collect():
        assert row["participation_gini"] == pytest.approx(gini(list(group_posts[row["gid"]].values())), abs=1e-12)


def test_the_largest_threads_and_their_trees(run):
    measured, _ = run
    threads = sorted(measured.threads.collect(), key=lambda r: (-r["size"], r["gid"], r["root_mid"]))
    top = measured.top_threads
    assert [t["root_mid"] for t in top] == [r["root_mid"] for r in threads[:len(top)]] and len(top) == min(200, len(threads))
    trees = [t for t in top if t["tree_parent"] is not None]
    assert trees == top[:20]
    for tree, row in zip(trees, threads):
        parents = tree["tree_parent"]
        assert len(parents) == min(row["size"], 500) and parents[0] == -1
        depth = [0] * len(parents)
        for i, parent in enumerate(parents[1:], start=1):
            assert 0 <= parent < i  # parents come first: the drawn messages form a tree
            depth[i] = depth[parent] + 1
        assert [depth.count(d) for d in range(max(depth) + 1)] == row["width_per_depth"]


def test_kernels_give_convokit_nulls_and_entropy_on_hand_built_prefixes():
    import numpy as np

    # One thread of 10: a root answered by everyone else, all by distinct speakers.
    star = hyperconvo.prefix_measures(np.array([[-1] + [0] * 9]), np.arange(10)[None, :])
    assert star["hc_uu_in_max"][0][0] == 9 and star["hc_uu_in_argmax"][0][0] == 0
    assert star["hc_uu_in_entropy"][0][0] == 0.0  # one node holds every in-edge
    assert star["hc_incoming_triads"][0][0] == math.comb(9, 2) and star["hc_outgoing_triads"][0][0] == 0
    # Mid-thread, the root is gone: no reply edges at all, so entropy has no distribution.
    assert star["hc_mid_uu_in_max"][0][0] == 0 and star["hc_mid_uu_in_entropy"][1][0]
    # One speaker alone: the speaker arrays have one entry, so no second largest.
    alone = hyperconvo.prefix_measures(np.array([[-1] + list(range(9))]), np.zeros((1, 10), dtype=int))
    assert alone["hc_ss_out_second"][1][0] and alone["hc_ss_out_max"][0][0] == 1  # a self-loop


CHROMIUM = "/usr/bin/chromium"  # Debian's (packaging/system-deps.sh); Playwright's own download is not reachable


def test_explorer_opens_offline_sorts_and_logs_no_errors(run):
    from playwright.sync_api import sync_playwright

    results, out = run
    assert Path(CHROMIUM).exists(), "the explorer's test needs Debian's chromium: run make setup (packaging/system-deps.sh)"
    page_file = out / "explore.html"
    assert page_file.stat().st_size < 10_000_000
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as playwright:
        # As root, Chromium starts only without its sandbox.
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.on("console", lambda message: errors.append(message.text) if message.type in ("error", "warning") else None)
            page.on("pageerror", lambda error: errors.append(str(error)))
            page.on("request", lambda request: requests.append(request.url))
            page.goto(page_file.as_uri(), wait_until="load")
            # The plots are drawn as they scroll into view.
            for plot in page.locator(".plot").all():
                plot.scroll_into_view_if_needed()
            page.wait_for_function("document.querySelectorAll('.plot').length === document.querySelectorAll('.js-plotly-plot').length")
            plots = page.locator(".js-plotly-plot").count()
            # Sort the threads table by participants, ascending then descending.
            column = list(THREAD_COLUMNS).index("participants")
            header = page.locator("#threads th").nth(column)

            def participants() -> list[float]:
                return [float(v) for v in page.locator(f"#threads tbody tr td:nth-child({column + 1})").evaluate_all(
                    "cells => cells.map(c => c.dataset.v)")]

            shown = participants()
            header.click()
            ascending = participants()
            header.click()
            descending = participants()
        finally:
            browser.close()
    assert errors == []
    assert [url for url in requests if not url.startswith("file:")] == []  # self-contained: nothing fetched
    assert plots == 4 + len([t for t in results.top_threads if t.get("tree_parent") is not None]) and plots >= 4 + 20
    assert shown != ascending and ascending == sorted(shown) and descending == sorted(shown, reverse=True)
