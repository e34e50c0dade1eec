"""Operation counters a hostile member picks (issue 26, item 2): none freezes the group's operations.

In-process: the OBG core alone (a property test over any counters an attacker
may choose), the text composer, and a whole GroupManager (never started: no
sockets) fed a member's signed operation at the counter limit, then restarted.
The namespace-LAN version is ``tests/lan/test_lan_operation_counters.py``.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from m2mc.middleware import crypto, wire
from m2mc.middleware.chatops import GroupOperations, encode
from m2mc.middleware.manager import Config, GroupManager
from m2mc.middleware.obg import MAX_COUNTER, ObgCore, ObgError, Operation
from m2mc.middleware.types import UsageError
from tests.testbed.arrivals import arriving

HONEST, MAL, MAL2 = "h" * 32, "m" * 32, "n" * 32
TOP = MAX_COUNTER - 1
"""The highest counter the wire lets through."""


def core() -> ObgCore:
    return ObgCore(lambda mid: True)


def honest_op(obg: ObgCore, seqno: int, kind: str, target=None, text: str = "", emoji: str = "", on: bool = True):
    seen, counter = obg.stamp(kind, target, HONEST, emoji)
    return Operation((HONEST, seqno), kind, target, seen, counter, text=text, emoji=emoji, on=on)


# -- the core -------------------------------------------------------------------------


def test_after_an_operation_at_the_counter_limit_every_honest_operation_is_applied():
    obg = core()
    mine, theirs = (HONEST, 1), (MAL, 1)
    obg.receive(Operation((MAL, 2), "topic", None, None, TOP, text="owned by Mal"))
    obg.receive(Operation((MAL, 3), "pin", theirs, None, TOP, on=False))
    made = [honest_op(obg, 10, "topic", text="Friday lunch"),
            honest_op(obg, 11, "react", mine, emoji="👍"),
            honest_op(obg, 12, "edit", mine, text="hello, edited"),
            honest_op(obg, 13, "pin", theirs)]
    for op in made:
        assert 0 < op.counter < MAX_COUNTER, op
        assert obg.receive(op) == [op], op
    assert obg.topic().text == "Friday lunch"
    state = obg.state(mine)
    assert (state.text, state.reactions) == ("hello, edited", {"👍": [HONEST]})
    assert obg.state(theirs).pinned
    again = honest_op(obg, 14, "topic", text="and again")  # names an operation stamped at the limit
    assert obg.receive(again) == [again] and obg.topic().text == "and again"


def test_a_successor_outranks_what_it_saw_whatever_counter_it_carries():
    obg = core()
    obg.receive(Operation((MAL, 2), "topic", None, None, TOP, text="high"))
    low = Operation((HONEST, 2), "topic", None, (MAL, 2), 1, text="saw it")
    assert obg.receive(low) == [low] and obg.topic().text == "saw it"
    # a concurrent operation (it did not see "high") loses to the one that did, counter or not
    stale = Operation((MAL2, 2), "topic", None, None, TOP, text="stale")
    assert obg.receive(stale) == [stale] and obg.topic().text == "saw it"
    assert obg.rejected == 0


@pytest.mark.parametrize("counter", [0, -1, MAX_COUNTER, 2**63, 2**80])
def test_counters_outside_the_wire_range_are_refused_where_they_enter(counter):
    obg = core()
    with pytest.raises(ObgError, match="counter out of range"):
        obg.receive(Operation((MAL, 2), "topic", None, None, counter, text="x"))
    honest = honest_op(obg, 2, "topic", text="fine")
    assert obg.receive(honest) == [honest]


# -- property: no accepted sequence makes a later honest operation be refused ---------

MESSAGES = [(HONEST, 1), (HONEST, 2), (MAL, 1), (MAL2, 1)]
EMOJI = ("👍", "❤")
KINDS = ("edit", "delete", "react", "pin", "topic")
hostile_counter = st.one_of(st.sampled_from([1, 2, TOP - 1, TOP, MAX_COUNTER, 0]),
                            st.integers(-2, 2**64), st.integers(1, 2**20))
hostile = st.tuples(st.just("hostile"), st.sampled_from((MAL, MAL2)), st.sampled_from(KINDS),
                    st.integers(0, len(MESSAGES) - 1), st.integers(0, 1), st.booleans(),
                    st.integers(-3, 200), hostile_counter)
"""``seen`` index: -3 none, -2 an id never sent, -1 the author's own next-but-one, else an earlier operation."""
honest = st.tuples(st.just("honest"), st.sampled_from(KINDS), st.integers(0, len(MESSAGES) - 1),
                   st.integers(0, 1), st.booleans())


def effect_shown(obg: ObgCore, op: Operation) -> bool:
    if op.kind == "topic":
        return obg.topic().op_id == op.op_id
    state = obg.state(op.target)
    if op.kind == "pin":
        return state.pinned == op.on
    if op.kind == "react":
        return (HONEST in state.reactions.get(op.emoji, [])) == op.on
    if op.kind == "delete":
        return state.deleted
    return state.text == op.text


def snapshot(obg: ObgCore):
    states = {mid: obg.state(mid) for mid in MESSAGES}
    return ({mid: (s.edited, s.deleted, s.text, s.reactions, s.pinned) for mid, s in states.items()},
            obg.topic(), obg.pinned())


@settings(max_examples=300, deadline=None)
@given(actions=st.lists(st.one_of(hostile, honest), min_size=1, max_size=40), order=st.randoms(use_true_random=False))
def test_no_sequence_of_hostile_operations_makes_a_later_honest_one_be_refused(actions, order):
    obg = core()
    arrived: list[Operation] = []
    seqnos = {HONEST: 10, MAL: 10, MAL2: 10}
    honest_ops = 0
    for action in actions:
        if action[0] == "hostile":
            _, author, kind, target_index, emoji_index, on, seen_index, counter = action
            seqnos[author] += 1
            if seen_index == -3:
                seen = None
            elif seen_index == -2:
                seen = (MAL, 10**6)
            elif seen_index == -1:
                seen = (author, seqnos[author] + 2)
            else:
                seen = arrived[seen_index % len(arrived)].op_id if arrived else None
            op = Operation((author, seqnos[author]), kind, None if kind == "topic" else MESSAGES[target_index],
                           seen, counter, text=f"by {author[0]} {seqnos[author]}", emoji=EMOJI[emoji_index], on=on)
            arrived.append(op)
            try:
                obg.receive(op)
            except ObgError:
                pass  # malformed on its own: refused where it enters, and counted
            continue
        _, kind, target_index, emoji_index, on = action
        target = None if kind == "topic" else MESSAGES[target_index]
        if kind in ("edit", "delete"):
            target = (HONEST, 1 + target_index % 2)  # only the author edits
            if obg.is_deleted(target):
                continue  # the composer refuses it up front: "message … is deleted"
        seqnos[HONEST] += 1
        op = honest_op(obg, seqnos[HONEST], kind, target, text=f"honest {seqnos[HONEST]}",
                       emoji=EMOJI[emoji_index] if kind == "react" else "", on=on)
        rejected_before = obg.rejected
        delivered = obg.receive(op)
        assert delivered[:1] == [op], (op, delivered)
        assert obg.rejected == rejected_before
        if delivered == [op]:  # nothing that named it in advance came with it
            assert effect_shown(obg, op), op
        arrived.append(op)
        honest_ops += 1
    # A restart replays the store, and another member hears the same operations in another
    # order: both end where this peer is, honest operations included.
    for replay in (list(arrived), order.sample(arrived, len(arrived))):
        again = core()
        for op in replay:
            try:
                again.receive(op)
            except ObgError:
                pass
        assert snapshot(again) == snapshot(obg)
        assert again.rejected == obg.rejected and again.pending == obg.pending


# -- our own operations: refused means an error, never a mid --------------------------


def test_compose_refuses_an_operation_the_core_would_refuse(monkeypatch):
    ops = GroupOperations("g" * 26)
    # the stamp before this change: the clock's successor, past the limit after a hostile operation
    monkeypatch.setattr(ops.core, "stamp", lambda *args: (None, MAX_COUNTER))
    with pytest.raises(UsageError, match="counter out of range"):
        ops.compose(HONEST, "topic", None, text="lunch")


CAROL = crypto.Identity.generate()


def from_carol(gid, seqno, text, parent=None):
    return wire.encode(CAROL, wire.signed_data(CAROL, gid, seqno, parent, 0, "Carol", text))


def feed(manager, *datagrams):
    manager._on_data_datagrams(arriving(list(datagrams)))
    manager.flush()


def shown(manager, gid, mid):
    message = next(m for m in manager.history(gid) if m.mid == mid)
    return message.text, message.edited, message.reactions, message.pinned


def test_a_members_operation_at_the_counter_limit_freezes_nothing_also_after_a_restart(tmp_path):
    ann = GroupManager(Config(tmp_path / "ann", name="Ann", iface="127.0.0.1", zeroconf=False))
    again = None
    try:
        gid = ann.create_group("counters")
        ann._on_control_datagrams(arriving([wire.encode(CAROL, wire.Join(wire.sign_member(CAROL, gid, "Carol", 1, True)))]))
        ann.flush()
        hello = ann.send(gid, "hello", None)
        ann.flush()
        feed(ann, from_carol(gid, 1, encode("topic", None, TOP, "owned by Carol")),
             from_carol(gid, 2, encode("pin", None, TOP, on=False), hello))
        assert ann.topic(gid)[0] == "owned by Carol"
        ann.set_topic(gid, "Friday lunch")
        ann.react(gid, hello, "👍")
        ann.pin(gid, hello, True)
        ann.edit(gid, hello, "hello, edited")
        ann.flush()
        assert ann.topic(gid) == ("Friday lunch", ann.pid)
        assert shown(ann, gid, hello) == ("hello, edited", 1, {"👍": [ann.pid]}, True)
        assert ann.stats_dict()["operations_rejected"] == 0
        ann.store.close()
        again = GroupManager(Config(tmp_path / "ann", iface="127.0.0.1", zeroconf=False))
        assert again.topic(gid) == ("Friday lunch", ann.pid)
        assert shown(again, gid, hello) == ("hello, edited", 1, {"👍": [ann.pid]}, True)
        again.set_topic(gid, "after the restart")
        again.edit(gid, hello, "edited twice")
        again.flush()
        assert again.topic(gid)[0] == "after the restart"
        assert shown(again, gid, hello)[:2] == ("edited twice", 2)
    finally:
        (again or ann).store.close()


def test_a_refused_operation_of_ours_is_a_json_rpc_error_not_a_mid(tmp_path, monkeypatch):
    asyncio.run(_refused_over_json_rpc(tmp_path, monkeypatch))


async def _refused_over_json_rpc(tmp_path, monkeypatch):
    from m2mc.app.peer import JsonRpcPeer

    peer = JsonRpcPeer(lambda line: None)
    peer.manager = GroupManager(Config(tmp_path / "p", name="Pat", iface="127.0.0.1", zeroconf=False), peer)
    try:
        gid = peer.manager.create_group("rpc")
        monkeypatch.setattr(peer.manager.core.ops(gid).core, "stamp", lambda *args: (None, MAX_COUNTER))
        request = {"jsonrpc": "2.0", "id": 7, "method": "set_topic", "params": {"gid": gid, "text": "lunch"}}
        answer = peer.handle_line(json.dumps(request))
        answer = await answer if isinstance(answer, asyncio.Future) else answer
        assert "result" not in answer
        assert answer["error"]["code"] == -32000
        assert answer["error"]["message"].startswith("topic refused: counter out of range")
        peer.manager.flush()
        assert peer.manager.history(gid) == [] and peer.manager.topic(gid) == ("", "")
    finally:
        peer.manager.store.close()
