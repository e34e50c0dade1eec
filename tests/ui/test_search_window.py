"""Search everywhere (Ctrl+Shift+F) over the in-memory backend, with real keys and clicks: results
grouped by conversation with the matched words marked, Enter and a click opening a result in its
thread across groups, and m2mc://message/ links taking the same way."""

import concurrent.futures

import pytest

from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument

from conftest import ANN, BOB, CAT, activate, lunch_conversation, message, save_screenshot, search_everywhere
from m2mc.middleware.types import Member, format_mid
from m2mc.ui.message_model import MessageRole
from m2mc.ui.search_results import PAD_X, ResultHtmlRole
from m2mc.ui.search_window import RESULT_LIMIT, query_of


def two_groups(qtbot, window, backend):
    me = Member(backend.pid, backend.name)
    lunch = backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True,
                                         history=lunch_conversation(""))
    plans = message("", BOB, 1, "Plans for the winter trip?")
    trips = [plans, message("", CAT, 1, "Chennai in December, then Goa", plans.mid),
             message("", ANN, 1, f"Budget first, please <@{CAT.pid}>")]
    winter = backend.manager.inject_group("Winter trip", members=(ANN, BOB, CAT, me), joined=True, history=trips)
    window.start()
    qtbot.waitUntil(lambda: all(s.loaded and len(s.tree) for s in window.session_controller.sessions.values())
                    and len(window.session_controller.sessions) == 2)
    return window.session_controller.sessions[lunch.gid], window.session_controller.sessions[winter.gid]


def test_typed_words_make_a_query_that_never_fails_to_parse():
    assert query_of("Décemb") == "decemb*"
    assert query_of('go "in" Dec AND (') == "go in dec and"  # quotes and operators are only words
    assert query_of("marina beach ") == "marina beach"  # a space ends the word: no prefix
    assert query_of("  ") is None


def test_search_everywhere_lists_by_conversation_and_opens_results_in_their_threads(qtbot, window, backend):
    lunch, winter = two_groups(qtbot, window, backend)
    window.select_group(lunch.gid)
    qtbot.waitUntil(lambda: window.current is lunch)

    qtbot.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    search = window.search_window
    qtbot.waitUntil(search.isVisible)
    activate(qtbot, search)
    assert search.query_edit.hasFocus()
    qtbot.keyClicks(search.query_edit, "decemb")
    qtbot.waitUntil(lambda: len(search.result_items()) == 3, timeout=3000)
    groups = [search.results.topLevelItem(i).text(0) for i in range(search.results.topLevelItemCount())]
    assert sorted(groups) == ["Travel & lunch — 2 results", "Winter trip — 1 result"]
    labels = [item.data(0, ResultHtmlRole) for item in search.result_items()]
    assert all('<b class="match">December</b>' in text for text in labels), labels
    assert search.status.text() == "3 results in 2 conversations"
    save_screenshot(search, "search-everywhere.png")

    # Enter goes to the first result; Down, Enter opens the next one in its thread, selected.
    qtbot.keyClick(search.query_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(search.results.hasFocus)
    items = search.result_items()
    assert search.results.currentItem() is items[0]
    qtbot.keyClick(search.results, Qt.Key.Key_Down)
    assert search.results.currentItem() is items[1]
    wanted = items[1].data(0, Qt.ItemDataRole.UserRole + 1)
    qtbot.keyClick(search.results, Qt.Key.Key_Return)
    shown = window.session_controller.sessions[wanted.gid]
    qtbot.waitUntil(lambda: window.current is shown)
    qtbot.waitUntil(lambda: window.conversation.selected_message() is not None and window.conversation.selected_message().mid == wanted.mid)  # read from the store
    assert shown.thread is not None and shown.thread.root.message.mid == shown.tree.thread_of(wanted.mid)
    index = window.conversation._view_index(wanted.mid)
    assert window.conversation.tree_view.viewport().rect().intersects(window.conversation.tree_view.visualRect(index))  # scrolled into view
    save_screenshot(window, "search-result-opened.png")

    # A click on a result of the other conversation switches groups.
    other = next(item for item in items if item.data(0, Qt.ItemDataRole.UserRole + 1).gid != wanted.gid)
    hit = other.data(0, Qt.ItemDataRole.UserRole + 1)
    rect = search.results.visualItemRect(other)
    qtbot.mouseClick(search.results.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    target = window.session_controller.sessions[hit.gid]
    qtbot.waitUntil(lambda: window.current is target)
    qtbot.waitUntil(lambda: window.conversation.selected_message() is not None and window.conversation.selected_message().mid == hit.mid)  # read from the store
    assert target.thread is not None and target.thread.root.message.mid == target.tree.thread_of(hit.mid)


def test_a_message_link_opens_its_thread_in_another_group(qtbot, window, backend):
    lunch, winter = two_groups(qtbot, window, backend)
    window.select_group(lunch.gid)
    qtbot.waitUntil(lambda: window.current is lunch)
    plans = winter.tree.roots()[0].message
    answer = next(node.message for node in winter.tree.roots()[0].children if node.message.text.startswith("Chennai"))
    window.navigation.open_link(f"m2mc://message/{winter.gid}/{format_mid(answer.mid)}")
    assert window.current is winter
    qtbot.waitUntil(lambda: window.conversation.selected_message() is not None and window.conversation.selected_message().mid == answer.mid)  # read from the store
    assert winter.thread is not None and winter.thread.root.message.mid == plans.mid == answer.parent


def test_mentions_in_results_read_as_names(qtbot, window, backend):
    two_groups(qtbot, window, backend)
    search = search_everywhere(qtbot, window, "budget")
    qtbot.waitUntil(lambda: len(search.result_items()) == 1)
    text = search.result_items()[0].data(0, ResultHtmlRole)
    assert "please @Cat" in text and "&lt;@" not in text


def test_escape_closes_and_a_query_without_matches_says_so(qtbot, window, backend):
    two_groups(qtbot, window, backend)
    search = search_everywhere(qtbot, window, "zanzibar")
    qtbot.keyClick(search.query_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: search.status.text() == "No results")
    qtbot.keyClick(search.query_edit, Qt.Key.Key_Escape)
    assert not search.isVisible()

    # Shown again, it searches again: what arrived meanwhile is found.
    session = window.current
    backend.manager.send(session.gid, "A zanzibar trip?", None)
    window.menus.search_action.trigger()
    qtbot.waitUntil(lambda: search.status.text() == "1 result in 1 conversation")
    activate(qtbot, search)
    qtbot.keyClick(search.query_edit, Qt.Key.Key_Down)  # Down goes to the results too
    assert search.results.hasFocus() and search.results.currentItem() is search.result_items()[0]


def test_search_everywhere_lists_direct_messages_and_opens_them_in_their_conversation(qtbot, window, backend):
    lunch, _winter = two_groups(qtbot, window, backend)
    window.select_group(lunch.gid)
    qtbot.waitUntil(lambda: window.current is lunch)
    backend.manager.pass_time(31)  # a heartbeat from each: direct messages go
    found = backend.manager.inject_direct(ANN, "Booked the hotel in Goa for the last week of December")
    for n in range(30):  # the match is far above the conversation's end, where it opens
        backend.manager.inject_direct(ANN, f"packing list, item {n}")
    qtbot.waitUntil(lambda: window.groups_pane.direct_list.count() == 1)

    search = search_everywhere(qtbot, window, "decemb")
    qtbot.waitUntil(lambda: len(search.result_items()) == 4, timeout=3000)
    # The direct message is the newest: its conversation, titled with Ann's name as in the list, comes first.
    groups = [search.results.topLevelItem(i).text(0) for i in range(search.results.topLevelItemCount())]
    assert groups[0] == "Ann — 1 result"
    assert sorted(groups[1:]) == ["Travel & lunch — 2 results", "Winter trip — 1 result"]
    labels = [item.data(0, ResultHtmlRole) for item in search.result_items()]
    assert all('<b class="match">December</b>' in text for text in labels), labels
    assert labels[0].startswith("<b>Ann</b>")
    assert search.status.text() == "4 results in 3 conversations"
    save_screenshot(search, "search-everywhere-direct.png")
    assert search.grab().save("/tmp/search-everywhere-direct.png")

    # Enter goes to the first result, the direct one; Enter again opens Ann's conversation there.
    qtbot.keyClick(search.query_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(search.results.hasFocus)
    hit = search.results.currentItem().data(0, Qt.ItemDataRole.UserRole + 1)
    assert hit.mid == found and hit.peer == ANN.pid
    qtbot.keyClick(search.results, Qt.Key.Key_Return)
    pane = window.direct_pane
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is pane)
    assert window.direct_controller.current.peer == ANN.pid and window.groups_pane.direct_list.currentItem().text() == "● Ann"
    view = pane.view
    qtbot.waitUntil(lambda: view.currentIndex().isValid() and view.currentIndex().data(MessageRole).mid == found)
    assert view.selectionModel().isSelected(view.currentIndex())
    qtbot.wait(50)  # nothing queued scrolls it away again (the conversation opens at its end)
    assert view.viewport().rect().intersects(view.visualRect(view.currentIndex()))
    save_screenshot(window, "search-result-opened-direct.png")

    # Back (Alt+Left) returns to the group shown before the jump.
    activate(qtbot, window)
    qtbot.keyClick(view, Qt.Key.Key_Left, Qt.KeyboardModifier.AltModifier)
    qtbot.waitUntil(lambda: window.current is lunch and window.centre_stack.currentIndex() == 0)

    # A click on the direct result opens it again, and Back from the group result returns to it.
    search.show_search()
    qtbot.waitUntil(lambda: len(search.result_items()) == 4)
    item = search.result_items()[0]
    qtbot.mouseClick(search.results.viewport(), Qt.MouseButton.LeftButton, pos=search.results.visualItemRect(item).center())
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is pane
                    and view.currentIndex().isValid() and view.currentIndex().data(MessageRole).mid == found)
    other = search.result_items()[1]
    in_group = window.session_controller.sessions[other.data(0, Qt.ItemDataRole.UserRole + 1).gid]
    qtbot.mouseClick(search.results.viewport(), Qt.MouseButton.LeftButton, pos=search.results.visualItemRect(other).center())
    qtbot.waitUntil(lambda: window.current is in_group and window.centre_stack.currentIndex() == 0)
    activate(qtbot, window)
    qtbot.keyClick(window.conversation.tree_view, Qt.Key.Key_Left, Qt.KeyboardModifier.AltModifier)
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is pane and window.current is None)
    assert view.currentIndex().data(MessageRole).mid == found


def test_a_direct_result_opens_once_its_conversations_history_has_come(qtbot, window, backend):
    me = Member(backend.pid, backend.name)
    backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True,
                                 history=lunch_conversation(""))
    backend.manager.pass_time(31)
    found = backend.manager.inject_direct(BOB, "The Goa tickets are booked")
    for n in range(30):
        backend.manager.inject_direct(BOB, f"seat {n}")
    [(hit, _root)] = backend.manager.search("goa", direct=True)
    # Before the window has listed any conversation (not started): the conversation opens, and shows
    # the message once its history has come.
    assert window.navigation.show_message(hit.gid, hit.mid)
    assert window.centre_stack.currentWidget() is window.direct_pane and window.direct_controller.current.loading
    view = window.direct_pane.view
    qtbot.waitUntil(lambda: view.currentIndex().isValid() and view.currentIndex().data(MessageRole).mid == found)
    assert window.direct_controller.current.peer == BOB.pid
    qtbot.wait(50)  # the conversation's arrival does not scroll to its end afterwards
    assert view.viewport().rect().intersects(view.visualRect(view.currentIndex()))


class SlowHistories:
    """The middleware answering ``direct_history`` only on :meth:`release` (a long conversation read
    from a busy disk); every other call is answered at once."""

    def __init__(self, backend):
        self.held: list[tuple[concurrent.futures.Future, concurrent.futures.Future]] = []
        manager, submit, read = backend.manager, backend._submit, backend.manager.direct_history
        asked = []

        def direct_history(*args, **kwargs):
            asked.append(args)
            return read(*args, **kwargs)

        def slow_submit(work):
            before = len(asked)
            done = submit(work)
            if len(asked) == before:
                return done
            later: concurrent.futures.Future = concurrent.futures.Future()
            self.held.append((done, later))
            return later

        manager.direct_history = direct_history
        backend._submit = slow_submit

    def release(self):
        held, self.held = self.held, []
        for done, later in held:
            later.set_result(done.result())


def click_item(qtbot, items, item):
    qtbot.mouseClick(items.viewport(), Qt.MouseButton.LeftButton, pos=items.visualItemRect(item).center())


def jump_into_a_loading_conversation(qtbot, window, backend):
    """Ann's direct messages, whose history the middleware is slow to give; Search everywhere's result
    among them opened with Enter before it has come.  The message found, and the Winter trip session."""
    me = Member(backend.pid, backend.name)
    lunch = backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True,
                                         history=lunch_conversation(""))
    winter = backend.manager.inject_group("Winter trip", members=(ANN, BOB, CAT, me), joined=True,
                                          history=[message("", BOB, 1, "Plans for the winter trip?")])
    backend.manager.pass_time(31)  # a heartbeat from each: direct messages go
    found = backend.manager.inject_direct(ANN, "Booked the hotel in Goa for the last week of December")
    for n in range(30):  # the match is far above the conversation's end, where it opens
        backend.manager.inject_direct(ANN, f"packing list, item {n}")
    slow = SlowHistories(backend)
    window.start()
    sessions = window.session_controller.sessions
    qtbot.waitUntil(lambda: len(sessions) == 2 and all(s.loaded for s in sessions.values())
                    and window.groups_pane.direct_list.count() == 1)
    window.select_group(lunch.gid)
    search = search_everywhere(qtbot, window, "decemb")
    qtbot.waitUntil(lambda: len(search.result_items()) == 3, timeout=3000)
    qtbot.keyClick(search.query_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(search.results.hasFocus)
    assert search.results.currentItem().data(0, Qt.ItemDataRole.UserRole + 1).mid == found
    qtbot.keyClick(search.results, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane)
    assert window.direct_controller.current.loading and slow.held
    activate(qtbot, window)
    return slow, found, sessions[winter.gid]


def test_a_direct_result_still_loading_is_cancelled_and_told_when_the_user_opens_another_conversation(
        qtbot, window, backend):
    slow, found, winter = jump_into_a_loading_conversation(qtbot, window, backend)
    ann = window.direct_controller.current
    click_item(qtbot, window.groups_pane.group_list, window.groups_pane.item(winter.gid))  # the user's own choice: it wins
    qtbot.waitUntil(lambda: window.current is winter)
    assert window.statusBar().currentMessage() == (
        "The message in the conversation with Ann was not shown: another conversation was opened while it loaded.")

    slow.release()
    qtbot.waitUntil(lambda: not ann.loading)  # the history has come
    # The history's arrival does not take the user back to Ann's conversation.
    assert window.current is winter and window.centre_stack.currentIndex() == 0
    assert window.direct_controller.current is None and not window.direct_pane.isVisible()

    # Opened later from the list, Ann's conversation is where the user left it: at its end.
    click_item(qtbot, window.groups_pane.direct_list, window.groups_pane.direct_list.item(0))
    view = window.direct_pane.view
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane and bool(view.visible_mids()))
    qtbot.wait(50)
    assert found not in view.visible_mids() and not view.currentIndex().isValid()


def test_a_direct_result_still_loading_stays_cancelled_when_the_user_comes_back_before_it_has_loaded(
        qtbot, window, backend):
    """What a switch away means does not hang on when the history comes: cancelled either way."""
    slow, found, winter = jump_into_a_loading_conversation(qtbot, window, backend)
    click_item(qtbot, window.groups_pane.group_list, window.groups_pane.item(winter.gid))
    qtbot.waitUntil(lambda: window.current is winter)
    click_item(qtbot, window.groups_pane.direct_list, window.groups_pane.direct_list.item(0))
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane)
    slow.release()
    view = window.direct_pane.view
    qtbot.waitUntil(lambda: bool(view.visible_mids()))
    qtbot.wait(50)
    assert found not in view.visible_mids() and not view.currentIndex().isValid()


ROW_SLACK = 10  # a row's padding around its text, at most
LONG_RESULTS = [
    "The December trip: we fly to Chennai on the 12th, take the train down the coast to Pondicherry for two "
    "nights, then a bus to Madurai, and back by the overnight train to catch the flight home on the 20th.",
    "December is fine with me",
    "If December works for everyone I will book the rooms tonight; the place near the beach has a terrace, "
    "breakfast, and a kitchen we can use for the long evenings. Say so before nine, please, or I will pick "
    "the cheaper one on the hill instead, which is further from everything but quieter at night.",
]


def text_height(search, item, width):
    """How tall the result's text is, wrapped at ``width``, in the list's font."""
    document = QTextDocument()
    document.setDefaultFont(search.results.font())
    document.setDocumentMargin(0)
    document.setHtml(item.data(0, ResultHtmlRole))
    document.setTextWidth(width)
    return document.size().height()


def test_result_rows_are_as_tall_as_their_wrapped_text_at_any_width(qtbot, window, backend):
    me = Member(backend.pid, backend.name)
    history = [message("", [ANN, BOB, CAT][n % 3], n // 3 + 1, LONG_RESULTS[n % 3]) for n in range(6)]
    backend.manager.inject_group("Winter trip", members=(ANN, BOB, CAT, me), joined=True, history=history)
    window.start()
    qtbot.waitUntil(lambda: len(window.session_controller.sessions) == 1)
    search = search_everywhere(qtbot, window, "decemb")
    qtbot.waitUntil(lambda: len(search.result_items()) == 6, timeout=3000)
    longest = search.result_items()[0]  # the newest: the rooms, three lines at 420 px
    heights = {}
    for width in (800, 420):  # widened, then narrowed, with the results listed
        search.resize(width, 600)
        qtbot.waitUntil(lambda: search.results.viewport().width() < width)
        qtbot.wait(50)  # the rows' layout, which a resize schedules
        save_screenshot(search, f"search-rows-{width}.png")
        for item in search.result_items():
            rect = search.results.visualItemRect(item)
            text = text_height(search, item, rect.width() - 2 * PAD_X)
            assert text <= rect.height() <= text + ROW_SLACK, (width, rect.height(), text)
        heights[width] = search.results.visualItemRect(longest).height()
    assert heights[420] > heights[800]  # it wraps to more lines, in a taller row


def test_up_from_the_first_result_goes_back_to_the_query(qtbot, window, backend):
    two_groups(qtbot, window, backend)
    search = search_everywhere(qtbot, window, "decemb")
    qtbot.keyClick(search.query_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(search.results.hasFocus)
    items = search.result_items()
    qtbot.keyClick(search.results, Qt.Key.Key_Down)
    qtbot.keyClick(search.results, Qt.Key.Key_Up)
    assert search.results.hasFocus() and search.results.currentItem() is items[0]
    qtbot.keyClick(search.results, Qt.Key.Key_Up)  # as Down came from it
    assert search.query_edit.hasFocus() and search.query_edit.cursorPosition() == len("decemb")
    qtbot.keyClicks(search.query_edit, "er goa")  # a word more narrows the search
    qtbot.waitUntil(lambda: len(search.result_items()) == 1, timeout=3000)


def test_back_in_search_everywhere_the_reader_goes_on_from_the_result_last_opened(qtbot, window, backend):
    # The main window comes up over the search window when a result opens (on a small screen, all
    # of it): Ctrl+Shift+F brings the search back, its results brought up to date, at the same place.
    two_groups(qtbot, window, backend)
    search = search_everywhere(qtbot, window, "decemb")
    qtbot.keyClick(search.query_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(search.results.hasFocus)
    qtbot.keyClick(search.results, Qt.Key.Key_Down)
    opened = search.results.currentItem().data(0, Qt.ItemDataRole.UserRole + 1)
    qtbot.keyClick(search.results, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.conversation.selected_message() is not None and window.conversation.selected_message().mid == opened.mid)
    activate(qtbot, window)

    qtbot.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.ShiftModifier)
    activate(qtbot, search)
    assert search.query_edit.hasFocus() and search.query_edit.selectedText() == "decemb"  # to type over
    qtbot.waitUntil(lambda: search.status.text() == "3 results in 2 conversations")
    qtbot.keyClick(search.query_edit, Qt.Key.Key_Down)
    assert search.results.hasFocus()
    assert search.results.currentItem().data(0, Qt.ItemDataRole.UserRole + 1).mid == opened.mid
    qtbot.keyClick(search.results, Qt.Key.Key_Down)
    assert search.results.currentItem() is search.result_items()[2]  # the next one

    # A new query starts from its first result.
    qtbot.keyClick(search.results, Qt.Key.Key_Up)
    qtbot.keyClick(search.results, Qt.Key.Key_Up)
    qtbot.keyClick(search.results, Qt.Key.Key_Up)
    assert search.query_edit.hasFocus()
    search.query_edit.selectAll()
    qtbot.keyClicks(search.query_edit, "lunch")
    qtbot.keyClick(search.query_edit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: search.results.hasFocus() and search.results.currentItem() is search.result_items()[0])


@pytest.mark.parametrize("matching", [RESULT_LIMIT + 1, RESULT_LIMIT])
def test_past_the_limit_the_status_says_only_the_newest_results_are_listed(qtbot, window, backend, matching):
    # "100+ results in 1 conversation" over a heading of "100 results" read as a contradiction; and
    # with exactly 100, none is left out.
    me = Member(backend.pid, backend.name)
    history = [message("", [ANN, BOB, CAT][n % 3], n // 3 + 1, f"December note {n}") for n in range(matching)]
    backend.manager.inject_group("Winter trip", members=(ANN, BOB, CAT, me), joined=True, history=history)
    window.start()
    qtbot.waitUntil(lambda: len(window.session_controller.sessions) == 1)
    search = search_everywhere(qtbot, window, "decemb")
    qtbot.waitUntil(lambda: len(search.result_items()) == RESULT_LIMIT, timeout=3000)
    assert search.status.text() == (f"The newest {RESULT_LIMIT} results, in 1 conversation; older ones are not listed"
                                    if matching > RESULT_LIMIT else f"{RESULT_LIMIT} results in 1 conversation")
    assert search.results.topLevelItem(0).text(0) == f"Winter trip — {RESULT_LIMIT} results"


def test_a_long_status_wraps_instead_of_widening_the_window(qtbot, window, backend):
    # A plain label's whole text is its minimum width: a long error held the window past a small screen.
    two_groups(qtbot, window, backend)

    def failing(*_args, **_kwargs):
        raise RuntimeError("the store could not be read: " + "disk I/O error, " * 20)

    backend.manager.search = failing
    search = search_everywhere(qtbot, window, "decemb")
    qtbot.waitUntil(lambda: search.status.text().startswith("Search failed:"), timeout=3000)
    assert search.minimumSizeHint().width() < 400
    search.resize(420, 600)
    qtbot.waitUntil(lambda: search.width() == 420)
