"""The group discovery window (the thesis's GroupInfoWindow): groups seen on the LAN, with Join…
(which asks first: ``ui.dialogs.ConfirmJoinDialog``).

The list is live: every ``GroupsDiscovered`` event updates or adds a row
(``dataChanged`` / ``beginInsertRows``), and the "last seen" column is
refreshed every few seconds.
"""

from __future__ import annotations

import time
from functools import partial

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, QRect, Qt, QTimer, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from ..middleware.events import Event, GroupsDiscovered
from ..middleware.types import GroupView, short_fingerprint

from .bridge import Backend
from .resources import app_icon, icon

COLUMNS = ("Group", "Members", "Private", "Last seen", "Active", "Status")
GidRole = Qt.ItemDataRole.UserRole + 1


def ago(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 5:
        return "just now"
    if seconds < 60:
        return f"{seconds} s ago"
    if seconds < 3600:
        return f"{seconds // 60} min ago"
    return f"{seconds // 3600} h ago"


class GroupTableModel(QAbstractTableModel):
    def __init__(self, parent=None, clock=time.time) -> None:
        super().__init__(parent)
        self.groups: list[GroupView] = []
        self._rows: dict[str, int] = {}
        # gid -> its members heard lately (presence: this peer hears those it shares a group with)
        self.online: dict[str, int] = {}
        self.clock = clock

    def update(self, views: list[GroupView]) -> None:
        for view in views:
            row = self._rows.get(view.gid)
            if row is None:
                row = len(self.groups)
                self.beginInsertRows(QModelIndex(), row, row)
                self.groups.append(view)
                self._rows[view.gid] = row
                self.endInsertRows()
            else:
                self.groups[row] = view
                self.dataChanged.emit(self.index(row, 0), self.index(row, len(COLUMNS) - 1))

    def refresh_times(self) -> None:
        if self.groups:
            self.dataChanged.emit(self.index(0, 3), self.index(len(self.groups) - 1, 3))

    def set_online(self, gid: str, count: int) -> None:
        row = self._rows.get(gid)
        if row is not None and self.online.get(gid) != count:
            self.online[gid] = count
            self.dataChanged.emit(self.index(row, 4), self.index(row, 4))

    def view_for(self, gid: str) -> GroupView | None:
        row = self._rows.get(gid)
        return self.groups[row] if row is not None else None

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.groups)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole):
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return COLUMNS[section]
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        view = self.groups[index.row()]
        column = index.column()
        if role == GidRole:
            return view.gid
        if role == Qt.ItemDataRole.DisplayRole:
            if column == 0:
                return view.desc
            if column == 1:
                return view.member_count
            if column == 2:
                if view.legacy:
                    return "old version"
                if not view.verified:
                    return "checking…"  # seen in zeroconf; its signed description has not arrived
                return "private" if view.private else "open"
            if column == 3:
                return ago(self.clock() - view.last_seen)
            if column == 4:
                online = self.online.get(view.gid)
                return "—" if online is None else f"{online} online" if online else "nobody online"
            if column == 5:
                return "joined" if view.joined else ""
        if role == Qt.ItemDataRole.DecorationRole and column == 2 and view.private:
            return icon("lock")
        if role == Qt.ItemDataRole.ToolTipRole and column == 4:
            return ("Members heard in the last 40 s. This peer hears the members of groups it is in: "
                    "for another group, only those it shares one with")
        if role == Qt.ItemDataRole.ToolTipRole:
            names = ", ".join(m.name for m in view.members) or "nobody we know of yet"
            creator = f"\ncreated by key {short_fingerprint(view.creator)}" if view.creator else ""
            return (f"{view.desc}\nid {view.gid}{creator}\nmembers: {names}\n"
                    f"seen via {', '.join(sorted(view.sources))}")
        if role == Qt.ItemDataRole.TextAlignmentRole and column == 1:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None


def _presence_of(gid: str, peer) -> dict[str, str]:
    return peer.presence_of(gid)


ALONE_TEXT = ("Nobody found on this network yet. Multicast may be blocked here: switches, Wi-Fi access "
              "points, VPNs and routers often drop it. Ask a member of a group for an invite and use "
              "File → Join from invite…, or add a peer by its address (the button below).")


class DiscoveryWindow(QWidget):
    """Lists discovered groups; Join joins the selected one."""

    join_requested = Signal(str)
    create_requested = Signal()
    join_by_id_requested = Signal()
    add_peer_requested = Signal()
    alone_changed = Signal(bool)  # nobody heard of, ALONE_AFTER seconds after start (or no longer)

    ALONE_AFTER = 10_000  # ms
    ALONE_CHECK = 5_000  # ms

    def __init__(self, backend: Backend, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.backend = backend
        self.setWindowTitle("M2MC — groups on this network")
        self.setWindowIcon(app_icon())
        self.resize(640, 360)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, self.close)  # a tool window closes as a dialog does
        self.model = GroupTableModel(self)
        self.table = QTableView()
        self.table.setObjectName("groupTable")
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.setShowGrid(False)
        self.table.setAlternatingRowColors(True)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in range(1, len(COLUMNS)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        # Enter on a row, as well as a double click (Qt's "activated"): the keyboard joins too.
        self.table.activated.connect(self._row_activated)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._update_buttons())
        self.model.dataChanged.connect(lambda *_: self._update_buttons())

        self.empty_label = QLabel("Looking for groups on this network… (none announced yet)")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.join_button = QPushButton(icon("join"), "Join…")
        self.join_button.setDefault(True)
        self.join_button.clicked.connect(self.join_selected)
        refresh = QPushButton(icon("discover"), "Ask again")
        refresh.setToolTip("Advertise: ask every peer on the network for the groups it knows")
        refresh.clicked.connect(lambda: self.backend.call(lambda peer: peer.advertise()))
        create = QPushButton(icon("create"), "Create group…")
        create.clicked.connect(self.create_requested)
        by_id = QPushButton("Join by id…")
        by_id.clicked.connect(self.join_by_id_requested)
        add_peer = QPushButton("Add peer by address…")
        add_peer.setToolTip("Ask another computer directly, by its address: where multicast does not flow")
        add_peer.clicked.connect(self.add_peer_requested)
        self.alone_label = QLabel(ALONE_TEXT)
        self.alone_label.setObjectName("aloneNotice")
        self.alone_label.setWordWrap(True)
        self.alone_label.hide()
        self.alone = False

        buttons = QHBoxLayout()
        buttons.addWidget(refresh)
        buttons.addWidget(by_id)
        buttons.addWidget(add_peer)
        buttons.addStretch(1)
        buttons.addWidget(create)
        buttons.addWidget(self.join_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.empty_label)
        layout.addWidget(self.alone_label)
        layout.addLayout(buttons)

        backend.peer_event.connect(self._on_event)
        self._ticker = QTimer(self, interval=5000)
        self._ticker.timeout.connect(self._tick)
        self._ticker.start()
        self.model.rowsInserted.connect(lambda *_: self._select_first_row())
        self._update_buttons()
        self._alone_timer = QTimer(self, interval=self.ALONE_CHECK)
        self._alone_timer.timeout.connect(self._check_alone)
        self._alone_start = QTimer(self, singleShot=True, interval=self.ALONE_AFTER)  # dies with the window
        self._alone_start.timeout.connect(self._start_alone_checks)
        self._alone_start.start()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.place_on_screen()
        self.count_active()

    def place_on_screen(self) -> None:
        """Move the window wholly onto its screen's free area (a window manager may place a new
        window partly off a small screen), shrinking it only if the screen is smaller than it."""
        screen = self.screen()
        if screen is None:
            return
        area = screen.availableGeometry()
        frame = self.frameGeometry()
        margins = frame.size() - self.geometry().size()  # the title bar and borders
        width = min(self.width(), area.width() - margins.width())
        height = min(self.height(), area.height() - margins.height())
        if (width, height) != (self.width(), self.height()):
            self.resize(width, height)
            frame = self.frameGeometry()
        placed = QRect(frame)
        placed.moveLeft(min(max(frame.left(), area.left()), area.right() - frame.width() + 1))
        placed.moveTop(min(max(frame.top(), area.top()), area.bottom() - frame.height() + 1))
        if placed.topLeft() != frame.topLeft():
            self.move(placed.topLeft())

    def _start_alone_checks(self) -> None:
        self._check_alone()
        self._alone_timer.start()

    def _check_alone(self) -> None:
        self.backend.call(lambda peer: peer.peers(), on_result=lambda rows: self.set_alone(not rows),
                          on_error=lambda _e: None)

    def set_alone(self, alone: bool) -> None:
        """Nobody heard of: say so in plain words, and what to do (or take it back)."""
        self.alone_label.setVisible(alone)
        self.empty_label.setVisible(self.model.rowCount() == 0 and not alone)
        if alone != self.alone:
            self.alone = alone
            self.alone_changed.emit(alone)

    def _on_event(self, event: Event) -> None:
        match event:
            case GroupsDiscovered(views):
                self.model.update(views)

    def _tick(self) -> None:
        """While shown, ask again: a joined group's "last seen" follows its talk, and who is active
        changes, which no announcement reports; hidden, only the "… ago" texts age."""
        if self.isVisible():
            self.load()
            self.count_active()
        else:
            self.model.refresh_times()

    def count_active(self) -> None:
        for view in list(self.model.groups):
            self.backend.call(partial(_presence_of, view.gid), on_result=partial(self._show_active, view.gid),
                              on_error=lambda _e: None)

    def _show_active(self, gid: str, statuses: dict[str, str]) -> None:
        self.model.set_online(gid, sum(1 for pid, status in statuses.items()
                                       if status == "online" and pid != self.backend.pid))

    def load(self) -> None:
        self.backend.call(lambda peer: peer.groups(), on_result=self.model.update)

    def selected_gid(self) -> str | None:
        rows = self.table.selectionModel().selectedRows()
        return rows[0].data(GidRole) if rows else None

    def select_gid(self, gid: str) -> bool:
        row = self.model._rows.get(gid)
        if row is None:
            return False
        self.table.selectRow(row)
        return True

    def _select_first_row(self) -> None:
        """With nothing chosen yet, the first group is: the row the keys act on is the one highlighted."""
        if not self.table.selectionModel().hasSelection() and self.model.rowCount():
            self.table.selectRow(0)
        self._update_buttons()

    def _row_activated(self, index: QModelIndex) -> None:
        self.table.selectRow(index.row())
        self.join_selected()

    def join_selected(self) -> None:
        gid = self.selected_gid()
        if gid is not None:
            self.join_requested.emit(gid)

    def _update_buttons(self) -> None:
        self.empty_label.setVisible(self.model.rowCount() == 0 and not self.alone)
        gid = self.selected_gid()
        view = self.model.view_for(gid) if gid else None
        self.join_button.setEnabled(view is not None and not view.joined and view.verified)
        # a dialog follows: what is verified of the group, its passphrase if private, then Join
        self.join_button.setText("Joined" if view is not None and view.joined else "Join…")
        self.join_button.setToolTip("" if view is None or view.joined else
                                    "Shows the group's signed description and its creator's key first"
                                    + ("; asks for its passphrase" if view.private else ""))
