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

Every cap says who gives way when it is full (issue 26: nobody is locked out unheard):
- **Joined records, MAX_MEMBERS per group.**  Only current members count.  A record
  whose owner this peer has *heard* (a verified datagram of the owner's on the group's
  channel: a message, heartbeat, NAK or sync request, reported by :meth:`Gjlp.heard`)
  takes the place of the most recently added record whose owner was never heard; a
  record of an unheard owner is refused (``member_records_refused``) and kept in a
  small table (MAX_REFUSED per group) until its owner is heard.  So a flood of fresh
  keys that never speak fills only what nobody real needs, and gives way to whoever
  speaks; a flood that keeps speaking costs the attacker a stream of datagrams per key.
- **Left records, MAX_LEFT per group,** do not count against MAX_MEMBERS.  A new left
  record of an unknown pid is refused when full; a member leaving always is recorded,
  the most recently added left record of an unheard owner giving way first.
- **Records of groups this peer is not in, MAX_OUTSIDE_RECORDS in all.**  When full, a
  group holding fewer than its fair share (the budget over the groups known) takes a
  record from the group that holds the most, so a flood in some groups cannot leave a
  new group at 0 members; a group at or above its share is refused.
- **Groups**: the two tables below.

A peer that joins is told when nobody hears it: until another current member's
GROUPS_INFO names its record (the answer to the ADV that a join sends), it repeats its
JOIN and an ADV for that gid (JOIN_RETRIES, doubling from JOIN_RETRY), and after
ACK_TIMEOUT it reports :class:`JoinUnacknowledged` (the app shows it as a warning).
Nothing new is sent to it by others: the members' ADV answers, rate-bounded by
ANSWER_INTERVAL, are what acknowledge it, so a refusal gives an attacker no amplifier.

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

from . import crypto, names, wire
from .events import MemberJoined, MemberLeft  # told to the application as they are
from .types import GroupView, Member, UsageError

MAX_MEMBERS = 1_000  # current members' records kept per group (left ones do not count)
MAX_LEFT = 1_000  # records of members who left, kept per group (so a replayed JOIN cannot revive them)
MAX_REFUSED = 64  # refused records per group kept until their owner is heard (the most recent)
MAX_HEARD_STRANGERS = 256  # per group, pids without a record heard on the channel lately
# A joiner is acknowledged when another member's GROUPS_INFO names its record; until then it
# repeats its JOIN after JOIN_RETRY s, doubling, JOIN_RETRIES times, and is warned after ACK_TIMEOUT s.
JOIN_RETRY = 1.0
JOIN_RETRIES = 2
ACK_TIMEOUT = 5.0
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
RECORDS_PER_INFO = 100  # member records in one GroupInfo of an answer: at most ~46 KB
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
class MemberUpdated:
    """A member's record changed without a join or leave (a new name, a higher counter)."""

    gid: str
    member: Member


@dataclass(frozen=True, slots=True)
class MemberGaveWay:
    """A record of an owner never heard was dropped for a heard newcomer (MAX_MEMBERS)."""

    gid: str
    member: Member


@dataclass(frozen=True, slots=True)
class JoinUnacknowledged:
    """No other member acknowledged this peer's join within ACK_TIMEOUT; ``full``: the
    group holds MAX_MEMBERS records here, so members may be refusing it."""

    gid: str
    full: bool


Event = GroupSeen | MemberJoined | MemberLeft | MemberUpdated | MemberGaveWay | JoinUnacknowledged


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
    # Learnt from the group's channel while this peer runs (never stored): owners of records
    # heard, pids heard without a record (the most recent), refused records waiting for
    # their owner to be heard.
    heard: set[str] = field(default_factory=set)
    heard_strangers: dict[str, None] = field(default_factory=dict)
    refused: dict[str, wire.MemberRecord] = field(default_factory=dict)
    # Roles (middleware.roles, kept by the peer core): removed members are no current members
    # whatever their own records say, and once a private group re-keyed, a newcomer's record is
    # taken only if a member admitted it (the passphrase no longer admits).
    removed: set[str] = field(default_factory=set)
    admins: set[str] = field(default_factory=set)
    admins_only: bool = False  # the owner's setting: only the owner and admins pin and set the topic
    admission_needed: bool = False
    admitted: set[str] = field(default_factory=set)

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
        return record is not None and record.joined and pid not in self.removed

    def joined_count(self) -> int:
        return sum(r.joined and p not in self.removed for p, r in self.members.items())

    def current(self) -> tuple[Member, ...]:
        return tuple(_member(p, r) for p, r in sorted(self.members.items()) if r.joined and p not in self.removed)

    def removed_members(self) -> tuple[Member, ...]:
        return tuple(_member(p, r) for p, r in sorted(self.members.items()) if p in self.removed)

    def role(self, pid: str) -> str:
        creator = crypto.pid_of(self.descriptor.creator_key) if self.descriptor else ""
        return "owner" if pid == creator else "admin" if pid in self.admins else "member"

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
            roles={m.pid: self.role(m.pid) for m in current}, removed=self.removed_members(),
            admins_only=self.admins_only,
        )


@dataclass(slots=True)
class _JoinWait:
    """This peer's join of a group, until another member acknowledges it."""

    retry_at: float
    deadline: float
    retries: int = 0


def _member(pid: str, record: wire.MemberRecord) -> Member:
    """A member as shown: the name of its own record, without invisible or text-direction characters."""
    return Member(pid, names.shown(record.name), record.counter)


def _info_size(info: wire.GroupInfo) -> int:
    """A bound on the encoded size of ``info``: strings counted at 4 bytes a character
    (a record's fixed fields, its direct-message key included, take at most 190 bytes)."""
    return 1_200 + sum(194 + 4 * len(record.name) for record in info.members)


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
        self.member_records_refused = 0  # a cap was full and nothing could give way
        self.member_records_given_way = 0  # unheard owners' records dropped for heard newcomers
        self.joins_unacknowledged = 0
        self.joins_not_admitted = 0
        self._joining: dict[str, _JoinWait] = {}  # gid -> this peer's join waiting for an acknowledgement
        self._donor: str | None = None  # the outside group that gave a record last (a cache)
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

    def join(self, gid: str, now: float, key: bytes | None = None, wall: float | None = None) -> GroupRecord:
        """Join ``gid``; ``now`` is the deadline clock, ``wall`` (``now`` if not given) stamps ``last_seen``."""
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
        record.last_seen = now if wall is None else wall
        # A joined group is never evicted: it moves to the main table (which may then hold more
        # than MAX_GROUPS until the next admission makes room).
        self._strangers.pop(gid, None)
        self._joined = None
        self._outbox.append(wire.Join(record.members[self.pid]))
        self._joining[gid] = _JoinWait(now + JOIN_RETRY, now + ACK_TIMEOUT)
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
        self._joining.pop(gid, None)
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

    def direct_keys(self, pid: str) -> tuple[bytes, bytes] | None:
        """``pid``'s Ed25519 and X25519 (direct-message) keys, from its signed records in the
        groups this peer is in (the one with the highest counter among those that carry a
        key); None when no such record has one.  Only current members' records count: a peer
        messages only people it shares a group with now, and a left record, which carries the
        key too, says that its owner is no longer there."""
        best = None
        for record in self._joined_records():
            member = record.members.get(pid)
            if member is not None and record.is_current(pid) and member.dh and (best is None or member.counter > best.counter):
                best = member
        return None if best is None else (best.public_key, best.dh)

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
                    if info.gid in self._joining:
                        self._note_acknowledgement(record, sender, info)
        elif isinstance(message, (wire.Join, wire.Leave)):
            record = self.groups.get(message.record.gid)
            if message.record.joined != isinstance(message, wire.Join):
                self.member_records_rejected += 1
            elif record is not None and record.verified:
                self._apply(record, message.record)
                record.last_seen = stamp

    def heard(self, gid: str, pid: str, wall: float | None = None) -> None:
        """``pid`` sent a verified datagram on ``gid``'s channel (a message, heartbeat, NAK or
        sync request): its record, or the one it sends next, is preferred by the caps.  A
        member's datagram is news of the group (``wall`` stamps ``last_seen``): a group that
        talks is seen now, not when it was last announced."""
        record = self.groups.get(gid)
        if record is None or pid == self.pid:
            return
        if pid in record.members:
            record.heard.add(pid)
            if wall is not None and wall > record.last_seen:
                record.last_seen = wall
            return
        waiting = record.refused.pop(pid, None)
        strangers = record.heard_strangers
        strangers.pop(pid, None)
        strangers[pid] = None  # the most recent last
        if len(strangers) > MAX_HEARD_STRANGERS:
            del strangers[next(iter(strangers))]
        if waiting is not None:
            self._apply(record, waiting)

    def _note_acknowledgement(self, record: GroupRecord, sender: str, info: wire.GroupInfo) -> None:
        """Acknowledged by a member: one we hold, or one whose own joined record is in its answer
        (in a full group, the answer's records beyond the cap are not taken here)."""
        own = record.members.get(self.pid)
        if own is None or not any(m.pid == self.pid and m.counter >= own.counter for m in info.members):
            return
        if record.is_current(sender) or any(m.pid == sender and m.joined for m in info.members):
            del self._joining[record.gid]

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
        give_way: tuple[GroupRecord, str] | None = None
        if pid != self.pid:
            entering = member.joined and (old is None or not old.joined)
            if entering and record.admission_needed and pid not in record.admitted:
                self.joins_not_admitted += 1  # the passphrase stopped admitting at the re-key
                return
            if entering and len(record.members) >= MAX_MEMBERS and record.joined_count() >= MAX_MEMBERS:
                victim = self._unheard_member(record) if pid in record.heard_strangers else None
                if victim is None:
                    self._refuse(record, member)
                    return
                give_way = (record, victim)
            elif (old is None and not member.joined and len(record.members) >= MAX_LEFT
                  and len(record.members) - record.joined_count() >= MAX_LEFT):
                self._refuse(record, member)
                return
            if old is None and give_way is None and outside and self._outside_records >= MAX_OUTSIDE_RECORDS:
                give_way = self._outside_donor(record)
                if give_way is None:
                    self._refuse(record, member)
                    return
        if not wire.verify_member(member) or not self._key_proof_holds(record, member):
            self.member_records_rejected += 1
            return
        if give_way is not None:
            self._give_way(*give_way)
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
        if pid in record.heard_strangers:  # heard before its record came: heard now
            del record.heard_strangers[pid]
            record.heard.add(pid)
        if old is not None and old.joined and not member.joined:
            self._trim_left(record, pid)
        shown = _member(pid, member)
        if old is None or old.joined != member.joined:
            self._events.append(MemberJoined(gid, shown) if member.joined else MemberLeft(gid, shown))
        else:
            self._events.append(MemberUpdated(gid, shown))

    def _refuse(self, record: GroupRecord, member: wire.MemberRecord) -> None:
        """A cap is full: counted, and kept (unverified, the most recent MAX_REFUSED) until
        its owner is heard on the group's channel."""
        self.member_records_refused += 1
        if record.verified and self.is_member(record.gid):
            refused = record.refused
            refused.pop(member.pid, None)
            refused[member.pid] = member
            if len(refused) > MAX_REFUSED:
                del refused[next(iter(refused))]

    def _unheard_member(self, record: GroupRecord) -> str | None:
        """The most recently added current member whose owner was never heard: a flood's
        records came after the group's real members."""
        for pid, member in reversed(record.members.items()):
            if member.joined and pid not in record.heard and pid != self.pid:
                return pid
        return None

    def _outside_donor(self, record: GroupRecord) -> tuple[GroupRecord, str] | None:
        """For a group under its fair share of MAX_OUTSIDE_RECORDS: a record of the outside
        group that holds the most (its most recently added one)."""
        share = MAX_OUTSIDE_RECORDS // max(1, len(self.groups))
        if len(record.members) >= share:
            return None
        donor = self.groups.get(self._donor) if self._donor else None
        if donor is None or len(donor.members) <= share or self.is_member(donor.gid):
            outside = [r for r in self.groups.values() if r is not record and r.members and not self.is_member(r.gid)]
            donor = max(outside, key=lambda r: len(r.members), default=None)
            if donor is None or len(donor.members) <= len(record.members) + 1:
                return None
            self._donor = donor.gid
        return donor, next(pid for pid in reversed(donor.members) if pid != self.pid)

    def _give_way(self, record: GroupRecord, pid: str) -> None:
        member = record.members.pop(pid)
        record.heard.discard(pid)
        self._outside_records -= not self.is_member(record.gid)
        self.member_records_given_way += 1
        self._events.append(MemberGaveWay(record.gid, Member(pid, member.name, member.counter)))

    def _trim_left(self, record: GroupRecord, leaving: str) -> None:
        """A member left: past MAX_LEFT left records, an unheard owner's (the most recent) goes first."""
        left = [pid for pid, r in record.members.items() if not r.joined and pid != leaving]
        if len(left) < MAX_LEFT:
            return
        unheard = [pid for pid in left if pid not in record.heard]
        self._give_way(record, (unheard or left)[-1])

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
        timers += [min(w.retry_at, w.deadline) for w in self._joining.values()]
        return min(timers) if timers else None

    def _check_joins(self, now: float) -> None:
        for gid, wait in list(self._joining.items()):
            if not self.is_member(gid):
                del self._joining[gid]
            elif now >= wait.deadline:
                del self._joining[gid]
                self.joins_unacknowledged += 1
                self._events.append(JoinUnacknowledged(gid, self.groups[gid].joined_count() >= MAX_MEMBERS))
            elif now >= wait.retry_at:
                # Unheard so far: the JOIN may have been lost, or refused before we were heard.
                self._outbox += [wire.Join(self.groups[gid].members[self.pid]), wire.Adv(self.name, (gid,))]
                wait.retries += 1
                wait.retry_at = (now + JOIN_RETRY * 2 ** wait.retries if wait.retries < JOIN_RETRIES
                                 else float("inf"))

    def handle_timer(self, now: float) -> None:
        self._check_joins(now)
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
