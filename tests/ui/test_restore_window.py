"""The window comes back as it was (issue 45 point 2): restarted after a direct conversation was on show,
after a settings file that says a pane is 0 px wide, and after the user closed a pane, the panes are
there (or closed) as they were, and the View menu says so and works; and the group, the thread or the
direct conversation on show at the close is on show again."""

import pytest
from conftest import ANN, save_screenshot
from test_narrow_window import checked, resize, shown

from m2mc.ui.main_window import MainWindow


@pytest.fixture(params=["dict", "ini"])
def settings(request, tmp_path):
    if request.param == "dict":
        return {}
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)


def a_window(qtbot, backend, settings, width=1200):
    window = MainWindow(backend, settings=settings)
    qtbot.addWidget(window)
    window.show()
    resize(qtbot, window, width, 700)
    return window


def test_quit_while_a_direct_conversation_is_shown_and_the_panes_come_back(qtbot, backend, settings):
    first = a_window(qtbot, backend, settings)
    first.direct_controller.open_with(ANN.pid, "Ann")
    qtbot.waitUntil(lambda: first.centre_stack.currentWidget() is first.direct_pane)
    assert not first.pane_layout.side_splitter.isVisible()
    resize(qtbot, first, 1300, 700)  # maximized while it is shown: the hidden side panes got 0 px
    first.close()  # Ctrl+Q
    assert "0" not in str(settings.value("window/panes") if hasattr(settings, "value") else settings["window/panes"]).split(",")

    second = a_window(qtbot, backend, settings)
    assert shown(second) == {"groups": True, "threads": True, "members": True} == checked(second)
    assert second.pane_layout.splitter.sizes()[2] > 100, second.pane_layout.splitter.sizes()
    save_screenshot(second, "restart-after-direct.png")


def test_a_saved_width_of_zero_reads_as_folded_and_ticking_gives_the_pane_room(qtbot, backend):
    settings = {"window/panes": "200,896,0"}  # what the app wrote before (issue 45)
    window = a_window(qtbot, backend, settings)
    assert checked(window) == {"groups": True, "threads": False, "members": False}
    assert not window.pane_layout.side_splitter.isVisible()
    window.pane_layout.toggles["threads"].trigger()  # View → Threads pane
    qtbot.waitUntil(lambda: window.threads_pane.isVisible())
    qtbot.wait(20)
    assert window.pane_layout.splitter.sizes()[2] > 100, window.pane_layout.splitter.sizes()
    window.pane_layout.toggles["members"].trigger()
    qtbot.waitUntil(lambda: window.members_pane.isVisible())
    save_screenshot(window, "restart-zero-width-ticked.png")


def test_a_pane_the_user_closed_stays_closed_after_a_restart_and_ticking_brings_it_back(qtbot, backend, settings):
    first = a_window(qtbot, backend, settings)
    first.pane_layout.toggles["members"].trigger()
    assert not first.members_pane.isVisible()
    first.close()
    second = a_window(qtbot, backend, settings)
    assert checked(second) == {"groups": True, "threads": True, "members": False}
    assert shown(second) == checked(second)
    second.pane_layout.toggles["members"].trigger()
    qtbot.waitUntil(lambda: second.members_pane.isVisible())
    second.close()
    third = a_window(qtbot, backend, settings)
    assert shown(third) == {"groups": True, "threads": True, "members": True}


def test_a_side_pane_squeezed_to_nothing_by_its_handle_comes_back_from_the_view_menu(qtbot, backend):
    window = a_window(qtbot, backend, {})
    sizes = window.pane_layout.splitter.sizes()
    window.pane_layout.splitter.setSizes([sizes[0], sizes[1] + sizes[2], 0])  # the handle dragged to the edge
    window.pane_layout.toggles["threads"].trigger()
    window.pane_layout.toggles["members"].trigger()
    assert not window.pane_layout.side_splitter.isVisible()
    window.pane_layout.toggles["threads"].trigger()
    qtbot.waitUntil(lambda: window.threads_pane.isVisible())
    assert window.pane_layout.splitter.sizes()[2] > 100


def talk_to_restore(backend):
    """Two groups (a thread of three in the second) and a direct conversation with Ann."""
    from conftest import BOB, CAT, lunch_conversation
    from m2mc.middleware.types import Member

    me = Member(backend.pid, backend.name)
    first = backend.manager.inject_group("Travel & lunch", members=(ANN, BOB, CAT, me), joined=True,
                                         history=lunch_conversation(""))
    second = backend.manager.inject_group("Winter trip", members=(ANN, BOB, CAT, me), joined=True,
                                          history=lunch_conversation(""))
    backend.manager.inject_direct(ANN, "are you coming?")
    return first.gid, second.gid


def started(qtbot, backend, settings):
    window = a_window(qtbot, backend, settings)
    window.start()
    qtbot.waitUntil(lambda: len(window.session_controller.sessions) == 2
                    and all(s.loaded for s in window.session_controller.sessions.values()))
    return window


def test_a_restart_shows_the_group_the_direct_conversation_or_the_thread_on_show_at_the_close(
        qtbot, backend, settings):
    first_gid, second_gid = talk_to_restore(backend)
    window = started(qtbot, backend, settings)
    qtbot.waitUntil(lambda: window.current is not None and window.current.gid == first_gid)  # no setting yet
    # A group other than the first.
    window.select_group(second_gid)
    qtbot.waitUntil(lambda: window.current.gid == second_gid)
    window.close()
    window = started(qtbot, backend, settings)
    qtbot.waitUntil(lambda: window.current is not None and window.current.opened)
    assert window.current.gid == second_gid and window.current.thread is None
    assert window.focusWidget() is window.conversation.compose
    # A thread open in it.
    root = (ANN.pid, 2)  # "Did you visit Chennai?", three replies under it
    window.conversation.open_thread(root)
    qtbot.waitUntil(lambda: window.current.thread is not None)
    window.close()
    window = started(qtbot, backend, settings)
    qtbot.waitUntil(lambda: window.current is not None and window.current.thread is not None)
    assert window.current.gid == second_gid and window.current.thread.root.message.mid == root
    assert window.conversation.thread_bar.isVisible()
    save_screenshot(window, "restart-after-thread.png")
    # The direct conversation with Ann.
    window.direct_controller.open_with(ANN.pid)
    qtbot.waitUntil(lambda: window.centre_stack.currentWidget() is window.direct_pane)
    window.close()
    window = started(qtbot, backend, settings)
    qtbot.wait(100)  # the groups are in: none of them covers the conversation
    assert window.centre_stack.currentWidget() is window.direct_pane
    assert window.direct_controller.current is not None and window.direct_controller.current.peer == ANN.pid
    assert window.current is None and window.focusWidget() is window.direct_pane.compose
    save_screenshot(window, "restart-after-direct-conversation.png")
    # Back in a group, and nothing on show at all: the first group opens.
    window.select_group(first_gid)
    qtbot.waitUntil(lambda: window.current is not None and window.current.gid == first_gid)
    window.close()
    window = started(qtbot, backend, settings)
    qtbot.waitUntil(lambda: window.current is not None and window.current.gid == first_gid)
    assert window.centre_stack.currentWidget() is not window.direct_pane
