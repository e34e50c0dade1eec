"""Operations as chat messages: their text encoding, and one group's operations beside its messages.

An operation travels as a chat message of its author, so it is signed,
batched, repaired, synced (MSP) and stored exactly as messages are.  Its
``parent`` is the message it acts on (None for a topic setting), so S_b
already delivers it after that message; :class:`middleware.obg.ObgCore` then
orders it against the other operations on its object.  Its text is
its payload is a JSON array (its body, the text signed and sent, is that payload
behind the operation kind's tag, :mod:`middleware.kinds`)::

    [kind, seen, counter, text, emoji, on]

``kind`` is ``edit``, ``delete``, ``react``, ``pin`` or ``topic``; ``seen`` the
operation on the same object its author had delivered last (``"pid:seqno"``
or null); ``counter`` its Lamport counter, 1 .. 2**53 - 1 (``obg.MAX_COUNTER``).
A message of another kind is a chat message (or a file offer...), so the old
format reads unchanged.

Sans-I/O: :class:`GroupOperations` takes delivered messages and returns what
changed; the caller sends, stores and notifies.  It also keeps the group's latest
notices (:class:`~middleware.types.Notice`): each topic setting and pin or unpin
that changed what members see here, in delivery order, so that an app can show
them among the messages.  An operation that lost a race (a concurrent one of
higher rank had already won) changed nothing, and leaves no notice.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable, Iterable

from . import kinds
from .obg import MAX_REACTION_EMOJI, ObgCore, ObgError, Operation, Rank, is_reaction_emoji
from .types import ChatMessage, Mid, Notice, UsageError, format_mid, parse_mid

MAX_EDIT_TEXT = 7_800
"""An edit's text: the message limit less room for the operation's own fields."""
MAX_TOPIC = 300
MAX_EMOJI = 16
"""A reaction's characters on the wire; the longest emoji of Unicode's data (a ZWJ sequence) has 10."""
MAX_NOTICES = 1_000
"""Notices kept per group, the newest: a member pinning and unpinning in a loop cannot grow them."""


def encode(kind: str, seen: Mid | None, counter: int, text: str = "", emoji: str = "", on: bool = True) -> str:
    """An operation's body: the text of the chat message that carries it."""
    fields = [kind, format_mid(seen) if seen else None, counter, text, emoji, on]
    return kinds.body(kinds.OPERATION, json.dumps(fields, ensure_ascii=False, separators=(",", ":")))


def is_operation(message: ChatMessage) -> bool:
    return kinds.kind_of(message.text) == kinds.OPERATION


def decode(message: ChatMessage) -> Operation:
    """The operation a message carries; ObgError if its text is not a well-formed one."""
    kind, payload = kinds.split(message.text)
    if kind != kinds.OPERATION:
        raise ObgError("not an operation")
    kind, seen, counter, text, emoji, on = parse_fields(payload)
    return Operation(message.mid, kind, message.parent, seen, counter, text=text, emoji=emoji, on=on)


def parse_fields(payload: str) -> tuple[str, Mid | None, int, str, str, bool]:
    """An operation's fields from its payload (the registry's parse, :mod:`middleware.kinds`); ObgError
    if it is not a well-formed one."""
    try:
        fields = json.loads(payload)
    except (ValueError, RecursionError):  # a stranger's 8,000 nested brackets too
        raise ObgError("operation text is not JSON (or nested too deep)") from None
    if type(fields) is not list or len(fields) != 6:
        raise ObgError("an operation is a list of 6 fields")
    kind, seen_text, counter, text, emoji, on = fields
    if type(kind) is not str or type(counter) is not int or type(text) is not str or type(emoji) is not str \
            or type(on) is not bool or (seen_text is not None and type(seen_text) is not str):
        raise ObgError("an operation field has the wrong type")
    if len(emoji) > MAX_EMOJI or (kind == "topic" and len(text) > MAX_TOPIC):
        raise ObgError("an operation field is too long")
    try:
        seen = parse_mid(seen_text) if seen_text is not None else None
    except ValueError as exc:
        raise ObgError(str(exc)) from None
    return kind, seen, counter, text, emoji, on


kinds.implement(kinds.OPERATION, parse=parse_fields)


@dataclass(frozen=True, slots=True)
class Changes:
    """What a batch of delivered messages did: new chat messages, updated ones, a new topic."""

    messages: list[ChatMessage]
    updated: list[Mid]
    topic_changed: bool
    notices: list[Notice] = field(default_factory=list)


class GroupOperations:
    """One group's operations: separates them from chat messages and keeps the objects' state."""

    def __init__(self, gid: str, *, fetch: Callable[[list[Mid]], Iterable[ChatMessage]] | None = None,
                 max_held: int = 10_000, max_held_bytes: int = 8 * 2**20, max_refetch: int = 100_000) -> None:
        """``fetch(mids)`` returns delivered messages again (the store): evicted operations come back
        through it once what they waited for is delivered."""
        self.gid = gid
        self._fetch = fetch
        # Whether a pid's moderation removals hold: the owner, or a member the owner made an admin (the
        # peer core sets it from the group's roles; none by default).
        self.moderator: Callable[[str], bool] = lambda pid: False
        # Whose pins and topic count (the owner's setting, middleware.roles): everyone's by default.
        self.may_pin: Callable[[str], bool] = lambda pid: True
        self._refetch: OrderedDict[tuple, list[Mid]] = OrderedDict()  # what they wait for -> evicted ids
        self._refetch_count = 0
        self.max_refetch = max_refetch
        # S_b delivers an operation only after its parent, the message it acts on
        self.core = ObgCore(self._is_chat_message, max_held=max_held, max_held_bytes=max_held_bytes)
        self._op_mids: set[Mid] = set()
        self.invalid = 0
        self.notices: deque[Notice] = deque(maxlen=MAX_NOTICES)
        # what the last notice of each object said: the topic's rank and text, a message's pin rank and state
        self._shown_topic: tuple[Rank, str] | None = None
        self._shown_pins: dict[Mid, tuple[Rank, bool]] = {}
        # topic and pin operations held by the core, for their notice once delivered (the oldest go first)
        self._held_messages: OrderedDict[Mid, ChatMessage] = OrderedDict()

    def _is_chat_message(self, mid: Mid) -> bool:
        return mid not in self._op_mids

    def is_operation_mid(self, mid: Mid) -> bool:
        return mid in self._op_mids

    @property
    def rejected(self) -> int:
        """Operations refused: malformed, forged (an edit by someone else) or acting on an operation."""
        return self.core.rejected + self.invalid

    def take(self, delivered: list[ChatMessage]) -> Changes:
        """Messages S_b delivered, in its order -> the chat messages among them, and what changed."""
        messages: list[ChatMessage] = []
        updated: dict[Mid, None] = {}
        topic_changed = False
        notices: list[Notice] = []
        at_hand = self._held_messages  # the operations of this batch, and those held before it
        todo = list(delivered)  # grows when evicted operations are fetched back
        position = 0
        while position < len(todo):
            message = todo[position]
            position += 1
            if not is_operation(message):
                messages.append(message)
                continue
            self._op_mids.add(message.mid)
            try:
                op = decode(message)
            except ObgError:
                self.invalid += 1
                continue
            if op.target is not None and op.target in self._op_mids:
                self.invalid += 1  # an operation acts on a message, never on another operation
                continue
            if op.kind in ("topic", "pin"):
                at_hand[message.mid] = message
                while len(at_hand) > MAX_NOTICES:
                    at_hand.popitem(last=False)  # its notice is lost, not the operation
            try:
                done = self.core.receive(op, len(message.text))
            except ObgError:
                at_hand.pop(message.mid, None)
                continue  # counted by the core
            self._note_evicted()
            for applied in done:
                if applied.target is None:
                    topic_changed = True
                else:
                    updated[applied.target] = None
                if applied.kind in ("topic", "pin"):
                    notice = self._notice(applied, at_hand.pop(applied.op_id, None))
                    if notice is not None:
                        notices.append(notice)
                        self.notices.append(notice)
                back = self._refetch.pop(("op", applied.op_id), None)
                if back:
                    self._refetch_count -= len(back)
                    if self._fetch is not None:
                        todo.extend(self._fetch(back))
        return Changes(messages, list(updated), topic_changed, notices)

    def _notice(self, applied: Operation, message: ChatMessage | None) -> Notice | None:
        """The notice of a topic or pin operation just applied, if it changed what is shown (the same
        rank rule as the core's: it won only if it outranks the last one that did)."""
        rank = self.core.rank(applied.op_id)
        if rank is None:
            return None
        if applied.kind == "topic":
            shown = self._shown_topic
            if shown is not None and shown[0] >= rank:
                return None
            self._shown_topic = (rank, applied.text)
            was = shown[1] if shown is not None else ""
            if was == applied.text:
                return None
            kind, text = "topic", applied.text
        else:
            target = applied.target
            assert target is not None  # a pin names its message (check_operation)
            pin = self._shown_pins.get(target)
            if pin is not None and pin[0] >= rank:
                return None
            self._shown_pins[target] = (rank, applied.on)
            if (pin[1] if pin is not None else False) == applied.on:
                return None
            kind, text, was = ("pin" if applied.on else "unpin"), "", ""
        return Notice(message, kind, applied.target, text, was) if message is not None else None

    def _note_evicted(self) -> None:
        for op_id, blocker in self.core.take_evicted():
            self._refetch.setdefault(blocker, []).append(op_id)
            self._refetch_count += 1
            while self._refetch_count > self.max_refetch:  # bounded too: the oldest are left to a restart
                self._refetch_count -= len(self._refetch.popitem(last=False)[1])

    def compose(self, author: str, kind: str, target: Mid | None, *, text: str = "", emoji: str = "",
                on: bool = True, target_known: bool = True) -> str:
        """The text of a new operation by ``author``; UsageError says what is wrong with it."""
        if kind != "topic":
            if target is None:
                raise UsageError(f"a {kind} names the message it acts on")
            if not target_known or target in self._op_mids:
                raise UsageError(f"unknown message {format_mid(target)}")
            if kind in ("edit", "delete") and target[0] != author:
                raise UsageError("not the author: only the author of a message may edit or delete it")
            if kind in ("edit", "delete") and self.core.is_deleted(target):
                raise UsageError(f"message {format_mid(target)} is deleted")
        if kind == "edit" and len(text) > MAX_EDIT_TEXT:
            raise UsageError(f"text too long: {len(text)} characters, limit is {MAX_EDIT_TEXT}")
        if kind == "topic" and len(text) > MAX_TOPIC:
            raise UsageError(f"text too long: {len(text)} characters, limit is {MAX_TOPIC}")
        if kind == "react" and not is_reaction_emoji(emoji):
            raise UsageError(f"a reaction is a single emoji, such as 👍; {emoji[:MAX_EMOJI]!r} is not one")
        if kind == "react" and on and target is not None and not self.core.takes_reaction(target, emoji):
            raise UsageError(f"message {format_mid(target)} already has {MAX_REACTION_EMOJI} different reactions: "
                             "add yourself to one of them")
        seen, counter = self.core.stamp(kind, target, author, emoji)
        # the seqno is not known yet; no rule looks at it but "names itself", and seqnos start at 1
        draft = Operation((author, 0), kind, target, seen, counter, text=text, emoji=emoji, on=on)
        refusal = self.core.refusal(draft)
        if refusal is not None:  # an error now, never a mid for an operation no member would apply
            raise UsageError(f"{kind} refused: {refusal}")
        return encode(kind, seen, counter, text, emoji, on)

    def view(self, message: ChatMessage) -> ChatMessage:
        """``message`` as the operations left it: current text, edited, deleted, reactions, pinned."""
        if not self.core.touches(message.mid):
            return message
        state = self.core.state(message.mid)
        moderator = next((pid for pid in state.moderated_by if self.moderator(pid)), None)
        if moderator is not None:  # removed by the owner or an admin: shown so to everyone
            return message._replace(text="", edited=state.edited, deleted=True, reactions=state.reactions,
                                    pinned=state.pinned, removed_by=moderator)
        winner = self.core.pin_winner(message.mid)
        pinned = state.pinned if winner is None or self.may_pin(winner.author) else self._pinned(message.mid)
        return message._replace(text=state.current_text(message.text), edited=state.edited,
                                deleted=state.deleted, reactions=state.reactions, pinned=pinned)

    def topic(self) -> tuple[str, str]:
        topic = self.core.topic()
        if topic.by and not self.may_pin(topic.by):  # only admins set it: the best of theirs
            best = self._best_allowed("topic", None)
            return (best.text, best.author) if best is not None else ("", "")
        return topic.text, topic.by

    def pinned(self) -> list[Mid]:
        pinned = self.core.pinned()
        if all(self.may_pin(op.author) for op in self.core.delivered_ops() if op.kind == "pin"):
            return pinned  # the usual case: everyone's pins count
        targets = {op.target for op in self.core.delivered_ops() if op.kind == "pin" and op.target is not None}
        return sorted(mid for mid in targets if self._pinned(mid))

    def _best_allowed(self, kind: str, target: Mid | None) -> Operation | None:
        """The highest-ranked operation of ``kind`` on ``target`` by an author whose pins count."""
        ops = [op for op in self.core.delivered_ops() if op.kind == kind and op.target == target
               and self.may_pin(op.author)]
        return max(ops, key=lambda op: self.core.rank(op.op_id) or (0, "", 0), default=None)

    def _pinned(self, mid: Mid) -> bool:
        best = self._best_allowed("pin", mid)
        return best is not None and best.on
