"""Direct messages through whole GroupManagers (never started: no sockets, datagrams handed over by
the test) and m2mc-peer's JSON-RPC methods and notifications on top: the API of the contract."""

from __future__ import annotations

import json

import pytest

from m2mc.middleware import clock
from m2mc.middleware.addresses import Endpoint, GroupAddress
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.peer_core import CONTROL_ADDR
from m2mc.middleware.types import UsageError, format_mid
from m2mc.app.peer import JsonRpcPeer


class Peer:
    """A manager, its endpoint (10.77.0.<n>) and its JSON-RPC face, with what it notified."""

    def __init__(self, tmp_path, name: str, number: int) -> None:
        self.notes: list[dict] = []
        self.rpc = JsonRpcPeer(self.notes.append)
        self.manager = GroupManager(Config(tmp_path / name, name=name, iface="127.0.0.1", zeroconf=False), self.rpc)
        self.rpc.manager = self.manager
        self.endpoint = Endpoint(f"10.77.0.{number}", 47477)
        self.manager.core.reach.own = {self.endpoint}
        self.pid = self.manager.pid
        self._ids = 0

    def call(self, method: str, **params):
        self._ids += 1
        response = self.rpc.handle_line(json.dumps({"jsonrpc": "2.0", "id": self._ids, "method": method,
                                                    "params": params}))
        assert isinstance(response, dict)
        if "error" in response:
            raise RuntimeError(response["error"]["message"])
        return response["result"]

    def notified(self, method: str) -> list[dict]:
        return [n["params"] for n in self.notes if n["method"] == method]


def exchange(peers: list[Peer], rounds: int = 40) -> None:
    """Hand every datagram to where it goes (multicast to all, unicast to its endpoint), firing due timers."""
    for _ in range(rounds):
        moved = False
        for peer in peers:
            core = peer.manager.core
            deadline = core.get_timer()
            if deadline is not None and deadline <= clock.now():
                peer.manager._on_timer()
            for data, destination in core.datagrams_to_send():
                moved = True
                for other in peers:
                    if other is peer:
                        continue
                    batch = [(data, peer.endpoint)]
                    if isinstance(destination, Endpoint):
                        if destination == other.endpoint:
                            other.manager._on_unicast_datagrams(batch)
                    elif isinstance(destination, GroupAddress) and destination.host == CONTROL_ADDR:
                        other.manager._on_control_datagrams(batch)
                    elif isinstance(destination, GroupAddress):
                        other.manager._on_data_datagrams(batch)
        if not moved:
            for peer in peers:
                peer.manager.flush()


@pytest.fixture
def pair(tmp_path):
    ann, bob = Peer(tmp_path, "Ann", 1), Peer(tmp_path, "Bob", 2)
    gid = ann.manager.create_group("lunch")
    exchange([ann, bob])
    bob.manager.advertise()
    exchange([ann, bob])
    bob.manager.join_group(gid)
    exchange([ann, bob])
    yield ann, bob
    for peer in (ann, bob):
        peer.manager.store.close()


def test_send_history_conversations_read_and_notifications_over_json_rpc(pair, tmp_path):
    ann, bob = pair
    mid = ann.call("send_direct", pid=bob.pid, text="hello Bob")["mid"]
    assert mid == f"{ann.pid}:1"
    exchange([ann, bob], rounds=200)
    (delivered,) = bob.notified("direct_delivered")
    assert delivered.keys() == {"peer", "mid", "parent", "sender", "name", "text", "sent_at", "received_at",
                                "outgoing", "status", "late"}
    assert (delivered["peer"], delivered["mid"], delivered["sender"], delivered["name"], delivered["text"],
            delivered["outgoing"], delivered["status"]) == (ann.pid, mid, ann.pid, "Ann", "hello Bob", False,
                                                            "received")
    own = ann.notified("direct_delivered")
    assert [(m["mid"], m["outgoing"], m["status"]) for m in own] == [(mid, True, "queued")]
    assert [s["status"] for s in ann.notified("direct_status")] == ["sent", "delivered"]
    assert ann.notified("direct_status")[0].keys() == {"peer", "mid", "status"}
    reply = bob.call("send_direct", pid=ann.pid, text="hi", parent=mid)["mid"]
    exchange([ann, bob], rounds=200)
    history = ann.call("direct_history", pid=bob.pid)
    assert [(m["mid"], m["parent"], m["status"]) for m in history] == [(mid, None, "delivered"), (reply, mid,
                                                                                                 "received")]
    assert ann.call("direct_history", pid=bob.pid, limit=1)[0]["mid"] == reply
    assert ann.call("direct_history", pid=bob.pid, before=2)[0]["mid"] == mid
    (conversation,) = ann.call("list_conversations")
    assert conversation.keys() == {"peer", "name", "fingerprint", "last", "unread", "online"}
    assert (conversation["peer"], conversation["name"], conversation["unread"], conversation["last"]["mid"]) == \
        (bob.pid, "Bob", 1, reply)
    assert bob.call("mark_direct_read", pid=ann.pid, mid=mid) == {}
    exchange([ann, bob], rounds=200)
    assert ann.notified("direct_status")[-1] == {"peer": bob.pid, "mid": mid, "status": "read"}
    assert ann.call("read_receipts", on=False) == {"on": False}
    ann.call("mark_direct_read", pid=bob.pid, mid=reply)
    exchange([ann, bob], rounds=200)
    assert [s["status"] for s in bob.notified("direct_status") if s["mid"] == reply] == ["sent", "delivered"]
    assert ann.call("list_conversations")[0]["unread"] == 0


def test_errors_say_what_is_wrong(pair):
    ann, bob = pair
    with pytest.raises(RuntimeError, match="share a group"):
        ann.call("send_direct", pid="f" * 32, text="hi")
    with pytest.raises(RuntimeError, match="non-empty"):
        ann.call("send_direct", pid=bob.pid, text="")
    with pytest.raises(RuntimeError, match="parent"):
        ann.call("send_direct", pid=bob.pid, text="x", parent="nonsense")
    with pytest.raises(RuntimeError, match="not a message of this conversation"):
        ann.call("mark_direct_read", pid=bob.pid, mid=f"{bob.pid}:4")
    with pytest.raises(RuntimeError, match="'on'"):
        ann.call("read_receipts", on="yes")
    with pytest.raises(UsageError):
        ann.manager.send_direct(bob.pid, "x" * 8_001)


def test_export_log_leaves_direct_messages_out_unless_asked(pair, tmp_path):
    ann, bob = pair
    gid = ann.manager.groups()[0].gid
    ann.call("send", gid=gid, text="to the group")
    mid = ann.call("send_direct", pid=bob.pid, text="just to you")["mid"]
    exchange([ann, bob], rounds=200)
    bob.call("send_direct", pid=ann.pid, text="thanks", parent=mid)
    exchange([ann, bob], rounds=200)
    plain = tmp_path / "plain.jsonl"
    assert ann.call("export_log", path=str(plain))["messages"] == 1
    assert "just to you" not in plain.read_text()
    full = tmp_path / "full.jsonl"
    assert ann.call("export_log", path=str(full), direct=True)["messages"] == 3
    rows = [json.loads(line) for line in full.read_text().splitlines()]
    dms = [row for row in rows if row.get("direct")]
    conversation = "dm:" + ":".join(sorted((ann.pid, bob.pid)))
    assert [(row["gid"], row["text"], row["parent"]) for row in dms] == [
        (conversation, "just to you", None), (conversation, "thanks", mid)]
    assert set(dms[0]) >= set(rows[0]) - {"direct"}  # the group lines' fields, so the analytics read them alike
    assert format_mid((bob.pid, 1)) == dms[1]["mid"]
    # m2mc-thread-stats reads the lines as it reads a group's: a conversation of two
    pa = pytest.importorskip("pyarrow")
    from m2mc.app.analytics import kernels
    table, blank, malformed = kernels.parse_lines(pa.array(full.read_text().splitlines()))
    assert (table.num_rows, blank, malformed) == (3, 0, 0)
    assert table.column("gid").to_pylist()[1:] == [conversation, conversation]
    assert table.column("parent").to_pylist()[2] == mid
    with pytest.raises(RuntimeError, match="'direct'"):
        ann.call("export_log", path=str(full), direct="yes")
