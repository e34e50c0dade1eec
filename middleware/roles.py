"""A group's roles and removals (issue 44), as a core without I/O: signed records in, state out.

The group's creator is its owner, for good.  The owner makes members admins and takes that back;
the owner or an admin removes a member.  Each change is a :class:`wire.RoleRecord` signed by its
author, carrying a per-group Lamport ``clock``.  The state is a fold of the records held, sorted
by ``(clock, author pid, signature)``, each checked against the state the records before it made:

- "admin" / "member" (grant, take back): only by the owner, never about the owner or a removed pid;
- "remove": only by the owner or an admin at that point, never of the owner, of the author itself,
  or of a pid already removed;
- "setting" (target ``wire.ADMINS_PIN``, ``cut`` 1 or 0): only by the owner: whether only the
  owner and admins pin and set the topic (``admins_only``; the last one in the order holds);
- "rekey": only by the owner or an admin, naming a removed pid: a new epoch without a removal
  (see :meth:`teams.GroupTeam.exposed`).

So every member holding the same records ends with the same roles, whatever order they came in;
a record that does not hold at its place is inert (``refused`` counts them), and may hold later
if an earlier record that makes its author an admin arrives.  A replayed record is a duplicate
(the same signature), nothing more.  A removal is final for that key: its owner's datagrams are
refused from then on (``is_removed``), except its messages up to the removal's ``cut`` (the
ordering rule for a message concurrent with the removal: protocol.md, "Roles and removal").

In a private group a removal also starts an *epoch*: the removal names the new key's id
(``epoch``) and ``key_check``; :meth:`GroupRoles.epochs` lists them in fold order, the last
one the key everything is sealed with from then on.

Bounds: MAX_RECORDS per group; when full, a new record is refused, and an inert record (one whose
author had no right to it) gives way first, so a member that is not an admin cannot crowd out
the owner's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from . import crypto, wire

OWNER, ADMIN, MEMBER = "owner", "admin", "member"
MAX_RECORDS = 2_000

Cuts = Mapping[str, Mapping[str, int]]
"""Per group, its removed members' cuts (:meth:`GroupRoles.cuts`): what :func:`past_cut` reads."""


def past_cut(cuts: Mapping[str, int], sender: str, seqno: int) -> bool:
    """Whether ``sender``'s message ``seqno`` is past its removal's cut (``cuts``: a group's
    :meth:`GroupRoles.cuts`): no part of the group, so no list shows it, whatever this peer
    stored before it heard of the removal (history, threads, search, mentions, the export)."""
    cut = cuts.get(sender)
    return cut is not None and seqno > cut


@dataclass(frozen=True, slots=True)
class Epoch:
    """A re-key: its id, the removal that made it, and the key check its key must match."""

    epoch: int
    removal: wire.RoleRecord


def _order(record: wire.RoleRecord) -> tuple:
    return record.clock, record.author, record.signature


class GroupRoles:
    """One group's role records and the state they fold to."""

    def __init__(self, gid: str, owner: str) -> None:
        self.gid = gid
        self.owner = owner
        self._records: dict[bytes, wire.RoleRecord] = {}  # signature -> record
        self.admins: set[str] = set()
        self.removed: dict[str, wire.RoleRecord] = {}  # pid -> the removal that holds
        self.epochs: list[Epoch] = []
        self.admins_only = False  # the owner's setting: only the owner and admins pin and set the topic
        self.valid: list[wire.RoleRecord] = []  # the records that hold, in fold order
        self.refused = 0  # records that failed their signature, named another group, or found no room
        self.duplicates = 0

    # -- input -----------------------------------------------------------------------------

    def add(self, record: wire.RoleRecord) -> bool:
        """Take one record (any member may relay it); returns whether the state changed."""
        if record.signature in self._records:
            self.duplicates += 1
            return False
        if record.gid != self.gid or not wire.verify_role(record):
            self.refused += 1
            return False
        if len(self._records) >= MAX_RECORDS:
            inert = [r for r in self._records.values() if r not in self.valid]
            if not inert:
                self.refused += 1
                return False
            del self._records[max(inert, key=_order).signature]
        self._records[record.signature] = record
        before = (frozenset(self.admins), frozenset(self.removed), len(self.epochs), self.admins_only)
        self._fold()
        return before != (frozenset(self.admins), frozenset(self.removed), len(self.epochs), self.admins_only)

    def _fold(self) -> None:
        admins: set[str] = set()
        admins_only = False
        removed: dict[str, wire.RoleRecord] = {}
        epochs: list[Epoch] = []
        valid = []
        for record in sorted(self._records.values(), key=_order):
            author, target = record.author, record.target
            if record.action == "setting":  # the owner's group setting: only admins pin and set the topic
                if author == self.owner and target == wire.ADMINS_PIN:
                    admins_only = bool(record.cut)
                    valid.append(record)
                continue
            if record.action == "rekey":
                # A re-key again, after concurrent removals left the newest key with a removed member:
                # by the owner or an admin, naming a removed member, with a new epoch.
                if author in removed or target not in removed or not record.epoch or \
                        (author != self.owner and author not in admins):
                    continue
                epochs.append(Epoch(record.epoch, record))
                valid.append(record)
                continue
            if author in removed or target == self.owner or target in removed:
                continue
            if record.action in ("admin", "member"):
                if author != self.owner:
                    continue
                (admins.add if record.action == "admin" else admins.discard)(target)
            else:
                if (author != self.owner and author not in admins) or target == author:
                    continue
                removed[target] = record
                admins.discard(target)
                if record.epoch:
                    epochs.append(Epoch(record.epoch, record))
            valid.append(record)
        self.admins, self.removed, self.epochs, self.valid = admins, removed, epochs, valid
        self.admins_only = admins_only

    # -- state -----------------------------------------------------------------------------

    def role(self, pid: str) -> str:
        return OWNER if pid == self.owner else ADMIN if pid in self.admins else MEMBER

    def may_remove(self, pid: str) -> bool:
        return pid not in self.removed and (pid == self.owner or pid in self.admins)

    def is_removed(self, pid: str) -> bool:
        return pid in self.removed

    def cuts(self) -> dict[str, int]:
        """Each removed member's cut (:func:`past_cut`)."""
        return {pid: removal.cut for pid, removal in self.removed.items()}

    def cut(self, pid: str) -> int | None:
        """The highest of a removed member's seqnos that stays part of the group (None: not removed)."""
        removal = self.removed.get(pid)
        return None if removal is None else removal.cut

    @property
    def clock(self) -> int:
        return max((r.clock for r in self._records.values()), default=0)

    @property
    def current_epoch(self) -> Epoch | None:
        return self.epochs[-1] if self.epochs else None

    def records(self) -> list[wire.RoleRecord]:
        """Every record held (inert ones too: they may hold once an earlier one arrives), in order."""
        return sorted(self._records.values(), key=_order)

    # -- this peer's own changes --------------------------------------------------------------

    def make(self, identity: crypto.Identity, action: str, target: str, cut: int = 0, epoch: int = 0,
             key_check: bytes = b"") -> wire.RoleRecord:
        """A record of ``identity``'s, checked here as every member will check it; raises
        PermissionError with the reason when it would not hold."""
        me = identity.pid
        if me in self.removed:
            raise PermissionError("you were removed from this group")
        if action == "setting":
            if me != self.owner:
                raise PermissionError("only the owner (the group's creator) changes the group's settings")
            record = wire.sign_role(identity, self.gid, min(self.clock + 1, wire.MAX_ROLE_CLOCK), action, target, cut)
            self.add(record)
            return record
        if target == self.owner:
            raise PermissionError("the owner (the group's creator) cannot be removed or change role")
        if target in self.removed and action != "rekey":
            raise PermissionError("that member was removed already")
        if action == "rekey" and (target not in self.removed or not self.may_remove(me)):
            raise PermissionError("a re-key names a removed member, by the owner or an admin")
        if action in ("admin", "member") and me != self.owner:
            raise PermissionError("only the owner (the group's creator) makes or unmakes admins")
        if action == "remove":
            if not self.may_remove(me):
                raise PermissionError("only the owner or an admin can remove a member")
            if target == me:
                raise PermissionError("leave the group instead of removing yourself")
        record = wire.sign_role(identity, self.gid, min(self.clock + 1, wire.MAX_ROLE_CLOCK), action, target,
                                cut, epoch, key_check)
        self.add(record)
        return record
