"""Test support: a download's core (:class:`middleware.file_download.Download`) against simulated
sources, in virtual time, with no socket, file or thread.

:class:`FileSim` carries the download's commands out the way :class:`file_transfer.FileService`
does over TCP: a :class:`~middleware.file_download.Connect` reaches a :class:`SimSource` (or does
not), which answers HAVE (and the hash list, the first time), then serves each chunk asked at its
own rate, one after the other (telling the download its bytes are coming every
:data:`~middleware.file_transfer.LOW_WATER` bytes, as the socket wakes the service); a chunk
frame is hashed at once and told back as :meth:`Download.checked`; a :class:`~middleware.file_download.Close` ends the connection, dropping
what it still had on the way.  The download's timer is ticked at :meth:`Download.deadline`.
Sources misbehave on request: one never serves (``stall``), one serves garbage (``liar``), one's
connection breaks after some chunks (``vanish_after``), one is unreachable.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from dataclasses import dataclass, field

from m2mc.middleware.file_core import CHUNK, INDEX
from m2mc.middleware.file_download import Ask, Close, Connect, Download, Finish, GiveUp, Timing
from m2mc.middleware.file_transfer import LOW_WATER
from m2mc.middleware.files import CHUNK_DEADLINE, FileOffer, chunk_deadline, leaf_hash, tree_root


def sample_file(chunks: int, chunk_size: int = 256 * 1024, tail: int = 1000) -> tuple[FileOffer, list[bytes]]:
    """An offer of ``chunks`` chunks (the last ``tail`` bytes long), and the chunks themselves."""
    data = [bytes([index % 251]) * chunk_size for index in range(chunks - 1)] + [b"\xfe" * tail]
    leaves = [leaf_hash(chunk) for chunk in data]
    size = sum(len(chunk) for chunk in data)
    return FileOffer("sample.bin", size, "application/octet-stream", "0" * 64, chunk_size,
                     tree_root(leaves).hex()), data


@dataclass
class SimSource:
    """A member that holds chunks of the file.  ``rate``: bytes a second it sends; ``latency``:
    seconds from a request sent to its first byte back.  Misbehaviours: ``stall`` (answers HAVE,
    never serves a chunk), ``liar`` (serves every chunk with its bytes changed), ``vanish_after``
    (its connection breaks once it has sent that many chunks), ``reachable`` False (never connects)."""

    pid: str
    holds: bytearray | None = None  # None: the whole file
    rate: float = 50e6
    latency: float = 0.001
    stall: bool = False
    liar: bool = False
    vanish_after: int | None = None
    reachable: bool = True
    sent: int = 0  # chunk frames sent
    busy_until: float = 0.0


@dataclass(repr=False)
class FileSim:
    """One download against ``sources`` from virtual time 1000 on.  ``have``/``leaves``: what a
    restart restored (else nothing held, the hash list fetched from the first source)."""

    offer: FileOffer
    data: list[bytes]
    sources: list[SimSource]
    me: str = "me"
    offerer: str | None = None  # the first source unless given
    have: bytearray | None = None
    leaves: list[bytes] | None = None
    waiting: bool = False  # another download waits for a slot
    silence: float = CHUNK_DEADLINE  # how long a source asked for chunks may send nothing, as the service has it
    now: float = 1000.0
    finished_at: float | None = None
    gave_up_at: float | None = None
    good_bytes: int = 0  # chunk bytes hashed and matching their leaf
    bad_bytes: int = 0  # chunk bytes hashed and not matching
    unchecked_bytes: int = 0  # chunk bytes refused before hashing (not asked of that source)
    written: dict[int, bytes] = field(default_factory=dict)
    asked: list[tuple[float, str, int]] = field(default_factory=list)  # (when, of whom, chunk)
    served_by: dict[int, str] = field(default_factory=dict)  # chunk -> the source whose copy was taken
    closed: list[tuple[float, str, bool]] = field(default_factory=list)  # (when, pid, for a stall) per Close
    connects: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.by_pid = {source.pid: source for source in self.sources}
        self.offerer = self.offerer or self.sources[0].pid
        self.have = self.have if self.have is not None else bytearray(self.offer.chunks)
        self.download = Download(self.offer, self.offerer, self.me, self.leaves)
        self.open: set[int] = set()  # connections up
        self._events: list = []
        self._seq = itertools.count()
        self._timer = 0
        self._timer_at: float | None = None

    # -- the event queue --------------------------------------------------------------------

    def at(self, when: float, action, *args) -> None:
        heapq.heappush(self._events, (when, next(self._seq), action, args))

    def run(self, until: float = 10_000.0, stop_when=None) -> None:
        """Events in time order until the download finished or gave up, ``stop_when()`` holds, or
        virtual time reaches ``until``."""
        if not self.download.fetching:
            self.download.begin(self.now, self.have, Timing(chunk_deadline(self.offer.chunk_size), 5.0, self.silence))
            self._tick()
        while self._events and self.finished_at is None and self.gave_up_at is None:
            when, _, action, args = heapq.heappop(self._events)
            if when > until:
                break
            self.now = max(self.now, when)
            action(*args)
            if stop_when is not None and stop_when():
                break
            self._schedule_tick()

    def _schedule_tick(self) -> None:
        """The download's timer at its deadline, unless the one set fires no later (an early tick
        is harmless; that one sets the next)."""
        due = self.download.deadline(self.now)
        if self._timer_at is not None and self._timer_at <= due:
            return
        self._timer += 1
        self._timer_at = due
        self.at(due, self._timer_fired, self._timer)

    def _timer_fired(self, generation: int) -> None:
        if generation == self._timer:
            self._timer_at = None
            self._tick()

    def _tick(self) -> None:
        members = [source.pid for source in self.sources]
        self.carry(self.download.tick(self.now, members, self.waiting))

    # -- commands ------------------------------------------------------------------------------

    def carry(self, commands) -> None:
        for command in commands:
            if isinstance(command, Connect):
                self.connects[command.pid] += 1
                source = self.by_pid[command.pid]
                self.at(self.now + 0.002, self._connected, source, command.conn)
            elif isinstance(command, Ask):
                self._ask(self.by_pid[command.pid], command.conn, command.chunks)
            elif isinstance(command, Close):
                self.closed.append((self.now, command.pid, command.stalled))
                self._close(command.pid, command.conn)
            elif isinstance(command, Finish):
                self.finished_at = self.now
                self.carry(self.download.stop())
            elif isinstance(command, GiveUp):
                self.gave_up_at = self.now

    def _close(self, pid: str, conn: int) -> None:
        """The connection ends (what it was sending is lost), and its reader tells the download."""
        if conn in self.open:
            self.open.discard(conn)
            self.carry(self.download.lost(pid, conn, self.now))

    def _connected(self, source: SimSource, conn: int) -> None:
        if not source.reachable:
            self.carry(self.download.lost(source.pid, conn, self.now))
            return
        if not self.download.connected(source.pid, conn):
            return
        self.open.add(conn)
        if self.download.needs_hashes:
            leaves = [leaf_hash(chunk) for chunk in self.data]
            self.download.hashes(source.pid, conn, leaves, self.now)
            if self.leaves is None:
                self.leaves = leaves
        holds = source.holds if source.holds is not None else b"\x01" * self.offer.chunks
        self.carry(self.download.have(source.pid, conn, bytes(holds), [], self.now))

    def _ask(self, source: SimSource, conn: int, chunks: list[int]) -> None:
        for index in chunks:
            self.asked.append((self.now, source.pid, index))
            if source.stall:
                continue
            length = self.offer.chunk_length(index)
            start = max(self.now + source.latency, source.busy_until)
            source.busy_until = start + length / source.rate
            for part in range(1, length // LOW_WATER):  # the socket wakes the service as bytes come
                self.at(start + part * LOW_WATER / source.rate, self._bytes_came, source, conn)
            self.at(source.busy_until, self._chunk_came, source, conn, index)

    def _bytes_came(self, source: SimSource, conn: int) -> None:
        if conn in self.open:
            self.download.bytes_came(source.pid, conn, self.now)

    def _chunk_came(self, source: SimSource, conn: int, index: int) -> None:
        if conn not in self.open:
            return  # sent on a connection since closed: never read
        if source.vanish_after is not None and source.sent >= source.vanish_after:
            self._close(source.pid, conn)  # its connection breaks
            return
        source.sent += 1
        chunk = self.data[index]
        if source.liar:
            chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
        outcome, commands = self.download.frame(source.pid, conn, CHUNK, INDEX.pack(index) + chunk, self.now)
        if outcome.chunk is None:
            self.unchecked_bytes += len(chunk)
        else:
            at, received = outcome.chunk
            digest = leaf_hash(received)
            if digest == self.download.leaves[at]:
                self.good_bytes += len(received)
                self.written[at] = bytes(received)
            else:
                self.bad_bytes += len(received)
            stored, more = self.download.checked(source.pid, conn, at, digest, self.now)
            if stored:
                self.served_by[at] = source.pid
            commands = commands + more
        self.carry(commands)

    # -- what a test looks at ----------------------------------------------------------------

    def whole(self) -> bool:
        """Every chunk held, and the bytes written are the file's."""
        return all(self.have) and all(self.written.get(i, self.data[i]) == self.data[i]
                                      for i in range(self.offer.chunks))

    def asked_of(self, pid: str) -> set[int]:
        return {index for _, who, index in self.asked if who == pid}


__all__ = ["FileSim", "SimSource", "sample_file"]
