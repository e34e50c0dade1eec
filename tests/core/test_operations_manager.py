"""Operations through a whole GroupManager (never started: no sockets): API, errors, views, restart, forgery."""

import asyncio
import json

import pytest

from m2mc.middleware import crypto, wire
from m2mc.middleware.chatops import encode
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.events import Event, MessagesDelivered, MessagesUpdated, NoticesAdded, TopicChanged
from m2mc.middleware.types import UsageError
from tests.testbed.arrivals import arriving
from tests.testbed.jsonrpc import in_process_peer


class Recorder:
    def __init__(self):
        self.updated, self.topics, self.messages = [], [], []

    def __call__(self, event: Event) -> None:
        match event:
            case MessagesDelivered(messages=messages):
                self.messages += messages
            case MessagesUpdated(messages=messages):
                self.updated += messages
            case TopicChanged(topic=topic, by=by):
                self.topics.append((topic, by))


CAROL = crypto.Identity.generate()


def from_carol(gid, seqno, text, parent=None):
    return wire.encode(CAROL, wire.signed_data(CAROL, gid, seqno, parent, 0, "Carol", text))


@pytest.fixture
def ann(tmp_path):
    recorder = Recorder()
    manager = GroupManager(Config(tmp_path / "ann", name="Ann", iface="127.0.0.1", zeroconf=False), recorder)
    manager.recorder = recorder
    manager.gid = manager.create_group("ops")
    # Carol joins the way a peer does (a signed JOIN on the control channel): only members' datagrams count
    manager._on_control_datagrams(arriving([wire.encode(CAROL, wire.Join(wire.sign_member(CAROL, manager.gid, "Carol", 1, True)))]))
    manager.flush()
    yield manager
    if not getattr(manager, "store_closed", False):
        manager.store.close()


def feed(manager, *datagrams):
    manager._on_data_datagrams(arriving(list(datagrams)))
    manager.flush()


def by_mid(manager):
    return {m.mid: m for m in manager.history(manager.gid)}


def test_edit_delete_react_pin_topic_show_in_history_notifications_and_export(ann, tmp_path):
    gid = ann.gid
    hello = ann.send(gid, "helo", None)
    bye = ann.send(gid, "bye", hello)
    feed(ann, from_carol(gid, 1, "hi Ann", hello))
    carols = (CAROL.pid, 1)
    ann.edit(gid, hello, "hello")
    ann.delete(gid, bye)
    ann.react(gid, carols, "👍", True)
    ann.pin(gid, hello, True)
    ann.set_topic(gid, "  greetings  ")
    ann.flush()
    history = by_mid(ann)
    assert list(history) == [hello, bye, carols]  # operations never show as messages
    assert (history[hello].text, history[hello].edited, history[hello].pinned) == ("hello", 1, True)
    assert (history[bye].text, history[bye].deleted, history[bye].parent) == ("", True, hello)
    assert history[carols].reactions == {"👍": [ann.pid]}
    assert ann.topic(gid) == ("greetings", ann.pid) and ann.group(gid).topic == "greetings"
    assert [m.mid for m in ann.pinned(gid)] == [hello]
    assert [m.mid for m in ann.recorder.messages] == [hello, bye, carols]
    assert {m.mid for m in ann.recorder.updated} == {hello, bye, carols}
    assert ann.recorder.topics == [("greetings", ann.pid)]
    assert history[hello].to_json()["reactions"] == {} and history[carols].to_json()["reactions"] == {"👍": [ann.pid]}
    ann.react(gid, carols, "👍", False)
    ann.flush()
    assert by_mid(ann)[carols].reactions == {}
    path = tmp_path / "export.jsonl"
    assert ann.export_log(path, gid) == 3
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["text"], r["edited"], r["deleted"], r["pinned"]) for r in lines] == [
        ("hello", 1, False, True), ("", 0, True, False), ("hi Ann", 0, False, False)]


def test_errors_are_clear(ann):
    gid = ann.gid
    hello = ann.send(gid, "hello", None)
    feed(ann, from_carol(gid, 1, "mine"))
    carols = (CAROL.pid, 1)
    with pytest.raises(UsageError, match="not the author"):
        ann.edit(gid, carols, "yours now")
    # (Ann created the group: as its owner she may delete Carol's message for everyone, a moderation;
    # a member's refusal to delete another's is tested in test_teams_sim.)
    with pytest.raises(UsageError, match="unknown message"):
        ann.react(gid, (CAROL.pid, 99), "👍")
    with pytest.raises(UsageError, match="text too long"):
        ann.edit(gid, hello, "x" * 8000)
    with pytest.raises(UsageError, match="text too long"):
        ann.set_topic(gid, "x" * 301)
    with pytest.raises(UsageError, match="non-empty"):
        ann.edit(gid, hello, "  ")
    with pytest.raises(UsageError, match="operation marker"):
        ann.send(gid, encode("topic", None, 1, "sneaky"), None)
    topic_op = ann.set_topic(gid, "t")
    ann.flush()
    with pytest.raises(UsageError, match="is an operation"):
        ann.send(gid, "a reply to an operation", topic_op)
    with pytest.raises(UsageError, match="unknown message"):
        ann.pin(gid, topic_op, True)
    with pytest.raises(UsageError, match="unknown group|not a member"):
        ann.pin("no-such-group", hello, True)


def test_a_forged_edit_is_rejected_counted_and_changes_nothing(ann):
    gid = ann.gid
    hello = ann.send(gid, "hello", None)
    ann.flush()
    feed(ann, from_carol(gid, 1, encode("edit", None, 10**6, "forged"), hello),
         from_carol(gid, 2, encode("delete", None, 10**6), hello))
    assert by_mid(ann)[hello].text == "hello" and not by_mid(ann)[hello].deleted
    assert ann.stats_dict()["operations_rejected"] == 2
    assert ann.recorder.updated == []


def test_a_restart_rebuilds_the_same_state_from_the_store(ann, tmp_path):
    gid = ann.gid
    hello = ann.send(gid, "hello", None)
    ann.flush()
    ann.edit(gid, hello, "hello again")
    ann.react(gid, hello, "🎉")
    ann.set_topic(gid, "restarts")
    ann.flush()
    before = ann.history(gid), ann.topic(gid)
    ann.store.close()
    ann.store_closed = True
    again = GroupManager(Config(tmp_path / "ann", iface="127.0.0.1", zeroconf=False))
    try:
        assert (again.history(gid), again.topic(gid)) == before
        assert again.groups()[0].topic == "restarts"
        second = again.edit(gid, hello, "third text")  # names the edit made before the restart
        again.flush()
        assert again.history(gid)[0].text == "third text" and again.history(gid)[0].edited == 2
        assert second[1] > hello[1]
    finally:
        again.store.close()


def test_json_rpc_methods_answer_and_notify_and_bad_params_get_clear_errors(tmp_path):
    asyncio.run(_json_rpc_session(tmp_path))


async def _json_rpc_session(tmp_path):
    lines = []
    peer, rpc = in_process_peer(tmp_path / "p", write=lines.append)

    try:
        gid = (await rpc("create_group", desc="rpc"))[0]["gid"]
        mid = (await rpc("send", gid=gid, text="hello", parent=None))[0]["mid"]
        assert (await rpc("edit", gid=gid, mid=mid, text="hello!"))[0]["mid"].startswith(peer.manager.pid)
        assert "mid" in (await rpc("react", gid=gid, mid=mid, emoji="👍", on=True))[0]
        assert "mid" in (await rpc("pin", gid=gid, mid=mid, on=True))[0]
        assert "mid" in (await rpc("set_topic", gid=gid, text="rpc topic"))[0]
        peer.manager.flush()
        message = (await rpc("history", gid=gid))[0][0]
        assert (message["text"], message["edited"], message["reactions"], message["pinned"]) == (
            "hello!", 1, {"👍": [peer.manager.pid]}, True)
        assert next(g for g in (await rpc("list_groups"))[0] if g["gid"] == gid)["topic"] == "rpc topic"
        methods = [line.get("method") for line in lines]
        assert "updated" in methods and "topic_changed" in methods
        topic_note = next(line for line in lines if line.get("method") == "topic_changed")
        assert topic_note["params"] == {"gid": gid, "topic": "rpc topic", "by": peer.manager.pid}
        assert "bad mid" in (await rpc("edit", gid=gid, mid="nonsense", text="x"))[1]
        assert "'on'" in (await rpc("pin", gid=gid, mid=mid, on="yes"))[1]
        assert "'text'" in (await rpc("set_topic", gid=gid))[1]
        assert (await rpc("delete", gid=gid, mid=mid))[1] == ""
        peer.manager.flush()
        assert "deleted" in (await rpc("edit", gid=gid, mid=mid, text="too late"))[1]
    finally:
        peer.manager.store.close()


def test_a_flush_scheduled_while_closing_touches_no_closed_store(tmp_path, caplog):
    """Input that arrives while close() awaits zeroconf schedules a flush; it must find nothing to do."""
    manager = GroupManager(Config(tmp_path / "m", name="Ann", iface="127.0.0.1", zeroconf=False))
    gid = manager.create_group("lunch")
    asyncio.run(manager.close())
    manager.core.send(gid, "written as the app closed", None, 1.0, 1.0)
    with caplog.at_level("ERROR"):
        manager.flush()
    assert not [r for r in caplog.records if "cannot store" in r.getMessage()], caplog.text


def test_topic_and_pin_notices_are_told_live_and_rebuilt_from_the_store_after_a_restart(ann, tmp_path):
    gid = ann.gid
    told = []

    def listener(event):
        if isinstance(event, NoticesAdded):
            told.extend(event.notices)

    hello = ann.send(gid, "hello", None)
    ann.flush()
    ann.listener = listener
    ann.set_topic(gid, "first")
    ann.pin(gid, hello)
    ann.set_topic(gid, "second")
    ann.pin(gid, hello, False)
    ann.flush()
    shown = [(n.kind, n.target, n.text, n.was) for n in ann.notices(gid)]
    assert shown == [("topic", None, "first", ""), ("pin", hello, "", ""), ("topic", None, "second", "first"),
                     ("unpin", hello, "", "")]
    assert [(n.kind, n.message.mid) for n in told] == [(n.kind, n.message.mid) for n in ann.notices(gid)]
    assert [m.text for m in ann.history(gid)] == ["hello"]  # scripts' history: the messages alone
    before = ann.notices(gid)
    ann.store.close()
    ann.store_closed = True
    again = GroupManager(Config(tmp_path / "ann", iface="127.0.0.1", zeroconf=False))
    try:
        assert again.notices(gid) == before
        assert [n.message.order for n in before] == sorted(n.message.order for n in before)
    finally:
        again.store.close()
