"""Paints one chat message: sender, time, wrapped text, and a mark while it is unread.

Used by both views.  In the time-ordered view (``show_parent``) a reply also
shows a quoted line naming the message it answers, so the thread stays legible
without the tree.  Row heights depend on the text and the view's width; they
are cached per (message, width) because a tree of 100,000 rows asks often.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetrics, QPainter, QPalette
from PySide6.QtWidgets import QAbstractItemView, QStyle, QStyledItemDelegate, QStyleOptionViewItem

from middleware.types import ChatMessage

from .message_model import DepthRole, MessageRole, OwnRole, ParentMessageRole, UnreadRole
from .resources import is_dark, theme_colors

PAD = 6
MARK_WIDTH = 4
MAX_SHOWN_CHARS = 4000  # a view row, not a document: longer texts are cut with an ellipsis


def sender_color(pid: str, dark: bool) -> QColor:
    """A stable, readable colour per sender."""
    hue = int(hashlib.blake2b(pid.encode(), digest_size=2).hexdigest(), 16) % 360
    return QColor.fromHsl(hue, 150, 170 if dark else 85)


def snippet(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def clock(epoch_ms: int) -> str:
    moment = datetime.fromtimestamp(epoch_ms / 1000)
    if moment.date() == datetime.now().date():
        return moment.strftime("%H:%M")
    return moment.strftime("%d %b %H:%M")


class MessageDelegate(QStyledItemDelegate):
    def __init__(self, view: QAbstractItemView, show_parent: bool = False) -> None:
        super().__init__(view)
        self.view = view
        self.show_parent = show_parent
        self._heights: dict[tuple, int] = {}
        self.refresh_style()

    def refresh_style(self) -> None:
        """Re-read fonts and colours (after a palette change)."""
        font = self.view.font()
        self.body_font = QFont(font)
        self.header_font = QFont(font)
        self.header_font.setBold(True)
        self.meta_font = QFont(font)
        self.meta_font.setPointSizeF(max(6.0, font.pointSizeF() * 0.85))
        self.body_metrics = QFontMetrics(self.body_font)
        self.header_metrics = QFontMetrics(self.header_font)
        self.meta_metrics = QFontMetrics(self.meta_font)
        self.dark = is_dark(self.view.palette())
        colors = theme_colors(self.view.palette())
        self.unread_color = QColor(colors["unread"])
        self.accent = QColor(colors["accent"])
        self.muted = self.view.palette().color(QPalette.ColorRole.Text)
        self.muted.setAlpha(150)
        self._heights.clear()

    def _text_width(self, depth: int) -> int:
        indent = 0
        if hasattr(self.view, "indentation"):
            indent = self.view.indentation() * (max(depth, 0) + 1)
        return max(80, self.view.viewport().width() - indent - 2 * PAD - MARK_WIDTH - 4)

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        message: ChatMessage = index.data(MessageRole)
        if message is None:
            return super().sizeHint(option, index)
        width = self._text_width(index.data(DepthRole) or 0)
        key = (message.mid, width)
        height = self._heights.get(key)
        if height is None:
            text = message.text[:MAX_SHOWN_CHARS]
            body = self.body_metrics.boundingRect(QRect(0, 0, width, 100_000), Qt.TextFlag.TextWordWrap, text).height()
            height = PAD + self.header_metrics.height() + 2 + body + PAD
            if self.show_parent and message.parent is not None:
                height += self.meta_metrics.height() + 2
            if len(self._heights) > 200_000:
                self._heights.clear()
            self._heights[key] = height
        return QSize(width, height)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        message: ChatMessage = index.data(MessageRole)
        if message is None:
            return super().paint(painter, option, index)
        painter.save()
        style = option.widget.style() if option.widget else None
        # Selection and hover backgrounds come from the style; we draw the content.
        background = QStyleOptionViewItem(option)
        self.initStyleOption(background, index)
        background.text = ""
        if style is not None:
            style.drawControl(QStyle.ControlElement.CE_ItemViewItem, background, painter, option.widget)

        rect = option.rect
        unread = bool(index.data(UnreadRole))
        if unread:
            painter.fillRect(QRect(rect.left(), rect.top() + 2, MARK_WIDTH, rect.height() - 4), self.unread_color)
        left = rect.left() + MARK_WIDTH + PAD
        width = rect.right() - left - PAD
        y = rect.top() + PAD

        text_color = option.palette.color(QPalette.ColorRole.Text)
        if option.state & QStyle.StateFlag.State_Selected:
            text_color = option.palette.color(QPalette.ColorRole.HighlightedText) if style is None else text_color

        # header: sender · time · "new"
        painter.setFont(self.header_font)
        name = message.sender_name or message.sender[:8]
        if index.data(OwnRole):
            name += " (you)"
        painter.setPen(sender_color(message.sender, self.dark))
        name_width = self.header_metrics.horizontalAdvance(name)
        painter.drawText(QRect(left, y, width, self.header_metrics.height()), Qt.AlignmentFlag.AlignLeft, name)
        painter.setFont(self.meta_font)
        painter.setPen(self.muted)
        meta_x = left + name_width + 8
        meta = clock(message.sent_at)
        painter.drawText(QRect(meta_x, y, max(0, width - name_width - 8), self.header_metrics.height()),
                         Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, meta)
        if unread:
            painter.setPen(self.unread_color)
            bold_meta = QFont(self.meta_font)
            bold_meta.setBold(True)
            painter.setFont(bold_meta)
            new_x = meta_x + self.meta_metrics.horizontalAdvance(meta) + 8
            painter.drawText(QRect(new_x, y, max(0, rect.right() - new_x), self.header_metrics.height()),
                             Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter, "● new")
        y += self.header_metrics.height() + 2

        if self.show_parent and message.parent is not None:
            parent: ChatMessage | None = index.data(ParentMessageRole)
            quoted = (f"↳ replying to {parent.sender_name}: {snippet(parent.text)}" if parent is not None
                      else "↳ replying to a message not shown")
            painter.setFont(self.meta_font)
            painter.setPen(self.accent)
            painter.drawText(QRect(left, y, width, self.meta_metrics.height()), Qt.AlignmentFlag.AlignLeft,
                             self.meta_metrics.elidedText(quoted, Qt.TextElideMode.ElideRight, width))
            y += self.meta_metrics.height() + 2

        painter.setFont(self.body_font)
        painter.setPen(text_color)
        text = message.text[:MAX_SHOWN_CHARS]
        painter.drawText(QRect(left, y, width, rect.bottom() - y), Qt.TextFlag.TextWordWrap, text)
        painter.restore()
