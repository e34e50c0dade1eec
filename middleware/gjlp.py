"""GJLP: group join/leave and discovery (thesis ch. 5), as a core without I/O.

Inputs are user calls (``create_group``, ``join``, ``leave``, ``rename``,
``advertise``), ``receive(sender, message, now)`` for control-channel messages,
``note_zeroconf`` for DNS-SD sightings and ``handle_timer(now)``.  Outputs are
drained with ``datagrams_to_send()`` (messages for the control channel),
``events()`` and ``get_timer()``.

Who may change what (the Matrix and Briar rule: authority is checked on receipt):
- A group is what its creator signed: a :class:`wire.GroupDescriptor` whose hash
  is the gid.  A descriptor that does not hash to its gid or is not signed by its
  creator key is dropped and counted; once verified, a group's fixed fields
  never change.  A group seen only in a zeroconf announcement is not joinable
  until its descriptor has been fetched (an ADV naming the gid) and verified.
- A membership changes only by the member's own signed :class:`wire.MemberRecord`.
  Its counter grows with every change (join, leave, new name): a higher counter
  wins, an equal or lower one (a replay) changes nothing.  Records are verified
  only when they would change something, so relays of known records cost a
  comparison.  In a private group, members also check each record's key proof.
- Nobody changes this peer's own entry: a record of ours that we did not expect
  (newer than ours: our store lost a change) makes us re-sign our own state above it.
- At most MAX_MEMBERS records are kept per group and MAX_GROUPS groups are known;
  beyond that, new ones are refused and counted.

Beyond the thesis, answers to an advertisement wait a random jitter, and a group
is dropped from a pending answer when another peer's answer already said the
same about it, so twenty peers do not all answer at once.  Peers are identified
by pid only, never by address.
"""

from __future__ import annotations

import hashlib
import hmac
import random
from dataclasses import dataclass, field

from . import crypto, names, wire
from .types import GroupView, Member, UsageError

MAX_MEMBERS = 1_000  # member records (joined or left) kept per group
MAX_GROUPS = 1_000  # groups known at once; joined ones are never evicted for new ones
# Member records held for groups this peer is not in (shown in the discovery list only):
# without this, 1,000 groups of 1,000 records each would hold about half a gigabyte.
MAX_OUTSIDE_RECORDS = 50_000
RECORDS_PER_INFO = 100  # member records in one GroupInfo of an answer: at most ~45 KB
INFO_BUDGET = 60_000  # bytes of GroupInfos per GROUPS_INFO datagram (estimated)
FETCH_INTERVAL = 2.0  # seconds between ADVs that fetch zeroconf-only groups' descriptors
# A GROUPS_INFO answer can be ~100 times its ADV (a thousand member records), so this peer
# answers at most once per ANSWER_INTERVAL: a flood of ADVs coalesces into one answer.
ANSWER_INTERVAL = 2.0
MAX_FETCH = 64  # gids asked for in one ADV


def group_address(seed: str, control_addr: str = "239.255.77.77") -> str:
    """A multicast address for a group's data channel, derived from ``seed``.

    Taken from 239.255.0.0/16 (administratively scoped), skipping .0 and .255
    octets and the control channel's own address.
    """
    digest = hashlib.sha256(seed.encode()).digest()
    for offset in range(0, len(digest) - 1, 2):
        third, fourth = digest[offset], digest[offset + 1]
        candidate = f"239.255.{third}.{fourth}"
        if fourth not in (0, 255) and candidate != control_addr:
            return candidate
    return "239.255.1.1"


# -- events -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupSeen:
    """A group was learnt of (``new``) or what is known of it changed."""

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


@dataclass(frozen=True, slots=True)
class MemberUpdated:
    """A member's record changed without a join or leave (a new name, a higher counter)."""

    gid: str
    member: Member


Event = GroupSeen | MemberJoined | MemberLeft | MemberUpdated


@dataclass(slots=True)
class GroupRecord:
    """One row of the thesis's GrpsInfoIndexTable.

    ``descriptor`` is None for a group seen only in zeroconf (not yet verified) and
    for a legacy group, stored before descriptors existed (``legacy``: kept readable,
    never joined or announced again).
    """

    gid: str
    desc: str
    addr: str
    port: int
    private: bool
    descriptor: wire.GroupDescriptor | None = None
    members: dict[str, wire.MemberRecord] = field(default_factory=dict)  # pid -> the member's own record
    last_seen: float = 0.0
    sources: set[str] = field(default_factory=set)
    member_count_hint: int = 0  # from zeroconf, when no member list is known
    legacy: bool = False

    @classmethod
    def from_descriptor(cls, gid: str, descriptor: wire.GroupDescriptor) -> GroupRecord:
        return cls(gid, descriptor.desc, descriptor.addr, descriptor.port, descriptor.private, descriptor)

    @property
    def verified(self) -> bool:
        return self.descriptor is not None

    @property
    def salt(self) -> bytes:
        return self.descriptor.salt if self.descriptor else b""

    @property
    def key_check(self) -> bytes:
        return self.descriptor.key_check if self.descriptor else b""

    def is_current(self, pid: str) -> bool:
        """Whether ``pid`` is a current member (one dict look-up: called for every datagram)."""
        record = self.members.get(pid)
        return record is not None and record.joined

    def current(self) -> tuple[Member, ...]:
        return tuple(_member(p, r) for p, r in sorted(self.members.items()) if r.joined)

    def left(self) -> tuple[Member, ...]:
        return tuple(_member(p, r) for p, r in sorted(self.members.items()) if not r.joined)

    def to_wire(self) -> list[wire.GroupInfo]:
        """The group as GroupInfos of at most RECORDS_PER_INFO member records each."""
        records = [self.members[pid] for pid in sorted(self.members)]
        chunks = [records[i:i + RECORDS_PER_INFO] for i in range(0, len(records), RECORDS_PER_INFO)] or [[]]
        return [wire.GroupInfo(self.gid, self.descriptor, tuple(chunk)) for chunk in chunks]

    def view(self, me: str) -> GroupView:
        current = self.current()
        return GroupView(
            self.gid, self.desc, self.addr, self.port, self.private,
            joined=self.verified and self.is_current(me),
            members=current, left=self.left(),
            member_count=len(current) if self.members else self.member_count_hint,
            last_seen=self.last_seen, sources=frozenset(self.sources),
            verified=self.verified, legacy=self.legacy,
            creator=crypto.pid_of(self.descriptor.creator_key) if self.descriptor else "",
        )


def _member(pid: str, record: wire.MemberRecord) -> Member:
    """A member as shown: the name of its own record, without invisible or text-direction characters."""
    return Member(pid, names.shown(record.name), record.counter)


def _info_size(info: wire.GroupInfo) -> int:
    """A bound on the encoded size of ``info``: strings counted at 4 bytes a character."""
    return 1_200 + sum(160 + 4 * len(record.name) for record in info.members)


class Gjlp:
    """Group discovery and membership for one peer."""

    def __init__(
        self,
        identity: crypto.Identity,
        name: str,
        rng: random.Random | None = None,
        answer_delay: tuple[float, float] = (0.02, 0.25),
        control_addr: str = "239.255.77.77",
    ) -> None:
        self.identity = identity
        self.pid = identity.pid
        self.name = name
        self.control_addr = control_addr
        self.groups: dict[str, GroupRecord] = {}
        self.keys: dict[str, bytes] = {}  # private groups' keys, for key proofs
        self._rng = rng or random.Random()
        self._answer_delay = answer_delay
        self._outbox: list[wire.Message] = []
        self._events: list[Event] = []
        # A pending answer to advertisements: the gids still worth announcing, and when.
        self._answer_gids: set[str] = set()
        self._answer_at: float | None = None
        self._last_answer = float("-inf")
        self._outside_records = 0  # member records held for groups this peer is not in
        self._wanted: set[str] = set()  # zeroconf-only gids whose descriptors to fetch
        self._fetch_at: float | None = None
        self._last_fetch = float("-inf")
        self.answers_suppressed = 0
        self.descriptors_rejected = 0  # not signed by its creator, or not hashing to its gid
        self.descriptor_conflicts = 0  # the same, for a gid already known: nothing changes
        self.member_records_rejected = 0  # bad signature, or no valid key proof in a private group
        self.member_records_stale = 0  # replays and records older than the one held
        self.member_records_refused = 0  # a group already holds MAX_MEMBERS records
        self.groups_refused = 0  # MAX_GROUPS reached

    # -- user calls ---------------------------------------------------------

    def advertise(self) -> None:
        self._outbox.append(wire.Adv(self.name))

    def create_group(self, descriptor: wire.GroupDescriptor, now: float, key: bytes | None = None) -> GroupRecord:
        gid = descriptor.gid
        record = GroupRecord.from_descriptor(gid, descriptor)
        record.last_seen, record.sources = now, {"local"}
        if key:
            self.keys[gid] = key
        self.groups[gid] = record
        record.members[self.pid] = self._sign(gid, 1, True)
        self._outbox.append(wire.GroupsInfo(tuple(record.to_wire())))
        return record

    def join(self, gid: str, now: float, key: bytes | None = None) -> GroupRecord:
        record = self.groups[gid]
        if not record.verified:
            raise ValueError(f"group {gid} has no verified descriptor")
        if key:
            self.keys[gid] = key
            # Records taken as an outsider, who could not check key proofs: keep only the key holders'.
            for pid, member in list(record.members.items()):
                if pid != self.pid and not self._key_proof_holds(record, member):
                    del record.members[pid]
                    self.member_records_rejected += 1
        own = record.members.get(self.pid)
        if own is not None and own.joined:
            return record
        record.members[self.pid] = self._sign(gid, own.counter + 1 if own else 1, True)
        record.last_seen = now
        self._outbox.append(wire.Join(record.members[self.pid]))
        self._count_outside()
        return record

    def leave(self, gid: str, now: float) -> None:
        record = self.groups[gid]
        own = record.members.get(self.pid)
        if own is None or not own.joined:
            return
        record.members[self.pid] = self._sign(gid, own.counter + 1, False)
        record.last_seen = now
        self._answer_gids.discard(gid)
        self._outbox.append(wire.Leave(record.members[self.pid]))
        self._count_outside()

    def rename(self, name: str) -> list[str]:
        """A new display name, re-announced (a new signed record) in every joined group."""
        self.name = name
        gids = self.joined_gids()
        for gid in gids:
            own = self.groups[gid].members[self.pid]
            self.groups[gid].members[self.pid] = self._sign(gid, own.counter + 1, True)
            self._outbox.append(wire.Join(self.groups[gid].members[self.pid]))
        return gids

    def _sign(self, gid: str, counter: int, joined: bool) -> wire.MemberRecord:
        if counter > wire.MAX_MEMBER_COUNTER:
            raise UsageError(f"this peer's membership of {gid} changed {wire.MAX_MEMBER_COUNTER} times: no more")
        return wire.sign_member(self.identity, gid, self.name, counter, joined, self.keys.get(gid))

    def restore(self, record: GroupRecord) -> None:
        """Load a group from the store at start (no events, nothing sent)."""
        self.groups[record.gid] = record
        self._outside_records += 0 if self.is_member(record.gid) else len(record.members)

    def _count_outside(self) -> None:
        self._outside_records = sum(len(r.members) for gid, r in self.groups.items() if not self.is_member(gid))

    def is_member(self, gid: str) -> bool:
        record = self.groups.get(gid)
        return record is not None and record.verified and record.is_current(self.pid)

    def joined_gids(self) -> list[str]:
        return [gid for gid in self.groups if self.is_member(gid)]

    def note_zeroconf(self, gid: str, desc: str, private: bool, member_count: int, now: float,
                      wall: float | None = None) -> None:
        """A group seen in a DNS-SD announcement: shown, but joinable only once its
        descriptor, fetched over GJLP, verifies.  ``wall`` (``now`` if not given) stamps ``last_seen``."""
        record = self.groups.get(gid)
        new = record is None
        if new:
            if not self._make_room():
                return
            record = self.groups[gid] = GroupRecord(gid, desc, "", 0, private)
        changed = new or "zeroconf" not in record.sources or record.member_count_hint != member_count
        record.sources.add("zeroconf")
        record.member_count_hint = member_count
        record.last_seen = now if wall is None else wall
        if not record.verified and not record.legacy:
            self._want_descriptor(gid, now)
        if changed:
            self._events.append(GroupSeen(gid, new))

    def _make_room(self) -> bool:
        """Whether one more group fits, evicting the least recently seen group this peer
        neither joined nor stored; counted when nothing can go."""
        if len(self.groups) < MAX_GROUPS:
            return True
        spare = [r for r in self.groups.values() if not r.legacy and "local" not in r.sources
                 and not r.is_current(self.pid)]
        if not spare:
            self.groups_refused += 1
            return False
        oldest = min(spare, key=lambda r: r.last_seen)
        del self.groups[oldest.gid]
        self._outside_records -= len(oldest.members)
        self._wanted.discard(oldest.gid)
        self._answer_gids.discard(oldest.gid)
        return True

    def _want_descriptor(self, gid: str, now: float) -> None:
        self._wanted.add(gid)
        if self._fetch_at is None:
            self._fetch_at = max(now, self._last_fetch + FETCH_INTERVAL)

    # -- network input ------------------------------------------------------

    def receive(self, sender: str, message: wire.Message, now: float, wall: float | None = None) -> None:
        """One verified control message; ``now`` is the deadline clock, ``wall`` (``now`` if not
        given) stamps ``last_seen``."""
        stamp = now if wall is None else wall
        if isinstance(message, wire.Adv):
            if sender != self.pid:
                self._schedule_answer(now, message.gids)
        elif isinstance(message, wire.GroupsInfo):
            for info in message.groups:
                record = self._accept_descriptor(info, stamp)
                if record is None:
                    continue
                for member in info.members:
                    self._apply(record, member)
                if sender != self.pid:
                    self._suppress_if_covered(info)
        elif isinstance(message, (wire.Join, wire.Leave)):
            record = self.groups.get(message.record.gid)
            if message.record.joined != isinstance(message, wire.Join):
                self.member_records_rejected += 1
            elif record is not None and record.verified:
                self._apply(record, message.record)
                record.last_seen = stamp

    def _accept_descriptor(self, info: wire.GroupInfo, stamp: float) -> GroupRecord | None:
        record = self.groups.get(info.gid)
        if record is not None and record.descriptor is not None:
            if info.descriptor != record.descriptor:
                self.descriptor_conflicts += 1  # the gid says it all: another address, port, key…
                return None
        elif (info.descriptor.gid != info.gid or info.descriptor.addr == self.control_addr
              or not wire.verify_descriptor(info.descriptor)):
            if record is not None:
                self.descriptor_conflicts += 1
            else:
                self.descriptors_rejected += 1
            return None
        elif record is None:
            if not self._make_room():
                return None
            record = self.groups[info.gid] = GroupRecord.from_descriptor(info.gid, info.descriptor)
            self._events.append(GroupSeen(info.gid, True))
        else:  # seen in zeroconf (or only locally) so far: now it is verified
            hint, sources = record.member_count_hint, record.sources
            record = self.groups[info.gid] = GroupRecord.from_descriptor(info.gid, info.descriptor)
            record.member_count_hint, record.sources = hint, sources
            self._wanted.discard(info.gid)
            self._events.append(GroupSeen(info.gid, False))
        record.sources.add("gjlp")
        record.last_seen = stamp
        return record

    def _apply(self, record: GroupRecord, member: wire.MemberRecord) -> None:
        """Take ``member`` if it is newer than what is held and its member signed it."""
        gid, pid = record.gid, member.pid
        if member.gid != gid:
            self.member_records_rejected += 1
            return
        old = record.members.get(pid)
        if old is not None and member.counter <= old.counter:
            if member.counter < old.counter or member.signature != old.signature:
                self.member_records_stale += 1
            return
        outside = not self.is_member(gid)
        if old is None and pid != self.pid and (len(record.members) >= MAX_MEMBERS
                                                or outside and self._outside_records >= MAX_OUTSIDE_RECORDS):
            self.member_records_refused += 1
            return
        if not wire.verify_member(member) or not self._key_proof_holds(record, member):
            self.member_records_rejected += 1
            return
        if pid == self.pid:
            # Ours, signed by us, newer than what we hold: our store lost a change.  Only
            # this peer decides its membership, so it re-signs its own state above it.
            if old is not None and member.counter < wire.MAX_MEMBER_COUNTER:
                record.members[pid] = self._sign(gid, member.counter + 1, old.joined)
                self._outbox.append((wire.Join if old.joined else wire.Leave)(record.members[pid]))
                self._events.append(MemberUpdated(gid, Member(pid, self.name, member.counter + 1)))
            return
        record.members[pid] = member
        self._outside_records += outside and old is None
        shown = _member(pid, member)
        if old is None or old.joined != member.joined:
            self._events.append(MemberJoined(gid, shown) if member.joined else MemberLeft(gid, shown))
        else:
            self._events.append(MemberUpdated(gid, shown))

    def _key_proof_holds(self, record: GroupRecord, member: wire.MemberRecord) -> bool:
        if not record.private:
            return member.key_proof == b""
        key = self.keys.get(record.gid)
        if key is None:
            return len(member.key_proof) == crypto.KEY_CHECK_BYTES  # an outsider cannot check more
        return hmac.compare_digest(member.key_proof, crypto.key_proof(key, member.content_bytes()))

    # -- answers to advertisements -------------------------------------------

    def _schedule_answer(self, now: float, wanted: tuple[str, ...] = ()) -> None:
        gids = set(self.joined_gids())
        if wanted:
            gids &= set(wanted)
        if not gids:
            return
        self._answer_gids |= gids
        if self._answer_at is None:
            self._answer_at = max(now + self._rng.uniform(*self._answer_delay), self._last_answer + ANSWER_INTERVAL)

    def _suppress_if_covered(self, info: wire.GroupInfo) -> None:
        """Drop ``info.gid`` from our pending answer if ``info`` already says all we would."""
        if info.gid not in self._answer_gids:
            return
        ours = {(pid, r.counter) for pid, r in self.groups[info.gid].members.items()}
        if ours <= {(r.pid, r.counter) for r in info.members}:
            self._answer_gids.discard(info.gid)
            self.answers_suppressed += 1
            if not self._answer_gids:
                self._answer_at = None

    def get_timer(self) -> float | None:
        timers = [t for t in (self._answer_at, self._fetch_at) if t is not None]
        return min(timers) if timers else None

    def handle_timer(self, now: float) -> None:
        if self._fetch_at is not None and now >= self._fetch_at:
            wanted = sorted(gid for gid in self._wanted if gid in self.groups and not self.groups[gid].verified)
            self._wanted.clear()
            self._fetch_at = None
            if wanted:
                self._last_fetch = now
                for start in range(0, len(wanted), MAX_FETCH):
                    self._outbox.append(wire.Adv(self.name, tuple(wanted[start:start + MAX_FETCH])))
        if self._answer_at is None or now < self._answer_at:
            return
        infos = [info for gid in sorted(self._answer_gids) if self.is_member(gid) for info in self.groups[gid].to_wire()]
        self._answer_gids.clear()
        self._answer_at = None
        self._last_answer = now
        # Stay under the datagram limit: as many GroupInfos per GROUPS_INFO as fit.
        batch, size = [], 0
        for info in infos:
            if batch and size + _info_size(info) > INFO_BUDGET:
                self._outbox.append(wire.GroupsInfo(tuple(batch)))
                batch, size = [], 0
            batch.append(info)
            size += _info_size(info)
        if batch:
            self._outbox.append(wire.GroupsInfo(tuple(batch)))

    # -- output ---------------------------------------------------------------

    def datagrams_to_send(self) -> list[wire.Message]:
        out, self._outbox = self._outbox, []
        return out

    def events(self) -> list[Event]:
        out, self._events = self._events, []
        return out
