"""PeerCore: one peer's protocol logic (GJLP, the group channels, OBG operations, the store), without I/O.

It is driven like aioquic's connection: datagrams in (:meth:`PeerCore.receive`),
timers (:meth:`PeerCore.handle_timer`) and user calls, each with ``now`` (the
deadline clock, :func:`middleware.clock.now`) and, where something is stamped
for people to read, ``wall``.  It reads no clock and opens no socket.  What it
does, :meth:`PeerCore.flush` hands out in the crash-safe order:

1. persist: seqnos, members, delivered messages and equivocations go to the
   store (:class:`~middleware.store_api.PeerStore`), one commit, with what the direct
   channel (:mod:`middleware.direct`) changed: its messages, states and SES's;
2. transmit: only then do the datagrams of the batch reach
   :meth:`PeerCore.datagrams_to_send` (each with its destination: the control
   address or a group's);
3. notify: only then are its events (:mod:`middleware.events`) queued, for
   :meth:`PeerCore.events` to hand out; the adapter drains them after it has
   sent the datagrams.

So whatever was sent or shown survives a crash.  When the commit fails (a
full disk), it is rolled back and nothing of the batch is transmitted or
shown; :meth:`PeerCore.get_timer` then asks for a retry.

Every adapter runs the same cycle after each input: :meth:`PeerCore.turn` (the
flush and its output as a value), then sends, then tells.

The asyncio adapter (:class:`middleware.manager.GroupManager`) owns the
sockets, zeroconf and the timer; ``tests/testbed/peer_sim.py`` drives whole peers
with a hand-set clock through crashes.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import random
import sqlite3
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Sequence, cast

from . import commands, crypto, names, routing, rules, wire
from .direct import SETTING_RECEIPTS, SETTING_SES, DirectCore, StoredDirect, conversation_id
from .routing import GroupScope
from .addresses import Arrival, Destination, Endpoint, GroupAddress, Via, parse_endpoint
from .channel import Conflict, GapReported, GroupChannel, Replaced, SyncProgress
from . import kinds
from .chatops import GroupOperations, is_operation
from .invites import Invite, invite_link, parse_invite
from .mentions import with_tokens
from .gjlp import (ACK_TIMEOUT, MAX_MEMBERS, Gjlp, GroupRecord, GroupSeen, JoinUnacknowledged, MemberGaveWay,
                   MemberJoined, MemberLeft, MemberUpdated, group_address)
from .mop import DEFAULT_MAX_HELD, DEFAULT_MAX_HELD_BYTES
from .presence import OFFLINE, OFFLINE_AFTER, ONLINE, Presence
from .reach import BROADCAST_GRACE, Reach, hint_refused
from .roles import Cuts, past_cut
from .relay_link import STATS as RELAY_STATS, GroupRelay
from .ses import Ses
from .store_api import PeerStore, SearchHit, SearchQueryError, StoredThread
from .events import (Event, GroupCreated, GroupsDiscovered, MemberRemoved, MessagesDelivered, MessagesUpdated,
                     NoticesAdded, RemovedFromGroup, RoleChanged, TopicChanged, WarningRaised)
from .teams import GroupTeam
from .types import (ChatMessage, ConversationView, DirectMessage, GroupView, Mid, Notice, UsageError, format_mid,
                    key_fingerprint)

log = logging.getLogger(__name__)

CONTROL_ADDR = "239.255.77.77"
DEFAULT_PORT = 47477
BROADCAST_INTERVAL = 30.0  # announcements to the subnet broadcast address, for LANs that drop multicast
_CONTROL_MESSAGES = (wire.Adv, wire.GroupsInfo, wire.Join, wire.Leave)
# What a group's members take for fresh evidence that this peer is there (presence.py): a new
# message, or a heartbeat signed with its time.  A peer sending only other datagrams still beacons.
_FRESH_EVIDENCE = (wire.Data, wire.DataBatch, wire.Heartbeat)
# A group's team datagrams (middleware.teams): REKEY, KEY_REQUEST and ADMIT travel in the clear,
# signed, even in a private group; ROLES is sealed like everything else.
_TEAM_PLAIN = (wire.Rekey, wire.KeyRequest, wire.Admit)
_TEAM_MESSAGES = (wire.Roles, *_TEAM_PLAIN)
MAX_HELD_DATAGRAMS = 512  # per group while sending is held; past it the oldest go (repair recovers them)
TEAM_SETTING = "team:"  # + gid: a group's roles, epoch keys and re-key parts (GroupTeam.to_bytes)
_RELAYED = routing.RELAYED
MAX_SITE_QUEUE = 1024  # datagrams a group's site relay holds between two flushes, each way
MAX_SITE_SEEN = 8192  # digests of datagrams carried across or taken from across, so each goes once


class Datagram(NamedTuple):
    """A datagram to send, and where to: a multicast group (the control address or a
    joined group's), one peer's :class:`Endpoint`, or the subnet's :class:`Broadcast`."""

    data: bytes
    destination: Destination


class Turn(NamedTuple):
    """What one :meth:`PeerCore.turn` hands its adapter, to be carried out in this order:
    ``stored`` messages are committed already; send ``datagrams``; then tell ``events``."""

    stored: int
    datagrams: list[Datagram]
    events: list[Event]


@dataclass(slots=True)
class JoinedGroup:
    """What this peer keeps for one group it is a member of; leaving drops it whole."""

    channel: GroupChannel
    cipher: crypto.GroupKeys | None  # a private group's keys, by epoch (middleware.teams)
    team: GroupTeam | None = None  # roles and removals (middleware.teams)
    held: list = field(default_factory=list)  # datagrams held while the team may not send (GroupTeam.may_send)
    operations: GroupOperations | None = None  # built from the store on first use (PeerCore.ops)
    seqno_to_save: bool = False  # composed since the last commit: the next seqno is stored with it
    announce_due: bool = False  # its membership changed: the zeroconf announcement is stale
    relay: GroupRelay | None = None  # its relay tree, for the members multicast does not reach
    # Site relays (routing.site_targets): whether this peer carries the group's traffic to another
    # site (as of the last flush), what it heard by multicast to carry there, and what it was
    # handed from there to multicast here; each queue is bounded by MAX_SITE_QUEUE.
    site_relay: bool = False
    site_local: bool = False  # it hears some members by multicast: what comes from across is multicast again
    site_forward: list[bytes] = field(default_factory=list)
    site_remulticast: list[bytes] = field(default_factory=list)


@dataclass
class Stats:
    datagrams_in: int = 0
    datagrams_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    malformed_dropped: int = 0
    bad_signature_dropped: int = 0
    sealed_dropped: int = 0
    not_member_dropped: int = 0
    duplicates_dropped: int = 0
    delivered: int = 0
    own_looped_back: int = 0
    extra: dict = field(default_factory=dict)


class PeerCore:
    # While the store cannot be written, flushes try again this often.
    STORAGE_RETRY = 1.0

    def __init__(self, store: PeerStore, now: float, name: str | None = None, *, wall: float | None = None,
                 control_addr: str = CONTROL_ADDR, port: int = DEFAULT_PORT, max_held: int = DEFAULT_MAX_HELD,
                 max_held_bytes: int = DEFAULT_MAX_HELD_BYTES, rng: random.Random | None = None) -> None:
        """``name``: the display name to use (already checked); None keeps the stored one.
        ``wall``: the wall clock in seconds (``now`` if not given), for the groups' first sync requests."""
        self.store = store
        self.identity = store.identity()
        self.pid = self.identity.pid
        self._pid_bytes = self.pid.encode()
        self.control_addr = control_addr
        self.port = port
        self.control_group = GroupAddress(control_addr, port)
        self.max_held = max_held
        self.max_held_bytes = max_held_bytes
        stored_name = store.name()
        if name and name != stored_name:
            store.set_name(name)
        self.name = name or stored_name or ""
        self._rng = rng or random.Random()
        self.gjlp = Gjlp(self.identity, self.name, self._rng, control_addr=control_addr)
        # Who is heard by which path (middleware/reach.py); members come first in its bounds.
        self.reach = Reach(self.pid, self.name, self._rng, is_member=self._is_member_anywhere)
        self.unicast_copies = 0  # datagrams sent by unicast to peers multicast does not reach
        self.site_forwarded = 0  # datagrams heard by multicast and carried to another site's relays
        self.site_remulticast = 0  # datagrams from another site multicast again into this one
        self._site_seen: OrderedDict[bytes, None] = OrderedDict()
        self._gone_at: dict[str, float] = {}  # members' GOODBYEs, so a departed site relay is replaced at once
        self._wall = now if wall is None else wall  # the last wall time given: the peer cache's stamps
        self._wall_now = now  # when it was given (on the ``now`` clock): _wall_at
        self._peers_to_cache: dict[str, tuple[Endpoint, float]] = {}  # proven since the last commit
        self._broadcast_at: float | None = None  # the next announcement to the subnet's broadcast address
        self._broadcast_due = False
        self.plaintext_refused = 0
        self.sender_names_differing = 0  # messages delivered whose signed name is not their author's record's
        self.joined: dict[str, JoinedGroup] = {}
        self.stats = Stats()
        self.presence = Presence()  # last heard per pid; idle beacons (middleware/presence.py)
        self._goodbye_due = False  # the app is closing: the next flush says goodbye in every group
        self._outbox: list[Datagram] = []  # committed, for datagrams_to_send()
        self._events: list[Event] = []  # committed, for events()
        self._membership_changed: set[str] = set()  # groups this peer joined or left since the last flush
        # While the store cannot be written: what failed, and what waits to be stored.
        self.storage_error: str | None = None
        self._unstored: list[ChatMessage] = []
        self._unstored_conflicts: list = []  # Conflict and Replaced events not stored yet
        self._members_to_save: dict[str, set[str]] = {}  # gid -> pids whose rows changed
        self._unsent: dict[Mid, str] = {}  # own messages taken back since take_unsent()
        self._retry_at: float | None = None
        self.teams: dict[str, GroupTeam] = {}  # joined groups' and groups this peer was removed from
        self._teams_to_save: set[str] = set()
        self._team_events: list[Event] = []  # told after the commit, as the others
        self.removed_dropped = 0  # removed members' messages past their cut, and their datagrams
        self._admissions: dict[str, list] = {}  # gid -> [invite secret, next KEY_REQUEST at]: waiting for an ADMIT
        for record, next_seqno in store.load_groups():
            self.gjlp.restore(record)
            key = store.group_key(record.gid) if record.private else None
            if key:
                self.gjlp.keys[record.gid] = key
            stored_team = store.direct_setting(TEAM_SETTING + record.gid)
            if stored_team and record.verified:
                team = self.teams[record.gid] = GroupTeam(record.gid, self._owner(record), self.identity, key,
                                                          stored_team)
                self._apply_roles(record, team)
            if self.gjlp.is_member(record.gid):
                self._open_channel(record.gid, next_seqno, now, now if wall is None else wall)
        self.reach.add_cached(store.cached_peers(), now, self._wall)
        # Direct messages (middleware/direct.py): SES's state and the unsettled messages from the store.
        ses_state = store.direct_setting(SETTING_SES)
        ses = Ses.from_bytes(self.pid, ses_state) if ses_state else Ses(self.pid)
        self.direct = DirectCore(self.identity, self.gjlp.direct_keys, store.direct_message, ses,
                                 receipts=store.direct_setting(SETTING_RECEIPTS) != b"0")
        self.direct.restore(store.direct_conversations(), store.direct_unsettled(), store.direct_unread, now)
        own = [self.gjlp.groups[gid].members[self.pid] for gid in self.gjlp.joined_gids()]
        if any(record.name != self.name or not record.dh for record in own):
            # Renamed while away (--name), or records signed before direct-message keys: re-signed at start
            for gid in self.gjlp.rename(self.name):
                store.save_members(gid, [self.gjlp.groups[gid].members[self.pid]])

    # -- user calls -------------------------------------------------------------------

    def execute(self, command: commands.CoreCommand, now: float, wall: float | None = None) -> Any:
        """Run one call (:mod:`middleware.commands`) at ``now`` (``wall``: the wall clock, for what is
        stamped for people to read; by default the last one given, moved on to ``now``), and answer
        what it answers.  What it changes is stored, sent and told by the next :meth:`flush`."""
        wall = self._wall_at(now) if wall is None else wall
        c = commands
        match command:
            case c.Whoami():
                return {"pid": self.pid, "name": self.name}
            case c.SetName(name):
                return self.set_name(rules.check_name(name))
            case c.ListGroups():
                return self.groups()
            case c.Group(gid):
                return self.group(gid)
            case c.Invite(gid):
                return self.invite(gid)
            case c.LeaveGroup(gid):
                self.leave(gid, wall)
                return None
            case c.SetRole(gid, pid, role):
                return self.set_role(gid, pid, role, now)
            case c.SetAdminsOnly(gid, on):
                return self.set_admins_only(gid, on, now)
            case c.RemoveMember(gid, pid):
                return self.remove_member(gid, pid, now)
            case c.Presence(gid):
                return self.presence_of(gid, now)
            case c.ReachedDirectly(gid):
                return self.reached_directly(gid, now)
            case c.Pending(gid):
                return self.pending(gid)
            case c.Advertise():
                return self.advertise()
            case c.Peers():
                return self.peers(now)
            case c.Send(gid, text, parent, mentions):
                return self.send(gid, text, parent, now, wall, mentions)
            case c.Edit(gid, mid, text):
                return self.operate(gid, "edit", mid, now, wall, text=rules.check_edit_text(text))
            case c.Delete(gid, mid):
                return self.operate(gid, "delete", mid, now, wall)
            case c.React(gid, mid, emoji, on):
                return self.operate(gid, "react", mid, now, wall, emoji=rules.check_emoji(emoji), on=bool(on))
            case c.Pin(gid, mid, on):
                return self.operate(gid, "pin", mid, now, wall, on=bool(on))
            case c.SetTopic(gid, text):
                return self.operate(gid, "topic", None, now, wall, text=rules.check_topic(text))
            case c.Topic(gid):
                self.channel(gid)
                return self.ops(gid).topic()
            case c.Pinned(gid):
                return self.messages(gid, list(self.ops(gid).pinned()) if gid in self.joined else [])
            case c.History(gid, before, after, limit):
                if not command.paged:
                    return self.history(gid)
                return self.history_page(gid, before, after, commands.DEFAULT_HISTORY_PAGE if limit is None else limit)
            case c.MessageCount(gid):
                return self.message_count(gid)
            case c.HistoryAround(gid, mid, limit):
                return self.history_around(gid, mid, limit)
            case c.Messages(gid, mids):
                return self.messages(gid, list(mids))
            case c.Notices(gid):
                return self.notices(gid)
            case c.Thread(gid, root):
                return self.thread(gid, root)
            case c.ThreadRoot(gid, mid):
                return self.thread_root(gid, mid)
            case c.Threads(gid, before, limit):
                return self.threads(gid, before, limit)
            case c.UnreadBefore(gid, below):
                return self.unread_before(gid, below)
            case c.ReadMarks(gid):
                self.known(gid)
                return self.store.read_marks(gid)
            case c.MarkRead(gid, ranges):
                return self.mark_read(gid, list(ranges))
            case c.Mentions(limit):
                return self.mentions(limit)
            case c.Search():
                return self._search_page(command)
            case c.SendDirect(pid, text, parent):
                return self.send_direct(pid, text, parent, wall)
            case c.DirectHistory(pid, before, limit):
                return self.direct_history(pid, before, limit)
            case c.ListConversations():
                return self.conversations(now)
            case c.MarkDirectRead(pid, mid):
                return self.mark_direct_read(pid, mid)
            case c.ReadReceipts(on):
                self.set_read_receipts(on)
                return on
        raise TypeError(f"{type(command).__name__} is not a core command: an adapter runs it")

    def _search_page(self, command: commands.Search) -> commands.SearchResults:
        """:meth:`search`, one page of ``command.limit`` from its cursor (an offset), and the next page's."""
        offset = int(command.cursor) if command.cursor is not None else 0
        try:
            found = self.search(command.query, gid=command.gid, sender=command.sender, since=command.since,
                                until=command.until, limit=command.limit + 1, offset=offset,
                                by_time=command.order == "time", direct=command.direct)
        except SearchQueryError as exc:
            raise SearchQueryError(f"bad search query {command.query[:200]!r}: {exc} (use words, \"phrases\", "
                                   "prefix*, AND, OR, NOT; put other characters inside double quotes)") from None
        more = len(found) > command.limit
        return commands.SearchResults(found[:command.limit], str(offset + command.limit) if more else None)

    def set_name(self, name: str) -> list[str]:
        """A new (checked) display name, kept and re-announced in every joined group; returns those groups."""
        self.name = name
        self.reach.name = name
        self.store.set_name(name)
        renamed = self.gjlp.rename(name)
        for gid in renamed:
            self.store.save_members(gid, [self.gjlp.groups[gid].members[self.pid]])
        return renamed

    def advertise(self) -> None:
        """GJLP advertisement: ask every peer on the LAN for the groups it knows."""
        self.gjlp.advertise()

    def add_peer(self, address: str | Endpoint, now: float, found_by: str = "manual") -> Endpoint:
        """A peer's address (``host:port``, the port defaulting to this peer's), from the user or
        an invite: it is probed, and once it proves itself it is asked for its groups like any
        peer that answers an advertisement."""
        if isinstance(address, Endpoint):
            endpoint = address
        else:
            try:
                endpoint = parse_endpoint(address, self.port)
            except ValueError as exc:
                raise UsageError(f"bad address: {exc}") from None
        if endpoint in self.reach.own:
            raise UsageError(f"{endpoint} is this peer's own address")
        if hint_refused(endpoint.host, self.reach.networks):
            raise UsageError(f"{endpoint.host} is not one computer's address (a broadcast, multicast or network address)")
        self.reach.add(endpoint, found_by, now)
        return endpoint

    def accept_invite(self, text: str, now: float) -> Invite:
        """The invite in ``text``; its ``peer`` endpoints are probed (found by "invite")."""
        invite = parse_invite(text)
        if invite is None:
            raise UsageError("not an invite: an invite looks like m2mc://join/<group id>?desc=…&peer=host:port")
        for endpoint in invite.peers:
            if endpoint not in self.reach.own:
                self.reach.add(endpoint, "invite", now)  # (one naming a broadcast address is refused there)
        return invite

    def invite(self, gid: str) -> str:
        """The invite link for ``gid``: its id, description and this peer's endpoints; for a private
        group that re-keyed (the passphrase admits nobody since), a one-time secret that lets the
        joiner be admitted by this peer and fetch the current key (middleware.teams)."""
        record = self.known(gid)
        joined = self.joined.get(gid)
        secret = b""
        if record.private and joined is not None and joined.team is not None and joined.team.roles.epochs:
            secret = joined.team.new_invite()
            self._teams_to_save.add(gid)
        return invite_link(gid, record.desc, sorted(self.reach.own, key=str), secret)

    def request_admission(self, gid: str, secret: bytes, now: float) -> None:
        """Ask to be admitted to a private group with an invite's one-time secret: KEY_REQUESTs go
        to the group's channel (one a second) until a member's ADMIT lets this peer in."""
        record = self.known(gid)
        if self.gjlp.is_member(gid):
            return
        if not record.verified or not record.private:
            raise UsageError("an invite's secret is for a private group whose descriptor is known")
        self._admissions[gid] = [secret, now]

    def _take_admission(self, admit: wire.Admit, now: float, wall: float) -> None:
        """A member's ADMIT for this peer: the group key (checked against the descriptor) and the
        current epoch's key; this peer joins with them."""
        record = self.gjlp.groups[admit.gid]
        if not record.is_current(crypto.pid_of(admit.author_key)) or not wire.verify_admit(admit):
            return
        base = crypto.open_epoch_key(self.identity, admit.sealed_group_key)
        key = crypto.open_epoch_key(self.identity, admit.sealed_key)
        if base is None or key is None or crypto.key_check(base) != record.key_check:
            return
        del self._admissions[admit.gid]
        self.join(record, base, now, wall)
        joined = self.joined[admit.gid]
        assert joined.team is not None and joined.team.keys is not None
        if admit.epoch:
            joined.team.keys.add(admit.epoch, key)
            joined.team.keys.use(admit.epoch)
        joined.team.admitted.add(self.pid)
        joined.announce_due = True
        self._teams_to_save.add(admit.gid)

    def peers(self, now: float) -> list[dict]:
        """Every peer known by endpoint or heard by multicast: how it was found, how it is reached,
        and ``last_heard`` in seconds ago."""
        return [{**row, "last_heard": round(now - row["last_heard"], 1)} for row in self.reach.peers(now)]

    def say_goodbye(self) -> None:
        """The app is closing (not leaving): the next flush tells every joined group, so members
        show this peer offline at once."""
        self._goodbye_due = bool(self.joined)

    def resync(self, now: float) -> None:
        """Ask every joined group for what this peer missed, and re-advertise."""
        for joined in self.joined.values():
            joined.channel.start_sync(now)
        self.gjlp.advertise()

    def woke(self, now: float) -> None:
        """This peer may have missed traffic (its link came back, it slept): resync every group,
        and beacon in each now, so members that took it for offline show it online at once and
        answer with beacons of their own (``Presence.beacon_soon``)."""
        self.resync(now)
        for gid, joined in self.joined.items():
            self.presence.beacon_soon(gid, now)
            if joined.team is not None:
                joined.team.unconfirm()  # it may have missed a re-key: it hears the group first

    def moved(self, old: Endpoint | None, new: Endpoint, now: float) -> None:
        """This peer's endpoint is now ``new`` (its address changed, or it moved to another
        interface): proven peers are told from there (``Reach.moved``), and every group resyncs."""
        self.reach.moved(old, new, now)
        self.woke(now)

    def warn_conflicts_held(self) -> None:
        """Equivocations learnt before this start: their warnings stand."""
        for gid in self.joined:
            for kept, _ in self.store.conflicts(gid):
                self._events.append(WarningRaised(gid, _conflict_warning((kept.sender, kept.seqno))))

    # -- roles and removal (middleware.roles, middleware.teams) ---------------------------

    @staticmethod
    def _owner(record: GroupRecord) -> str:
        return crypto.pid_of(record.descriptor.creator_key) if record.descriptor else ""

    def _team(self, gid: str) -> GroupTeam:
        self.channel(gid)  # a member, or a clear refusal
        team = self.joined[gid].team
        assert team is not None
        return team

    def set_role(self, gid: str, pid: str, role: str, now: float | None = None) -> None:
        """The owner makes a current member an admin (``role`` "admin") or takes it back ("member")."""
        team = self._team(gid)
        if role not in ("admin", "member"):
            raise UsageError('role must be "admin" or "member"')
        if not self.gjlp.groups[gid].is_current(pid):
            raise UsageError(f"{pid} is not a current member of this group")
        try:
            team.set_role(pid, role, self._wall_now if now is None else now)
        except PermissionError as exc:
            raise UsageError(f"cannot change that role: {exc}") from None
        self._team_changed(gid)

    def remove_member(self, gid: str, pid: str, now: float) -> None:
        """The owner or an admin removes ``pid``: signed, applied by every member; a private group
        re-keys to the remaining members (middleware.teams)."""
        team = self._team(gid)
        record = self.gjlp.groups[gid]
        if pid not in record.members:
            raise UsageError(f"{pid} is not a member of this group")
        ranges = self.joined[gid].channel.orderer.delivered_ranges().get(pid) or []
        cut = ranges[0][1] if ranges and ranges[0][0] == 1 else 0
        recipients = {p: r.dh for p, r in record.members.items()
                      if record.is_current(p) and p not in (self.pid, pid) and r.dh}
        try:
            team.remove(pid, cut, recipients, now)
        except PermissionError as exc:
            raise UsageError(f"cannot remove that member: {exc}") from None
        self._team_changed(gid, now)

    def set_admins_only(self, gid: str, on: bool, now: float | None = None) -> None:
        """The owner's group setting: only the owner and admins pin and change the topic (``on``)."""
        team = self._team(gid)
        try:
            team.set_admins_only(bool(on), self._wall_now if now is None else now)
        except PermissionError as exc:
            raise UsageError(f"cannot change the setting: {exc}") from None
        self._team_changed(gid)

    def roles(self, gid: str) -> dict[str, str]:
        """Each current member's role: "owner", "admin" or "member"."""
        return dict(self.group(gid).roles)

    def _apply_roles(self, record: GroupRecord, team: GroupTeam) -> None:
        record.removed = set(team.roles.removed)
        record.admins = set(team.roles.admins)
        record.admins_only = team.roles.admins_only
        record.admission_needed = record.private and bool(team.roles.epochs)
        record.admitted = set(team.admitted)
        self.gjlp._joined = None  # is_member may have changed

    def _team_changed(self, gid: str, now: float | None = None) -> None:
        """The roles or keys of ``gid`` changed: the group's record follows, the change is stored,
        and what a person should know is told (after the commit)."""
        record = self.gjlp.groups[gid]
        team = self.teams[gid]
        admins_before, removed_before = set(record.admins), set(record.removed)
        self._apply_roles(record, team)
        exposed = team.exposed() if gid in self.joined else None
        if exposed is not None:  # concurrent removals: the current key is ours and a removed member holds it
            recipients = {p: r.dh for p, r in record.members.items() if record.is_current(p) and p != self.pid and r.dh}
            team.remove(exposed, 0, recipients, self._wall_now if now is None else now, action="rekey")
        self._teams_to_save.add(gid)
        self._membership_changed.add(gid)
        joined = self.joined.get(gid)
        if joined is not None:
            joined.announce_due = True
        by_record = {r.target: r for r in team.roles.valid}

        def name_of(pid: str) -> str:
            member = record.members.get(pid)
            return names.shown(member.name) if member is not None else pid[:8]

        for pid in sorted(record.admins ^ admins_before):
            if pid in record.removed:
                continue
            author = by_record[pid].author if pid in by_record else record.role(pid)
            self._team_events.append(RoleChanged(gid, pid, name_of(pid), record.role(pid), author, name_of(author)))
        for pid in sorted(set(record.removed) - removed_before):
            author = team.roles.removed[pid].author
            if pid == self.pid:
                self._team_events.append(RemovedFromGroup(gid, record.desc, author, name_of(author)))
                self._removed_self(gid)
            else:
                self._team_events.append(MemberRemoved(gid, pid, name_of(pid), author, name_of(author)))

    def _removed_self(self, gid: str) -> None:
        """An owner or admin removed this peer: the group's history stays, nothing more arrives."""
        joined = self.joined.pop(gid, None)
        if joined is None:
            return
        self.presence.forget(gid)
        self.store.set_next_seqno(gid, joined.channel.next_seqno)

    def _visible(self, gid: str, messages: list[ChatMessage]) -> list[ChatMessage]:
        """``messages`` without a removed member's past its removal's cut (protocol.md, Roles)."""
        team = self.teams.get(gid)
        if team is None or not team.roles.removed:
            return messages
        cuts = team.roles.cuts()
        return [m for m in messages if not past_cut(cuts, *m.mid)]

    def _cuts(self) -> Cuts:
        """Every group's removed members' cuts, for the store's lists (search, mentions) to leave
        out what :meth:`_visible` leaves out of history."""
        return {gid: team.roles.cuts() for gid, team in self.teams.items() if team.roles.removed}

    def create_group(self, desc: str, salt: bytes, key: bytes | None, wall: float) -> str:
        """A new group (``desc`` checked; private with ``key``), made at ``wall``."""
        created_at = int(wall * 1000)
        addr = group_address(f"{self.pid}:{created_at}:{salt.hex()}", self.control_addr)
        if key:
            descriptor = wire.sign_descriptor(self.identity, desc, True, crypto.ARGON2ID, crypto.ARGON2_OPSLIMIT,
                                              crypto.ARGON2_MEMLIMIT, salt, crypto.key_check(key), addr,
                                              self.port, created_at)
        else:
            descriptor = wire.sign_descriptor(self.identity, desc, False, "", 0, 0, salt, b"", addr, self.port,
                                              created_at)
        record = self.gjlp.create_group(descriptor, created_at / 1000, key)
        gid = record.gid
        self.store.save_group(record)
        # Nothing read yet, said in the store: a group with no read marks at all is one from before
        # read marks existed, whose history the app takes as read.
        self.store.add_read_marks(record.gid, [])
        self.store.save_members(gid, record.members.values())
        if key:
            self.store.set_group_key(gid, key)
        self._open_channel(gid, 1, None, wall, confirmed=True)
        self._events.append(GroupCreated(gid))
        return gid

    def joinable(self, gid: str, passphrase: str | None) -> GroupRecord | None:
        """The group if joining needs doing (None if already a member); refuses what cannot be joined."""
        record = self.known(gid)
        if self.gjlp.is_member(gid):
            return None
        if record.legacy:
            raise UsageError(_LEGACY.format(desc=record.desc))
        if not record.verified:
            raise rules.not_verified(record.desc)
        rules.check_join_passphrase(record.desc, record.private, passphrase)
        return record

    @staticmethod
    def checked_key(record: GroupRecord, key: bytes) -> bytes:
        if crypto.key_check(key) != record.key_check:
            raise rules.wrong_passphrase(record.desc)
        return key

    @staticmethod
    def kdf_args(record: GroupRecord) -> tuple:
        d = record.descriptor
        assert d is not None, "joinable() only returns verified groups"
        return d.salt, d.kdf, d.kdf_ops, d.kdf_mem

    def join(self, record: GroupRecord, key: bytes | None, now: float, wall: float) -> str:
        """Join ``record`` (found :meth:`joinable`; ``key`` checked if private)."""
        gid = record.gid
        self.gjlp.join(gid, now, key, wall=wall)
        self.gjlp.advertise()  # the members' answers tell us who they are: we take datagrams only from them
        self.store.save_group(record)
        # Nothing read yet, said in the store: a group with no read marks at all is one from before
        # read marks existed, whose history the app takes as read.
        self.store.add_read_marks(record.gid, [])
        self.store.save_members(gid, record.members.values())  # what was known before joining, once
        if key is not None:
            self.store.set_group_key(gid, key)
        # Confirmed at once: had the group re-keyed, members would refuse a passphrase's joiner anyway.
        self._open_channel(gid, None, now, wall, confirmed=True)
        self._membership_changed.add(gid)
        return gid

    def leave(self, gid: str, wall: float) -> GroupRecord:
        record = self.known(gid)
        if not self.gjlp.is_member(gid):
            raise rules.not_a_member(gid)
        self.gjlp.leave(gid, wall)
        self.store.save_members(gid, [record.members[self.pid]])
        joined = self.joined.pop(gid)
        self.presence.forget(gid)  # when this peer last spoke there: a rejoin beacons afresh
        self.store.set_next_seqno(gid, joined.channel.next_seqno)
        self._membership_changed.add(gid)
        return record

    def send(self, gid: str, text: str, parent: Mid | None, now: float, wall: float,
             mentions: Sequence[str] = ()) -> Mid:
        """Compose and queue a message; it is stored and sent by the next flush.  If that
        flush cannot store it, it is taken back, never sent (see :meth:`take_unsent`).
        ``mentions``: pids of current members whose "@Name" in ``text`` becomes their token
        (middleware.mentions); tokens already in ``text`` are kept as they are."""
        channel = self.channel(gid)
        if not isinstance(text, str):
            raise UsageError("text must be a string")
        if mentions:
            text = with_tokens(text, rules.check_mentions(mentions), self._current_names(gid))
        refusal = kinds.chat_refusal(text)
        if refusal is not None:
            raise UsageError(refusal)
        if parent is not None and self.ops(gid).is_operation_mid(parent):
            raise UsageError(f"bad parent: {format_mid(parent)} is an operation, not a message")
        data = channel.compose(self.name, text, parent, now, wall)
        self.joined[gid].seqno_to_save = True
        return self.pid, data.seqno

    def offer_file(self, gid: str, text: str, parent: Mid | None, now: float, wall: float) -> Mid:
        """A file offer (``text`` from :meth:`middleware.files.FileOffer.to_text`) as a message of
        ours, composed as :meth:`send` does, which refuses the offer's marker."""
        channel = self.channel(gid)
        if parent is not None and self.ops(gid).is_operation_mid(parent):
            raise UsageError(f"bad parent: {format_mid(parent)} is an operation, not a message")
        data = channel.compose(self.name, text, parent, now, wall)
        self.joined[gid].seqno_to_save = True
        return self.pid, data.seqno

    def operate(self, gid: str, kind: str, target: Mid | None, now: float, wall: float, **fields) -> Mid:
        """An OBG operation (middleware.obg) as a message of ours: signed, repaired and stored like
        one.  Flush first: what was just delivered counts, the operation names the last one it saw."""
        channel = self.channel(gid)
        rules.check_target(target)
        ops = self.ops(gid)
        team = self.joined[gid].team
        if kind == "delete" and target is not None and target[0] != self.pid and team is not None:
            # Another's message: the owner or an admin removes it for everyone ("removed by an admin").
            if not (team.is_moderator(self.pid) and team.roles.role(self.pid) != "member"):
                raise UsageError("not the author: only the author of a message, the group's owner or an "
                                 "admin may delete it")
            kind = "moderate"
        if kind in ("pin", "topic") and team is not None and not team.may_pin(self.pid):
            raise UsageError(f"{kind} refused: the owner lets only the owner and admins pin and change the topic")
        known = target is None or channel.orderer.is_delivered(target)
        text = ops.compose(self.pid, kind, target, target_known=known, **fields)
        data = channel.compose(self.name, text, target, now, wall)
        self.joined[gid].seqno_to_save = True
        return self.pid, data.seqno

    def ops(self, gid: str, history: list[ChatMessage] | None = None) -> GroupOperations:
        """The group's operations, built on first use by replaying the store (``history`` if at hand)."""
        joined = self.joined[gid]
        ops = joined.operations
        if ops is None:
            ops = joined.operations = GroupOperations(gid, fetch=functools.partial(self._stored, gid))
            if joined.team is not None:
                ops.moderator = joined.team.is_moderator
                ops.may_pin = joined.team.may_pin
            ops.take(self.store.history(gid) if history is None else history)
            # The index follows edits as they come (_tell), committed with the next batch; redoing
            # the touched messages here mends what a crash before that commit left behind.
            self._index_current_text(gid, [ops.view(m) for m in self._stored(gid, list(ops.core.touched_messages()))])
        return ops

    def _index_current_text(self, gid: str, views: list[ChatMessage]) -> None:
        for view in views:
            if view.edited or view.deleted:  # reactions and pins leave the text as stored
                self.store.set_search_text(gid, view.mid, None if view.deleted else view.text)

    def _stored(self, gid: str, mids: list[Mid]) -> list[ChatMessage]:
        return self.store.messages(gid, mids)

    def groups(self) -> list[GroupView]:
        return [self._with_topic(record.view(self.pid)) for record in self.gjlp.groups.values()]

    def group(self, gid: str) -> GroupView:
        return self._with_topic(self.known(gid).view(self.pid))

    def _with_topic(self, view: GroupView) -> GroupView:
        if view.gid not in self.joined:
            return view
        topic = self.ops(view.gid).topic()[0]
        return replace(view, topic=topic) if topic else view

    def history(self, gid: str) -> list[ChatMessage]:
        """What the store holds of ``gid`` (flush first for the latest), operations applied, each
        author shown by its member record's current name (:meth:`by_record`)."""
        self.known(gid)
        messages = self.store.history(gid)
        messages = self._visible(gid, messages)
        if gid not in self.joined:
            return self.by_record(gid, [m for m in messages if not is_operation(m)])
        ops = self.ops(gid, messages)
        touched = ops.core.touched_messages()  # a 100,000-message history: few messages touched
        return self.by_record(gid, [ops.view(m) if m.mid in touched else m for m in messages
                                    if kinds.listed(m.text)])

    def notices(self, gid: str) -> list[Notice]:
        """The group's latest topic and pin changes, in delivery order (GroupOperations.notices), each
        author named as :meth:`history` names them.  Not part of ``history``: an app shows them."""
        self.known(gid)
        if gid not in self.joined:
            return []
        return self._named_notices(gid, list(self.ops(gid).notices))

    def _named_notices(self, gid: str, notices: list[Notice]) -> list[Notice]:
        named = self.by_record(gid, [notice.message for notice in notices])
        return [replace(notice, message=message) for notice, message in zip(notices, named)]

    def _shown(self, gid: str, messages: list[ChatMessage]) -> list[ChatMessage]:
        """Stored chat messages as :meth:`history` shows them."""
        messages = self._visible(gid, messages)
        if gid in self.joined:
            ops = self.ops(gid)
            messages = [ops.view(m) for m in messages]
        return self.by_record(gid, messages)

    def history_page(self, gid: str, before: int | None = None, after: int | None = None,
                     limit: int = 50) -> list[ChatMessage]:
        """One page of :meth:`history`, by delivery order (PeerStore.history_page)."""
        self.known(gid)
        return self._shown(gid, self.store.history_page(gid, before, after, limit))

    def message_count(self, gid: str) -> int:
        self.known(gid)
        return self.store.message_count(gid)

    def search(self, query: str, *, gid: str | None = None, sender: str | None = None, since: int | None = None,
               until: int | None = None, limit: int = 20, offset: int = 0, by_time: bool = False,
               direct: bool = False) -> list[tuple[SearchHit, Mid]]:
        """Messages matching ``query`` (PeerStore.search), each with its thread's root: in every
        group, and with ``direct`` every direct conversation too; or in the one group or
        conversation (``dm:<pid>:<pid>``) ``gid`` names."""
        groups = functools.partial(self.store.search, query, sender=sender, since=since, until=until, by_time=by_time,
                                   cuts=self._cuts())
        conversations = functools.partial(self.store.search_direct, query, sender=sender, since=since, until=until,
                                          by_time=by_time)
        if gid is not None and gid.startswith("dm:"):
            hits = conversations(peer=self._conversation_peer(gid), limit=limit, offset=offset)
        elif gid is not None or not direct:
            if gid is not None:
                self.known(gid)
            hits = groups(gid=gid, limit=limit, offset=offset)
        else:
            # Both lists in one order (relevance: bm25 of each index; time: newest shown first).
            # Sorted, not merged: a group's hits by time come in delivery order, which a sender's
            # clock can put out of step with the times shown.
            merged = sorted([*groups(limit=offset + limit), *conversations(limit=offset + limit)],
                            key=(lambda hit: -hit.sent_at) if by_time else (lambda hit: hit.rank))
            hits = merged[offset:offset + limit]
        return [(hit, self._direct_root(hit.peer, hit.mid) if hit.peer is not None else self.thread_root(hit.gid, hit.mid))
                for hit in hits]

    def _conversation_peer(self, conversation: str) -> str:
        """The other party of a direct conversation named as exports name it (``dm:<pid>:<pid>``)."""
        pids = conversation.split(":")[1:]
        if len(pids) != 2 or self.pid not in pids or conversation_id(*pids) != conversation:
            raise UsageError(f"no direct conversation {conversation} of this peer (dm:<pid>:<pid>, the pids sorted)")
        return pids[0] if pids[1] == self.pid else pids[1]

    def _direct_root(self, peer: str, mid: Mid) -> Mid:
        """The first message of ``mid``'s thread in the conversation with ``peer``."""
        root, message = mid, self.store.direct_message(peer, mid)
        for _ in range(100_000):  # as thread_root
            if message is None or message.parent is None:
                return root
            parent = self.store.direct_message(peer, message.parent)
            # As in groups, a parent shown after its reply leaves the reply first: a peer may name a
            # loop of parents (a held one, order 0, is not shown).
            if parent is None or not 0 < parent.order < message.order:
                return root
            root, message = message.parent, parent
        return root

    def thread_root(self, gid: str, mid: Mid) -> Mid:
        """The message that starts ``mid``'s thread (the store keeps each message's root)."""
        return self.store.thread_root(gid, mid) or mid

    def thread(self, gid: str, root: Mid) -> list[ChatMessage]:
        """``root`` and every answer under it, in delivery order (a parent is delivered before its answers)."""
        self.known(gid)
        return self._shown(gid, self.store.thread(gid, root))

    def threads(self, gid: str, before: int | None = None, limit: int = 50) -> list[StoredThread]:
        """``gid``'s threads, the most recently active first (PeerStore.threads), shown as :meth:`history`."""
        self.known(gid)
        found = self.store.threads(gid, before, limit)
        shown = iter(self._shown(gid, [m for t in found for m in (t.root, t.last)]))
        return [StoredThread(next(shown), t.replies, next(shown)) for t in found]

    def unread_before(self, gid: str, below: int) -> int:
        """About how many of ``gid``'s messages before the order ``below`` are unread (PeerStore.unread_before)."""
        self.known(gid)
        return self.store.unread_before(gid, below)

    def messages(self, gid: str, mids: list[Mid]) -> list[ChatMessage]:
        """The stored chat messages among ``mids``, in delivery order, shown as :meth:`history`."""
        self.known(gid)
        return self._shown(gid, [m for m in self.store.messages(gid, mids) if kinds.listed(m.text)])

    def history_around(self, gid: str, mid: Mid, limit: int = 50) -> list[ChatMessage]:
        """A page of :meth:`history` with ``mid`` in its middle; empty if ``mid`` is not stored."""
        self.known(gid)
        found = self.store.messages(gid, [mid])
        if not found:
            return []
        order = found[0].order
        return self._shown(gid, self.store.history_page(gid, before=order + 1, limit=limit // 2 + 1)
                           + self.store.history_page(gid, after=order, limit=limit - limit // 2))

    def by_record(self, gid: str, messages: list[ChatMessage]) -> list[ChatMessage]:
        """``messages`` with each author's name taken from its member record, never from the message.

        A message's own ``name`` is whatever its writer signed, and any member can sign "alice";
        only alice signs alice's member record.  Where the name differs, the message keeps it as
        ``signed_name``.  An author whose record this peer does not hold (none was ever heard, or
        it was dropped) is shown by the signed name marked unverified, with its key's fingerprint.
        The store keeps the messages as signed: this is how they are shown, not what they are.
        """
        record = self.gjlp.groups.get(gid)
        members = record.members if record is not None else {}
        # (pid, signed name) -> the name to show instead, or None to show the message as it is
        instead: dict[tuple[str, str], str | None] = {}
        out = []
        for message in messages:
            pid, signed = key = (message.mid[0], message.sender_name)
            if key in instead:
                shown = instead[key]
            else:
                member = members.get(pid)
                shown = names.shown(member.name) if member is not None else names.unverified(signed, pid)
                shown = instead[key] = None if shown == signed else shown
            out.append(message if shown is None else message._replace(sender_name=shown, signed_name=signed))
        return out

    def _current_names(self, gid: str) -> dict[str, str]:
        return {member.pid: member.name for member in self.known(gid).current()}

    def mentions(self, limit: int) -> list[ChatMessage]:
        """Messages that mention this peer, newest first, across groups, as :meth:`history` shows
        them (deleted ones left out; an edit shows its current text)."""
        found = []
        for message in self.store.mentions(self.pid, limit, self._cuts()):
            gid = message.gid
            if gid in self.joined:
                message = self.ops(gid).view(message)
            if not message.deleted:
                found.append(self.by_record(gid, [message])[0])
        return found

    # -- direct messages (middleware/direct.py) -----------------------------------------

    def send_direct(self, pid: str, text: str, parent: Mid | None, wall: float) -> Mid:
        """A direct message to ``pid``: stored by the next flush, sent when ``pid`` is reachable."""
        return self.direct.compose(pid, self.name, text, parent, wall)

    def direct_history(self, pid: str, before: int | None = None, limit: int | None = None) -> list[DirectMessage]:
        """The conversation with ``pid`` as stored (flush first): the newest ``limit`` before order ``before``."""
        if before is not None and (type(before) is not int or before < 1):
            raise UsageError("before must be a positive order")
        if limit is not None and (type(limit) is not int or limit < 0):
            raise UsageError("limit must be a natural number")
        return [self._direct_shown(row) for row in self.store.direct_history(pid, before, limit)]

    def conversations(self, now: float) -> list[ConversationView]:
        """Every direct conversation, the most recent first."""
        views = []
        for peer, conversation in self.direct.conversations.items():
            last = self.store.direct_history(peer, None, 1)
            if not last:
                continue  # nothing shown yet (only held messages, or a member's datagram that said nothing)
            views.append(ConversationView(peer, self._member_name(peer) or "", key_fingerprint(peer),
                                          self._direct_shown(last[0]), len(conversation.unread),
                                          self.presence.status(peer, now) == ONLINE))
        return sorted(views, key=lambda v: -(v.last.received_at if v.last else 0))

    def mark_direct_read(self, pid: str, mid: Mid) -> None:
        self.direct.mark_read(pid, mid)

    def set_read_receipts(self, on: bool) -> None:
        self.direct.set_receipts(on)

    def _direct_shown(self, row: StoredDirect) -> DirectMessage:
        """A stored direct message as shown: its author named by the member record, as in groups."""
        message = self.direct.view(row)
        name = self._member_name(row.sender) if row.sender != self.pid else self.name
        return message._replace(sender_name=names.shown(name) if name is not None
                                else names.unverified(row.name, row.sender))

    def _member_name(self, pid: str) -> str | None:
        """``pid``'s name in a joined group's member record, if any holds one."""
        for gid in self.joined:
            member = self.gjlp.groups[gid].members.get(pid)
            if member is not None:
                return member.name
        return None

    def _direct_endpoint(self, pid: str, now: float) -> tuple[Endpoint, bytes] | None:
        """Where a direct datagram to ``pid`` goes now, and the HELLO nonce it echoes: its proven
        endpoint while it is heard; None while it is away (its messages wait), or while its
        endpoint is being proven."""
        last = self.presence.last_heard(pid)
        if last is None or now - last > OFFLINE_AFTER:
            return None
        self.reach.seek(pid, now)
        endpoint = self.reach.endpoint(pid)
        return None if endpoint is None else (endpoint, self.reach.echo_for(pid))

    def pending(self, gid: str | None = None) -> int:
        """Messages held back, waiting for the message they answer."""
        channels = [self.channel(gid)] if gid else [joined.channel for joined in self.joined.values()]
        return sum(channel.pending for channel in channels)

    def presence_of(self, gid: str, now: float) -> dict[str, str]:
        """Each current member's presence ("online", "away", "offline"); this peer is online."""
        return {m.pid: "online" if m.pid == self.pid else self.presence.status(m.pid, now)
                for m in self.known(gid).current()}

    def reached_directly(self, gid: str, now: float) -> list[str]:
        """The current members of ``gid`` that multicast does not join to this peer: they get
        what it sends by unicast."""
        record = self.known(gid)
        return sorted(pid for pid, _ in self.reach.unicast_peers(now) if record.is_current(pid))

    def mark_read(self, gid: str, ranges: list[tuple[int, int]]) -> None:
        """Add delivery-order ranges to what was read in ``gid``, kept at once (a person's reading
        is not part of any flush)."""
        self.known(gid)
        try:
            self.store.add_read_marks(gid, [cast(tuple[int, int], tuple(r)) for r in ranges])
        except (TypeError, ValueError) as exc:
            raise UsageError(f"bad read marks: {exc}") from None
        self.store.commit()

    def take_unsent(self) -> dict[Mid, str]:
        """Own messages taken back since the last call because they could not be stored
        (never sent; their seqnos go to the next messages), each with the reason."""
        unsent, self._unsent = self._unsent, {}
        return unsent

    def take_announcements(self) -> list[str]:
        """Joined groups whose zeroconf announcement changed (their membership did)."""
        due = [gid for gid, joined in self.joined.items() if joined.announce_due]
        for gid in due:
            self.joined[gid].announce_due = False
        return due

    def known(self, gid: str) -> GroupRecord:
        record = self.gjlp.groups.get(gid) if isinstance(gid, str) else None
        if record is None:
            raise rules.unknown_group(gid)
        return record

    @property
    def channels(self) -> dict[str, GroupChannel]:
        """The joined groups' channels, by gid."""
        return {gid: joined.channel for gid, joined in self.joined.items()}

    def channel(self, gid: str) -> GroupChannel:
        record = self.known(gid)
        joined = self.joined.get(gid)
        channel = None if joined is None else joined.channel
        if channel is None and record.legacy:
            raise UsageError(_LEGACY.format(desc=record.desc))
        if channel is None:
            raise rules.not_a_member(gid)
        return channel

    def _open_channel(self, gid: str, next_seqno: int | None, sync_at: float | None, wall: float,
                      confirmed: bool = False) -> None:
        """The group's channel; with ``sync_at`` (now) MSP asks for whatever the group said
        while this peer was away (or before it joined), numbering its requests from ``wall``."""
        if next_seqno is None:
            next_seqno = self.store.next_seqno(gid)
        key = self.store.group_key(gid)
        record = self.gjlp.groups[gid]
        channel = GroupChannel(gid, self.identity, next_seqno, fetch=self.store.fetch, rng=self._rng,
                               max_held=self.max_held, max_held_bytes=self.max_held_bytes,
                               is_member=record.is_current, members=lambda: [m.pid for m in record.current()])
        channel.restore(self.store.delivered_mids(gid))
        channel.restore_conflicts(self.store.conflicts(gid))
        team = self.teams.get(gid)
        if team is None or (key and team.keys is None):
            team = self.teams[gid] = GroupTeam(gid, self._owner(record), self.identity, key, None, confirmed)
        elif not confirmed:
            team.unconfirm()
        self.joined[gid] = JoinedGroup(channel, team.keys, team, relay=GroupRelay(self.identity, gid))
        self.presence.opened(gid, self._wall_now if sync_at is None else sync_at)
        if sync_at is not None:
            channel.start_sync(sync_at, wall)

    # -- network input ----------------------------------------------------------------

    def receive(self, data: bytes, arrival: Arrival, now: float, wall: float) -> None:
        """One datagram, from a stranger until its signature and the group's rules say otherwise.

        ``arrival``: the endpoint it came from, as the socket saw it, and how (:class:`.Arrival`).
        The source is spoofable, so it is never taken as who sent it, and never answered with
        more than a HELLO until a HELLO's nonce has made the round trip (:mod:`.reach`)."""
        source, via = arrival.source, arrival.via
        if wire.is_relay(data):
            self._receive_relay(data, now, wall, via)
            return
        inner = wire.site_payload(data)
        if inner is not None:
            self._receive_site(inner, arrival, now, wall)
            return
        try:
            sealed = wire.direct_payload(data)
        except wire.WireError:
            sealed = b""
        if sealed is not None:
            self._receive_direct(sealed, len(data), source, now, wall, via)
            return
        envelope = self._decode(data, now)
        if envelope is None:
            return
        self._set_wall(now, wall)
        message = envelope.message
        if isinstance(message, (wire.Hello, wire.PeerList)):
            if via is not Via.UNICAST or source is None:
                self.stats.malformed_dropped += 1  # these are only ever sent to one endpoint
            elif isinstance(message, wire.Hello):
                if self.reach.hello(envelope.sender, message, source, now) and \
                        self._is_member_anywhere(envelope.sender):
                    self._heard(envelope.sender, now)  # it signed our fresh nonce: there now
            else:
                self.reach.peer_list(envelope.sender, message, source, now)
            return
        fresh = self._take(envelope, via, now, wall)
        if via is Via.MULTICAST:
            self._site_heard(envelope, data)
        member = self._is_member_anywhere(envelope.sender)
        if fresh and member:
            self._heard(envelope.sender, now)
        if source is not None:
            # A stranger's datagram moves reach as any verified one did (it gets only HELLOs and
            # bounded copies); a member's only when it said something new (reach.Reach.heard).
            self.reach.heard(envelope.sender, source, via, now, fresh or not member)
            if (via is Via.UNICAST and self.reach.endpoint(envelope.sender) != source and member):
                # A member sends to us by unicast, so it proved our endpoint, but we never proved
                # its own (the echo of our HELLO was lost): probe it now, within the HELLO budgets,
                # rather than wait for its next report to make us send it copies.
                self.reach.probe_soon(source, envelope.sender, now)
        if via is Via.BROADCAST:
            if isinstance(message, wire.Adv) and source is not None and self.reach.path(envelope.sender, now) is None:
                # Someone on the subnet whose multicast has not reached us: probe it, unless it does soon.
                self.reach.add(source, "broadcast", now, envelope.sender, delay=BROADCAST_GRACE)

    def _take(self, envelope: wire.Envelope, via: Via, now: float, wall: float) -> bool:
        """Apply one verified datagram (not a HELLO or PEER_LIST); returns whether it was fresh
        evidence of its sender: a message never seen, a HEARTBEAT or GOODBYE whose signed ``at``
        is fresh (:meth:`Presence.fresh_at`), or its own JOIN that changed its record.  Presence
        and where the sender is reached move only on such (issue 41, rows 1 and 9)."""
        message = envelope.message
        sender = envelope.sender
        if via is Via.BROADCAST:
            return False  # broadcasts only find peers; what they ask is asked again once they are proven
        # To the control address, a control message; to this peer's endpoint, whatever its type says.
        if via is Via.CONTROL or via is Via.UNICAST and isinstance(message, _CONTROL_MESSAGES):
            if not isinstance(message, _CONTROL_MESSAGES):
                self.stats.malformed_dropped += 1
                return False
            join = message.record if isinstance(message, wire.Join) and message.record.pid == sender else None
            before = self._record_counter(join.gid, sender) if join is not None else 0
            self.gjlp.receive(sender, message, now, wall)
            # A member's own JOIN that took: it has just joined, and shows online at once.
            return join is not None and self._record_counter(join.gid, sender) > before
        gid = getattr(message, "gid", None)
        joined = self.joined.get(gid) if isinstance(gid, str) else None
        if joined is None or not isinstance(gid, str):
            if isinstance(message, wire.Admit) and message.gid in self._admissions and message.target == self.pid:
                self._take_admission(message, now, wall)
                return False
            self.stats.not_member_dropped += 1
        elif joined.cipher and not envelope.sealed and not isinstance(message, _TEAM_PLAIN):
            self.stats.sealed_dropped += 1  # plaintext claiming to be from a private group
        elif isinstance(message, _TEAM_MESSAGES):
            record = self.gjlp.groups[gid]
            team = joined.team
            if team is not None and isinstance(message, wire.KeyRequest) and message.proof and \
                    not record.is_current(sender):
                if team.admission_request(sender, message, now):  # an invited joiner
                    self._team_changed(gid, now)
            elif team is None or not record.is_current(sender) and not (
                    isinstance(message, wire.KeyRequest) and sender in record.removed):  # told it was removed
                self.removed_dropped += team is not None and sender in record.removed
                self.stats.not_member_dropped += 1
            elif isinstance(message, wire.KeyRequest) and not message.proof:
                team.receive(sender, message, now, record.is_current)
                self.presence.beacon_soon(gid, now)  # a member back from away: it hears the group at once
            elif team.receive(sender, message, now, record.is_current):
                self._team_changed(gid, now)
                if gid in self.joined and not team.missing_epoch:
                    joined.channel.start_sync(now)  # what was sealed under the key it lacked
        elif isinstance(message, wire.Goodbye):
            if self.gjlp.groups[message.gid].is_current(sender) and \
                    self.presence.fresh_at(sender, message.at, wall, goodbye=True):
                self.presence.gone(sender)
                self._gone_at[sender] = now
        else:
            channel = joined.channel
            record = self.gjlp.groups[channel.gid]
            if record.removed:
                kept = self._without_removed(record, message)
                if kept is None:
                    return False
                message = kept
            if joined.team is not None and envelope.sealed and record.is_current(sender):
                joined.team.opened(sender, envelope.epoch, max(0, len(record.current()) - 1))
            if isinstance(message, wire.SyncReq) and sender != self.pid and joined.team is not None and \
                    record.is_current(sender) and joined.team.roles.records():
                joined.team.send_roles(now)  # a member back from away learns the roles
            if isinstance(message, wire.SyncReq) and sender != self.pid and \
                    self.gjlp.groups[channel.gid].is_current(sender):
                # A member asking for what it missed has just started, joined or woken: it hears this
                # peer is here within a second, as a returning one does (at most one early beacon
                # per group per EARLY_BEACON_GAP, so a replayed request costs no more).
                self.presence.beacon_soon(channel.gid, now)
            fresh = channel.receive(sender, message, now, envelope.public_key, wall)
            self.gjlp.heard(channel.gid, sender, wall)  # the member caps prefer whoever speaks
            if isinstance(message, wire.Heartbeat):
                return self.gjlp.groups[channel.gid].is_current(sender) and \
                    self.presence.fresh_at(sender, message.at, wall)
            return fresh
        return False

    def _without_removed(self, record: GroupRecord, message: wire.Message) -> wire.Message | None:
        """A relayed REPAIR or SYNC_RESP without removed members' messages past their cut (the
        live ones of a removed member are refused as a stranger's by the channel)."""
        if not isinstance(message, (wire.Repair, wire.SyncResp)):
            return message
        team = self.teams.get(record.gid)
        if team is None:
            return message
        kept = tuple(m for m in message.messages
                     if m.sender not in record.removed or m.seqno <= (team.roles.cut(m.sender) or 0))
        if len(kept) == len(message.messages):
            return message
        self.removed_dropped += len(message.messages) - len(kept)
        return replace(message, messages=kept) if kept or isinstance(message, wire.SyncResp) else None

    def _receive_relay(self, data: bytes, now: float, wall: float, via: Via) -> None:
        """A relay-tree datagram (RELAY, IHAVE, GRAFT, PRUNE: :mod:`.relay_link`).  Taken only by
        unicast, from a member this peer relays with in one of its groups, authentic under their
        pairwise key and fresh; anyone else's costs a parse and a look-up.  Its source address
        moves nothing: reach learns endpoints from HELLOs and envelopes, never from relaying."""
        self.stats.datagrams_in += 1
        self.stats.bytes_in += len(data)
        try:
            if via is not Via.UNICAST:
                raise wire.WireError("relay-tree datagrams go by unicast only")
            parsed = wire.parse_relay(data)
        except wire.WireError as exc:
            self.stats.malformed_dropped += 1
            log.debug("dropped malformed relay datagram: %s", exc)
            return
        joined = next((j for j in self.joined.values() if j.relay is not None and j.relay.tag == parsed.group_tag),
                      None)
        if joined is None or joined.relay is None:
            self.stats.not_member_dropped += 1
            return
        relay, sender = joined.relay, parsed.sender
        record = self.gjlp.groups[relay.gid]
        member = record.members.get(sender)
        if member is None or not record.is_current(sender) or not relay.accept(parsed, data, member.dh):
            self.stats.not_member_dropped += 1
            return
        self._set_wall(now, wall)

        def current() -> list[str]:
            return [m.pid for m in record.current()]

        if parsed.type is wire.MsgType.RELAY:
            self._relayed(joined, relay, parsed.inner, sender, now, wall)
        if parsed.type is wire.MsgType.PRUNE:
            writers = tuple(pid for pid in (relay.resolve(w, current) for w in parsed.writers) if pid is not None)
            relay.tree.prune(writers, sender)
            return
        ranges = relay.ranges(parsed.ranges, current)
        if parsed.type is wire.MsgType.GRAFT:
            if sender in relay.tree.view:  # only a neighbour may ask for pushes (and get them answered)
                relay.tree.graft(ranges, sender, now)
        elif ranges:
            relay.tree.ihave(ranges, sender, now)

    def _relayed(self, joined: JoinedGroup, relay: GroupRelay, inner: bytes, sender: str, now: float,
                 wall: float) -> None:
        """A writer's datagram that neighbour ``sender`` pushed along the tree: taken as if it had
        come from its writer (whose signature it carries), and pushed on to this peer's children."""
        if wire.sent_by(inner, self._pid_bytes):
            return  # our own, back: nothing to deliver or pass on
        envelope = self._decode(inner, now, counted=False)
        if envelope is None or not isinstance(envelope.message, _RELAYED) or envelope.message.gid != relay.gid:
            relay.garbage(sender, now)  # the neighbour relays what no member wrote: it loses its place
            return
        writer = envelope.sender
        if not self.gjlp.groups[relay.gid].is_current(writer):
            self.stats.not_member_dropped += 1  # a stranger's, or one this peer does not count yet: not passed on
            return
        message = envelope.message
        if isinstance(message, wire.DataBatch):
            if self._take(envelope, Via.RELAYED, now, wall):
                self._heard(writer, now)
            relay.received((writer, message.items[0][0]), inner, sender, now)
        elif relay.flood(writer, inner, sender) and self._take(envelope, Via.RELAYED, now, wall):
            self._heard(writer, now)

    def _site_first(self, data: bytes) -> bool:
        """Whether ``data`` is carried across (or taken from across) for the first time."""
        digest = hashlib.blake2s(data, digest_size=16).digest()
        if digest in self._site_seen:
            return False
        self._site_seen[digest] = None
        if len(self._site_seen) > MAX_SITE_SEEN:
            self._site_seen.popitem(last=False)
        return True

    def _site_heard(self, envelope: wire.Envelope, data: bytes) -> None:
        """A member's datagram, heard by multicast on its group's address: a site relay carries it
        to the other site's relays at the next flush (once, whatever it is: chat, repair, beacon)."""
        gid = getattr(envelope.message, "gid", None)
        joined = self.joined.get(gid) if isinstance(gid, str) else None
        if joined is None or not joined.site_relay or not self.gjlp.groups[joined.channel.gid].is_current(
                envelope.sender):
            return
        if len(joined.site_forward) < MAX_SITE_QUEUE and self._site_first(data):
            joined.site_forward.append(data)

    def _receive_site(self, inner: bytes, arrival: Arrival, now: float, wall: float) -> None:
        """A site relay's copy of a member's datagram: by unicast, from another site's relay (a
        member proven at that endpoint), to take and multicast again here; by multicast, from this
        site's relay, to take.  Either way taken as relayed: it says nothing of where its writer
        is reached.  Only a current member's datagram to a joined group is taken, and each once."""
        self.stats.datagrams_in += 1
        self.stats.bytes_in += len(inner) + 1
        source, via = arrival.source, arrival.via
        if via is Via.UNICAST:
            relay = self.reach.pid_at(source) if source is not None else None
            if relay is None or not self._is_member_anywhere(relay):
                self.stats.not_member_dropped += 1  # only a proven member relays across
                return
        elif via is not Via.MULTICAST:
            self.stats.malformed_dropped += 1
            return
        if wire.site_payload(inner) is not None or wire.is_relay(inner) or not self._site_first(inner):
            return
        envelope = self._decode(inner, now, counted=False)
        if envelope is None:
            return
        message, writer = envelope.message, envelope.sender
        gid = getattr(message, "gid", None)
        joined = self.joined.get(gid) if isinstance(gid, str) else None
        if joined is None or isinstance(message, (*_CONTROL_MESSAGES, wire.Hello, wire.PeerList)) or \
                not self.gjlp.groups[joined.channel.gid].is_current(writer):
            self.stats.not_member_dropped += 1
            return
        self._set_wall(now, wall)
        if self._take(envelope, Via.RELAYED, now, wall):
            self._heard(writer, now)
            self.reach.heard(writer, None, Via.RELAYED, now)
        if via is Via.UNICAST and joined.site_local and len(joined.site_remulticast) < MAX_SITE_QUEUE:
            joined.site_remulticast.append(inner)

    def _site(self, record: GroupRecord, unicast: list[tuple[str, Endpoint]], now: float) -> GroupScope | None:
        """The group's scope if this peer hears some of its current members by multicast, and they
        hear it (its site: :func:`.routing.site_scope`); None if it hears none (then copies or the
        tree carry the group)."""
        copied = {pid for pid, _ in unicast}  # proven, and not heard by multicast or not hearing ours
        here = [m.pid for m in record.current()
                if m.pid != self.pid and m.pid not in copied and self.reach.heard_by_multicast(m.pid, now) and
                self.presence.status(m.pid, now) != OFFLINE]
        if not here:
            return None

        def up(pid: str) -> bool:
            heard = max(self.presence.last_heard(pid) or -1e18, self.reach.last_heard(pid) or -1e18)
            return now - heard <= OFFLINE_AFTER and heard > self._gone_at.get(pid, -1e18)

        others = [(pid, endpoint) for pid, endpoint in unicast if record.is_current(pid) and up(pid)]
        return routing.site_scope(GroupAddress(record.addr, record.port), self.pid, here,
                                  [o for o in others if not self.reach.heard_by_multicast(o[0], now)],
                                  [o for o in others if self.reach.heard_by_multicast(o[0], now)])

    def _record_counter(self, gid: str, pid: str) -> int:
        """The counter of ``pid``'s current member record in ``gid`` (0 if none, or if it left)."""
        record = self.gjlp.groups.get(gid)
        if record is None or not record.is_current(pid):
            return 0
        return record.members[pid].counter

    def _heard(self, pid: str, now: float) -> None:
        """Fresh evidence from member ``pid``: online; back from offline, it gets an early beacon in
        every group it shares, so its view of who is here fills at once."""
        if self.presence.heard(pid, now):
            for gid in self.joined:
                if self.gjlp.groups[gid].is_current(pid):
                    self.presence.beacon_soon(gid, now)

    def _set_wall(self, now: float, wall: float) -> None:
        self._wall, self._wall_now = wall, now

    def _wall_at(self, now: float) -> float:
        """The wall clock at ``now``, from the last wall time given (no clock is read here)."""
        return self._wall + (now - self._wall_now)

    def _receive_direct(self, sealed: bytes, size: int, source: Endpoint | None, now: float, wall: float,
                        via: Via) -> None:
        self.stats.datagrams_in += 1
        self.stats.bytes_in += size
        if not sealed or via is not Via.UNICAST:
            self.stats.malformed_dropped += 1  # only ever sent to one endpoint
            return
        proven = source if source is not None and self.reach.pid_at(source) is not None else None
        opened = self.direct.receive(sealed, now, wall, proven)
        if opened is not None:
            sender, echo, fresh = opened
            if fresh and self._is_member_anywhere(sender):
                self._heard(sender, now)
            if source is not None:
                if echo:  # our HELLO nonce, back from there signed by the sender: the handshake's proof
                    self.reach.hello(sender, wire.Hello(b"", echo, self._member_name(sender) or ""), source, now)
                if fresh:
                    self.reach.heard(sender, source, via, now)

    def note_zeroconf(self, gid: str, desc: str, private: bool, member_count: int, now: float, wall: float,
                      source: str = "") -> None:
        """A DNS-SD sighting; ``source``: the address that announced it (as the adapter heard it)."""
        self.gjlp.note_zeroconf(gid, desc, private, member_count, now, wall, source)

    def _is_member_anywhere(self, pid: str) -> bool:
        """Whether ``pid`` is a current member of a group this peer is in.  Only members are
        kept in the presence table, so a flood of fresh keys cannot push members out of it."""
        groups = self.gjlp.groups
        return any(groups[gid].is_current(pid) for gid in self.joined)

    def _cipher(self, gid: str) -> crypto.GroupKeys | None:
        joined = self.joined.get(gid)
        return None if joined is None else joined.cipher

    def _decode(self, data: bytes, now: float, counted: bool = True) -> wire.Envelope | None:
        if counted:
            self.stats.datagrams_in += 1
            self.stats.bytes_in += len(data)
        if wire.sent_by(data, self._pid_bytes):
            self.stats.own_looped_back += 1  # multicast loop echoes our own datagrams
            return None
        try:
            return wire.decode(data, self._cipher)
        except wire.SignatureError as exc:
            self.stats.bad_signature_dropped += 1
            log.debug("dropped forged or tampered datagram: %s", exc)
        except wire.SealedError as exc:
            self.stats.sealed_dropped += 1
            log.debug("dropped sealed datagram: %s", exc)
            joined = self.joined.get(exc.gid)
            if exc.epoch and joined is not None and joined.team is not None and \
                    self.gjlp.groups[exc.gid].is_current(exc.sender):
                joined.team.sealed_unknown(exc.epoch, now)  # a re-key this peer missed: ask for the key
        except wire.WireError as exc:
            self.stats.malformed_dropped += 1
            log.debug("dropped malformed datagram: %s", exc)
        return None

    # -- timers -----------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """The next deadline (on the ``now`` clock) at which :meth:`handle_timer` is due."""
        deadlines = [d for d in (self.gjlp.get_timer(), *(g.channel.get_timer() for g in self.joined.values()),
                                 self.presence.get_timer(list(self.joined)), self._retry_at,
                                 self.reach.get_timer(), self._broadcast_at, self.direct.get_timer(),
                                 *(g.team.confirm_deadline() for g in self.joined.values() if g.team is not None),
                                 *(g.team.get_timer() for g in self.joined.values() if g.team is not None),
                                 *(at for _, at in self._admissions.values()),
                                 *(g.relay.get_timer() for g in self.joined.values() if g.relay is not None))
                     if d is not None]
        return min(deadlines) if deadlines else None

    def handle_timer(self, now: float) -> None:
        cached = self.store.cached_peers() if self.reach.cache_probe_due(now) else None
        self.reach.handle_timer(now, cached, self._wall)
        if self._broadcast_at is not None and now >= self._broadcast_at:
            self._broadcast_due = True
        self.gjlp.handle_timer(now)
        for joined in self.joined.values():
            joined.channel.handle_timer(now)
            if joined.team is not None:
                joined.team.handle_timer(now)
            if joined.relay is not None:
                joined.relay.handle_timer(now)
        self.direct.handle_timer(now)

    # -- output -----------------------------------------------------------------------

    def datagrams_to_send(self) -> list[Datagram]:
        """What the flushes so far committed for sending, oldest first (transmit before :meth:`events`)."""
        outbox, self._outbox = self._outbox, []
        return outbox

    def events(self) -> list[Event]:
        """What the flushes so far committed for telling, oldest first: call it after
        :meth:`datagrams_to_send`, once they are sent (the order in the module's docstring)."""
        events, self._events = self._events, []
        return events

    def turn(self, now: float, wall: float | None = None) -> Turn:
        """:meth:`flush`, and what it committed for sending and telling: the one cycle each adapter
        (the asyncio manager, the in-memory LAN, the test simulator) runs after an input."""
        stored = self.flush(now, wall)
        return Turn(stored, self.datagrams_to_send(), self.events())

    def flush(self, now: float, wall: float | None = None) -> int:
        """Persist, then transmit, then notify: everything since the last flush.  Returns how many
        messages were stored (and delivered).  ``wall``: the wall clock now (else reckoned from
        the last one given), which signs the beacons' and goodbyes' ``at``."""
        if wall is not None:
            self._set_wall(now, wall)
        at = int(self._wall_at(now) * 1000)
        staged: list[Datagram] = []
        reached_now = self.reach.events()
        for reached in reached_now:  # a peer proved its endpoint: ask it for its groups, keep it
            self._peers_to_cache[reached.pid] = (reached.endpoint, self._wall)
        if reached_now:
            # What was asked before it could hear us is asked again: its groups, and what we missed.
            self.gjlp.advertise()
            for gid, joined in self.joined.items():
                if any(self.gjlp.groups[gid].is_current(r.pid) for r in reached_now):
                    joined.channel.start_sync(now)
        for handshake, endpoint in self.reach.datagrams_to_send():
            staged.append(Datagram(wire.encode(self.identity, handshake), endpoint))
        # Peers that multicast does not reach get a unicast copy of what goes to multicast.
        unicast = self.reach.unicast_peers(now)
        unicast_endpoints = [endpoint for _, endpoint in unicast]
        relaying = self.reach.unicast_members(now) if self.joined else []
        staged += self._control_datagrams(unicast_endpoints, now)
        events = self.gjlp.events()
        changed_groups: dict[str, bool] = {}
        for event in events:
            record = self.gjlp.groups.get(event.gid)
            if record is None:
                continue
            if isinstance(event, (MemberJoined, MemberLeft, MemberUpdated)) and self.gjlp.is_member(event.gid):
                self._members_to_save.setdefault(event.gid, set()).add(event.member.pid)
            if isinstance(event, GroupSeen):
                changed_groups[event.gid] = changed_groups.get(event.gid, False) or event.new
        deliveries: list[ChatMessage] = []
        channel_events = []
        conflict_writes = []
        beacons = set(self.presence.beacons_due(list(self.joined), now))
        for gid, joined in self.joined.items():
            channel = joined.channel
            record = self.gjlp.groups[gid]
            scope = self._group_scope(joined, record, unicast, relaying, now)
            messages = self._group_outbox(gid, joined, record, gid in beacons, at, now)
            staged += self._group_datagrams(joined, record, scope, messages, now)
            deliveries += channel.deliveries()
            events_now = channel.events()
            channel_events += events_now
            conflict_writes += [e for e in events_now if isinstance(e, (Conflict, Replaced))]
        self._goodbye_due = False
        for gid, waiting in self._admissions.items():  # invited: ask to be admitted, once a second
            secret, at = waiting
            if now >= at:
                waiting[1] = now + 1.0
                record = self.gjlp.groups[gid]
                dh = self.identity.direct_public
                request = wire.KeyRequest(gid, 0, wire.admit_proof(secret, gid, self.pid, dh), dh)
                staged.append(Datagram(wire.encode(self.identity, request), GroupAddress(record.addr, record.port)))
        for gid in {m.gid for m in deliveries}:
            if gid in self.joined:
                self.ops(gid)  # built from the store before this batch joins it
        staged += [Datagram(data, endpoint) for data, endpoint in self.direct.prepare(now, self._direct_endpoint)]
        # 1. persist
        committed = self._store(deliveries, conflict_writes, now)
        if committed is None:  # a failed commit: nothing of this batch goes out
            stored = []
        else:  # 2. transmit
            stored = committed
            self._outbox += staged
            self._events += self.direct.committed()
            self._retry_at = self._retry_deadline(now)
        self.stats.delivered += len(stored)
        # 3. notify
        by_group: dict[str, list[ChatMessage]] = {}
        for delivered in stored:
            by_group.setdefault(delivered.gid, []).append(delivered)
        for gid, messages in by_group.items():
            self._tell(gid, messages)
        if committed is not None:
            self._events += self._team_events
            self._team_events = []
        membership_changed = set()
        for event in events:
            if isinstance(event, MemberJoined):
                joined_group = self.joined.get(event.gid)
                if joined_group is not None:  # what it sent before we knew it is asked for now
                    joined_group.channel.member_joined(event.member.pid, now)
                self._events.append(event)
                membership_changed.add(event.gid)
            elif isinstance(event, MemberLeft):
                self._events.append(event)
                membership_changed.add(event.gid)
            elif isinstance(event, MemberUpdated):
                changed_groups.setdefault(event.gid, False)
            elif isinstance(event, MemberGaveWay):
                membership_changed.add(event.gid)
            elif isinstance(event, JoinUnacknowledged):
                self._events.append(WarningRaised(event.gid, _unacknowledged_warning(
                    self.gjlp.groups[event.gid].desc, event.full)))
        for gid in self._membership_changed:  # the views say "joined" (or not) once it is stored
            changed_groups.setdefault(gid, False)
        self._membership_changed.clear()
        for gid in membership_changed:
            changed_groups.setdefault(gid, False)
            if gid in self.joined:
                self.joined[gid].announce_due = True
        if changed_groups:
            self._events.append(GroupsDiscovered([self.gjlp.groups[gid].view(self.pid) for gid in changed_groups]))
        for news in channel_events:
            if isinstance(news, SyncProgress):
                self._events.append(news)
            elif isinstance(news, GapReported):
                log.warning("group %s: no member holds %s's messages %s; replies to them stay held",
                            news.gid, news.sender, news.ranges)
            elif isinstance(news, Conflict):
                warning = _conflict_warning(news.mid)
                log.warning("group %s: %s", news.gid, warning)
                self._events.append(WarningRaised(news.gid, warning))
        return len(stored)

    def _control_datagrams(self, unicast: list[Endpoint], now: float) -> list[Datagram]:
        """GJLP's datagrams, routed (:func:`.routing.control_route`), and the periodic announcement
        when it is due; ``unicast``: the proven peers multicast does not reach."""
        staged: list[Datagram] = []
        broadcast = self._broadcast_due
        for message in self.gjlp.datagrams_to_send():
            try:
                data = wire.encode(self.identity, message)
            except wire.WireError as exc:  # nothing the network sent should lead here; the flush goes on
                log.warning("not sent: %s", exc)
                continue
            route = routing.control_route(message, self.control_group, unicast, self.port)
            staged += [Datagram(data, destination) for destination in route.destinations]
            self.unicast_copies += route.copies
            if routing.is_announcement(message):
                broadcast = False
                self._broadcast_at = now + BROADCAST_INTERVAL
        if broadcast:  # the periodic one: to the subnet, and to the peers multicast does not reach
            data = wire.encode(self.identity, wire.Adv(self.name))
            staged += [Datagram(data, destination)
                       for destination in routing.beacon_route(unicast, self.port).destinations]
            self._broadcast_at = now + BROADCAST_INTERVAL
        self._broadcast_due = False
        return staged

    def _group_scope(self, joined: JoinedGroup, record: GroupRecord, unicast: list[tuple[str, Endpoint]],
                     relaying: list[str], now: float) -> GroupScope:
        """Where the group's datagrams go in this flush.  Across sites, the sites' relays carry
        everything; else the tree carries chat to its members, and the rest get copies as before."""
        relay = joined.relay
        if relay is not None:
            relay.set_members(self._relay_members(record, relaying, now), now)
        scope = self._site(record, unicast, now) or routing.group_scope(
            GroupAddress(record.addr, record.port), unicast, record.is_current,
            relay.members if relay is not None and relay.active else None)
        joined.site_relay = bool(scope.across)
        joined.site_local = scope.site
        return scope

    def _group_outbox(self, gid: str, joined: JoinedGroup, record: GroupRecord, beacon: bool, at: int,
                      now: float) -> list:
        """What the group's channel and team have to send now, the beacon or goodbye due included,
        each HEARTBEAT and GOODBYE stamped ``at``; held while the team may not send."""
        channel = joined.channel
        channel.group_size = max(1, len(record.current()))
        outbox = channel.datagrams_to_send(now)
        if any(type(m) in _FRESH_EVIDENCE for m in outbox):
            self.presence.spoke(gid, now)
        elif beacon:  # idle: one heartbeat says this peer is still here
            # (NAKs, repairs and sync requests are no evidence to members: presence.py)
            outbox = [*outbox, wire.Heartbeat(gid, channel.next_seqno - 1)]
        if self._goodbye_due:
            outbox = [*outbox, wire.Goodbye(gid)]
        # Every HEARTBEAT and GOODBYE is signed with the time it leaves, so none can be replayed
        # as news of this peer (presence.Presence.fresh_at).
        outbox = [replace(m, at=at) if type(m) is wire.Heartbeat or type(m) is wire.Goodbye else m
                  for m in outbox]
        team = joined.team
        plain: list = []
        if team is not None:
            team_out = team.take_outbox()
            plain = [m for m in team_out if isinstance(m, _TEAM_PLAIN)]
            outbox = [*outbox, *(m for m in team_out if not isinstance(m, _TEAM_PLAIN))]
            if not team.may_send(now):
                # It knows of a re-key whose key it lacks, or is back and has not heard the group
                # yet: nothing goes under a key a removed member may hold (the re-key parts and
                # key requests, in the clear, do).
                joined.held = (joined.held + outbox)[-MAX_HELD_DATAGRAMS:]
                outbox = []
            elif joined.held:
                outbox, joined.held = joined.held + outbox, []
        if outbox and record.private and joined.cipher is None:
            # Never plaintext to a group held to be private (nothing should lead here).
            self.plaintext_refused += len(outbox)
            log.error("group %s is private and its key is missing: nothing sent", gid)
            outbox = []
        return [*plain, *outbox]

    def _group_datagrams(self, joined: JoinedGroup, record: GroupRecord, scope: GroupScope, messages: list,
                         now: float) -> list[Datagram]:
        """The group's ``messages`` encoded and routed by ``scope`` (:func:`.routing.group_route`):
        to the multicast address, copies, the relay tree, or across sites; then what this peer
        carries across or multicasts again as a site relay, and the relay tree's own datagrams."""
        staged: list[Datagram] = []
        relay = joined.relay
        for message in messages:
            try:
                data = wire.encode(self.identity, message, None if isinstance(message, _TEAM_PLAIN)
                                   else joined.cipher)
            except wire.WireError as exc:  # e.g. a digest past the datagram limit
                log.warning("not sent: %s", exc)
                continue
            route = routing.group_route(scope, message)
            staged += [Datagram(data, destination) for destination in route.destinations]
            staged += [Datagram(wire.encode_site(data), endpoint) for endpoint in route.across]
            self.unicast_copies += route.copies
            if route.tree and relay is not None:
                if type(message) is wire.DataBatch:
                    relay.publish((self.pid, message.items[0][0]), data, now)
                else:
                    relay.flood(self.pid, data, None)
        forward, joined.site_forward = joined.site_forward, []
        staged += [Datagram(wire.encode_site(data), endpoint) for data in forward for endpoint in scope.across]
        self.site_forwarded += len(forward) * len(scope.across)
        remulticast, joined.site_remulticast = joined.site_remulticast, []
        here: list[Destination] = [scope.address, *scope.deaf]
        staged += [Datagram(wire.encode_site(data), destination) for data in remulticast for destination in here]
        self.site_remulticast += len(remulticast)
        if relay is not None:
            staged += [Datagram(data, endpoint) for data, endpoint in
                       relay.datagrams(self._wall_at(now), self.reach.endpoint, functools.partial(_dh_of, record))]
        return staged

    def _relay_members(self, record: GroupRecord, relaying: list[str], now: float) -> list[str]:
        """Who relays ``record``'s group with this peer (:func:`.routing.relay_members`)."""
        def last_heard(pid: str) -> float | None:
            heard = [at for at in (self.presence.last_heard(pid), self.reach.last_heard(pid)) if at is not None]
            return max(heard) if heard else None

        def has_key(pid: str) -> bool:
            return bool(record.members[pid].dh)

        return routing.relay_members((m.pid for m in record.current()), self.pid, relaying,
                                     lambda pid: self.reach.heard_by_multicast(pid, now), last_heard, has_key,
                                     now, OFFLINE_AFTER)

    def _tell(self, gid: str, delivered: list[ChatMessage]) -> None:
        """Chat messages to the listener; operations to the group's OBG core, and what they changed."""
        joined = self.joined.get(gid)
        ops = None if joined is None else joined.operations
        if ops is None:  # left the group meanwhile
            self._events.append(MessagesDelivered(gid, self._shown_new(gid, [m for m in delivered
                                                                             if not is_operation(m)])))
            return
        changes = ops.take(self._visible(gid, delivered))
        if changes.messages:
            # new: no operation can have reached them yet
            self._events.append(MessagesDelivered(gid, self._shown_new(gid, changes.messages)))
        if changes.updated:
            views = [ops.view(m) for m in self._stored(gid, changes.updated)]
            self._index_current_text(gid, views)
            updated = self.by_record(gid, views)
            if updated:
                self._events.append(MessagesUpdated(gid, updated))
        if changes.topic_changed:
            topic, by = ops.topic()
            self._events.append(TopicChanged(gid, topic, by))
        if changes.notices:
            self._events.append(NoticesAdded(gid, self._named_notices(gid, changes.notices)))

    def _shown_new(self, gid: str, delivered: list[ChatMessage]) -> list[ChatMessage]:
        """Newly delivered messages as shown (:meth:`by_record`), counting those signed with
        another name than their author's record holds."""
        record = self.gjlp.groups.get(gid)
        members = record.members if record is not None else {}
        self.sender_names_differing += sum(1 for m in delivered if m.mid[0] not in members
                                           or members[m.mid[0]].name != m.sender_name)
        return self.by_record(gid, delivered)

    def _store(self, deliveries: list[ChatMessage], conflicts: list, now: float) -> list[ChatMessage] | None:
        """Commit seqnos, groups, delivered messages and equivocations learnt (``conflicts``:
        Conflict and Replaced events); returns the messages stored, None if the commit failed.

        When the commit fails (a full disk), it is rolled back and nothing of this flush is
        transmitted: this peer's new messages are taken back (never sent, their seqnos free
        again, the caller told through :meth:`take_unsent`), the others' wait in memory and
        are stored, and shown, by the first flush that can write again."""
        try:
            for gid, joined in self.joined.items():
                if joined.seqno_to_save:
                    self.store.set_next_seqno(gid, joined.channel.next_seqno)
            for pid, (endpoint, seen) in self._peers_to_cache.items():
                self.store.cache_peer(pid, endpoint, seen, self._is_member_anywhere)  # members' rows stay
            for gid, pids in self._members_to_save.items():  # one row per member that changed
                members = self.gjlp.groups[gid].members if gid in self.gjlp.groups else {}
                self.store.save_members(gid, [members[pid] for pid in pids if pid in members])
            pending = self._unstored + deliveries
            stored = self.store.add_messages(pending) if pending else []
            direct_rows, direct_states, direct_settings = self.direct.take_writes()
            if direct_rows:
                self.store.save_direct(direct_rows)
            for peer, state in direct_states.items():
                self.store.save_direct_conversation(peer, state)
            for key, value in direct_settings.items():
                self.store.set_direct_setting(key, value)
            for gid in self._teams_to_save:
                team = self.teams.get(gid)
                if team is not None:
                    self.store.set_direct_setting(TEAM_SETTING + gid, team.to_bytes())
            for event in self._unstored_conflicts + conflicts:
                if isinstance(event, Conflict):
                    self.store.save_conflict(event.gid, event.kept, event.other)
                else:
                    self.store.replace_message(event.gid, event.message)
            self.store.commit()
        except (sqlite3.Error, OSError) as exc:
            self.store.rollback()
            self._outbox = []
            reason = str(exc) or type(exc).__name__
            if self.storage_error is None:
                log.error("cannot store messages (%s): not sending, trying again every %.0f s", reason,
                          self.STORAGE_RETRY)
            self.storage_error = reason
            own = [m.mid for m in deliveries if m.sender == self.pid]
            taken_back = set()
            for gid, joined in self.joined.items():
                retracted = joined.channel.retract(m.mid for m in deliveries if m.gid == gid and m.sender == self.pid)
                for mid in retracted:
                    taken_back.add(mid)
                    self._unsent[mid] = f"not sent: cannot store messages ({reason})"
                if retracted:
                    self._events.append(WarningRaised(gid, f"{len(retracted)} message(s) not sent: cannot store "
                                                           f"messages ({reason})"))
            for mid in self.direct.composed():  # kept, unlike a group's: its SES stamp is spent
                self._unsent[mid] = (f"not stored yet: cannot store messages ({reason}); the direct message waits "
                                     "in memory, neither shown nor sent, until it can be stored")
            self._unstored += [m for m in deliveries if m.mid not in taken_back]
            self._unstored_conflicts += conflicts
            if len(taken_back) < len(own):
                log.error("kept %d own messages that could not be taken back; they go out once stored",
                          len(own) - len(taken_back))
            self._retry_at = self._retry_deadline(now)
            return None
        if self.storage_error is not None and (stored or direct_rows):  # a commit without messages proves little
            log.info("storing works again (%d messages were waiting)", len(self._unstored))
            self.storage_error = None
        self._unstored = []
        self._unstored_conflicts = []
        for joined in self.joined.values():
            joined.seqno_to_save = False
        self._members_to_save.clear()
        self._peers_to_cache.clear()
        self._teams_to_save.clear()
        self._retry_at = self._retry_deadline(now)
        return stored

    def _retry_deadline(self, now: float) -> float | None:
        """When the next flush should try the store again: while anything waits to be stored."""
        waiting = self._unstored or self._unstored_conflicts or self._teams_to_save or self.storage_error is not None and (
            any(joined.seqno_to_save for joined in self.joined.values()) or self._members_to_save
            or any(self.direct.take_writes()))
        return now + self.STORAGE_RETRY if waiting else None

    def stats_dict(self) -> dict:
        """Counters of the protocol (the adapter adds the network's)."""
        s = self.stats
        channels = [joined.channel for joined in self.joined.values()]
        operations = [joined.operations for joined in self.joined.values() if joined.operations is not None]
        return {
            "datagrams_in": s.datagrams_in,
            "bytes_in": s.bytes_in,
            "malformed_dropped": s.malformed_dropped,
            "bad_signature_dropped": s.bad_signature_dropped
            + sum(c.stats["bad_signature_dropped"] for c in channels),
            "sealed_dropped": s.sealed_dropped,
            "not_member_dropped": s.not_member_dropped,
            "duplicates_dropped": sum(c.orderer.duplicates for c in channels),
            **{key: sum(c.stats[key] for c in channels)
               for key in ("naks_sent", "repairs_sent", "sync_messages_sent", "gaps_reported", "conflicts",
                           "stranger_dropped", "requests_over_budget", "sync_requests_refused", "rate_cuts",
                           "sent_at_clamped")},
            "evicted": sum(c.orderer.evicted for c in channels),
            "operations_rejected": sum(ops.rejected for ops in operations),
            "reactions_refused": sum(ops.core.reactions_refused for ops in operations),
            "operations_pending": sum(ops.core.pending for ops in operations),
            "held_bytes": sum(c.orderer.held_bytes for c in channels),
            "delivered": s.delivered,
            "own_looped_back": s.own_looped_back,
            "pending": self.pending(),
            "groups_known": len(self.gjlp.groups),
            "groups_joined": len(self.joined),
            "answers_suppressed": self.gjlp.answers_suppressed,
            "descriptors_rejected": self.gjlp.descriptors_rejected,
            "descriptor_conflicts": self.gjlp.descriptor_conflicts,
            "member_records_rejected": self.gjlp.member_records_rejected,
            "member_records_stale": self.gjlp.member_records_stale,
            "member_records_refused": self.gjlp.member_records_refused,
            "member_records_given_way": self.gjlp.member_records_given_way,
            "joins_unacknowledged": self.gjlp.joins_unacknowledged,
            "groups_refused": self.gjlp.groups_refused,
            "stranger_groups_evicted": self.gjlp.stranger_groups_evicted,
            "plaintext_refused": self.plaintext_refused,
            "removed_dropped": self.removed_dropped,
            "joins_not_admitted": self.gjlp.joins_not_admitted,
            "key_requests_refused": sum(t.key_requests_refused for t in self.teams.values()),
            "rekeys_refused": sum(t.rekeys_refused for t in self.teams.values()) + sum(
                t.roles.refused for t in self.teams.values()),
            "datagrams_held": sum(len(j.held) for j in self.joined.values()),
            "admissions_refused": sum(t.admissions_refused for t in self.teams.values()),
            "sender_names_differing": self.sender_names_differing,
            "unicast_copies": self.unicast_copies,
            "site_forwarded": self.site_forwarded,
            "site_remulticast": self.site_remulticast,
            **{key: sum(j.relay.stats[key] for j in self.joined.values() if j.relay is not None)
               for key in RELAY_STATS},
            "relay_members": sum(len(j.relay.members) for j in self.joined.values()
                                 if j.relay is not None and j.relay.active),
            "hellos_refused": self.reach.hellos_refused,
            "hints_refused": self.reach.hints_refused,
            "presence_stale_dropped": self.presence.stale_dropped,
            "probes_evicted": self.reach.candidates_evicted,
            **self.direct.stats,
            "direct_queued": self.direct.queued(),
            "direct_held": self.direct.held(),
            "storage_error": self.storage_error,
            "unstored": len(self._unstored),
        }


def _dh_of(record: GroupRecord, pid: str) -> bytes | None:
    member = record.members.get(pid)
    return None if member is None else member.dh


def _unacknowledged_warning(desc: str, full: bool) -> str:
    if full:
        return (f"no member of {desc!r} has acknowledged your join within {ACK_TIMEOUT:.0f} s: the group holds "
                f"{MAX_MEMBERS} members, the most a peer keeps, so members may not hear you yet. Members make room "
                "for a newcomer they hear: keep writing, your messages are kept and sent again once you are in")
    return (f"no member of {desc!r} has acknowledged your join within {ACK_TIMEOUT:.0f} s: nobody else may be "
            "online. Your messages are kept, and members get them when they come back")


def _conflict_warning(mid: Mid) -> str:
    return (f"two different signed messages claim id {format_mid(mid)} (its writer equivocated); every member "
            "keeps the one whose signed bytes hash lowest")


_LEGACY = ("group {desc!r} was made by an older version of M2MC, before groups were signed: its messages stay "
           "readable here, but it cannot be joined or written to any more; create a new group for new messages")

