"""The widgets of direct messages: the "Direct messages" list beside the groups, and the conversation
pane (the peer's name, presence and key fingerprint above the same reply tree as a group's, and a
compose box), with each outgoing message's delivery mark.

An outgoing message carries its status at the right of its header line: ⏱ queued, ✓ sent, ✓✓
delivered, and ✓✓ in the accent colour once read; a message delivered after the causal hold
limit says "late".  A mark's words (:func:`ui.direct_api.status_text`) are its tooltip, and part of
the row's accessible text, so that a screen reader says what the colour shows.  What happens on a
click or a key is the direct controller's (:mod:`ui.controllers.direct`).
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, Qt
from PySide6.QtGui import QColor, QPainter, QPalette
from PySide6.QtWidgets import (QAbstractItemView, QLabel, QListWidget, QStyleOptionViewItem, QToolTip, QVBoxLayout, QWidget)

from ..middleware.types import Mid
from .delegate import MessageDelegate, clock
from .direct_api import LATE_TEXT, STATUS_MARKS, Marks, status_text
from .message_model import AnyIndex, MessageRole, MessageTreeModel
from .message_tree import MessageTree
from .resources import MUTED_ALPHA
from .widgets import ComposeBox, ConversationView, GroupListDelegate, title_label

PeerRole = Qt.ItemDataRole.UserRole + 21  # a Direct messages row: the peer's pid
ONLINE_MARK, OFFLINE_MARK = "●", "○"
QUEUED_FALLBACK = "◷"  # a clock face in the common fonts (DejaVu, Noto Sans Symbols)


def status_words(marks: Marks, mid: Mid, peer_name: str) -> str:
    """What a message's marks say in words ("" for none)."""
    words = []
    status = marks.status.get(mid)
    if status is not None:
        words.append(status_text(status, peer_name))
    if mid in marks.late:
        words.append(LATE_TEXT)
    return "; ".join(words)


class DirectTreeModel(MessageTreeModel):
    """A conversation's reply tree; a row's tooltip and accessible text include its delivery status."""

    def __init__(self, tree: MessageTree, marks: Marks, peer_name: Callable[[], str], parent=None) -> None:
        super().__init__(tree, parent)
        self.marks = marks
        self.peer_name = peer_name

    def data(self, index: AnyIndex, role: int = Qt.ItemDataRole.DisplayRole) -> object:
        if index.isValid() and role in (Qt.ItemDataRole.ToolTipRole, Qt.ItemDataRole.AccessibleTextRole):
            message = index.internalPointer().message
            words = status_words(self.marks, message.mid, self.peer_name())
            if role == Qt.ItemDataRole.ToolTipRole:
                return f"{message.sender_name}, {clock(message.shown_at)}" + (f"\n{words}" if words else "")
            return f"{message.sender_name}: {message.text}" + (f" ({words})" if words else "")
        return super().data(index, role)

    def status_changed(self, mid: Mid) -> None:
        index = self.index_for(mid)
        if index.isValid():
            self.dataChanged.emit(index, index)


class DirectMessageDelegate(MessageDelegate):
    """The group delegate, plus each outgoing message's delivery mark and a "late" note."""

    def __init__(self, view: QAbstractItemView) -> None:
        super().__init__(view, tree=True)
        self.marks = Marks()
        self.peer_name = ""

    def refresh_style(self) -> None:
        super().refresh_style()
        # ⏱ is in emoji fonts only; where none is installed it would be an empty box.
        self.status_marks = dict(STATUS_MARKS)
        if not self.body_metrics.inFontUcs4(ord(STATUS_MARKS["queued"])):
            self.status_marks["queued"] = QUEUED_FALLBACK

    def mark_rect(self, rect: QRect, index: AnyIndex) -> tuple[QRect, str] | None:
        """Where the marks of the row at ``rect`` go, and what they read; None if it has none."""
        message = index.data(MessageRole)
        if message is None:
            return None
        status = self.marks.status.get(message.mid)
        late = message.mid in self.marks.late
        if status is None and not late:
            return None
        label = " ".join(part for part in ("late" if late else "", self.status_marks.get(status or "", "")) if part)
        geometry = self._geometry(rect, index)
        header, reply = geometry["header"], geometry["reply"]
        width = self.header_metrics.horizontalAdvance(label) + 4
        return QRect(reply.left() - 6 - width, header.top(), width, header.height()), label

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        super().paint(painter, option, index)
        found = self.mark_rect(option.rect, index)
        if found is None:
            return
        rect, label = found
        message = index.data(MessageRole)
        painter.save()
        read = self.marks.status.get(message.mid) == "read"
        painter.setFont(self.header_font if read else self.body_font)
        painter.setPen(self.accent if read else self.muted)
        painter.drawText(rect, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, label)
        painter.restore()

    def helpEvent(self, event, view, option, index) -> bool:
        if event is not None and index.isValid():
            found = self.mark_rect(option.rect, index)
            if found is not None and found[0].contains(event.pos()):
                message = index.data(MessageRole)
                QToolTip.showText(event.globalPos(), status_words(self.marks, message.mid, self.peer_name), view)
                return True
        return super().helpEvent(event, view, option, index)


class DirectList(QListWidget):
    """The "Direct messages" section: one row per conversation, the peer's name with an online mark and
    a badge of unread messages (the groups' delegate draws it)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("directList")
        self.setItemDelegate(GroupListDelegate(self))
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setAccessibleName("Direct messages")

    EMPTY_HINT = ("No direct messages yet.\nTo write to someone, press Enter on them in the members list (or "
                  "double-click them), or right-click their name on a message and choose “Message …”.")

    def paintEvent(self, event) -> None:
        super().paintEvent(event)
        if self.count():
            return
        painter = QPainter(self.viewport())
        muted = QColor(self.palette().color(QPalette.ColorRole.Text))
        muted.setAlpha(MUTED_ALPHA)
        painter.setPen(muted)
        painter.drawText(self.viewport().rect().adjusted(10, 10, -10, -10),
                         int(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignHCenter | Qt.TextFlag.TextWordWrap),
                         self.EMPTY_HINT)
        painter.end()


class DirectPane(QWidget):
    """One conversation: header (name, presence, key fingerprint), reply tree, compose box."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("directPane")
        self.title_label = title_label("directTitle")
        self.fingerprint_label = QLabel()
        self.fingerprint_label.setObjectName("directFingerprint")
        self.fingerprint_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.fingerprint_label.setToolTip("The fingerprint of their key: read it to each other (by voice, in "
                                          "person) to be sure that nobody else is answering in their name")
        header = QVBoxLayout()
        header.setContentsMargins(8, 6, 8, 6)
        header.setSpacing(0)
        header.addWidget(self.title_label)
        header.addWidget(self.fingerprint_label)

        self.view = ConversationView(tree=True)
        self.view.setObjectName("directConversation")
        self.delegate = DirectMessageDelegate(self.view)
        self.view.setItemDelegate(self.delegate)
        self.view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.view.setAccessibleName("Direct conversation")  # what a screen reader calls it (test_accessibility)

        self.compose_box = ComposeBox("direct")
        self.compose, self.send_button = self.compose_box.compose, self.compose_box.send_button
        self.reply_banner, self.compose_error = self.compose_box.reply_banner, self.compose_box.compose_error
        self.compose.setPlaceholderText("Write to them — only they can read it. Enter sends, Shift+Enter adds a line")
        self.compose.setAccessibleName("Direct message")  # until a conversation is shown (ui.controllers.direct)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(header)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.compose_box)

    def show_heading(self, name: str, fingerprint: str, online: bool) -> None:
        self.title_label.setText(f"{ONLINE_MARK if online else OFFLINE_MARK} {name}")
        self.title_label.setToolTip(f"{name} is {'online' if online else 'offline'} (as heard by this peer)")
        self.title_label.setAccessibleName(f"Direct messages with {name}, {'online' if online else 'offline'}")
        self.fingerprint_label.setText(f"key fingerprint {fingerprint}")
        # A first message to someone away is the case that needs saying: it waits here, it is not lost.
        self.view.empty_hint = f"No messages with {name} yet: only the two of you can read what you write here." + (
            "" if online else f"\n\n{name} is offline: what you write waits here and goes when {name} is back.")
        self.view.viewport().update()
