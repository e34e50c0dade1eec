"""Search everywhere's result rows: each result's rich text (sender, time, the snippet with its matches
marked) painted wrapped to the list's width, and each row exactly as tall as its wrapped text, at any
width (:class:`ResultList` lays the rows out again when its width changes).  The text's spans of class
"time" and "match" take colours readable on the row's background, selected or not.

A widget per row (a QLabel) cannot do this: a tree takes the row's height from a size hint fixed when
the row is made, before the row's width is known, so rows were taller than their text or cut it off.
"""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QSize, Qt
from PySide6.QtGui import QAbstractTextDocumentLayout, QColor, QPainter, QPalette, QTextDocument
from PySide6.QtWidgets import QApplication, QStyle, QStyledItemDelegate, QStyleOptionViewItem, QTreeWidget

from .resources import theme_colors
from .widgets import relayout_on_new_width

ResultHtmlRole = Qt.ItemDataRole.UserRole + 2  # a result row's rich text (its DisplayRole holds it as plain text)
PAD_X = 4  # between the row's edges and its text
PAD_TOP = 3
PAD_BOTTOM = 5  # a little more below: the next sender's name stands apart
MIN_TEXT_WIDTH = 40
MAX_CACHED = 2_000  # laid-out heights kept (100 results at a few widths)
TIME_WEIGHT = 0.6  # the time's colour: this much of the text's, the rest the background's


class ResultDelegate(QStyledItemDelegate):
    """Paints the rows that hold :data:`ResultHtmlRole`; other rows (the conversations' headings) as usual."""

    def __init__(self, view: QTreeWidget) -> None:
        super().__init__(view)
        self.view = view
        self._heights: dict[tuple[str, int], int] = {}

    def text_width(self, index: QModelIndex | QPersistentModelIndex) -> int:
        """The width a result's text wraps at: the list's less the row's indentation and padding.  A tree
        asks for size hints without the row's width (``option.rect`` is -1 wide), so it is worked out here."""
        depth, parent = 0, index.parent()
        while parent.isValid():
            depth, parent = depth + 1, parent.parent()
        indent = self.view.indentation() * (depth + (1 if self.view.rootIsDecorated() else 0))
        return max(MIN_TEXT_WIDTH, self.view.viewport().width() - indent - 2 * PAD_X)

    def document(self, html: str, width: int, sheet: str = "") -> QTextDocument:
        document = QTextDocument()
        document.setDefaultStyleSheet(sheet)  # before the text: it is applied as the HTML is read
        document.setDefaultFont(self.view.font())
        document.setDocumentMargin(0)
        document.setHtml(html)
        document.setTextWidth(width)
        return document

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        html = index.data(ResultHtmlRole)
        if not isinstance(html, str):
            return super().sizeHint(option, index)
        width = self.text_width(index)
        key = (html, width)
        height = self._heights.get(key)
        if height is None:
            if len(self._heights) >= MAX_CACHED:
                self._heights.clear()
            height = self._heights[key] = round(self.document(html, width).size().height())
        return QSize(width + 2 * PAD_X, PAD_TOP + height + PAD_BOTTOM)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        html = index.data(ResultHtmlRole)
        if not isinstance(html, str):
            super().paint(painter, option, index)
            return
        item = QStyleOptionViewItem(option)
        self.initStyleOption(item, index)
        item.text = ""  # the style draws the row's background, selection and focus; the text is drawn here
        (item.widget.style() if item.widget is not None else QApplication.style()).drawControl(
            QStyle.ControlElement.CE_ItemViewItem, item, painter, item.widget)
        rect = option.rect.adjusted(PAD_X, PAD_TOP, -PAD_X, -PAD_BOTTOM)
        group = (QPalette.ColorGroup.Active if option.state & QStyle.StateFlag.State_Active
                 else QPalette.ColorGroup.Inactive)
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        text = option.palette.color(group, QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text)
        background = option.palette.color(group, QPalette.ColorRole.Highlight if selected else QPalette.ColorRole.Base)
        colors = theme_colors(option.palette)
        sheet = (f".time {{ color: {blend(text, background, TIME_WEIGHT).name()}; }} "
                 f".match {{ background-color: {colors['match']}; color: {colors['text']}; }}")
        document = self.document(html, max(MIN_TEXT_WIDTH, rect.width()), sheet)
        context = QAbstractTextDocumentLayout.PaintContext()
        context.palette.setColor(QPalette.ColorRole.Text, text)
        painter.save()
        painter.translate(rect.topLeft())
        painter.setClipRect(0, 0, rect.width(), rect.height())
        document.documentLayout().draw(painter, context)
        painter.restore()


class ResultList(QTreeWidget):
    """The results' tree: its rows are laid out again when its width changes, so that each row keeps to
    its text's height as the text wraps to more or fewer lines."""

    def __init__(self) -> None:
        super().__init__()
        self.setItemDelegate(ResultDelegate(self))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        relayout_on_new_width(self)


def blend(color: QColor, other: QColor, weight: float) -> QColor:
    """``weight`` of ``color`` and the rest of ``other``: a quieter colour that stays solid (rich text
    takes no alpha)."""
    def mix(a: float, b: float) -> float:
        return weight * a + (1 - weight) * b

    return QColor.fromRgbF(mix(color.redF(), other.redF()), mix(color.greenF(), other.greenF()),
                           mix(color.blueF(), other.blueF()))
