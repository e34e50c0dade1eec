"""What a peer keeps per joined group is one record: leaving drops it whole (tests/testbed/peer_sim.py)."""

from m2mc.middleware import crypto
from m2mc.middleware.memory_store import MemoryStore
from tests.testbed.peer_sim import PeerLan


def test_leaving_a_private_group_drops_its_key_with_it_and_a_rejoin_takes_it_back():
    # The group's channel, key, operations and flags are one JoinedGroup that leave() drops: the
    # key stayed behind before, so the group's traffic was still decrypted after leaving.
    key = bytes(range(32))
    lan = PeerLan([MemoryStore(), MemoryStore()])
    ann, bob = lan.nodes
    gid = str(lan.run(ann, lambda core: core.create_group("secret", crypto.new_salt(), key, lan.now)))
    lan.settle(2.0)
    record = bob.core.joinable(gid, "passphrase")
    lan.run(bob, lambda core: core.join(record, key, lan.now, lan.now))
    lan.settle(5.0)
    lan.send(ann, gid, "before")
    lan.run(bob, lambda core: core.ops(gid))  # the group's operations, built
    lan.settle(1.0)
    assert [m.text for m in bob.history(gid)] == ["before"]
    lan.run(bob, lambda core: core.leave(gid, lan.now))
    assert gid not in bob.core.joined and bob.core.stats_dict()["groups_joined"] == 0
    assert bob.core.presence.get_timer([gid]) is None  # no beacon schedule left behind either
    before = bob.core.stats_dict()
    lan.send(ann, gid, "while away")
    lan.settle(1.0)
    after = bob.core.stats_dict()
    assert after["sealed_dropped"] > before["sealed_dropped"]  # unreadable now, not merely not ours
    assert after["not_member_dropped"] == before["not_member_dropped"]
    lan.run(bob, lambda core: core.join(core.known(gid), key, lan.now, lan.now))
    lan.send(ann, gid, "back")
    lan.settle(5.0)
    assert sorted(m.text for m in bob.history(gid)) == ["back", "before", "while away"]
