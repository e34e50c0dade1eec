"""MOP: the S_b message ordering core, as a pure state machine.

S_b order (the "said-before" order of the S_b paper) relates a message to the
message it answers.  A reply is delivered only after its parent; a thread root
(parent ``None``, the paper's OTR) and every message unrelated to what is
missing are delivered the moment they arrive.

The paper keeps out-of-order messages in a table (OSMT) that it scans linearly
for each delivery.  Here held messages are indexed by the parent they wait for,
so each message costs O(1) amortized, and the delivered ids (the paper's
Ordering List) are per-sender seqno range sets: O(senders + gaps) memory.

No sockets, threads or clocks: callers feed messages in and get the deliverable
ones back.

:class:`PySbOrderer` is the reference implementation.  :class:`SbOrderer` is the
same state machine compiled (``_sborder.c``): shuffled input spends its time in
hash tables keyed by ``(pid, seqno)``, which flat C tables serve several times
faster.  Without a compiler at install time, or with ``M2MC_PURE_PYTHON=1`` set,
``SbOrderer`` is the Python class.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Hashable, Iterator

from .rangeset import RangeSet

try:
    from ._sborder import SbOrderer as _CompiledCore
except ImportError:  # built without a C compiler
    _CompiledCore = None

Mid = tuple[Hashable, int]
"""``(sender pid, seqno)``."""

Delivery = tuple[Mid, "Mid | None", Any]
"""``(mid, parent, payload)`` as handed back by :meth:`SbOrderer.receive`."""

DEFAULT_MAX_HELD = 100_000
# Held messages are bounded in bytes too (what the caller says each one costs): 100,000
# messages of up to ~33 KB of text each would otherwise be 3 GB per group.
DEFAULT_MAX_HELD_BYTES = 64 * 1024 * 1024


class _Delivered:
    """One sender's delivered seqnos: a run ``[lo, hi)`` and, beside it, ``rest``.

    Seqnos from one sender are mostly delivered one above the last, so the run is
    two ints that :meth:`SbOrderer.receive` reads and extends inline, without a
    call; anything else goes to a RangeSet (``rest``, None while empty), which the
    run absorbs as it grows into it.  ``rest`` never holds a value in ``[lo, hi]``.
    """

    __slots__ = ("lo", "hi", "rest")

    def __init__(self, seqno: int) -> None:
        self.lo, self.hi = seqno, seqno + 1
        self.rest: RangeSet | None = None

    def __contains__(self, seqno: int) -> bool:
        return self.lo <= seqno < self.hi or self.rest is not None and seqno in self.rest

    def add(self, seqno: int) -> bool:
        """Add ``seqno``; return False if it was already there."""
        if seqno == self.hi:
            self.hi = seqno + 1
            if self.rest is not None:
                self.hi = self.rest.take_run(self.hi)
                if not self.rest:
                    self.rest = None
            return True
        if self.lo <= seqno < self.hi:
            return False
        if self.rest is None:
            self.rest = RangeSet()
        return self.rest.add(seqno)

    def forget_highest(self, seqno: int) -> bool:
        """Remove ``seqno`` if it is the highest here; False (and nothing changes) otherwise."""
        rest = self.rest
        if rest is not None and rest.max() >= self.hi:
            if rest.max() != seqno:
                return False
            rest.take_run(seqno)
            if not rest:
                self.rest = None
        elif self.hi - 1 == seqno and self.lo < self.hi:
            self.hi = seqno
            if self.lo == self.hi and rest is not None:  # the run is gone: the highest range takes its place
                first, last = rest.ranges()[-1]
                rest.take_run(first)
                self.lo, self.hi = first, last + 1
                if not rest:
                    self.rest = None
        else:
            return False
        return True

    def as_rangeset(self) -> RangeSet:
        result = RangeSet.from_ranges(self.rest.ranges()) if self.rest is not None else RangeSet()
        result.add_range(self.lo, self.hi)
        return result


class PySbOrderer:
    """Delivers messages in S_b order: every reply after the message it answers.

    ``max_held`` bounds the messages waiting for a parent, ``max_held_bytes`` the
    sum of their sizes (given to :meth:`receive`, or else ``size_of(payload)``,
    called only for a message about to be held); past either, the oldest
    waiting message is evicted (counted in ``evicted`` and listed by
    :meth:`take_evicted`, so the caller can ask for it again once its parent is
    here), so a hostile sender that names parents which never come cannot grow
    memory without limit.
    """

    __slots__ = ("_delivered", "_held", "_waiting", "max_held", "max_held_bytes", "held_bytes", "_evicted_mids",
                 "_size_of", "evicted", "duplicates", "rejected")

    def __init__(self, max_held: int = DEFAULT_MAX_HELD, max_held_bytes: int = DEFAULT_MAX_HELD_BYTES,
                 size_of: Callable[[Any], int] | None = None) -> None:
        if max_held < 1:
            raise ValueError("max_held must be at least 1")
        if max_held_bytes < 1:
            raise ValueError("max_held_bytes must be at least 1")
        self._delivered: dict[Hashable, _Delivered] = {}
        # mid -> (parent, payload, size); dict order is arrival order, so the first key is the oldest.
        self._held: dict[Mid, tuple[Mid, Any, int]] = {}
        # parent mid -> the held message that answers it, or a list of them in arrival
        # order.  Most parents have one waiting reply; storing it bare saves a list
        # (a garbage-collected object) per held message.
        self._waiting: dict[Mid, Mid | list[Mid]] = {}
        self.max_held = max_held
        self.max_held_bytes = max_held_bytes
        self.held_bytes = 0
        self._evicted_mids: list[tuple[Mid, Mid]] = []
        self._size_of = size_of
        self.evicted = 0
        self.duplicates = 0
        self.rejected = 0

    # -- input ---------------------------------------------------------------

    def receive(self, mid: Mid, parent: Mid | None, payload: Any = None, size: int | None = None) -> list[Delivery]:
        """Accept one message; return those that became deliverable, in S_b order.

        The list is empty when the message waits for its parent or is a
        duplicate; otherwise it starts with the message itself, followed by its
        waiting descendants, depth first.  ``size`` is what holding it costs, in
        bytes, counted against ``max_held_bytes`` (None: ``size_of(payload)``, or 0).
        """
        held = self._held
        if held and mid in held:
            self.duplicates += 1
            return []
        if parent is not None:
            parent_seen = self._delivered.get(parent[0])
            parent_seqno = parent[1]
            if parent_seen is None or not (
                parent_seen.lo <= parent_seqno < parent_seen.hi
                or parent_seen.rest is not None and parent_seqno in parent_seen.rest
            ):
                # Its parent is not delivered, so it waits; unless it names itself, or its mid
                # was delivered before with another parent (equivocation: never deliver twice).
                if parent == mid:
                    self.rejected += 1
                elif self.is_delivered(mid):
                    self.duplicates += 1
                else:
                    self._hold(mid, parent, payload, size)
                return []
        pid, seqno = mid
        seen = self._delivered.get(pid)
        if seen is None:
            self._delivered[pid] = _Delivered(seqno)
        elif seqno == seen.hi and seen.rest is None:
            seen.hi = seqno + 1  # the next one in order
        elif not seen.add(seqno):
            self.duplicates += 1
            return []
        delivered = [(mid, parent, payload)]
        if self._waiting and mid in self._waiting:
            self._release(mid, delivered)
        return delivered

    def mark_delivered(self, mid: Mid) -> list[Delivery]:
        """Record ``mid`` as delivered without a payload (e.g. restored from a store).

        Returns the held messages this releases, like :meth:`receive`.
        """
        seen = self._delivered.get(mid[0])
        if seen is None:
            self._delivered[mid[0]] = _Delivered(mid[1])
        elif not seen.add(mid[1]):
            return []
        if mid in self._held:
            self._unhold(mid)
        released: list[Delivery] = []
        if mid in self._waiting:
            self._release(mid, released)
        return released

    def forget_delivered(self, mid: Mid) -> bool:
        """Undo the delivery of ``mid`` if it is its sender's highest delivered seqno (a message
        of this peer's that could not be stored, so was never sent); False otherwise."""
        seen = self._delivered.get(mid[0])
        if seen is None or not seen.forget_highest(mid[1]):
            return False
        if seen.lo == seen.hi:
            del self._delivered[mid[0]]
        return True

    def _hold(self, mid: Mid, parent: Mid, payload: Any, size: int | None) -> None:
        if size is None:
            size = self._size_of(payload) if self._size_of is not None else 0
        size = min(size, 0xFFFFFFFF)  # as the compiled core keeps it: over any byte bound anyway
        self._held[mid] = (parent, payload, size)
        self.held_bytes += size
        waiting = self._waiting.get(parent)
        if waiting is None:
            self._waiting[parent] = mid
        elif type(waiting) is list:
            waiting.append(mid)
        else:
            self._waiting[parent] = [waiting, mid]
        while len(self._held) > self.max_held or self.held_bytes > self.max_held_bytes:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        mid = next(iter(self._held))
        if len(self._evicted_mids) < self.max_held:  # a caller that never asks costs no more than that
            self._evicted_mids.append((mid, self._held[mid][0]))
        self._unhold(mid)
        self.evicted += 1

    def take_evicted(self) -> list[tuple[Mid, Mid]]:
        """``(mid, parent)`` of the messages evicted since the last call, oldest first
        (the first ``max_held`` of them)."""
        out, self._evicted_mids = self._evicted_mids, []
        return out

    def _unhold(self, mid: Mid) -> None:
        """Forget a held message, and its place among its parent's waiting replies."""
        parent, _, size = self._held.pop(mid)
        self.held_bytes -= size
        siblings = self._waiting[parent]
        if type(siblings) is list and len(siblings) > 1:
            siblings.remove(mid)
        else:
            del self._waiting[parent]

    def _release(self, root: Mid, out: list[Delivery]) -> None:
        """Deliver every held descendant of ``root``, depth first, parents first."""
        held, waiting, delivered = self._held, self._waiting, self._delivered
        children = waiting.pop(root)
        stack = children[::-1] if type(children) is list else [children]
        while stack:
            mid = stack.pop()
            parent, payload, size = held.pop(mid)
            self.held_bytes -= size
            seen = delivered.get(mid[0])
            if seen is None:
                delivered[mid[0]] = _Delivered(mid[1])
            else:
                seen.add(mid[1])
            out.append((mid, parent, payload))
            if mid in waiting:
                children = waiting.pop(mid)
                if type(children) is list:
                    stack.extend(reversed(children))
                else:
                    stack.append(children)

    # -- queries -------------------------------------------------------------

    def is_delivered(self, mid: Mid) -> bool:
        seen = self._delivered.get(mid[0])
        return seen is not None and mid[1] in seen

    @property
    def pending(self) -> int:
        """How many messages are held, waiting for a parent."""
        return len(self._held)

    def held(self) -> Iterator[tuple[Mid, Mid]]:
        """``(mid, parent)`` of every held message, oldest first."""
        for mid, (parent, _, _) in self._held.items():
            yield mid, parent

    def waiting_for(self) -> set[Mid]:
        """Parents that held messages wait for and that have not arrived at all.

        These are what loss recovery should ask for; parents that are
        themselves held are left out, since they are here and wait in turn.
        """
        return {parent for parent in self._waiting if parent not in self._held}

    def delivered_ranges(self) -> dict[Hashable, list[tuple[int, int]]]:
        """Per sender, the delivered seqnos as inclusive ``(first, last)`` ranges."""
        return {pid: seen.as_rangeset().ranges() for pid, seen in self._delivered.items()}

    def held_payload(self, mid: Mid) -> tuple[Mid, Any] | None:
        """``(parent, payload)`` of a held message, or None."""
        held = self._held.get(mid)
        return held[:2] if held is not None else None

    def delivered_sets(self) -> Iterator[tuple[Hashable, RangeSet]]:
        """``(pid, copy of its delivered seqnos)`` per sender."""
        return ((pid, seen.as_rangeset()) for pid, seen in self._delivered.items())

    def delivered_set(self, pid: Hashable) -> RangeSet:
        """A copy of ``pid``'s delivered seqnos."""
        seen = self._delivered.get(pid)
        return seen.as_rangeset() if seen is not None else RangeSet()

    def highest_delivered(self, pid: Hashable) -> int:
        seen = self._delivered.get(pid)
        if seen is None:
            return 0
        return max(seen.hi - 1, seen.rest.max()) if seen.rest is not None else seen.hi - 1


if _CompiledCore is not None:

    class CompiledSbOrderer(_CompiledCore):
        """:class:`PySbOrderer` compiled: same methods, same results, same bound on held messages."""

        __slots__ = ()

        def delivered_sets(self) -> Iterator[tuple[Hashable, RangeSet]]:
            """``(pid, copy of its delivered seqnos)`` per sender."""
            return ((pid, RangeSet.from_ranges(ranges)) for pid, ranges in self.delivered_ranges().items())

        def delivered_set(self, pid: Hashable) -> RangeSet:
            """A copy of ``pid``'s delivered seqnos."""
            return RangeSet.from_ranges(self.sender_ranges(pid))

else:
    CompiledSbOrderer = None

COMPILED = CompiledSbOrderer is not None and os.environ.get("M2MC_PURE_PYTHON", "") in ("", "0")
SbOrderer = CompiledSbOrderer if COMPILED else PySbOrderer
"""The orderer the middleware uses: compiled when available."""
