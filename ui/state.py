"""What the main window's reader has chosen, without Qt: the open group and selected message, what the
compose box answers or edits, and how the conversation is filtered.

The window and its controllers share these objects instead of reading each other's widgets, so the
rules they hold can be tested without a window (tests/ui/test_view_state.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, Iterable, TypeVar

from ..middleware.types import ChatMessage, Mid

SessionT = TypeVar("SessionT")


class Selection(Generic[SessionT]):
    """The group shown (its session) and the message selected in it.

    ``message`` follows the current row of the view on show; opening another
    group forgets it.
    """

    def __init__(self) -> None:
        self.session: SessionT | None = None
        self.message: Mid | None = None

    def open(self, session: SessionT | None) -> None:
        if session is not self.session:
            self.message = None
        self.session = session

    def select(self, mid: Mid | None) -> None:
        self.message = mid

    def is_current(self, session: SessionT | None) -> bool:
        return session is not None and session is self.session


@dataclass
class ComposeTarget:
    """What the compose box answers (``reply``) or edits (``edit``, an own message).

    Selecting a message never changes it: only Reply or Quote sets ``reply``, and
    starting an edit forgets it.
    """

    reply: Mid | None = None
    edit: Mid | None = None

    def reply_to(self, mid: Mid) -> None:
        self.reply = mid

    def start_edit(self, mid: Mid) -> None:
        self.reply = None
        self.edit = mid

    def clear(self) -> None:
        self.reply = None
        self.edit = None

    @property
    def active(self) -> bool:
        return self.reply is not None or self.edit is not None


class ThreadFilter:
    """How the conversation is shown: tree or time order, and the filter's text.

    A message matches when the text is in its sender's name or its text, case aside;
    F3 walks the matches in view order and wraps around.
    """

    def __init__(self) -> None:
        self.time_ordered = False
        self.pattern = ""  # as typed, surrounding blanks removed

    def set_text(self, text: str) -> str:
        self.pattern = text.strip()
        return self.pattern

    @property
    def active(self) -> bool:
        return bool(self.pattern)

    @staticmethod
    def search_text(message: ChatMessage) -> str:
        """What the filter looks in (the views' SearchRole)."""
        return f"{message.sender_name}\n{message.text}"

    def matches(self, message: ChatMessage) -> bool:
        return bool(self.pattern) and self.pattern.lower() in self.search_text(message).lower()

    def matching(self, messages: Iterable[ChatMessage]) -> list[Mid]:
        """The mids of ``messages`` that match, in their order."""
        pattern = self.pattern.lower()
        if not pattern:
            return []
        return [m.mid for m in messages if pattern in self.search_text(m).lower()]

    @staticmethod
    def step(found: list[Mid], current: Mid | None, step: int) -> Mid:
        """The match ``step`` places from ``current`` (from the ends when it is not a match)."""
        position = found.index(current) if current in found else -1 if step > 0 else 0
        return found[(position + step) % len(found)]
