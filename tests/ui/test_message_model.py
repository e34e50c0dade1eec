"""The reply-tree and time-ordered models under Qt's model tester, with messages in any order."""

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PySide6.QtCore import QModelIndex

from conftest import ANN, BOB, CAT, lunch_conversation, message
from m2mc.ui.message_tree import MessageTree
from m2mc.ui.message_model import (
    MessageRole,
    MessageTreeModel,
    ParentMessageRole,
    TimelineModel,
    UnreadRole,
)

GID = "g-1"


def random_tree(rng, count):
    """``count`` messages by three senders; each answers a random earlier one or starts a thread."""
    seqnos = {ANN: 0, BOB: 0, CAT: 0}
    out = []
    for _ in range(count):
        member = rng.choice([ANN, BOB, CAT])
        seqnos[member] += 1
        parent = rng.choice(out).mid if out and rng.random() < 0.7 else None
        out.append(message(GID, member, seqnos[member], f"text {len(out)}", parent))
    return out


def tree_shape(model, parent=QModelIndex()):
    """{mid: parent mid} read back through the Qt model API only."""
    shape = {}
    for row in range(model.rowCount(parent)):
        index = model.index(row, 0, parent)
        msg = index.data(MessageRole)
        assert model.parent(index) == parent
        shape[msg.mid] = parent.data(MessageRole).mid if parent.isValid() else None
        shape.update(tree_shape(model, index))
    return shape


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), count=st.integers(1, 40), batch=st.integers(1, 7))
def test_tree_follows_any_arrival_order_under_the_model_tester(qtmodeltester, seed, count, batch):
    rng = random.Random(seed)
    messages = random_tree(rng, count)
    shuffled = messages[:]
    rng.shuffle(shuffled)
    tree = MessageTree(own_pid=ANN.pid)
    model = MessageTreeModel(tree)
    timeline = TimelineModel(model)
    qtmodeltester.check(model, force_py=False)
    qtmodeltester.check(timeline, force_py=False)
    shown = []
    for start in range(0, len(shuffled), batch):
        shown += tree.add_messages(shuffled[start:start + batch] + shuffled[start:start + 1])  # with a duplicate
    assert tree_shape(model) == {m.mid: m.parent for m in messages}
    assert tree.waiting_count == 0
    assert sorted(m.mid for m in shown) == sorted(m.mid for m in messages)  # each shown exactly once
    # The timeline lists each message once, every reply after what it answers.
    order = [timeline.index(row).data(MessageRole).mid for row in range(timeline.rowCount())]
    assert sorted(order) == sorted(m.mid for m in messages)
    position = {mid: i for i, mid in enumerate(order)}
    assert all(m.parent is None or position[m.parent] < position[m.mid] for m in messages)
    assert tree.unread == {m.mid for m in messages if m.sender != ANN.pid}


def test_replies_that_come_first_wait_for_their_parent(qtmodeltester):
    talk = lunch_conversation(GID)
    tree = MessageTree()
    model = MessageTreeModel(tree)
    qtmodeltester.check(model, force_py=False)
    tree.add_messages([talk[0]])
    assert tree.add_messages([talk[5], talk[4]]) == []  # both wait: their parents are missing
    assert tree.waiting_count == 2
    shown = tree.add_messages([talk[1], talk[3]])
    assert [m.mid for m in shown] == [talk[1].mid, talk[3].mid, talk[4].mid, talk[5].mid]
    assert tree.waiting_count == 0
    deepest = model.index_for(talk[5].mid)
    assert deepest.parent().data(MessageRole) == talk[4]
    assert deepest.parent().parent().parent() == model.index_for(talk[1].mid)


def test_incremental_inserts_never_reset_the_model(qtmodeltester):
    tree = MessageTree()
    model = MessageTreeModel(tree)
    qtmodeltester.check(model, force_py=False)
    talk = lunch_conversation(GID)
    tree.add_messages(talk[:2], unread=False)  # opening: one reset is fine
    resets = []
    model.modelReset.connect(lambda: resets.append(1))
    for msg in talk[2:]:
        tree.add_messages([msg])
    assert resets == []
    assert len(tree) == len(talk)


def test_unread_marks_and_time_ordered_parent_role(qtmodeltester):
    talk = lunch_conversation(GID)
    tree = MessageTree(own_pid=BOB.pid)
    model = MessageTreeModel(tree)
    timeline = TimelineModel(model)
    qtmodeltester.check(timeline, force_py=False)
    tree.add_messages(talk[:4], unread=False)
    counts = []
    model.unread_count_changed.connect(counts.append)
    tree.add_messages(talk[4:])
    own = {m.mid for m in talk[4:] if m.sender == BOB.pid}
    assert tree.unread == {m.mid for m in talk[4:]} - own
    assert tree.unread_in_arrival_order() == [m.mid for m in talk[4:] if m.mid not in own]
    changed = []
    timeline.dataChanged.connect(lambda top, bottom, roles: changed.append(top.row()))
    tree.mark_read([talk[4].mid])
    assert not model.index_for(talk[4].mid).data(UnreadRole)
    assert changed == [4]
    assert counts[-1] == len(tree.unread)
    reply_row = timeline.index(4)
    assert reply_row.data(ParentMessageRole) == talk[3]
    assert timeline.index(0).data(ParentMessageRole) is None


def test_big_groups_show_a_window_of_newest_threads(qtmodeltester):
    rng = random.Random(3)
    messages = random_tree(rng, 120)
    tree = MessageTree(window=5)
    model = MessageTreeModel(tree)
    timeline = TimelineModel(model, window=10)
    qtmodeltester.check(model, force_py=False)
    qtmodeltester.check(timeline, force_py=False)
    tree.add_messages(messages[:100], unread=False)
    threads = [m for m in messages[:100] if m.parent is None]
    assert model.rowCount() == 5 and tree.hidden_threads == len(threads) - 5
    assert timeline.rowCount() == 10
    assert model.index(0, 0).data(MessageRole) == threads[-5]
    for msg in messages[100:]:  # live messages, some into hidden threads
        tree.add_messages([msg])
    assert model.rowCount() == 5 + sum(1 for m in messages[100:] if m.parent is None)
    assert timeline.rowCount() == 30
    assert not model.index_for(threads[0].mid).isValid()
    assert tree.reveal(threads[0].mid) and tree.hidden_threads == 0
    assert model.index_for(threads[0].mid).row() == 0
    assert tree_shape(model) == {m.mid: m.parent for m in messages}
    assert timeline.reveal(messages[0].mid) and timeline.rowCount() == 120
    assert timeline.index(0).data(MessageRole) == messages[0]


def test_hiding_the_oldest_threads_again_keeps_the_newest_and_the_spared_one(qtmodeltester):
    rng = random.Random(5)
    messages = random_tree(rng, 200)
    tree = MessageTree(window=1000)
    model = MessageTreeModel(tree)
    timeline = TimelineModel(model, window=1000)
    qtmodeltester.check(model, force_py=False)
    qtmodeltester.check(timeline, force_py=False)
    tree.add_messages(messages[:150], unread=False)
    for msg in messages[150:]:
        tree.add_messages([msg])
    threads = [m for m in messages if m.parent is None]
    spared = threads[-8]
    assert tree.hide_oldest(5, spare=spared.mid) == len(threads) - 8
    assert model.rowCount() == 8 and model.index(0, 0).data(MessageRole) == spared
    assert tree.hide_oldest(5) == 3
    assert [model.index(row, 0).data(MessageRole) for row in range(5)] == threads[-5:]
    assert tree.hide_oldest(5) == 0
    assert timeline.hide_oldest(20, spare=messages[170].mid) == 170
    assert timeline.hide_oldest(20) == 10
    assert timeline.index(0).data(MessageRole) == tree.arrival[180].message
    assert tree.reveal(threads[0].mid) and tree_shape(model) == {m.mid: m.parent for m in messages}


def test_pages_of_older_history_go_on_top_and_replies_to_messages_not_held_show_at_the_top(qtmodeltester):
    rng = random.Random(11)
    messages = [m._replace(order=n) for n, m in enumerate(random_tree(rng, 300), 1)]
    tree = MessageTree()
    tree.paged = True
    model, timeline = MessageTreeModel(tree), None
    timeline = TimelineModel(model)
    qtmodeltester.check(model)
    tree.add_messages(messages[200:], unread=False)  # the last page: some replies' parents are not held
    orphans = [m for m in messages[200:] if m.parent is not None and m.parent in {o.mid for o in messages[:200]}]
    assert orphans and all(tree.node(m.mid).depth == 0 for m in orphans)
    assert model.index_for(orphans[0].mid).data(ParentMessageRole) is None
    tree.absent_parents[orphans[0].parent] = next(m for m in messages if m.mid == orphans[0].parent)
    assert model.index_for(orphans[0].mid).data(ParentMessageRole).mid == orphans[0].parent
    for start in (100, 0):  # two older pages
        assert tree.add_older(messages[start:start + 100], unread=[messages[start].mid]) == 100
        qtmodeltester.check(model)
    assert [node.message for node in tree.arrival] == messages
    assert [model.index(row, 0).data(MessageRole).order for row in range(model.rowCount())] == sorted(
        model.index(row, 0).data(MessageRole).order for row in range(model.rowCount()))
    assert tree.unread == {messages[0].mid, messages[100].mid}
    roots = tree.roots()
    assert all(node.row == row for row, node in enumerate(roots))
    assert all(tree.arrival[root.last].root is root for root in roots)  # each thread's latest, shifted with them
    assert timeline.rowCount() == 100 and timeline.show_older(200) == 200
    assert [timeline.index(row).data(MessageRole) for row in range(300)] == messages
    live = message(GID, ANN, 999, "late answer", messages[5].mid)._replace(order=301)
    tree.add_messages([live])
    assert tree.node(live.mid).parent is tree.node(messages[5].mid) and timeline.rowCount() == 301
