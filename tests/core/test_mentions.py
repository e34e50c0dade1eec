"""@mentions: the token in the text, its bounds, send with mentions, and the mentions query through a GroupManager."""

import asyncio
import time

import pytest

from m2mc.middleware import crypto, wire
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.mentions import MAX_MENTIONS, Run, mentioned_pids, render, shown_text, token, with_tokens
from m2mc.middleware.store import Store
from m2mc.middleware.types import ChatMessage, UsageError
from tests.testbed.arrivals import arriving
from tests.testbed.jsonrpc import in_process_peer

ANN = "a" * 32
BOB = "b" * 32
CAROL = crypto.Identity.generate()


def test_tokens_are_found_once_each_in_order_and_at_most_max_mentions():
    assert mentioned_pids("no mention here, not even <@nothex> or <@" + "A" * 32 + ">") == ()
    assert mentioned_pids(f"{token(BOB)} and {token(ANN)} then {token(BOB)}") == (BOB, ANN)
    many = [f"{i:032x}" for i in range(MAX_MENTIONS + 5)]
    assert mentioned_pids(" ".join(map(token, many))) == tuple(many[:MAX_MENTIONS])
    message = ChatMessage("g", (ANN, 1), None, "Ann", f"hi {token(BOB)}", 0, 0)
    assert message.mentions == (BOB,) and message.to_json()["mentions"] == [BOB]


def test_typed_names_become_tokens_longest_first_and_only_whole_names():
    names = {ANN: "Ann", BOB: "Ann Lee"}
    text = with_tokens("@Ann Lee meet @Ann; not @Annabel", [ANN, BOB], names)
    assert text == f"{token(BOB)} meet {token(ANN)}; not @Annabel"
    assert with_tokens("hello @Zed", ["c" * 32], names) == "hello @Zed"  # not a member: plain text


def test_render_shows_current_names_and_leaves_strangers_and_extras_as_text():
    text = f"hi {token(ANN)} and {token(BOB)}!"
    assert render(text, {ANN: "Ann", BOB: "Bob"}) == [Run("hi "), Run("@Ann", ANN), Run(" and "), Run("@Bob", BOB),
                                                      Run("!")]
    assert render(text, {BOB: "Robert"}) == [Run(f"hi {token(ANN)} and "), Run("@Robert", BOB), Run("!")]
    assert shown_text(text, {ANN: "Ann"}) == f"hi @Ann and {token(BOB)}!"
    assert render("", {}) == [] and render("plain", {}) == [Run("plain")]
    many = [f"{i:032x}" for i in range(MAX_MENTIONS + 1)]
    runs = render(" ".join(map(token, many)), {pid: "X" for pid in many})
    assert sum(run.pid is not None for run in runs) == MAX_MENTIONS
    assert runs[-1].text.endswith(token(many[-1]))  # past the bound: the token as typed


@pytest.fixture
def ann(tmp_path):
    manager = GroupManager(Config(tmp_path / "ann", name="Ann", iface="127.0.0.1", zeroconf=False), lambda e: None)
    manager.gid = manager.create_group("mentions")
    manager._on_control_datagrams(arriving([wire.encode(CAROL, wire.Join(wire.sign_member(CAROL, manager.gid, "Carol", 1, True)))]))
    manager.flush()
    yield manager
    manager.store.close()


def from_carol(gid, seqno, text, name="Carol"):
    return wire.encode(CAROL, wire.signed_data(CAROL, gid, seqno, None, int(time.time() * 1000), name, text))


def test_send_with_mentions_signs_tokens_and_checks_the_list(ann):
    mid = ann.send(ann.gid, "hey @Carol, and @Nobody", None, [CAROL.pid])
    ann.flush()
    (sent,) = [m for m in ann.history(ann.gid) if m.mid == mid]
    assert sent.text == f"hey {token(CAROL.pid)}, and @Nobody" and sent.mentions == (CAROL.pid,)
    with pytest.raises(UsageError, match="pids"):
        ann.send(ann.gid, "x", None, "not a list")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="not a pid"):
        ann.send(ann.gid, "x", None, ["CAROL"])
    with pytest.raises(UsageError, match="too many"):
        ann.send(ann.gid, "x", None, [f"{i:032x}" for i in range(MAX_MENTIONS + 1)])


def test_mentions_lists_messages_that_mention_me_newest_first_across_groups_and_after_restart(ann, tmp_path):
    other = ann.create_group("other")
    ann._on_control_datagrams(arriving([wire.encode(CAROL, wire.Join(wire.sign_member(CAROL, other, "Carol", 1, True)))]))
    me = token(ann.pid)
    ann._on_data_datagrams(arriving([from_carol(ann.gid, 1, f"first {me}"), from_carol(ann.gid, 2, "not you"),
                                     from_carol(ann.gid, 3, f"{me} {me} twice")]))
    ann.flush()
    ann._on_data_datagrams(arriving([from_carol(other, 1, f"elsewhere {me}")]))
    ann.flush()
    assert [(m.gid, m.mid[1]) for m in ann.mentions(10)] == [(other, 1), (ann.gid, 3), (ann.gid, 1)]
    assert [m.mid[1] for m in ann.mentions(2)] == [1, 3]
    ann.store.commit()
    reopened = Store(ann.store.path)  # what a restart reads
    assert [m.mid[1] for m in reopened.mentions(ann.pid, 10)] == [1, 3, 1]
    reopened.close()


def test_a_deleted_mention_leaves_the_list_and_an_edit_shows_its_text(ann):
    mine = ann.send(ann.gid, f"note to self {token(ann.pid)}")
    ann.flush()
    assert [m.mid for m in ann.mentions(5)] == [mine]
    ann.edit(ann.gid, mine, f"edited {token(ann.pid)}")
    ann.flush()
    assert [m.text for m in ann.mentions(5)] == [f"edited {token(ann.pid)}"]
    ann.delete(ann.gid, mine)
    ann.flush()
    assert ann.mentions(5) == []


def test_a_store_from_before_mentions_indexes_what_it_holds_when_opened(tmp_path):
    store = Store(tmp_path / "m.db")
    message = ChatMessage("g", (CAROL.pid, 1), None, "Carol", f"hi {token(ANN)}", 1, 2, 0, b"s" * 66, CAROL.public_key)
    store.add_messages([message])
    store._db.execute("DROP TABLE mentions")  # as a data dir written before mentions existed
    store.commit()
    store.close()
    store = Store(tmp_path / "m.db")
    assert [m.mid for m in store.mentions(ANN, 5)] == [(CAROL.pid, 1)] and store.mentions(BOB, 5) == []
    store.close()


def test_the_mentions_query_stays_an_index_lookup_at_100k_messages(tmp_path):
    store = Store(tmp_path / "m.db")
    texts = [f"message {i} {token(ANN) if i % 1000 == 0 else ''}" for i in range(1, 100_001)]
    store.add_messages(ChatMessage("g", (CAROL.pid, i), None, "Carol", text, i, i, 0, b"s" * 66, CAROL.public_key)
                       for i, text in enumerate(texts, 1))
    store.commit()
    plan = " ".join(row[-1] for row in store._db.execute(
        "EXPLAIN QUERY PLAN SELECT gid, sender, seqno FROM mentions WHERE pid = ? ORDER BY delivery_order DESC "
        "LIMIT ?", (ANN, 50)))
    assert "SEARCH" in plan and "TEMP B-TREE" not in plan
    found = store.mentions(ANN, 50)
    assert len(found) == 50 and found[0].mid == (CAROL.pid, 100_000)
    store.close()


def test_json_rpc_send_takes_mentions_messages_carry_them_and_mentions_lists_them(tmp_path):
    asyncio.run(_json_rpc_session(tmp_path))


async def _json_rpc_session(tmp_path):
    peer, rpc = in_process_peer(tmp_path / "p")

    try:
        gid = (await rpc("create_group", desc="rpc"))[0]["gid"]
        pid = peer.manager.pid
        mid = (await rpc("send", gid=gid, text="@Pat, remember", parent=None, mentions=[pid]))[0]["mid"]
        peer.manager.flush()
        (message,) = (await rpc("history", gid=gid))[0]
        assert message["mentions"] == [pid] and message["text"] == f"{token(pid)}, remember"
        assert [m["mid"] for m in (await rpc("mentions"))[0]] == [mid] and (await rpc("mentions", limit=1))[0][0]["mid"] == mid
        assert "limit" in (await rpc("mentions", limit=0))[1] and "limit" in (await rpc("mentions", limit="5"))[1]
        assert "mentions" in (await rpc("send", gid=gid, text="x", mentions=pid))[1]
        assert "too many" in (await rpc("send", gid=gid, text="x", mentions=[f"{i:032x}" for i in range(50)]))[1]
    finally:
        peer.manager.store.close()
