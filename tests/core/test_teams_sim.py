"""Roles, removal and re-key (issue 44) between whole peers on the simulated LAN (tests/testbed/peer_sim.py)."""

from __future__ import annotations

import json
import random

import pytest

from m2mc.middleware import crypto, wire
from m2mc.middleware.addresses import Arrival, Via
from m2mc.middleware.events import MemberRemoved, RemovedFromGroup, RoleChanged
from m2mc.middleware.manager import export_log
from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.store import Store
from m2mc.middleware.types import format_mid
from m2mc.middleware.types import UsageError
from tests.testbed.faults import FaultInjector
from tests.testbed.peer_sim import PeerLan

KEY = bytes(range(32))


class Capture:
    """Every datagram the LAN carries, with when and from whom (the attacker's view)."""

    def __init__(self, lan: PeerLan) -> None:
        self.lan = lan
        self.seen: list[tuple[float, str, bytes]] = []
        transmit = lan.transmit

        def tap(sender, datagrams):
            self.seen += [(lan.now, sender.name, d.data) for d in datagrams]
            transmit(sender, datagrams)

        lan.transmit = tap


def _team(n: int = 5, faults: FaultInjector | None = None, stores: list | None = None):
    lan = PeerLan(stores or [MemoryStore() for _ in range(n)], faults=faults)
    events = {node.name: [] for node in lan.nodes}
    for node in lan.nodes:
        record = node.recorder

        def recorder(event, record=record, name=node.name):
            events[name].append(event)
            record(event)

        node.recorder = recorder
    ann = lan.nodes[0]
    gid = str(lan.run(ann, lambda core: core.create_group("Team room", crypto.new_salt(), KEY, lan.now)))
    lan.settle(2.0)
    for node in lan.nodes[1:]:
        record = node.core.joinable(gid, "passphrase")
        lan.run(node, lambda core: core.join(record, KEY, lan.now, lan.now))
    lan.settle(8.0)
    return lan, gid, events


def _texts(node, gid):
    return sorted(m.text for m in node.core.history(gid))


def _readable_by(keys: crypto.GroupKeys, gid: str, data: bytes) -> bool:
    try:
        envelope = wire.decode(data, {gid: keys}.get)
    except wire.WireError:
        return False
    return envelope.sealed


def test_a_removed_member_reads_nothing_sent_after_and_the_others_converse_on():
    lan, gid, events = _team()
    ann, bob, cat, dan, eve = lan.nodes
    lan.run(ann, lambda core: core.set_role(gid, bob.pid, "admin"))
    lan.settle(2.0)
    for node in lan.nodes:
        assert node.core.group(gid).roles[bob.pid] == "admin"
        assert node.core.group(gid).roles[ann.pid] == "owner"
    assert any(isinstance(e, RoleChanged) and e.role == "admin" and e.by == ann.pid for e in events["peer3"])
    lan.send(cat, gid, "cat before")
    lan.settle(2.0)
    cats_keys = crypto.GroupKeys(dict(cat.core.joined[gid].cipher.keys), 0)  # everything Cat held
    capture = Capture(lan)
    removed_at = lan.now
    lan.run(bob, lambda core: core.remove_member(gid, cat.pid, lan.now))
    lan.settle(3.0)
    for text in ("after 1", "after 2"):
        lan.send(ann, gid, text)
        lan.send(dan, gid, text + " from dan")
    lan.run(ann, lambda core: core.operate(gid, "topic", None, lan.now, lan.now, text="new topic"))
    lan.settle(40.0)  # heartbeats, sync, everything a group says
    for node in (ann, bob, dan, eve):
        assert _texts(node, gid) == ["after 1", "after 1 from dan", "after 2", "after 2 from dan", "cat before"]
        assert cat.pid not in node.core.group(gid).roles and node.core.group(gid).removed[0].pid == cat.pid
    # Cat: told, history kept, nothing more.
    assert [e.by_name for e in events["peer2"] if isinstance(e, RemovedFromGroup)] == ["peer1"]
    assert gid not in cat.core.joined and _texts(cat, gid) == ["cat before"]
    assert any(isinstance(e, MemberRemoved) and e.pid == cat.pid for e in events["peer4"])
    # The attacker's view: every datagram since the removal, others' only, opened with Cat's keys.
    others = [(at, data) for at, name, data in capture.seen if name != cat.name]
    assert len(others) > 30
    opened = [at for at, data in others if _readable_by(cats_keys, gid, data)]
    assert opened == [], f"{len(opened)} of {len(others)} datagrams since {removed_at} opened with Cat's keys"
    # Cat's messages, operations and sync requests now are refused by every member (a hostile Cat
    # sends them with its old key).
    identity = cat.core.identity
    message = wire.signed_data(identity, gid, 50, None, int(lan.now * 1000), "Cat", "let me in")
    hostile = [wire.encode(identity, m, cats_keys) for m in (
        message, wire.Heartbeat(gid, 50, int(lan.now * 1000)), wire.SyncReq(gid, 99, ()),
        wire.KeyRequest(gid, ann.core.joined[gid].cipher.epoch, b""))]
    for node in (ann, dan):
        before = node.core.stats_dict()
        for data in hostile:
            lan.run(node, lambda core: core.receive(data, Arrival(None, Via.MULTICAST), lan.now, lan.now))
        after = node.core.stats_dict()
        assert after["stranger_dropped"] - before["stranger_dropped"] == 3
        assert after["key_requests_refused"] - before["key_requests_refused"] == 1  # no key: only its removal
    lan.settle(5.0)
    assert "let me in" not in _texts(ann, gid)
    # The owner cannot be removed, by an admin or anyone.
    with pytest.raises(UsageError, match="owner"):
        bob.core.remove_member(gid, ann.pid, lan.now)


def test_refusals_non_admin_stranger_forged_and_replayed():
    lan, gid, _ = _team(4)
    ann, bob, cat, dan = lan.nodes
    with pytest.raises(UsageError, match="owner or an admin"):
        dan.core.remove_member(gid, cat.pid, lan.now)
    with pytest.raises(UsageError, match="only the owner"):
        dan.core.set_role(gid, dan.pid, "admin")
    # A hostile member sends records it has no right to: they hold nowhere.
    dan_team = dan.core.joined[gid].team
    rogue = (wire.sign_role(dan.core.identity, gid, 1, "admin", dan.pid),
             wire.sign_role(dan.core.identity, gid, 2, "remove", cat.pid))
    data = wire.encode(dan.core.identity, wire.Roles(gid, rogue), dan.core.joined[gid].cipher)
    # A stranger (not a member) sends the owner's forged removal and its own.
    stranger = crypto.Identity.generate()
    forged = wire.RoleRecord(gid, ann.core.identity.public_key, 3, "remove", cat.pid, 0, 0, b"", bytes(64))
    stranger_data = wire.encode(stranger, wire.Roles(gid, (forged, wire.sign_role(stranger, gid, 4, "remove", bob.pid))),
                                dan.core.joined[gid].cipher)
    for node in (ann, bob, cat):
        lan.run(node, lambda core: core.receive(data, Arrival(None, Via.MULTICAST), lan.now, lan.now))
        lan.run(node, lambda core: core.receive(stranger_data, Arrival(None, Via.MULTICAST), lan.now, lan.now))
        view = node.core.group(gid)
        assert view.roles[dan.pid] == "member" and not view.removed and len(view.members) == 4
    del dan_team
    # A replayed removal: once Ann removed Cat, the REKEY again changes nothing anywhere.
    capture = Capture(lan)
    lan.run(ann, lambda core: core.remove_member(gid, cat.pid, lan.now))
    lan.settle(3.0)
    rekeys = [data for _, name, data in capture.seen if name == ann.name and data[2] == wire.MsgType.REKEY]
    assert rekeys
    epoch = bob.core.joined[gid].cipher.epoch
    for data in rekeys:
        lan.run(bob, lambda core: core.receive(data, Arrival(None, Via.MULTICAST), lan.now, lan.now))
    assert bob.core.joined[gid].cipher.epoch == epoch and len(bob.core.group(gid).removed) == 1


def test_a_member_offline_during_the_removal_gets_the_key_when_back():
    lan, gid, _ = _team()
    ann, bob, cat, dan, eve = lan.nodes
    lan.kill(eve)
    lan.run(ann, lambda core: core.remove_member(gid, cat.pid, lan.now))
    lan.send(ann, gid, "while eve was away")
    lan.settle(5.0)
    capture = Capture(lan)
    lan.restart(eve)
    lan.settle(10.0)
    lan.send(eve, gid, "eve is back")
    lan.settle(10.0)
    for node in (ann, bob, dan, eve):
        assert _texts(node, gid) == ["eve is back", "while eve was away"], node.name
    assert eve.core.group(gid).removed[0].pid == cat.pid
    cats_keys = crypto.GroupKeys({0: KEY}, 0)
    eves = [data for _, name, data in capture.seen if name == eve.name]
    assert eves and not any(_readable_by(cats_keys, gid, data) for data in eves)


def test_messages_concurrent_with_the_removal_converge():
    """The ordering rule (protocol.md, Roles and removal): the removed member's messages up to the
    removal's cut stay, the rest are refused by all; others' messages sealed before they applied
    the removal are part of the group (and readable by the removed member)."""
    for seed in range(3):
        lan, gid, _ = _team(5, FaultInjector(delay=(0.001, 0.02), reorder=0.3, rng=random.Random(seed)))
        ann, bob, cat, dan, eve = lan.nodes
        lan.send(cat, gid, "cat 1")
        lan.settle(1.0)
        lan.send(cat, gid, "cat 2 concurrent")
        lan.run(ann, lambda core: core.remove_member(gid, cat.pid, lan.now))
        lan.send(dan, gid, "dan concurrent")
        lan.send(cat, gid, "cat 3 concurrent")
        lan.settle(30.0)
        shown = {node.name: [m.mid for m in node.core.history(gid)] for node in (ann, bob, dan, eve)}
        assert len({tuple(sorted(v)) for v in shown.values()}) == 1, shown
        texts = _texts(ann, gid)
        assert "cat 1" in texts and "dan concurrent" in texts and "cat 3 concurrent" not in texts


def test_twenty_percent_loss_during_the_rekey_loses_nothing():
    lan, gid, _ = _team(5)
    ann, bob, cat, dan, eve = lan.nodes
    lan.faults.drop = 0.2
    lan.run(ann, lambda core: core.remove_member(gid, cat.pid, lan.now))
    for i in range(5):
        lan.send(lan.nodes[[0, 1, 3, 4][i % 4]], gid, f"m{i}")
        lan.settle(0.5)
    lan.settle(30.0)
    lan.faults.drop = 0.0
    lan.settle(10.0)
    for node in (ann, bob, dan, eve):
        assert _texts(node, gid) == [f"m{i}" for i in range(5)], node.name
        assert node.core.joined[gid].cipher.epoch == ann.core.joined[gid].cipher.epoch != 0


def test_roles_and_keys_survive_a_restart():
    lan, gid, _ = _team(3)
    ann, bob, cat = lan.nodes
    lan.run(ann, lambda core: core.set_role(gid, bob.pid, "admin"))
    lan.settle(1.0)
    lan.run(bob, lambda core: core.remove_member(gid, cat.pid, lan.now))
    lan.settle(3.0)
    epoch = bob.core.joined[gid].cipher.epoch
    lan.kill(bob)
    lan.restart(bob)
    lan.settle(5.0)
    assert bob.core.group(gid).roles[bob.pid] == "admin" and bob.core.joined[gid].cipher.epoch == epoch
    assert 0 in bob.core.joined[gid].cipher.keys  # old epochs' keys stay, to read old messages
    lan.kill(cat)
    lan.restart(cat)
    assert gid not in cat.core.joined and not cat.core.group(gid).joined


def test_a_removed_member_that_lost_the_rekey_learns_of_its_removal_by_asking():
    lan, gid, events = _team(4)
    ann, bob, cat, dan = lan.nodes
    for source in range(4):
        lan.links[(source, 2)] = None  # Cat hears nothing of the re-key
    lan.run(ann, lambda core: core.remove_member(gid, cat.pid, lan.now))
    lan.settle(5.0)
    assert gid in cat.core.joined
    lan.links.clear()
    lan.send(ann, gid, "under the new key")  # Cat cannot open it: it asks for the key
    lan.settle(10.0)
    assert [e.by for e in events["peer2"] if isinstance(e, RemovedFromGroup)] == [ann.pid]
    assert "under the new key" not in _texts(cat, gid)


def test_a_lost_roles_datagram_in_a_public_group_is_sent_again():
    lan = PeerLan([MemoryStore() for _ in range(3)])
    ann, bob, cat = lan.nodes
    gid = lan.create_group(ann, "open")
    lan.join_all(gid)
    lan.links[(0, 1)] = None
    lan.run(ann, lambda core: core.remove_member(gid, cat.pid, lan.now))
    lan.settle(0.5)
    assert not bob.core.group(gid).removed
    lan.links.clear()
    lan.settle(5.0)
    assert [m.pid for m in bob.core.group(gid).removed] == [cat.pid]


def test_after_a_rekey_only_an_invite_admits_and_only_once():
    lan = PeerLan([MemoryStore() for _ in range(6)])
    ann, bob, cat, dan, fay, gus = lan.nodes
    gid = str(lan.run(ann, lambda core: core.create_group("Team room", crypto.new_salt(), KEY, lan.now)))
    lan.settle(2.0)
    for node in (bob, cat, dan):
        record = node.core.joinable(gid, "passphrase")
        lan.run(node, lambda core: core.join(record, KEY, lan.now, lan.now))
    lan.settle(8.0)
    lan.run(ann, lambda core: core.remove_member(gid, cat.pid, lan.now))
    lan.settle(3.0)
    # The passphrase no longer admits: Gus joins with it, and nobody takes his record.
    record = gus.core.joinable(gid, "passphrase")
    lan.run(gus, lambda core: core.join(record, KEY, lan.now, lan.now))
    lan.settle(8.0)
    assert gus.pid not in {m.pid for m in ann.core.group(gid).members}
    assert ann.core.stats_dict()["joins_not_admitted"] >= 1
    # Dan (any member) makes an invite; Fay uses it and is in, with the current key.
    link = lan.run(dan, lambda core: core.invite(gid))
    assert "&secret=" in link
    invite = fay.core.accept_invite(link, lan.now)
    lan.run(fay, lambda core: core.request_admission(gid, invite.secret, lan.now))
    lan.settle(10.0)
    assert gid in fay.core.joined
    assert fay.core.joined[gid].cipher.epoch == ann.core.joined[gid].cipher.epoch != 0
    for node in (ann, bob, dan):
        assert fay.pid in {m.pid for m in node.core.group(gid).members}, node.name
    lan.send(fay, gid, "hello from Fay")
    lan.send(bob, gid, "welcome Fay")
    lan.settle(10.0)
    for node in (ann, bob, dan, fay):
        assert {"hello from Fay", "welcome Fay"} <= set(_texts(node, gid)), node.name
    assert cat.pid in {m.pid for m in fay.core.group(gid).removed}  # Fay learnt the roles
    # The same invite does not admit Gus.
    lan.run(gus, lambda core: core.leave(gid, lan.now))
    lan.run(gus, lambda core: core.request_admission(gid, invite.secret, lan.now))
    lan.settle(6.0)
    assert gid not in gus.core.joined
    assert dan.core.stats_dict()["admissions_refused"] >= 1


def test_two_removals_at_once_end_with_a_key_neither_removed_member_holds():
    lan, gid, _ = _team(5, FaultInjector(delay=(0.005, 0.01)))
    ann, bob, cat, dan, eve = lan.nodes
    for admin in (bob, dan):
        lan.run(ann, lambda core, admin=admin: core.set_role(gid, admin.pid, "admin"))
    lan.settle(2.0)
    # Bob removes Cat and Dan removes Eve within the same millisecond: each re-key reaches the member
    # the other removes.
    lan.run(bob, lambda core: core.remove_member(gid, cat.pid, lan.now))
    lan.run(dan, lambda core: core.remove_member(gid, eve.pid, lan.now))
    lan.settle(10.0)
    epochs = {node.name: node.core.joined[gid].cipher.epoch for node in (ann, bob, dan)}
    assert len(set(epochs.values())) == 1, epochs
    # Whatever Cat and Eve kept of the traffic, the current key was sealed to neither of them.
    current = ann.core.joined[gid].cipher.epoch
    parts = ann.core.teams[gid].parts[current].values()
    holders = {pid for part in parts for pid, _ in part.keys}
    assert holders and not holders & {cat.pid, eve.pid}, holders
    lan.send(ann, gid, "only the three of us")
    lan.settle(5.0)
    for node in (ann, bob, dan):
        assert "only the three of us" in _texts(node, gid)
    for node in (cat, eve):
        assert "only the three of us" not in _texts(node, gid)


def test_a_restart_holds_sending_only_until_the_group_is_heard():
    lan, gid, _ = _team(3)
    ann, bob, cat = lan.nodes
    lan.kill(cat)  # away for good
    lan.kill(bob)
    lan.restart(bob)
    assert not bob.core.joined[gid].team.may_send(lan.now)
    lan.send(bob, gid, "back")
    lan.settle(1.0)
    assert "back" not in _texts(ann, gid)  # held: Bob has not heard the group under its key yet
    lan.settle(4.0)
    assert "back" in _texts(ann, gid)  # Ann heard (one member of two): well before the 15 s


def test_an_admin_removes_anyones_message_for_all_and_nobody_else_can():
    from m2mc.middleware import chatops

    lan = PeerLan([MemoryStore() for _ in range(4)])
    ann, bob, cat, dan = lan.nodes
    gid = lan.create_group(ann, "open")
    lan.join_all(gid)
    lan.run(ann, lambda core: core.set_role(gid, bob.pid, "admin"))
    spam = lan.send(cat, gid, "buy cheap watches")
    lan.settle(3.0)
    with pytest.raises(UsageError, match="owner or an\\s+admin"):
        dan.core.operate(gid, "delete", spam, lan.now, lan.now)
    # A hostile Dan sends a moderation anyway: it holds nowhere (Dan is no admin).
    ops = dan.core.ops(gid)
    text = chatops.encode("moderate", None, ops.core.clock + 1)
    lan.run(dan, lambda core: core.channel(gid).compose("Dan", text, spam, lan.now, lan.now))
    lan.settle(3.0)
    for node in lan.nodes:
        (shown,) = [m for m in node.core.history(gid) if m.mid == spam]
        assert shown.text == "buy cheap watches" and not shown.deleted, node.name
    lan.run(bob, lambda core: core.operate(gid, "delete", spam, lan.now, lan.now))
    lan.settle(3.0)
    for node in lan.nodes:
        (shown,) = [m for m in node.core.history(gid) if m.mid == spam]
        assert shown.deleted and shown.text == "" and shown.removed_by == bob.pid, node.name
        assert shown.to_json()["removed_by"] == bob.pid
    # Taking Bob's role back does not bring the message back.
    lan.run(ann, lambda core: core.set_role(gid, bob.pid, "member"))
    lan.settle(3.0)
    assert [m for m in dan.core.history(gid) if m.mid == spam][0].removed_by == bob.pid


def test_the_owner_lets_only_admins_pin_and_set_the_topic():
    from m2mc.middleware import chatops

    lan = PeerLan([MemoryStore() for _ in range(3)])
    ann, bob, dan = lan.nodes
    gid = lan.create_group(ann, "open")
    lan.join_all(gid)
    note = lan.send(ann, gid, "the plan")
    lan.settle(2.0)
    lan.run(dan, lambda core: core.operate(gid, "topic", None, lan.now, lan.now, text="Dan's topic"))
    lan.settle(2.0)
    assert bob.core.group(gid).topic == "Dan's topic"
    lan.run(ann, lambda core: core.set_role(gid, bob.pid, "admin"))
    with pytest.raises(UsageError, match="only the owner"):
        dan.core.set_admins_only(gid, True)
    lan.run(ann, lambda core: core.set_admins_only(gid, True))
    lan.settle(3.0)
    for node in lan.nodes:
        view = node.core.group(gid)
        assert view.admins_only and view.topic == "", node.name  # Dan's topic counts no more
    with pytest.raises(UsageError, match="only the owner and admins"):
        dan.core.operate(gid, "pin", note, lan.now, lan.now, on=True)
    ops = dan.core.ops(gid)  # a hostile Dan pins anyway: it counts nowhere
    text = chatops.encode("pin", None, ops.core.clock + 1, on=True)
    lan.run(dan, lambda core: core.channel(gid).compose("Dan", text, note, lan.now, lan.now))
    lan.settle(2.0)
    for node in lan.nodes:
        assert node.core.ops(gid).pinned() == [] and not node.core.messages(gid, [note])[0].pinned, node.name
    lan.run(bob, lambda core: core.operate(gid, "pin", note, lan.now, lan.now, on=True))
    lan.run(bob, lambda core: core.operate(gid, "topic", None, lan.now, lan.now, text="Bob's topic"))
    lan.settle(2.0)
    for node in lan.nodes:
        assert node.core.ops(gid).pinned() == [note] and node.core.group(gid).topic == "Bob's topic", node.name
    lan.run(ann, lambda core: core.set_admins_only(gid, False))
    lan.settle(3.0)
    assert not dan.core.group(gid).admins_only


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_search_mentions_and_the_export_leave_out_what_a_removed_member_sent_past_its_cut(tmp_path, store):
    """Dan stored Cat's second message before the removal reached it; the removal's cut (Ann's,
    who never got that message) leaves it out of Dan's history, and so out of search, mentions
    and the exported log, as it is out of history.  Cat's message before the cut stays in all."""
    stores = [Store(tmp_path / f"peer{i}.sqlite3") for i in range(4)] if store == "sqlite" else None
    lan, gid, _ = _team(4, stores=stores)
    ann, bob, cat, dan = lan.nodes
    before = lan.send(cat, gid, f"zebra before <@{dan.pid}>")
    lan.settle(2.0)
    lan.links[(0, 1)] = lan.links[(0, 3)] = 0.05  # Ann's removal reaches Bob and Dan after...
    after = lan.send(cat, gid, f"zebra after <@{dan.pid}>")  # ...this, which Ann has not yet
    lan.run(ann, lambda core: core.remove_member(gid, cat.pid, lan.now))
    lan.settle(1.0)
    lan.links.clear()
    lan.settle(10.0)
    assert dan.store.messages(gid, [after]), "Dan stored Cat's message past the cut: the case under test"
    assert ann.core.group(gid).removed[0].pid == cat.pid and not ann.store.messages(gid, [after])
    for node in (dan, bob):
        assert [m.mid for m in node.core.history(gid) if m.mid[0] == cat.pid] == [before]
        assert [hit.mid for hit, _ in node.core.search("zebra")] == [before]
        assert [hit.mid for hit, _ in node.core.search("zebra", gid=gid, by_time=True)] == [before]
        assert [hit.mid for hit, _ in node.core.search("zebra", sender=cat.pid, limit=1)] == [before]
    assert [m.mid for m in dan.core.mentions(10)] == [before]
    assert [m.mid for m in dan.core.mentions(1)] == [before]  # the limit counts what is listed
    exported = tmp_path / "dan.jsonl"
    export_log(dan.core, exported)
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [line["mid"] for line in lines if line["sender"] == cat.pid] == [format_mid(before)]
