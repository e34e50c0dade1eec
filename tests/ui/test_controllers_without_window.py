"""Controllers of the main window driven through small fakes of their view protocols: no MainWindow is built."""

from PySide6.QtWidgets import QLabel, QLineEdit

from conftest import ANN, BOB, CAT, lunch_conversation, message
from m2mc.middleware.types import Member
from m2mc.ui.controllers.compose import ComposeController
from m2mc.ui.controllers.sessions import GroupSession
from m2mc.ui.message_model import MessageTreeModel, TimelineModel
from m2mc.ui.message_tree import MessageTree
from m2mc.ui.model.state import ComposeTarget, Selection, ThreadFilter
from m2mc.ui.widgets import ComposeEdit, ReplyBanner

GID = ""  # the messages' own gid: inject_group takes them into the group it makes


class FakeComposeView:
    """The four widgets of ComposeView, and the errors it was asked to show."""

    def __init__(self) -> None:
        self.compose = ComposeEdit()
        self.reply_banner = ReplyBanner()
        self.compose_error = QLabel()
        self.topic_edit = QLineEdit()
        self.errors: list[str] = []

    def show_error(self, message: str) -> None:
        self.errors.append(message)


def test_the_compose_controller_answers_edits_and_sends_through_its_view_alone(qtbot, backend):
    me = Member(backend.pid, backend.name)
    talk = lunch_conversation(GID) + [message(GID, me, 1, "I'll be late")]
    gid = backend.manager.inject_group("Lunch", members=(ANN, BOB, CAT, me), joined=True, history=talk,
                                       notify=False).gid
    tree = MessageTree(backend.pid)
    tree_model = MessageTreeModel(tree)
    session = GroupSession(gid, tree, tree_model=tree_model, timeline=TimelineModel(tree_model))
    tree.add_messages(backend.manager.history(gid), unread=False)
    selection: Selection[GroupSession] = Selection()
    selection.open(session)
    target = ComposeTarget()
    view = FakeComposeView()
    composer = ComposeController(backend, selection, target, view)

    selection.select(talk[6].mid)
    composer.reply_to_selected()
    assert target.reply == talk[6].mid and "Lunch at the canteen" in view.reply_banner.label.text()

    view.compose.setPlainText("Count me in too")
    composer.send_message()
    qtbot.waitUntil(lambda: view.compose.toPlainText() == "")
    sent = backend.manager.history(gid)[-1]
    assert (sent.text, sent.parent) == ("Count me in too", talk[6].mid)
    assert target.parent is None  # in the all-threads view the next message starts a thread (issue 32)
    assert not view.reply_banner.label.text()

    composer.edit_last()  # Up in the empty box: our last message
    assert (target.reply, target.edit) == (None, talk[-1].mid) and view.compose.toPlainText() == "I'll be late"
    composer.start_new_thread()
    assert target.edit is None and target.parent is None
    assert view.compose.toPlainText() == "" and view.errors == []


class FakeSessionsView:
    """SessionsView: writes down every call; the reader is at the end of the view."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def reader_place(self, session):
        return True, None

    def select_message(self, mid) -> bool:
        self.calls.append(("select_message", mid))
        return True

    def group_to_open(self, joined):
        return joined[0] if joined else None

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, *args))


def test_the_session_controller_restores_read_marks_saves_new_ones_and_finds_the_next_unread(qtbot, backend,
                                                                                             monkeypatch):
    import m2mc.ui.controllers.sessions as sessions

    monkeypatch.setattr(sessions, "READ_SAVE_MS", 0)
    talk = [m._replace(order=n) for n, m in enumerate(lunch_conversation(GID), start=1)]  # as delivered
    gid = backend.manager.inject_group("Lunch", members=(ANN, BOB, CAT), joined=True, history=talk,
                                       notify=False, unread=True).gid
    backend.manager.mark_read(gid, [(1, 6)])  # read before this run: the first six
    selection: Selection[GroupSession] = Selection()
    view = FakeSessionsView()
    controller = sessions.SessionController(backend, selection, ComposeTarget(), ThreadFilter(), view, {})
    controller.conversation = view  # the fake answers for the conversation pane too

    session = controller.session(gid)
    qtbot.waitUntil(lambda: session.loaded)
    assert session.tree.unread_in_arrival_order() == [talk[6].mid, talk[7].mid]
    assert ("setWindowTitle", "(2) M2MC chat") in view.calls

    session.tree.mark_read([talk[6].mid])
    qtbot.waitUntil(lambda: backend.manager.read_marks(gid) == [(1, 7)])

    view.calls.clear()
    controller.next_unread()
    assert view.calls == [("select_group", gid), ("clear_filter",), ("select_message", talk[7].mid)]
