"""The reach core (middleware/reach.py) and invites, in-process: the handshake, its budgets,
who gets unicast copies, peer exchange and the cache."""

from __future__ import annotations

import random

import pytest

from m2mc.middleware import reach as reach_module
from m2mc.middleware import wire
from m2mc.middleware.addresses import Endpoint, parse_endpoint
from m2mc.middleware.invites import invite_link, parse_invite
from m2mc.middleware.reach import HELLO_BUDGET, HOST_HELLO_BUDGET, MULTICAST_FRESH, REPORT_AFTER, REPORT_INTERVAL, Reach

ANN_AT, BOB_AT, CAT_AT = Endpoint("10.0.0.1", 47477), Endpoint("10.0.0.2", 47477), Endpoint("10.0.0.3", 47477)


def make(pid: str, at: Endpoint) -> Reach:
    reach = Reach(pid, pid.capitalize(), random.Random(pid))
    reach.own.add(at)
    return reach


def exchange(sides: dict[Endpoint, tuple[str, Reach]], now: float, rounds: int = 4) -> None:
    """Deliver every HELLO and PEER_LIST between the reaches, as a lossless LAN would."""
    for _ in range(rounds):
        for source, (pid, reach) in sides.items():
            reach.handle_timer(now)
            for message, to in reach.datagrams_to_send():
                if to not in sides:
                    continue
                receiver = sides[to][1]
                if isinstance(message, wire.Hello):
                    receiver.hello(pid, message, source, now)
                else:
                    receiver.peer_list(pid, message, source, now)


def test_an_invite_handshake_proves_both_endpoints():
    ann, bob = make("ann", ANN_AT), make("bob", BOB_AT)
    bob.add(ANN_AT, "invite", 0.0)
    exchange({ANN_AT: ("ann", ann), BOB_AT: ("bob", bob)}, 0.0)
    assert bob.unicast_peers(0.0) == [("ann", ANN_AT)]
    assert ann.unicast_peers(0.0) == [("bob", BOB_AT)]
    assert [e.pid for e in bob.events()] == ["ann"] and [e.pid for e in ann.events()] == ["bob"]
    assert {row["found_by"] for row in bob.peers(0.0)} == {"invite"}
    assert {row["found_by"] for row in ann.peers(0.0)} == {"inbound"}


def test_a_member_sending_by_unicast_from_an_endpoint_not_proven_here_is_probed_at_once_not_after_the_back_off():
    ann = make("ann", ANN_AT)
    ann.add(BOB_AT, "inbound", 0.0, "bob")
    sent = []
    for now in (0.0, 1.0, 3.0):  # three HELLOs unanswered: the next waits until 7 s
        ann.handle_timer(now)
        sent += [now for _ in ann.datagrams_to_send()]
    assert sent == [0.0, 1.0, 3.0] and ann.get_timer() == 7.0
    ann.probe_soon(BOB_AT, "bob", 3.5)  # within a second of the last HELLO: it waits
    assert ann.get_timer() == 7.0
    ann.probe_soon(BOB_AT, "bob", 4.5)  # Bob's unicast copies come: he is there, and has proven us
    assert ann.get_timer() == 4.5
    ann.handle_timer(4.5)
    assert len(ann.datagrams_to_send()) == 1
    ann.probe_soon(BOB_AT, "bob", 4.6)  # more of them within a second: no more HELLOs
    ann.handle_timer(4.6)
    assert ann.datagrams_to_send() == []


def test_an_echo_from_another_endpoint_or_of_a_wrong_nonce_proves_nothing():
    ann = make("ann", ANN_AT)
    ann.add(BOB_AT, "manual", 0.0)
    ann.handle_timer(0.0)
    (hello, to), = ann.datagrams_to_send()
    ann.hello("mal", wire.Hello(b"", hello.nonce, "Mal"), CAT_AT, 0.1)  # right nonce, wrong endpoint
    ann.hello("mal", wire.Hello(b"", b"x" * 16, "Mal"), BOB_AT, 0.1)  # right endpoint, wrong nonce
    assert ann.unicast_peers(0.2) == [] and ann.events() == []


def test_a_forged_source_gets_at_most_the_budget_of_hellos_per_address_whatever_its_ports():
    ann = make("ann", ANN_AT)
    sent = []
    for i in range(500):
        ann.hello(f"stranger{i % 7}", wire.Hello(bytes([i % 251]) * 16, b"", "x"), Endpoint("10.0.0.9", 20000 + i),
                  i * 0.01)
        ann.handle_timer(i * 0.01)
        sent += ann.datagrams_to_send()
    assert len(sent) == HOST_HELLO_BUDGET * reach_module.SOUGHT_BUDGET_FACTOR  # inbound: see Reach._factor
    assert {to.host for _, to in sent} == {"10.0.0.9"}
    ann.hello("stranger", wire.Hello(b"y" * 16, b"", "x"), Endpoint("10.0.0.9", 20000), 5.0 + 61)
    assert len(ann.datagrams_to_send()) == 1  # the window has passed


@pytest.mark.parametrize("found_by, budget", [
    ("broadcast", HELLO_BUDGET),  # heard by broadcast, whose source can be forged: the usual budget
    ("cache", HELLO_BUDGET * reach_module.SOUGHT_BUDGET_FACTOR),  # remembered: the pair's handshake depends on it
    ("manual", HELLO_BUDGET * reach_module.SOUGHT_BUDGET_FACTOR),  # chosen by the user: a join waits for it
])
def test_one_endpoint_is_probed_at_most_the_budget_times_a_window(found_by, budget):
    ann = make("ann", ANN_AT)
    ann.add(BOB_AT, found_by, 0.0, "bob" if found_by != "manual" else None)
    sent = []
    now = 0.0
    while now < 30:
        deadline = ann.get_timer()
        if deadline is None:
            break
        now = max(now, deadline)
        ann.handle_timer(now)
        sent += ann.datagrams_to_send()
    assert len(sent) == budget


def test_peers_heard_by_multicast_get_no_unicast_copies_unless_they_say_they_do_not_hear_us():
    ann, bob = make("ann", ANN_AT), make("bob", BOB_AT)
    bob.add(ANN_AT, "invite", 0.0)
    exchange({ANN_AT: ("ann", ann), BOB_AT: ("bob", bob)}, 0.0)
    assert all(not m.unheard for m, _ in ann.datagrams_to_send() + bob.datagrams_to_send())
    ann.heard("bob", BOB_AT, "multicast", 1.0)
    assert ann.unicast_peers(1.0) == []
    # Bob's multicast reaches Ann, but hers does not reach him (filtered one way): once she has
    # had time to send a beacon, his report makes Ann copy to him.
    bob.handle_timer(REPORT_AFTER - 1)
    assert not [m for m, _ in bob.datagrams_to_send() if isinstance(m, wire.Hello) and m.unheard]
    bob.handle_timer(REPORT_AFTER + REPORT_INTERVAL)
    (report, to), = [(m, to) for m, to in bob.datagrams_to_send() if isinstance(m, wire.Hello) and m.unheard]
    later = REPORT_AFTER + REPORT_INTERVAL
    ann.heard("bob", BOB_AT, "multicast", later)
    ann.hello("bob", report, BOB_AT, later)
    assert ann.unicast_peers(later) == [("bob", BOB_AT)]
    ann.hello("bob", wire.Hello(b"", b"", "Bob", False), BOB_AT, later + 1)
    assert ann.unicast_peers(later + 1) == []
    assert ann.unicast_peers(later + MULTICAST_FRESH + 1) == [("bob", BOB_AT)]  # silent by multicast since


def test_the_periodic_report_tells_only_peers_not_heard_by_multicast():
    ann, bob, cat = make("ann", ANN_AT), make("bob", BOB_AT), make("cat", CAT_AT)
    bob.add(ANN_AT, "invite", 0.0)
    cat.add(ANN_AT, "invite", 0.0)
    sides = {ANN_AT: ("ann", ann), BOB_AT: ("bob", bob), CAT_AT: ("cat", cat)}
    exchange(sides, 0.0)
    ann.heard("cat", CAT_AT, "multicast", REPORT_AFTER + 1)
    ann.handle_timer(REPORT_AFTER + 1)
    reports = [(m, to) for m, to in ann.datagrams_to_send() if isinstance(m, wire.Hello) and m.unheard]
    assert [to for _, to in reports] == [BOB_AT]


def test_a_broadcast_sighting_is_not_probed_when_multicast_arrives_within_the_grace():
    ann = make("ann", ANN_AT)
    ann.add(BOB_AT, "broadcast", 0.0, "bob", delay=reach_module.BROADCAST_GRACE)
    ann.heard("bob", BOB_AT, "multicast", 0.3)
    ann.handle_timer(reach_module.BROADCAST_GRACE)
    assert ann.datagrams_to_send() == []
    ann.add(CAT_AT, "broadcast", 0.0, "cat", delay=reach_module.BROADCAST_GRACE)
    ann.handle_timer(reach_module.BROADCAST_GRACE)
    assert [to for _, to in ann.datagrams_to_send()] == [CAT_AT]


def test_peer_exchange_joins_an_invite_chain_and_is_taken_only_from_proven_peers():
    ann, bob, cat = make("ann", ANN_AT), make("bob", BOB_AT), make("cat", CAT_AT)
    sides = {ANN_AT: ("ann", ann), BOB_AT: ("bob", bob), CAT_AT: ("cat", cat)}
    bob.add(ANN_AT, "invite", 0.0)
    exchange(sides, 0.0)
    cat.add(BOB_AT, "invite", 1.0)
    exchange(sides, 1.0, rounds=6)
    assert {pid for pid, _ in ann.unicast_peers(1.0)} == {"bob", "cat"}
    assert {pid for pid, _ in cat.unicast_peers(1.0)} == {"ann", "bob"}
    ignored = ann.peer_lists_ignored
    ann.peer_list("mal", wire.PeerList((("victim", "10.0.0.99", 47477),)), Endpoint("10.0.0.66", 47477), 2.0)
    ann.handle_timer(2.0)
    assert all(to.host != "10.0.0.99" for _, to in ann.datagrams_to_send())
    assert ann.peer_lists_ignored == ignored + 1


def test_the_cache_is_probed_at_start_and_expired_entries_are_not():
    ann = make("ann", ANN_AT)
    wall = 1_800_000_000.0
    ann.add_cached([("bob", BOB_AT, wall - 3600), ("cat", CAT_AT, wall - 32 * 24 * 3600)], 0.0, wall)
    ann.handle_timer(0.0)
    assert [to for _, to in ann.datagrams_to_send()] == [BOB_AT]


def test_invites_carry_the_inviters_endpoint_and_bad_parts_are_skipped():
    link = invite_link("abc123", "Lunch & more", [ANN_AT])
    assert link == "m2mc://join/abc123?desc=Lunch%20%26%20more&peer=10.0.0.1:47477"
    invite = parse_invite(f"Join “Lunch” on M2MC: {link}")
    assert invite is not None and (invite.gid, invite.desc, invite.peers) == ("abc123", "Lunch & more", (ANN_AT,))
    assert parse_invite("m2mc://join/abc?peer=239.1.1.1:5&peer=nonsense&peer=10.0.0.2:70000").peers == ()
    assert parse_invite("no invite here") is None


@pytest.mark.parametrize("text, why", [("", "looks like"), ("host.example:1", "not an IPv4"),
                                        ("10.0.0.1:0", "not a port"), ("224.0.0.1:5", "not one peer's"),
                                        ("10.0.0.1", "no port")])
def test_a_bad_address_gets_a_reason(text, why):
    with pytest.raises(ValueError, match=why):
        parse_endpoint(text)


def test_hello_and_peer_list_keep_to_their_bounds():
    from m2mc.middleware.crypto import Identity
    me = Identity.generate()
    hello = wire.Hello(b"n" * 16, b"", "Ann", True)
    assert wire.decode(wire.encode(me, hello)).message == hello
    assert len(wire.encode(me, hello)) < 250
    with pytest.raises(wire.WireError):
        wire.encode(me, wire.PeerList((("x", "224.0.0.1", 1),)))
    with pytest.raises(wire.WireError):
        wire.encode(me, wire.PeerList(tuple(("x", "10.0.0.1", 1) for _ in range(wire.MAX_PEER_LIST + 1))))


def test_a_peer_behind_a_router_meets_the_inviters_neighbour_even_when_the_first_list_is_lost():
    # Ann and Abe share a subnet (multicast); Bob is behind a unicast router and joins by Ann's invite.
    ABE_AT = Endpoint("10.0.0.4", 47477)
    ann, abe, bob = make("ann", ANN_AT), make("abe", ABE_AT), make("bob", BOB_AT)
    sides = {ANN_AT: ("ann", ann), ABE_AT: ("abe", abe), BOB_AT: ("bob", bob)}
    abe.add(ANN_AT, "invite", 0.0)
    exchange(sides, 0.0)
    ann.heard("abe", ABE_AT, "multicast", 0.5)
    abe.heard("ann", ANN_AT, "multicast", 0.5)
    bob.add(ANN_AT, "invite", 1.0)

    def losing_peer_lists(now: float) -> None:
        for source, (pid, reach) in sides.items():
            reach.handle_timer(now)
            for message, to in reach.datagrams_to_send():
                if to in sides and isinstance(message, wire.Hello):
                    sides[to][1].hello(pid, message, source, now)  # every PEER_LIST of this moment is lost

    for _ in range(4):
        losing_peer_lists(1.0)
    assert {pid for pid, _ in bob.unicast_peers(1.0)} == {"ann"}
    exchange(sides, 1.0 + reach_module.RELIST_AFTER, rounds=6)  # the exchange goes once more, 2 s on
    now = 1.0 + reach_module.RELIST_AFTER
    assert "abe" in {pid for pid, _ in bob.unicast_peers(now)}
    assert "bob" in {pid for pid, _ in abe.unicast_peers(now)}, "Bob proved himself to Ann's neighbour"
    # Ann told Abe nothing herself: she hears Abe by multicast, and her subnet keeps to it.


def test_an_invite_chain_at_ten_percent_loss_with_no_multicast_joins_converses_and_does_again_after_a_restart():
    """Whole peers on a simulated LAN that carries no multicast, each datagram lost at 10 %, as
    tests/lan/test_lan_reach.py::test_b: Bob joins by Ann's invite, Cat by Bob's, then each writes
    one message; then all three start again, find each other from their peer caches, and write again.
    Each join, each pair that meets through the exchange and each pair from a cache must prove each
    other's endpoint by HELLOs both ways; the joiner asks for the group every second, as
    GroupManager.find_invited_async does.  The loss is seeded, but each run's keys and group id are
    new, so the runs differ from call to call.  With three HELLOs for an endpoint that said HELLO
    first, came from the exchange or from the cache, 2 to 6 of 100 runs failed: a join given up
    after INVITE_WAIT, or a pair unproven for the 60 s window and a message not reaching a member.
    With six, none of more than 1,000 simulated runs did: one failure in 100 is let pass, more is the bug."""
    import random

    from m2mc.middleware.addresses import GroupAddress
    from m2mc.middleware.manager import GroupManager
    from m2mc.middleware.memory_store import MemoryStore
    from tests.testbed.faults import FaultInjector
    from tests.testbed.peer_sim import PeerLan

    class NoMulticast(PeerLan):
        def transmit(self, sender, datagrams):
            super().transmit(sender, [d for d in datagrams if not isinstance(d.destination, GroupAddress)])

    def wait(lan, done, seconds: float, every=None) -> bool:
        start = ask = lan.now
        while lan.now - start < seconds:
            if done():
                return True
            if every is not None and lan.now >= ask + 1.0:
                ask = lan.now
                every()
            lan.step_until(lan.now + 0.05)
        return False

    def join(lan, node, inviter, gid) -> bool:
        invite = inviter.core.invite(gid)
        lan.run(node, lambda core: core.accept_invite(invite, lan.now))
        if not wait(lan, lambda: gid in node.core.gjlp.groups and node.core.gjlp.groups[gid].verified,
                    GroupManager.INVITE_WAIT, lambda: lan.run(node, lambda core: core.advertise())):
            return False
        record = node.core.joinable(gid, None)
        lan.run(node, lambda core: core.join(record, None, lan.now, lan.now))
        return True

    def run(seed: int) -> str:
        lan = NoMulticast([MemoryStore(), MemoryStore(), MemoryStore()],
                          FaultInjector(drop=0.10, rng=random.Random(seed)), seed, unicast=True)
        ann, bob, cat = lan.nodes
        gid = lan.create_group(ann)
        if not join(lan, bob, ann, gid) or not join(lan, cat, bob, gid):
            return "a join gave up"
        for phase in ("first", "after a restart"):
            texts = {lan.send(node, gid, f"{phase} from {node.name}") and f"{phase} from {node.name}"
                     for node in lan.nodes}
            if not wait(lan, lambda: all(texts <= {m.text for m in node.history(gid)} for node in lan.nodes), 40):
                return f"a message {phase} missing after 40 s"
            for node in lan.nodes:  # each starts again from its store, and its peer cache
                lan.kill(node)
            for node in lan.nodes:
                lan.restart(node)
        return "ok"

    outcomes = {seed: run(seed) for seed in range(100)}
    failed = {seed: outcome for seed, outcome in outcomes.items() if outcome != "ok"}
    assert len(failed) <= 1, failed
