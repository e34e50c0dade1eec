"""Object-based ordered delivery (OBG) of chat operations: edits, deletes, reactions, pins, topic.

The seed (Timura, Tanaka, Takizawa: "Group Protocol for Supporting
Object-based Ordered Delivery") orders only requests that *conflict on the
same object*; compatible requests and requests on other objects are delivered
as they come.  Here the objects and their conflicts are:

* ``("text", mid)``: a message's text.  Only its author edits or deletes it;
  edits conflict with one another and a delete absorbs every edit.
* ``("react", mid, reactor, emoji)``: one reactor's add/remove of one emoji.
  Two reactors, or two emoji, never conflict.  An emoji is one emoji grapheme from
  Unicode's emoji data (:func:`is_reaction_emoji`); one message shows at most
  ``MAX_REACTION_EMOJI`` distinct ones.
* ``("pin", mid)``: pin/unpin of a message, by any member.
* ``("topic",)``: the group topic, set by any member.

Each operation names its object and the operation it saw last on that object
(``seen``), the way a reply names its parent, plus a Lamport ``counter``
(higher than every counter its author had seen).  A receiver delivers an
operation once the message it targets and the operation it names are
delivered; nothing else makes it wait.  Concurrent conflicting operations
(two that saw the same version) are settled by one rule every member applies:
the higher rank wins, where the rank is ``(effective counter, pid, seqno)`` and
the effective counter is ``max(counter, seen's effective counter + 1)``.  The
resulting state is a function of the *set* of delivered operations, so every
member that delivered the same set shows the same text, reactions, pins and
topic, whatever the arrival order.

Counters an attacker picks.  The counter is what the author *claims*; the
wire bounds it (``0 < counter < MAX_COUNTER``, refused where it enters), and
nothing else about it can refuse an operation.  Until issue 26 an operation
also had to carry a counter above the one it named, and one member's counter
of 2**53 - 1 made every later operation need 2**53: refused everywhere, for
good.  Now the order along a chain comes from the chain itself (the effective
counter, computed by the receiver, is unbounded), and ``stamp`` never goes past
``MAX_COUNTER - 1``, so a huge counter buys at most the ties against
operations that did not see it; the next operation that saw it outranks it.
For honest histories (every counter above the one it names) the effective
counter is the counter, so the state is the one the old rule gave.  We chose
this over the two other ways out: refusing counters far above the receiver's
clock makes refusal depend on what each receiver has seen (a peer that missed
operations would refuse ones the others took, and a patient attacker still
climbs 2**20 per operation), and a counter per object still lets one
operation freeze an object, and the topic is one object for the whole group.
Neither the effective counter nor any other rule depends on the receiver's
clock, so replaying the store at start-up, and operations relayed by others,
give the same state as live delivery.

Rules that reject an operation depend only on the operation and the one it
names, so every member rejects the same ones: an edit or delete by anyone but
the message's author, an operation naming itself, one naming an operation on
another object, one with a counter out of range, and a reaction that is not one
emoji.  Dependants of a rejected operation are rejected too.  One rule depends
on what was delivered before: a reaction that would add a new emoji to a message
that already shows ``MAX_REACTION_EMOJI`` is refused (first come, first kept;
adding a reactor to an emoji already shown always works, and an emoji whose last
reactor takes it back frees its place).  Members that delivered the reactions in
one order agree; only reactions racing for a message's last places may be kept by
some and not others.  ``refusal`` says in advance whether, and why, an operation
would be refused: the caller checks its own before sending it.

Held operations are bounded by count and bytes.  Past either bound the oldest
held one is evicted: it is forgotten, not marked as seen, so it is accepted
again when it is fetched again (``take_evicted`` tells the caller which ids to
fetch, and what each waited for, so it can fetch them from its store or by
loss repair once that has come).

Sans-I/O: no sockets, no clock.  Operations go in, delivered operations come
out in delivery order.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import emoji as emoji_data

Mid = tuple[str, int]
OpId = tuple[str, int]
Rank = tuple[int, str, int]
"""``(effective counter, pid, seqno)``: the seqno only breaks ties between two operations of
one author that did not see each other (a restored data dir)."""

KINDS = ("edit", "delete", "react", "pin", "topic", "moderate")
# "moderate": an owner's or admin's removal of anyone's message (issue 44).  The core takes it from any
# member, each author's its own object (nothing conflicts with it); whether it holds is the group's
# roles' word (chatops.GroupOperations.view: its author is the owner or was made an admin), so every
# member holding the same operations and role records shows the same.
MAX_COUNTER = 2**53
"""A counter on the wire is below this (JSON's exact integers), refused otherwise.  It costs no
one anything: ranks use the effective counter, which any successor raises past it."""


MAX_REACTION_EMOJI = 50
"""Distinct emoji one message shows: a member cannot grow a message (its history entry, its
memory, every member's layout of it) without bound by one new emoji per operation."""
_EMOJI_COMPONENT = emoji_data.STATUS["component"]


def is_reaction_emoji(text: str) -> bool:
    """One emoji grapheme of Unicode's emoji data (``emoji.EMOJI_DATA``): a single emoji, a
    sequence such as a flag, a skin tone or a ZWJ family; not a bare component like a skin tone."""
    data = emoji_data.EMOJI_DATA.get(text)
    return data is not None and data["status"] != _EMOJI_COMPONENT


class ObgError(ValueError):
    """An operation that cannot be built: bad kind, missing target, forbidden author."""


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation on one object; ``op_id`` is its message id ``(author pid, seqno)``."""

    op_id: OpId
    kind: str
    target: Mid | None
    """The message it acts on; None for a topic setting."""
    seen: OpId | None
    """The last operation on the same object its author had delivered; None if none."""
    counter: int
    text: str = ""
    """The new text of an edit, or the topic."""
    emoji: str = ""
    on: bool = True
    """Reaction added / message pinned (False: removed / unpinned)."""

    @property
    def author(self) -> str:
        return self.op_id[0]

    @property
    def object_key(self) -> tuple:
        return object_key(self.kind, self.target, self.author, self.emoji)


def object_key(kind: str, target: Mid | None, author: str, emoji: str = "") -> tuple:
    """The object an operation acts on; operations conflict only with those on the same object."""
    if kind in ("edit", "delete"):
        return ("text", target)
    if kind == "react":
        return ("react", target, author, emoji)
    if kind == "pin":
        return ("pin", target)
    if kind == "moderate":
        return ("moderate", target, author)
    return ("topic",)


def check_operation(op: Operation) -> None:
    """Raise ObgError if ``op`` is malformed on its own (no state needed)."""
    if op.kind not in KINDS:
        raise ObgError(f"unknown operation kind {op.kind!r}")
    if (op.kind == "topic") != (op.target is None):
        raise ObgError("a topic setting names no message; every other operation names one")
    if op.kind in ("edit", "delete") and op.target is not None and op.target[0] != op.author:
        raise ObgError("only a message's author may edit or delete it")
    if op.kind == "react" and not is_reaction_emoji(op.emoji):
        raise ObgError("a reaction needs an emoji, a single one from Unicode's emoji data")
    if not 0 < op.counter < MAX_COUNTER:
        raise ObgError(f"counter out of range: {op.counter}")
    if op.seen == op.op_id:
        raise ObgError("an operation cannot name itself")


@dataclass(slots=True)
class MessageState:
    """What the operations delivered so far made of one message."""

    edited: int = 0
    deleted: bool = False
    text: str | None = None
    """The current text if an edit won; None: the message's original text."""
    reactions: dict[str, list[str]] = field(default_factory=dict)
    pinned: bool = False
    moderated_by: tuple[str, ...] = ()
    """Authors of moderation removals of it, in order (whether one holds: the roles, see KINDS)."""

    def current_text(self, original: str) -> str:
        if self.deleted:
            return ""
        return original if self.text is None else self.text


@dataclass(frozen=True, slots=True)
class Topic:
    text: str
    by: str
    op_id: OpId | None


class ObgCore:
    """One group's operations: holds each until what it names is delivered, then applies it."""

    def __init__(
        self,
        message_delivered: Callable[[Mid], bool],
        *,
        max_held: int = 10_000,
        max_held_bytes: int = 8 * 2**20,
    ) -> None:
        self._message_delivered = message_delivered
        self.max_held = max_held
        self.max_held_bytes = max_held_bytes
        self._ops: dict[OpId, Operation] = {}  # delivered operations
        self._ranks: dict[OpId, Rank] = {}  # delivered id -> its rank (see the module's docstring)
        self._winner: dict[tuple, Operation] = {}  # object key -> winning (highest-rank) operation
        # held id -> (operation, bytes, what it waits for), oldest first
        self._held: OrderedDict[OpId, tuple[Operation, int, tuple]] = OrderedDict()
        self._waiting: dict[tuple, dict[OpId, None]] = {}  # ("op", id) / ("msg", mid) -> held ids
        self._held_bytes = 0
        self._rejected: OrderedDict[OpId, None] = OrderedDict()
        self._evicted: OrderedDict[OpId, tuple] = OrderedDict()  # evicted id -> what it waited for
        self._edits: dict[Mid, int] = {}
        self._deleted: set[Mid] = set()
        self._moderated: dict[Mid, list[str]] = {}  # message -> authors of moderation removals, in order
        self._reactors: dict[Mid, dict[str, set[str]]] = {}
        self.clock = 0
        self.rejected = 0
        self.duplicates = 0
        self.evicted = 0
        self.reactions_refused = 0
        """Of ``rejected``: reactions that would have added an emoji past ``MAX_REACTION_EMOJI``."""

    # -- building our own operations ----------------------------------------------

    def stamp(self, kind: str, target: Mid | None, author: str, emoji: str = "") -> tuple[OpId | None, int]:
        """``(seen, counter)`` for a new operation by ``author``: what it names, and its counter."""
        winner = self._winner.get(object_key(kind, target, author, emoji))
        # past the wire's limit the effective counter still orders it after what it names
        return (winner.op_id if winner else None), min(self.clock + 1, MAX_COUNTER - 1)

    def refusal(self, op: Operation) -> str | None:
        """Why ``op`` would be refused if it came now, or None; changes nothing."""
        try:
            check_operation(op)
        except ObgError as exc:
            return str(exc)
        if op.op_id in self._rejected:
            return "it was refused before"
        blocker = self._blocker(op)
        if blocker is not None and blocker[0] == "rejected":
            return f"it names operation {blocker[1][0]}:{blocker[1][1]}, which was refused or is on another object"
        return None

    # -- input ----------------------------------------------------------------------

    def receive(self, op: Operation, size: int = 0) -> list[Operation]:
        """Take one operation (ours or a peer's); returns those that became deliverable, in order.

        Raises ObgError for an operation that is malformed on its own; the
        caller counts it.  ``size`` is what it costs to hold (its bytes).
        """
        op_id = op.op_id
        if op_id in self._ops or op_id in self._held or op_id in self._rejected:
            self.duplicates += 1
            return []
        try:
            check_operation(op)
        except ObgError:
            self._reject(op_id)
            raise
        blocker = self._blocker(op)
        if blocker is None:
            return self._deliver_from(op)
        if blocker[0] == "rejected":
            self._reject(op_id)
            return []
        self._hold(op, max(size, 64), blocker)
        return []

    def message_delivered(self, mid: Mid) -> list[Operation]:
        """The chat message ``mid`` was delivered: operations waiting for it may go."""
        woken = self._waiting.pop(("msg", mid), None)
        if not woken:
            return []
        delivered: list[Operation] = []
        for op_id in list(woken):
            entry = self._unhold(op_id)
            if entry is not None:
                delivered.extend(self._retry(entry[0], entry[1]))
        return delivered

    # -- queries --------------------------------------------------------------------

    def is_delivered(self, op_id: OpId) -> bool:
        return op_id in self._ops

    def rank(self, op_id: OpId) -> Rank | None:
        """A delivered operation's rank: of two concurrent operations on one object, the higher wins."""
        return self._ranks.get(op_id)

    def delivered_ops(self) -> list[Operation]:
        return list(self._ops.values())

    @property
    def pending(self) -> int:
        return len(self._held)

    @property
    def held_bytes(self) -> int:
        return self._held_bytes

    def waiting_for(self) -> set[tuple]:
        """What held operations wait for: ``("op", op_id)`` or ``("msg", mid)``."""
        return set(self._waiting)

    def take_evicted(self) -> list[tuple[OpId, tuple]]:
        """``(id, what it waited for)`` of the operations evicted since the last call (at most
        ``max_held``): fetch them again (store or repair) once that has been delivered."""
        evicted, self._evicted = list(self._evicted.items()), OrderedDict()
        return evicted

    def topic(self) -> Topic:
        winner = self._winner.get(("topic",))
        if winner is None:
            return Topic("", "", None)
        return Topic(winner.text, winner.author, winner.op_id)

    def state(self, mid: Mid) -> MessageState:
        state = MessageState(edited=self._edits.get(mid, 0), deleted=mid in self._deleted)
        text_winner = self._winner.get(("text", mid))
        if text_winner is not None and text_winner.kind == "edit":
            state.text = text_winner.text
        pin = self._winner.get(("pin", mid))
        state.pinned = bool(pin and pin.on)
        reactors = self._reactors.get(mid)
        if reactors:
            state.reactions = {emoji: sorted(pids) for emoji, pids in sorted(reactors.items()) if pids}
        state.moderated_by = tuple(self._moderated.get(mid, ()))
        return state

    def is_deleted(self, mid: Mid) -> bool:
        return mid in self._deleted

    def takes_reaction(self, mid: Mid, emoji: str) -> bool:
        """Whether a reaction with ``emoji`` may be added to ``mid``: it is shown there already,
        or the message shows fewer than ``MAX_REACTION_EMOJI`` distinct emoji."""
        shown = self._reactors.get(mid, {})
        return emoji in shown or len(shown) < MAX_REACTION_EMOJI

    def touches(self, mid: Mid) -> bool:
        """Has any delivered operation acted on message ``mid``?"""
        return (mid in self._edits or mid in self._deleted or mid in self._reactors or ("pin", mid) in self._winner
                or mid in self._moderated)

    def pin_winner(self, mid: Mid) -> Operation | None:
        """The pin or unpin of ``mid`` that holds (the highest-ranked), None if none."""
        return self._winner.get(("pin", mid))

    def pinned(self) -> list[Mid]:
        return sorted(key[1] for key, op in self._winner.items() if key[0] == "pin" and op.on)

    def touched_messages(self) -> set[Mid]:
        return {mid for mid in set(self._edits) | self._deleted | set(self._reactors) | set(self._moderated) | {
            key[1] for key in self._winner if key[0] == "pin"} if self.touches(mid)}

    # -- internals ------------------------------------------------------------------

    def _blocker(self, op: Operation) -> tuple | None:
        """What ``op`` still waits for, ``("rejected", id)`` if it can never be delivered, or None."""
        if op.seen is not None:
            if op.seen in self._rejected:
                return ("rejected", op.seen)
            seen = self._ops.get(op.seen)
            if seen is None:
                return ("op", op.seen)
            if seen.object_key != op.object_key:
                return ("rejected", op.seen)
        if op.target is not None and not self._message_delivered(op.target):
            return ("msg", op.target)
        return None

    def _retry(self, op: Operation, size: int) -> list[Operation]:
        blocker = self._blocker(op)
        if blocker is None:
            return self._deliver_from(op)
        if blocker[0] == "rejected":
            self._reject(op.op_id)
            return []
        self._hold(op, size, blocker)
        return []

    def _deliver_from(self, first: Operation) -> list[Operation]:
        delivered: list[Operation] = []
        todo = [first]
        while todo:
            op = todo.pop()
            if op.kind == "react" and op.on and op.target is not None and not self.takes_reaction(op.target, op.emoji):
                self.reactions_refused += 1
                self._reject(op.op_id)
                continue
            self._apply(op)
            delivered.append(op)
            for op_id in reversed(list(self._waiting.pop(("op", op.op_id), ()))):
                entry = self._unhold(op_id)
                if entry is None:
                    continue
                held, size, _ = entry
                blocker = self._blocker(held)
                if blocker is None:
                    todo.append(held)
                elif blocker[0] == "rejected":
                    self._reject(held.op_id)
                else:
                    self._hold(held, size, blocker)
        return delivered

    def _apply(self, op: Operation) -> None:
        self._ops[op.op_id] = op
        effective = op.counter if op.seen is None else max(op.counter, self._ranks[op.seen][0] + 1)
        rank = self._ranks[op.op_id] = (effective, op.op_id[0], op.op_id[1])
        self.clock = max(self.clock, effective)
        key = op.object_key
        target = op.target
        if target is None:  # the topic: nothing per message
            pass
        elif op.kind == "delete":
            self._deleted.add(target)
        elif op.kind == "moderate":
            authors = self._moderated.setdefault(target, [])
            if op.author not in authors:
                authors.append(op.author)
        elif op.kind == "edit":
            self._edits[target] = self._edits.get(target, 0) + 1
        winner = self._winner.get(key)
        if op.kind == "edit" and winner is not None and winner.kind == "delete":
            return  # a delete absorbs every edit, whatever their ranks
        if winner is not None and self._ranks[winner.op_id] >= rank \
                and not (op.kind == "delete" and winner.kind == "edit"):
            return
        self._winner[key] = op
        if op.kind == "react" and target is not None:
            shown = self._reactors.setdefault(target, {})
            if op.on:
                shown.setdefault(op.emoji, set()).add(op.author)
            else:
                reactors = shown.get(op.emoji, set())
                reactors.discard(op.author)
                if not reactors:  # frees its place among the message's MAX_REACTION_EMOJI
                    shown.pop(op.emoji, None)

    def _hold(self, op: Operation, size: int, blocker: tuple) -> None:
        self._held[op.op_id] = (op, size, blocker)
        self._held_bytes += size
        self._waiting.setdefault(blocker, {})[op.op_id] = None
        while self._held and (len(self._held) > self.max_held or self._held_bytes > self.max_held_bytes):
            oldest = next(iter(self._held))
            _, _, waited_for = self._held[oldest]
            self._unhold(oldest)
            self._evicted[oldest] = waited_for
            if len(self._evicted) > self.max_held:
                self._evicted.popitem(last=False)
            self.evicted += 1

    def _unhold(self, op_id: OpId) -> tuple[Operation, int, tuple] | None:
        entry = self._held.pop(op_id, None)
        if entry is not None:
            self._held_bytes -= entry[1]
            waiters = self._waiting.get(entry[2])
            if waiters is not None:
                waiters.pop(op_id, None)
                if not waiters:
                    del self._waiting[entry[2]]
        return entry

    def _reject(self, op_id: OpId) -> None:
        # dependants can never be delivered either; the same holds at every member
        todo = [op_id]
        while todo:
            rejected = todo.pop()
            self.rejected += 1
            self._rejected[rejected] = None
            if len(self._rejected) > self.max_held:
                self._rejected.popitem(last=False)
            for dependant in list(self._waiting.pop(("op", rejected), ())):
                if self._unhold(dependant) is not None:
                    todo.append(dependant)
