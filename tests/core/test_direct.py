"""Direct messages between whole in-process peers (tests/testbed/peer_sim.py, unicast on, a hand clock):
round trip, loss and repair, the three-party causal chain, queued messages across restarts of both
sides, statuses and read receipts, replays, and each bound of middleware/direct.py."""

from __future__ import annotations

import random

import pytest

from m2mc.middleware import crypto, direct, wire
from m2mc.middleware.addresses import Arrival, Via
from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.store import Store
from m2mc.middleware.types import UsageError
from tests.testbed.faults import FaultInjector
from tests.testbed.peer_sim import BEFORE_TRANSMIT, PeerLan, SimNode


def lan_of(count: int, faults: FaultInjector | None = None, stores=None, seed: int = 1) -> PeerLan:
    """``count`` peers on one LAN, all members of one group (so each knows the others' keys)."""
    lan = PeerLan(stores or [MemoryStore() for _ in range(count)], faults, seed=seed, unicast=True)
    gid = lan.create_group(lan.nodes[0])
    lan.join_all(gid)
    if faults is not None and faults.drop:
        lan.settle(30.0)  # joins repaired
    return lan


def dm(lan: PeerLan, node: SimNode, to: SimNode, text: str, parent=None, crash=None):
    return lan.run(node, lambda core: core.send_direct(to.pid, text, parent, lan.now), crash)


def shown(node: SimNode, peer: SimNode, outgoing: bool = False) -> list[str]:
    """What ``node``'s user was shown of the conversation with ``peer`` (incoming, or own sends)."""
    return [m.text for m in node.recorder.direct if m.peer == peer.pid and m.outgoing == outgoing]


def statuses(node: SimNode, mid) -> list[str]:
    return [s.status for s in node.recorder.statuses if s.mid == mid]


def stored(node: SimNode, peer: SimNode) -> list[tuple[str, str]]:
    return [(m.text, m.status) for m in node.core.direct_history(peer.pid)]


def test_round_trip_with_a_reply_statuses_and_the_conversation_views():
    lan = lan_of(2)
    ann, bob = lan.nodes
    hello = dm(lan, ann, bob, "hello Bob")
    assert shown(ann, bob, outgoing=True) == ["hello Bob"]  # own sends are shown as groups show them
    assert ann.recorder.direct[0].status == "queued"
    lan.settle(3.0)
    assert shown(bob, ann) == ["hello Bob"]
    assert statuses(ann, hello) == ["sent", "delivered"]
    reply = dm(lan, bob, ann, "hi Ann", parent=hello)
    lan.settle(3.0)
    got = [m for m in ann.recorder.direct if not m.outgoing]
    assert [(m.mid, m.parent, m.text, m.sender_name) for m in got] == [(reply, hello, "hi Ann", "peer1")]
    assert stored(ann, bob) == [("hello Bob", "delivered"), ("hi Ann", "received")]
    assert [m.order for m in ann.core.direct_history(bob.pid)] == [1, 2]
    assert [m.text for m in ann.core.direct_history(bob.pid, before=2)] == ["hello Bob"]
    assert [m.text for m in ann.core.direct_history(bob.pid, limit=1)] == ["hi Ann"]
    (view,) = ann.core.conversations(lan.now)
    assert (view.peer, view.name, view.unread, view.online, view.last.text) == (bob.pid, "peer1", 1, True, "hi Ann")
    assert view.fingerprint.replace(" ", "") == bob.pid
    with pytest.raises(UsageError, match="parent"):
        dm(lan, ann, bob, "to nothing", parent=(bob.pid, 9))


def test_loss_is_repaired_and_every_message_arrives_once_in_the_order_written():
    lan = lan_of(2, FaultInjector(drop=0.3, duplicate=0.1, reorder=0.3, reorder_by=0.05, rng=random.Random(7)))
    ann, bob = lan.nodes
    for i in range(25):
        dm(lan, ann, bob, f"a{i}")
        dm(lan, bob, ann, f"b{i}")
        lan.settle(0.05)
    lan.settle(120.0)
    assert shown(bob, ann) == [f"a{i}" for i in range(25)]
    assert shown(ann, bob) == [f"b{i}" for i in range(25)]
    assert {s for _, s in stored(ann, bob)} == {"delivered", "received"}
    assert ann.core.stats_dict()["direct_retransmitted"] > 0


def test_the_three_party_chain_is_delivered_in_causal_order_when_a_to_b_is_slow():
    lan = lan_of(3)
    a, b, c = lan.nodes
    for x, y in ((a, b), (a, c), (c, b)):  # endpoints proven both ways before the test
        dm(lan, x, y, "warm-up")
        dm(lan, y, x, "warm-up")
    lan.settle(5.0)
    lan.links[(0, 1)] = 2.0  # A -> B takes two seconds more
    dm(lan, a, b, "the build is broken")
    dm(lan, a, c, "I told B")
    lan.settle(0.2)
    assert shown(c, a)[-1] == "I told B"
    dm(lan, c, b, "did you see A's note?")
    lan.settle(0.5)
    assert b.core.direct.held() == 1  # C's question came first: held
    assert shown(b, c) == ["warm-up"]
    lan.settle(3.0)
    order = [m.text for m in b.recorder.direct if not m.outgoing]
    assert order.index("the build is broken") < order.index("did you see A's note?")
    assert not any(m.late for m in b.recorder.direct)


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_message_to_an_absent_peer_waits_and_is_delivered_after_both_restart(kind, tmp_path):
    stores = [MemoryStore(), MemoryStore()] if kind == "memory" else \
        [Store(tmp_path / "ann.db"), Store(tmp_path / "bob.db")]
    lan = lan_of(2, stores=stores)
    ann, bob = lan.nodes
    dm(lan, ann, bob, "before")
    lan.settle(3.0)
    lan.kill(bob)
    lan.settle(60.0)  # Bob is away now
    sent_before = ann.core.stats_dict()["direct_sent"]
    waiting = dm(lan, ann, bob, "while you were out")
    lan.settle(120.0)
    assert ann.core.stats_dict()["direct_sent"] == sent_before  # nothing goes to an absent peer
    assert stored(ann, bob)[-1] == ("while you were out", "queued")
    lan.kill(ann)
    lan.restart(ann)
    lan.settle(5.0)
    lan.restart(bob)
    # Ann's probes of Bob's cached endpoint while he was away spent its usual HELLO budget; a
    # peer that direct messages wait for, heard from that endpoint, has a larger one (reach.py).
    lan.settle(10.0)
    assert shown(bob, ann) == ["before", "while you were out"]
    assert statuses(ann, waiting) == ["sent", "delivered"]
    assert stored(ann, bob)[-1] == ("while you were out", "delivered")
    assert ann.core.direct.queued() == 0


def test_read_receipts_and_receipts_off():
    lan = lan_of(2)
    ann, bob = lan.nodes
    first = dm(lan, ann, bob, "one")
    second = dm(lan, ann, bob, "two")
    lan.settle(3.0)
    lan.run(bob, lambda core: core.mark_direct_read(ann.pid, first))
    lan.settle(3.0)
    assert statuses(ann, first)[-1] == "read" and statuses(ann, second)[-1] == "delivered"
    assert [m.status for m in ann.core.direct_history(bob.pid)] == ["read", "delivered"]
    assert [m.status for m in bob.core.direct_history(ann.pid)] == ["read", "received"]
    assert bob.core.conversations(lan.now)[0].unread == 1
    lan.run(bob, lambda core: core.set_read_receipts(False))
    lan.run(bob, lambda core: core.mark_direct_read(ann.pid, second))
    lan.settle(10.0)
    assert statuses(ann, second)[-1] == "delivered"  # Bob read it, and did not say so
    assert bob.core.conversations(lan.now)[0].unread == 0
    lan.kill(bob)
    lan.restart(bob)
    assert not bob.core.direct.receipts  # the choice is kept


def test_a_read_receipt_lost_is_sent_again():
    lan = lan_of(2)
    ann, bob = lan.nodes
    mid = dm(lan, ann, bob, "one")
    lan.settle(3.0)
    lan.links[(1, 0)] = None  # Bob -> Ann cut
    lan.run(bob, lambda core: core.mark_direct_read(ann.pid, mid))
    lan.settle(2.0)
    del lan.links[(1, 0)]
    lan.settle(10.0)
    assert statuses(ann, mid)[-1] == "read"


def captured_direct(lan: PeerLan, ann: SimNode, bob: SimNode, text: str) -> list:
    """Ann's message to Bob and everything DIRECT the exchange put on the wire, as an onlooker keeps it."""
    captured = []
    transmit = lan.transmit
    lan.transmit = lambda sender, datagrams: (captured.extend(d for d in datagrams if d.data[:3] == b"\x93\x02\x0e"),
                                               transmit(sender, datagrams))
    dm(lan, ann, bob, text)
    lan.settle(3.0)
    lan.transmit = transmit
    assert captured
    return captured


def test_a_replayed_datagram_is_ignored():
    lan = lan_of(2)
    ann, bob = lan.nodes
    for datagram in captured_direct(lan, ann, bob, "once"):
        lan.run(bob, lambda core: core.receive(datagram.data, Arrival(ann.endpoint, Via.UNICAST), lan.now, lan.now))
    lan.settle(3.0)
    assert shown(bob, ann) == ["once"]
    assert bob.core.stats_dict()["direct_duplicates"] >= 1


def test_a_replayed_datagram_does_not_make_its_sender_look_present():
    lan = lan_of(2)
    ann, bob = lan.nodes
    captured = captured_direct(lan, ann, bob, "once")
    bob.core.presence.gone(ann.pid)  # Ann said goodbye; someone replays what she sent earlier
    for datagram in captured:
        lan.run(bob, lambda core: core.receive(datagram.data, Arrival(ann.endpoint, Via.UNICAST), lan.now, lan.now))
    assert bob.core.presence.status(ann.pid, lan.now) == "offline"
    dm(lan, ann, bob, "back")  # a new message is fresh: she is here
    lan.settle(1.0)
    assert bob.core.presence.status(ann.pid, lan.now) == "online"


def test_a_direct_datagram_shows_no_pid_and_no_text():
    lan = lan_of(2)
    ann, bob = lan.nodes
    captured = []
    transmit = lan.transmit
    lan.transmit = lambda sender, datagrams: (captured.extend(datagrams), transmit(sender, datagrams))
    dm(lan, ann, bob, "a secret plan")
    lan.settle(3.0)
    directs = [d.data for d in captured if d.data[:3] == b"\x93\x02\x0e"]
    assert len(directs) >= 2  # the message and its ACK
    for data in directs:
        for needle in (ann.pid.encode(), bob.pid.encode(), bytes.fromhex(ann.pid), bytes.fromhex(bob.pid),
                       b"a secret plan", b"peer0"):
            assert needle not in data
        assert len(wire.direct_payload(data)) in crypto.DIRECT_SEALED_SIZES


# -- bounds ---------------------------------------------------------------------------------


def test_a_stranger_cannot_be_written_to_and_its_datagrams_cost_one_open_attempt():
    lan = lan_of(2)
    ann, bob = lan.nodes
    stranger = crypto.Identity.generate()
    with pytest.raises(UsageError, match="share a group"):
        dm(lan, ann, SimNode.__new__(SimNode), "x") if False else \
            lan.run(ann, lambda core: core.send_direct(stranger.pid, "x", None, lan.now))
    with pytest.raises(UsageError):
        lan.run(ann, lambda core: core.send_direct(ann.pid, "to myself", None, lan.now))
    with pytest.raises(UsageError):
        lan.run(ann, lambda core: core.send_direct(bob.pid, "  ", None, lan.now))
    body = b"\x93\x01\x01" + bytes(8)
    forged = wire.encode_direct(crypto.seal_direct(stranger, bob.pid, bob.core.identity.direct_public, body))
    lan.run(bob, lambda core: core.receive(forged, Arrival(ann.endpoint, Via.UNICAST), lan.now, lan.now))
    assert bob.core.stats_dict()["direct_unopened"] == 1
    assert bob.core.direct.conversations == {}  # a stranger leaves no state behind
    # A member's key under another pid does not open either: the signature is checked.
    lan.run(bob, lambda core: core.receive(forged[:-1] + bytes([forged[-1] ^ 1]), Arrival(ann.endpoint, Via.UNICAST), lan.now, lan.now))
    assert bob.core.stats_dict()["direct_unopened"] == 2
    # Sent to a group's multicast address instead of the endpoint: dropped unopened.
    lan.run(bob, lambda core: core.receive(forged, Arrival(ann.endpoint, Via.MULTICAST), lan.now, lan.now))
    assert bob.core.stats_dict()["direct_unopened"] == 2


def test_the_queue_per_peer_and_in_all_is_capped_with_a_clear_error_and_nothing_lost(monkeypatch):
    monkeypatch.setattr(direct, "MAX_QUEUED_PER_PEER", 3)
    monkeypatch.setattr(direct, "MAX_QUEUED", 5)
    lan = lan_of(3)
    ann, bob, cat = lan.nodes
    lan.kill(bob)
    lan.kill(cat)
    lan.settle(60.0)
    for i in range(3):
        dm(lan, ann, bob, f"b{i}")
    with pytest.raises(UsageError, match="wait for it already"):
        dm(lan, ann, bob, "one too many")
    dm(lan, ann, cat, "c0")
    dm(lan, ann, cat, "c1")
    with pytest.raises(UsageError, match="wait for their recipients"):
        dm(lan, ann, cat, "c2")
    lan.restart(bob)
    lan.restart(cat)
    lan.settle(10.0)
    assert shown(bob, ann) == ["b0", "b1", "b2"] and shown(cat, ann) == ["c0", "c1"]
    dm(lan, ann, bob, "room again")


def test_a_sender_with_too_many_unread_messages_waits_until_they_are_read(monkeypatch):
    monkeypatch.setattr(direct, "MAX_UNREAD", 3)
    lan = lan_of(2)
    ann, bob = lan.nodes
    mids = []
    for i in range(5):  # one at a time: a burst SES held and released at once may pass the cap by its hold
        mids.append(dm(lan, ann, bob, f"m{i}"))
        lan.settle(2.0)
    lan.settle(10.0)
    assert shown(bob, ann) == ["m0", "m1", "m2"]
    assert bob.core.stats_dict()["direct_refused_unread"] > 0
    assert statuses(ann, mids[3]) == ["sent"]  # not acknowledged: Ann keeps it and tries again
    lan.run(bob, lambda core: core.mark_direct_read(ann.pid, mids[2]))
    lan.settle(40.0)
    assert shown(bob, ann) == ["m0", "m1", "m2", "m3", "m4"]
    assert statuses(ann, mids[4])[-2:] == ["delivered", "read"] or statuses(ann, mids[4])[-1] == "delivered"


def test_a_flood_from_one_member_is_rate_limited(monkeypatch):
    lan = lan_of(2)
    ann, bob = lan.nodes
    mid = dm(lan, ann, bob, "x")
    captured = []
    transmit = lan.transmit
    lan.transmit = lambda sender, datagrams: (captured.extend(d for d in datagrams if d.data[:3] == b"\x93\x02\x0e"),
                                               transmit(sender, datagrams))
    lan.settle(1.0)
    lan.transmit = transmit
    replay = captured[0].data
    for _ in range(int(direct.SENDER_BURST) + 50):  # all at one instant
        bob.core.receive(replay, Arrival(ann.endpoint, Via.UNICAST), lan.now, lan.now)
    assert bob.core.stats_dict()["direct_rate_dropped"] >= 49
    assert statuses(ann, mid) == ["sent", "delivered"]


def test_a_seqno_far_ahead_of_the_first_gap_is_refused():
    lan = lan_of(2)
    ann, bob = lan.nodes
    conversation = ann.core.direct._conversation(bob.pid)
    conversation.next_seqno = direct.MAX_AHEAD + 1  # as if the first MAX_AHEAD were lost
    dm(lan, ann, bob, "far ahead")
    lan.settle(3.0)
    assert shown(bob, ann) == []
    assert bob.core.stats_dict()["direct_refused_ahead"] >= 1


def test_a_datagram_opening_to_garbage_is_counted_and_changes_nothing():
    lan = lan_of(2)
    ann, bob = lan.nodes
    dh = bob.core.identity.direct_public
    for body in (b"", b"\xc1", b"\x91\x07", b"\x97\x01\x00\xc0\x00\xa0\xa0\x90", b"\x96\x02\x00\x90\x00\x00\xc2"):
        sealed = wire.encode_direct(crypto.seal_direct(ann.core.identity, bob.pid, dh, body))
        lan.run(bob, lambda core: core.receive(sealed, Arrival(ann.endpoint, Via.UNICAST), lan.now, lan.now))
    assert bob.core.stats_dict()["direct_malformed"] >= 4
    assert shown(bob, ann) == []


# -- crashes, restarts and a full disk ------------------------------------------------------------


def chain_lan(kind: str = "memory", tmp_path=None) -> PeerLan:
    stores = [MemoryStore() for _ in range(3)] if kind == "memory" else \
        [Store(tmp_path / f"{i}.db") for i in range(3)]
    lan = lan_of(3, stores=stores)
    a, b, c = lan.nodes
    for x, y in ((a, b), (a, c), (c, b)):
        dm(lan, x, y, "warm-up")
        dm(lan, y, x, "warm-up")
    lan.settle(5.0)
    return lan


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_held_message_survives_a_restart_and_is_delivered_after_its_cause(kind, tmp_path):
    lan = chain_lan(kind, tmp_path)
    a, b, c = lan.nodes
    lan.links[(0, 1)] = None  # A -> B lost for now
    dm(lan, a, b, "the build is broken")
    dm(lan, a, c, "I told B")
    lan.settle(0.2)
    dm(lan, c, b, "did you see A's note?")
    lan.settle(0.5)
    assert b.core.direct.held() == 1
    lan.kill(b)
    lan.restart(b)
    assert b.core.direct.held() == 1  # from the store, fed to SES again
    del lan.links[(0, 1)]
    lan.settle(40.0)
    order = [m.text for m in b.recorder.direct if not m.outgoing]
    assert order[-2:] == ["the build is broken", "did you see A's note?"]
    assert not any(m.late for m in b.recorder.direct)
    assert [m.text for m in b.core.direct_history(c.pid)][-1] == "did you see A's note?"


def test_a_message_whose_cause_never_comes_is_delivered_late_after_the_hold_limit():
    lan = chain_lan()
    a, b, c = lan.nodes
    lan.links[(0, 1)] = None
    dm(lan, a, b, "the build is broken")
    dm(lan, a, c, "I told B")
    lan.settle(0.2)
    dm(lan, c, b, "did you see A's note?")
    lan.settle(130.0)
    (late,) = [m for m in b.recorder.direct if m.text == "did you see A's note?"]
    assert late.late and b.core.direct.held() == 0
    assert b.core.stats_dict()["direct_late"] == 1


def test_a_peer_killed_between_commit_and_transmit_sends_the_message_after_its_restart():
    lan = lan_of(2)
    ann, bob = lan.nodes
    dm(lan, ann, bob, "hello")
    lan.settle(3.0)
    mid = dm(lan, ann, bob, "kept", crash=BEFORE_TRANSMIT)
    lan.restart(ann)
    lan.settle(10.0)
    assert shown(bob, ann) == ["hello", "kept"]
    assert [m.mid for m in ann.core.direct_history(bob.pid)][-1] == mid
    # Bob killed after storing a message, before his ACK went out: Ann sends it again, Bob shows it once.
    captured = []
    transmit = lan.transmit
    lan.transmit = lambda sender, datagrams: (captured.extend(d for d in datagrams if d.data[:3] == b"\x93\x02\x0e"),
                                               transmit(sender, datagrams))
    lan.links[(0, 1)] = None
    once = dm(lan, ann, bob, "once")
    lan.transmit = transmit
    lan.run(bob, lambda core: core.receive(captured[0].data, Arrival(ann.endpoint, Via.UNICAST), lan.now, lan.now),
            crash=BEFORE_TRANSMIT)
    lan.restart(bob)
    del lan.links[(0, 1)]
    lan.settle(70.0)
    assert [m.text for m in bob.core.direct_history(ann.pid)] == ["hello", "kept", "once"]
    assert shown(bob, ann) == ["hello", "kept"]  # killed before it could tell: shown by the history
    assert statuses(ann, once)[-1] == "delivered"
    assert bob.core.stats_dict()["direct_duplicates"] >= 1


def test_nothing_goes_out_while_the_disk_is_full_and_everything_does_once_it_is_not():
    lan = lan_of(2)
    ann, bob = lan.nodes
    dm(lan, ann, bob, "hello")  # (the handshake's HELLOs are not sent either while the disk is full)
    lan.settle(3.0)
    ann.store.fail_commits = "database or disk is full"
    mid = dm(lan, ann, bob, "stored first")
    lan.settle(5.0)
    assert shown(bob, ann) == ["hello"] and statuses(ann, mid) == []
    assert shown(ann, bob, outgoing=True) == ["hello"]  # not shown before it is stored
    assert "waits in memory" in ann.core.take_unsent()[mid]  # the caller is told (m2mc-peer: an error)
    ann.store.fail_commits = None
    lan.settle(5.0)
    assert shown(bob, ann) == ["hello", "stored first"] and statuses(ann, mid)[-1] == "delivered"
    assert ann.core.stats_dict()["storage_error"] is None


def test_what_ses_cannot_hold_is_refused_unacknowledged_and_comes_again_later():
    lan = chain_lan()
    a, b, c = lan.nodes
    b.core.direct.ses.max_held_per_sender = 1
    lan.links[(0, 1)] = None
    dm(lan, a, b, "the build is broken")
    dm(lan, a, c, "I told B")
    lan.settle(0.2)
    first = dm(lan, c, b, "did you see A's note?")
    second = dm(lan, c, b, "hello?")
    lan.settle(0.5)
    assert b.core.direct.held() == 1 and b.core.stats_dict()["direct_refused_held"] >= 1
    # whichever came first is held (and acknowledged), the other refused: C keeps it and tries again
    assert sorted([statuses(c, first), statuses(c, second)]) == [["sent"], ["sent", "delivered"]]
    del lan.links[(0, 1)]
    lan.settle(40.0)
    order = [m.text for m in b.recorder.direct if not m.outgoing]
    assert order[-3:] == ["the build is broken", "did you see A's note?", "hello?"]
    assert statuses(c, second)[-1] == "delivered"


def test_a_member_whose_key_is_unusable_cannot_be_written_to_and_breaks_nothing():
    lan = lan_of(2)
    ann, bob = lan.nodes
    dm(lan, ann, bob, "hello")
    lan.settle(3.0)
    lan.links[(0, 1)] = None  # unacknowledged: it stays in flight
    pending = dm(lan, ann, bob, "pending")
    direct_keys = ann.core.gjlp.direct_keys
    ann.core.direct.keys_of = lambda pid: (direct_keys(pid)[0], bytes(32)) if pid == bob.pid else direct_keys(pid)
    with pytest.raises(UsageError, match="not usable"):
        dm(lan, ann, bob, "x")
    lan.settle(10.0)  # retransmissions find the key unusable: nothing is sent, nothing raises
    assert ann.core.stats_dict()["direct_unsealable"] >= 1
    ann.core.direct.keys_of = direct_keys
    del lan.links[(0, 1)]
    lan.settle(40.0)
    assert statuses(ann, pending)[-1] == "delivered"


def test_opening_attempts_are_capped_per_second(monkeypatch):
    monkeypatch.setattr(direct, "OPENS_PER_SECOND", 3)
    monkeypatch.setattr(direct, "STRANGER_OPENS_PER_SECOND", 3)
    lan = lan_of(2)
    ann, bob = lan.nodes
    junk = wire.encode_direct(bytes(crypto.DIRECT_BUCKETS[0] + crypto.DIRECT_SEAL_OVERHEAD))
    for _ in range(5):  # all within one second
        bob.core.receive(junk, Arrival(ann.endpoint, Via.UNICAST), lan.now, lan.now)
    stats = bob.core.stats_dict()
    assert (stats["direct_unopened"], stats["direct_over_budget"]) == (3, 2)
    lan.settle(1.5)
    bob.core.receive(junk, Arrival(ann.endpoint, Via.UNICAST), lan.now, lan.now)
    assert bob.core.stats_dict()["direct_unopened"] == 4  # the next second has its budget


def test_a_direct_message_completes_the_handshake_when_the_hello_that_echoed_is_lost():
    lan = lan_of(2)
    ann, bob = lan.nodes
    send = lan._send
    dropped = []

    def losing_the_echo(source: int, index: int, datagram) -> None:
        if datagram.data[:3] != b"\x93\x02\x0e":
            message = wire.decode(datagram.data).message
            if isinstance(message, wire.Hello) and message.echo and not message.nonce and source == 0:
                dropped.append(message)
                return  # Ann's echo of Bob's nonce: Bob cannot prove Ann's endpoint by HELLO
        send(source, index, datagram)

    lan._send = losing_the_echo
    mid = dm(lan, ann, bob, "hello")
    lan.settle(5.0)
    assert dropped and shown(bob, ann) == ["hello"]
    assert statuses(ann, mid) == ["sent", "delivered"]  # Bob's ACK went: the message echoed his nonce
    assert bob.core.reach.endpoint(ann.pid) == ann.endpoint


def test_a_burst_is_paced_and_windowed_so_nothing_is_dropped_refused_or_sent_twice():
    lan = lan_of(2)
    ann, bob = lan.nodes
    dm(lan, ann, bob, "warm-up")
    lan.settle(3.0)
    for i in range(400):  # a script pasting far faster than anyone types
        dm(lan, ann, bob, f"line {i}")
    lan.settle(15.0)
    assert shown(bob, ann)[1:] == [f"line {i}" for i in range(400)]
    a, b = ann.core.stats_dict(), bob.core.stats_dict()
    assert (a["direct_retransmitted"], b["direct_rate_dropped"], b["direct_refused_held"]) == (0, 0, 0)
    assert ann.core.direct.queued() == 0


def test_a_gap_an_ack_shows_is_sent_again_at_once():
    lan = lan_of(2)
    ann, bob = lan.nodes
    dm(lan, ann, bob, "warm-up")
    lan.settle(3.0)
    send = lan._send
    lost = []

    def losing_one(source: int, index: int, datagram) -> None:
        if source == 0 and datagram.data[:3] == b"\x93\x02\x0e" and not lost:
            lost.append(datagram)  # m0 (Ann sends no ACKs: Bob writes nothing)
            return
        send(source, index, datagram)

    lan._send = losing_one
    for i in range(5):
        dm(lan, ann, bob, f"m{i}")
        lan.settle(0.05)
    lan.settle(0.3)  # well before the first retransmission timeout (1 s)
    assert lost and shown(bob, ann)[1:] == [f"m{i}" for i in range(5)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_conversations_of_four_with_loss_are_delivered_whole_and_in_causal_order(seed):
    rng = random.Random(seed)
    lan = lan_of(4, seed=seed)
    nodes = lan.nodes
    for x in nodes:  # endpoints proven before the loss starts (the handshake's minute is not under test)
        for y in nodes:
            if x is not y:
                dm(lan, x, y, "warm-up")
    lan.settle(5.0)
    lan.faults = FaultInjector(drop=0.2, duplicate=0.05, reorder=0.3, reorder_by=0.3, rng=random.Random(seed))
    lan.links[(0, 1)] = 0.8  # one slow pair, so causes overtake
    # The test's own vector clocks: a send happens after every delivery its writer was shown before it.
    # A message is (recipient, mid): seqnos count per conversation.
    clocks = [dict.fromkeys(range(4), 0) for _ in nodes]
    seen = [0] * 4
    stamp: dict[tuple[str, tuple[str, int]], dict[int, int]] = {}

    def catch_up(i: int) -> None:
        for message in nodes[i].recorder.direct[seen[i]:]:
            key = (nodes[i].pid, message.mid)
            if not message.outgoing and key in stamp:
                clocks[i] = {k: max(v, stamp[key][k]) for k, v in clocks[i].items()}
        seen[i] = len(nodes[i].recorder.direct)

    for n in range(60):
        i, j = rng.sample(range(4), 2)
        catch_up(i)
        clocks[i][i] += 1
        mid = dm(lan, nodes[i], nodes[j], f"#{n}")
        stamp[(nodes[j].pid, mid)] = dict(clocks[i])
        lan.settle(rng.uniform(0.0, 0.4))
    lan.settle(120.0)
    for node in nodes:
        got = [(node.pid, m.mid) for m in node.recorder.direct if not m.outgoing and (node.pid, m.mid) in stamp]
        assert sorted(got) == sorted(key for key in stamp if key[0] == node.pid)  # every message to it, once
        position = {key: k for k, key in enumerate(got)}
        for first in got:
            for second in got:
                before = first != second and all(stamp[first][k] <= stamp[second][k] for k in range(4))
                assert not before or position[first] < position[second], (first, second)
    assert not any(m.late for node in nodes for m in node.recorder.direct)


def test_a_member_that_direct_messages_wait_for_gets_a_larger_hello_budget_at_its_multicast_source_only():
    from m2mc.middleware.addresses import Endpoint
    from m2mc.middleware.reach import HELLO_BUDGET, HOST_HELLO_BUDGET, SOUGHT_BUDGET_FACTOR, Reach

    bob_at, elsewhere = Endpoint("10.0.0.2", 47477), Endpoint("10.0.0.2", 40000)

    def probes(seek_at: Endpoint) -> list:
        ann = Reach("a" * 32, "Ann", random.Random(1))
        ann.heard("b" * 32, bob_at, "multicast", 0.0)  # Bob's signed multicast came from bob_at
        if seek_at != bob_at:
            ann.add(seek_at, "broadcast", 0.0, "b" * 32)  # heard by broadcast, not chosen by the user
        sent, now = [], 0.0
        while now < 40.0:
            ann.seek("b" * 32, now)
            ann.heard("b" * 32, bob_at, "multicast", now)
            ann.handle_timer(now)
            sent += [to for _, to in ann.datagrams_to_send()]
            now += 0.5
        return sent

    assert probes(bob_at) == [bob_at] * (HELLO_BUDGET * SOUGHT_BUDGET_FACTOR)
    both = probes(elsewhere)
    assert both.count(elsewhere) <= HELLO_BUDGET  # any other endpoint: the usual budget
    assert len(both) <= HOST_HELLO_BUDGET * SOUGHT_BUDGET_FACTOR  # and the address's, at most doubled


def test_a_strangers_flood_spends_only_the_strangers_budget_and_a_member_gets_through(monkeypatch):
    from m2mc.middleware.addresses import Endpoint

    monkeypatch.setattr(direct, "STRANGER_OPENS_PER_SECOND", 50)
    lan = lan_of(2)
    ann, bob = lan.nodes
    dm(lan, ann, bob, "hello")
    lan.settle(40.0)  # a first message: each proves its endpoint to the other
    assert bob.core.reach.pid_at(ann.endpoint) == ann.pid
    junk = wire.encode_direct(bytes(crypto.DIRECT_BUCKETS[0] + crypto.DIRECT_SEAL_OVERHEAD))
    stranger = Endpoint("10.9.9.9", 40000)
    receive = bob.core.receive

    def flooded_receive(data, arrival, now, wall):
        if arrival.via is Via.UNICAST:  # ahead of every unicast datagram, a second's worth of junk
            for _ in range(100):
                receive(junk, Arrival(stranger, Via.UNICAST), now, wall)
        return receive(data, arrival, now, wall)

    monkeypatch.setattr(bob.core, "receive", flooded_receive)
    mid = dm(lan, ann, bob, "through the flood")
    lan.settle(2.0)
    assert "through the flood" in shown(bob, ann)
    assert statuses(ann, mid)[-1] == "delivered"
    assert bob.core.stats_dict()["direct_over_budget"] >= 50
