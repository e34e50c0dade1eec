"""What the main window's reader has chosen, without Qt: the open group and selected message, what the
compose box answers or edits, how the conversation is filtered, a draft per group, which panes fold on
a narrow window, and what was on show when the window was closed.

The window and its controllers share these objects instead of reading each other's widgets, so the
rules they hold can be tested without a window (tests/ui/test_view_state.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Generic, Iterable, TypeVar

from ...middleware.types import ChatMessage, Mid, format_mid, parse_mid

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
    starting an edit forgets it.  With a thread open on its own, its root (``thread``)
    is where a message goes when nothing else was chosen: typed there, a message stays
    in view.  ``new_thread`` is the user's ✕ (or Ctrl+N) that overrides that default.
    """

    reply: Mid | None = None
    edit: Mid | None = None
    thread: Mid | None = None
    new_thread: bool = False

    def reply_to(self, mid: Mid) -> None:
        self.reply = mid
        self.new_thread = False

    def start_edit(self, mid: Mid) -> None:
        self.reply = None
        self.edit = mid

    def start_new_thread(self) -> None:
        self.reply = None
        self.edit = None
        self.new_thread = True

    def open_thread(self, root: Mid) -> None:
        """A target chosen in another thread would post out of view: the new root takes over."""
        self.thread = root
        self.reply = None
        self.new_thread = False

    def close_thread(self) -> None:
        """Back to all threads: a reply chosen in the thread goes with it (issue 45), as opening
        another thread forgets it; an edit in progress stays."""
        self.thread = None
        self.reply = None
        self.new_thread = False

    def sent(self, mid: Mid) -> None:
        """After ``mid`` was sent: in an open thread the next message answers it, so a follow-up
        continues the user's own line of the thread (Slack's thread pane); in the all-threads
        view the next one starts a thread unless Reply is chosen again."""
        self.reply = mid if self.thread is not None and not self.new_thread else None
        self.new_thread = False

    def reset(self) -> None:
        """Forget what was chosen (Esc): back to the default, the open thread's root or a new thread."""
        self.reply = None
        self.edit = None
        self.new_thread = False

    def clear(self) -> None:
        self.reset()
        self.thread = None

    @property
    def parent(self) -> Mid | None:
        """Where a message sent now goes: the chosen reply, else the open thread's root."""
        if self.edit is not None or self.new_thread:
            return None
        return self.reply if self.reply is not None else self.thread

    @property
    def active(self) -> bool:
        """Whether the user chose something that Esc would forget."""
        return self.reply is not None or self.edit is not None or self.new_thread


@dataclass(frozen=True)
class Draft:
    """Text typed in one group's compose box and not sent yet, and the message it answers."""

    text: str = ""
    reply: Mid | None = None

    @property
    def empty(self) -> bool:
        return not self.text and self.reply is None

    def encode(self) -> str:
        """The draft as one settings value (JSON: a mid is ``[pid, seqno]``)."""
        return json.dumps({"text": self.text, "reply": list(self.reply) if self.reply is not None else None})

    @classmethod
    def decode(cls, value: object) -> Draft:
        """The draft ``encode`` wrote; an unreadable value is no draft (a hand-edited settings file)."""
        try:
            data = json.loads(str(value))
            reply = data.get("reply")
            mid = (str(reply[0]), int(reply[1])) if reply is not None else None
            return cls(str(data.get("text", "")), mid)
        except (ValueError, TypeError, AttributeError, IndexError, KeyError):
            return cls()


class Drafts:
    """One draft per group, so that text half-typed in one group never follows the reader into another.

    ``store`` is where drafts outlive the process: a mapping-like settings object
    (QSettings in the app, a dict in tests) under ``draft/<gid>``.
    """

    def __init__(self, store: Any = None) -> None:
        self.store = store if store is not None else {}

    @staticmethod
    def key(gid: str) -> str:
        return f"draft/{gid}"

    def get(self, gid: str) -> Draft:
        value = self.store.value(self.key(gid), None) if hasattr(self.store, "value") else self.store.get(self.key(gid))
        return Draft.decode(value) if value else Draft()

    def put(self, gid: str, draft: Draft) -> None:
        key = self.key(gid)
        if draft.empty:
            if hasattr(self.store, "remove"):
                self.store.remove(key)
            else:
                self.store.pop(key, None)
        elif hasattr(self.store, "setValue"):
            self.store.setValue(key, draft.encode())
        else:
            self.store[key] = draft.encode()


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


class PaneFolds:
    """Which side panes fold away on their own as the window narrows, and which come back as it widens.

    ``limits`` maps a pane's name to the window width below which it folds.  A pane folded here comes
    back when the window is wide enough again; one the reader closed stays closed.  One the reader
    reopens on a narrow window stays open until the window shrinks below the width it was reopened at.
    """

    def __init__(self, limits: dict[str, int]) -> None:
        self.limits = dict(limits)
        self.folded: set[str] = set()
        self.reopened_at: dict[str, int] = {}

    def resized(self, width: int, shown: dict[str, bool]) -> dict[str, bool]:
        """The panes whose shown state must change at ``width``, given what is ``shown`` now."""
        changes: dict[str, bool] = {}
        for name, limit in self.limits.items():
            if width < limit:
                if shown[name] and width < self.reopened_at.get(name, limit):
                    self.folded.add(name)
                    self.reopened_at.pop(name, None)
                    changes[name] = False
            else:
                self.reopened_at.pop(name, None)
                if name in self.folded:
                    self.folded.discard(name)
                    changes[name] = True
        return changes

    def chosen(self, name: str, shown: bool, width: int) -> None:
        """The reader opened or closed ``name`` by hand (the View menu) at window ``width``."""
        self.folded.discard(name)
        self.reopened_at.pop(name, None)
        if shown and width < self.limits[name]:
            self.reopened_at[name] = width


@dataclass(frozen=True)
class OnShow:
    """What the window showed when it was closed, so that a restart opens it again (issue 45):
    ``kind`` "group" (``key`` its gid, ``thread`` the root of the open thread, if any) or "direct"
    (``key`` the other peer's pid).  Kept in the settings as one line (:meth:`text`)."""

    kind: str
    key: str
    thread: Mid | None = None

    def text(self) -> str:
        return " ".join([self.kind, self.key] + ([format_mid(self.thread)] if self.thread is not None else []))

    @classmethod
    def parse(cls, text: str | None) -> "OnShow | None":
        """The line :meth:`text` wrote; None for an empty, old or hand-broken one (the first group opens)."""
        parts = (text or "").split()
        if len(parts) not in (2, 3) or parts[0] not in ("group", "direct") or (parts[0] == "direct" and len(parts) == 3):
            return None
        try:
            thread = parse_mid(parts[2]) if len(parts) == 3 else None
        except ValueError:
            thread = None
        return cls(parts[0], parts[1], thread)
