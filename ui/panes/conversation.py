"""The conversation pane's parts: the header above a group's conversation (its title and topic, its pinned
messages, older ones to show, the filter and the tree / time-order switch), the bar of a thread open on its
own, and the first steps shown while there is no group."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (QFrame, QHBoxLayout, QLabel, QLineEdit, QMenu, QPushButton, QToolButton, QVBoxLayout,
                               QWidget)

from ..resources import icon
from ..widgets import SharedField, title_label


class ConversationHeader(QWidget):
    """``shown_topic()``: the topic everyone sees, which the topic field puts back when left unsaved."""

    def __init__(self, shown_topic: Callable[[], str]) -> None:
        super().__init__()
        self.title_label = title_label("conversationTitle")
        self.filter_edit = QLineEdit()
        self.filter_edit.setObjectName("filter")
        self.filter_edit.setPlaceholderText("Filter (Ctrl+F)")
        self.filter_edit.setClearButtonEnabled(True)
        self.filter_edit.addAction(icon("search"), QLineEdit.ActionPosition.LeadingPosition)
        self.filter_edit.setMaximumWidth(260)
        self.match_label = QLabel()
        self.match_label.setObjectName("matchCount")
        self.match_label.hide()
        self.tree_button = QToolButton()
        self.tree_button.setIcon(icon("tree"))
        self.tree_button.setCheckable(True)
        self.tree_button.setChecked(True)
        self.tree_button.setToolTip("Reply tree (Ctrl+T toggles)")
        self.time_button = QToolButton()
        self.time_button.setIcon(icon("timeline"))
        self.time_button.setCheckable(True)
        self.time_button.setToolTip("Time order: each reply shows what it answers (Ctrl+T toggles)")
        # Out of the Tab chain, and it takes the keys only when clicked or chosen from the menu
        # (ui.focus, rule 3): a stray Enter or letter there would change the topic for everyone.
        self.topic_edit = SharedField(shown_topic)
        self.topic_edit.setObjectName("topicEdit")
        self.topic_edit.setPlaceholderText("Add a topic for everyone…")
        self.topic_edit.setFrame(False)
        self.topic_edit.setMaxLength(300)
        self.topic_edit.setFocusPolicy(Qt.FocusPolicy.ClickFocus)
        self.topic_edit.setToolTip("The group's topic: any member may change it (Enter saves, Esc undoes)")
        self.topic_edit.setAccessibleName("Topic")
        self.pinned_button = QToolButton()
        self.pinned_button.setObjectName("pinnedButton")
        self.pinned_button.setAutoRaise(True)
        self.pinned_button.setToolTip("Pinned messages")
        self.pinned_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.pinned_menu = QMenu(self.pinned_button)
        self.pinned_button.setMenu(self.pinned_menu)
        self.pinned_button.hide()
        self.older_button = QPushButton()
        self.older_button.setFlat(True)
        self.older_button.setToolTip("Big groups open with their newest threads; show older ones too")
        self.older_button.hide()
        title_box = QVBoxLayout()
        title_box.setSpacing(0)
        title_box.addWidget(self.title_label)
        title_box.addWidget(self.topic_edit)
        header = QHBoxLayout(self)
        header.setContentsMargins(8, 6, 8, 6)
        header.addLayout(title_box, 1)
        header.addWidget(self.pinned_button)
        header.addWidget(self.older_button)
        header.addWidget(self.filter_edit)
        header.addWidget(self.match_label)
        header.addWidget(self.tree_button)
        header.addWidget(self.time_button)

    def show_topic(self, topic: str) -> None:
        """``topic`` in the field, unless the reader is typing another there."""
        if not self.topic_edit.hasFocus() or self.topic_edit.text() == topic:
            self.topic_edit.setText(topic)
            self.topic_edit.setCursorPosition(0)

    def show_pinned(self, count: int) -> None:
        self.pinned_button.setText(f"Pinned ({count})")
        self.pinned_button.setVisible(count > 0)

    def show_older(self, hidden: int, what: str, stored: bool) -> None:
        """``hidden`` rows (``what``: threads or messages) kept out of view, and whether the store holds older."""
        self.older_button.setText(f"⤒ {hidden:,} older {what}" if hidden else "⤒ Older messages")
        self.older_button.setVisible(hidden > 0 or stored)

    def show_match_count(self, pattern: str, count: int) -> None:
        if not pattern:
            self.match_label.hide()
            return
        self.match_label.setText(f"{count} match{'es' if count != 1 else ''}" if count else "no matches")
        self.match_label.show()

    def show_time_ordered(self, on: bool) -> None:
        self.tree_button.setChecked(not on)
        self.time_button.setChecked(on)

    def clear_filter(self, quietly: bool = False) -> None:
        """Empty the filter; ``quietly``: without telling (a group opened anew)."""
        self.filter_edit.blockSignals(quietly)
        self.filter_edit.clear()
        self.filter_edit.blockSignals(False)


class ThreadBar(QFrame):
    """Shown while one thread is open on its own: what it is, and the way back to all threads."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("threadBar")
        self.back_button = QPushButton("← All threads")
        self.back_button.setFlat(True)
        self.back_button.setToolTip("Back to the whole conversation (Alt+Left)")
        self.thread_label = QLabel()
        self.thread_label.setTextFormat(Qt.TextFormat.PlainText)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 2, 8, 2)
        layout.addWidget(self.back_button)
        layout.addWidget(self.thread_label, 1)
        self.hide()


class FirstSteps(QWidget):
    """What the conversation shows with no group: how to start, with a button for each way."""

    def __init__(self, steps: list[tuple[str, str, Callable[[], object]]]) -> None:
        """``steps``: (text, icon name, what it does) of each button."""
        super().__init__()
        self.empty_label = QLabel("Join a group (Find groups…) or create one to start talking.")
        self.empty_label.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty_label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        layout.addWidget(self.empty_label)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.buttons: list[QPushButton] = []
        for text, icon_name, slot in steps:
            button = QPushButton(icon(icon_name), text)
            button.clicked.connect(slot)
            button.setAutoDefault(True)  # Enter presses the button with the keys, as Space does
            buttons.addWidget(button)
            self.buttons.append(button)
        buttons.addStretch(1)
        layout.addLayout(buttons)
        layout.addStretch(1)
