"""Presence (middleware.presence) and read marks (Store): the core with a hand-set clock, the manager without sockets."""

import itertools
from dataclasses import replace

import pytest

from m2mc.middleware import clock as clock_module, crypto, manager as manager_module, wire
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.presence import AWAY, BEACON_INTERVAL, OFFLINE, ONLINE, Presence
from m2mc.middleware.store import Store
from tests.testbed.arrivals import arriving


def test_a_peer_heard_then_silent_goes_away_then_offline_within_60_s():
    presence = Presence()
    presence.heard("ann", 100.0)
    assert presence.status("ann", 100.0) == ONLINE
    assert presence.status("ann", 100.0 + BEACON_INTERVAL + 5) == ONLINE  # one beacon period and slack
    assert presence.status("ann", 145.0) == AWAY  # a beacon missed
    assert presence.status("ann", 159.0) == OFFLINE  # app closed: offline within 60 s
    assert presence.status("never-heard", 100.0) == OFFLINE
    presence.heard("ann", 170.0)
    assert presence.status("ann", 171.0) == ONLINE


def test_beacons_only_from_an_idle_peer_at_most_one_per_period_per_group():
    presence = Presence()
    assert presence.beacons_due(["g1", "g2"], 0.0) == []  # not opened by the peer core: a period from now
    assert presence.get_timer(["g1", "g2"]) == BEACON_INTERVAL
    presence.spoke("g2", 20.0)  # this peer said something in g2
    assert presence.beacons_due(["g1", "g2"], 29.9) == []
    assert presence.beacons_due(["g1", "g2"], 30.0) == ["g1"]
    assert presence.beacons_due(["g1", "g2"], 30.5) == []  # not twice in a period
    assert presence.beacons_due(["g1", "g2"], 50.0) == ["g2"]
    due_times = [t for t in range(0, 600) if presence.beacons_due(["g1"], float(t))]
    assert all(b - a >= BEACON_INTERVAL for a, b in zip(due_times, due_times[1:]))


def test_strangers_cannot_grow_the_table_without_bound():
    presence = Presence(max_tracked=100)
    for i in range(1_000):
        presence.heard(f"stranger-{i}", float(i))
    assert len(presence._heard) == 100
    assert presence.last_heard("stranger-999") == 999.0 and presence.last_heard("stranger-0") is None


@pytest.fixture
def manager(tmp_path, monkeypatch):
    clock = [1_000.0]
    monkeypatch.setattr(clock_module, "now", lambda: clock[0])  # deadlines and presence
    monkeypatch.setattr(clock_module, "wall", lambda: clock[0])  # stamps
    m = GroupManager(Config(tmp_path, name="Ann", iface="127.0.0.1", zeroconf=False))  # never started: no sockets
    m.clock = clock
    yield m
    m.store.close()


def heartbeats_in(m):
    """The heartbeats sent, their ``at`` checked (this peer's wall clock in ms) and then left out."""
    sent = [wire.decode(data).message for data, _destination in m._outgoing]
    m._outgoing.clear()
    beats = [msg for msg in sent if isinstance(msg, wire.Heartbeat)]
    assert all(0 < msg.at <= int(m.clock[0] * 1000) for msg in beats)
    return [replace(msg, at=0) for msg in beats]


_ticks = itertools.count()


def beat(m, gid, seqno):
    """A HEARTBEAT as its sender signs it now (``at``: the wall clock in ms, one later each time)."""
    return wire.Heartbeat(gid, seqno, int(m.clock[0] * 1000) + next(_ticks))


def goodbye(m, gid):
    return wire.Goodbye(gid, int(m.clock[0] * 1000) + next(_ticks))


def join(m, who, gid, name):
    """``who`` joins ``gid`` the way a peer does: its own signed member record on the control channel."""
    m._on_control_datagrams(arriving([wire.encode(who, wire.Join(wire.sign_member(who, gid, name, 1, True)))]))
    m.flush()


def test_strangers_are_not_heard_and_cannot_push_a_member_out(manager):
    gid = manager.create_group("lunch")
    bob = crypto.Identity.generate()
    join(manager, bob, gid, "Bob")
    manager._on_data_datagrams(arriving([wire.encode(bob, beat(manager, gid, 1))]))
    flood = [wire.encode(crypto.Identity.generate(), beat(manager, gid, 1)) for _ in range(300)]
    manager.presence.max_tracked = 100  # a flood past the table's size, kept small for speed
    manager._on_data_datagrams(arriving(flood))
    manager._on_control_datagrams(arriving(flood))
    assert set(manager.presence._heard) == {bob.pid}
    assert manager.presence_of(gid)[bob.pid] == ONLINE


def test_an_idle_member_sends_one_heartbeat_per_group_per_30_s_and_what_it_hears_counts(manager):
    gid = manager.create_group("lunch")
    manager.flush()
    heartbeats_in(manager)
    manager.clock[0] += 29
    manager.flush()
    assert heartbeats_in(manager) == []
    manager.clock[0] += 1.5
    manager.flush()
    assert heartbeats_in(manager) == [wire.Heartbeat(gid, 0)]
    manager.flush()
    assert heartbeats_in(manager) == []

    bob = crypto.Identity.generate()
    join(manager, bob, gid, "Bob")
    datagram = wire.encode(bob, beat(manager, gid, 3))
    manager._on_data_datagrams(arriving([datagram]))
    assert manager.presence.status(bob.pid, manager.clock[0]) == ONLINE
    manager.clock[0] += 55
    assert manager.presence.status(bob.pid, manager.clock[0]) == OFFLINE
    assert manager.presence_of(gid) == {manager.pid: "online", bob.pid: "offline"}


def test_read_marks_survive_reopening_the_store_and_merge(tmp_path):
    store = Store(tmp_path / "db.sqlite3")
    assert store.read_marks("g") is None
    store.add_read_marks("g", [(1, 5), (9, 9)])
    store.add_read_marks("g", [(6, 7)])
    store.commit()
    store.close()
    store = Store(tmp_path / "db.sqlite3")
    assert store.read_marks("g") == [(1, 7), (9, 9)]
    assert store.read_marks("other") is None
    with pytest.raises(ValueError):
        store.add_read_marks("g", [(5, 1)])
    store.close()


def test_read_marks_stay_bounded(tmp_path):
    store = Store(tmp_path / "db.sqlite3")
    store.MAX_READ_RANGES = 50
    store.add_read_marks("g", [(2 * i, 2 * i) for i in range(200)])
    marks = store.read_marks("g")
    assert len(marks) <= 50 and marks[-1] == (398, 398) and marks[0][0] == 0
    store.close()


def test_the_manager_refuses_bad_read_marks_with_a_clear_error(manager):
    gid = manager.create_group("lunch")
    manager.mark_read(gid, [[1, 3]])
    assert manager.read_marks(gid) == [(1, 3)]
    with pytest.raises(manager_module.UsageError, match="bad read marks"):
        manager.mark_read(gid, [["a", 3]])


def test_a_member_back_from_offline_gets_a_beacon_at_once_but_at_most_one_per_gap(manager):
    from m2mc.middleware.presence import EARLY_BEACON_GAP

    gid = manager.create_group("lunch")
    bob = crypto.Identity.generate()
    join(manager, bob, gid, "Bob")
    manager.clock[0] += 60  # idle, Bob unheard: offline
    manager.flush()
    heartbeats_in(manager)
    manager.clock[0] += 2
    manager._on_data_datagrams(arriving([wire.encode(bob, beat(manager, gid, 1))]))  # Bob restarts
    manager.flush()
    assert heartbeats_in(manager) == [wire.Heartbeat(gid, 0)], "Bob learns at once that this peer is here"
    manager.core.presence.gone(bob.pid)  # Bob says goodbye and comes back, again and again
    manager.clock[0] += 1
    manager._on_data_datagrams(arriving([wire.encode(bob, beat(manager, gid, 1))]))
    manager.flush()
    assert heartbeats_in(manager) == [], "at most one early beacon per group per gap"
    manager.core.presence.gone(bob.pid)
    manager.clock[0] += EARLY_BEACON_GAP
    manager._on_data_datagrams(arriving([wire.encode(bob, beat(manager, gid, 1))]))
    manager.flush()
    assert heartbeats_in(manager) == [wire.Heartbeat(gid, 0)]
    manager.clock[0] += 1
    manager._on_data_datagrams(arriving([wire.encode(bob, beat(manager, gid, 1))]))  # online already
    manager.flush()
    assert heartbeats_in(manager) == []


def test_goodbye_shows_a_member_offline_at_once_and_only_a_member_can_say_it(manager):
    gid = manager.create_group("lunch")
    bob, cat, mallory = (crypto.Identity.generate() for _ in range(3))
    join(manager, bob, gid, "Bob")
    join(manager, cat, gid, "Cat")
    for who in (bob, cat):
        manager._on_data_datagrams(arriving([wire.encode(who, beat(manager, gid, 1))]))
    assert manager.presence_of(gid)[bob.pid] == ONLINE
    manager._on_data_datagrams(arriving([wire.encode(bob, goodbye(manager, gid))]))
    assert manager.presence_of(gid)[bob.pid] == OFFLINE and manager.presence_of(gid)[cat.pid] == ONLINE
    # A goodbye names only its signer: nobody can say it for Cat, and a stranger's is dropped.
    manager._on_data_datagrams(arriving([wire.encode(mallory, goodbye(manager, gid))]))
    assert manager.presence_of(gid)[cat.pid] == ONLINE
    manager._on_data_datagrams(arriving([wire.encode(bob, beat(manager, gid, 2))]))  # Bob is back
    assert manager.presence_of(gid)[bob.pid] == ONLINE


def test_closing_says_goodbye_in_every_joined_group_once(manager):
    first, second = manager.create_group("lunch"), manager.create_group("chess")
    manager.flush()
    manager._outgoing.clear()
    manager.core.say_goodbye()
    manager.flush()
    said = [wire.decode(data).message for data, _destination in manager._outgoing]
    assert sorted(m.gid for m in said if isinstance(m, wire.Goodbye)) == sorted([first, second])
    manager._outgoing.clear()
    manager.flush()
    assert not any(isinstance(wire.decode(data).message, wire.Goodbye) for data, _d in manager._outgoing)


def test_presence_says_whether_a_pid_comes_back():
    presence = Presence()
    assert presence.heard("bob", 0.0) is True
    assert presence.heard("bob", 10.0) is False
    assert presence.heard("bob", 100.0) is True  # silent past OFFLINE_AFTER: back
    presence.gone("bob")
    assert presence.status("bob", 100.0) == OFFLINE and presence.heard("bob", 101.0) is True


def test_a_group_that_talks_is_seen_now_not_when_it_was_last_announced(manager):
    gid = manager.create_group("lunch")
    bob, mallory = crypto.Identity.generate(), crypto.Identity.generate()
    join(manager, bob, gid, "Bob")
    announced = manager.group(gid).last_seen
    manager.clock[0] += 120
    manager._on_data_datagrams(arriving([wire.encode(mallory, beat(manager, gid, 1))]))  # not a member
    assert manager.group(gid).last_seen == announced
    manager._on_data_datagrams(arriving([wire.encode(bob, beat(manager, gid, 1))]))
    assert manager.group(gid).last_seen == manager.clock[0]
