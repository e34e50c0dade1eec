"""Reach and presence against a hostile LAN (issue 41, rows 1 and 9–13), sans I/O: the reach core
(middleware/reach.py), the presence core (middleware/presence.py), the peer core's freshness and
the peer cache.  The same attacks on the namespace LAN: tests/lan/test_lan_reach_attacks.py."""

from __future__ import annotations

import ipaddress
import random

import pytest

from m2mc.middleware import crypto, wire
from m2mc.middleware.addresses import Arrival, Endpoint, Via
from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.peer_core import PeerCore
from m2mc.middleware.presence import AT_FRESH_FOR, CLOCK_SKEW, OFFLINE, ONLINE, Presence
from m2mc.middleware.reach import (HELLO_WINDOW, HINT_CANDIDATES, HINT_HELLO_BUDGET, MAX_STRANGER_COPIES,
                                   MAX_UNICAST_COPIES, MULTICAST_FRESH, Reach, hint_refused)
from m2mc.middleware.store import Store
from m2mc.middleware.store_api import MAX_CACHED_PEERS

ANN_AT, BOB_AT, MAL_AT = Endpoint("10.0.0.1", 47477), Endpoint("10.0.0.2", 47477), Endpoint("10.0.0.66", 47477)
LAN = ipaddress.IPv4Network("10.0.0.0/24")


def make(pid: str, at: Endpoint, members: set[str] | None = None) -> Reach:
    reach = Reach(pid, pid.capitalize(), random.Random(pid),
                  is_member=None if members is None else members.__contains__)
    reach.own.add(at)
    return reach


def prove(reach: Reach, pid: str, at: Endpoint, now: float) -> None:
    """``pid`` at ``at`` answers ``reach``'s HELLO: proven."""
    reach.add(at, "manual", now)
    reach.handle_timer(now)
    hellos = [m for m, to in reach.datagrams_to_send() if to == at and isinstance(m, wire.Hello)]
    reach.hello(pid, wire.Hello(b"", hellos[-1].nonce, pid), at, now)
    assert reach.endpoint(pid) == at


# -- row 1: a replay never moves where a member is reached ---------------------------------------


def test_row_1_a_replayed_datagram_does_not_move_where_a_member_is_reached():
    bob = make("bob", BOB_AT)
    bob.heard("ann", ANN_AT, "multicast", 0.0, fresh=True)  # Ann's new message
    bob.heard("ann", MAL_AT, "multicast", 1.0, fresh=False)  # Mal replays it from his host
    assert bob.address_of("ann", 1.0) == ANN_AT
    bob.heard("ann", ANN_AT, "multicast", 2.0, fresh=True)
    bob.heard("ann", Endpoint("10.0.0.9", 47477), "multicast", 3.0, fresh=False)  # with a forged source
    assert bob.address_of("ann", 3.0) == ANN_AT
    # Nor does a replay say that Ann's multicast still reaches Bob, or keep her in the table.
    bob.heard("ann", MAL_AT, "multicast", 2.0 + MULTICAST_FRESH + 1, fresh=False)
    assert bob.path("ann", 2.0 + MULTICAST_FRESH + 1) is None


def test_row_1_the_peer_core_takes_a_replay_for_no_evidence():
    ann, bob = crypto.Identity.generate(), MemoryStore()
    core = PeerCore(bob, 0.0, "Bob", wall=1_800_000_000.0)
    gid = core.create_group("lunch", crypto.new_salt(), None, 1_800_000_000.0)
    core.receive(wire.encode(ann, wire.Join(wire.sign_member(ann, gid, "Ann", 1, True))),
                 Arrival(ANN_AT, Via.CONTROL), 0.1, 1_800_000_000.1)
    batch = wire.sign_burst(ann, [[wire.Data(gid, 1, None, 1_800_000_000_200, "Ann", "offer", b"")]])[0]
    datagram = wire.encode(ann, batch)
    core.receive(datagram, Arrival(ANN_AT, Via.MULTICAST), 0.2, 1_800_000_000.2)
    assert core.reach.address_of(ann.pid, 0.2) == ANN_AT
    for at in (0.3, 5.0, 30.0):
        core.receive(datagram, Arrival(MAL_AT, Via.MULTICAST), at, 1_800_000_000 + at)  # Mal's replays
    assert core.reach.address_of(ann.pid, 30.0) == ANN_AT


# -- row 9: presence moves only on fresh evidence ------------------------------------------------


def test_row_9_a_replayed_goodbye_or_heartbeat_moves_nobody():
    presence, wall = Presence(), 1_800_000_000.0
    ms = int(wall * 1000)
    assert presence.fresh_at("ann", ms, wall)
    presence.heard("ann", 0.0)
    old_goodbye = ms - 1  # a GOODBYE captured before Ann's last restart
    assert not presence.fresh_at("ann", old_goodbye, wall + 1, goodbye=True)
    assert not presence.fresh_at("ann", ms, wall + 1)  # the same beacon again
    assert presence.fresh_at("ann", ms + 30_000, wall + 30)  # her next beacon
    assert presence.fresh_at("ann", ms + 30_000, wall + 31, goodbye=True)  # closing in the same millisecond
    assert not presence.fresh_at("ann", ms + 30_000, wall + 40)  # her last beacon replayed after it
    # Outside the clocks' skew, or held back longer than AT_FRESH_FOR since the last: not fresh.
    assert not presence.fresh_at("bob", int((wall - CLOCK_SKEW - AT_FRESH_FOR - 1) * 1000), wall)
    assert not presence.fresh_at("bob", int((wall + CLOCK_SKEW + 1) * 1000), wall)
    assert presence.fresh_at("cat", ms, wall)
    assert not presence.fresh_at("cat", ms + 1_000, wall + 60)  # captured 1 s after, played 60 s after
    assert presence.stale_dropped == 6


def _core_with(ann: crypto.Identity, wall: float) -> tuple[PeerCore, str]:
    core = PeerCore(MemoryStore(), 0.0, "Bob", wall=wall)
    gid = core.create_group("lunch", crypto.new_salt(), None, wall)
    core.receive(wire.encode(ann, wire.Join(wire.sign_member(ann, gid, "Ann", 1, True))), Arrival(ANN_AT, Via.CONTROL), 0.1,
                 wall)
    return core, gid


def test_row_9_a_new_member_shows_online_at_once_and_replays_do_not_move_it():
    ann, wall = crypto.Identity.generate(), 1_800_000_000.0
    core, gid = _core_with(ann, wall)
    assert core.presence_of(gid, 0.1)[ann.pid] == ONLINE  # its own JOIN took
    beat = wire.encode(ann, wire.Heartbeat(gid, 0, int(wall * 1000) + 1))
    goodbye = wire.encode(ann, wire.Goodbye(gid, int(wall * 1000) + 2))
    core.receive(beat, Arrival(ANN_AT, Via.MULTICAST), 0.2, wall + 0.2)
    core.receive(goodbye, Arrival(ANN_AT, Via.MULTICAST), 0.3, wall + 0.3)
    assert core.presence_of(gid, 0.3)[ann.pid] == OFFLINE
    for t in (1.0, 20.0, 35.0):
        core.receive(beat, Arrival(MAL_AT, Via.MULTICAST), t, wall + t)  # the departed member's beacon, replayed
        assert core.presence_of(gid, t)[ann.pid] == OFFLINE
    back = wire.encode(ann, wire.Heartbeat(gid, 0, int((wall + 40) * 1000)))
    core.receive(back, Arrival(ANN_AT, Via.MULTICAST), 40.0, wall + 40)  # she restarts
    assert core.presence_of(gid, 40.0)[ann.pid] == ONLINE
    for t in (41.0, 45.0, 60.0):
        core.receive(goodbye, Arrival(MAL_AT, Via.MULTICAST), t, wall + t)  # her old goodbye, replayed
        assert core.presence_of(gid, t)[ann.pid] == ONLINE
    assert core.stats_dict()["presence_stale_dropped"] >= 6


def test_row_9_beacons_and_goodbyes_are_signed_with_the_wall_clock_when_they_leave():
    core = PeerCore(MemoryStore(), 100.0, "Ann", wall=1_800_000_000.0)
    gid = core.create_group("lunch", crypto.new_salt(), None, 1_800_000_000.0)
    core.flush(100.0)
    core.say_goodbye()
    core.flush(105.0)  # 5 s later: reckoned from the last wall time given
    sent = [wire.decode(d.data).message for d in core.datagrams_to_send()]
    beats = [m for m in sent if isinstance(m, (wire.Heartbeat, wire.Goodbye)) and m.gid == gid]
    assert [type(m).__name__ for m in beats] == ["Heartbeat", "Goodbye"]  # the first beacon goes at once
    assert beats[0].at == 1_800_000_000_000 and beats[1].at == 1_800_000_005_000


# -- row 10: the peer cache gives way to strangers first ------------------------------------------


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_row_10_a_strangers_many_keys_never_push_a_members_row_out_of_the_cache(tmp_path, kind):
    store = Store(tmp_path / "db.sqlite3") if kind == "sqlite" else MemoryStore()
    members = {"ann", "cat"}
    store.cache_peer("ann", ANN_AT, 1.0, members.__contains__)
    store.cache_peer("cat", Endpoint("10.0.0.3", 47477), 2.0, members.__contains__)
    for i in range(2 * MAX_CACHED_PEERS):
        store.cache_peer(f"key{i}", Endpoint("10.0.0.66", 1000 + i), 10.0 + i, members.__contains__)
    cached = {pid for pid, _, _ in store.cached_peers()}
    kept_strangers = len(cached - members)
    print(f"peer cache after {2 * MAX_CACHED_PEERS} strangers' keys: members kept {sorted(cached & members)}, "
          f"{kept_strangers} strangers' rows")
    assert members <= cached and len(cached) == MAX_CACHED_PEERS
    if kind == "sqlite":
        store.close()


def test_row_10_members_in_the_cache_are_probed_first():
    ann = make("ann", ANN_AT, members={"bob"})
    wall = 1_800_000_000.0
    rows = [(f"key{i}", Endpoint("10.0.0.66", 1000 + i), wall - i) for i in range(100)] + [("bob", BOB_AT, wall - 999)]
    ann.add_cached(rows, 0.0, wall)
    ann.handle_timer(0.0)
    assert ann.datagrams_to_send()[0][1] == BOB_AT


# -- row 11: members' unicast copies never compete with strangers -------------------------------------


def test_row_11_members_get_their_copies_first_whatever_a_stranger_proves():
    members = {"bob"}
    ann = make("ann", ANN_AT, members)
    prove(ann, "bob", BOB_AT, 0.0)
    for i in range(2 * MAX_UNICAST_COPIES):  # Mal proves 128 keys, and keeps them "recently heard"
        at = Endpoint(f"10.0.1.{1 + i}", 47477)  # (one address each: a host's HELLO budget is its own bound)
        prove(ann, f"mal{i}", at, 1.0 + i / 40)  # (HELLOS_PER_SECOND)
        ann.heard(f"mal{i}", at, "unicast", 5.0)
    copies = ann.unicast_peers(6.0)
    print(f"unicast copies with {2 * MAX_UNICAST_COPIES} strangers proven: {len(copies)}, "
          f"the member's included: {('bob', BOB_AT) in copies}")
    assert copies[0] == ("bob", BOB_AT)
    assert len(copies) == 1 + MAX_STRANGER_COPIES


def test_row_11_a_full_table_of_proven_peers_gives_way_by_a_stranger():
    from m2mc.middleware import reach as reach_module

    ann = make("ann", ANN_AT, {"bob"})
    prove(ann, "bob", BOB_AT, 0.0)
    for i in range(reach_module.MAX_PEERS + 10):
        prove(ann, f"mal{i}", Endpoint("10.0.%d.%d" % (1 + i // 250, 1 + i % 250), 47477), 1.0 + i / 40)
    assert ann.endpoint("bob") == BOB_AT


# -- row 12: one hint source's HELLOs are bounded in total ------------------------------------------


def test_row_12_a_peer_list_naming_a_whole_subnet_costs_at_most_the_hint_budget():
    ann = make("ann", ANN_AT)
    prove(ann, "mal", MAL_AT, 0.0)
    ann.datagrams_to_send()
    entries = [(f"victim{i}", f"10.9.{i // 254}.{1 + i % 254}", 47477) for i in range(4 * 64)]
    hellos = 0
    for now in range(0, 150):
        if now % 10 == 0:  # Mal lists 64 more every 10 s, again and again
            chunk = (now // 10) % 4
            ann.peer_list("mal", wire.PeerList(tuple(entries[chunk * 64:(chunk + 1) * 64])), MAL_AT, float(now))
        ann.handle_timer(float(now))
        hellos += sum(1 for m, to in ann.datagrams_to_send() if isinstance(m, wire.Hello) and to != MAL_AT)
    print(f"HELLOs caused by one hint source in 150 s: {hellos} (budget {HINT_HELLO_BUDGET} per {HELLO_WINDOW:.0f} s)")
    assert hellos <= HINT_HELLO_BUDGET * 3
    assert sum(1 for c in ann._candidates.values() if c.hint == "mal") <= HINT_CANDIDATES


def test_row_12_a_true_hint_gives_its_hello_back():
    ann, cat_at = make("ann", ANN_AT), Endpoint("10.0.0.3", 47477)
    prove(ann, "bob", BOB_AT, 0.0)
    for i in range(3 * HINT_HELLO_BUDGET):  # Bob lists peers that are there, one at a time: each proves
        at = Endpoint("10.0.1.%d" % (1 + i), 47477)
        ann.peer_list("bob", wire.PeerList(((f"peer{i}", at.host, at.port),)), BOB_AT, 1.0 + i)
        ann.handle_timer(1.0 + i)
        hello = next(m for m, to in ann.datagrams_to_send() if to == at)
        ann.hello(f"peer{i}", wire.Hello(b"", hello.nonce, ""), at, 1.0 + i)
        assert ann.endpoint(f"peer{i}") == at
    assert cat_at not in ann._candidates


# -- row 13: hints never name a broadcast, multicast, network or unspecified address ---------------


def test_row_13_hints_never_name_a_broadcast_multicast_network_or_unspecified_address():
    for host in ("10.0.0.255", "10.0.0.0", "255.255.255.255", "224.0.0.251", "239.255.0.1", "0.0.0.0", "0.1.2.3",
                 "240.0.0.1", "not an address"):
        assert hint_refused(host, [LAN]), host
    for host in ("10.0.0.254", "10.0.1.255", "127.0.0.1", "192.168.1.255"):
        assert not hint_refused(host, [LAN]), host  # (another subnet's .255 can be one host's, in a /23)
    ann = make("ann", ANN_AT)
    ann.networks = {LAN}
    prove(ann, "mal", MAL_AT, 0.0)
    ann.peer_list("mal", wire.PeerList((("x", "10.0.0.255", 47477), ("y", "10.0.0.0", 47477))), MAL_AT, 1.0)
    ann.add(Endpoint("10.0.0.255", 47477), "invite", 1.0)
    ann.hello("z", wire.Hello(b"n" * 16, b"", "Z"), Endpoint("10.0.0.255", 47477), 1.0)  # a forged source
    ann.handle_timer(1.0)
    assert [to for _, to in ann.datagrams_to_send() if to.host in ("10.0.0.255", "10.0.0.0")] == []
    assert ann.hints_refused == 4


def test_row_9_a_member_back_within_the_early_beacon_gap_gets_one_when_the_gap_ends():
    # Only fresh evidence shows a member online now, so a restarted one waits for a beacon of ours:
    # one due within the gap is put off to its end, not dropped (else up to a beacon period).
    from m2mc.middleware.presence import BEACON_INTERVAL, EARLY_BEACON_GAP

    presence = Presence()
    presence.opened("g", 0.0)
    assert presence.beacons_due(["g"], 0.0) == ["g"]
    presence.beacon_soon("g", 1.0)
    assert presence.beacons_due(["g"], 1.0) == ["g"]
    presence.beacon_soon("g", 2.0)  # another comes back 1 s later
    presence.beacon_soon("g", 2.5)  # and another: the same one covers it
    assert presence.beacons_due(["g"], 2.5) == [] and presence.get_timer(["g"]) == 1.0 + EARLY_BEACON_GAP
    assert presence.beacons_due(["g"], 1.0 + EARLY_BEACON_GAP) == ["g"]
    assert presence.get_timer(["g"]) == 1.0 + EARLY_BEACON_GAP + BEACON_INTERVAL


def test_row_12_many_strangers_lists_are_bounded_together_and_give_way_to_an_invite():
    from m2mc.middleware.reach import MAX_ENDPOINTS, STRANGER_HINT_HELLO_BUDGET

    ann = make("ann", ANN_AT, members={"bob"})
    for k in range(8):  # eight proven keys of one stranger, each a hint source of its own
        prove(ann, f"mal{k}", Endpoint(f"10.0.2.{k + 1}", 47477), k / 10)
    ann.datagrams_to_send()
    ann.add(BOB_AT, "invite", 1.0)
    hellos = 0
    for now in range(1, 61):
        for k in range(8):
            entries = tuple((f"v{k}-{i}", f"10.{k + 10}.{i // 250}.{1 + i % 250}", 47477) for i in range(64))
            ann.peer_list(f"mal{k}", wire.PeerList(entries), Endpoint(f"10.0.2.{k + 1}", 47477), float(now))
        ann.handle_timer(float(now))
        sent = ann.datagrams_to_send()
        hellos += sum(1 for m, to in sent if isinstance(m, wire.Hello) and to.host.startswith("10.1"))
    print(f"HELLOs caused by 8 strangers' lists in 60 s: {hellos} (bound {STRANGER_HINT_HELLO_BUDGET})")
    assert hellos <= STRANGER_HINT_HELLO_BUDGET
    assert len(ann._candidates) <= MAX_ENDPOINTS and BOB_AT in ann._candidates  # the invite's stays


def test_row_9_beacons_of_two_groups_in_one_flush_are_not_counted_as_replays():
    presence, wall = Presence(), 1_800_000_000.0
    assert presence.fresh_at("ann", int(wall * 1000), wall)
    assert not presence.fresh_at("ann", int(wall * 1000), wall + 0.01)  # her other group's, same millisecond
    assert presence.stale_dropped == 0
    assert not presence.fresh_at("ann", int(wall * 1000), wall + 5)  # the same, replayed later
    assert presence.stale_dropped == 1
