"""S_b ordering core: the paper's illustration, hostile input and delivery properties."""

import random
import subprocess
import sys
import tracemalloc

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from m2mc.middleware import mop
from m2mc.middleware.mop import CompiledSbOrderer, PySbOrderer

IMPLEMENTATIONS = [PySbOrderer] + ([CompiledSbOrderer] if CompiledSbOrderer is not None else [])
each_orderer = pytest.mark.parametrize("SbOrderer", IMPLEMENTATIONS, ids=lambda cls: cls.__name__)

B1, B2, B3, B4, A1 = ("B", 1), ("B", 2), ("B", 3), ("B", 4), ("A", 1)


def mids(deliveries):
    return [mid for mid, _, _ in deliveries]


@each_orderer
def test_paper_illustration(SbOrderer):
    orderer = SbOrderer()
    assert mids(orderer.receive(B1, None, "q")) == [B1]
    assert orderer.receive(B3, B2, "x") == []
    assert orderer.receive(B4, B3, "y") == []
    assert orderer.pending == 2
    assert orderer.waiting_for() == {B2}
    assert mids(orderer.receive(B2, B1, "z")) == [B2, B3, B4]
    assert orderer.pending == 0
    assert mids(orderer.receive(A1, B2, "answer")) == [A1]
    assert orderer.delivered_ranges() == {"B": [(1, 4)], "A": [(1, 1)]}


@each_orderer
def test_payload_and_parent_travel_with_delivery(SbOrderer):
    orderer = SbOrderer()
    orderer.receive(B2, B1, "reply")
    assert orderer.receive(B1, None, "root") == [(B1, None, "root"), (B2, B1, "reply")]


@each_orderer
def test_unrelated_messages_never_wait(SbOrderer):
    orderer = SbOrderer()
    assert orderer.receive(B3, B2, "held") == []
    assert mids(orderer.receive(A1, None, "other thread")) == [A1]
    assert mids(orderer.receive(("A", 2), A1, "reply in other thread")) == [("A", 2)]


@each_orderer
def test_release_is_depth_first_parent_first(SbOrderer):
    orderer = SbOrderer()
    root = ("r", 1)
    a, b, a1, a2, b1 = ("x", 1), ("y", 1), ("x", 2), ("y", 2), ("x", 3)
    for mid, parent in [(a1, a), (b1, b), (a, root), (a2, a), (b, root)]:
        assert orderer.receive(mid, parent) == []
    assert mids(orderer.receive(root, None)) == [root, a, a1, a2, b, b1]


@each_orderer
def test_duplicates_deliver_nothing(SbOrderer):
    orderer = SbOrderer()
    orderer.receive(B2, B1)
    assert orderer.receive(B2, B1) == []  # duplicate while held
    orderer.receive(B1, None)
    assert orderer.receive(B1, None) == []
    assert orderer.receive(B2, B1) == []
    assert orderer.duplicates == 3


@each_orderer
def test_self_parent_and_cycle_never_deliver_and_never_loop(SbOrderer):
    orderer = SbOrderer()
    assert orderer.receive(("x", 1), ("x", 1)) == []
    assert orderer.rejected == 1
    assert orderer.receive(("c", 1), ("c", 2)) == []
    assert orderer.receive(("c", 2), ("c", 1)) == []
    assert orderer.pending == 2
    assert orderer.waiting_for() == set()  # both parents are here, held in a cycle
    assert mids(orderer.receive(("ok", 1), None)) == [("ok", 1)]


@each_orderer
def test_held_store_is_bounded_and_evicts_oldest(SbOrderer):
    orderer = SbOrderer(max_held=100)
    for seq in range(1, 1001):
        orderer.receive(("evil", seq), ("ghost", seq))
    assert orderer.pending == 100
    assert orderer.evicted == 900
    # The survivors are the newest; an evicted message is simply not delivered later.
    assert mids(orderer.receive(("ghost", 1000), None)) == [("ghost", 1000), ("evil", 1000)]
    assert mids(orderer.receive(("ghost", 1), None)) == [("ghost", 1)]


@each_orderer
def test_mark_delivered_restores_state_and_releases(SbOrderer):
    orderer = SbOrderer()
    assert orderer.receive(B2, B1) == []
    assert mids(orderer.mark_delivered(B1)) == [B2]
    assert orderer.is_delivered(B1) and orderer.is_delivered(B2)
    assert orderer.mark_delivered(B1) == []


@each_orderer
def test_mark_delivered_of_a_held_message_forgets_its_wait(SbOrderer):
    orderer = SbOrderer()
    orderer.receive(("b", 1), ("a", 1), "reply")
    orderer.receive(("b", 2), ("a", 1), "second reply")
    assert orderer.mark_delivered(("b", 1)) == []
    assert orderer.pending == 1
    assert mids(orderer.receive(("a", 1), None, "root")) == [("a", 1), ("b", 2)]


@each_orderer
def test_delivered_state_is_compact_for_contiguous_seqnos(SbOrderer):
    orderer = SbOrderer()
    for seq in range(1, 100_001):
        orderer.receive(("s", seq), None)
    orderer.receive(("s", 100_005), None)
    assert orderer.delivered_ranges() == {"s": [(1, 100_000), (100_005, 100_005)]}
    assert orderer.highest_delivered("s") == 100_005
    assert orderer.delivered_set("s").gaps(100_005) == [(100_001, 100_004)]


@each_orderer
def test_invalid_bound_is_refused(SbOrderer):
    with pytest.raises(ValueError):
        SbOrderer(max_held=0)


# -- properties --------------------------------------------------------------


@st.composite
def forests_with_arrival_orders(draw):
    """A random reply forest (parents precede children in send order), then any
    arrival order of it, with some messages duplicated."""
    n = draw(st.integers(min_value=1, max_value=60))
    senders = ["a", "b", "c"]
    next_seq = {s: 0 for s in senders}
    messages = []
    for i in range(n):
        sender = draw(st.sampled_from(senders))
        next_seq[sender] += 1
        is_root = i == 0 or draw(st.booleans())
        parent = None if is_root else messages[draw(st.integers(0, i - 1))][0]
        messages.append(((sender, next_seq[sender]), parent))
    dupes = draw(st.lists(st.sampled_from(messages), max_size=10))
    arrival = draw(st.permutations(messages + dupes))
    return messages, arrival


@each_orderer
@settings(max_examples=300, deadline=None)
@given(forests_with_arrival_orders())
def test_every_message_once_after_its_parent(SbOrderer, case):
    messages, arrival = case
    orderer = SbOrderer()
    delivered_at = {}
    for mid, parent in arrival:
        was_parent_delivered = parent is None or parent in delivered_at
        out = orderer.receive(mid, parent, mid)
        if mid not in delivered_at and was_parent_delivered:
            # A message whose parent was already delivered is delivered on arrival.
            assert out and out[0][0] == mid
        for got_mid, got_parent, payload in out:
            assert got_mid not in delivered_at, "delivered twice"
            assert got_parent is None or got_parent in delivered_at, "reply before its parent"
            assert payload == got_mid
            delivered_at[got_mid] = len(delivered_at)
    assert set(delivered_at) == {mid for mid, _ in messages}
    assert orderer.pending == 0


@each_orderer
def test_large_shuffled_forest_matches_reference(SbOrderer):
    rng = random.Random(7)
    messages = []
    for i in range(5000):
        parent = messages[rng.randrange(i)][0] if i and rng.random() < 0.8 else None
        messages.append(((f"p{rng.randrange(20)}", i + 1), parent))
    rng.shuffle(messages)
    orderer = SbOrderer()
    order = [m for mid, parent in messages for m in mids(orderer.receive(mid, parent))]
    position = {mid: i for i, mid in enumerate(order)}
    assert len(order) == len(position) == 5000
    parents = dict(messages)
    assert all(parents[m] is None or position[parents[m]] < position[m] for m in order)


def _ranges_of(values):
    ranges = []
    for value in sorted(values):
        if ranges and ranges[-1][1] == value - 1:
            ranges[-1] = (ranges[-1][0], value)
        else:
            ranges.append((value, value))
    return ranges


@each_orderer
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 30), st.booleans()), max_size=200))
@example([(2, False), (4, False), (3, False), (4, False)])  # the run grows into a stray value, which comes again
@example([(5, True), (3, False), (4, False), (6, False), (6, True), (2, False)])
def test_delivered_ids_match_a_plain_set(SbOrderer, arrivals):
    """Whatever order seqnos arrive in, by receive or mark_delivered, the compact
    delivered-id state answers exactly as a set of them would."""
    orderer = SbOrderer()
    seen = set()
    for seqno, restored in arrivals:
        if restored:
            orderer.mark_delivered(("s", seqno))
        else:
            out = orderer.receive(("s", seqno), None)
            assert bool(out) == (seqno not in seen)
        seen.add(seqno)
    assert [v for v in range(0, 35) if orderer.is_delivered(("s", v))] == sorted(seen)
    assert orderer.delivered_ranges() == ({"s": _ranges_of(seen)} if seen else {})
    assert orderer.highest_delivered("s") == max(seen, default=0)
    assert list(orderer.delivered_set("s")) == sorted(seen)


# -- the compiled core against the reference ----------------------------------


def test_the_compiled_core_is_built_and_used():
    """The install compiles _sborder.c; a silent fallback to Python would cost 5x."""
    assert CompiledSbOrderer is not None, "middleware._sborder did not build (is a C compiler installed?)"
    assert mop.SbOrderer is (CompiledSbOrderer if mop.COMPILED else PySbOrderer)


_small_mids = st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 9))
_operations = st.lists(
    st.one_of(
        st.tuples(st.just("receive"), _small_mids, st.none() | _small_mids),
        st.tuples(st.just("mark_delivered"), _small_mids, st.none()),
        st.tuples(st.just("forget_delivered"), _small_mids, st.none()),
    ),
    max_size=120,
)


def _observable_state(orderer):
    everything = [(pid, seqno) for pid in "abcz" for seqno in range(11)]
    return {
        "pending": orderer.pending,
        "held": list(orderer.held()),
        "waiting_for": orderer.waiting_for(),
        "ranges": orderer.delivered_ranges(),
        "sets": {pid: list(ranges) for pid, ranges in orderer.delivered_sets()},
        "highest": [orderer.highest_delivered(pid) for pid in "abcz"],
        "delivered": [orderer.is_delivered(mid) for mid in everything],
        "payloads": [orderer.held_payload(mid) for mid in everything],
        "counters": (orderer.duplicates, orderer.evicted, orderer.rejected),
    }


@pytest.mark.skipif(CompiledSbOrderer is None, reason="the compiled core is not built")
@settings(max_examples=500, deadline=None)
@given(st.integers(1, 6), st.integers(1, 40), _operations)
@example(2, 40, [("receive", ("a", 1), ("b", 1)), ("receive", ("a", 1), None), ("receive", ("b", 1), None)])
@example(6, 12, [("receive", ("a", 2), ("a", 1)), ("receive", ("a", 3), ("a", 2)), ("receive", ("a", 1), None)])
def test_compiled_core_matches_the_reference(max_held, max_held_bytes, operations):
    """Any sequence of arrivals, restores, duplicates, self-parents, cycles, reused mids
    and evictions (by count and by bytes) gives the same deliveries, the same evicted
    messages and the same state in both."""
    reference = PySbOrderer(max_held=max_held, max_held_bytes=max_held_bytes)
    compiled = CompiledSbOrderer(max_held=max_held, max_held_bytes=max_held_bytes)
    for step, (operation, mid, parent) in enumerate(operations):
        if operation == "receive":
            size = step * 7 % 13
            expected, got = reference.receive(mid, parent, step, size), compiled.receive(mid, parent, step, size=size)
        elif operation == "mark_delivered":
            expected, got = reference.mark_delivered(mid), compiled.mark_delivered(mid)
        else:
            expected, got = reference.forget_delivered(mid), compiled.forget_delivered(mid)
        assert got == expected, f"step {step}: {operation}{mid, parent}"
        assert compiled.take_evicted() == reference.take_evicted(), f"step {step}"
        assert compiled.held_bytes == reference.held_bytes, f"step {step}"
    assert _observable_state(compiled) == _observable_state(reference)


@each_orderer
def test_held_messages_are_bounded_in_bytes_and_evictions_are_listed(SbOrderer):
    orderer = SbOrderer(max_held=1_000, max_held_bytes=100)
    for seq in range(1, 11):
        orderer.receive(("b", seq), ("a", seq), f"reply {seq}", 30)
    # 10 replies of 30 bytes against a bound of 100: the 7 oldest went, in arrival order.
    assert orderer.pending == 3 and orderer.held_bytes == 90 and orderer.evicted == 7
    assert orderer.take_evicted() == [(("b", seq), ("a", seq)) for seq in range(1, 8)]
    assert orderer.take_evicted() == []
    assert orderer.receive(("a", 9), None) == [(("a", 9), None, None), (("b", 9), ("a", 9), "reply 9")]
    assert orderer.held_bytes == 60
    orderer.mark_delivered(("b", 10))
    assert orderer.pending == 1 and orderer.held_bytes == 30
    # One message over the whole bound cannot be held at all.
    orderer.receive(("c", 1), ("a", 50), "huge", 101)
    assert orderer.take_evicted() == [(("b", 8), ("a", 8)), (("c", 1), ("a", 50))]
    assert orderer.pending == 0 and orderer.held_bytes == 0
    with pytest.raises(ValueError):
        SbOrderer(max_held_bytes=0)


@each_orderer
def test_size_of_is_asked_only_for_messages_it_holds(SbOrderer):
    asked = []

    def size_of(payload):
        asked.append(payload)
        if payload == "bad":
            raise RuntimeError("no size")
        return len(payload)

    orderer = SbOrderer(max_held_bytes=10, size_of=size_of)
    orderer.receive(("a", 1), None, "a root")
    orderer.receive(("b", 1), ("a", 2), "wait")
    orderer.receive(("b", 2), ("a", 3), "too long")
    assert asked == ["wait", "too long"]
    assert orderer.take_evicted() == [(("b", 1), ("a", 2))] and orderer.held_bytes == 8
    with pytest.raises(RuntimeError, match="no size"):
        orderer.receive(("b", 3), ("a", 4), "bad")
    assert orderer.pending == 1 and not orderer.is_delivered(("b", 3))
    orderer.receive(("b", 4), ("a", 5), "xx", 1)  # an explicit size wins
    assert asked[-1] == "bad" and orderer.held_bytes == 9


@each_orderer
def test_only_a_senders_highest_delivery_can_be_forgotten(SbOrderer):
    orderer = SbOrderer()
    for seqno in (5, 6, 1, 2, 9):
        orderer.mark_delivered(("me", seqno))
    assert not orderer.forget_delivered(("me", 6)) and not orderer.forget_delivered(("you", 1))
    assert orderer.forget_delivered(("me", 9)) and orderer.forget_delivered(("me", 6))
    assert orderer.forget_delivered(("me", 5)) and not orderer.forget_delivered(("me", 5))
    assert orderer.delivered_ranges() == {"me": [(1, 2)]} and orderer.highest_delivered("me") == 2
    assert orderer.forget_delivered(("me", 2)) and orderer.forget_delivered(("me", 1))
    assert orderer.delivered_ranges() == {} and not orderer.is_delivered(("me", 1))
    assert orderer.receive(("me", 1), None, "again") == [(("me", 1), None, "again")]


@pytest.mark.skipif(CompiledSbOrderer is None, reason="the compiled core is not built")
def test_compiled_core_refuses_malformed_mids_clearly():
    orderer = CompiledSbOrderer()
    for bad in ["a:1", ("a",), ("a", "1"), ("a", 1.0), ("a", 1, 2)]:
        with pytest.raises(TypeError, match="pid, seqno|seqno must be an int"):
            orderer.receive(bad, None)
    for bad in [("a", -1), ("a", 2**63)]:
        with pytest.raises(ValueError, match=r"seqno must be in \[0, 2\*\*63 - 1\]"):
            orderer.receive(("b", 1), bad)
    assert orderer.pending == 0 and orderer.delivered_ranges() == {}


@each_orderer
def test_made_up_parents_leave_nothing_behind_once_evicted(SbOrderer):
    """Replies naming parents from ever new made-up senders, evicted in turn, cost
    no memory beyond the bound on held messages."""
    orderer = SbOrderer(max_held=10)

    def answer_ghosts(first, last):
        for seq in range(first, last):
            orderer.receive(("evil", seq), (f"ghost{seq}", 1))

    tracemalloc.start()
    try:
        answer_ghosts(1, 2001)
        before = tracemalloc.get_traced_memory()[0]
        answer_ghosts(2001, 22001)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert orderer.pending == 10 and orderer.evicted == 21990
    assert len(orderer.waiting_for()) == 10
    assert grown < 64 * 1024, f"{grown} bytes more after 20,000 more made-up senders"


@pytest.mark.skipif(CompiledSbOrderer is None, reason="the compiled core is not built")
def test_compiled_core_survives_the_collector_at_every_allocation():
    """Orderers made, filled with payloads that refer back to them (a cycle), and
    collected while the cyclic collector runs at nearly every allocation.  Run in a
    child process: a fault here must fail the test, not end the test run."""
    code = (
        "import gc\n"
        "gc.set_threshold(1)\n"
        "from m2mc.middleware.mop import CompiledSbOrderer\n"
        "orderers = []\n"
        "for _ in range(300):\n"
        "    orderers.append(CompiledSbOrderer(max_held=5))\n"
        "    for seq in range(1, 9):\n"
        "        orderers[-1].receive(('b', seq), ('a', seq), [orderers[-1]])\n"
        "del orderers\n"
        "gc.collect()\n"
        "print('survived')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "survived" in result.stdout, result.stderr
