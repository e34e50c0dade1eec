"""Where the main window's keys go: the focus model of :mod:`ui.focus` applied to the window's widgets,
and letters typed in a list or a conversation view passed on to the compose box on show."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QMainWindow, QStackedWidget, QWidget

from ..controllers.sessions import GroupSession
from ..direct_pane import DirectPane
from ..focus import Navigation, Place, after
from ..widgets import TypingGoesTo
from .conversation import ConversationPane


class KeyRouting:
    """The keys of ``window``, whose ``centre`` shows the ``talk`` pane (a group, ``current()``, or the
    empty page) or the ``direct`` pane; ``group_lists`` (groups, threads, members) and ``direct_list``
    are the side lists, each passing typed letters to the compose box of its own kind."""

    def __init__(self, window: QMainWindow, centre: QStackedWidget, talk: ConversationPane, direct: DirectPane,
                 group_lists: tuple[QWidget, ...], direct_list: QWidget,
                 current: Callable[[], GroupSession | None]) -> None:
        self.window, self.centre, self.talk, self.direct = window, centre, talk, direct
        self.side_lists, self.current = group_lists + (direct_list,), current
        # A list's letters go to the compose box of its own kind only, when one of that kind is on show:
        # typed in the direct messages list, "hi bob" went to the group on show, and Enter sent it there.
        self.typing_goes_to_compose = TypingGoesTo(self._group_compose_on_show, window)
        self.typing_goes_to_direct = TypingGoesTo(self._direct_compose_on_show, window)
        # Reading places pass typed letters on too (ui.focus, rule 3): in a conversation view they only
        # searched the rows, and "hello" typed after clicking a message was lost.
        for widget in group_lists + (talk.tree_view, talk.timeline_view):
            widget.installEventFilter(self.typing_goes_to_compose)
        for widget in (direct_list, direct.view):
            widget.installEventFilter(self.typing_goes_to_direct)

    def direct_on_show(self) -> bool:
        return self.centre.currentWidget() is self.direct

    def _group_compose_on_show(self) -> QWidget | None:
        return None if self.direct_on_show() else self.talk.compose

    def _direct_compose_on_show(self) -> QWidget | None:
        return self.direct.compose if self.direct_on_show() else None

    def on_show(self) -> str | None:
        """What the centre shows: "direct", "group" or None (the empty page)."""
        if self.direct_on_show():
            return "direct"
        return "group" if self.current() is not None else None

    def keys_place(self) -> Place:
        """Where the window's keys are now (its focus widget, even while another window is active)."""
        active = QApplication.activeWindow()
        widget = self.window.focusWidget()
        if widget is None or not widget.isVisible() or not widget.isEnabled():
            return Place.LOST
        if active is not None and active is not self.window:
            return Place.ELSEWHERE
        talk = self.talk
        if widget is talk.compose:
            return Place.COMPOSE
        if widget is self.direct.compose:
            return Place.DIRECT_COMPOSE
        if widget in self.side_lists:
            return Place.SIDE_LIST
        if widget in (talk.tree_view, talk.timeline_view, self.direct.view):
            return Place.READING
        if widget in (talk.filter_edit, talk.topic_edit):
            return Place.FIELD
        if widget is talk.empty_page.buttons[0]:
            return Place.FIRST_STEPS
        return Place.OTHER

    def apply_focus(self, navigation: Navigation, from_list: QWidget | None = None) -> None:
        """Put the keys where the focus model says after ``navigation`` (ui.focus).  ``from_list``: the
        side list the move was made in; with its arrow keys (no mouse button down), it keeps the keys."""
        by_keys = (from_list is not None and from_list.hasFocus()
                   and QApplication.mouseButtons() == Qt.MouseButton.NoButton)
        target = after(navigation, self.on_show(), self.keys_place(), by_list_keys=by_keys)
        widget = {Place.COMPOSE: self.talk.compose, Place.DIRECT_COMPOSE: self.direct.compose,
                  Place.FIRST_STEPS: self.talk.empty_page.buttons[0]}.get(target) if target is not None else None
        if widget is not None and self.window.focusWidget() is not widget:
            widget.setFocus(Qt.FocusReason.OtherFocusReason)

    def focus_compose(self) -> None:
        """The app opens with the keys in the compose box: in the groups list, typing searched it
        and switched to whichever group began with the letters typed."""
        self.talk.compose.setFocus()

    def focus_first_steps(self) -> None:
        """With no group yet, the keys go to "Find groups…" on the empty page: in the empty groups
        list, Enter did nothing."""
        self.talk.empty_page.buttons[0].setFocus()
