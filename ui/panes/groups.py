"""The groups pane: the joined groups, each with its unread count and its unseen warning, mirrored from
the sessions (ui.model.sessions), and the direct conversations under them."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QPoint, Qt, Signal
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QLabel, QListWidget, QListWidgetItem, QMenu, QPushButton, QStyle

from ..direct_pane import DirectList
from ..model.sessions import Session
from ..resources import icon
from ..widgets import GroupIdRole, GroupListDelegate, UnreadCountRole
from .pane import TitledPane


class GroupsPane(TitledPane):
    """Listens to the sessions (a ui.model.sessions.SessionsListener); ``group_chosen`` tells the gid
    of the group the reader chose in the list (None: none is)."""

    group_chosen = Signal(object)

    def __init__(self, find_groups: Callable[[], object], notify_menu: Callable[[str, QMenu], QMenu]) -> None:
        group_list = QListWidget()
        super().__init__("Groups", group_list)
        self.group_list = group_list
        self.group_list.setObjectName("groupList")
        self.group_list.setAccessibleName("Groups")  # what a screen reader calls it (test_accessibility)
        self.group_list.setItemDelegate(GroupListDelegate(self.group_list))
        self.group_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.group_list.currentItemChanged.connect(
            lambda item, _previous: self.group_chosen.emit(item.data(GroupIdRole) if item is not None else None))
        self.group_list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.group_list.customContextMenuRequested.connect(self._group_menu)
        self._notify_menu = notify_menu
        self.group_menu: QMenu | None = None  # the open context menu (tests read it while it is open)
        discover_button = QPushButton(icon("discover"), "Find groups…")
        discover_button.clicked.connect(find_groups)
        self.body_layout.addWidget(discover_button)
        # Direct messages (issue 29), under the groups: a conversation opens in the centre instead of a group.
        self.direct_list = DirectList()
        direct_title = QLabel("Direct messages")
        direct_title.setProperty("class", "paneTitle")
        direct_title.setMinimumWidth(1)  # the longer title must not widen the groups pane past its own
        self.body_layout.addWidget(direct_title)
        self.body_layout.addWidget(self.direct_list, 1)
        self._items: dict[str, QListWidgetItem] = {}

    def item(self, gid: str) -> QListWidgetItem | None:
        """The list's row of group ``gid``."""
        return self._items.get(gid)

    def select(self, gid: str) -> None:
        item = self._items.get(gid)
        if item is not None:
            self.group_list.setCurrentItem(item)

    def _group_menu(self, pos: QPoint) -> None:
        item = self.group_list.itemAt(pos)
        if item is None:
            return
        menu = QMenu(self)
        menu.addMenu(self._notify_menu(item.data(GroupIdRole), menu))
        self.group_menu = menu
        menu.popup(self.group_list.viewport().mapToGlobal(pos))

    def _icon(self, session: Session) -> QIcon:
        if session.unseen_warning is not None:
            return self.style().standardIcon(QStyle.StandardPixmap.SP_MessageBoxWarning)
        return icon("lock") if session.private else icon("group")

    # -- the sessions' listener ---------------------------------------------------------------

    def session_added(self, session: Session) -> None:
        item = QListWidgetItem(self._icon(session), session.title)
        item.setData(GroupIdRole, session.gid)
        item.setData(UnreadCountRole, session.unread)
        self._items[session.gid] = item
        self.group_list.addItem(item)

    def session_removed(self, session: Session) -> None:
        item = self._items.pop(session.gid, None)
        if item is not None:
            self.group_list.takeItem(self.group_list.row(item))

    def session_changed(self, session: Session) -> None:
        item = self._items.get(session.gid)
        if item is None:
            return
        item.setText(session.title)
        item.setIcon(self._icon(session))
        item.setToolTip(f"Warning: {session.unseen_warning}" if session.unseen_warning is not None else "")

    def unread_changed(self, session: Session, _total: int) -> None:
        item = self._items.get(session.gid)
        if item is not None:
            item.setData(UnreadCountRole, session.unread)
