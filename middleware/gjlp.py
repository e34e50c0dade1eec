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
- At most MAX_MEMBERS records are kept per group; beyond that, new ones are refused and counted.

Groups are kept in two tables (a stranger can make any number of keys, groups and mDNS
announcements, so a group of a stranger's never pushes out one that this peer has reason to keep):
- The main table (MAX_GROUPS): groups this peer created, joined or stored, groups vouched for
  (holding the signed record of a known peer: this peer, or a pid with a record in a group this
  peer is in), and verified groups of strangers admitted at ADMIT_RATE a second (ADMIT_BURST at
  once).  When it is full, a vouched group makes room by evicting the least recently seen group
  that is neither protected (joined, created, stored, with a record of ours) nor vouched; an
  admitted stranger's group evicts only such a group not seen for STALE_AFTER seconds.  Nothing
  else ever evicts from it: otherwise the newcomer waits in the stranger table (``groups_refused``).
- The stranger table (MAX_STRANGER_GROUPS): groups seen only through zeroconf (unverified) and
  verified groups nobody known vouches for that were not admitted.  When it is full, the least
  recently seen of them gives way (``stranger_groups_evicted``).  A group leaves it for the main
  table when it is joined, vouched for, or admitted at a later sighting.

Descriptors of zeroconf-only groups are fetched with one ADV of at most MAX_FETCH gids per
FETCH_INTERVAL, at most FETCH_PER_SOURCE of them per announcing address: whatever arrives, the
fetches cost at most one such ADV (2.2 KB at most) per FETCH_INTERVAL.

Beyond the thesis, answers to an advertisement wait a random jitter, and a group
is dropped from a pending answer when another peer's answer already said the
same about it, so twenty peers do not all answer at once.  Peers are identified
by pid only; an address is only the plain value a zeroconf sighting names its announcer by.
"""

from __future__ import annotations

import hashlib
import hmac
import random
from dataclasses import dataclass, field

from . import crypto, wire
from .types import GroupView, Member, UsageError

MAX_MEMBERS = 1_000  # member records (joined or left) kept per group
MAX_GROUPS = 1_000  # the main table (see the module docstring); joined ones are never evicted
# The stranger table: zeroconf-only sightings and strangers' verified groups not admitted (yet).
MAX_STRANGER_GROUPS = 200
# Strangers' verified groups admitted to the main table: a burst (a newcomer's first ADV is
# answered with every group on the LAN), then one every 2 s, so a flood of fresh keys' groups
# takes about half an hour to fill the main table, and even then evicts nothing seen within STALE_AFTER.
ADMIT_BURST = 64
ADMIT_RATE = 0.5  # groups a second
STALE_AFTER = 3_600.0  # seconds unseen after which a stranger's group in the main table may give way
ROOM_RETRY = 1.0  # seconds before a full main table is searched again for a group that may go
# Member records held for groups this peer is not in (shown in the discovery list only):
# without this, 1,000 groups of 1,000 records each would hold about half a gigabyte.
MAX_OUTSIDE_RECORDS = 50_000
RECORDS_PER_INFO = 100  # member records in one GroupInfo of an answer: at most ~45 KB
INFO_BUDGET = 60_000  # bytes of GroupInfos per GROUPS_INFO datagram (estimated)
FETCH_INTERVAL = 2.0  # seconds between ADVs that fetch zeroconf-only groups' descriptors
# A GROUPS_INFO answer can be ~100 times its ADV (a thousand member records), so this peer
# answers at most once per ANSWER_INTERVAL: a flood of ADVs coalesces into one answer.
ANSWER_INTERVAL = 2.0
MAX_FETCH = 64  # gids asked for in one ADV, the one fetch ADV of a FETCH_INTERVAL
FETCH_PER_SOURCE = 8  # gids fetched per announcing address per FETCH_INTERVAL


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
        return tuple(Member(p, r.name, r.counter) for p, r in sorted(self.members.items()) if r.joined)

    def left(self) -> tuple[Member, ...]:
        return tuple(Member(p, r.name, r.counter) for p, r in sorted(self.members.items()) if not r.joined)

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
        # Zeroconf-only gids whose descriptors to fetch, each with the address that announced it;
        # always a subset of the stranger table.
        self._wanted: dict[str, str] = {}
        # The stranger table: its gids (all in ``groups``), least recently seen first.
        self._strangers: dict[str, None] = {}
        self._admit_tokens = float(ADMIT_BURST)
        self._admit_at: float | None = None
        self._joined: list[GroupRecord] | None = None  # the joined groups' records, while it holds
        self._no_room_until = {True: float("-inf"), False: float("-inf")}  # by "vouched", see _make_room
        self._fetch_at: float | None = None
        self._last_fetch = float("-inf")
        self.answers_suppressed = 0
        self.descriptors_rejected = 0  # not signed by its creator, or not hashing to its gid
        self.descriptor_conflicts = 0  # the same, for a gid already known: nothing changes
        self.member_records_rejected = 0  # bad signature, or no valid key proof in a private group
        self.member_records_stale = 0  # replays and records older than the one held
        self.member_records_refused = 0  # a group already holds MAX_MEMBERS records
        self.groups_refused = 0  # a verified group kept out of a full main table (it waits in the stranger table)
        self.stranger_groups_evicted = 0  # groups that gave way in the full stranger table

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
        self._joined = None
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
        # A joined group is never evicted: it moves to the main table (which may then hold more
        # than MAX_GROUPS until the next admission makes room).
        self._strangers.pop(gid, None)
        self._joined = None
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
        self._joined = None
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
        self._joined = None
        self._outside_records += 0 if self.is_member(record.gid) else len(record.members)

    def _count_outside(self) -> None:
        self._outside_records = sum(len(r.members) for gid, r in self.groups.items() if not self.is_member(gid))

    def is_member(self, gid: str) -> bool:
        record = self.groups.get(gid)
        return record is not None and record.verified and record.is_current(self.pid)

    def joined_gids(self) -> list[str]:
        return [record.gid for record in self._joined_records()]

    def _joined_records(self) -> list[GroupRecord]:
        if self._joined is None:
            self._joined = [r for gid, r in self.groups.items() if self.is_member(gid)]
        return self._joined

    def is_stranger_group(self, gid: str) -> bool:
        """Whether ``gid`` is in the stranger table (see the module docstring)."""
        return gid in self._strangers

    def note_zeroconf(self, gid: str, desc: str, private: bool, member_count: int, now: float,
                      wall: float | None = None, source: str = "") -> None:
        """A group seen in a DNS-SD announcement: shown, but joinable only once its
        descriptor, fetched over GJLP, verifies.  ``wall`` (``now`` if not given) stamps ``last_seen``;
        ``source`` is the address that announced it (fetches are limited per address)."""
        record = self.groups.get(gid)
        new = record is None
        stamp = now if wall is None else wall
        if record is None:
            record = self.groups[gid] = GroupRecord(gid, desc, "", 0, private)
            self._strangers[gid] = None
            self._trim_strangers(keep=gid)
        elif gid in self._strangers:
            self._strangers[gid] = self._strangers.pop(gid)  # the most recently seen now
        changed = new or "zeroconf" not in record.sources or record.member_count_hint != member_count
        record.sources.add("zeroconf")
        record.member_count_hint = member_count
        record.last_seen = stamp
        if not record.verified and not record.legacy:
            self._want_descriptor(gid, now, source)
        if changed:
            self._events.append(GroupSeen(gid, new))

    # -- the two tables ------------------------------------------------------

    def _is_known(self, pid: str) -> bool:
        """Whether ``pid`` is this peer or holds a record in a group this peer is in."""
        return pid == self.pid or any(pid in record.members for record in self._joined_records())

    def _vouched(self, record: GroupRecord) -> bool:
        """Whether a known peer's record says it is in ``record`` (records are signed per gid,
        so nobody else can put a known peer in a group of theirs)."""
        return any(member.joined and self._is_known(pid) for pid, member in record.members.items())

    def _protected(self, record: GroupRecord) -> bool:
        """Groups this peer created, joined, stored or was ever in: never evicted."""
        return record.legacy or "local" in record.sources or self.pid in record.members

    def _place(self, record: GroupRecord, now: float, stamp: float) -> None:
        """Move a verified group of the stranger table to the main table if it is vouched for,
        or admitted (a token, and room); otherwise it stays there and the table is trimmed."""
        gid = record.gid
        if gid not in self._strangers:
            return
        if record.verified:
            vouched = self._vouched(record)
            if (vouched or self._admit_token(now) >= 1) and self._make_room(now, stamp, vouched):
                if not vouched:
                    self._admit_tokens -= 1
                del self._strangers[gid]
                return
        self._trim_strangers(keep=gid)

    def _admit_token(self, now: float) -> float:
        """The admission tokens at ``now`` (ADMIT_RATE a second, at most ADMIT_BURST)."""
        if self._admit_at is not None:
            self._admit_tokens = min(float(ADMIT_BURST), self._admit_tokens + max(0.0, now - self._admit_at) * ADMIT_RATE)
        self._admit_at = now
        return self._admit_tokens

    def _make_room(self, now: float, stamp: float, vouched: bool) -> bool:
        """Whether one more group fits in the main table, evicting the least recently seen
        group that is neither protected nor vouched for (for a stranger's group: only one
        unseen for STALE_AFTER); counted when nothing can go.  A search that found nothing
        is not repeated for ROOM_RETRY seconds: a flood costs one search a second, not one a datagram."""
        if len(self.groups) - len(self._strangers) < MAX_GROUPS:
            return True
        if now < self._no_room_until[vouched]:
            self.groups_refused += 1
            return False
        spare = [r for gid, r in self.groups.items() if gid not in self._strangers and not self._protected(r)
                 and (vouched or stamp - r.last_seen > STALE_AFTER) and not self._vouched(r)]
        if not spare:
            self._no_room_until[vouched] = now + ROOM_RETRY
            self.groups_refused += 1
            return False
        self._forget(min(spare, key=lambda r: r.last_seen).gid)
        return True

    def _trim_strangers(self, keep: str) -> None:
        """Evict the least recently seen groups of a full stranger table (never ``keep``)."""
        while len(self._strangers) > MAX_STRANGER_GROUPS:
            oldest = next(gid for gid in self._strangers if gid != keep)
            self._forget(oldest)
            self.stranger_groups_evicted += 1

    def _forget(self, gid: str) -> None:
        record = self.groups.pop(gid)
        self._strangers.pop(gid, None)
        self._outside_records -= len(record.members)
        self._wanted.pop(gid, None)
        self._answer_gids.discard(gid)

    def _want_descriptor(self, gid: str, now: float, source: str) -> None:
        self._wanted.setdefault(gid, source)
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
                self._place(record, now, stamp)
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
        elif record is None:  # in the stranger table until _place() says otherwise
            record = self.groups[info.gid] = GroupRecord.from_descriptor(info.gid, info.descriptor)
            self._strangers[info.gid] = None
            self._events.append(GroupSeen(info.gid, True))
        else:  # seen in zeroconf (or only locally) so far: now it is verified
            hint, sources = record.member_count_hint, record.sources
            record = self.groups[info.gid] = GroupRecord.from_descriptor(info.gid, info.descriptor)
            record.member_count_hint, record.sources = hint, sources
            self._wanted.pop(info.gid, None)
            self._events.append(GroupSeen(info.gid, False))
        if info.gid in self._strangers:
            self._strangers[info.gid] = self._strangers.pop(info.gid)  # the most recently seen now
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
        shown = Member(pid, member.name, member.counter)
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
            self._fetch(now)
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

    def _fetch(self, now: float) -> None:
        """One ADV asking for the descriptors of at most MAX_FETCH wanted gids, at most
        FETCH_PER_SOURCE from each announcing address, oldest wish first; the rest wait."""
        self._fetch_at = None
        batch: list[str] = []
        per_source: dict[str, int] = {}
        for gid, source in list(self._wanted.items()):
            if len(batch) == MAX_FETCH:
                break
            if per_source.get(source, 0) < FETCH_PER_SOURCE:
                per_source[source] = per_source.get(source, 0) + 1
                batch.append(gid)
                del self._wanted[gid]
        if batch:
            self._last_fetch = now
            self._outbox.append(wire.Adv(self.name, tuple(sorted(batch))))
        if self._wanted:
            self._fetch_at = self._last_fetch + FETCH_INTERVAL

    # -- output ---------------------------------------------------------------

    def datagrams_to_send(self) -> list[wire.Message]:
        out, self._outbox = self._outbox, []
        return out

    def events(self) -> list[Event]:
        out, self._events = self._events, []
        return out
