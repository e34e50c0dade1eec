"""The side panes beside the conversation: the threads of the group shown (newest news first), and its
members with their presence."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QAbstractItemModel, QModelIndex, Qt, Signal
from PySide6.QtWidgets import QAbstractItemView, QLabel, QListView, QListWidget

from ..member_list import presence_legend
from ..message_model import ThreadRole
from ..widgets import ThreadListDelegate
from .pane import TitledPane


class ThreadsPane(TitledPane):
    """``thread_chosen`` tells the mid of the root of the thread the reader chose."""

    thread_chosen = Signal(object)

    def __init__(self, link_title: Callable[[str], str | None]) -> None:
        thread_list = QListView()
        super().__init__("Threads", thread_list)
        self.thread_list = thread_list
        thread_list.setObjectName("threadList")
        thread_list.setAccessibleName("Threads")  # what a screen reader calls it (test_accessibility)
        delegate = ThreadListDelegate(thread_list)
        delegate.link_title = link_title
        thread_list.setItemDelegate(delegate)
        thread_list.setUniformItemSizes(True)
        thread_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        thread_list.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        thread_list.clicked.connect(self._chosen)
        thread_list.activated.connect(self._chosen)

    def show_threads(self, threads: QAbstractItemModel | None) -> None:
        """The thread list of the group shown (None: no group is)."""
        self.thread_list.setModel(threads)

    def _chosen(self, index: QModelIndex) -> None:
        summary = index.data(ThreadRole)
        if summary is not None:
            self.thread_chosen.emit(summary.root.mid)


class MembersPane(TitledPane):
    """Filled by the status controller (ui.controllers.status, ui.member_list)."""

    def __init__(self) -> None:
        member_list = QListWidget()
        legend = QLabel(presence_legend())
        super().__init__("Members", member_list, legend)
        self.member_list, self.presence_legend = member_list, legend
        member_list.setObjectName("memberList")
        member_list.setAccessibleName("Members")
        member_list.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        member_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        legend.setObjectName("presenceLegend")
        legend.setTextFormat(Qt.TextFormat.RichText)
        legend.setToolTip("As heard by this peer: online within 40 s, away after a missed "
                          "beacon, offline after 50 s or when the app closed")
