"""The main window on a small screen (issue 32 item 4): side panes fold on their own, pane sizes hold and are kept.

Real resizes of the real window under the test's Qt platform; screenshots at 800 x 600 and 1400 x 900.
"""

import pytest
from conftest import ANN, BOB, CAT, lunch_conversation, save_screenshot
from test_main_window import open_lunch

from m2mc.middleware.types import Member
from m2mc.ui.main_window import MainWindow

# A plain label's whole text was its minimum width: this title alone held the window above 900 px.
LONG_TITLE = "Travel & lunch planning for the whole department, summer outing 2024"


def open_long_titled(qtbot, window, backend):
    me = Member(backend.pid, backend.name)
    backend.manager.inject_group(LONG_TITLE, members=(ANN, BOB, CAT, me), joined=True,
                                 history=lunch_conversation(""))
    window.start()
    qtbot.waitUntil(lambda: window.current is not None and len(window.current.tree) == 8)


def resize(qtbot, window, width, height=600):
    window.resize(width, height)
    qtbot.waitUntil(lambda: window.width() == width)
    qtbot.wait(20)  # the splitters lay out after the window's resize


def shown(window):
    return {name: pane.isVisible() for name, pane in
            (("groups", window.groups_pane), ("threads", window.threads_pane), ("members", window.members_pane))}


def checked(window):
    return {name: toggle.isChecked() for name, toggle in window.pane_layout.toggles.items()}


def test_side_panes_fold_on_a_narrow_window_and_come_back(qtbot, window, backend):
    open_long_titled(qtbot, window, backend)
    resize(qtbot, window, 1400, 900)
    assert shown(window) == {"groups": True, "threads": True, "members": True}
    save_screenshot(window, "main-window-1400x900.png")

    resize(qtbot, window, 800)
    assert shown(window) == checked(window) == {"groups": True, "threads": False, "members": False}
    assert window.pane_layout.splitter.sizes()[2] == 0  # the talk has the room the side panes had
    save_screenshot(window, "main-window-800x600.png")

    resize(qtbot, window, 640)
    assert window.minimumWidth() <= 640 and window.minimumSizeHint().width() <= 640
    assert window.width() == 640
    assert shown(window) == checked(window) == {"groups": False, "threads": False, "members": False}
    assert window.pane_layout.splitter.sizes()[1] == 640

    resize(qtbot, window, 1400, 900)
    assert shown(window) == checked(window) == {"groups": True, "threads": True, "members": True}


def test_a_pane_chosen_by_hand_wins_until_the_window_shrinks_further(qtbot, window, backend):
    open_lunch(qtbot, window, backend)
    window.pane_layout.toggles["members"].trigger()  # closed by the reader on a wide window
    resize(qtbot, window, 800)
    resize(qtbot, window, 1200)
    assert not window.members_pane.isVisible()  # it was not folded by the window: it stays closed
    assert window.threads_pane.isVisible()

    resize(qtbot, window, 900)
    assert not window.threads_pane.isVisible()
    window.pane_layout.toggles["threads"].trigger()  # reopened by hand on the narrow window
    resize(qtbot, window, 920)
    assert window.threads_pane.isVisible() and window.pane_layout.toggles["threads"].isChecked()
    resize(qtbot, window, 850)
    assert not window.threads_pane.isVisible() and not window.pane_layout.toggles["threads"].isChecked()


def test_filter_typing_does_not_move_the_panes(qtbot, window, backend):
    open_long_titled(qtbot, window, backend)
    for width in (1100, 1000):
        resize(qtbot, window, width)
        before = window.pane_layout.splitter.sizes(), window.pane_layout.side_splitter.sizes()
        qtbot.keyClicks(window.conversation.filter_edit, "december")
        qtbot.wait(20)
        assert (window.pane_layout.splitter.sizes(), window.pane_layout.side_splitter.sizes()) == before
        window.conversation.filter_edit.clear()
        qtbot.wait(20)
        assert (window.pane_layout.splitter.sizes(), window.pane_layout.side_splitter.sizes()) == before


@pytest.fixture(params=["dict", "ini"])
def settings(request, tmp_path):
    """A dict (as in other tests) and the app's own kind: a QSettings ini file."""
    if request.param == "dict":
        return {}
    from PySide6.QtCore import QSettings

    return QSettings(str(tmp_path / "gui.ini"), QSettings.Format.IniFormat)


def test_pane_sizes_are_remembered_across_windows(qtbot, backend, settings):
    first = MainWindow(backend, settings=settings)
    qtbot.addWidget(first)
    first.show()
    resize(qtbot, first, 1200, 700)
    first.pane_layout.splitter.setSizes([300, 600, 292])
    first.pane_layout.side_splitter.setSizes([250, 400])
    kept = first.pane_layout.splitter.sizes(), first.pane_layout.side_splitter.sizes()
    first.close()

    second = MainWindow(backend, settings=settings)
    qtbot.addWidget(second)
    second.show()
    resize(qtbot, second, 1200, 700)
    assert (second.pane_layout.splitter.sizes(), second.pane_layout.side_splitter.sizes()) == kept


def test_pane_sizes_kept_through_a_fold_and_a_new_window(qtbot, backend):
    settings = {}
    first = MainWindow(backend, settings=settings)
    qtbot.addWidget(first)
    first.show()
    resize(qtbot, first, 1200, 700)
    first.pane_layout.side_splitter.setSizes([250, 400])
    kept = first.pane_layout.side_splitter.sizes()
    resize(qtbot, first, 640, 700)  # every side pane folds
    first.close()

    second = MainWindow(backend, settings=settings)
    qtbot.addWidget(second)
    second.show()
    resize(qtbot, second, 1200, 700)
    assert all(size > 100 for size in second.pane_layout.splitter.sizes())
    assert second.pane_layout.side_splitter.sizes() == kept
