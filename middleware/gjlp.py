"""GJLP: group join/leave and discovery (thesis ch. 5), as a core without I/O.

Inputs are user calls (``create_group``, ``join``, ``leave``, ``advertise``),
``receive(sender, message, now)`` for control-channel messages and
``handle_timer(now)``.  Outputs are drained with ``datagrams_to_send()`` (messages
for the control channel), ``events()`` and ``get_timer()``.

Beyond the thesis:
- Answers to an advertisement wait a random jitter, and a group is dropped from
  a pending answer when another peer's answer already said the same about it,
  so twenty peers do not all answer at once.
- Membership entries carry an epoch (the member's join count).  A higher epoch
  wins; at equal epochs "left" overrides "current", the thesis's merge rule.
  That lets a member who left come back.
- Peers are identified by pid only, never by address.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from . import wire
from .types import GroupView, Member

CURRENT, LEFT = "current", "left"


def group_address(gid: str, control_addr: str = "239.255.77.77") -> str:
    """The multicast address of a group's data channel, derived from its gid.

    Taken from 239.255.0.0/16 (administratively scoped), skipping .0 and .255
    octets and the control channel's own address.
    """
    digest = hashlib.sha256(gid.encode()).digest()
    for offset in range(0, len(digest) - 1, 2):
        third, fourth = digest[offset], digest[offset + 1]
        candidate = f"239.255.{third}.{fourth}"
        if fourth not in (0, 255) and candidate != control_addr:
            return candidate
    return "239.255.1.1"


# -- events -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupSeen:
    """A group was learnt of (``new``) or its description/members changed."""

    gid: str
    new: bool


@dataclass(frozen=True, slots=True)
class MemberJoined:
    gid: str
    member: Member


@dataclass(frozen=True, slots=True)
class MemberLeft:
    gid: str
    member: Member


Event = GroupSeen | MemberJoined | MemberLeft


@dataclass(slots=True)
class GroupRecord:
    """One row of the thesis's GrpsInfoIndexTable."""

    gid: str
    desc: str
    addr: str
    port: int
    private: bool
    members: dict[str, tuple[str, int, str]] = field(default_factory=dict)  # pid -> (name, epoch, state)
    last_seen: float = 0.0
    sources: set[str] = field(default_factory=set)
    member_count_hint: int = 0  # from zeroconf, when no member list is known
    salt: bytes = b""  # private groups: scrypt salt and key check, announced with the group
    key_check: bytes = b""

    @classmethod
    def from_info(cls, info: wire.GroupInfo) -> GroupRecord:
        return cls(info.gid, info.desc, info.addr, info.port, info.private, salt=info.salt, key_check=info.key_check)

    def is_current(self, pid: str) -> bool:
        """Whether ``pid`` is a current member (one dict look-up: called for every datagram)."""
        entry = self.members.get(pid)
        return entry is not None and entry[2] == CURRENT

    def current(self) -> tuple[Member, ...]:
        return tuple(Member(p, n, e) for p, (n, e, s) in sorted(self.members.items()) if s == CURRENT)

    def left(self) -> tuple[Member, ...]:
        return tuple(Member(p, n, e) for p, (n, e, s) in sorted(self.members.items()) if s == LEFT)

    def to_wire(self) -> wire.GroupInfo:
        return wire.GroupInfo(
            self.gid, self.desc, self.addr, self.port, self.private,
            tuple((m.pid, m.name, m.epoch) for m in self.current()),
            tuple((m.pid, m.name, m.epoch) for m in self.left()),
            self.salt, self.key_check,
        )

    def view(self, me: str) -> GroupView:
        current = self.current()
        entry = self.members.get(me)
        return GroupView(
            self.gid, self.desc, self.addr, self.port, self.private,
            joined=entry is not None and entry[2] == CURRENT,
            members=current, left=self.left(),
            member_count=len(current) if self.members else self.member_count_hint,
            last_seen=self.last_seen, sources=frozenset(self.sources),
        )


class Gjlp:
    """Group discovery and membership for one peer."""

    def __init__(
        self,
        pid: str,
        name: str,
        rng: random.Random | None = None,
        answer_delay: tuple[float, float] = (0.02, 0.25),
    ) -> None:
        self.pid = pid
        self.name = name
        self.groups: dict[str, GroupRecord] = {}
        self._rng = rng or random.Random()
        self._answer_delay = answer_delay
        self._outbox: list[wire.Message] = []
        self._events: list[Event] = []
        # A pending answer to advertisements: the gids still worth announcing, and when.
        self._answer_gids: set[str] = set()
        self._answer_at: float | None = None
        self.answers_suppressed = 0

    # -- user calls ---------------------------------------------------------

    def restore(self, record: GroupRecord) -> None:
        """Load a group from the store at start (no events, nothing sent)."""
        self.groups[record.gid] = record

    def advertise(self) -> None:
        self._outbox.append(wire.Adv(self.name))

    def create_group(self, gid: str, desc: str, addr: str, port: int, now: float,
                     salt: bytes = b"", key_check: bytes = b"") -> GroupRecord:
        record = GroupRecord(gid, desc, addr, port, bool(salt), last_seen=now, sources={"local"},
                             salt=salt, key_check=key_check)
        record.members[self.pid] = (self.name, 1, CURRENT)
        self.groups[gid] = record
        self._outbox.append(wire.GroupsInfo((record.to_wire(),)))
        return record

    def join(self, gid: str, now: float) -> GroupRecord:
        record = self.groups[gid]
        entry = record.members.get(self.pid)
        if entry is not None and entry[2] == CURRENT:
            return record
        epoch = entry[1] + 1 if entry else 1
        record.members[self.pid] = (self.name, epoch, CURRENT)
        record.last_seen = now
        self._outbox.append(wire.Join(gid, self.name, epoch))
        return record

    def leave(self, gid: str, now: float) -> None:
        record = self.groups[gid]
        entry = record.members.get(self.pid)
        if entry is None or entry[2] != CURRENT:
            return
        record.members[self.pid] = (self.name, entry[1], LEFT)
        record.last_seen = now
        self._answer_gids.discard(gid)
        self._outbox.append(wire.Leave(gid, self.name, entry[1]))

    def is_member(self, gid: str) -> bool:
        record = self.groups.get(gid)
        entry = record.members.get(self.pid) if record else None
        return entry is not None and entry[2] == CURRENT

    def joined_gids(self) -> list[str]:
        return [gid for gid in self.groups if self.is_member(gid)]

    def note_zeroconf(self, info: wire.GroupInfo, member_count: int, now: float) -> None:
        """A group seen in a DNS-SD announcement: same table, fewer facts."""
        record = self.groups.get(info.gid)
        new = record is None
        if new:
            record = self.groups[info.gid] = GroupRecord.from_info(info)
        changed = new or "zeroconf" not in record.sources or record.member_count_hint != member_count
        record.sources.add("zeroconf")
        record.member_count_hint = member_count
        record.last_seen = now
        if changed:
            self._events.append(GroupSeen(info.gid, new))

    # -- network input ------------------------------------------------------

    def receive(self, sender: str, message: wire.Message, now: float) -> None:
        if isinstance(message, wire.Adv):
            if sender != self.pid:
                self._schedule_answer(now)
        elif isinstance(message, wire.GroupsInfo):
            for info in message.groups:
                self._merge(info, now)
                if sender != self.pid:
                    self._suppress_if_covered(info)
        elif isinstance(message, wire.Join):
            self._apply(message.gid, sender, message.name, message.epoch, CURRENT, now)
        elif isinstance(message, wire.Leave):
            self._apply(message.gid, sender, message.name, message.epoch, LEFT, now)

    def _merge(self, info: wire.GroupInfo, now: float) -> None:
        record = self.groups.get(info.gid)
        if record is None:
            record = self.groups[info.gid] = GroupRecord.from_info(info)
            self._events.append(GroupSeen(info.gid, True))
        record.sources.add("gjlp")
        record.last_seen = now
        for pid, name, epoch in info.left:
            self._apply(info.gid, pid, name, epoch, LEFT, now)
        for pid, name, epoch in info.members:
            self._apply(info.gid, pid, name, epoch, CURRENT, now)

    def _apply(self, gid: str, pid: str, name: str, epoch: int, state: str, now: float) -> None:
        record = self.groups.get(gid)
        if record is None:
            return  # a join/leave for a group we have never heard described
        old = record.members.get(pid)
        if old is not None:
            old_name, old_epoch, old_state = old
            newer = epoch > old_epoch or (epoch == old_epoch and state == LEFT and old_state == CURRENT)
            if not newer:
                return
            if pid == self.pid and old_state == CURRENT and state == LEFT and epoch == old_epoch:
                return  # only this peer decides that it has left (a stale echo would undo a rejoin)
        record.members[pid] = (name, epoch, state)
        record.last_seen = now
        member = Member(pid, name, epoch)
        if old is None or old[2] != state:
            self._events.append(MemberJoined(gid, member) if state == CURRENT else MemberLeft(gid, member))
        else:
            self._events.append(GroupSeen(gid, False))

    # -- answers to advertisements -------------------------------------------

    def _schedule_answer(self, now: float) -> None:
        gids = set(self.joined_gids())
        if not gids:
            return
        self._answer_gids |= gids
        if self._answer_at is None:
            self._answer_at = now + self._rng.uniform(*self._answer_delay)

    def _suppress_if_covered(self, info: wire.GroupInfo) -> None:
        """Drop ``info.gid`` from our pending answer if ``info`` already says all we would."""
        if info.gid not in self._answer_gids:
            return
        ours = self.groups[info.gid].to_wire()
        if set(ours.members) <= set(info.members) and set(ours.left) <= set(info.left):
            self._answer_gids.discard(info.gid)
            self.answers_suppressed += 1
            if not self._answer_gids:
                self._answer_at = None

    def get_timer(self) -> float | None:
        return self._answer_at

    def handle_timer(self, now: float) -> None:
        if self._answer_at is None or now < self._answer_at:
            return
        infos = tuple(self.groups[gid].to_wire() for gid in sorted(self._answer_gids) if self.is_member(gid))
        self._answer_gids.clear()
        self._answer_at = None
        # Stay under the datagram limit: a few groups per GROUPS_INFO.
        for start in range(0, len(infos), 8):
            self._outbox.append(wire.GroupsInfo(infos[start : start + 8]))

    # -- output ---------------------------------------------------------------

    def datagrams_to_send(self) -> list[wire.Message]:
        out, self._outbox = self._outbox, []
        return out

    def events(self) -> list[Event]:
        out, self._events = self._events, []
        return out
