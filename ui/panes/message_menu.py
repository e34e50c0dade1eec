"""A group message's context menu (Reply, Quote, copy, its thread, reactions, pin, edit and delete), and
the question a delete asks first."""

from __future__ import annotations

from functools import partial
from typing import Callable, Protocol

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMenu, QMessageBox, QWidget

from ...middleware.types import ChatMessage, Mid, format_mid
from ..delegate import snippet
from ..files_view import FilesView
from ..resources import icon

REACTION_CHOICES = ("👍", "❤", "😂", "🎉", "😮", "😢")  # the picker in the context menu


class MessageActions(Protocol):
    """What the menu's entries do (ui.controllers.compose.ComposeController)."""

    def reply_to(self, mid: Mid) -> None: ...
    def quote(self, message: ChatMessage) -> None: ...
    def toggle_reaction(self, mid: Mid, emoji: str) -> None: ...
    def set_pinned(self, mid: Mid, on: bool) -> None: ...
    def start_edit(self, mid: Mid) -> object: ...
    def delete_message(self, mid: Mid) -> None: ...


def message_link(message: ChatMessage) -> str:
    """A reference to a message that another member's app opens: m2mc://message/<gid>/<pid>:<seqno>."""
    return f"m2mc://message/{message.gid}/{format_mid(message.mid)}"


def message_menu(parent: QWidget, message: ChatMessage, own: str, composer: MessageActions, files: FilesView,
                 open_thread: Callable[[Mid], object], person_actions: Callable[[QMenu, str, str], object],
                 moderates: bool) -> QMenu:
    """``own``: this peer's pid; ``person_actions`` adds what can be done with the sender (a direct message);
    ``moderates``: this peer is an owner or admin of the group, who may remove others' messages."""
    menu = QMenu(parent)
    files.add_menu_actions(menu, message)  # a file offer's Download (or Open…) comes first
    menu.addAction(icon("reply"), "Reply", lambda: composer.reply_to(message.mid))
    menu.addAction("Quote", lambda: composer.quote(message))
    menu.addSeparator()
    menu.addAction("Copy text", lambda: QGuiApplication.clipboard().setText(message.text))
    menu.addAction("Copy link", lambda: QGuiApplication.clipboard().setText(message_link(message)))
    menu.addSeparator()
    menu.addAction("Open thread", lambda: open_thread(message.mid))
    person_actions(menu, message.sender, message.sender_name)
    menu.addSeparator()
    react = menu.addMenu("React")
    mine = {emoji for emoji, pids in (message.reactions or {}).items() if own in pids}
    for emoji in REACTION_CHOICES:
        action = react.addAction(emoji, partial(composer.toggle_reaction, message.mid, emoji))
        action.setCheckable(True)
        action.setChecked(emoji in mine)
    if message.pinned:
        menu.addAction("Unpin", lambda: composer.set_pinned(message.mid, False))
    else:
        menu.addAction("Pin", lambda: composer.set_pinned(message.mid, True))
    if message.sender == own and not message.deleted:
        menu.addAction("Edit", lambda: composer.start_edit(message.mid))
        menu.addSeparator()  # away from Edit: a slip of the pointer must not delete
        menu.addAction("Delete…", lambda: confirm_delete(parent, message, own, composer))
    elif not message.deleted and moderates:
        menu.addSeparator()
        menu.addAction("Remove for everyone…", lambda: confirm_delete(parent, message, own, composer))
    return menu


def confirm_delete(parent: QWidget, message: ChatMessage, own: str, composer: MessageActions) -> bool:
    """Ask before deleting: a delete reaches every member and cannot be taken back."""
    mine = message.sender == own
    whose = "your message" if mine else f"{message.sender_name}'s message"
    box = QMessageBox(QMessageBox.Icon.Question, "Delete message",
                      f"Delete {whose} “{snippet(message.text, 60)}” for everyone?", parent=parent)
    shown = "“message deleted”" if mine else "“removed by an admin” and your name"
    box.setInformativeText(f"Members will see {shown} in its place, and its replies stay. "
                           "This cannot be undone.")
    delete = box.addButton("Delete", QMessageBox.ButtonRole.DestructiveRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)  # Enter keeps the message
    box.exec()
    if box.clickedButton() is not delete:
        return False
    composer.delete_message(message.mid)
    return True
