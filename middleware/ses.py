"""Causal order for direct messages: the Schiper-Eggli-Sandoz algorithm (SES), sans-I/O, no clock.

The seed (``causal-and-total-ordering-notes.txt`` §2.2) gives each process a
vector clock and a buffer S of ``(destination, vector)`` pairs.  A message to
P_j carries the sender's vector time and the whole of S; afterwards the sender
puts ``(j, its vector time)`` into S, replacing any older pair for P_j.  P_i
delivers a message once S_m has no pair for P_i, or that pair's vector is
``<=`` P_i's vector time: every message to P_i that causally precedes it has
then been delivered.  On delivery P_i merges the message's vector time into its
own and S_m into S (component-wise maximum per destination).  A message that
fails the condition is held and checked again after each delivery.

Here the vector clock counts send events only (the condition needs no more),
vectors are sparse (``pid -> count``, absent = 0), and a process ignores its
own component in what it receives: nobody knows more of its sends than it does,
so only a forged stamp could claim otherwise.

Pruning.  Besides the seed's replacing insert and merge, nothing is kept in S
that a vector time already implies:

* the pair inserted on a send to P_j is ``(j, {me: my send count})``, not the
  whole vector time: P_j cannot count that send of mine as seen without having
  delivered it (SES itself holds whatever follows it), and on delivery it
  merges the whole stamp, so the one component asks as much as the seed's
  vector;
* the pair about oneself in S_m is dropped after delivery (it has been met);
* on delivering a message from P_j, what our pair about P_j asks up to P_j's
  vector time (the stamp's) goes, and S_m's pair about P_j is not merged: P_j
  is there already.

Bounds.  At most ``max_parties`` components in the vector time and pairs in S,
and ``2 * max_parties`` components in all of S (so a stamp stays within
``max_stamp_bytes(max_parties)`` on the wire: 4,940 bytes for the default 64);
beyond that the *oldest knowledge gives way*: the component raised least
recently (never one's own) and the pair inserted least recently.  Forgetting a
component or a pair only lowers what later messages ask of their receivers, so
it can weaken the order of messages involving a forgotten party but never make
a receiver wait for something that will not come.  The one exception is a
component of one's *own* vector time that a later message to oneself needs:
that message waits until ``hold_limit``.  Only the components of peers that
write to us can be needed so, so the vector time forgets the others (hearsay)
first, and the correspondents (up to ``max_parties``, least recently heard
first) only when nothing else is left: a stamp naming 63 made-up pids does not
push out the people one talks with.

Held messages are capped per sender (``max_held_per_sender``) and in all
(``max_held``): ``receive`` refuses with ``None`` and the sender's reliable
channel retries later.  A message held for ``hold_limit`` seconds is delivered
anyway by ``expire`` (the caller marks it late), so no stamp blocks a
conversation for good.

Forged stamps.  Every vector in S_m is cut down to the stamp's own vector time
(an honest sender's S never exceeds it), and the receiver's own component is
never taken from a stamp (nobody knows more of its sends than it does), so its
counter cannot be pushed to overflow.  The caller gives ``receive`` only the part
of a stamp about parties that can message the receiver (``SesStamp.restricted``;
:mod:`middleware.direct` keeps the current members of its groups): a demand naming
anyone else could never be met, so it is neither waited for nor merged and relayed.  A member that inflates its stamp holds
its own message until ``hold_limit``; one that inflates a pair about a third
party P_j (and its vector time to match) gets the receiver to relay the demand
to P_j, which may then hold that receiver's next message(s) for up to
``hold_limit`` once, after which P_j has merged the inflated counts and asks
nothing more (when the third party and P_j are among the parties kept).  SES cannot tell forged knowledge from real: the hold limit is
what bounds the harm.
"""

from __future__ import annotations

import heapq
import itertools
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import msgpack

MAX_COUNT = 2**63 - 1
PID_BYTES = 16
DEFAULT_MAX_PARTIES = 64
_STATE_VERSION = 2  # 1: without the correspondents

Vector = dict[str, int]


def _pid_to_wire(pid: str) -> bytes:
    return bytes.fromhex(pid)


def _pid_from_wire(raw: object, where: str) -> str:
    if not isinstance(raw, bytes) or len(raw) != PID_BYTES:
        raise ValueError(f"{where}: a pid is {PID_BYTES} bytes")
    return raw.hex()


def _count_from_wire(raw: object, where: str) -> int:
    if type(raw) is not int or not 0 <= raw <= MAX_COUNT:
        raise ValueError(f"{where}: a count is an int in 0..2**63-1")
    return raw


def max_stamp_bytes(max_parties: int = DEFAULT_MAX_PARTIES) -> int:
    """The most bytes a stamp that ``SesStamp.from_wire`` accepts takes in msgpack."""
    pid, count, index = 2 + PID_BYTES, 9, 2       # bin8 header; uint64; uint8 index (or fixint)
    header = 3 * 3 + 3                            # array headers, generously
    pair = 3 + index + 3                          # [index, vector] and the vector's own header
    return (header + 2 * max_parties * pid + max_parties * (index + count)
            + max_parties * pair + 2 * max_parties * (index + count))


def _pid_at(pids: list[str], raw: object, where: str) -> str:
    if type(raw) is not int or not 0 <= raw < len(pids):
        raise ValueError(f"{where}: a pid index out of range")
    return pids[raw]


def _vector_from_wire(raw: object, pids: list[str], max_parties: int, where: str) -> Vector:
    if not isinstance(raw, list) or len(raw) % 2 or len(raw) > 2 * max_parties:
        raise ValueError(f"{where}: a vector is a flat list of at most {max_parties} (pid, count) pairs")
    vector: Vector = {}
    for position in range(0, len(raw), 2):
        pid = _pid_at(pids, raw[position], where)
        if pid in vector:
            raise ValueError(f"{where}: a pid twice in one vector")
        count = _count_from_wire(raw[position + 1], where)
        if count:
            vector[pid] = count
    return vector


def _cut_to(vector: Mapping[str, int], ceiling: Mapping[str, int]) -> Vector:
    cut = {}
    for pid, count in vector.items():
        count = min(count, ceiling.get(pid, 0))
        if count:
            cut[pid] = count
    return cut


@dataclass(frozen=True, slots=True)
class SesStamp:
    """What a direct message carries for SES: the sender's vector time at the send and its buffer S."""

    clock: dict[str, int]
    buffer: tuple[tuple[str, dict[str, int]], ...]

    def to_wire(self) -> list:
        """``[pids, clock, buffer]``: each pid once (16 bytes), vectors as flat ``[index, count, ...]`` lists."""
        index: dict[str, int] = {}

        def flat(vector: Mapping[str, int]) -> list[int]:
            out: list[int] = []
            for pid, count in vector.items():
                out += (index.setdefault(pid, len(index)), count)
            return out

        clock = flat(self.clock)
        buffer = [[index.setdefault(destination, len(index)), flat(vector)] for destination, vector in self.buffer]
        return [[_pid_to_wire(pid) for pid in index], clock, buffer]

    def restricted(self, keep: Callable[[str], bool]) -> SesStamp:
        """The stamp with only the pids ``keep`` says yes to: components, and pairs about destinations."""
        return SesStamp({pid: count for pid, count in self.clock.items() if keep(pid)},
                        tuple((destination, {pid: count for pid, count in vector.items() if keep(pid)})
                              for destination, vector in self.buffer if keep(destination)))

    @classmethod
    def from_wire(cls, obj: object, max_parties: int = DEFAULT_MAX_PARTIES) -> SesStamp:
        if not isinstance(obj, list) or len(obj) != 3:
            raise ValueError("ses stamp: [pids, clock, buffer]")
        raw_pids, raw_clock, raw_buffer = obj
        if not isinstance(raw_pids, list) or len(raw_pids) > 2 * max_parties:
            raise ValueError(f"ses stamp: at most {2 * max_parties} pids")
        pids = [_pid_from_wire(raw, "ses pids") for raw in raw_pids]
        if len(set(pids)) != len(pids):
            raise ValueError("ses stamp: a pid twice")
        clock = _vector_from_wire(raw_clock, pids, max_parties, "ses clock")
        if not isinstance(raw_buffer, list) or len(raw_buffer) > max_parties:
            raise ValueError(f"ses buffer: S holds at most {max_parties} pairs")
        buffer: dict[str, Vector] = {}
        components = 0
        for pair in raw_buffer:
            if not isinstance(pair, list) or len(pair) != 2:
                raise ValueError("ses buffer: a pair of S is [pid, vector]")
            destination = _pid_at(pids, pair[0], "ses buffer")
            if destination in buffer:
                raise ValueError("ses buffer: a destination twice in S")
            buffer[destination] = _vector_from_wire(pair[1], pids, max_parties, "ses buffer")
            components += len(pair[1]) // 2
            if components > 2 * max_parties:
                raise ValueError(f"ses buffer: S holds at most {2 * max_parties} components in all")
        return cls(clock, tuple(buffer.items()))


@dataclass(slots=True)
class _Held:
    sender: str
    stamp: SesStamp
    received_at: float
    blocker: tuple[str, int]
    """The first component of the pair about us that our vector time has not reached."""


class Ses:
    """One peer's SES state: its vector time, its buffer S and the messages it holds."""

    def __init__(self, me: str, *, max_parties: int = DEFAULT_MAX_PARTIES, hold_limit: float = 120.0,
                 max_held: int = 2000, max_held_per_sender: int = 200) -> None:
        if max_parties < 2:
            raise ValueError("max_parties: at least 2 (oneself and one other)")
        self.me = me
        self.max_parties = max_parties
        self.hold_limit = hold_limit
        self.max_held = max_held
        self.max_held_per_sender = max_held_per_sender
        # Both ordered oldest knowledge first: that is what gives way at the bounds.
        self._clock: OrderedDict[str, int] = OrderedDict()
        self._buffer: OrderedDict[str, Vector] = OrderedDict()
        self._buffer_components = 0
        # Who we delivered from, least recently first: their components are kept before hearsay.
        self._correspondents: OrderedDict[str, None] = OrderedDict()
        self._held: dict[Hashable, _Held] = {}
        # Per pid, held messages by the count they wait for: a raise re-examines only those it satisfies,
        # so releasing a chain of n held messages costs O(n log n), not n scans of everything held.
        self._waiting: dict[str, list[tuple[int, int, Hashable]]] = {}
        self._tie = itertools.count()
        self._raised: list[str] = []
        self._held_per_sender: dict[str, int] = {}
        # Recently delivered keys, so a duplicate is ignored; the caller dedups across restarts.
        self._delivered: set[Hashable] = set()
        self._delivered_order: deque[Hashable] = deque()

    # -- sending ---------------------------------------------------------------------------------------

    def stamp(self, destination: str) -> SesStamp:
        """The send event of one new message to ``destination``: its stamp."""
        if destination == self.me:
            raise ValueError("ses: a direct message goes to someone else")
        sends = min(self._clock.get(self.me, 0) + 1, MAX_COUNT)
        self._raise(self.me, sends)
        stamp = SesStamp(dict(self._clock), tuple((pid, dict(vector)) for pid, vector in self._buffer.items()))
        # The seed inserts (destination, vector time); our own component alone implies the rest: once the
        # destination has delivered our send number `sends`, it has merged this whole vector time.
        self._put_pair(destination, {self.me: sends})
        return stamp

    # -- receiving -------------------------------------------------------------------------------------

    def receive(self, sender: str, key: Hashable, stamp: SesStamp, now: float) -> list[Hashable] | None:
        """Keys delivered now, in order ([] = held or a duplicate); None = refused, the sender retries."""
        if key in self._held or key in self._delivered:
            return []
        stamp = self._sanitised(stamp)
        blocker = self._blocker(stamp)
        if blocker is None:
            delivered = [key]
            self._deliver(sender, key, stamp)
            delivered += self._release()
            return delivered
        if len(self._held) >= self.max_held or self._held_per_sender.get(sender, 0) >= self.max_held_per_sender:
            return None
        self._held[key] = held = _Held(sender, stamp, now, blocker)
        self._held_per_sender[sender] = self._held_per_sender.get(sender, 0) + 1
        self._wait(key, held)
        return []

    def expire(self, now: float) -> list[Hashable]:
        """Deliver what was held past ``hold_limit`` and whatever that releases (all possibly before a cause)."""
        delivered: list[Hashable] = []
        while self._held:
            key, held = next(iter(self._held.items()))
            if held.received_at + self.hold_limit > now:
                break
            self._unhold(key)
            self._deliver(held.sender, key, held.stamp)
            delivered.append(key)
            delivered += self._release()
        return delivered

    def deadline(self) -> float | None:
        """When ``expire`` next has work (held messages are kept in arrival order)."""
        for held in self._held.values():
            return held.received_at + self.hold_limit
        return None

    def held(self) -> int:
        return len(self._held)

    # -- persistence -----------------------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        state = SesStamp(dict(self._clock), tuple(self._buffer.items()))
        correspondents = [_pid_to_wire(pid) for pid in self._correspondents]
        return msgpack.packb([_STATE_VERSION, state.to_wire(), correspondents], use_bin_type=True)

    @classmethod
    def from_bytes(cls, me: str, data: bytes, **limits: Any) -> Ses:
        ses = cls(me, **limits)
        try:
            version, wire, *rest = msgpack.unpackb(data, raw=False)
        except (ValueError, TypeError, msgpack.UnpackException) as error:
            raise ValueError(f"ses state: {error}") from error
        if (version, len(rest)) not in ((1, 0), (_STATE_VERSION, 1)):
            raise ValueError(f"ses state: unknown version {version!r}")
        correspondents = rest[0] if rest else []
        if not isinstance(correspondents, list) or len(correspondents) > ses.max_parties:
            raise ValueError("ses state: correspondents")
        for raw in correspondents:
            ses._correspondents[_pid_from_wire(raw, "ses state")] = None
        state = SesStamp.from_wire(wire, ses.max_parties)
        for pid, count in state.clock.items():
            ses._raise(pid, count)
        for pid, vector in state.buffer:
            ses._put_pair(pid, _cut_to(vector, ses._clock))
        return ses

    # -- inside ----------------------------------------------------------------------------------------

    def _sanitised(self, stamp: SesStamp) -> SesStamp:
        return SesStamp(stamp.clock, tuple((destination, _cut_to(vector, stamp.clock))
                                           for destination, vector in stamp.buffer))

    def _blocker(self, stamp: SesStamp) -> tuple[str, int] | None:
        """The delivery condition: None if met, else a (pid, count) our vector time has yet to reach."""
        for destination, vector in stamp.buffer:
            if destination == self.me:
                for pid, count in vector.items():
                    if pid != self.me and count > self._clock.get(pid, 0):
                        return pid, count
        return None

    def _wait(self, key: Hashable, held: _Held) -> None:
        pid, count = held.blocker
        heapq.heappush(self._waiting.setdefault(pid, []), (count, next(self._tie), key))

    def _deliver(self, sender: str, key: Hashable, stamp: SesStamp) -> None:
        self._remember(key)
        self._correspondents.pop(sender, None)
        self._correspondents[sender] = None
        while len(self._correspondents) > self.max_parties:
            self._correspondents.popitem(last=False)
        for pid, count in stamp.clock.items():
            if pid != self.me and count > self._clock.get(pid, 0):
                self._raise(pid, count)
        for destination, vector in stamp.buffer:
            if destination == self.me:
                continue
            if destination == sender:
                continue                 # cut to the sender's own vector time: it meets all of it
            mine = self._buffer.get(destination)
            merged = vector if mine is None else {pid: max(mine.get(pid, 0), vector.get(pid, 0))
                                                  for pid in mine.keys() | vector.keys()}
            self._put_pair(destination, _cut_to(merged, self._clock))
        # The sender's vector time is the stamp's: what we would ask of it up to there it meets anyway.
        mine = self._buffer.get(sender)
        if mine is not None:
            self._put_pair(sender, {pid: count for pid, count in mine.items() if count > stamp.clock.get(pid, 0)})

    def _release(self) -> list[Hashable]:
        released: list[Hashable] = []
        while self._raised:
            pid = self._raised.pop()
            waiting = self._waiting.get(pid)
            reached = self._clock.get(pid, 0)
            while waiting and waiting[0][0] <= reached:
                count, _, key = heapq.heappop(waiting)
                held = self._held.get(key)
                if held is None or held.blocker != (pid, count):
                    continue                 # delivered by expire, or waiting on something else since
                blocker = self._blocker(held.stamp)
                if blocker is not None:
                    held.blocker = blocker
                    self._wait(key, held)
                    continue
                self._unhold(key)
                self._deliver(held.sender, key, held.stamp)
                released.append(key)
                reached = self._clock.get(pid, 0)
            if not waiting:
                self._waiting.pop(pid, None)
        return released

    def _unhold(self, key: Hashable) -> None:
        held = self._held.pop(key)
        left = self._held_per_sender[held.sender] - 1
        if left:
            self._held_per_sender[held.sender] = left
        else:
            del self._held_per_sender[held.sender]

    def _remember(self, key: Hashable) -> None:
        self._delivered.add(key)
        self._delivered_order.append(key)
        while len(self._delivered_order) > max(self.max_held, 1):
            self._delivered.discard(self._delivered_order.popleft())

    def _raise(self, pid: str, count: int) -> None:
        self._clock.pop(pid, None)
        self._clock[pid] = count
        if pid in self._waiting:
            self._raised.append(pid)
        while len(self._clock) > self.max_parties:
            # Hearsay goes first: only the components of peers that write to us can hold our messages.
            others = [other for other in self._clock if other != self.me]
            forgotten = next((other for other in others if other not in self._correspondents), others[0])
            del self._clock[forgotten]
            for destination, vector in list(self._buffer.items()):
                if vector.pop(forgotten, None) is not None:
                    self._buffer_components -= 1
                    if not vector:
                        del self._buffer[destination]

    def _put_pair(self, destination: str, vector: Vector) -> None:
        self._buffer_components -= len(self._buffer.pop(destination, {}))
        if destination == self.me or not vector:
            return
        self._buffer[destination] = vector
        self._buffer_components += len(vector)
        while len(self._buffer) > self.max_parties or self._buffer_components > 2 * self.max_parties:
            self._buffer_components -= len(self._buffer.popitem(last=False)[1])

    # For tests and the study: read-only views.
    def clock(self) -> dict[str, int]:
        return dict(self._clock)

    def buffer(self) -> dict[str, dict[str, int]]:
        return {pid: dict(vector) for pid, vector in self._buffer.items()}

