"""Tests of the OBG core (middleware.obg): per-object ordering, conflicts, rejection, bounds, convergence."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import emoji as emoji_data

from m2mc.middleware.obg import MAX_REACTION_EMOJI, ObgCore, ObgError, Operation, is_reaction_emoji

A, B, C = "a" * 32, "b" * 32, "c" * 32
MSG_A, MSG_B = (A, 1), (B, 1)


def everything_delivered(mid):
    return True


def core(**kwargs) -> ObgCore:
    return ObgCore(everything_delivered, **kwargs)


def ids(ops):
    return [op.op_id for op in ops]


# -- what waits for what --------------------------------------------------------------


def test_an_operation_waits_for_its_message_and_nothing_else():
    delivered = set()
    obg = ObgCore(lambda mid: mid in delivered)
    react = Operation((B, 2), "react", MSG_A, None, 1, emoji="👍")
    topic = Operation((B, 3), "topic", None, None, 2, text="lunch")
    assert obg.receive(react) == []
    assert obg.waiting_for() == {("msg", MSG_A)}
    assert ids(obg.receive(topic)) == [(B, 3)]  # another object: never waits
    delivered.add(MSG_A)
    assert ids(obg.message_delivered(MSG_A)) == [(B, 2)]
    assert obg.state(MSG_A).reactions == {"👍": [B]}
    assert obg.pending == 0 and obg.waiting_for() == set()


def test_an_edit_waits_for_the_edit_it_saw_while_other_objects_go_on():
    obg = core()
    first = Operation((A, 2), "edit", MSG_A, None, 1, text="one")
    second = Operation((A, 3), "edit", MSG_A, (A, 2), 2, text="two")
    pin = Operation((B, 2), "pin", MSG_A, None, 3)
    react = Operation((C, 1), "react", MSG_A, None, 3, emoji="🎉")
    assert obg.receive(second) == []
    assert ids(obg.receive(pin)) == [(B, 2)]
    assert ids(obg.receive(react)) == [(C, 1)]
    assert obg.state(MSG_A).text is None  # "two" waits for "one"
    assert ids(obg.receive(first)) == [(A, 2), (A, 3)]
    state = obg.state(MSG_A)
    assert (state.text, state.edited, state.pinned) == ("two", 2, True)


def test_a_chain_delivers_in_order_however_it_arrives():
    ops = [Operation((A, 1 + k), "topic", None, (A, k) if k else None, k + 1, text=f"t{k}") for k in range(50)]
    shuffled = ops[:]
    random.Random(3).shuffle(shuffled)
    obg = core()
    delivered = []
    for op in shuffled:
        delivered += obg.receive(op)
    assert delivered == ops
    assert obg.topic().text == "t49"


# -- conflicts ------------------------------------------------------------------------


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_concurrent_topic_settings_the_higher_counter_then_pid_wins(order):
    base = Operation((C, 1), "topic", None, None, 1, text="base")
    by_a = Operation((A, 5), "topic", None, (C, 1), 2, text="from a")
    by_b = Operation((B, 5), "topic", None, (C, 1), 2, text="from b")  # same counter: pid b > a
    obg = core()
    obg.receive(base)
    for k in order:
        obg.receive((by_a, by_b)[k])
    assert obg.topic().text == "from b" and obg.topic().by == B
    later = Operation((A, 6), "topic", None, (B, 5), 3, text="a again")
    obg.receive(later)
    assert obg.topic().text == "a again"


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_pin_and_unpin_from_two_members_conflict(order):
    pin = Operation((A, 5), "pin", MSG_B, None, 4, on=True)
    unpin = Operation((C, 5), "pin", MSG_B, None, 3, on=False)
    obg = core()
    for k in order:
        obg.receive((pin, unpin)[k])
    assert obg.state(MSG_B).pinned and obg.pinned() == [MSG_B]


def test_reactions_of_two_reactors_commute_and_one_reactors_add_remove_are_ordered():
    obg = core()
    obg.receive(Operation((A, 5), "react", MSG_B, None, 1, emoji="👍"))
    obg.receive(Operation((C, 5), "react", MSG_B, None, 1, emoji="👍"))
    obg.receive(Operation((C, 6), "react", MSG_B, None, 1, emoji="❤"))
    assert obg.state(MSG_B).reactions == {"❤": [C], "👍": [A, C]}
    removal = Operation((A, 7), "react", MSG_B, (A, 5), 2, emoji="👍", on=False)
    obg.receive(removal)
    assert obg.state(MSG_B).reactions == {"❤": [C], "👍": [C]}
    # operations of one object that did not see each other: the higher (counter, pid, seqno) wins
    older = Operation((C, 4), "react", MSG_B, None, 1, emoji="❤", on=False)
    obg.receive(older)
    assert obg.state(MSG_B).reactions["❤"] == [C]
    newer = Operation((C, 7), "react", MSG_B, None, 1, emoji="❤", on=False)
    obg.receive(newer)
    assert "❤" not in obg.state(MSG_B).reactions


@pytest.mark.parametrize("text, ok", [
    ("👍", True), ("❤", True), ("❤️", True), ("👍🏽", True), ("🇫🇷", True), ("1️⃣", True),
    ("👩\u200d👩\u200d👧\u200d👦", True),  # a ZWJ family: one grapheme
    ("", False), ("lol", False), ("+1", False), ("👍👍", False), ("👍 ", False),
    ("🏽", False),  # a skin tone alone is a component, not an emoji to react with
    ("\u202e👍", False), ("👍\u200b", False),
])
def test_a_reaction_is_a_single_emoji_grapheme(text, ok):
    assert is_reaction_emoji(text) is ok
    op = Operation((B, 2), "react", MSG_A, None, 1, emoji=text)
    obg = core()
    if ok:
        assert ids(obg.receive(op)) == [(B, 2)]
    else:
        with pytest.raises(ObgError, match="needs an emoji"):
            obg.receive(op)
        assert obg.rejected == 1 and not obg.touches(MSG_A)


MANY_EMOJI = sorted(e for e, data in emoji_data.EMOJI_DATA.items() if is_reaction_emoji(e))[:MAX_REACTION_EMOJI + 5]


def test_a_message_shows_at_most_50_distinct_emoji_first_come_first_kept():
    obg = core()
    for n, emoji in enumerate(MANY_EMOJI):
        obg.receive(Operation((B, 10 + n), "react", MSG_A, None, 1 + n, emoji=emoji))
    shown = obg.state(MSG_A).reactions
    assert list(shown) == sorted(MANY_EMOJI[:MAX_REACTION_EMOJI])
    assert obg.reactions_refused == 5 and obg.rejected == 5
    assert len(obg.delivered_ops()) == MAX_REACTION_EMOJI  # a refused one is not kept
    assert not obg.takes_reaction(MSG_A, MANY_EMOJI[-1]) and obg.takes_reaction(MSG_A, MANY_EMOJI[0])
    # another reactor on an emoji already shown still counts
    assert ids(obg.receive(Operation((C, 1), "react", MSG_A, None, 99, emoji=MANY_EMOJI[0]))) == [(C, 1)]
    assert obg.state(MSG_A).reactions[MANY_EMOJI[0]] == [B, C]
    # the refused reaction's own later removal names it, and goes with it
    assert obg.receive(Operation((B, 100), "react", MSG_A, (B, 10 + MAX_REACTION_EMOJI), 100,
                                 emoji=MANY_EMOJI[MAX_REACTION_EMOJI], on=False)) == []
    assert obg.rejected == 6
    # an emoji whose last reactor takes it back frees its place for a new one
    obg.receive(Operation((B, 101), "react", MSG_A, (B, 11), 101, emoji=MANY_EMOJI[1], on=False))
    assert MANY_EMOJI[1] not in obg.state(MSG_A).reactions and obg.takes_reaction(MSG_A, MANY_EMOJI[-1])
    assert ids(obg.receive(Operation((C, 2), "react", MSG_A, None, 102, emoji=MANY_EMOJI[-1]))) == [(C, 2)]
    assert len(obg.state(MSG_A).reactions) == MAX_REACTION_EMOJI
    # other messages have places of their own
    assert ids(obg.receive(Operation((C, 3), "react", MSG_B, None, 103, emoji=MANY_EMOJI[-2]))) == [(C, 3)]


def test_removing_a_reaction_that_is_not_there_takes_no_place():
    obg = core()
    for n, emoji in enumerate(MANY_EMOJI[:MAX_REACTION_EMOJI]):
        obg.receive(Operation((C, 1 + n), "react", MSG_A, None, 1 + n, emoji=emoji, on=False))
    assert obg.state(MSG_A).reactions == {} and obg.takes_reaction(MSG_A, MANY_EMOJI[-1])


def test_a_delete_absorbs_every_edit_whatever_their_order():
    edit = Operation((A, 3), "edit", MSG_A, None, 9, text="late edit")
    delete = Operation((A, 2), "delete", MSG_A, None, 1)
    for order in ((edit, delete), (delete, edit)):
        obg = core()
        for op in order:
            obg.receive(op)
        state = obg.state(MSG_A)
        assert state.deleted and state.current_text("original") == ""
        assert state.edited == 1


# -- rejection ------------------------------------------------------------------------


def test_a_forged_edit_of_someone_elses_message_is_rejected_and_counted():
    obg = core()
    forged = Operation((C, 2), "edit", MSG_A, None, 1, text="I never said that")
    with pytest.raises(ObgError, match="author"):
        obg.receive(forged)
    with pytest.raises(ObgError, match="author"):
        obg.receive(Operation((C, 3), "delete", MSG_A, None, 1))
    assert obg.rejected == 2
    assert obg.state(MSG_A).text is None and not obg.state(MSG_A).deleted
    obg.receive(forged)  # the same forged operation again: a duplicate, not a second rejection
    assert (obg.rejected, obg.duplicates) == (2, 1)


@pytest.mark.parametrize(
    "op, message",
    [
        (Operation((A, 2), "shout", MSG_A, None, 1), "unknown operation kind"),
        (Operation((A, 2), "topic", MSG_A, None, 1), "names no message"),
        (Operation((A, 2), "pin", None, None, 1), "names no message"),
        (Operation((A, 2), "react", MSG_A, None, 1), "needs an emoji"),
        (Operation((A, 2), "pin", MSG_A, None, 0), "counter out of range"),
        (Operation((A, 2), "pin", MSG_A, None, 2**60), "counter out of range"),
        (Operation((A, 2), "pin", MSG_A, (A, 2), 1), "cannot name itself"),
    ],
)
def test_malformed_operations_get_a_clear_error(op, message):
    obg = core()
    with pytest.raises(ObgError, match=message):
        obg.receive(op)
    assert obg.rejected == 1 and obg.pending == 0


def test_naming_another_objects_operation_is_rejected_with_its_dependants():
    obg = core()
    obg.receive(Operation((A, 2), "pin", MSG_A, None, 5))
    wrong_object = Operation((B, 2), "topic", None, (A, 2), 6, text="x")
    dependant = Operation((B, 4), "topic", None, (B, 2), 7, text="y")
    assert obg.receive(dependant) == []  # held for (B, 2)
    assert obg.receive(wrong_object) == []
    assert obg.rejected == 2 and obg.pending == 0
    assert obg.topic().text == "" and obg.state(MSG_A).pinned


def test_an_operation_with_a_counter_not_above_the_one_it_names_still_outranks_it():
    obg = core()
    obg.receive(Operation((A, 2), "pin", MSG_A, None, 5))
    low_counter = Operation((B, 3), "pin", MSG_A, (A, 2), 5, on=False)
    assert obg.receive(low_counter) == [low_counter]
    assert obg.rank((B, 3)) == (6, B, 3) and not obg.state(MSG_A).pinned
    assert obg.rejected == 0


# -- bounded memory -------------------------------------------------------------------


def test_held_operations_are_bounded_by_count_and_evicted_ones_come_back():
    obg = core(max_held=10)
    chain = [Operation((A, 1 + k), "topic", None, (A, k) if k else None, k + 1, text=f"t{k}") for k in range(31)]
    evicted = []
    for op in chain[1:]:
        assert obg.receive(op) == []
        evicted += obg.take_evicted()
    assert obg.pending == 10 and obg.evicted == 20
    assert evicted == [(op.op_id, ("op", op.seen)) for op in chain[1:21]] and obg.take_evicted() == []
    assert len(obg.receive(chain[0])) == 1  # (A, 2) was evicted: the chain stops there
    assert obg.waiting_for() == {("op", (A, 2))} or obg.pending == 10
    # fetching the evicted ones again (not duplicates: they were forgotten) delivers everything
    delivered = []
    for op in chain[1:21]:
        delivered += obg.receive(op)
    assert ids(delivered) == ids(chain[1:]) and obg.topic().text == "t30" and obg.pending == 0


def test_held_operations_are_bounded_by_bytes():
    obg = core(max_held_bytes=10_000)
    for k in range(100):
        obg.receive(Operation((B, 2 + k), "topic", None, (A, 99), 100 + k, text="x" * 900), size=1000)
    assert obg.held_bytes <= 10_000 and obg.pending == 10 and obg.evicted == 90


# -- convergence under any delivery order ---------------------------------------------

MEMBERS = (A, B, C)
MESSAGES = [(pid, 1) for pid in MEMBERS] + [(pid, 2) for pid in MEMBERS]
EMOJI = ("👍", "❤", "😂")

action = st.one_of(
    st.tuples(st.just("op"), st.integers(0, 2), st.sampled_from(("edit", "delete", "react", "pin", "topic", "forge")),
              st.integers(0, len(MESSAGES) - 1), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("sync"), st.integers(0, 2), st.integers(0, 2)),
)


def make_history(actions) -> list[Operation]:
    """Three members making operations, each from what it has delivered so far, syncing now and then."""
    cores = [core() for _ in MEMBERS]
    seqno = [10] * 3
    made: list[list[Operation]] = [[] for _ in MEMBERS]
    seen_upto = [[0] * 3 for _ in MEMBERS]
    for act in actions:
        if act[0] == "sync":
            _, to, frm = act
            for op in made[frm][seen_upto[to][frm]:]:
                try:
                    cores[to].receive(op)
                except ObgError:
                    pass  # a forged one
            seen_upto[to][frm] = len(made[frm])
            continue
        _, who, kind, target_index, emoji_index, on = act
        author = MEMBERS[who]
        seqno[who] += 1
        op_id = (author, seqno[who])
        target = MESSAGES[target_index]
        if kind == "forge":
            victim = target if target[0] != author else (MEMBERS[(who + 1) % 3], 1)
            made[who].append(Operation(op_id, "edit", victim, None, 1, text="forged"))
            continue
        if kind in ("edit", "delete"):
            target = (author, target[1])
        if kind == "topic":
            target = None
        emoji = EMOJI[emoji_index] if kind == "react" else ""
        seen, counter = cores[who].stamp(kind, target, author, emoji)
        op = Operation(op_id, kind, target, seen, counter, text=f"{kind} {op_id[1]} by {author[0]}", emoji=emoji, on=on)
        assert cores[who].receive(op) == [op]  # our own operation is delivered at once
        made[who].append(op)
    return [op for ops in made for op in ops]


def snapshot(obg: ObgCore):
    states = {}
    for mid in MESSAGES:
        s = obg.state(mid)
        states[mid] = (s.edited, s.deleted, s.current_text("original"), s.reactions, s.pinned)
    return states, obg.topic(), obg.pinned()


def expected_snapshot(history: list[Operation]):
    """The state the rules define, computed straight from the set of operations (not by the core)."""
    valid = [op for op in history if op.kind not in ("edit", "delete") or op.target[0] == op.author]
    by_id = {op.op_id: op for op in valid}

    def rank(op: Operation) -> tuple:
        effective = op.counter if op.seen is None else max(op.counter, rank(by_id[op.seen])[0] + 1)
        return (effective, op.op_id[0], op.op_id[1])

    best: dict[tuple, Operation] = {}
    for op in valid:
        key = op.object_key
        if key[0] == "text":
            continue
        if key not in best or rank(op) > rank(best[key]):
            best[key] = op
    states = {}
    for mid in MESSAGES:
        edits = [op for op in valid if op.kind == "edit" and op.target == mid]
        deleted = any(op.kind == "delete" and op.target == mid for op in valid)
        text = "" if deleted else (max(edits, key=rank).text if edits else "original")
        reactions: dict[str, list[str]] = {}
        for key, op in sorted(best.items(), key=lambda item: str(item[0])):
            if key[0] == "react" and key[1] == mid and op.on:
                reactions.setdefault(op.emoji, []).append(op.author)
        reactions = {e: sorted(p) for e, p in sorted(reactions.items())}
        pin = best.get(("pin", mid))
        states[mid] = (len(edits), deleted, text, reactions, bool(pin and pin.on))
    topic_op = best.get(("topic",))
    topic = (topic_op.text, topic_op.author, topic_op.op_id) if topic_op else ("", "", None)
    pinned = sorted(mid for mid in MESSAGES if states[mid][4])
    return states, topic, pinned


@settings(max_examples=150, deadline=None)
@given(
    actions=st.lists(action, min_size=1, max_size=40),
    order_seed=st.randoms(use_true_random=False),
    duplicate_share=st.floats(0, 0.5),
    loss_share=st.floats(0, 0.5),
)
def test_any_delivery_order_with_duplicates_and_loss_repair_converges(actions, order_seed, duplicate_share, loss_share):
    history = make_history(actions)
    expected = expected_snapshot(history)
    arrivals = history + [op for op in history if order_seed.random() < duplicate_share]
    order_seed.shuffle(arrivals)
    lost = {op.op_id for op in history if order_seed.random() < loss_share}
    delivered_messages: set = set()
    obg = ObgCore(lambda mid: mid in delivered_messages)
    messages_left = MESSAGES[:]
    order_seed.shuffle(messages_left)
    first_pass = [op for op in arrivals if op.op_id not in lost]
    for op in first_pass:
        if messages_left and order_seed.random() < 0.3:
            mid = messages_left.pop()
            delivered_messages.add(mid)
            obg.message_delivered(mid)
        try:
            obg.receive(op)
        except ObgError:
            pass
    for mid in messages_left:
        delivered_messages.add(mid)
        obg.message_delivered(mid)
    # loss repair: whatever held operations wait for is fetched, plus everything else lost
    repairs = [op for op in history if op.op_id in lost]
    order_seed.shuffle(repairs)
    for op in repairs:
        try:
            obg.receive(op)
        except ObgError:
            pass
    assert obg.pending == 0
    assert snapshot(obg) == (expected[0], obg.topic(), expected[2])
    assert (obg.topic().text, obg.topic().by, obg.topic().op_id) == expected[1]
