"""The GUI's state without a window or Qt: the selection, the compose box's target, the thread filter, the panes
that fold on a narrow window (ui/model/state.py), and one group's reply tree with its read state (ui/message_tree.py)."""

from __future__ import annotations

from m2mc.middleware.types import ChatMessage, Member
from m2mc.ui.message_tree import MessageTree, Node
from m2mc.ui.model.state import ComposeTarget, Draft, Drafts, PaneFolds, Selection, ThreadFilter

GID = "g-1"
ANN = Member("a11a" * 8, "Ann")
BOB = Member("b0b0" * 8, "Bob")


def message(member: Member, seqno: int, text: str, parent=None, order: int = 0) -> ChatMessage:
    at = 1_700_000_000_000 + seqno * 1000
    return ChatMessage(GID, (member.pid, seqno), parent, member.name, text, at, at, order=order)


# -- selection ---------------------------------------------------------------------------------

def test_opening_another_group_forgets_the_selected_message():
    first, second = object(), object()
    selection: Selection[object] = Selection()
    selection.open(first)
    selection.select((ANN.pid, 1))
    selection.open(first)  # the same group again: the selection stays
    assert selection.message == (ANN.pid, 1) and selection.is_current(first)
    selection.open(second)
    assert selection.message is None and selection.is_current(second) and not selection.is_current(first)
    selection.open(None)
    assert not selection.is_current(None)


# -- the compose box's target ------------------------------------------------------------------

def test_editing_forgets_the_reply_target_and_clearing_forgets_both():
    target = ComposeTarget()
    assert not target.active
    target.reply_to((BOB.pid, 4))
    assert target.reply == (BOB.pid, 4) and target.active
    target.start_edit((ANN.pid, 2))
    assert (target.reply, target.edit) == (None, (ANN.pid, 2))
    target.reply_to((BOB.pid, 5))  # Reply while editing keeps the edit (the banner shows the reply)
    assert (target.reply, target.edit) == ((BOB.pid, 5), (ANN.pid, 2))
    target.clear()
    assert (target.reply, target.edit) == (None, None) and not target.active


def test_an_open_thread_is_where_a_message_goes_until_another_target_is_chosen():
    root, other_root, deep = (ANN.pid, 1), (BOB.pid, 1), (BOB.pid, 3)
    target = ComposeTarget()
    target.open_thread(root)
    assert target.parent == root and not target.active  # the default: Esc does not forget it
    target.reply_to(deep)
    assert target.parent == deep and target.active
    mine = (ANN.pid, 7)
    target.sent(mine)  # in an open thread the next message follows the user's own reply (Slack)
    assert target.parent == mine and target.active
    target.reset()  # Esc: back to the thread's root
    assert target.parent == root
    target.reply_to(deep)
    target.open_thread(other_root)  # a target chosen in one thread is not carried to another
    assert target.parent == other_root
    target.start_new_thread()  # ✕ still starts a thread of its own
    assert target.parent is None and target.active
    target.reset()  # Esc: back to the default
    assert target.parent == other_root
    target.start_edit((ANN.pid, 2))
    assert target.parent is None  # an edit answers nothing
    target.reset()
    target.close_thread()
    assert target.parent is None
    target.reply_to(deep)
    target.sent((ANN.pid, 8))  # in the all-threads view the target clears after sending
    assert target.parent is None and not target.active


def test_drafts_are_kept_per_group_and_an_empty_one_is_forgotten():
    store: dict[str, str] = {}
    drafts = Drafts(store)
    drafts.put("g-1", Draft("half a thought", (BOB.pid, 4)))
    drafts.put("g-2", Draft("other"))
    assert drafts.get("g-1") == Draft("half a thought", (BOB.pid, 4))
    assert Drafts(store).get("g-2") == Draft("other")  # what a restart reads back
    assert drafts.get("g-3") == Draft()
    drafts.put("g-1", Draft())
    assert "draft/g-1" not in store and drafts.get("g-1").empty
    assert drafts.get("g-2") == Draft("other")
    store["draft/g-4"] = "{not json"  # a hand-edited settings file: no draft, no crash
    assert drafts.get("g-4") == Draft()


# -- the thread filter -------------------------------------------------------------------------

def test_the_filter_matches_sender_or_text_ignoring_case_and_surrounding_blanks():
    talk = [message(ANN, 1, "Lunch at noon?"), message(BOB, 2, "Yes", (ANN.pid, 1)), message(ANN, 3, "Coffee")]
    view_filter = ThreadFilter()
    assert view_filter.matching(talk) == [] and not view_filter.active
    assert view_filter.set_text("  LUNCH ") == "LUNCH" and view_filter.active
    assert view_filter.matching(talk) == [talk[0].mid]
    view_filter.set_text("bob")
    assert view_filter.matching(talk) == [talk[1].mid] and view_filter.matches(talk[1])
    view_filter.set_text("   ")
    assert not view_filter.active and not view_filter.matches(talk[0])


def test_find_next_and_previous_wrap_around_and_start_from_the_ends():
    found = [(ANN.pid, 1), (BOB.pid, 2), (ANN.pid, 3)]
    step = ThreadFilter.step
    assert step(found, None, 1) == found[0]  # nothing selected: F3 takes the first
    assert step(found, None, -1) == found[-1]  # and Shift+F3 the last
    assert step(found, (BOB.pid, 99), 1) == found[0]  # a selected message that does not match
    assert step(found, found[1], 1) == found[2]
    assert step(found, found[2], 1) == found[0]
    assert step(found, found[0], -1) == found[2]


# -- the reply tree and its read state -----------------------------------------------------------

class Recorder:
    """A TreeListener that writes down what it hears."""

    def __init__(self) -> None:
        self.heard: list[tuple] = []

    def __getattr__(self, name: str):
        return lambda *args: self.heard.append((name, *args))


def test_others_messages_arrive_unread_and_reading_them_is_counted_per_thread_and_kept_for_the_store():
    tree = MessageTree(own_pid=ANN.pid)
    question = message(ANN, 1, "Lunch?", order=1)
    answers = [message(BOB, 1, "Yes", question.mid, order=2), message(BOB, 2, "At 12:30", question.mid, order=3)]
    tree.add_messages([question, *answers])
    assert tree.unread == {a.mid for a in answers}  # our own message is never unread
    root = tree.node(question.mid)
    assert root is not None and root.unread == 2 and root.replies == 2
    tree.mark_read([answers[1].mid])
    assert tree.unread_in_arrival_order() == [answers[0].mid] and root.unread == 1
    tree.mark_all_read()
    assert tree.unread == set() and root.unread == 0
    assert tree.take_read_ranges() == [(2, 3)] and tree.take_read_ranges() == []


def test_restoring_unread_marks_only_others_known_messages_and_tells_the_listener():
    tree = MessageTree(own_pid=ANN.pid)
    own, other = message(ANN, 1, "Mine", order=1), message(BOB, 1, "Theirs", order=2)
    tree.add_messages([own, other], unread=False)
    recorder = Recorder()
    tree.listener = recorder
    tree.set_unread([own.mid, other.mid, (BOB.pid, 99)])
    assert tree.unread == {other.mid}
    node = tree.node(other.mid)
    assert recorder.heard == [("node_changed", node, True), ("read_marks_changed", [other.mid]),
                              ("unread_total_changed", 1)]
    assert tree.take_read_ranges() == []  # marking unread is nothing to save


def test_a_reply_waits_for_its_parent_and_the_listener_hears_rows_in_shown_numbers():
    tree = MessageTree(own_pid=ANN.pid, window=2)
    threads = [message(ANN, seqno, f"Thread {seqno}") for seqno in range(1, 5)]
    tree.add_messages(threads, unread=False)  # opening: one reset, the newest two threads shown
    assert tree.hidden_threads == 2 and tree.shown_thread_count() == 2
    recorder = Recorder()
    tree.listener = recorder
    late_reply = message(BOB, 2, "to a reply", (BOB.pid, 1))
    assert tree.add_messages([late_reply]) == [] and tree.waiting_count == 1
    reply = message(BOB, 1, "to thread 4", threads[3].mid)
    assert tree.add_messages([reply]) == [reply, late_reply]
    top, thread4 = tree.top, tree.node(threads[3].mid)
    assert recorder.heard[:4] == [("rows_inserting", thread4, 0, 0), ("rows_inserted",),
                                  ("rows_inserting", tree.node(reply.mid), 0, 0), ("rows_inserted",)]
    recorder.heard.clear()
    assert tree.reveal(threads[0].mid) and tree.hidden_threads == 0
    assert recorder.heard == [("rows_inserting", top, 0, 1), ("rows_inserted",), ("older_threads_shown",)]
    recorder.heard.clear()
    assert tree.hide_oldest(1, spare=threads[2].mid) == 2  # thread 3 is spared, so 3 and 4 stay
    assert recorder.heard == [("rows_removing", top, 0, 1), ("rows_removed",)]
    assert tree.ancestors(late_reply.mid) == [threads[3].mid, reply.mid]
    assert tree.thread_of(late_reply.mid) == threads[3].mid
    assert isinstance(thread4, Node) and thread4.senders == {ANN.pid: "Ann", BOB.pid: "Bob"}


def test_pane_folds_fold_narrow_and_give_back_only_what_they_folded():
    folds = PaneFolds({"side": 1000})
    assert folds.resized(1200, {"side": True}) == {}
    assert folds.resized(900, {"side": True}) == {"side": False}
    assert folds.resized(1100, {"side": False}) == {"side": True}
    folds.chosen("side", False, 1100)  # closed by the reader: no window width brings it back
    assert folds.resized(900, {"side": False}) == {}
    assert folds.resized(1300, {"side": False}) == {}


def test_pane_folds_leave_a_pane_reopened_by_hand_until_the_window_shrinks_further():
    folds = PaneFolds({"side": 1000})
    folds.resized(900, {"side": True})
    folds.chosen("side", True, 900)
    assert folds.resized(950, {"side": True}) == {}
    assert folds.resized(900, {"side": True}) == {}
    assert folds.resized(880, {"side": True}) == {"side": False}


def test_what_was_on_show_is_one_line_in_the_settings_and_a_broken_line_opens_the_first_group():
    from m2mc.ui.model.state import OnShow

    for shown in (OnShow("group", "g1"), OnShow("group", "g1", ("ab12", 7)), OnShow("direct", "ab12")):
        assert OnShow.parse(shown.text()) == shown
    assert OnShow.parse("group g1 not-a-mid") == OnShow("group", "g1")  # the group, without its thread
    for broken in (None, "", "group", "direct ab12 ab12:7", "window g1", "group a b c"):
        assert OnShow.parse(broken) is None
