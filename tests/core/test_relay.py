"""The relay-tree core (middleware/relay.py), in-process: the view, each writer's spanning tree,
pulls of what a lost push left out, the score that shuts out a relay that relays nothing, and its
bounds; and the simulator of app/bench/relay.py on a small group with loss, churn and silent relays."""

from __future__ import annotations

import pytest

from m2mc.app.bench import relay as bench
from m2mc.middleware import relay
from m2mc.middleware.relay import Graft, IHave, Prune, Push, RelayTree

PIDS = [f"{n:032x}" for n in range(60)]


def trees_for(members: list[str], group: str = "g") -> dict[str, RelayTree]:
    trees = {pid: RelayTree(group, pid) for pid in members}
    for tree in trees.values():
        tree.set_members(members, 0.0)
    return trees


@pytest.mark.parametrize("n", [2, 5, 7, 8, 9, 27, 50, 200])
def test_the_view_is_small_symmetric_and_the_same_on_every_member(n):
    members = [f"{i:032x}" for i in range(n)]
    views = {pid: relay.view_of("g", pid, members) for pid in members}
    for pid, view in views.items():
        assert pid not in view
        assert len(view) == n - 1 if n <= relay.MAX_VIEW + 1 else 4 <= len(view) <= relay.MAX_VIEW
        for other in view:
            assert pid in views[other], (pid, other)


@pytest.mark.parametrize("n", [2, 5, 8, 9, 27, 50, 200])
def test_each_writers_tree_spans_the_group_along_view_links(n):
    members = [f"{i:032x}" for i in range(n)]
    trees = trees_for(members)
    for writer in members[:: max(1, n // 7)]:
        parents = {pid: trees[pid].tree(writer)[0] for pid in members}
        assert parents[writer] is None
        for pid in members:
            if pid != writer:
                assert parents[pid] in trees[pid].view, "a parent is a neighbour"
                assert pid in trees[parents[pid]].tree(writer)[1], "and counts it as its child"
        for pid in members:  # every member reaches the writer, so the tree has no cycle
            seen, at = set(), pid
            while at != writer:
                assert at not in seen
                seen.add(at)
                at = parents[at]
            a = max(2, round(n ** (1 / 3)))
            assert len(seen) <= 2 * (a - 1) + n // (2 * a * a), "depth: at most a - 1 steps of 1 and of a"
        assert len(trees[writer].tree(writer)[1]) <= relay.MAX_VIEW


@pytest.mark.parametrize("n", [8, 64, 199, 1000])
def test_every_place_on_the_ring_has_a_path_to_the_writer_by_view_links_only(n):
    steps = set(relay.steps(n))
    a = max(2, round(n ** (1 / 3)))
    for e in range(-((n - 1) // 2), n // 2 + 1):
        hops, at = 0, e
        while at != 0:
            up = relay.tree_parent_offset(at, n)
            assert abs(at - up) in steps and abs(up) < abs(at)
            at, hops = up, hops + 1
        assert hops <= 2 * (a - 1) + n // (2 * a * a)


def run(trees: dict[str, RelayTree], now: float, until: float, drop=lambda to, item, sender: False,
        writes: dict[float, tuple[str, int]] | None = None) -> dict[tuple[str, int], set[str]]:
    """A LAN of 2 ms a hop that loses what ``drop`` says, from event to event: who got which message."""
    got: dict[tuple[str, int], set[str]] = {}
    in_flight: list[tuple[float, str, object, str]] = []
    writes = dict(writes or {})
    t = now
    while t < until:
        for when in [w for w in writes if w <= t]:
            mid = writes.pop(when)
            trees[mid[0]].publish(mid, t)
            got.setdefault(mid, set()).add(mid[0])
        for item in [f for f in in_flight if f[0] <= t]:
            in_flight.remove(item)
            _, to, message, sender = item
            tree = trees[to]
            if isinstance(message, Push):
                if tree.received(message.mid, sender, t):
                    got.setdefault(message.mid, set()).add(to)
                if message.ranges:
                    tree.ihave(message.ranges, sender, t)
            elif isinstance(message, IHave):
                tree.ihave(message.ranges, sender, t)
            elif isinstance(message, Graft):
                tree.graft(message.ranges, sender, t)
            elif isinstance(message, Prune):
                tree.prune(message.writers, sender)
        upcoming = [until, *writes, *(f[0] for f in in_flight)]
        for pid, tree in trees.items():
            deadline = tree.get_timer()
            if deadline is not None and deadline <= t:
                tree.handle_timer(t)
                deadline = tree.get_timer()
            for to, message in tree.datagrams_to_send():
                if not drop(to, message, pid):
                    in_flight.append((t + 0.002, to, message, pid))
                    upcoming.append(t + 0.002)
            if deadline is not None:
                upcoming.append(deadline)
        t = max(t + 1e-6, min(upcoming))
    return got


def test_a_message_goes_down_its_writers_tree_once_to_each_member():
    members = PIDS[:50]
    trees = trees_for(members)
    got = run(trees, 0.0, 0.3, writes={0.0: (members[3], 1)})
    assert got[(members[3], 1)] == set(members)
    assert sum(tree.pushed for tree in trees.values()) == len(members) - 1
    assert sum(tree.duplicates for tree in trees.values()) == 0


def test_a_relay_that_pushes_nothing_is_routed_around_and_then_shut_out():
    members = PIDS[:50]
    trees = trees_for(members)
    writer = members[0]
    silent = next(pid for pid in members if pid != writer and trees[pid].tree(writer)[1])  # a relay with children
    below = trees[silent].tree(writer)[1]

    def drop(to, message, sender):
        return sender == silent and isinstance(message, Push) and message.mid[0] != silent

    writes = {0.1 + 0.4 * i: (writer, i + 1) for i in range(24)}  # past VIEW_SETTLE
    got = run(trees, 0.0, 11.0, drop=drop, writes=writes)
    for mid in writes.values():
        assert got[mid] >= set(members) - {silent}, f"{mid} missed {set(members) - got[mid]}"
    assert all(silent in trees[child].distrusted(11.0) for child in below), \
        "the children it left to others' pulls no longer count on it"


def test_a_relay_that_announces_but_never_answers_a_graft_is_distrusted():
    tree = RelayTree("g", PIDS[0])
    tree.set_members(PIDS[:10], 0.0)
    liar = tree.view[0]
    now = 0.0
    for seqno in range(1, 6):
        tree.ihave(((PIDS[20], seqno, seqno),), liar, now)
        now += relay.GRAFT_WAIT + 0.01
        tree.handle_timer(now)
        asked = [to for to, item in tree.datagrams_to_send() if isinstance(item, Graft)]
        if liar not in tree.view:
            break
        assert asked == [liar]
    assert liar not in tree.view and liar in tree.distrusted(now)
    tree.ihave(((PIDS[20], 99, 99),), liar, now)  # its announcements are no longer followed
    tree.handle_timer(now + 1)
    assert not [item for _, item in tree.datagrams_to_send() if isinstance(item, Graft)]
    tree.handle_timer(now + relay.DISTRUST_FOR + 1)
    assert liar in tree.view, "distrust ends"


def test_garbage_shuts_a_neighbour_out_at_once_and_a_restart_forgives_it():
    tree = RelayTree("g", PIDS[0])
    tree.set_members(PIDS[:10], 0.0)
    bad = tree.view[1]
    tree.garbage(bad, 1.0)
    assert bad not in tree.view
    tree.publish((PIDS[0], 1), 1.1)
    assert bad not in [to for to, _ in tree.datagrams_to_send()]
    tree.set_members([pid for pid in PIDS[:10] if pid != bad], 2.0)  # gone (presence) ...
    tree.set_members(PIDS[:10], 3.0)  # ... and back: a new start
    assert bad in tree.view


def test_lost_pushes_are_pulled_from_announcers_and_honest_neighbours_keep_their_place():
    members = PIDS[:30]
    trees = trees_for(members)
    counter = iter(range(1_000_000))

    def drop(to, message, sender):  # every 10th push
        return isinstance(message, Push) and next(counter) % 10 == 9

    writes = {0.05 * i: (members[i % len(members)], i // len(members) + 1) for i in range(60)}
    got = run(trees, 0.0, 4.0, drop=drop, writes=writes)
    for mid in writes.values():
        assert got[mid] == set(members), mid
    assert not any(tree.distrusted(4.0) for tree in trees.values())


def test_a_neighbour_back_from_a_crash_is_told_what_went_by():
    members = PIDS[:20]
    trees = trees_for(members)
    sleeper = members[5]
    others = [pid for pid in members if pid != sleeper]
    for pid in others:
        trees[pid].set_members(others, 0.0)
    writes = {0.01 * i: (members[0], i + 1) for i in range(5)}
    run({pid: trees[pid] for pid in others}, 0.0, 0.5, writes=writes)
    for pid in members:
        trees[pid].set_members(members, 1.0)
    got = run(trees, 1.0, 2.5)
    assert all(sleeper in got.get(mid, ()) for mid in writes.values())


def test_announcements_and_pulls_are_bounded():
    tree = RelayTree("g", PIDS[0])
    tree.set_members(PIDS[:10], 0.0)
    neighbour, stranger = tree.view[0], PIDS[40]
    huge = tuple((f"{w:032x}", 1, 10**9) for w in range(1000))
    tree.ihave(huge, stranger, 0.0)
    assert tree.get_timer() is None, "a non-neighbour's announcement is ignored"
    tree.ihave(huge, neighbour, 0.0)
    assert tree.get_timer() == relay.GRAFT_WAIT
    tree.handle_timer(relay.GRAFT_WAIT)
    (to, graft), = tree.datagrams_to_send()
    assert to == neighbour and sum(last - first + 1 for _, first, last in graft.ranges) == relay.MAX_SEQNOS
    tree.graft(huge, neighbour, 0.0)
    assert not tree.datagrams_to_send(), "nothing held, nothing sent"
    for seqno in range(1, 10_001):
        tree.publish((PIDS[0], seqno), 0.0)
    tree.datagrams_to_send()
    tree.graft(((PIDS[0], 1, 10**9),), neighbour, 0.0)
    assert len(tree.datagrams_to_send()) == relay.MAX_SEQNOS


def test_the_simulator_at_50_members_meets_the_issues_bounds_beside_fanout():
    """The bench's own figures on a short run: everything delivered, few copies, little control."""
    lan = bench.Lan(50, 12.0, 20.0, 0.05, 0.10, seed=3)
    tree = bench.run_tree(lan)
    fanout = bench.run_fanout(bench.Lan(50, 12.0, 20.0, 0.05, 0.10, seed=3))
    print(tree.line("tree", 50, len(lan.written), 12.0))
    print(fanout.line("fanout", 50, len(lan.written), 12.0))
    assert tree.delivered == tree.expected > 0
    latencies = sorted(tree.latencies)
    assert latencies[int(0.99 * len(latencies))] < 1.0
    assert tree.copies / (len(lan.written) * 50) <= 4
    assert sum(tree.writer_copies) / len(tree.writer_copies) <= 8
    assert tree.control_bytes / (50 * 12.0) < 2000
    assert sum(fanout.writer_copies) / len(fanout.writer_copies) > 40, "the ratio the tree exists for"
