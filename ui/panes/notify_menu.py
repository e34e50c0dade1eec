"""The notification-level menus (All messages / Mentions only / Nothing): the Conversation menu's, for the
group on show, and the one in each group's context menu in the groups pane (ui.model.notify keeps the
levels)."""

from __future__ import annotations

from typing import Callable

from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu, QWidget

LEVEL_TEXTS = (("all", "&All messages"), ("mentions", "&Mentions only"), ("nothing", "N&othing"))


class NotifyMenus:
    """``level_of(gid)`` and ``set_level(gid, level)`` read and keep a group's level; ``shown_gid()`` is
    the group on show (None: none is), whose level the Conversation menu's entries check."""

    def __init__(self, parent: QWidget, level_of: Callable[[str], str], set_level: Callable[[str, str], None],
                 shown_gid: Callable[[], str | None]) -> None:
        self.parent, self.level_of, self.set_level, self.shown_gid = parent, level_of, set_level, shown_gid
        self.main = self.menu(shown_gid)
        self.actions = {action.data(): action for action in self.main.actions()}

    def menu(self, gid_of: Callable[[], str | None], parent: QWidget | None = None) -> QMenu:
        """The menu for the group ``gid_of()`` names."""
        menu = QMenu("Notificat&ions", parent or self.parent)
        levels = QActionGroup(menu)
        for level, text in LEVEL_TEXTS:
            action = QAction(text, menu, checkable=True)
            action.setData(level)
            levels.addAction(action)
            action.triggered.connect(lambda _on, level=level: self._chosen(gid_of(), level))
            menu.addAction(action)
        menu.aboutToShow.connect(lambda: self._check(menu, gid_of()))
        return menu

    def show_level(self, gid: str) -> None:
        """The Conversation menu's entries for group ``gid``, just opened."""
        self.actions[self.level_of(gid)].setChecked(True)

    def _check(self, menu: QMenu, gid: str | None) -> None:
        level = self.level_of(gid) if gid is not None else None
        for action in menu.actions():
            action.setChecked(action.data() == level)

    def _chosen(self, gid: str | None, level: str) -> None:
        if gid is None:
            return
        self.set_level(gid, level)
        if self.shown_gid() == gid:
            self.actions[level].setChecked(True)
