"""m2mc-peer on private namespace LANs: discovery, join, threaded talk, leave, restart."""

import json

import pytest

from lan import Lan, LoopbackHost, PeerProcess

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
