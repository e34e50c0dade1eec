"""The window comes back as it was (issue 45 point 2): restarted after a direct conversation was on show,
after a settings file that says a pane is 0 px wide, and after the user closed a pane, the panes are
there (or closed) as they were, and the View menu says so and works."""

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
    assert not first.side_splitter.isVisible()
    resize(qtbot, first, 1300, 700)  # maximized while it is shown: the hidden side panes got 0 px
    first.close()  # Ctrl+Q
    assert "0" not in str(settings.value("window/panes") if hasattr(settings, "value") else settings["window/panes"]).split(",")

    second = a_window(qtbot, backend, settings)
    assert shown(second) == {"groups": True, "threads": True, "members": True} == checked(second)
    assert second.splitter.sizes()[2] > 100, second.splitter.sizes()
    save_screenshot(second, "restart-after-direct.png")


def test_a_saved_width_of_zero_reads_as_folded_and_ticking_gives_the_pane_room(qtbot, backend):
    settings = {"window/panes": "200,896,0"}  # what the app wrote before (issue 45)
    window = a_window(qtbot, backend, settings)
    assert checked(window) == {"groups": True, "threads": False, "members": False}
    assert not window.side_splitter.isVisible()
    window.pane_toggles["threads"].trigger()  # View → Threads pane
    qtbot.waitUntil(lambda: window.threads_pane.isVisible())
    qtbot.wait(20)
    assert window.splitter.sizes()[2] > 100, window.splitter.sizes()
    window.pane_toggles["members"].trigger()
    qtbot.waitUntil(lambda: window.members_pane.isVisible())
    save_screenshot(window, "restart-zero-width-ticked.png")


def test_a_pane_the_user_closed_stays_closed_after_a_restart_and_ticking_brings_it_back(qtbot, backend, settings):
    first = a_window(qtbot, backend, settings)
    first.pane_toggles["members"].trigger()
    assert not first.members_pane.isVisible()
    first.close()
    second = a_window(qtbot, backend, settings)
    assert checked(second) == {"groups": True, "threads": True, "members": False}
    assert shown(second) == checked(second)
    second.pane_toggles["members"].trigger()
    qtbot.waitUntil(lambda: second.members_pane.isVisible())
    second.close()
    third = a_window(qtbot, backend, settings)
    assert shown(third) == {"groups": True, "threads": True, "members": True}


def test_a_side_pane_squeezed_to_nothing_by_its_handle_comes_back_from_the_view_menu(qtbot, backend):
    window = a_window(qtbot, backend, {})
    sizes = window.splitter.sizes()
    window.splitter.setSizes([sizes[0], sizes[1] + sizes[2], 0])  # the handle dragged to the edge
    window.pane_toggles["threads"].trigger()
    window.pane_toggles["members"].trigger()
    assert not window.side_splitter.isVisible()
    window.pane_toggles["threads"].trigger()
    qtbot.waitUntil(lambda: window.threads_pane.isVisible())
    assert window.splitter.sizes()[2] > 100
