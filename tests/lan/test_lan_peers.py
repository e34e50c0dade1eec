"""m2mc-peer on private namespace LANs: discovery, join, threaded talk, leave, restart."""

import json

import pytest

from tests.testbed.lan import Lan, LoopbackHost, PeerProcess

pytestmark = pytest.mark.netns


@pytest.fixture
def loopback():
    host = LoopbackHost()
    yield host
    host.close()


@pytest.fixture
def lan3():
    lan = Lan(3)
    yield lan
    lan.close()


def stop_all(*peers):
    for peer in peers:
        peer.shutdown()


def is_after_parent(history):
    position = {m["mid"]: i for i, m in enumerate(history)}
    return all(m["parent"] is None or position.get(m["parent"], 10**9) < position[m["mid"]] for m in history)


def test_two_peers_on_one_host_over_loopback(loopback, tmp_path):
    a = PeerProcess(loopback.name, "127.0.0.1", tmp_path / "a", "Ann")
    b = PeerProcess(loopback.name, "127.0.0.1", tmp_path / "b", "Bob")
    try:
        gid = a.call("create_group", {"desc": "Loopback lunch"})["gid"]
        b.wait_notification("group_discovered", lambda p: p["gid"] == gid)
        b.call("join_group", {"gid": gid})
        a.wait_notification("member_joined", lambda p: p["gid"] == gid and p["name"] == "Bob")
        mid = a.call("send", {"gid": gid, "text": "pizza?", "parent": None})["mid"]
        b.wait_for(lambda: b.delivered(gid), what="Ann's message")
        b.call("send", {"gid": gid, "text": "yes!", "parent": mid})
        a.wait_for(lambda: len(a.delivered(gid)) == 2, what="Bob's reply")
        assert [m["text"] for m in a.call("history", {"gid": gid})] == ["pizza?", "yes!"]
        assert a.call("history", {"gid": gid})[1]["parent"] == mid
    finally:
        stop_all(a, b)


def test_three_hosts_discover_join_talk_in_threads_and_leave(lan3, tmp_path):
    a, b, c = (
        PeerProcess(host, addr, tmp_path / name, name)
        for host, addr, name in zip(lan3.hosts, lan3.addresses, ["Ann", "Bob", "Cat"])
    )
    try:
        gid = a.call("create_group", {"desc": "Three hosts"})["gid"]
        for peer in (b, c):
            # Both discovery paths report the group: GJLP at once, zeroconf within a few seconds.
            peer.wait_for(lambda p=peer: any(
                g["gid"] == gid and {"gjlp", "zeroconf"} <= set(g["sources"]) for g in p.call("list_groups")
            ), timeout=20, what="the group via GJLP and zeroconf")
            peer.call("join_group", {"gid": gid})
        for peer in (a, b, c):
            peer.wait_for(lambda p=peer: {m["name"] for g in p.call("list_groups") if g["gid"] == gid
                                          for m in g["members"]} == {"Ann", "Bob", "Cat"}, what="3 members")

        q = a.call("send", {"gid": gid, "text": "Where is lunch?", "parent": None})["mid"]
        b.wait_for(lambda: b.delivered(gid), what="the question")
        c.wait_for(lambda: c.delivered(gid), what="the question")
        r1 = b.call("send", {"gid": gid, "text": "Canteen", "parent": q})["mid"]
        r2 = c.call("send", {"gid": gid, "text": "Pizza place", "parent": q})["mid"]
        for peer in (a, b, c):
            peer.wait_for(lambda p=peer: len(p.delivered(gid)) == 3, what="both replies")
        b.call("send", {"gid": gid, "text": "Pizza it is", "parent": r2})
        a.call("send", {"gid": gid, "text": "New topic", "parent": None})
        for peer in (a, b, c):
            peer.wait_for(lambda p=peer: len(p.delivered(gid)) == 5, what="all five messages")

        histories = [peer.call("history", {"gid": gid}) for peer in (a, b, c)]
        assert all(is_after_parent(h) for h in histories)
        as_sets = [{(m["mid"], m["parent"], m["text"]) for m in h} for h in histories]
        assert as_sets[0] == as_sets[1] == as_sets[2]
        assert {(m["mid"], m["parent"]) for m in histories[0]} >= {(r1, q), (r2, q)}

        c.call("leave_group", {"gid": gid})
        for peer in (a, b):
            peer.wait_notification("member_left", lambda p: p["gid"] == gid and p["name"] == "Cat")
            group = next(g for g in peer.call("list_groups") if g["gid"] == gid)
            assert [m["name"] for m in group["left"]] == ["Cat"]
            assert {m["name"] for m in group["members"]} == {"Ann", "Bob"}

        out = tmp_path / "export.jsonl"
        assert a.call("export_log", {"path": str(out), "gid": gid})["messages"] == 5
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        assert {"gid", "group_desc", "mid", "parent", "sender", "sender_name", "text", "sent_at",
                "received_at"} <= set(rows[0])
        assert rows[0]["group_desc"] == "Three hosts" and rows[0]["sent_at"].endswith("Z")
    finally:
        stop_all(a, b, c)


def test_restart_keeps_pid_history_and_seqnos(lan3, tmp_path):
    a = PeerProcess(lan3.hosts[0], lan3.addresses[0], tmp_path / "a", "Ann")
    b = PeerProcess(lan3.hosts[1], lan3.addresses[1], tmp_path / "b", "Bob")
    try:
        pid = a.call("whoami")["pid"]
        gid = a.call("create_group", {"desc": "Persistent"})["gid"]
        b.wait_notification("group_discovered", lambda p: p["gid"] == gid)
        b.call("join_group", {"gid": gid})
        first = a.call("send", {"gid": gid, "text": "one", "parent": None})["mid"]
        a.call("send", {"gid": gid, "text": "two", "parent": first})
        b.wait_for(lambda: len(b.delivered(gid)) == 2, what="two messages")
        before = a.call("history", {"gid": gid})
        bob = b.call("whoami")["pid"]
        b.wait_for(lambda: b.call("presence", {"gid": gid})[pid] == "online", what="Ann online at Bob")
        assert a.shutdown() == 0
        # Ann's goodbye: offline at Bob at once, not "away" for the 50 s her beacons would take to stop.
        b.wait_for(lambda: b.call("presence", {"gid": gid})[pid] == "offline", timeout=3, what="Ann offline")

        a = PeerProcess(lan3.hosts[0], lan3.addresses[0], tmp_path / "a", "Ann")
        assert a.call("whoami")["pid"] == pid
        # Back, Ann sees Bob online within seconds (his early beacon), not after his next one (30 s).
        a.wait_for(lambda: a.call("presence", {"gid": gid}).get(bob) == "online", timeout=6, what="Bob online at Ann")
        b.wait_for(lambda: b.call("presence", {"gid": gid})[pid] == "online", timeout=3, what="Ann back at Bob")
        assert a.call("history", {"gid": gid}) == before
        third = a.call("send", {"gid": gid, "text": "three", "parent": first})["mid"]
        assert third == f"{pid}:3"
        b.wait_for(lambda: len(b.delivered(gid)) == 3, what="the message after the restart")
        assert b.delivered(gid)[-1]["parent"] == first
        joined = [g for g in a.call("list_groups") if g["gid"] == gid]
        assert joined and joined[0]["joined"]
    finally:
        stop_all(a, b)


def test_bad_requests_get_clear_errors_and_never_kill_the_peer(loopback, tmp_path):
    a = PeerProcess(loopback.name, "127.0.0.1", tmp_path / "a", "Ann", extra=["--no-zeroconf"])
    try:
        gid = a.call("create_group", {"desc": "Errors"})["gid"]
        cases = [
            ("join_group", {"gid": "nope"}, "unknown group"),
            ("send", {"gid": "nope", "text": "x"}, "unknown group"),
            ("send", {"gid": gid, "text": "x", "parent": "garbage"}, "bad parent"),
            ("send", {"gid": gid, "text": "x", "parent": "ab:99"}, "bad parent"),
            ("send", {"gid": gid, "text": "x" * 9000}, "too long"),
            ("send", {"gid": gid}, "text"),
            ("send", {"gid": gid, "text": "half a pair \ud800"}, "lone surrogate"),
            ("create_group", {"desc": "\udfff"}, "lone surrogate"),
            ("no_such_method", {}, "unknown method"),
            ("create_group", {"desc": ""}, "description"),
            ("export_log", {"path": "/proc/nope/x.jsonl"}, "cannot write"),
        ]
        for method, params, complaint in cases:
            response = a.request(method, params)
            assert complaint in response["error"]["message"], (method, response)
        a.send_raw(b"{not json")
        a.send_raw(b'{"jsonrpc": "2.0", "id": 77, "params": {}}')
        assert a.call("whoami")["name"] == "Ann"
        assert a.call("send", {"gid": gid, "text": "fine"})["mid"].endswith(":1")  # no seqno was spent on errors
        stats = a.call("stats")
        assert {"datagrams_in", "datagrams_out", "malformed_dropped", "pending"} <= set(stats)
    finally:
        a.shutdown()
