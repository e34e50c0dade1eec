"""Notices in the conversation: "Ann changed the topic to …", "Bob pinned ↗ Cat: …", as rows among the messages.

A notice (:class:`~middleware.types.Notice`, from the middleware: the store's on open, live as they
come) becomes a :class:`NoticeRow`: a chat message in shape, with the operation's own id, author,
times and place in the delivery order, no parent, and the words that follow the author's name as
its text.  So the reply tree and the time-ordered list place it as they place a thread's first
message, in time order, and page and trim it with them; what makes it a notice is its type.  A
notice is not a message: never unread, never notified, no thread in the Threads pane, not
selectable (so never a reply target, and skipped by the keyboard), no menu; the delegate paints it
centred and muted, and its link (the pinned message) is followed with one click.

Qt-free, as :mod:`ui.message_tree` is.
"""

from __future__ import annotations

import heapq
from typing import Iterable, Sequence

from ..middleware.files import readable_text
from ..middleware.types import ChatMessage, Mid, Notice, format_mid


class NoticeRow(ChatMessage):
    """A notice, shaped as a message (see the module docstring); ``text`` follows the author's name."""

    __slots__ = ()


def is_notice(message: object) -> bool:
    return type(message) is NoticeRow


def message_url(gid: str, mid: Mid) -> str:
    """The m2mc://message link of ``mid`` (the form the conversation shows as "↗ Author: first words")."""
    return f"m2mc://message/{gid}/{format_mid(mid)}"


def notice_row(notice: Notice) -> NoticeRow:
    message = notice.message
    if notice.kind == "topic":
        text = f"changed the topic to “{notice.text}”" if notice.text else "cleared the topic"
        if notice.was:
            text += f" (it was “{notice.was}”)"
    else:
        verb = "pinned" if notice.kind == "pin" else "unpinned"
        text = f"{verb} {message_url(message.gid, notice.target)}" if notice.target is not None else verb
    return NoticeRow(message.gid, message.mid, None, message.sender_name, text, message.sent_at, message.received_at,
                     message.order)


def with_notices(messages: Sequence[ChatMessage], notices: Iterable[ChatMessage]) -> list[ChatMessage]:
    """A history (in delivery order) with the notice rows merged in at their places in that order."""
    rows = sorted(notices, key=lambda row: row.order)
    if not rows:
        return list(messages)
    return list(heapq.merge(messages, rows, key=lambda message: message.order))


def notice_sentence(row: ChatMessage, author: str, target: ChatMessage | None, names: dict[str, str]) -> str:
    """What a screen reader says of a notice row: who, what, and the pinned message's author and first words."""
    text = row.text
    if target is not None:
        url = message_url(row.gid, target.mid)
        words = " ".join(readable_text(target.text, names).split())
        shown = "a deleted message" if target.deleted else \
            f"{target.sender_name}'s message “{words[:60] + ('…' if len(words) > 60 else '')}”"
        text = text.replace(url, shown)
    return f"{author} {readable_text(text, names)}"


def pinned_target(row: ChatMessage) -> Mid | None:
    """The message a pin notice names (from its link), or None."""
    if not is_notice(row) or "m2mc://message/" not in row.text:
        return None
    pid, _, seqno = row.text.rsplit("/", 1)[-1].rpartition(":")
    return (pid, int(seqno)) if pid and seqno.isdigit() else None
