"""The app model (ui/model/) without Qt or a display: the sessions with their unread counts, read marks and
unseen warnings, told to a listener as they change, and the notification levels; and a check that the
package imports no Qt at all, run in an interpreter where importing PySide6 fails."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from m2mc.middleware.rangeset import RangeSet
from m2mc.middleware.types import ChatMessage, GroupView, Member
from m2mc.ui.message_tree import MessageTree
from m2mc.ui.model.notify import NotifyLevels, to_tell
from m2mc.ui.model.sessions import Session, Sessions

ME = Member("c0c0" * 8, "Me")
ANN = Member("a11a" * 8, "Ann")
BOB = Member("b0b0" * 8, "Bob")


def message(gid: str, member: Member, seqno: int, order: int, mentioning: Member | None = None) -> ChatMessage:
    at = 1_700_000_000_000 + seqno * 1000
    text = f"message {seqno}" + (f" for <@{mentioning.pid}>" if mentioning is not None else "")
    return ChatMessage(gid, (member.pid, seqno), None, member.name, text, at, at, order=order)


def view(gid: str, desc: str, private: bool = False) -> GroupView:
    return GroupView(gid, desc, "239.1.2.3", 5000, private, True, (ME, ANN), (), 2, 0.0)


class Recorder:
    """A listener that notes what it heard, as (event, gid, detail)."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, str, object]] = []

    def session_added(self, session: Session) -> None:
        self.heard.append(("added", session.gid, session.title))

    def session_removed(self, session: Session) -> None:
        self.heard.append(("removed", session.gid, None))

    def session_changed(self, session: Session) -> None:
        self.heard.append(("changed", session.gid, (session.title, session.private, session.unseen_warning)))

    def unread_changed(self, session: Session, total: int) -> None:
        self.heard.append(("unread", session.gid, (session.unread, total)))


def new_session(gid: str) -> Session:
    return Session(gid, MessageTree(ME.pid))


def test_sessions_tell_their_listener_what_is_added_renamed_warned_and_removed():
    sessions: Sessions[Session] = Sessions()
    heard = Recorder()
    sessions.listen(heard)
    lunch, winter = new_session("g-lunch"), new_session("g-winter")
    sessions.add(lunch)
    sessions.add(winter)
    assert list(sessions) == ["g-lunch", "g-winter"] and sessions["g-winter"] is winter
    sessions.set_view(lunch, view("g-lunch", "Lunch", private=True))
    sessions.warned(winter, "two different messages")
    assert winter.warnings == ["two different messages"] and winter.unseen_warning == "two different messages"
    sessions.warning_seen(winter)
    sessions.warning_seen(winter)  # seen already: nothing to tell
    sessions.remove(lunch)
    sessions.set_view(lunch, view("g-lunch", "Lunch again"))  # gone: its listener hears no more of it
    assert heard.heard == [
        ("added", "g-lunch", "g-lunch"), ("added", "g-winter", "g-winter"),
        ("changed", "g-lunch", ("Lunch", True, None)),
        ("changed", "g-winter", ("g-winter", False, "two different messages")),
        ("changed", "g-winter", ("g-winter", False, None)),
        ("removed", "g-lunch", None), ("unread", "g-lunch", (0, 0)),
    ]
    assert "g-lunch" not in sessions and len(sessions) == 1


def test_unread_counts_what_the_tree_holds_and_what_the_store_holds_before_it():
    sessions: Sessions[Session] = Sessions()
    heard = Recorder()
    sessions.listen(heard)
    lunch, winter = new_session("g-lunch"), new_session("g-winter")
    sessions.add(lunch)
    sessions.add(winter)
    lunch.tree.add_messages([message("g-lunch", ANN, n, order=100 + n) for n in range(1, 4)], unread=True)
    lunch.tree.add_messages([message("g-lunch", ME, 9, order=110)], unread=True)  # one's own is never unread
    lunch.oldest_order, lunch.unread_beyond, lunch.read_marks = 101, 40, RangeSet()
    winter.tree.add_messages([message("g-winter", BOB, 1, order=7)], unread=True)
    sessions.unread_changed(lunch)
    assert lunch.unread == 43 and sessions.unread_total() == 44
    assert heard.heard[-1] == ("unread", "g-lunch", (43, 44))

    # Next unread: the one on show first, then the others in the order they were opened.
    assert [(s.gid, mid) for s, mid in sessions.with_unread_first(winter)] == [
        ("g-winter", (BOB.pid, 1)), ("g-lunch", (ANN.pid, 1))]

    older = lunch.mark_all_read()
    assert older == [(1, 100)] and lunch.unread == 0 and lunch.unread_beyond == 0
    assert 1 in lunch.read_marks and 100 in lunch.read_marks  # older pages, loaded later, read as read
    assert sessions.take_read_ranges() == {"g-lunch": [(101, 103)]}  # the tree's own, once
    assert sessions.take_read_ranges() == {}
    assert [s.gid for s, _mid in sessions.with_unread_first(None)] == ["g-winter"]


def test_a_subclass_s_open_thread_adds_its_read_marks():
    class WithThread(Session):
        thread: MessageTree | None = None

        def thread_tree(self) -> MessageTree | None:
            return self.thread

    session = WithThread("g-1", MessageTree(ME.pid))
    session.thread = MessageTree(ME.pid)
    session.thread.add_messages([message("g-1", ANN, 1, order=5)], unread=True)
    session.thread.mark_all_read()
    assert session.read_unsaved and session.take_read_ranges() == [(5, 5)] and not session.read_unsaved


@pytest.mark.parametrize("stored, level", [(None, "all"), ("true", "all"), ("false", "mentions"),
                                           ("nothing", "nothing"), ("loud", "all")])
def test_notification_levels_read_the_old_switch_and_keep_what_was_set(stored, level):
    settings = {} if stored is None else {"notify/g-1": stored}
    levels = NotifyLevels(settings)
    assert levels.level("g-1") == level
    if stored in ("true", "false"):
        assert settings["notify/g-1"] == level, "the old switch is written back as a level"
    levels.set_level("g-1", "mentions")
    assert levels.level("g-1") == "mentions" and settings["notify/g-1"] == "mentions"
    with pytest.raises(ValueError):
        levels.set_level("g-1", "sometimes")


def test_a_level_tells_of_mentions_first_and_of_the_rest_only_at_all():
    plain = [message("g-1", ANN, 1, order=1), message("g-1", BOB, 2, order=2)]
    mention = message("g-1", BOB, 3, order=3, mentioning=ME)
    assert to_tell("all", ME.pid, plain) == (plain, False)
    assert to_tell("mentions", ME.pid, plain) == ([], False)
    assert to_tell("mentions", ME.pid, plain + [mention]) == ([mention], True)
    assert to_tell("all", ME.pid, plain + [mention]) == ([mention], True)
    assert to_tell("nothing", ME.pid, plain + [mention]) == ([], False)


def test_the_app_model_imports_no_qt():
    """Imported where PySide6 cannot be: the model and what it imports work without Qt."""
    script = textwrap.dedent("""
        import sys

        class NoQt:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("PySide6", "shiboken6"):
                    raise ImportError(f"{name} is blocked: the app model must not need Qt")
                return None

        sys.meta_path.insert(0, NoQt())
        import m2mc.ui.model.sessions, m2mc.ui.model.state, m2mc.ui.model.notify
        from m2mc.ui.message_tree import MessageTree
        session = m2mc.ui.model.sessions.Session("g", MessageTree("me"))
        sessions = m2mc.ui.model.sessions.Sessions()
        sessions.add(session)
        assert sessions.unread_total() == 0
        assert not [name for name in sys.modules if name.startswith(("PySide6", "shiboken6"))]
        print("model without Qt")
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "model without Qt" in result.stdout, result.stderr[-3000:]
