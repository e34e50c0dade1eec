"""Operations carried as chat messages (middleware.chatops): encoding, splitting, validation, views."""

from __future__ import annotations

import json

import emoji as emoji_data
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from m2mc.middleware import kinds
from m2mc.middleware.chatops import MAX_EDIT_TEXT, MAX_NOTICES, GroupOperations, decode, encode, is_operation
from m2mc.middleware.obg import MAX_REACTION_EMOJI, ObgError, is_reaction_emoji
from m2mc.middleware.types import ChatMessage, UsageError

OP_MARKER = kinds.body(kinds.OPERATION, "")  # how an operation's body opens (middleware.kinds)

A, B, C = "a" * 32, "b" * 32, "c" * 32
GID = "g" * 32


def message(mid, text, parent=None) -> ChatMessage:
    return ChatMessage(GID, mid, parent, mid[0][:4], text, 1000, 1000)


HELLO = message((A, 1), "hello")
QUESTION = message((B, 1), "lunch?")


def op_message(ops: GroupOperations, mid, kind, target=None, **fields) -> ChatMessage:
    return message(mid, ops.compose(mid[0], kind, target, **fields), target)


def test_the_encoding_round_trips_and_plain_text_is_a_chat_message():
    text = encode("react", (B, 4), 7, "", "👍", False)
    assert text.startswith(OP_MARKER) and is_operation(message((A, 9), text))
    op = decode(message((A, 9), text, (B, 1)))
    assert (op.op_id, op.kind, op.target, op.seen, op.counter, op.emoji, op.on) == (
        (A, 9), "react", (B, 1), (B, 4), 7, "👍", False)
    assert not is_operation(HELLO) and not is_operation(message((A, 2), "obg1 looks like one but is not"))


@pytest.mark.parametrize("text", [OP_MARKER + "not json", OP_MARKER + "[1,2]", OP_MARKER + "[" * 7990,
                                  OP_MARKER + "[" * 3990 + "]" * 3990, OP_MARKER + '["pin",5,1,"","",true]',
                                  OP_MARKER + '["pin","nope",1,"","",true]', OP_MARKER + '["pin",null,1,"","",1]'])
def test_malformed_operation_texts_raise(text):
    with pytest.raises(ObgError):
        decode(message((A, 9), text, (B, 1)))


def test_take_separates_chat_messages_from_operations_and_reports_what_changed():
    ops = GroupOperations(GID)
    edit = op_message(ops, (A, 2), "edit", (A, 1), text="hello, world")
    topic = op_message(ops, (B, 2), "topic", text="Friday lunch")
    react = op_message(ops, (C, 1), "react", (A, 1), emoji="👍")
    changes = ops.take([HELLO, QUESTION, edit, topic, react])
    assert changes.messages == [HELLO, QUESTION]
    assert changes.updated == [(A, 1)] and changes.topic_changed
    viewed = ops.view(HELLO)
    assert (viewed.text, viewed.edited, viewed.reactions, viewed.pinned) == ("hello, world", 1, {"👍": [C]}, False)
    assert ops.view(QUESTION) is QUESTION
    assert ops.topic() == ("Friday lunch", B)
    assert viewed.to_json()["edited"] == 1 and HELLO.to_json()["reactions"] == {}


def test_a_deleted_message_keeps_its_place_with_empty_text():
    ops = GroupOperations(GID)
    ops.take([HELLO, op_message(ops, (A, 2), "delete", (A, 1))])
    viewed = ops.view(HELLO)
    assert viewed.deleted and viewed.text == "" and viewed.mid == HELLO.mid
    with pytest.raises(UsageError, match="deleted"):
        ops.compose(A, "edit", (A, 1), text="too late")


def test_forged_edits_malformed_operations_and_operations_on_operations_are_rejected():
    ops = GroupOperations(GID)
    pin = op_message(ops, (B, 2), "pin", (A, 1))
    forged = message((C, 1), encode("edit", None, 1, "I never said that"), (A, 1))
    garbage = message((C, 2), OP_MARKER + "{", (A, 1))
    on_an_op = message((C, 3), encode("react", None, 1, "", "👍"), (B, 2))
    changes = ops.take([HELLO, pin, forged, garbage, on_an_op])
    assert changes.messages == [HELLO] and changes.updated == [(A, 1)]
    assert ops.rejected == 3
    assert ops.view(HELLO).text == "hello" and ops.view(HELLO).pinned


def test_compose_gives_clear_errors():
    ops = GroupOperations(GID)
    ops.take([HELLO])
    with pytest.raises(UsageError, match="not the author"):
        ops.compose(B, "edit", (A, 1), text="mine now")
    with pytest.raises(UsageError, match="not the author"):
        ops.compose(B, "delete", (A, 1))
    with pytest.raises(UsageError, match="unknown message"):
        ops.compose(A, "react", (A, 7), emoji="👍", target_known=False)
    with pytest.raises(UsageError, match="text too long"):
        ops.compose(A, "edit", (A, 1), text="x" * (MAX_EDIT_TEXT + 1))
    with pytest.raises(UsageError, match="text too long"):
        ops.compose(A, "topic", None, text="x" * 301)
    with pytest.raises(UsageError, match="emoji"):
        ops.compose(A, "react", (A, 1), emoji="")
    with pytest.raises(UsageError, match="a reaction is a single emoji, such as 👍; 'lol' is not one"):
        ops.compose(A, "react", (A, 1), emoji="lol")


def test_compose_refuses_a_51st_distinct_emoji_but_not_another_reactor_on_one_shown():
    ops = GroupOperations(GID)
    ops.take([HELLO])
    emojis = sorted(e for e in emoji_data.EMOJI_DATA if is_reaction_emoji(e))[:MAX_REACTION_EMOJI + 1]
    ops.take([op_message(ops, (B, 10 + n), "react", (A, 1), emoji=e) for n, e in enumerate(emojis[:-1])])
    with pytest.raises(UsageError, match=f"already has {MAX_REACTION_EMOJI} different reactions"):
        ops.compose(C, "react", (A, 1), emoji=emojis[-1])
    ops.take([op_message(ops, (C, 1), "react", (A, 1), emoji=emojis[0])])
    assert ops.view(HELLO).reactions[emojis[0]] == [B, C]
    assert ops.compose(C, "react", (A, 1), emoji=emojis[-1], on=False)  # taking back is never refused


def test_a_second_operation_names_the_first_and_replaying_the_store_rebuilds_the_state():
    ops = GroupOperations(GID)
    first = op_message(ops, (A, 2), "topic", text="one")
    ops.take([first])
    second = op_message(ops, (A, 3), "topic", text="two")
    assert decode(second).seen == (A, 2)
    ops.take([second])
    again = GroupOperations(GID)
    changes = again.take([second, first])  # out of order: the second waits for the first
    assert changes.topic_changed and again.topic() == ("two", A) and again.core.pending == 0


def test_evicted_operations_come_back_from_the_store_once_what_they_wait_for_arrives():
    author = GroupOperations(GID)
    chain = []
    for k in range(12):
        chain.append(op_message(author, (A, 2 + k), "topic", text=f"t{k}"))
        author.take([chain[-1]])
    store = {m.mid: m for m in chain}
    fetched = []

    def fetch(mids):
        fetched.extend(mids)
        return [store[mid] for mid in mids]

    ops = GroupOperations(GID, fetch=fetch, max_held=4)
    ops.take(list(reversed(chain[1:])))  # each waits for the one before: 7 are evicted
    assert ops.core.pending == 4 and ops.core.evicted == 7
    changes = ops.take([chain[0]])
    assert changes.topic_changed and ops.topic() == ("t11", A) and ops.core.pending == 0
    assert sorted(fetched) == sorted(m.mid for m in chain[5:])


json_like = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=10),
                         lambda children: st.lists(children, max_size=7), max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(json_like.map(json.dumps), st.text(max_size=40)),
                          st.sampled_from([None, (A, 1), (B, 1), (C, 5)])), max_size=12))
def test_any_operation_text_from_a_stranger_is_taken_or_rejected_never_raised(items):
    ops = GroupOperations(GID)
    batch = [HELLO] + [message((C, 10 + k), OP_MARKER + text, parent) for k, (text, parent) in enumerate(items)]
    changes = ops.take(batch)
    assert changes.messages == [HELLO]
    assert ops.core.pending + ops.rejected + len(ops.core.delivered_ops()) == len(items)
    assert ops.view(HELLO).text in ("hello", "")


def test_topic_and_pin_changes_leave_notices_in_delivery_order_with_what_they_replaced():
    ops = GroupOperations(GID)
    ops.take([HELLO, QUESTION])
    first = op_message(ops, (A, 2), "topic", text="Chennai in December")
    assert [(n.kind, n.text, n.was, n.message) for n in ops.take([first]).notices] == [
        ("topic", "Chennai in December", "", first)]
    pin = op_message(ops, (B, 2), "pin", (A, 1))
    second = op_message(ops, (C, 1), "topic", text="lunch Fridays")
    changes = ops.take([pin, second])
    assert [(n.kind, n.target, n.text, n.was, n.message.mid) for n in changes.notices] == [
        ("pin", (A, 1), "", "", (B, 2)), ("topic", None, "lunch Fridays", "Chennai in December", (C, 1))]
    unpin = op_message(ops, (A, 3), "pin", (A, 1), on=False)
    react = op_message(ops, (B, 3), "react", (A, 1), emoji="👍")
    assert [(n.kind, n.target) for n in ops.take([unpin, react]).notices] == [("unpin", (A, 1))]
    assert [n.message.mid for n in ops.notices] == [(A, 2), (B, 2), (C, 1), (A, 3)]


def test_a_topic_that_lost_a_race_leaves_no_notice_and_a_chain_out_of_order_leaves_both():
    ops = GroupOperations(GID)
    # two members set the topic at once (neither saw the other): the higher rank wins wherever it arrives
    low = message((A, 2), encode("topic", None, 1, "low"))
    high = message((B, 2), encode("topic", None, 5, "high"))
    assert [n.text for n in ops.take([high]).notices] == ["high"]
    assert ops.take([low]).notices == [] and ops.topic() == ("high", B)
    # a second setting that arrives before the one it names: both notices once the first comes
    author = GroupOperations(GID)
    one = op_message(author, (C, 1), "topic", text="one")
    author.take([one])
    two = op_message(author, (C, 2), "topic", text="two")
    again = GroupOperations(GID)
    assert [(n.text, n.was, n.message) for n in again.take([two, one]).notices] == [("one", "", one), ("two", "one", two)]


def test_notices_are_bounded_per_group():
    ops = GroupOperations(GID)
    ops.take([HELLO])
    for seqno in range(2, MAX_NOTICES + 12):
        ops.take([op_message(ops, (A, seqno), "pin", (A, 1), on=seqno % 2 == 0)])
    assert len(ops.notices) == MAX_NOTICES and ops.notices[-1].message.mid == (A, MAX_NOTICES + 11)
