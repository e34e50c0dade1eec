"""Relay trees: how a group's messages reach the members that multicast does not, without every
writer sending a copy to each of them (issue 46).  Sans-I/O: pids, message ids and ``now`` go in;
what to send to whom, and the next deadline, come out.

Plumtree's shape (Leitão, Pereira, Rodrigues 2007), with a tree per writer that every member
computes alike instead of one learnt by flooding:

* **The view.**  Members sit on a ring ordered by a hash of the group and their pid; each is
  linked to those 1, ``a`` and ``a²`` places away on either side (``a`` about n^(1/3)): at most 6
  neighbours, symmetric without a handshake.  The caller gives only members it has proven at an
  endpoint (reach), so nothing is aimed at an unproven address.
* **Eager push along the writer's tree.**  Seen from the writer, a member ``e`` places away
  (signed, the shorter way round) has as parent the neighbour one step closer: by 1 until ``|e|``
  is a multiple of ``a``, then by ``a`` until a multiple of ``a²``, then by ``a²``.  Every member
  derives its own parent and children from the member list alone, so a writer's first message
  already goes along a spanning tree (n - 1 copies, the writer's own at most 6, at most
  2(a - 1) + n/2a² hops: 23 at 1,000 members), where Plumtree's would flood every link until pruned.
* **Lazy announcements to the rest.**  Every other neighbour is told, per writer, the seqnos
  received (IHAVE), riding on the next push to it or, failing one within ``IHAVE_INTERVAL``, in a
  datagram of its own.  A message announced but not received within ``GRAFT_WAIT`` is asked of
  its announcer (GRAFT), which from then on pushes that writer's messages to the asker too: the
  tree mends itself where a relay left, crashed, slept or dropped traffic.  A copy that arrives
  twice makes the later sender stop (PRUNE, for that writer).
* **A relay that does not relay loses its place.**  Each neighbour is scored on its recent relaying:
  a GRAFT answered, or a message pushed as this member's parent, counts for it; a GRAFT left
  unanswered, a message its tree should have brought that it did not push within ``LATE_AFTER``,
  or a push that failed verification (the caller says so) counts against it.  Once ``STRIKES``
  count against it and outnumber those for it, it is left out of the view for ``DISTRUST_FOR``: it
  gets nothing from this member and its announcements are not followed.  Lost datagrams (one in
  twenty in the simulator) leave an honest neighbour far from that line.  Garbage is never
  forwarded, since the caller hands in only messages whose signature verified.
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import dataclass
from functools import lru_cache

from .rangeset import RangeSet

GRAFT_WAIT = 0.15
"""Seconds an announced message may lag its announcement before it is asked for: a few hops of a
LAN (1-5 ms each) plus the announcer's batching, so a healthy tree is not grafted on."""

IHAVE_INTERVAL = 0.5
"""Seconds an announcement waits for a push to ride on before it is sent by itself."""

GRAFT_TRIES = 6
"""Announcers asked for one message (in turn) before it is left to the group's repair (NAK, sync)."""

STRIKES = 3
"""Failures (unanswered GRAFTs, missing pushes, garbage) before a neighbour can be distrusted, and
only while they outnumber its successes."""

SCORE_WINDOW = 64
"""Successes and failures are halved when they reach this many together: the score is recent."""

LATE_AFTER = 1.0
"""Seconds after a message arrived by another path within which its writer's tree parent should
have pushed it too."""

VIEW_SETTLE = 5.0
"""Seconds after this member's view changed before a parent's missing pushes count against it: the
others learn of a change (a member back, or gone) a presence timeout later, and push by their own view."""

DISTRUST_FOR = 30.0
"""Seconds a distrusted neighbour stays out of the view."""

MAX_VIEW = 6
MAX_RANGES_PER_IHAVE = 256
"""Ranges one IHAVE carries at most (the rest wait for the next): it stays one datagram."""

MAX_MISSING = 16_384
"""Announced messages awaited at once; past it new announcements are not followed (the group's own
repair still finds the gap)."""

MAX_SEQNOS = 4096
"""Seqnos one IHAVE or GRAFT can make this member look at (an honest one names a few dozen)."""

RECENT_FOR = 10.0
"""Seconds of messages announced to a neighbour that joins the view: one back from a crash or a
sleep is counted as up by the others only a presence timeout later, and misses what went by."""

MAX_RECENT = 4096

MessageId = tuple[str, int]
Ranges = tuple[tuple[str, int, int], ...]
"""``(writer pid, first seqno, last seqno)`` runs, inclusive."""


@dataclass(frozen=True, slots=True)
class Push:
    """Send message ``mid``'s datagram, whole, to the neighbour, with announcements riding on it."""

    mid: MessageId
    ranges: Ranges = ()


@dataclass(frozen=True, slots=True)
class IHave:
    ranges: Ranges


@dataclass(frozen=True, slots=True)
class Graft:
    """Send me these, and push these writers' messages to me from now on."""

    ranges: Ranges


@dataclass(frozen=True, slots=True)
class Prune:
    """Stop pushing these writers' messages to me: they reach me by another link first."""

    writers: tuple[str, ...]


Sent = tuple[str, Push | IHave | Graft | Prune]


@lru_cache(maxsize=1 << 16)
def ring_position(group: str, pid: str) -> bytes:
    return hashlib.blake2s(f"{group}\x00{pid}".encode(), digest_size=8).digest()


def ring_of(group: str, members: list[str]) -> list[str]:
    return sorted(set(members), key=lambda pid: ring_position(group, pid))


def steps(n: int) -> tuple[int, ...]:
    """The ring offsets a member links to: 1, a and a² (those below half the ring)."""
    a = max(2, round(n ** (1 / 3)))
    return tuple(step for step in (1, a, a * a) if step <= n // 2)


def view_of(group: str, me: str, members: list[str]) -> list[str]:
    """``me``'s neighbours among ``members``: the same answer on every member given the same list,
    and symmetric (b in a's view exactly when a is in b's)."""
    ring = ring_of(group, members + [me])
    return _view_on(ring, ring.index(me))


def _view_on(ring: list[str], at: int) -> list[str]:
    n = len(ring)
    if n <= MAX_VIEW + 1:
        return [pid for i, pid in enumerate(ring) if i != at]
    out: list[str] = []
    for step in steps(n):
        for signed in (step, -step):
            pid = ring[(at + signed) % n]
            if pid not in out:
                out.append(pid)
    return out


def tree_parent_offset(e: int, n: int) -> int | None:
    """The parent of the member ``e`` places from the writer (signed, |e| <= n/2); None for the writer."""
    if e == 0:
        return None
    if n <= MAX_VIEW + 1:
        return 0
    a = steps(n)[1] if len(steps(n)) > 1 else n
    m, sign = abs(e), (1 if e > 0 else -1)
    if m % a:
        m -= 1
    elif m % (a * a) or a * a > n // 2:
        m -= a
    else:
        m -= a * a
    return sign * m


def _signed(d: int, n: int) -> int:
    d %= n
    return d - n if d > n // 2 else d


class RelayTree:
    """One group's relaying at one member."""

    def __init__(self, group: str, me: str) -> None:
        self.group = group
        self.me = me
        self._ring: list[str] = [me]
        self._index: dict[str, int] = {me: 0}
        self._view: list[str] = []
        self._view_changed = float("-inf")
        self._trees: dict[str, tuple[str | None, tuple[str, ...]]] = {}  # writer -> (parent, children)
        self._extra: dict[str, set[str]] = {}  # writer -> neighbours that grafted: pushed to besides children
        self._pruned: dict[str, set[str]] = {}  # writer -> neighbours that asked not to be pushed to
        self._cut: dict[str, set[str]] = {}  # writer -> neighbours this member pruned
        self.have: dict[str, RangeSet] = {}
        self._announce: dict[str, dict[str, RangeSet]] = {}  # neighbour -> writer -> seqnos to announce
        self._announce_due: float | None = None
        self._recent: deque[tuple[float, MessageId]] = deque(maxlen=MAX_RECENT)
        self._missing: dict[MessageId, tuple[float, list[str], int]] = {}  # deadline, announcers, tries
        self._grafts: dict[str, tuple[float, set[MessageId]]] = {}  # target -> deadline, what it was asked
        self._awaited: dict[MessageId, tuple[float, str]] = {}  # the tree parent's copy, by a deadline
        self._score: dict[str, list[int]] = {}  # neighbour -> [relayed, failed]
        self._distrusted: dict[str, float] = {}
        self._out: list[Sent] = []
        self.pushed = self.duplicates = self.grafts_sent = 0

    # --- membership ---------------------------------------------------------------------------
    def set_members(self, members: list[str], now: float, ring: list[str] | None = None) -> None:
        """The members this one relays with (up, proven, not reached by multicast); ``ring``, if
        given, is ``ring_of(group, members + [me])`` already made (a simulation of many members)."""
        ring = ring if ring is not None else ring_of(self.group, list(members) + [self.me])
        for pid in set(ring) - set(self._ring):  # back (a restart, a wake): a new start
            self._distrusted.pop(pid, None)
            self._score.pop(pid, None)
        self._ring = ring
        self._index = {pid: i for i, pid in enumerate(self._ring)}
        self._trees.clear()
        before = set(self._view)
        self._refresh_view(now)
        if set(self._view) != before:
            self._view_changed = now
        while self._recent and self._recent[0][0] < now - RECENT_FOR:
            self._recent.popleft()
        for pid in self._view:
            if pid not in before:
                for _, mid in self._recent:
                    self._announce_to(pid, mid, now)

    def _refresh_view(self, now: float) -> None:
        for pid, until in list(self._distrusted.items()):
            if until <= now:
                del self._distrusted[pid]
                self._score.pop(pid, None)
        self._view = [pid for pid in _view_on(self._ring, self._index[self.me]) if pid not in self._distrusted]
        view = set(self._view)
        for gone in set(self._announce) - view:
            del self._announce[gone]

    @property
    def view(self) -> list[str]:
        """The neighbours relayed with now: the ring's, less the distrusted."""
        return list(self._view)

    @property
    def ring(self) -> list[str]:
        return list(self._ring)

    def distrusted(self, now: float) -> list[str]:
        return [pid for pid, until in self._distrusted.items() if until > now]

    def tree(self, writer: str) -> tuple[str | None, tuple[str, ...]]:
        """This member's parent and children in ``writer``'s tree."""
        cached = self._trees.get(writer)
        if cached is not None:
            return cached
        ring, index = self._ring, self._index
        if writer not in index:  # one this member does not count as up yet: the tree it would have
            ring = ring_of(self.group, ring + [writer])
            index = {pid: i for i, pid in enumerate(ring)}
        n, w = len(ring), index[writer]
        me = _signed(index[self.me] - w, n)
        up = tree_parent_offset(me, n)
        parent = None if up is None else ring[(w + up) % n]
        children = tuple(pid for pid in _view_on(ring, index[self.me])
                         if pid != writer and pid in self._index
                         and tree_parent_offset(_signed(index[pid] - w, n), n) == me)
        result = (parent, children)
        self._trees[writer] = result
        return result

    # --- messages -----------------------------------------------------------------------------
    def publish(self, mid: MessageId, now: float) -> None:
        """This member wrote ``mid``."""
        self._take(mid, None, now)

    def received(self, mid: MessageId, sender: str, now: float) -> bool:
        """``mid`` (its signature already verified) came pushed by ``sender``; True if new."""
        writer = mid[0]
        graft = self._grafts.get(sender)
        asked = mid in self._missing  # announced to this member: a pull, not the tree's push
        if graft is not None and mid in graft[1]:  # a GRAFT answered: the neighbour relays
            del self._grafts[sender]
            self._credit(sender)
        awaited = self._awaited.get(mid)
        if awaited is not None and awaited[1] == sender:  # later than another path, but relayed
            del self._awaited[mid]
            self._credit(sender)
        if self._has(mid):
            self.duplicates += 1
            self._unannounce(sender, mid)
            if sender not in self._cut.setdefault(writer, set()):
                self._cut[writer].add(sender)
                self._out.append((sender, Prune((writer,))))
            return False
        self._cut.get(writer, set()).discard(sender)
        parent = self.tree(writer)[0]
        if parent is not None and parent != sender and not asked and parent in self._view \
                and now - self._view_changed >= VIEW_SETTLE and parent not in self._cut.get(writer, ()):
            # pushed by another first (one that this member grafted from before): the parent should follow
            self._awaited[mid] = (now + LATE_AFTER, parent)
        elif parent == sender and writer != sender:  # relayed (its own messages prove nothing)
            self._credit(sender)
        self._take(mid, sender, now)
        return True

    def ihave(self, ranges: Ranges, sender: str, now: float) -> None:
        if sender not in self._view:
            return
        for writer, seqno in _bounded(ranges):
            mid = (writer, seqno)
            if self._has(mid):
                self._unannounce(sender, mid)  # it has it: telling it so is wasted
                continue
            entry = self._missing.get(mid)
            if entry is None:
                if len(self._missing) < MAX_MISSING:
                    self._missing[mid] = (now + GRAFT_WAIT, [sender], 0)
            elif sender not in entry[1] and len(entry[1]) < GRAFT_TRIES:
                entry[1].append(sender)

    def graft(self, ranges: Ranges, sender: str, now: float) -> None:
        """``sender`` (a member: the caller checks) asks for these, and to be pushed their writers'."""
        for writer, seqno in _bounded(ranges):
            if sender in self._view and sender not in self._extra.get(writer, ()):
                self._extra.setdefault(writer, set()).add(sender)
                self._pruned.get(writer, set()).discard(sender)
            seqnos = self.have.get(writer)
            if seqnos is not None and seqno in seqnos:
                self._out.append((sender, Push((writer, seqno))))

    def prune(self, writers: tuple[str, ...], sender: str) -> None:
        for writer in writers[:MAX_RANGES_PER_IHAVE]:
            self._extra.get(writer, set()).discard(sender)
            self._pruned.setdefault(writer, set()).add(sender)

    def garbage(self, sender: str, now: float) -> None:
        """``sender`` pushed a datagram that failed verification: no loss makes one (the pairwise
        tag held), so it is shut out at once, whatever it relayed well before."""
        self._strike(sender, now, max(STRIKES, self._tally(sender)[0] + 1))

    # --- time ---------------------------------------------------------------------------------
    def get_timer(self) -> float | None:
        deadlines = [entry[0] for entry in self._missing.values()]
        deadlines.extend(entry[0] for entry in self._awaited.values())
        deadlines.extend(entry[0] for entry in self._grafts.values())
        if self._announce_due is not None:
            deadlines.append(self._announce_due)
        return min(deadlines) if deadlines else None

    def handle_timer(self, now: float) -> None:
        if self._distrusted and min(self._distrusted.values()) <= now:
            self._refresh_view(now)
        for mid, (deadline, parent) in list(self._awaited.items()):
            if deadline <= now:
                del self._awaited[mid]
                self._strike(parent, now)
        if self._announce_due is not None and now >= self._announce_due:
            self._announce_due = None
            for pid, news in self._announce.items():
                if news:
                    self._out.append((pid, IHave(_to_ranges(news))))
            self._announce.clear()
        for target, (deadline, _) in list(self._grafts.items()):
            if deadline <= now:
                del self._grafts[target]
                self._strike(target, now)
        asks: dict[str, dict[str, RangeSet]] = {}
        for mid, (deadline, announcers, tries) in list(self._missing.items()):
            if deadline > now:
                continue
            trusted = [pid for pid in announcers if pid in self._view]
            if tries >= GRAFT_TRIES or not trusted:
                del self._missing[mid]
                continue
            target = trusted[tries % len(trusted)]
            asks.setdefault(target, {}).setdefault(mid[0], RangeSet()).add(mid[1])
            self._missing[mid] = (now + GRAFT_WAIT, announcers, tries + 1)
        for target, wanted in asks.items():
            self.grafts_sent += 1
            asked = self._grafts.setdefault(target, (now + GRAFT_WAIT, set()))[1]
            for writer, seqnos in wanted.items():
                asked.update((writer, seqno) for seqno in seqnos)
                self._cut.get(writer, set()).discard(target)
            self._out.append((target, Graft(_to_ranges(wanted))))

    def datagrams_to_send(self) -> list[Sent]:
        """What to send, announcements riding on the pushes going to their neighbour."""
        out, self._out = self._out, []
        if self._announce:
            for i, (pid, item) in enumerate(out):
                news = self._announce.get(pid)
                if news and isinstance(item, Push):
                    out[i] = (pid, Push(item.mid, _to_ranges(news)))
                    del self._announce[pid]
        return out

    # --- inside -------------------------------------------------------------------------------
    def _strike(self, pid: str, now: float, count: int = 1) -> None:
        score = self._tally(pid)
        score[1] += count
        if score[1] >= STRIKES and score[1] > score[0] and pid not in self._distrusted:
            self._distrusted[pid] = now + DISTRUST_FOR
            self._refresh_view(now)

    def _credit(self, pid: str) -> None:
        self._tally(pid)[0] += 1

    def _tally(self, pid: str) -> list[int]:
        score = self._score.setdefault(pid, [0, 0])
        if score[0] + score[1] >= SCORE_WINDOW:
            score[0] //= 2
            score[1] //= 2
        return score

    def _has(self, mid: MessageId) -> bool:
        seqnos = self.have.get(mid[0])
        return seqnos is not None and mid[1] in seqnos

    def _unannounce(self, pid: str, mid: MessageId) -> None:
        news = self._announce.get(pid)
        if news is not None and mid[0] in news:
            news[mid[0]].discard(mid[1])
            if not news[mid[0]]:
                del news[mid[0]]

    def _take(self, mid: MessageId, sender: str | None, now: float) -> None:
        writer = mid[0]
        self.have.setdefault(writer, RangeSet()).add(mid[1])
        self._missing.pop(mid, None)
        self._recent.append((now, mid))
        children = self.tree(writer)[1]
        extra = self._extra.get(writer, ())
        pruned = self._pruned.get(writer, ())
        for pid in self._view:
            if pid == sender:
                continue
            if (pid in children or pid in extra) and pid not in pruned:
                self.pushed += 1
                self._out.append((pid, Push(mid)))
            else:
                self._announce_to(pid, mid, now)

    def _announce_to(self, pid: str, mid: MessageId, now: float) -> None:
        self._announce.setdefault(pid, {}).setdefault(mid[0], RangeSet()).add(mid[1])
        if self._announce_due is None:
            self._announce_due = now + IHAVE_INTERVAL


def _bounded(ranges: Ranges):
    """The (writer, seqno) pairs that ``ranges`` name, up to ``MAX_SEQNOS`` of them."""
    budget = MAX_SEQNOS
    for writer, first, last in ranges[:MAX_RANGES_PER_IHAVE]:
        for seqno in range(first, min(last, first + budget - 1) + 1):
            budget -= 1
            yield writer, seqno
        if budget <= 0:
            return


def _to_ranges(news: dict[str, RangeSet]) -> Ranges:
    out: list[tuple[str, int, int]] = []
    for writer, seqnos in news.items():
        for first, last in seqnos.ranges():
            out.append((writer, first, last))
            if len(out) >= MAX_RANGES_PER_IHAVE:
                return tuple(out)
    return tuple(out)
