"""A download's decisions without I/O: which sources to reach, what to ask of whom, when a source has
stalled, when a turn gives its slot up, when the file is whole.

:class:`Download` is one file being fetched, across its turns in a download slot.  Events go in as
calls carrying ``now`` (a connection up or lost, a source's HAVE and hash list, a frame from it, a
chunk hashed, the timer); commands come out as values (:class:`Connect`, :class:`Ask`,
:class:`Close`, :class:`Finish`, :class:`GiveUp`), and :meth:`Download.deadline` says when to call
:meth:`Download.tick` next.  :mod:`middleware.file_transfer` carries the commands out over TCP and
files; ``tests/testbed/file_sources.py`` carries them out in virtual time.  Each connection has a
number of its own (``conn``), so what a closed connection still says is told apart from its
successor's.

The plan of chunks is :class:`files.ChunkPlan`; a frame's meaning is :func:`file_core.heard`, a
hashed chunk's :func:`file_core.taken`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .file_core import Heard, asks, heard, taken, window
from .files import ChunkPlan, FileOffer

MAX_SOURCES = 8  # connections one download keeps, one of them kept for the offerer
RETRY_SOURCE = 0.5  # a member that had nothing (or was unreachable) is asked again after this
STALLED_RETRY = 30.0  # seconds before a source whose chunks were overdue is asked again, doubling (the offerer: RETRY_SOURCE)
BAD_HASHES_RETRY = 60.0  # seconds before a source that sent a hash list not matching the offer is asked again
ELSEWHERE_WAIT = 0.5  # seconds a chunk the offerer sent elsewhere waits for a member to announce it
SETTLE_WAIT = 0.5  # seconds a new download waits for the members it reaches to say what they hold, before asking the offerer
POLL = 1.0  # seconds between looks at the group's members (new ones, addresses that moved) while fetching
AUTO_IDLE_TURNS = 2  # turns an auto-download gives up without having received a chunk: then it fails


# -- commands ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Connect:
    """Reach ``pid`` for this file as connection ``conn``; tell :meth:`Download.connected` or
    :meth:`Download.lost`."""
    pid: str
    conn: int


@dataclass(frozen=True, slots=True)
class Ask:
    """Send GET for each of ``chunks`` on connection ``conn`` (to ``pid``)."""
    pid: str
    conn: int
    chunks: list[int]


@dataclass(frozen=True, slots=True)
class Close:
    """Close connection ``conn`` (to ``pid``); ``stalled``: its chunks were overdue."""
    pid: str
    conn: int
    stalled: bool = False


@dataclass(frozen=True, slots=True)
class Finish:
    """Every chunk is held: name the file."""


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Nothing came for ``idle`` seconds while another download waits: give the slot up (every
    connection is closed, by the :class:`Close` commands before this one)."""
    idle: float


Command = Connect | Ask | Close | Finish | GiveUp


@dataclass(eq=False, slots=True)
class Link:
    """One connection to a source: ``connected`` once its handshake is done, ``outstanding`` the
    chunks asked on it and not yet answered or checked."""
    pid: str
    conn: int
    connected: bool = False
    outstanding: int = 0


@dataclass(slots=True)
class Timing:
    """A turn's bounds: a chunk's deadline (:func:`files.chunk_deadline`), how long a turn may
    get nothing before it gives way to a download waiting, and how long a source asked for chunks
    may send no byte (:attr:`files.ChunkPlan.silence`)."""
    chunk_deadline: float = math.inf
    idle: float = 5.0
    silence: float = math.inf


# -- the download ------------------------------------------------------------------------------


@dataclass(eq=False)
class Download:
    """One file's fetching at this peer: ``offerer`` is the member that offered it (the fallback
    source), ``me`` this peer.  Lives as long as the download; :meth:`begin` starts each turn."""

    offer: FileOffer
    offerer: str
    me: str
    leaves: list[bytes] | None = None
    links: dict[str, Link] = field(default_factory=dict)  # per source: its current connection
    retry_at: dict[str, float] = field(default_factory=dict)
    stalls: dict[str, int] = field(default_factory=dict)  # sources dropped for an overdue chunk, times each
    holders: set[str] = field(default_factory=set)  # members that said they hold chunks of it
    plan: ChunkPlan | None = None
    fetching: bool = False  # in a turn (holding a slot)
    fetching_since: float = 0.0
    progress_at: float = 0.0  # when this turn last got a chunk (or the hash list)
    progressed: bool = False  # whether this turn got anything
    idle_turns: int = 0  # turns in a row given up without anything received
    due_now: bool = False  # a tick is due at once (a source lost, the file whole, a member reached back)
    timing: Timing = field(default_factory=Timing)
    _have: bytearray = field(default_factory=bytearray)
    _next_conn: int = 0
    _ask_at: list[float] = field(default_factory=list)  # when chunks the offerer sent elsewhere may be asked again

    # -- turns ------------------------------------------------------------------------------

    def begin(self, now: float, have: bytearray, timing: Timing) -> None:
        """A turn starts (a slot is held): ``have`` the chunks held (shared, marked as they come)."""
        self._have, self.timing = have, timing
        self.fetching = True
        self.fetching_since = self.progress_at = now
        self.progressed = False
        self.due_now = False
        self._ask_at = []
        if self.leaves is not None:
            self.plan = self._new_plan()

    def turn_ended(self, auto: bool) -> str | None:
        """The turn gave its slot up: why the download fails now (an auto-download that got nothing
        in :data:`AUTO_IDLE_TURNS` turns), or None to wait for another turn."""
        self.idle_turns = 0 if self.progressed else self.idle_turns + 1
        if auto and self.idle_turns >= AUTO_IDLE_TURNS:
            return f"no member served it in {AUTO_IDLE_TURNS} turns of {self.timing.idle:g} s"
        return None

    def stop(self) -> list[Command]:
        """The download stops fetching (finished, failed, cancelled, or its turn given up): every
        connection closes.  The plan stays (its counts are shown) until a turn starts a new one."""
        closes: list[Command] = [Close(link.pid, link.conn) for link in self.links.values()]
        self.links.clear()
        self.fetching = False
        return closes

    def restart(self) -> None:
        """Asked for again after it failed: its idle turns start over."""
        self.idle_turns = 0

    def reached_back(self, pid: str) -> None:
        """``pid`` connected to this peer to fetch the file too: reach it back at once, not at its
        next retry, so the two split the offerer's chunks."""
        if self.fetching and pid not in self.links:
            self.retry_at.pop(pid, None)
            self.due_now = True

    def deadline(self, now: float) -> float:
        """When :meth:`tick` is due next."""
        if self.due_now:
            return now
        due = now + POLL
        if self.plan is not None:
            if (chunk_due := self.plan.next_due()) is not None:
                due = min(due, max(now, chunk_due) + 0.01)
            if self._ask_at:
                due = min(due, min(self._ask_at))
            settled = self.fetching_since + SETTLE_WAIT
            if now < settled:
                due = min(due, settled)
        return due

    def tick(self, now: float, members: list[str], waiting: bool) -> list[Command]:
        """The timer: drop stalled sources, give the slot up if idle while ``waiting`` (another
        download waits), reach ``members`` (current members other than this peer, with an address
        known) as places allow, ask.  :class:`Finish` once every chunk is held."""
        self.due_now = False
        self._ask_at = [at for at in self._ask_at if at > now]
        if not self.fetching:
            return []
        if self.plan is not None and self.plan.complete:
            return [Finish()]
        out = self._drop_stalled(now)
        # Never shorter than a chunk's deadline: a slow source's next chunk may still come.
        idle = max(self.timing.idle, self.timing.chunk_deadline)
        if now - self.progress_at >= idle and waiting:
            out += self.stop()
            self.plan = None
            return out + [GiveUp(now - self.progress_at)]
        out += self._connect(now, members)
        return out + self._pump(now)

    def _drop_stalled(self, now: float) -> list[Command]:
        """The sources whose chunks are overdue (:meth:`ChunkPlan.stalled`) are closed: their chunks,
        and the ones only they claimed, go to the others, the offerer first among them.  A stalled
        member is asked again after :data:`STALLED_RETRY`, doubling; the offerer, the fallback, at once."""
        plan = self.plan
        if plan is None:
            return []
        out: list[Command] = []
        for pid in plan.stalled(now):
            plan.drop_source(pid)
            stalls = self.stalls[pid] = self.stalls.get(pid, 0) + 1
            # A member stalling again waits twice as long each time (to 8x): a silent claimer of every
            # chunk costs a download one chunk deadline per back-off, not one per STALLED_RETRY.
            self.retry_at[pid] = now + (RETRY_SOURCE if pid == plan.spare
                                        else STALLED_RETRY * 2 ** min(stalls - 1, 3))
            link = self.links.pop(pid, None)
            if link is not None:
                out.append(Close(pid, link.conn, stalled=True))
        return out

    def _connect(self, now: float, members: list[str]) -> list[Command]:
        """Members to reach, the offerer first; the last place is kept for the offerer."""
        candidates = sorted((pid for pid in members if pid != self.me), key=lambda pid: pid != self.offerer)
        dropped = self.plan.dropped if self.plan else set()
        out: list[Command] = []
        for pid in candidates:
            if len(self.links) >= MAX_SOURCES:
                break
            if pid != self.offerer and sum(1 for p in self.links if p != self.offerer) >= MAX_SOURCES - 1:
                break  # whatever the others claim, the offerer stays a fallback
            if pid in self.links or pid in dropped or self.retry_at.get(pid, 0.0) > now:
                continue
            self.retry_at[pid] = now + RETRY_SOURCE
            self._next_conn += 1
            self.links[pid] = Link(pid, self._next_conn)
            out.append(Connect(pid, self._next_conn))
        return out

    def settling(self, now: float) -> bool:
        """Whether the offerer must wait: members reached for this download have not said yet what
        they hold, and the turn began under :data:`SETTLE_WAIT` ago.  Receivers that start together
        thus know each other before their first request, and split the offerer's chunks
        (:meth:`ChunkPlan.pick`) instead of each asking it for the same first window."""
        plan = self.plan
        if plan is None or now - self.fetching_since >= SETTLE_WAIT:
            return False
        return any(pid != plan.spare and pid not in plan.sources and pid not in plan.dropped for pid in self.links)

    def _pump(self, now: float) -> list[Command]:
        """Ask every connected source for as many chunks as its window has room for."""
        plan = self.plan
        if plan is None or not self.fetching:
            return []
        connected = {pid: link for pid, link in self.links.items() if link.connected}
        owed = {pid: link.outstanding for pid, link in connected.items()}
        out: list[Command] = []
        for pid, picked in asks(plan, owed, window(self.offer, len(self.links)), self.settling(now), now).items():
            link = connected[pid]
            link.outstanding += len(picked)
            out.append(Ask(pid, link.conn, picked))
        return out

    def _new_plan(self) -> ChunkPlan:
        return ChunkPlan(self.offer.chunks, self._have, spare=self.offerer, me=self.me,
                         deadline=self.timing.chunk_deadline, silence=self.timing.silence)

    def _current(self, pid: str, conn: int) -> Link | None:
        link = self.links.get(pid)
        return link if link is not None and link.conn == conn else None

    # -- a source's connection ----------------------------------------------------------------

    def connected(self, pid: str, conn: int) -> bool:
        """Connection ``conn``'s handshake is done: whether it is still wanted (else close it)."""
        link = self._current(pid, conn)
        if link is None or not self.fetching:
            return False
        link.connected = True
        return True

    @property
    def needs_hashes(self) -> bool:
        return self.leaves is None

    def hashes(self, pid: str, conn: int, leaves: list[bytes] | None, now: float) -> bool:
        """A source's hash list, checked against the offer (None: it does not match; the source
        is asked again only after :data:`BAD_HASHES_RETRY`): whether it is the download's from now
        on (save it), the first to come."""
        if leaves is None:
            self.retry_at[pid] = now + BAD_HASHES_RETRY
            return False
        if self.plan is not None or self.leaves is not None or not self.fetching:
            return False
        self.leaves = leaves
        self.plan = self._new_plan()
        self.progress_at, self.progressed = now, True
        return True

    def have(self, pid: str, conn: int, bitmap: bytes, announced: list[int], now: float) -> list[Command]:
        """Source ``pid`` said what it holds: ``bitmap`` (HAVE), then ``announced`` (HAVE_ONE while
        its hash list came)."""
        plan = self.plan
        if plan is None or self._current(pid, conn) is None:
            return []
        plan.add_source(pid, bitmap)
        for index in announced:
            plan.source_has(pid, index)
        if any(bitmap) or announced:
            self.holders.add(pid)
        return self._pump(now)

    def frame(self, pid: str, conn: int, kind: int, payload: bytes | memoryview, now: float
              ) -> tuple[Heard, list[Command]]:
        """A frame from source ``pid`` after its HAVE (:func:`file_core.heard`): a chunk to hash is
        ``heard.chunk`` (then :meth:`checked`).  Asks follow only when a request was answered
        without a chunk or the source holds more: a chunk's request is freed once it is checked."""
        plan = self.plan
        if plan is None or self.leaves is None or not self.fetching:
            return Heard(), []
        outcome = heard(plan, self.offer, self.leaves, pid, kind, payload, now, ELSEWHERE_WAIT)
        link = self._current(pid, conn)
        if link is not None:
            link.outstanding -= outcome.freed
        if outcome.holds:
            self.holders.add(pid)
        if outcome.ask_at is not None:
            self._ask_at.append(outcome.ask_at)
        out: list[Command] = []
        if outcome.chunk is None and outcome.freed and plan.dropped and pid in plan.dropped and link is not None:
            self.links.pop(pid, None)
            self.due_now = True
            out.append(Close(pid, conn))  # served garbage once too often
        if outcome.freed or outcome.holds:
            out += self._pump(now)
        return outcome, out

    def bytes_came(self, pid: str, conn: int, now: float) -> None:
        """Bytes came on connection ``conn`` from ``pid`` (any part of a frame): it is not silent."""
        if self.plan is not None and self._current(pid, conn) is not None:
            self.plan.heard_from(pid, now)

    def checked(self, pid: str, conn: int, index: int, digest: bytes, now: float) -> tuple[bool, list[Command]]:
        """Chunk ``index`` from ``pid`` was hashed (``digest``) and written if it matched: whether it
        is now held, and what follows (a liar dropped, more asked, the file whole)."""
        link = self._current(pid, conn)
        if link is not None:
            link.outstanding -= 1
        plan = self.plan
        if plan is None or self.leaves is None or not self.fetching:
            return False, []
        stored = taken(plan, self.leaves, pid, index, digest)
        if stored:
            self.progress_at, self.progressed = now, True
        out: list[Command] = []
        if pid in plan.dropped and link is not None:
            self.links.pop(pid, None)
            self.due_now = True
            out.append(Close(pid, conn))  # served garbage once too often
        out += self._pump(now)
        if plan.complete:
            self.due_now = True
        return stored, out

    def check_failed(self, index: int) -> None:
        """Chunk ``index`` could not be written (the disk): it is asked no more (the download fails)."""
        if self.plan is not None:
            self.plan.unask(index)

    def lost(self, pid: str, conn: int, now: float) -> list[Command]:
        """Connection ``conn`` to ``pid`` ended (refused, NONE or BUSY, closed, broken): what it was
        asked goes to the others."""
        if self._current(pid, conn) is None:
            return []
        del self.links[pid]
        self.due_now = True
        if self.plan is None:
            return []
        self.plan.drop_source(pid)
        return self._pump(now)


__all__ = ["Ask", "Close", "Command", "Connect", "Download", "Finish", "GiveUp", "Link", "Timing",
           "AUTO_IDLE_TURNS", "ELSEWHERE_WAIT", "MAX_SOURCES", "RETRY_SOURCE", "SETTLE_WAIT", "STALLED_RETRY"]
