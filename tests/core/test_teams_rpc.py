"""set_role, remove_member and their notifications over m2mc-peer's JSON-RPC (issue 44), through whole
GroupManagers that are never started (datagrams handed over by the test, tests/core/test_direct_rpc.py)."""

from __future__ import annotations

import pytest

from m2mc.middleware import clock, wire
from m2mc.middleware.addresses import Arrival, Via

from tests.core.test_direct_rpc import Peer, exchange


@pytest.fixture
def team(tmp_path):
    peers = [Peer(tmp_path, name, n) for n, name in enumerate(("Ann", "Bob", "Cat"), start=1)]
    ann = peers[0]
    gid = ann.manager.create_group("Team room")
    exchange(peers)
    for peer in peers[1:]:
        peer.manager.advertise()
        exchange(peers)
        peer.manager.join_group(gid)
        exchange(peers)
    yield gid, peers
    for peer in peers:
        peer.manager.store.close()


def _roles(peer, gid):
    (group,) = [g for g in peer.call("list_groups") if g["gid"] == gid]
    return {m["name"]: m["role"] for m in group["members"]}, [m["name"] for m in group["removed"]]


def test_roles_and_removal_over_json_rpc(team):
    gid, (ann, bob, cat) = team
    assert _roles(cat, gid) == ({"Ann": "owner", "Bob": "member", "Cat": "member"}, [])
    assert ann.call("set_role", gid=gid, pid=bob.pid, role="admin") == {}
    exchange([ann, bob, cat])
    assert _roles(cat, gid)[0]["Bob"] == "admin"
    assert cat.notified("role_changed") == [{"gid": gid, "pid": bob.pid, "name": "Bob", "role": "admin",
                                             "by": ann.pid, "by_name": "Ann"}]
    assert bob.call("remove_member", gid=gid, pid=cat.pid) == {}
    exchange([ann, bob, cat])
    assert _roles(ann, gid) == ({"Ann": "owner", "Bob": "admin"}, ["Cat"])
    assert ann.notified("member_removed") == [{"gid": gid, "pid": cat.pid, "name": "Cat", "by": bob.pid,
                                               "by_name": "Bob"}]
    (removed,) = cat.notified("removed_from_group")
    assert removed["text"] == "Bob removed you from Team room" and removed["gid"] == gid
    # Cat keeps its history, but the group is no longer joined and nothing new arrives.
    ann.call("send", gid=gid, text="after", parent=None)
    exchange([ann, bob, cat])
    assert [m["text"] for m in bob.call("history", gid=gid)] == ["after"]
    assert cat.call("history", gid=gid) == []
    (group,) = [g for g in cat.call("list_groups") if g["gid"] == gid]
    assert group["joined"] is False
    # A public group is public: the removed key cannot rejoin (its newer records never make it current).
    own = cat.manager.core.gjlp.groups[gid].members[cat.pid]
    rejoin = wire.sign_member(cat.manager.core.identity, gid, "Cat again", own.counter + 5, True)
    ann.manager.core.receive(wire.encode(cat.manager.core.identity, wire.Join(rejoin)), Arrival(None, Via.CONTROL), clock.now(),
                             clock.wall())
    assert cat.pid not in {m.pid for m in ann.manager.core.group(gid).members}
    ann.call("set_role", gid=gid, pid=bob.pid, role="member")
    exchange([ann, bob, cat])
    assert _roles(bob, gid)[0]["Bob"] == "member"
    assert [n["role"] for n in bob.notified("role_changed")] == ["admin", "member"]


def test_refusals_say_why(team):
    gid, (ann, bob, cat) = team
    with pytest.raises(RuntimeError, match="only the owner"):
        bob.call("set_role", gid=gid, pid=bob.pid, role="admin")
    with pytest.raises(RuntimeError, match="owner or an admin"):
        bob.call("remove_member", gid=gid, pid=cat.pid)
    with pytest.raises(RuntimeError, match="owner"):
        ann.call("remove_member", gid=gid, pid=ann.pid)
    with pytest.raises(RuntimeError, match='"admin" or "member"'):
        ann.call("set_role", gid=gid, pid=bob.pid, role="king")
    with pytest.raises(RuntimeError, match="not supported"):
        ann.call("remove_member", gid=gid, pid=cat.pid, new_passphrase="x")
    ann.call("remove_member", gid=gid, pid=cat.pid)
    with pytest.raises(RuntimeError, match="removed already|not a current member"):
        ann.call("remove_member", gid=gid, pid=cat.pid)
    with pytest.raises(RuntimeError, match="not a current member"):
        ann.call("set_role", gid=gid, pid=cat.pid, role="admin")
