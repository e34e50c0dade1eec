"""@mentions in the app: the compose box's completer of members' names, and the Mentions window.

Typing ``@`` in the compose box opens a list of the group's members (a
QCompleter over a QStringListModel); Down and Up choose, Enter or Tab inserts
"@Name ", Esc closes it.  What is sent carries the pids of the members whose
"@Name" the text holds (the compose controller, with ``middleware.mentions``).
The Mentions window (Conversation → Mentions…) lists the messages that mention
this peer, newest first, across groups, from the middleware's ``mentions``
query; a click or Enter jumps to the message.
"""

from __future__ import annotations

import re
from typing import Callable

from PySide6.QtCore import QObject, QPoint, QStringListModel, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QCompleter, QDialog, QDialogButtonBox, QLabel, QListView, QListWidget, QListWidgetItem, QVBoxLayout, QWidget

from ..middleware.files import readable_text
from ..middleware.rules import MAX_NAME
from ..middleware.types import ChatMessage, Member, Mid
from .delegate import clock, snippet
from .widgets import ComposeEdit

# "@" at the start of the text or after a space, then what was typed of a name (names may hold spaces).
TYPED_MENTION = re.compile(r"(?:^|(?<=\s))@([^@\n]{0,%d})$" % MAX_NAME)
MentionRole = Qt.ItemDataRole.UserRole + 40
MENTION_KEYS = (("Name a member (then Down, Enter or Tab)", "@"),)  # for Help → Keyboard shortcuts
MENTIONS_LISTED = 200  # the Mentions window's newest


class MentionCompleter(QObject):
    """The ``@`` completer of one compose box: its members are set with each group shown."""

    def __init__(self, edit: ComposeEdit) -> None:
        super().__init__(edit)
        self.edit = edit
        self.model = QStringListModel(self)
        self.completer = QCompleter(self.model, self)
        self.completer.setWidget(edit)
        self.completer.setCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.completer.setCompletionMode(QCompleter.CompletionMode.PopupCompletion)
        self.completer.setFilterMode(Qt.MatchFlag.MatchStartsWith)
        self.completer.setWrapAround(False)  # Down on the last name stays there (Qt's wrap empties the choice)
        self.completer.activated.connect(self.insert)  # its (str) overload, the first declared
        self.popup = QListView()
        self.completer.setPopup(self.popup)
        edit.mention_popup = self.popup
        edit.typed.connect(self.update)

    def set_members(self, members: list[Member], own_pid: str) -> None:
        names = sorted({m.name for m in members if m.pid != own_pid}, key=str.casefold)
        if names != self.model.stringList():
            self.model.setStringList(names)

    def typed_prefix(self) -> tuple[int, str] | None:
        """(position of the "@", what follows it) when the cursor ends an "@name" being typed."""
        cursor = self.edit.textCursor()
        block = cursor.block()
        before = block.text()[:cursor.positionInBlock()]
        match = TYPED_MENTION.search(before)
        if match is None:
            return None
        typed = match.group(1)
        names = self.model.stringList()
        if " " in typed and not any(name.casefold().startswith(typed.casefold()) for name in names):
            return None  # past the end of any name: ordinary text again
        return block.position() + match.start(), typed

    def update(self) -> None:
        found = self.typed_prefix()
        popup = self.popup
        if found is None or not self.model.rowCount():
            popup.hide()
            return
        _at, typed = found
        self.completer.setCompletionPrefix(typed)
        if not self.completer.completionCount():
            popup.hide()
            return
        popup.setCurrentIndex(self.completer.completionModel().index(0, 0))
        rect = self.edit.cursorRect()  # in the viewport's coordinates; the completer places it in the box's
        rect.translate(self.edit.viewport().mapTo(self.edit, QPoint(0, 0)))
        rect.setWidth(max(160, popup.sizeHintForColumn(0) + popup.verticalScrollBar().sizeHint().width() + 16))
        self.completer.complete(rect)

    def insert(self, name: str) -> None:
        """Put "@name " in place of the "@" and what was typed after it."""
        found = self.typed_prefix()
        if found is None:
            return
        at, _typed = found
        cursor = self.edit.textCursor()
        cursor.setPosition(at, cursor.MoveMode.KeepAnchor)
        cursor.insertText(f"@{name} ")
        self.edit.setTextCursor(cursor)
        self.popup.hide()


class MentionsWindow(QDialog):
    """The messages that mention this peer, newest first; a click or Enter opens one in its group."""

    def __init__(self, parent: QWidget, jump: Callable[[str, Mid], None]) -> None:
        super().__init__(parent)
        self.setWindowTitle("Mentions")
        self.setObjectName("mentionsWindow")
        self.jump = jump
        self.list = QListWidget()
        self.list.setObjectName("mentionsList")
        self.list.setWordWrap(True)
        self.list.itemActivated.connect(self._open)
        self.list.itemClicked.connect(self._open)
        self.empty = QLabel("Nobody has mentioned you yet.")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.empty)
        layout.addWidget(self.list, 1)
        layout.addWidget(buttons)
        QShortcut(QKeySequence(QKeySequence.StandardKey.Close), self, self.reject)
        self.resize(520, 420)

    def show_mentions(self, messages: list[ChatMessage], groups: dict[str, str],
                      names: Callable[[str], dict[str, str]]) -> None:
        """``groups``: gid -> title; ``names(gid)``: that group's pid -> name, for the tokens."""
        self.list.clear()
        for message in messages:
            text = snippet(readable_text(message.text, names(message.gid)), 140)
            item = QListWidgetItem(f"{message.sender_name} in {groups.get(message.gid, message.gid)} · "
                                   f"{clock(message.shown_at)}\n{text}")
            item.setData(MentionRole, (message.gid, message.mid))
            self.list.addItem(item)
        self.empty.setVisible(not messages)
        if messages:
            self.list.setCurrentRow(0)

    def _open(self, item: QListWidgetItem) -> None:
        gid, mid = item.data(MentionRole)
        self.jump(gid, tuple(mid))
