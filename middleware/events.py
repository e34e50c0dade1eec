"""What the middleware reports to its application, as values (as aioquic's and h11's events are).

Every report is one of the frozen, slotted dataclasses below, named in the
past tense; :data:`Event` is their union, and a :data:`Listener` is any
callable taking one.  :meth:`middleware.peer_core.PeerCore.events` drains them,
the asyncio adapter hands each to its listener, and each application turns
them into what it shows with one ``match``: ``app/peer.py`` into JSON-RPC
notifications, ``ui/bridge.py`` into one Qt signal that the GUI's controllers
match on (``ui/memory_backend.py`` runs a GroupManager too, on a LAN in memory).  A new event is one
dataclass here, added to :data:`Event`, plus the ``match`` arms that care about
it: an application ignores the events it has no arm for.

When an event is told is the crash-order invariant, stated once, in
:mod:`middleware.peer_core`: persist, then transmit, then notify.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .types import ChatMessage, DirectMessage, GroupView, Member, Mid, Notice


@dataclass(frozen=True, slots=True)
class MessagesDelivered:
    """New chat messages of a group, in this peer's delivery order (operations never show as messages)."""

    gid: str
    messages: list[ChatMessage]


@dataclass(frozen=True, slots=True)
class MessagesUpdated:
    """Delivered messages that operations changed (edited, deleted, reacted to, pinned), as they are now."""

    gid: str
    messages: list[ChatMessage]


@dataclass(frozen=True, slots=True)
class GroupsDiscovered:
    """Groups learnt of, or whose view changed (members, description, sources)."""

    groups: list[GroupView]


@dataclass(frozen=True, slots=True)
class GroupCreated:
    """This peer created the group (its view follows as :class:`GroupsDiscovered`)."""

    gid: str


@dataclass(frozen=True, slots=True)
class MemberJoined:
    gid: str
    member: Member


@dataclass(frozen=True, slots=True)
class MemberLeft:
    gid: str
    member: Member


@dataclass(frozen=True, slots=True)
class SyncProgress:
    """MSP catch-up of a group: ``received`` of the ``expected`` messages so far."""

    gid: str
    received: int
    expected: int


@dataclass(frozen=True, slots=True)
class WarningRaised:
    """Something the user should know of (two messages under one id, a join nobody acknowledged,
    messages not sent because the disk is full)."""

    gid: str
    text: str


@dataclass(frozen=True, slots=True)
class FileProgress:
    """A file of a group (offered by message ``mid``) at this peer: its ``state`` ("waiting",
    "fetching", "verifying", "done", "failed", "cancelled") and the ``bytes`` of its ``size`` held.
    Told at most four times a second per file, and at every change of state."""

    gid: str
    mid: str
    state: str
    bytes: int
    size: int


@dataclass(frozen=True, slots=True)
class TopicChanged:
    """The group's topic is now ``topic``, set by member ``by`` (a pid)."""

    gid: str
    topic: str
    by: str


@dataclass(frozen=True, slots=True)
class NoticesAdded:
    """Operations of a group that changed its topic or its pins, in this peer's delivery order
    (after the messages they act on): what a conversation may show as notices."""

    gid: str
    notices: list[Notice]


@dataclass(frozen=True, slots=True)
class DirectDelivered:
    """New direct messages of the conversation with ``peer``, in its delivery order (own sends included)."""

    peer: str
    messages: list[DirectMessage]


@dataclass(frozen=True, slots=True)
class DirectStatusChanged:
    """A direct message's status is now ``status`` ("sent", "delivered" or "read")."""

    peer: str
    mid: Mid
    status: str


@dataclass(frozen=True, slots=True)
class NetworkChanged:
    """Whether this peer is on the network (:mod:`middleware.roaming`): ``state`` is "connected",
    "reconnecting" (moving to ``address`` on ``interface``) or "offline", and ``reason`` says why
    (empty when connected)."""

    state: str
    interface: str
    address: str
    reason: str


@dataclass(frozen=True, slots=True)
class RoleChanged:
    """The owner made ``pid`` an admin (``role`` "admin") or took that back ("member")."""

    gid: str
    pid: str
    name: str
    role: str
    by: str  # the author's pid
    by_name: str


@dataclass(frozen=True, slots=True)
class MemberRemoved:
    """An owner or admin removed ``pid`` from the group (another member than this peer)."""

    gid: str
    pid: str
    name: str
    by: str
    by_name: str


@dataclass(frozen=True, slots=True)
class RemovedFromGroup:
    """An owner or admin removed this peer from the group: its history stays, nothing more arrives."""

    gid: str
    desc: str
    by: str
    by_name: str


Event = (MessagesDelivered | MessagesUpdated | GroupsDiscovered | GroupCreated | MemberJoined | MemberLeft
         | SyncProgress | WarningRaised | TopicChanged | NoticesAdded | DirectDelivered | DirectStatusChanged
         | FileProgress | NetworkChanged | RoleChanged | MemberRemoved | RemovedFromGroup)

Listener = Callable[[Event], None]
"""Called on the middleware's event-loop thread, once per event, in the order they happened."""


def ignore(event: Event) -> None:
    """The listener of a peer nobody listens to."""
