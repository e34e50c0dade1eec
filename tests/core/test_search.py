"""Full-text search and history pages: the FTS5 index against a plain scan, edits and deletes,
an old data dir's index built on open, and the m2mc-peer methods ``history``, ``search`` and ``thread``."""

import dataclasses
import json
import logging
import random
import sqlite3
import time

import pytest

from m2mc.app import peer as peer_module
from m2mc.app.peer import INVALID_PARAMS, APP_ERROR, JsonRpcPeer
from m2mc.middleware.direct import StoredDirect, conversation_id
from m2mc.middleware.files import FileOffer
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.store import Store
from m2mc.middleware.store_api import MATCH_END, MATCH_START, SearchQueryError, fold_word, search_words
from m2mc.middleware.types import ChatMessage, format_mid

from m2mc.middleware import kinds

# Latin with and without accents, Cyrillic (ё keeps its mark: unicode61 folds Latin only), Greek, CJK
VOCABULARY = [
    "café", "cafe", "CAFÉ", "résumé", "resume", "naïve", "Łódź", "lodz", "Ñandú", "crème", "brûlée", "über",
    "Straße", "Ørsted", "İstanbul", "façade", "piñata", "ёлка", "Ёлка", "елка", "привет", "мир", "город",
    "Αθήνα", "θάλασσα", "λόγος", "東京", "北京", "こんにちは", "서울", "مرحبا", "שלום", "apple", "banana",
    "cherry", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima", "mike",
    "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey",
]
NOW = int(time.time() * 1000)


def random_messages(rng: random.Random, count: int) -> list[ChatMessage]:
    messages = []
    for index in range(count):
        text = " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 8)))
        text += rng.choice(["", ".", "!", ", ok?", " (again)"])
        messages.append(ChatMessage(f"g{index % 3}", (f"p{index % 5}", index + 1), None, "n", text, NOW + index,
                                    NOW + index, 0, b"sig", b"key"))
    return messages


def scanned(history: list[ChatMessage], word: str, prefix: bool = False, edits: dict | None = None) -> set:
    """The mids whose (current) text holds ``word``: the plain scan the index must agree with."""
    edits = edits or {}
    term = fold_word(word)
    found = set()
    for message in history:
        text = edits.get(message.mid, message.text)
        if text is None:
            continue
        words = [w for _, _, w in search_words(text)]
        if any(w == term or (prefix and w.startswith(term)) for w in words):
            found.add(message.mid)
    return found


@pytest.fixture(params=["sqlite", "memory"])
def store(request, tmp_path):
    made = Store(tmp_path / "store.db") if request.param == "sqlite" else MemoryStore()
    yield made
    made.close()


def test_search_finds_what_a_plain_scan_finds_for_50_random_words(store):
    rng = random.Random(31)
    store.add_messages(random_messages(rng, 600))
    store.commit()
    history = store.history()
    edits = {}
    for message in rng.sample(history, 40):  # some edited, some deleted: the index takes the current text
        edits[message.mid] = None if rng.random() < 0.5 else " ".join(rng.sample(VOCABULARY, 3))
        store.set_search_text(message.gid, message.mid, edits[message.mid])
    words = rng.sample(VOCABULARY, 50)
    assert any(not w.isascii() for w in words) and any(w != fold_word(w) for w in words)
    for word in words:
        prefix = word.isascii() and len(word) > 3 and rng.random() < 0.3
        query = f'"{word[:3]}"*' if prefix else f'"{word}"'
        if isinstance(store, MemoryStore):
            query = query.replace('"', "")
        hits = store.search(query, limit=10_000)
        expected = scanned(history, word[:3] if prefix else word, prefix, edits)
        assert {hit.mid for hit in hits} == expected, query
        assert all(MATCH_START in hit.snippet and MATCH_END in hit.snippet for hit in hits)


def test_filters_order_and_offset(store):
    store.add_messages(random_messages(random.Random(7), 300))
    all_hits = store.search("apple", limit=1000, by_time=True)
    assert [h.order for h in all_hits] == sorted((h.order for h in all_hits), reverse=True)
    assert {h.gid for h in store.search("apple", gid="g1", limit=1000)} == {"g1"}
    assert {h.mid[0] for h in store.search("apple", sender="p2", limit=1000)} == {"p2"}
    since = all_hits[len(all_hits) // 2].sent_at
    assert all(h.sent_at >= since for h in store.search("apple", since=since, limit=1000))
    assert all(h.sent_at <= since for h in store.search("apple", until=since, limit=1000))
    pages = store.search("apple", limit=5, by_time=True) + store.search("apple", limit=5, offset=5, by_time=True)
    assert pages == all_hits[:10]


def test_bad_query_syntax_is_a_search_query_error(store):
    for query in ['"unclosed', "a AND", "(", "col:umn", "NOT", "*"]:
        with pytest.raises(SearchQueryError):
            store.search(query)


def test_history_pages_in_delivery_order_without_operations(store):
    messages = random_messages(random.Random(3), 40)
    messages[5] = messages[5]._replace(text=kinds.body(kinds.OPERATION, "[]"))  # an operation: never a row of a page
    store.add_messages(messages)
    chat = [m for m in store.history("g0") if m.kind != kinds.OPERATION]
    assert store.history_page("g0", limit=5) == chat[-5:]
    assert store.history_page("g0", before=chat[-5].order, limit=5) == chat[-10:-5]
    assert store.history_page("g0", after=chat[2].order, limit=3) == chat[3:6]
    assert store.history_page("g0", after=chat[2].order, before=chat[4].order) == chat[3:4]
    assert store.message_count("g0") == len(store.history("g0"))


def stored_with_an_index(tmp_path):
    """A closed store of 100 messages, and which of them a search for "apple" finds."""
    path = tmp_path / "old.db"
    store = Store(path)
    store.add_messages(random_messages(random.Random(5), 100))
    store.commit()
    expected = {h.mid for h in store.search("apple", limit=1000)}
    store.close()
    return path, expected


def test_an_old_data_dir_gets_its_index_built_on_open(tmp_path, caplog):
    path, expected = stored_with_an_index(tmp_path)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE message_search")  # as a data dir written before the index
    db.execute("DROP TABLE message_search_changed")
    db.commit()
    db.close()
    with caplog.at_level(logging.INFO, logger="m2mc.middleware.store_search"):
        store = Store(path)
    assert expected and {h.mid for h in store.search("apple", limit=1000)} == expected
    assert "search index built: 100 messages" in caplog.text
    store.close()


def test_the_index_forgets_every_text_it_held_through_edits_replays_and_replacements(tmp_path):
    # The index keeps no copy of the text (contentless): forgetting a text means handing it back,
    # so the store must always know which text it indexed, whatever came before.
    store = Store(tmp_path / "s.db")
    message = ChatMessage("g0", ("p1", 1), None, "n", "alpha", NOW, NOW, 0, b"s", b"k")
    store.add_messages([message])
    for text in ["bravo", "bravo", "charlie", None, None, "delta"]:  # a replayed edit, a replayed delete
        store.set_search_text("g0", message.mid, text)
    store.commit()
    assert [h.mid for h in store.search("delta")] == [message.mid]
    assert not any(store.search(word) for word in ("alpha", "bravo", "charlie"))
    store.set_search_text("g0", message.mid, "alpha")  # back to the stored text
    store.commit()
    assert store.search("alpha") and not store.search("delta")
    store.replace_message("g0", dataclasses.replace(store.fetch("g0", [message.mid])[0], text="echo"))
    assert store.search("echo") and not store.search("alpha")
    assert store.search("echo")[0].snippet == f"{MATCH_START}echo{MATCH_END}"  # not the text read before
    store.rollback()
    assert store.search("alpha")[0].snippet == f"{MATCH_START}alpha{MATCH_END}"
    store.replace_message("g0", dataclasses.replace(store.fetch("g0", [message.mid])[0], text="echo"))
    store.commit()
    store.close()
    store = Store(tmp_path / "s.db")
    assert store.search("echo") and not store.search("alpha")
    assert store.search("echo")[0].snippet == f"{MATCH_START}echo{MATCH_END}"
    store.close()


def test_the_index_holds_no_copy_of_the_text_and_an_index_that_did_is_rebuilt(tmp_path):
    path, expected = stored_with_an_index(tmp_path)
    db = sqlite3.connect(path)
    assert not db.execute("SELECT name FROM sqlite_master WHERE name = 'message_search_content'").fetchall()
    db.execute("DROP TABLE message_search")
    db.execute("DROP TABLE message_search_changed")
    db.execute("CREATE VIRTUAL TABLE message_search USING fts5(text, gid UNINDEXED)")  # as an earlier branch's
    db.commit()
    db.close()
    store = Store(path)
    assert expected and {h.mid for h in store.search("apple", limit=1000)} == expected
    store.close()
    db = sqlite3.connect(path)
    assert not db.execute("SELECT name FROM sqlite_master WHERE name = 'message_search_content'").fetchall()
    db.close()


def test_a_rolled_back_message_is_not_found(tmp_path):
    store = Store(tmp_path / "s.db")
    store.add_messages(random_messages(random.Random(1), 1)[:1])
    store.commit()
    store.add_messages([ChatMessage("g0", ("p9", 1), None, "n", "zebra", NOW, NOW, 0, b"s", b"k")])
    assert store.search("zebra")
    store.rollback()
    assert not store.search("zebra")  # the index is in the message's transaction
    store.close()


# -- through a GroupManager and m2mc-peer's JSON-RPC ---------------------------------------


@pytest.fixture
def rpc(tmp_path):
    peer = JsonRpcPeer(lambda line: None)
    peer.manager = GroupManager(Config(tmp_path / "p", name="Pat", iface="127.0.0.1", zeroconf=False), peer)

    def call(method, **params):
        answer = peer.handle_line(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        return answer.get("result", answer.get("error"))

    call.manager = peer.manager
    call.store_closed = False
    yield call
    if not call.store_closed:
        peer.manager.store.close()


def test_edits_and_deletes_show_in_search_at_once_and_after_a_restart(rpc, tmp_path):
    manager = rpc.manager
    gid = manager.create_group("search")
    first = manager.send(gid, "the quarterly numbers", None)
    second = manager.send(gid, "lunch at noon", None)
    assert [r["mid"] for r in rpc("search", query="quarterly")["results"]] == [format_mid(first)]
    manager.edit(gid, first, "the yearly numbers")
    manager.delete(gid, second)
    assert rpc("search", query="quarterly")["results"] == []
    assert [r["mid"] for r in rpc("search", query="yearly")["results"]] == [format_mid(first)]
    assert rpc("search", query="lunch")["results"] == []
    manager.flush()
    manager.store.close()
    rpc.store_closed = True
    again = GroupManager(Config(tmp_path / "p", name="Pat", iface="127.0.0.1", zeroconf=False), lambda e: None)
    try:
        assert [h.mid for h, _ in again.search("yearly")] == [first]
        assert again.search("quarterly") == [] and again.search("lunch") == []
    finally:
        again.store.close()


def test_search_method_answers_fields_pages_and_thread_roots(rpc):
    manager = rpc.manager
    gid = manager.create_group("threads")
    root = manager.send(gid, "where is the café?", None)
    reply = manager.send(gid, "the cafe is downstairs", root)
    deeper = manager.send(gid, "which cafe exactly", reply)
    other = manager.send(gid, "unrelated", None)
    answer = rpc("search", query="cafe", order="time")
    assert [r["mid"] for r in answer["results"]] == [format_mid(m) for m in (deeper, reply, root)]
    first = answer["results"][0]
    assert set(first) == {"gid", "mid", "sender", "sent_at", "order", "snippet", "thread_root"}
    assert first["gid"] == gid and first["sender"] == manager.core.pid and first["sent_at"].endswith("Z")
    assert first["thread_root"] == format_mid(root) and f"{MATCH_START}cafe{MATCH_END}" in first["snippet"]
    assert answer["cursor"] is None
    page = rpc("search", query="cafe", order="time", limit=2)
    assert len(page["results"]) == 2 and page["cursor"] is not None
    rest = rpc("search", query="cafe", order="time", limit=2, cursor=page["cursor"])
    assert [r["mid"] for r in page["results"] + rest["results"]] == [r["mid"] for r in answer["results"]]
    assert rest["cursor"] is None
    assert rpc("search", query="cafe", gid=gid, sender=manager.core.pid, since="2020-01-01T00:00:00Z",
               until="2999-01-01T00:00:00Z")["results"]
    assert rpc("search", query="cafe", until="2020-01-01T00:00:00Z")["results"] == []
    thread = rpc("thread", gid=gid, root=format_mid(root))
    assert [m["mid"] for m in thread] == [format_mid(m) for m in (root, reply, deeper)]
    assert format_mid(other) not in {m["mid"] for m in thread}


@pytest.mark.parametrize("params, words", [
    ({"query": '"unclosed'}, "bad search query"),
    ({"query": "a:b"}, "bad search query"),
    ({"query": "("}, "bad search query"),
    ({"query": "*"}, "bad search query"),
    ({"query": "don't"}, "double quotes"),
    ({"query": "  "}, "empty search query"),
    ({}, "'query'"),
    ({"query": "x", "order": "random"}, "'order'"),
    ({"query": "x", "limit": 0}, "'limit'"),
    ({"query": "x", "limit": True}, "'limit'"),
    ({"query": "x", "cursor": "-1"}, "'cursor'"),
    ({"query": "x", "since": "yesterday"}, "'since'"),
    ({"query": "x", "gid": 5}, "'gid'"),
])
def test_bad_search_requests_get_clear_invalid_params_errors(rpc, params, words):
    rpc.manager.create_group("g")
    error = rpc("search", **params)
    assert error["code"] == INVALID_PARAMS and words in error["message"], error


def test_search_in_an_unknown_group_is_an_error(rpc):
    assert rpc("search", query="x", gid="nope")["code"] == APP_ERROR


def test_history_pages_and_refuses_a_big_group_whole(rpc, monkeypatch):
    manager = rpc.manager
    gid = manager.create_group("paged")
    mids = [manager.send(gid, f"message {n}", None) for n in range(12)]
    whole = rpc("history", gid=gid)
    assert [m["mid"] for m in whole] == [format_mid(m) for m in mids] and "order" not in whole[0]
    last = rpc("history", gid=gid, limit=5)
    assert [m["mid"] for m in last] == [format_mid(m) for m in mids[-5:]]
    before = rpc("history", gid=gid, before=last[0]["order"], limit=5)
    assert [m["mid"] for m in before] == [format_mid(m) for m in mids[2:7]]
    after = rpc("history", gid=gid, after=before[-1]["order"], limit=2)
    assert [m["mid"] for m in after] == [format_mid(m) for m in mids[7:9]]
    monkeypatch.setattr(peer_module, "MAX_WHOLE_HISTORY", 10)
    refused = rpc("history", gid=gid)
    assert refused["code"] == APP_ERROR
    assert all(word in refused["message"] for word in ("12 messages", "'before'", "'after'", "'limit'"))
    for bad in ({"limit": 0}, {"limit": 1001}, {"before": "x"}, {"after": -1}, {"before": 1.5}):
        assert rpc("history", gid=gid, **bad)["code"] == INVALID_PARAMS, bad


def test_thread_method_errors(rpc):
    gid = rpc.manager.create_group("t")
    assert rpc("thread", gid=gid, root="nonsense")["code"] == INVALID_PARAMS
    assert rpc("thread", gid=gid, root=f"{rpc.manager.core.pid}:99")["code"] == APP_ERROR
    assert rpc("thread", gid="unknown", root=f"{rpc.manager.core.pid}:1")["code"] == APP_ERROR


def test_relevance_ranks_only_the_newest_matches(tmp_path, monkeypatch):
    from m2mc.middleware import store_search
    store = Store(tmp_path / "s.db")
    store.add_messages([ChatMessage("g", ("p", n), None, "n", "word " * (1 + n % 3), NOW, NOW, 0, b"s", b"k")
                        for n in range(1, 21)])
    monkeypatch.setattr(store_search, "RELEVANCE_WINDOW", 5)
    assert {h.order for h in store.search("word", limit=100)} == {16, 17, 18, 19, 20}
    assert len(store.search("word", limit=100, by_time=True)) == 20
    store.close()


# -- direct messages, file offers ----------------------------------------------------------

PEER = "b" * 64


def direct(seqno: int, text: str, *, sender: str = PEER, order: int | None = None, status: str = "received",
           parent=None, at: int = NOW) -> StoredDirect:
    return StoredDirect(PEER, sender, seqno, parent, "n", text, at + seqno, at + seqno,
                        seqno if order is None else order, status, False, b"")


def test_direct_messages_are_found_once_shown_with_their_conversation(store):
    me = store.identity().pid
    store.save_direct([direct(1, "the café opens at nine", order=0, status="held")])  # held: not shown yet
    assert store.search_direct("cafe") == []
    store.save_direct([direct(1, "the café opens at nine"), direct(2, "which cafe?", sender=me, status="sent")])
    store.save_direct([direct(2, "which cafe?", sender=me, status="delivered")])  # a status change: found once
    store.commit()
    hits = store.search_direct("cafe", by_time=True)
    assert [h.mid for h in hits] == [(me, 2), (PEER, 1)]
    assert {(h.gid, h.peer) for h in hits} == {(conversation_id(me, PEER), PEER)}
    assert hits[1].snippet == f"the {MATCH_START}café{MATCH_END} opens at nine" and hits[1].sent_at == NOW + 1
    assert [h.mid for h in store.search_direct("cafe", sender=me)] == [(me, 2)]
    assert store.search_direct("cafe", peer="c" * 64) == []
    assert [h.mid for h in store.search_direct("cafe", since=NOW + 2)] == [(me, 2)]
    assert [h.mid for h in store.search_direct("cafe", until=NOW + 1)] == [(PEER, 1)]
    assert [h.mid for h in store.search_direct("cafe", by_time=True, limit=1, offset=1)] == [(PEER, 1)]
    assert store.search("cafe") == []  # groups' search stays the groups'


def test_direct_messages_are_indexed_in_their_own_transaction_and_for_an_old_data_dir(tmp_path):
    store = Store(tmp_path / "s.db")
    store.identity()  # made (and committed) at a peer's start, as a search's hits name the conversation by it
    store.save_direct([direct(1, "zebra crossing")])
    assert store.search_direct("zebra")
    store.rollback()
    assert store.search_direct("zebra") == []
    store.save_direct([direct(1, "zebra crossing")])
    store.commit()
    store.close()
    db = sqlite3.connect(tmp_path / "s.db")
    db.execute("DROP TABLE direct_search")  # as a data dir from before direct messages were indexed
    db.execute("DROP TABLE direct_search_rows")
    db.commit()
    db.close()
    store = Store(tmp_path / "s.db")
    assert [h.mid for h in store.search_direct("zebra")] == [(PEER, 1)]
    store.save_direct([direct(1, "zebra crossing", status="read")])
    assert len(store.search_direct("zebra")) == 1
    store.close()


def offer_text(name: str) -> str:
    return FileOffer(name, 1234, "application/pdf", "a" * 64, 65536, "b" * 64).to_text()


def test_a_file_offer_is_found_by_its_name_and_not_by_its_json(store):
    store.add_messages([ChatMessage("g0", ("p1", 1), None, "n", offer_text("budget plan.pdf"), NOW, NOW, 0,
                                    b"s", b"k")])
    store.save_direct([direct(1, offer_text("holiday photos.zip"))])
    store.commit()
    hits = store.search("budget")
    assert [h.mid for h in hits] == [("p1", 1)]
    assert hits[0].snippet == f"{MATCH_START}budget{MATCH_END} plan.pdf"
    assert [h.mid for h in store.search_direct("photos")] == [(PEER, 1)]
    for word in ("application", "chunk", "sha256", "a" * 64, "1234", "name", "mime", "root"):
        assert store.search(word) == [] and store.search_direct(word) == [], word


def test_an_index_that_held_offers_json_holds_their_names_after_open(tmp_path):
    path = tmp_path / "s.db"
    store = Store(path)
    store.add_messages([ChatMessage("g0", ("p1", n), None, "n", text, NOW, NOW, 0, b"s", b"k")
                        for n, text in enumerate([offer_text("old report.pdf"), "plain words",
                                                  offer_text("edited.pdf"), offer_text("spare sheet.ods")], 1)])
    store.set_search_text("g0", ("p1", 3), "renamed text")
    store.commit()
    store._db.execute("INSERT INTO message_search (message_search, rowid, text) VALUES ('delete', 1, ?)",
                      ("old report.pdf",))
    store._db.execute("INSERT INTO message_search (rowid, text) VALUES (1, ?)", (offer_text("old report.pdf"),))
    store._db.execute("PRAGMA user_version = 3")  # as version 3 indexed an offer: its whole text
    store.commit()
    assert store.search("chunk")
    store.close()
    store = Store(path)
    assert store.search("chunk") == [] and [h.mid for h in store.search("report")] == [("p1", 1)]
    assert [h.mid for h in store.search("renamed")] == [("p1", 3)] and store.search("edited") == []
    store.set_search_text("g0", ("p1", 1), None)  # forgetting it hands back what it holds: the name
    store.commit()
    assert store.search("report") == []
    assert store._db.execute("INSERT INTO message_search (message_search) VALUES ('integrity-check')")
    store._db.execute("PRAGMA user_version = 3")  # as an older build sets it, opening a store that holds names
    store.commit()
    store.close()
    store = Store(path)
    assert [h.mid for h in store.search("renamed")] == [("p1", 3)] and store.search("chunk") == []
    store._db.execute("INSERT INTO message_search (message_search) VALUES ('integrity-check')")
    store.set_search_text("g0", ("p1", 4), None)  # hands back the name: the index must hold just that
    store.commit()
    assert store.search("spare") == [] and store.search("sheet") == []
    store.close()


def test_search_method_covers_direct_conversations_and_the_app_s_search_does_not(rpc):
    manager = rpc.manager
    me = manager.core.pid
    gid = manager.create_group("both")
    manager.send(gid, "lunch in the group", None)
    later = int(time.time() * 1000) + 60_000  # after the group's message (NOW is the module's import time)
    question = direct(1, "lunch tomorrow?", at=later)
    manager.store.save_direct([question, direct(2, "yes, lunch at one", sender=me, parent=question.mid,
                                                status="sent", at=later)])
    manager.store.commit()
    conversation = conversation_id(me, PEER)
    answer = rpc("search", query="lunch", order="time")["results"]
    assert [(r["gid"], r.get("peer")) for r in answer] == [(conversation, PEER), (conversation, PEER), (gid, None)]
    assert answer[0]["mid"] == f"{me}:2" and answer[0]["direct"] is True
    assert answer[0]["thread_root"] == format_mid(question.mid)
    assert {r["gid"] for r in rpc("search", query="lunch")["results"]} == {gid, conversation}
    page = rpc("search", query="lunch", order="time", limit=2)
    rest = rpc("search", query="lunch", order="time", limit=2, cursor=page["cursor"])
    assert [r["mid"] for r in page["results"] + rest["results"]] == [r["mid"] for r in answer]
    only = rpc("search", query="lunch", gid=conversation)["results"]
    assert {r["mid"] for r in only} == {f"{me}:2", format_mid(question.mid)}
    assert rpc("search", query="lunch", gid=f"dm:{'c' * 64}:{'d' * 64}")["code"] == APP_ERROR
    assert [hit.gid for hit, _ in manager.search("lunch")] == [gid]  # Search everywhere lists groups only


def index_btrees(store: Store) -> int:
    return store._db.execute("SELECT COUNT(DISTINCT segid) FROM message_search_idx").fetchone()[0]


def test_the_index_is_merged_by_idle_commits_and_by_delivery_only_past_a_backlog(tmp_path, monkeypatch):
    from m2mc.middleware import store_search
    automerge = "SELECT v FROM message_search_config WHERE k = 'automerge'"
    store = Store(tmp_path / "s.db")
    store.commit()  # a peer's first commits index nothing (joining, presence): the index is found merged
    assert store._db.execute(automerge).fetchone()[0] == 0
    messages = random_messages(random.Random(2), 600)
    for n in range(100):  # delivery: every commit indexes, none merges (FTS5's automerge would, every 64 pages)
        store.add_messages(messages[n * 2:n * 2 + 2])
        store.commit()
    assert index_btrees(store) == 100
    store.close()
    store = Store(tmp_path / "s.db")  # restarted while busy: its backlog cannot be counted, so it merges as it goes
    for n in range(100, 200):
        store.add_messages(messages[n * 2:n * 2 + 2])
        store.commit()
    assert index_btrees(store) < 190
    for _ in range(40):  # idle: commits that index nothing merge, a step each, until nothing is left
        store.commit()
    assert index_btrees(store) <= 3 and store._db.execute(automerge).fetchone()[0] == 0
    assert {h.mid for h in store.search("apple", limit=1000)} == scanned(messages[:400], "apple")
    monkeypatch.setattr(store_search, "MERGE_BACKLOG", 10)
    for n in range(200, 300):  # busy past the backlog: merged as it goes
        store.add_messages(messages[n * 2:n * 2 + 2])
        store.commit()
    assert index_btrees(store) < 90 and store._db.execute(automerge).fetchone()[0] == store_search.AUTOMERGE
    for _ in range(20):
        store.commit()
    assert index_btrees(store) <= 3 and store._db.execute(automerge).fetchone()[0] == 0
    assert {h.mid for h in store.search("apple", limit=1000)} == scanned(messages, "apple")
    store.close()


def test_search_by_time_over_groups_and_direct_messages_is_newest_shown_first_whatever_the_delivery_order(rpc):
    manager = rpc.manager
    now = int(time.time() * 1000)
    gid = manager.create_group("clocks")
    store = manager.store
    # delivered in this order, but the first one's writer has a clock ahead: it is shown as the newest
    store.add_messages([ChatMessage(gid, ("c" * 64, 1), None, "n", "zebra crossing ahead", now + 4_000, now, 0,
                                    b"s", b"k"),
                        ChatMessage(gid, ("c" * 64, 2), None, "n", "zebra crossing behind", now - 4_000, now, 0,
                                    b"s", b"k")])
    store.save_direct([direct(1, "zebra in a direct message", at=now - 1)])
    store.commit()
    hits = manager.core.search("zebra", by_time=True, direct=True)
    assert len(hits) == 3
    times = [hit.sent_at for hit, _root in hits]
    assert times == sorted(times, reverse=True)
