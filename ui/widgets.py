"""Small widgets of the main window: compose box, reply and warning banners, conversation tree, group list badges."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QEvent, QModelIndex, QObject, QPersistentModelIndex, QPoint, QRect, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFocusEvent, QFont, QFontMetrics, QIcon, QImage, QKeyEvent, QPainter, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from ..middleware.names import shown
from ..middleware.types import ChatMessage, Mid

from .delegate import LinkTitle, MessageDelegate, clock, root_text
from .files_view import local_files
from .focus import field_takes_keys, topic_to_save
from .member_list import marked_name
from .message_model import MessageRole, ThreadRole, ThreadSummary
from .notices import is_notice
from .resources import MUTED_ALPHA, icon, theme_colors

UnreadCountRole = Qt.ItemDataRole.UserRole + 11
GroupIdRole = Qt.ItemDataRole.UserRole + 12


def relayout_on_new_width(view: QAbstractItemView) -> None:
    """Lay a view's rows out again once its width has changed: Qt keeps each row's height until told,
    and rows of wrapped text must follow their text's height at the new width."""
    width = view.viewport().width()
    if width != view.property("laid_out_width"):
        view.setProperty("laid_out_width", width)
        view.scheduleDelayedItemsLayout()


class ElidedLabel(QLabel):
    """A one-line label that ends its text with "…" when short of room, instead of widening its pane.

    A plain QLabel's minimum width is its whole text: a long group title held the window above 900 px
    and made the panes jump whenever the header gained a widget (issue 32).
    """

    def setText(self, text: str) -> None:
        super().setText(text)
        self.setToolTip(text)

    def minimumSizeHint(self) -> QSize:
        return QSize(self.fontMetrics().horizontalAdvance("M…") * 2, super().minimumSizeHint().height())

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        room = self.contentsRect()
        text = self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, room.width())
        self.style().drawItemText(painter, room, int(self.alignment()), self.palette(), self.isEnabled(), text,
                                  self.foregroundRole())


class TypingGoesTo(QObject):
    """An event filter for the side lists: a letter typed in one goes to ``target()`` (the compose box
    on show) instead of searching the list, which switched to whichever group began with it.  The
    arrows, Enter, Space and shortcuts stay the list's."""

    def __init__(self, target: Callable[[], QWidget | None], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.target = target

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt's name
        if event.type() != QEvent.Type.KeyPress or not isinstance(event, QKeyEvent):
            return False
        text = event.text()
        commands = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier | Qt.KeyboardModifier.MetaModifier
        if not text or not text.isprintable() or text.isspace() or event.modifiers() & commands:
            return False
        target = self.target()
        if target is None or not target.isEnabled() or not target.isVisible():
            return False
        target.setFocus(Qt.FocusReason.OtherFocusReason)
        QApplication.sendEvent(target, QKeyEvent(event.type(), event.key(), event.modifiers(), text,
                                                 event.isAutoRepeat(), event.count()))
        return True


class SharedField(QLineEdit):
    """A field whose Enter changes something for every member (the topic), kept by the focus model's
    rule 3 (ui.focus): it takes the keys only when clicked, tabbed into or chosen from a menu; given the
    focus any other way (a window activated, a widget hidden before it) it emits ``done`` at once, and
    the window hands the keys to the compose box.  Enter emits ``saved`` with a changed text only, then
    ``done``; leaving it without Enter puts back ``shown()``, what everyone sees."""

    saved = Signal(str)
    done = Signal()

    def __init__(self, shown: Callable[[], str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.shown = shown
        self.chosen = False  # the user clicked, tabbed into or chose this field, and has not left it

    def focusInEvent(self, event: QFocusEvent) -> None:  # noqa: N802 - Qt's name
        super().focusInEvent(event)
        self.chosen = field_takes_keys(event.reason().name, self.chosen)
        if not self.chosen:
            self.done.emit()

    def focusOutEvent(self, event: QFocusEvent) -> None:  # noqa: N802 - Qt's name
        super().focusOutEvent(event)
        # Another window or a menu coming up is not leaving the field: it is still being edited.
        if event.reason() not in (Qt.FocusReason.ActiveWindowFocusReason, Qt.FocusReason.PopupFocusReason):
            self.chosen = False
            self.undo_typing()

    def undo_typing(self) -> None:
        """Show what everyone sees again (Esc, or leaving without Enter)."""
        self.setText(self.shown())
        self.setCursorPosition(0)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt's name
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            text = topic_to_save(self.text(), self.shown(), self.chosen)
            event.accept()
            if text is not None:
                self.saved.emit(text)
            self.done.emit()
            return
        super().keyPressEvent(event)


COMPLETER_KEYS = (Qt.Key.Key_Return, Qt.Key.Key_Enter, Qt.Key.Key_Tab, Qt.Key.Key_Backtab, Qt.Key.Key_Escape)



def title_label(name: str) -> "ElidedLabel":
    """A conversation's title over its view: a fifth larger than the text, bold, cut with … when narrow."""
    label = ElidedLabel()
    label.setObjectName(name)
    font = label.font()
    font.setPointSizeF(font.pointSizeF() * 1.2)
    font.setBold(True)
    label.setFont(font)
    return label

class ComposeEdit(QPlainTextEdit):
    """Enter sends, Shift+Enter starts a new line, Up in an empty box edits our last message."""

    submitted = Signal()
    edit_last_requested = Signal()
    typed = Signal()  # after a key changed the text or moved the cursor (the @-completer follows it)
    files_given = Signal(list)  # paths of local files pasted or dropped here: attached, not typed (ui.files_view)
    image_given = Signal(QImage)  # a copied picture (a screenshot, an image copied in a browser): attached too

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("compose")
        self.setPlaceholderText("Write a message — Enter sends, Shift+Enter adds a line, @ names someone")
        self.setTabChangesFocus(True)
        self.mention_popup: QWidget | None = None  # the @-completer's list (ui.mentions)

    def event(self, event: QEvent) -> bool:
        # While the @-completer's list is open, Enter and Tab choose from it and Esc closes it:
        # left unaccepted, the completer does that (Tab would otherwise move the focus first).
        if (event.type() == QEvent.Type.KeyPress and self.mention_popup is not None and self.mention_popup.isVisible()
                and isinstance(event, QKeyEvent) and event.key() in COMPLETER_KEYS):
            event.ignore()
            return False
        return super().event(event)

    def canInsertFromMimeData(self, source) -> bool:  # noqa: N802 - Qt's name
        return bool(local_files(source)) or source.hasImage() or super().canInsertFromMimeData(source)

    def insertFromMimeData(self, source) -> None:  # noqa: N802 - Qt's name
        paths = local_files(source)
        if paths:
            self.files_given.emit(paths)
        elif source.hasImage() and isinstance(image := source.imageData(), QImage) and not image.isNull():
            self.image_given.emit(image)
        else:
            super().insertFromMimeData(source)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            if event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
            else:
                self.submitted.emit()
            event.accept()
            return
        if event.key() == Qt.Key.Key_Up and not event.modifiers() and not self.toPlainText():
            self.edit_last_requested.emit()
            event.accept()
            return
        super().keyPressEvent(event)
        self.typed.emit()

    def sizeHint(self) -> QSize:
        lines = 3
        return QSize(super().sizeHint().width(), self.fontMetrics().lineSpacing() * lines + 16)


class ReplyBanner(QFrame):
    """'Replying to <sender>: <snippet> ✕' above the compose box; hidden for a new thread."""

    cancelled = Signal()
    editing_changed = Signal(bool)  # the compose box now edits an own message (Save), or writes a new one (Send)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("replyBanner")
        self.editing = False
        self.label = ElidedLabel()  # a long name and snippet must not widen the centre past the window
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.icon_label = QLabel()
        self.icon_label.setPixmap(icon("reply").pixmap(16, 16))
        close = QToolButton()
        close.setText("✕")
        close.setToolTip("Start a new thread instead")
        close.setAutoRaise(True)
        close.clicked.connect(self.cancelled)
        self.close_button = close
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 2, 2, 2)
        layout.addWidget(self.icon_label)
        layout.addWidget(self.label, 1)
        layout.addWidget(close)
        self.hide()

    def _set_editing(self, on: bool) -> None:
        self.icon_label.setPixmap(icon("edit" if on else "reply").pixmap(16, 16))
        self.close_button.setToolTip("Cancel the edit (Esc)" if on else "Start a new thread instead")
        if on != self.editing:
            self.editing = on
            self.editing_changed.emit(on)

    def show_target(self, message: ChatMessage | None, in_thread: bool = False, known: bool = True) -> None:
        """``in_thread``: the target is the open thread's root, chosen by default, not by the user."""
        self._set_editing(False)
        if message is None and known:
            self.label.clear()
            self.hide()
            return
        if message is None:
            self.label.setText("Replying to a message not loaded yet")
        else:
            where = "Replying in the thread of" if in_thread else "Replying to"
            self.label.setText(f"{where} {message.sender_name}: {root_text(message, 80)}")
        self.show()

    def show_new_thread(self) -> None:
        """✕ in an open thread: the next message starts a thread of its own, out of this view."""
        self._set_editing(False)
        self.label.setText("New thread (it will not show in this thread; Esc replies here again)")
        self.show()

    def show_editing(self, message: ChatMessage) -> None:
        self._set_editing(True)
        self.label.setText(f"Editing your message: {root_text(message, 80)}")
        self.show()

    @property
    def text(self) -> str:
        return self.label.text() if self.isVisible() or self.label.text() else ""


class ComposeBox(QFrame):
    """The compose box, one widget for groups and direct conversations alike: what the message answers or
    edits (the reply banner), why the last one was not sent, the text, and Send (Save while editing),
    with an attach button where files can go."""

    def __init__(self, name: str = "", attach_button: QWidget | None = None, parent: QWidget | None = None) -> None:
        """``name``: the prefix of its parts' object names ("direct": directCompose, directSend)."""
        super().__init__(parent)
        self.setObjectName("composeFrame")
        self.reply_banner = ReplyBanner()
        self.compose = ComposeEdit()
        self.send_button = QPushButton(icon("send"), "Send")
        if name:
            self.compose.setObjectName(f"{name}Compose")
        self.send_button.setObjectName(f"{name}Send" if name else "sendButton")
        self.reply_banner.editing_changed.connect(self._show_send_or_save)
        self.compose_error = QLabel()
        self.compose_error.setObjectName("dialogError")
        self.compose_error.setWordWrap(True)
        self.compose_error.hide()
        self.attach_button = attach_button
        row = QHBoxLayout()
        row.addWidget(self.compose, 1)
        if attach_button is not None:
            row.addWidget(attach_button, 0, Qt.AlignmentFlag.AlignBottom)
        row.addWidget(self.send_button, 0, Qt.AlignmentFlag.AlignBottom)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 8)
        layout.addWidget(self.reply_banner)
        layout.addWidget(self.compose_error)
        layout.addLayout(row)

    def _show_send_or_save(self, editing: bool) -> None:
        self.send_button.setText("Save" if editing else "Send")
        self.send_button.setIcon(icon("edit" if editing else "send"))
        self.send_button.setToolTip("Save the edit (Enter)" if editing else "Send (Enter)")



class ActionBar(QFrame):
    """A bar above the conversation: a sentence, one button that acts on it, and ✕."""

    def __init__(self, name: str, action: str, close_tip: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(name)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.action_button = QPushButton(action)
        close = QToolButton()
        close.setText("✕")
        close.setToolTip(close_tip)
        close.setAutoRaise(True)
        self.close_button = close
        self.bar_layout = QHBoxLayout(self)
        self.bar_layout.setContentsMargins(8, 2, 2, 2)
        self.bar_layout.addWidget(self.label, 1)
        self.bar_layout.addWidget(self.action_button)
        self.bar_layout.addWidget(close)
        self.hide()


class CatchUpBar(ActionBar):
    """'1,234 unread messages were written before they reached you · Mark them read ✕': a big join
    (or a long absence) need not leave the reader with thousands of "new" to walk past."""

    mark_read = Signal()
    dismissed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("catchUpBar", "Mark them read", "Keep them unread", parent)
        self.read_button = self.action_button
        self.read_button.clicked.connect(self.mark_read)
        self.close_button.clicked.connect(self.dismissed)

    def show_count(self, count: int) -> None:
        if count <= 0:
            self.hide()
            return
        self.label.setText(f"{count:,} unread messages were written before they reached you "
                           "(history synced in when you joined or came back).")
        self.show()


class WarningBanner(ActionBar):
    """'⚠ <warning> · Show all (n) ✕' above the conversation: seen at once, yet never blocking.

    Coloured here rather than in m2mc.qss so that it carries the palette's warning
    colour wherever the stylesheet is missing; it follows light/dark switches.
    """

    dismissed = Signal()
    show_all = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("warningBanner", "", "Hide this warning (it stays in the warnings list)", parent)
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.all_button = self.action_button
        self.all_button.setFlat(True)
        self.all_button.setToolTip("Open the list of all warnings of this session")
        self.all_button.clicked.connect(self.show_all)
        self.close_button.clicked.connect(self._dismiss)
        self.bar_layout.setContentsMargins(8, 4, 2, 4)
        self._restyling = False
        self._restyle()

    def show_warning(self, text: str | None, total: int = 0) -> None:
        if not text:
            self.label.clear()
            self.hide()
            return
        self.label.setText(f"⚠  {text}")
        self.all_button.setText(f"Show all ({total})" if total > 1 else "Show all")
        self.show()

    @property
    def text(self) -> str:
        return self.label.text() if self.isVisible() else ""

    def _dismiss(self) -> None:
        self.show_warning(None)
        self.dismissed.emit()

    def _restyle(self) -> None:
        # Setting a style sheet can itself change the palette: the flag stops the echo.
        self._restyling = True
        try:
            self._apply_colors()
        finally:
            self._restyling = False

    def _apply_colors(self) -> None:
        colors = theme_colors(self.palette())
        warning = QColor(colors["warning"])
        soft = QColor(warning)
        soft.setAlpha(45)
        self.setStyleSheet(
            "QFrame#warningBanner { background: rgba(%d, %d, %d, %d); border-left: 3px solid %s; border-radius: 4px; }"
            % (soft.red(), soft.green(), soft.blue(), soft.alpha(), warning.name())
        )

    def changeEvent(self, event) -> None:
        super().changeEvent(event)
        if event.type() == event.Type.PaletteChange and not self._restyling:
            self._restyle()


class ConversationView(QTreeView):
    """A reply tree, one thread or the time-ordered list of a group.

    It scrolls by pixels (a message taller than the view can be read through),
    never sideways, and re-lays rows out when its width changes, since wrapped
    text changes height.  Its delegate does the indenting; clicks on what the
    delegate draws (the hover Reply button, expand arrows, "Show more",
    links) come out as signals.
    """

    reply_requested = Signal(object)  # mid
    link_activated = Signal(str)
    reaction_clicked = Signal(object, str)  # mid, emoji: toggle our own reaction
    file_clicked = Signal(str, object)  # action (ui.files_view), message: a button of a file offer's row
    message_entered = Signal(object)  # message: Enter on the selected row (a file offer: download, or its folder)

    def __init__(self, parent: QWidget | None = None, tree: bool = True) -> None:
        super().__init__(parent)
        self.setObjectName("conversation")
        self.setHeaderHidden(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setUniformRowHeights(False)
        self.setAnimated(False)
        self.setIndentation(0)  # the delegate indents, up to a fixed depth
        self.setRootIsDecorated(False)
        self.setItemsExpandable(tree)
        self.setWordWrap(True)
        self.setExpandsOnDoubleClick(tree)
        self.setVerticalScrollMode(QAbstractItemView.ScrollMode.ScrollPerPixel)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.verticalScrollBar().setSingleStep(24)
        self.setMouseTracking(True)
        self.viewport().setAttribute(Qt.WidgetAttribute.WA_Hover)
        self.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self._current_at_press = QPersistentModelIndex()
        self.empty_hint = ""  # drawn in the middle while the view has no rows (ui.main_window sets it)

    def visible_mids(self) -> list[Mid]:
        """The messages whose rows are on screen, top to bottom (what the reader can see: read)."""
        if self.model() is None:
            return []
        visible = []
        index = self.indexAt(QPoint(4, 2))
        height = self.viewport().height()
        while index.isValid() and self.visualRect(index).top() < height:
            visible.append(index.data(MessageRole).mid)
            index = self.indexBelow(index)
        return visible

    def paintEvent(self, event) -> None:
        super().paintEvent(event)
        model = self.model()
        if not self.empty_hint or (model is not None and model.rowCount() > 0):
            return
        painter = QPainter(self.viewport())
        muted = QColor(self.palette().color(QPalette.ColorRole.Text))
        muted.setAlpha(MUTED_ALPHA)
        painter.setPen(muted)
        painter.drawText(self.viewport().rect().adjusted(32, 32, -32, -32),
                         int(Qt.AlignmentFlag.AlignCenter | Qt.TextFlag.TextWordWrap), self.empty_hint)
        painter.end()

    def keyPressEvent(self, event) -> None:
        index = self.currentIndex()
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and not event.modifiers() and index.isValid():
            message = index.data(MessageRole)
            if message is not None and not is_notice(message):
                self.message_entered.emit(message)
                event.accept()
                return
        super().keyPressEvent(event)

    def mousePressEvent(self, event) -> None:
        # Whether the row was already selected before this click: a click meant to select a
        # message must not open a link that happens to lie under the pointer.
        self._current_at_press = QPersistentModelIndex(self.currentIndex())
        super().mousePressEvent(event)

    def _opens_links(self, index, event) -> bool:
        """A link opens from a message already selected, or at once with Ctrl held; a notice's (which
        cannot be selected) at once."""
        return (bool(event.modifiers() & Qt.KeyboardModifier.ControlModifier)
                or (self._current_at_press.isValid() and self._current_at_press == index)
                or is_notice(index.data(MessageRole)))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        relayout_on_new_width(self)

    def mouseReleaseEvent(self, event) -> None:
        pos = event.position().toPoint()
        index = self.indexAt(pos)
        delegate = self.itemDelegate()
        hit = (delegate.hit(index, self.visualRect(index), pos)
               if index.isValid() and isinstance(delegate, MessageDelegate) else None)
        if hit is not None and hit[0] == "link" and not self._opens_links(index, event):
            hit = None  # this click selects the message; the next one (or Ctrl+click) opens the link
        if hit is not None and event.button() == Qt.MouseButton.LeftButton:
            kind, payload = hit
            if kind == "toggle":
                self.setExpanded(payload, not self.isExpanded(payload))
            elif kind == "reply":
                self.reply_requested.emit(payload)
            elif kind == "more" and isinstance(delegate, MessageDelegate):
                delegate.toggle_expanded(payload)
            elif kind == "link":
                self.link_activated.emit(payload)
            elif kind == "react":
                self.reaction_clicked.emit(*payload)
            elif kind == "file":
                self.file_clicked.emit(*payload)
            event.accept()
            return
        super().mouseReleaseEvent(event)

    def mouseMoveEvent(self, event) -> None:
        super().mouseMoveEvent(event)
        pos = event.position().toPoint()
        index = self.indexAt(pos)
        delegate = self.itemDelegate()
        hit = (delegate.hit(index, self.visualRect(index), pos)
               if index.isValid() and isinstance(delegate, MessageDelegate) else None)
        # A link shows the hand only where a click opens it (see _opens_links).
        clickable = hit is not None and (hit[0] != "link" or index == self.currentIndex()
                                         or is_notice(index.data(MessageRole))
                                         or bool(event.modifiers() & Qt.KeyboardModifier.ControlModifier))
        self.viewport().setCursor(Qt.CursorShape.PointingHandCursor if clickable else Qt.CursorShape.ArrowCursor)


def selected_text(option: QStyleOptionViewItem) -> QColor:
    """The text colour of a side list's row: the selection's text colour on a selected row (the stylesheet
    and :func:`ui.resources.apply_theme` make both the palette's and the stylesheet's selection the same
    pair, 4.5:1 or more), else the palette's text colour."""
    group = (QPalette.ColorGroup.Active if option.state & QStyle.StateFlag.State_Active
             else QPalette.ColorGroup.Inactive)
    role = (QPalette.ColorRole.HighlightedText if option.state & QStyle.StateFlag.State_Selected
            else QPalette.ColorRole.Text)
    return option.palette.color(group, role)


class ThreadListDelegate(QStyledItemDelegate):
    """A line of the threads list: root's sender and snippet, replies, participants, last activity, unread."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.names: dict[str, str] = {}  # pid -> the member record's name
        self.lookalikes: set[str] = set()  # members whose names look like another's: ⚠ and fingerprint
        self.link_title: LinkTitle | None = None  # message links read as in the conversation; the window sets it

    def snippet(self, summary: ThreadSummary) -> str:
        """The thread's first words, as the conversation shows them (mentions and message links named)."""
        return root_text(summary.root, 200, self.names, self.link_title)

    def author(self, summary: ThreadSummary) -> str:
        """Who started the thread, as the conversation names them (``MessageDelegate.author``)."""
        root = summary.root
        return marked_name(self.names.get(root.sender) or root.sender_name, root.sender, self.lookalikes)

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        return QSize(200, option.fontMetrics.height() * 3 + 14)

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        summary = index.data(ThreadRole)
        if summary is None:
            return super().paint(painter, option, index)
        widget = option.widget
        background = QStyleOptionViewItem(option)
        self.initStyleOption(background, index)
        background.text = ""
        widget.style().drawControl(QStyle.ControlElement.CE_ItemViewItem, background, painter, widget)
        painter.save()
        colors = theme_colors(option.palette)
        metrics = option.fontMetrics
        rect = option.rect.adjusted(8, 5, -8, -5)
        line = metrics.height()
        bold = QFont(option.font)
        bold.setBold(True)
        text_color = selected_text(option)
        muted = QColor(text_color)
        muted.setAlpha(MUTED_ALPHA)
        badge = ""
        if summary.unread:
            badge = str(summary.unread) if summary.unread < 1000 else "999+"
        badge_width = metrics.horizontalAdvance(badge) + 14 if badge else 0
        when = clock(summary.last.shown_at)
        when_width = metrics.horizontalAdvance(when) + 6
        painter.setFont(bold)
        painter.setPen(text_color)
        first = QRect(rect.left(), rect.top(), rect.width() - when_width, line)
        painter.drawText(first, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         QFontMetrics(bold).elidedText(self.author(summary), Qt.TextElideMode.ElideRight,
                                                       first.width()))
        painter.setFont(option.font)
        painter.setPen(muted)
        painter.drawText(QRect(rect.right() - when_width, rect.top(), when_width, line),
                         Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, when)
        font = QFont(option.font)
        font.setBold(bool(summary.unread))
        font.setItalic(summary.root.deleted)  # as the conversation shows a deleted message
        painter.setFont(font)
        painter.setPen(muted if summary.root.deleted else text_color)
        second = QRect(rect.left(), rect.top() + line + 2, rect.width() - badge_width - 4, line)
        painter.drawText(second, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         QFontMetrics(font).elidedText(self.snippet(summary), Qt.TextElideMode.ElideRight,
                                                       second.width()))
        painter.setFont(option.font)
        painter.setPen(muted)
        replies = f"{summary.replies} repl{'ies' if summary.replies != 1 else 'y'}"
        people = ", ".join(shown(name) for name in summary.participants[:4]) + (f" +{len(summary.participants) - 4}"
                                                         if len(summary.participants) > 4 else "")
        third = QRect(rect.left(), rect.top() + 2 * line + 4, rect.width(), line)
        painter.drawText(third, Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                         metrics.elidedText(f"{replies} · {people}", Qt.TextElideMode.ElideRight, third.width()))
        if badge:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            height = line + 2
            badge_rect = QRect(rect.right() - badge_width, second.center().y() - height // 2, badge_width, height)
            painter.setBrush(QColor(colors["unread"]))
            painter.setPen(Qt.PenStyle.NoPen)
            painter.drawRoundedRect(badge_rect, height / 2, height / 2)
            painter.setFont(bold)
            painter.setPen(QColor(colors["unread_text"]))
            painter.drawText(badge_rect, Qt.AlignmentFlag.AlignCenter, badge)
        painter.restore()


class GroupListDelegate(QStyledItemDelegate):
    """A joined group: its description, and a badge with the unread count."""

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        size = super().sizeHint(option, index)
        return QSize(size.width(), max(size.height(), option.fontMetrics.height() + 14))

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        unread = index.data(UnreadCountRole) or 0
        widget = option.widget
        style = widget.style()
        background = QStyleOptionViewItem(option)
        self.initStyleOption(background, index)
        background.text = ""
        background.icon = QIcon()
        background.state &= ~QStyle.StateFlag.State_HasFocus
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, background, painter, widget)
        metrics = option.fontMetrics
        badge = str(unread) if unread < 1000 else "999+"
        badge_width = metrics.horizontalAdvance(badge) + 14 if unread else 0
        rect = option.rect.adjusted(8, 0, -8, 0)
        painter.save()
        icon_size = 20
        decoration = index.data(Qt.ItemDataRole.DecorationRole)
        if isinstance(decoration, QIcon):
            decoration.paint(painter, QRect(rect.left(), rect.center().y() - icon_size // 2, icon_size, icon_size))
        text_rect = QRect(rect.left() + icon_size + 8, rect.top(), rect.width() - icon_size - 8 - badge_width - 6,
                          rect.height())
        font = QFont(option.font)
        font.setBold(bool(unread))
        painter.setFont(font)
        painter.setPen(selected_text(option))
        text = QFontMetrics(font).elidedText(index.data(Qt.ItemDataRole.DisplayRole) or "", Qt.TextElideMode.ElideRight,
                                             text_rect.width())
        painter.drawText(text_rect, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, text)
        if unread:
            painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            height = metrics.height() + 2
            badge_rect = QRect(rect.right() - badge_width, rect.center().y() - height // 2, badge_width, height)
            colors = theme_colors(option.palette)
            painter.setBrush(QColor(colors["unread"]))
            painter.setPen(Qt.PenStyle.NoPen)
            painter.drawRoundedRect(badge_rect, height / 2, height / 2)
            font.setBold(True)
            painter.setFont(font)
            painter.setPen(QColor(colors["unread_text"]))
            painter.drawText(badge_rect, Qt.AlignmentFlag.AlignCenter, badge)
        painter.restore()
