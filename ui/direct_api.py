"""What the GUI knows of direct messages (issue 29): the middleware's types and events for them, and
how a direct message is shown with the group views' models.

The types and events are the middleware's (:mod:`middleware.types`, :mod:`middleware.events`),
re-exported here so that the GUI's direct-message code names one module.

A conversation is shown by the same Qt-free :class:`~ui.message_tree.MessageTree` and models as a
group: each :class:`DirectMessage` becomes a :class:`~middleware.types.ChatMessage` whose ``gid``
names the conversation (:func:`conversation_key`), so replies form the same tree (S_b).  What a
chat message has no field for (the delivery status, whether it came late) the conversation keeps
beside it (:class:`Marks`).
"""

from __future__ import annotations

from ..middleware.events import DirectDelivered, DirectStatusChanged
from ..middleware.types import ChatMessage, ConversationView, DirectMessage, Mid

__all__ = ["ConversationView", "DirectDelivered", "DirectMessage", "DirectStatusChanged", "Marks",
           "as_chat_message", "conversation_key", "conversation_peer", "status_text"]

CONVERSATION_PREFIX = "direct:"

# What each status of an outgoing message looks like, and says to a screen reader or in a tooltip.
STATUS_MARKS = {"queued": "⏱", "sent": "✓", "delivered": "✓✓", "read": "✓✓"}
STATUS_TEXTS = {
    "queued": "queued: kept here until {name} is online",
    "sent": "sent, not yet acknowledged",
    "delivered": "delivered to {name}",
    "read": "read by {name}",
}
LATE_TEXT = ("late: it waited for an earlier message that never came, and is shown anyway; "
             "it may be out of order")


def conversation_key(peer: str) -> str:
    """The ``gid`` a conversation's messages carry in the group views' models."""
    return CONVERSATION_PREFIX + peer


def conversation_peer(conversation: str, own_pid: str) -> str | None:
    """The other party of a conversation as the middleware's search and exports name it
    (``dm:<pid>:<pid>``); None for a group's gid (no gid has a colon)."""
    pids = conversation.split(":")
    if len(pids) != 3 or pids[0] != "dm" or own_pid not in pids[1:]:
        return None
    return pids[1] if pids[2] == own_pid else pids[2]


def as_chat_message(message: DirectMessage) -> ChatMessage:
    """``message`` as the reply tree and the message delegate read it."""
    return ChatMessage(conversation_key(message.peer), message.mid, message.parent, message.sender_name,
                       message.text, message.sent_at, message.received_at, message.order)


def status_text(status: str, name: str) -> str:
    """The words for a status mark (tooltip, screen reader)."""
    return STATUS_TEXTS.get(status, status).format(name=name)


class Marks:
    """Per message of one conversation: the outgoing ones' status, and which came late."""

    def __init__(self) -> None:
        self.status: dict[Mid, str] = {}
        self.late: set[Mid] = set()

    def take(self, message: DirectMessage) -> None:
        if message.outgoing:
            self.status[message.mid] = message.status
        if message.late:
            self.late.add(message.mid)

    def set_status(self, mid: Mid, status: str) -> bool:
        """Whether ``mid``'s mark changed (the middleware's events come in the order it made them)."""
        if self.status.get(mid) == status:
            return False
        self.status[mid] = status
        return True
