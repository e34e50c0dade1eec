"""Where typed letters go, with real X key events and clicks (xdotool), after each way of moving about
the window (issue 45): a letter typed after any navigation lands in the compose box of the conversation
on show, and Enter sends it there, never anywhere else (the topic above all)."""

import pytest

from conftest import ANN, BOB, CAT, activate, lunch_conversation, message, save_screenshot
from m2mc.middleware.types import Member
from real_input import XDOTOOL, click, keys, type_text

pytestmark = pytest.mark.skipif(XDOTOOL is None, reason="xdotool missing (packaging/system-deps.sh)")


def groups_and_a_conversation(qtbot, window, backend):
    """Two groups (a word in each to search for) and a direct conversation with Ann."""
    me = Member(backend.pid, backend.name)
    lunch = backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True,
                                         history=lunch_conversation("") + [message("", BOB, 3, "Who plays the xylophone?")])
    plans = message("", BOB, 1, "Plans for the winter trip?")
    winter = backend.manager.inject_group("Winter trip", members=(ANN, BOB, CAT, me), joined=True, history=[
        plans, message("", CAT, 1, "Chennai in December, then Goa", plans.mid),
        message("", ANN, 1, "The budget first, please", plans.mid)])
    backend.manager.pass_time(31)
    backend.manager.inject_direct(ANN, "are you coming?")
    window.start()
    sessions = window.session_controller.sessions
    qtbot.waitUntil(lambda: len(sessions) == 2 and all(s.loaded for s in sessions.values()))
    qtbot.waitUntil(lambda: ANN.pid in window.direct_controller.conversations)
    return sessions[lunch.gid], sessions[winter.gid]


def sent_texts(backend, gid):
    return [m.text for m in backend.manager.store.history(gid) if m.sender == backend.pid]


def test_the_issues_steps_search_jumps_and_back_then_typing_goes_to_the_compose_box(qtbot, window, backend):
    lunch, winter = groups_and_a_conversation(qtbot, window, backend)
    topic_before = (lunch.shown_topic, winter.shown_topic)
    window.direct_controller.open_with(ANN.pid)
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane)
    activate(qtbot, window)
    # From the direct conversation, click a group.
    lunch_row = window.groups_pane.group_list.visualItemRect(window.groups_pane.item(lunch.gid))
    click(qtbot, window.groups_pane.group_list.viewport(), lunch_row.center())
    qtbot.waitUntil(lambda: window.current is lunch)
    search = window.search_window
    for word in ("xyloph", "budget"):
        keys(qtbot, "ctrl+shift+f")
        qtbot.waitUntil(lambda: search.isVisible() and search.query_edit.hasFocus())
        type_text(qtbot, word)
        qtbot.waitUntil(lambda: (search.shown_query or "").startswith(word) and len(search.result_items()) == 1,
                        timeout=3000)
        keys(qtbot, "Down", "Return")
        qtbot.waitUntil(lambda: window.conversation.selected_message() is not None and word[:5] in window.conversation.selected_message().text.lower())
    assert window.current is winter
    keys(qtbot, "alt+Left")
    qtbot.waitUntil(lambda: window.current is lunch and lunch.thread is not None)
    qtbot.wait(300)
    type_text(qtbot, "hello")
    keys(qtbot, "Return")
    save_screenshot(window, "focus-after-search-and-back.png")
    qtbot.waitUntil(lambda: "hello" in sent_texts(backend, lunch.gid), timeout=3000)
    assert (lunch.shown_topic, winter.shown_topic) == topic_before
    assert window.conversation.compose.toPlainText() == ""


def busy_group(qtbot, window, backend, count=1000):
    """A group with ``count`` messages in threads of five, opened at its end."""
    me = Member(backend.pid, backend.name)
    members, history, seqnos = (ANN, BOB, CAT), [], {m.pid: 0 for m in (ANN, BOB, CAT)}
    for n in range(count):
        member = members[n % 3]
        seqnos[member.pid] += 1
        parent = history[n - 1].mid if n % 5 else None
        history.append(message("", member, seqnos[member.pid], f"Message {n} about the plan", parent))
    gid = backend.manager.inject_group("Busy", members=(*members, me), joined=True, history=history).gid
    window.start()
    sessions = window.session_controller.sessions
    qtbot.waitUntil(lambda: gid in sessions and sessions[gid].loaded, timeout=20_000)
    window.select_group(gid)
    qtbot.waitUntil(lambda: window.current is sessions[gid] and window.current.opened, timeout=20_000)
    return window.current, seqnos


class Load:
    """Messages arriving at ``rate`` a second, and the older page loading and the group view refreshing
    every ``page_ms``, while the test types: what a busy group does around a person."""

    def __init__(self, qtbot, window, backend, session, seqnos, rate=20, page_ms=400):
        from PySide6.QtCore import QTimer
        self.window, self.backend, self.session, self.seqnos = window, backend, session, seqnos
        self.sent = 0
        self.arrivals = QTimer(window, interval=1000 // rate)
        self.arrivals.timeout.connect(self.arrive)
        self.pages = QTimer(window, interval=page_ms)
        self.pages.timeout.connect(self.page)

    def arrive(self):
        member = (ANN, BOB, CAT)[self.sent % 3]
        self.seqnos[member.pid] += 1
        self.sent += 1
        self.backend.manager.inject_messages(self.session.gid, [message(
            self.session.gid, member, self.seqnos[member.pid], f"live {self.sent}", None, at=1_800_000_000_000)])

    def page(self):
        controller = self.window.session_controller
        controller.load_older(self.session)
        controller.refresh_group_view(self.session.gid)
        self.window.status_controller.refresh()

    def __enter__(self):
        self.arrivals.start()
        self.pages.start()
        return self

    def __exit__(self, *exc):
        self.arrivals.stop()
        self.pages.stop()


def test_a_scripted_user_clicks_a_message_then_the_compose_box_types_and_sends_while_the_group_is_busy(
        qtbot, window, backend):
    session, seqnos = busy_group(qtbot, window, backend)
    activate(qtbot, window)
    view = window.conversation.tree_view
    with Load(qtbot, window, backend, session, seqnos):
        for n in range(4):
            qtbot.wait(300)
            click(qtbot, view.viewport(), view.viewport().rect().center())
            click(qtbot, window.conversation.compose)
            type_text(qtbot, f"line {n} typed by a script")
            keys(qtbot, "Return")
            qtbot.waitUntil(lambda: f"line {n} typed by a script" in sent_texts(backend, session.gid), timeout=3000)
            assert window.conversation.compose.toPlainText() == ""


def direct_texts(backend, peer):
    return [m.text for m in backend.manager.direct_history(peer) if m.outgoing]


def search_and_open(qtbot, window, word):
    """Ctrl+Shift+F, ``word``, Down, Enter: the one result opens."""
    search = window.search_window
    keys(qtbot, "ctrl+shift+f")
    qtbot.waitUntil(lambda: search.isVisible() and search.query_edit.hasFocus())
    type_text(qtbot, word)
    qtbot.waitUntil(lambda: (search.shown_query or "").startswith(word) and len(search.result_items()) == 1,
                    timeout=3000)
    keys(qtbot, "Down", "Return")


def route_click_a_message(qtbot, window, lunch, winter):
    window.select_group(lunch.gid)
    view = window.conversation.tree_view
    click(qtbot, view.viewport(), view.visualRect(view.model().index(0, 0)).center())
    qtbot.waitUntil(lambda: window.conversation.selected_message() is not None)
    return lunch


def route_search_jump_into_a_direct_conversation(qtbot, window, lunch, winter):
    search_and_open(qtbot, window, "coming")
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane
                    and window.direct_pane.view.currentIndex().isValid())
    return "direct"


def route_back_from_a_direct_conversation(qtbot, window, lunch, winter):
    search_and_open(qtbot, window, "coming")
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane)
    click(qtbot, window.direct_pane.view.viewport(), window.direct_pane.view.viewport().rect().center())
    keys(qtbot, "alt+Left")
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is not window.direct_pane and window.current is lunch)
    return lunch


def route_open_a_thread_from_the_threads_pane(qtbot, window, lunch, winter):
    threads = window.threads_pane.thread_list
    qtbot.waitUntil(lambda: threads.model() is not None and threads.model().rowCount() > 0)
    click(qtbot, threads.viewport(), threads.visualRect(threads.model().index(0, 0)).center())
    qtbot.waitUntil(lambda: lunch.thread is not None)
    return lunch


def route_all_threads_button(qtbot, window, lunch, winter):
    route_open_a_thread_from_the_threads_pane(qtbot, window, lunch, winter)
    click(qtbot, window.conversation.thread_bar.back_button)
    qtbot.waitUntil(lambda: lunch.thread is None)
    return lunch


def route_time_order_and_back(qtbot, window, lunch, winter):
    route_click_a_message(qtbot, window, lunch, winter)
    keys(qtbot, "ctrl+t")
    qtbot.waitUntil(lambda: window.time_ordered)
    keys(qtbot, "ctrl+t")
    qtbot.waitUntil(lambda: not window.time_ordered)
    return lunch


def route_next_unread_into_another_group(qtbot, window, lunch, winter):
    backend = window.backend
    backend.manager.inject_messages(winter.gid, [message(winter.gid, BOB, 9, "news in winter", None)])
    qtbot.waitUntil(lambda: bool(winter.tree.unread))
    keys(qtbot, "ctrl+u")
    qtbot.waitUntil(lambda: window.current is winter)
    return winter


ROUTES = [route_click_a_message, route_search_jump_into_a_direct_conversation, route_back_from_a_direct_conversation,
          route_open_a_thread_from_the_threads_pane, route_all_threads_button, route_time_order_and_back,
          route_next_unread_into_another_group]


@pytest.mark.parametrize("route", ROUTES, ids=[r.__name__.removeprefix("route_") for r in ROUTES])
def test_after_each_route_a_typed_line_goes_to_the_conversation_on_show(qtbot, window, backend, route, monkeypatch):
    # A Space that lands on the paperclip opens the file dialog: recorded, not shown (it would block).
    dialogs = []
    monkeypatch.setattr("m2mc.ui.files_view.QFileDialog.getOpenFileNames",
                        lambda *args: dialogs.append(args) or ([], ""))
    lunch, winter = groups_and_a_conversation(qtbot, window, backend)
    window.select_group(lunch.gid)
    qtbot.waitUntil(lambda: window.current is lunch)
    activate(qtbot, window)
    shown = route(qtbot, window, lunch, winter)
    qtbot.wait(200)
    line = f"hello after {route.__name__.removeprefix('route_').replace('_', ' ')}"
    type_text(qtbot, line)
    keys(qtbot, "Return")
    save_screenshot(window, f"focus-{route.__name__}.png")
    if shown == "direct":
        qtbot.waitUntil(lambda: line in direct_texts(backend, ANN.pid), timeout=3000)
    else:
        qtbot.waitUntil(lambda: line in sent_texts(backend, shown.gid), timeout=3000)
    assert not dialogs, "a typed space pressed the paperclip"


def test_the_topic_takes_keys_only_when_chosen_and_a_stray_enter_or_a_click_away_changes_nothing(
        qtbot, window, backend):
    lunch, winter = groups_and_a_conversation(qtbot, window, backend)
    window.select_group(lunch.gid)
    qtbot.waitUntil(lambda: window.current is lunch)
    activate(qtbot, window)
    calls = []
    real_set_topic = backend.manager.set_topic
    backend.manager.set_topic = lambda gid, text: calls.append(text) or real_set_topic(gid, text)
    # Given the keys by no choice of the user (as when the widget before it went away), it hands them on.
    from PySide6.QtCore import Qt
    window.conversation.topic_edit.setFocus(Qt.FocusReason.OtherFocusReason)
    type_text(qtbot, "stray words")
    keys(qtbot, "Return")
    qtbot.waitUntil(lambda: "stray words" in sent_texts(backend, lunch.gid), timeout=3000)
    assert window.conversation.topic_edit.text() == lunch.shown_topic == "" and calls == []
    # Clicked, typed in, then left with a click elsewhere: put back, nothing sent to anyone.
    click(qtbot, window.conversation.topic_edit)
    qtbot.waitUntil(window.conversation.topic_edit.hasFocus)
    type_text(qtbot, "half a topic")
    click(qtbot, window.conversation.compose)
    qtbot.waitUntil(window.conversation.compose.hasFocus)
    assert window.conversation.topic_edit.text() == "" and calls == []
    # Clicked and Enter pressed with nothing changed: nothing sent; the keys go back to the compose box.
    click(qtbot, window.conversation.topic_edit)
    keys(qtbot, "Return")
    qtbot.waitUntil(window.conversation.compose.hasFocus)
    assert calls == []
    # Clicked, typed, Enter: the one way to change it.
    click(qtbot, window.conversation.topic_edit)
    type_text(qtbot, "Lunch plans")
    keys(qtbot, "Return")
    qtbot.waitUntil(lambda: lunch.shown_topic == "Lunch plans", timeout=3000)
    assert calls == ["Lunch plans"] and window.conversation.compose.hasFocus()
    # Clicked, typed, Escape: put back, nothing sent; the keys go back to the compose box.
    click(qtbot, window.conversation.topic_edit)
    qtbot.waitUntil(window.conversation.topic_edit.hasFocus)
    type_text(qtbot, " and more")
    qtbot.waitUntil(lambda: "and more" in window.conversation.topic_edit.text())  # where the click put the cursor
    keys(qtbot, "Escape")
    qtbot.waitUntil(window.conversation.compose.hasFocus)
    assert window.conversation.topic_edit.text() == lunch.shown_topic == "Lunch plans" and calls == ["Lunch plans"]
    type_text(qtbot, "after escape")
    save_screenshot(window, "topic-escape-then-typing.png")
    keys(qtbot, "Return")
    qtbot.waitUntil(lambda: "after escape" in sent_texts(backend, lunch.gid), timeout=3000)
    assert calls == ["Lunch plans"] and lunch.shown_topic == "Lunch plans"


def test_a_thousand_typed_characters_under_load_arrive_whole_in_the_conversation_on_show(qtbot, window, backend):
    """Real keys, 1,000 characters in five lines, while 20 messages a second arrive in the group, a direct
    message comes every second, and a page of history loads (and the view refreshes) every 0.8 s."""
    me = Member(backend.pid, backend.name)
    quiet = backend.manager.inject_group("Quiet", members=(ANN, me), joined=True, history=[message("", ANN, 1, "hi")])
    session, seqnos = busy_group(qtbot, window, backend, count=1600)
    qtbot.waitUntil(lambda: quiet.gid in window.session_controller.sessions)
    topic = session.shown_topic
    activate(qtbot, window)
    click(qtbot, window.conversation.compose)
    qtbot.waitUntil(window.conversation.compose.hasFocus)
    words = "the quick brown fox jumps over a lazy dog while four walruses hum".split()
    lines = []
    for n in range(5):
        line, k = f"line{n}", n
        while len(line) < 199:
            line += " " + words[k % len(words)]
            k += 3
        lines.append((line[:199] + "z"))  # 200 characters, the last not a space (a send strips spaces)
    assert sum(map(len, lines)) == 1000
    pages_before = len(session.tree)
    with Load(qtbot, window, backend, session, seqnos, page_ms=800) as load:
        direct_every = QTimerOf(window, 1000, lambda: backend.manager.inject_direct(ANN, f"ping {load.sent}"))
        for line in lines:
            type_text(qtbot, line, delay_ms=10)  # about 150 keys a second: faster than anyone types
            keys(qtbot, "Return")
        direct_every.stop()
        qtbot.waitUntil(lambda: all(line in sent_texts(backend, session.gid) for line in lines), timeout=10_000)
        arrived = load.sent
    assert [t for t in sent_texts(backend, session.gid) if t.startswith("line")] == lines  # whole, in order
    assert arrived >= 60, arrived  # the load was there: arrivals (20 a second over 5 s or more) and older pages
    assert len(session.tree) > pages_before + 200, (pages_before, len(session.tree))
    assert sent_texts(backend, quiet.gid) == [] and direct_texts(backend, ANN.pid) == []
    assert window.conversation.compose.toPlainText() == "" and session.shown_topic == topic


def QTimerOf(parent, interval_ms, callback):  # noqa: N802 - reads as the QTimer it makes
    from PySide6.QtCore import QTimer
    timer = QTimer(parent, interval=interval_ms)
    timer.timeout.connect(callback)
    timer.start()
    return timer
