"""One joined group's roles, removals and epoch keys (issue 44), as a core without I/O.

:class:`GroupTeam` holds a group's :class:`roles.GroupRoles`, and for a private group its keys by
epoch (:class:`crypto.GroupKeys`) and the re-key parts it has seen.  The peer core hands it the
group's ROLES, REKEY and KEY_REQUEST datagrams (``receive``) and this peer's own changes
(``set_role``, ``remove``); it answers with datagrams for the group's channel (``outbox``:
ROLES sealed with the current key, REKEY and KEY_REQUEST in the clear, signed) and says when
its state must be stored (``dirty``; :meth:`to_bytes`).

Re-key (private groups).  The remover makes a fresh 32-byte key, names it with a random epoch
id in its signed removal, and seals it to every remaining member's X25519 key (the ``dh`` of
its signed member record), :data:`wire.REKEY_ENTRIES` to a datagram, each part signed by the
remover.  A member that opens its entry (and finds the key matches the removal's key check)
seals everything it sends from then on under the new epoch, and keeps the old keys to open old
datagrams.  A member that sees a datagram sealed under an epoch it lacks asks for it
(KEY_REQUEST, at most one per group per KEY_REQUEST_INTERVAL); any current member holding the
part with the asker's entry sends it again: the ANSWERERS members closest to the asker by hash
at once, every member once the asker has asked again (so at 1,000 members a request costs a
few parts, not a thousand).

Sending is held (``may_send``) while this peer knows of an epoch whose key it lacks, and after
a start until it is *confirmed*: it opened datagrams sealed under its current epoch from
CONFIRM_MEMBERS current members (fewer if the group has fewer), or one and CONFIRM_ONE_WAIT seconds
passed, or CONFIRM_WAIT seconds passed.
So a member back from being away learns of a re-key before it says anything under the old key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random

import msgpack

from . import crypto, roles, wire

KEY_REQUEST_INTERVAL = 1.0  # seconds between this peer's KEY_REQUESTs in one group
ANSWER_INTERVAL = 1.0  # seconds between answers to one asker in one group
ANSWERERS = 3  # members that answer a first KEY_REQUEST (the closest to the asker by hash)
CONFIRM_MEMBERS = 2
CONFIRM_WAIT = 15.0
CONFIRM_ONE_WAIT = 3.0  # with one member heard under the current key (the others may be away for good)
ROLES_INTERVAL = 5.0  # seconds between ROLES sent in answer to members' sync requests
KEPT_PART_EPOCHS = 3
REPEATS = (1.0, 3.0)
MAX_INVITES = 64  # one-time invite secrets a member keeps waiting to be used
MAX_ADMITS = 64  # ADMITs kept to send again  # seconds after this peer's own role change when its ROLES go again  # epochs whose re-key parts are kept, to answer KEY_REQUESTs


class GroupTeam:
    """A joined group's roles, and a private group's epoch keys."""

    def __init__(self, gid: str, owner: str, identity: crypto.Identity, base_key: bytes | None,
                 stored: bytes | None = None, confirmed: bool = False) -> None:
        self.gid = gid
        self.identity = identity
        self.roles = roles.GroupRoles(gid, owner)
        self.keys = crypto.GroupKeys({0: base_key}, 0) if base_key else None
        self.parts: dict[int, dict[int, wire.Rekey]] = {}  # epoch -> part number -> part
        self.outbox: list[wire.Message] = []
        self.dirty = False
        self.confirmed = confirmed or self.keys is None
        self._confirmers: set[str] = set()
        self._unconfirmed_since: float | None = None
        self._key_request_at = float("-inf")
        self._wanted: int = 0  # an epoch seen sealed and not held
        self._answered: dict[str, float] = {}  # asker -> when last answered
        self._asked: dict[str, int] = {}  # asker -> requests heard
        self._roles_sent_at = float("-inf")
        self._repeats: list[float] = []
        self.invites: list[bytes] = []  # one-time secrets of this peer's invites not used yet
        self.used_invites: dict[str, bytes] = {}  # joiner pid -> the secret it used (its ADMIT may be lost)
        self.admitted: set[str] = set()  # pids a member admitted by invite after a re-key
        self.admits: list[wire.Admit] = []  # the latest ADMITs, sent again with this peer's ROLES
        self.admissions_refused = 0
        self.rng = random.Random()
        self.key_requests_refused = 0
        self.rekeys_refused = 0
        if stored:
            self._load(stored)
        if not self.confirmed:
            self._say_back()

    def _say_back(self) -> None:
        """Back from away: a KEY_REQUEST naming the epoch this peer holds, in the clear, so members
        beacon at once and send the newest re-key part for it if the group re-keyed meanwhile."""
        if self.keys is not None:
            self.outbox.append(wire.KeyRequest(self.gid, self.keys.epoch, b""))

    # -- persistence ----------------------------------------------------------------------

    def to_bytes(self) -> bytes:
        return msgpack.packb({
            "records": [wire._to_wire(r) for r in self.roles.records()],
            "keys": [[e, k] for e, k in (self.keys.keys.items() if self.keys else ())],
            "parts": [wire._to_wire(p) for epoch in self.parts.values() for p in epoch.values()],
            "invites": self.invites, "used": [[pid, s] for pid, s in self.used_invites.items()],
            "admitted": sorted(self.admitted), "admits": [wire._to_wire(a) for a in self.admits],
        }, use_bin_type=True)

    def _load(self, stored: bytes) -> None:
        state = msgpack.unpackb(stored, raw=False)
        for value in state.get("records", ()):
            self.roles.add(wire._unpack_obj(wire.RoleRecord)(value, "record"))
        for epoch, key in state.get("keys", ()):
            if self.keys is not None:
                self.keys.add(epoch, key)
        for value in state.get("parts", ()):
            part = wire._unpack_obj(wire.Rekey)(value, "part")
            self.parts.setdefault(part.removal.epoch, {})[part.part] = part
        self.invites = list(state.get("invites", ()))
        self.used_invites = {pid: secret for pid, secret in state.get("used", ())}
        self.admitted = set(state.get("admitted", ()))
        self.admits = [wire._unpack_obj(wire.Admit)(value, "admit") for value in state.get("admits", ())]
        self._use_latest()

    # -- state ----------------------------------------------------------------------------

    def _use_latest(self) -> None:
        """Seal with the latest epoch this peer holds the key of (the current one, if held)."""
        if self.keys is None:
            return
        held = [e.epoch for e in self.roles.epochs if self.keys.for_epoch(e.epoch) is not None]
        latest = held[-1] if held else self.keys.epoch  # (an admitted joiner holds its epoch before the roles)
        if latest != self.keys.epoch:
            self.keys.use(latest)

    @property
    def missing_epoch(self) -> int:
        """The current epoch when this peer lacks its key (0: none missing)."""
        current = self.roles.current_epoch
        if self.keys is None or current is None or self.keys.for_epoch(current.epoch) is not None:
            return 0
        return current.epoch

    def may_send(self, now: float) -> bool:
        """Whether this group's datagrams may go out now (see the module docstring)."""
        if self.keys is None:
            return True
        if self.missing_epoch or self._wanted:
            return False
        if not self.confirmed:
            if self._unconfirmed_since is None:
                self._unconfirmed_since = now
            elif now >= self._confirm_at():
                self.confirmed = True
        return self.confirmed

    def _confirm_at(self) -> float:
        assert self._unconfirmed_since is not None
        wait = CONFIRM_ONE_WAIT if self._confirmers else CONFIRM_WAIT
        return self._unconfirmed_since + wait

    def confirm_deadline(self) -> float | None:
        if self.confirmed or self._unconfirmed_since is None or self.keys is None:
            return None
        return self._confirm_at()

    def unconfirm(self) -> None:
        """This peer may have missed a re-key (it was away): hold sending until confirmed."""
        if self.keys is not None:
            self.confirmed = False
            self._confirmers.clear()
            self._unconfirmed_since = None
            self._say_back()

    def opened(self, sender: str, epoch: int, others: int) -> None:
        """A current member's datagram opened under ``epoch``; ``others``: current members but us."""
        if self.keys is None or self.confirmed or epoch != self.keys.epoch:
            return
        self._confirmers.add(sender)
        if len(self._confirmers) >= min(CONFIRM_MEMBERS, max(1, others)):
            self.confirmed = True

    # -- input ----------------------------------------------------------------------------

    def sealed_unknown(self, epoch: int, now: float) -> None:
        """A current member's datagram sealed under an epoch this peer lacks: ask for its key."""
        if self.keys is None or self.keys.for_epoch(epoch) is not None:
            return
        self._wanted = epoch
        self._ask(now)

    def _ask(self, now: float) -> None:
        epoch = self.missing_epoch or self._wanted
        if epoch and now - self._key_request_at >= KEY_REQUEST_INTERVAL:
            self._key_request_at = now
            self.outbox.append(wire.KeyRequest(self.gid, epoch, b""))

    def receive(self, sender: str, message: wire.Message, now: float, is_current) -> bool:
        """A group datagram of ours to handle (ROLES, REKEY, KEY_REQUEST) from a current member;
        returns whether the roles or keys changed."""
        if isinstance(message, wire.Roles):
            changed = False
            for record in message.records:
                changed |= self.roles.add(record)
            if changed:
                self.dirty = True
                self._use_latest()
                self._ask(now)
            return changed
        if isinstance(message, wire.Rekey):
            return self._take_part(message, now)
        if isinstance(message, wire.KeyRequest):
            self._answer(sender, message, now, is_current)
        if isinstance(message, wire.Admit):
            return self.take_admit(message, is_current)
        return False

    def _take_part(self, part: wire.Rekey, now: float) -> bool:
        removal = part.removal
        if not wire.verify_rekey(part) or removal.action not in ("remove", "rekey"):
            self.rekeys_refused += 1
            return False
        changed = self.roles.add(removal)
        if removal not in self.roles.valid:
            self.rekeys_refused += 1  # not (yet) an admin's or the owner's removal: nothing of it is used
            return changed
        epoch = removal.epoch
        kept = self.parts.setdefault(epoch, {})
        if part.part not in kept:
            kept[part.part] = part
            self.dirty = True
            for old in [e for e in self.parts if e not in {x.epoch for x in self.roles.epochs[-KEPT_PART_EPOCHS:]}]:
                del self.parts[old]
        if self.keys is not None and self.keys.for_epoch(epoch) is None:
            for pid, sealed in part.keys:
                if pid == self.identity.pid:
                    key = crypto.open_epoch_key(self.identity, sealed)
                    if key is not None and crypto.key_check(key) == removal.key_check:
                        self.keys.add(epoch, key)
                        changed = True
                        if self._wanted == epoch:
                            self._wanted = 0
        if changed:
            self.dirty = True
            self._use_latest()
            if self.keys is not None and self.keys.for_epoch(self._wanted) is not None:
                self._wanted = 0
            self._ask(now)
        return changed

    def _answer(self, asker: str, request: wire.KeyRequest, now: float, is_current) -> None:
        """Send the part holding ``asker``'s sealed key again, if this peer holds it.  A removed
        member gets no key: it gets a part of the re-key that removed it (which holds no key of
        its), so that it learns it was removed even if it lost every part."""
        removal = self.roles.removed.get(asker)
        if removal is not None:
            self.key_requests_refused += 1
            part = next(iter(self.parts.get(removal.epoch, {}).values()), None)
        elif not is_current(asker):
            self.key_requests_refused += 1
            return
        else:
            # The epoch asked for, or the current one when the asker names an older one (it is back
            # from away, and the group re-keyed meanwhile).
            current = self.roles.current_epoch
            older = request.epoch == 0 or any(e.epoch == request.epoch for e in self.roles.epochs[:-1])
            epoch = current.epoch if current is not None and older else request.epoch
            part = next((p for p in self.parts.get(epoch, {}).values()
                         if any(pid == asker for pid, _ in p.keys)), None)
        if part is None:
            return
        self._asked[asker] = self._asked.get(asker, 0) + 1
        if now - self._answered.get(asker, float("-inf")) < ANSWER_INTERVAL:
            return
        if self._asked[asker] == 1 and self._rank(asker, is_current) >= ANSWERERS:
            return  # the closest members answer first; everyone once the asker asks again
        self._answered[asker] = now
        if len(self._answered) > 4_096:
            self._answered.pop(next(iter(self._answered)))
            self._asked.pop(next(iter(self._asked)), None)
        self.outbox.append(part)

    def _rank(self, asker: str, is_current) -> int:
        """This peer's place among the holders of the asker's part, by a hash of both pids."""
        def distance(pid: str) -> bytes:
            return hashlib.blake2s(f"{self.gid}:{asker}:{pid}".encode(), digest_size=8).digest()
        mine = distance(self.identity.pid)
        holders = {pid for epoch in self.parts.values() for p in epoch.values() for pid, _ in p.keys}
        return sum(1 for pid in holders if pid != asker and is_current(pid) and distance(pid) < mine)

    def set_admins_only(self, on: bool, now: float) -> None:
        self.roles.make(self.identity, "setting", wire.ADMINS_PIN, int(on))
        self.dirty = True
        self._announce(now)

    def may_pin(self, pid: str) -> bool:
        """Whether ``pid``'s pins and topic settings count: anyone's, unless the owner's setting says
        only the owner's and current admins'."""
        return not self.roles.admins_only or self.roles.role(pid) != "member"

    def is_moderator(self, pid: str) -> bool:
        """Whether ``pid``'s moderation removals hold: the owner, or a member the owner ever made an
        admin (ever: taking the role back does not bring back what it removed); a function of the
        role records alone, so every member holding them agrees."""
        return pid == self.roles.owner or any(r.action == "admin" and r.target == pid for r in self.roles.valid)

    # -- this peer's changes --------------------------------------------------------------

    def set_role(self, target: str, role: str, now: float) -> wire.RoleRecord:
        record = self.roles.make(self.identity, "admin" if role == roles.ADMIN else "member", target)
        self.dirty = True
        self._announce(now)
        return record

    def _announce(self, now: float) -> None:
        """This peer's own change: its ROLES now, and again after each of REPEATS (a lost copy is
        also made good by the ROLES answering a member's sync request)."""
        self.send_roles()
        self._repeats = [now + delay for delay in REPEATS]

    def get_timer(self) -> float | None:
        return self._repeats[0] if self._repeats else None

    def handle_timer(self, now: float) -> None:
        if self._repeats and now >= self._repeats[0]:
            self._repeats = [at for at in self._repeats if at > now]
            self.send_roles()

    def send_roles(self, now: float | None = None) -> None:
        """Every role record held, on the channel (sealed with the current key in a private group)."""
        if now is not None:
            if now - self._roles_sent_at < ROLES_INTERVAL:
                return
            self._roles_sent_at = now
        records = self.roles.records()
        for start in range(0, len(records), wire.MAX_ROLES_PER_DATAGRAM):
            self.outbox.append(wire.Roles(self.gid, tuple(records[start:start + wire.MAX_ROLES_PER_DATAGRAM])))
        self.outbox += self.admits  # a member that lost one learns it with the roles

    # -- invites after a re-key ---------------------------------------------------------------

    def new_invite(self) -> bytes:
        """A one-time secret for an invite (at most MAX_INVITES waiting; the oldest goes)."""
        secret = os.urandom(16)
        self.invites = [*self.invites, secret][-MAX_INVITES:]
        self.dirty = True
        return secret

    def admission_request(self, asker: str, request: wire.KeyRequest, now: float) -> bool:
        """A joiner's KEY_REQUEST with a proof: if it holds one of this peer's invite secrets (or the
        one it used already), it is admitted: an ADMIT with the current key and the group key sealed
        to its ``dh``.  Returns whether the admitted set changed."""
        if self.keys is None or len(request.dh) != crypto.PUBLIC_KEY_BYTES or self.roles.is_removed(asker):
            return False
        proof = request.proof
        used = self.used_invites.get(asker)
        if used is not None and hmac.compare_digest(wire.admit_proof(used, self.gid, asker, request.dh), proof):
            admit = next((a for a in self.admits if a.target == asker), None)
            if admit is not None and now - self._answered.get(asker, float("-inf")) >= ANSWER_INTERVAL:
                self._answered[asker] = now
                self.outbox.append(admit)
            return False
        secret = next((s for s in self.invites
                       if hmac.compare_digest(wire.admit_proof(s, self.gid, asker, request.dh), proof)), None)
        if secret is None:
            self.admissions_refused += 1
            return False
        try:
            sealed_key = crypto.seal_epoch_key(request.dh, self.keys.keys[self.keys.epoch])
            sealed_group_key = crypto.seal_epoch_key(request.dh, self.keys.keys[0])
        except ValueError:
            self.admissions_refused += 1
            return False
        self.invites = [s for s in self.invites if s != secret]  # one time only
        self.used_invites[asker] = secret
        admit = wire.sign_admit(self.identity, self.gid, asker, self.keys.epoch or 1, sealed_key, sealed_group_key)
        self.admits = [*self.admits, admit][-MAX_ADMITS:]
        self.admitted.add(asker)
        self.outbox.append(admit)
        self.dirty = True
        return True

    def take_admit(self, admit: wire.Admit, is_current) -> bool:
        """A member's ADMIT (any member may relay it): the joiner it names is let in."""
        author = crypto.pid_of(admit.author_key)
        if admit.gid != self.gid or not is_current(author) or admit.target in self.admitted \
                or not wire.verify_admit(admit):
            return False
        self.admitted.add(admit.target)
        self.admits = [*self.admits, admit][-MAX_ADMITS:]
        self.dirty = True
        return True

    def exposed(self) -> str | None:
        """A removed member that holds the current key, when this peer made that key: two removals
        at once each sealed their key to the member the other removed, and the later one in the
        agreed order is the current key.  Its author re-keys again (``rekey``) to the members that
        remain, so the current key is never one a removed member holds."""
        current = self.roles.current_epoch
        if self.keys is None or current is None or current.removal.author != self.identity.pid:
            return None
        holders = {pid for part in self.parts.get(current.epoch, {}).values() for pid, _ in part.keys}
        exposed = sorted(holders & set(self.roles.removed))
        return exposed[0] if exposed else None

    def remove(self, target: str, cut: int, recipients: dict[str, bytes], now: float = 0.0,
               action: str = "remove") -> wire.RoleRecord:
        """Remove ``target`` (its messages up to ``cut`` stay); in a private group, re-key to
        ``recipients`` (pid -> X25519 key: the remaining members but this peer)."""
        if self.keys is None:
            record = self.roles.make(self.identity, "remove", target, cut)
            self.dirty = True
            self._announce(now)
            return record
        key = crypto.new_group_key()
        epoch = int.from_bytes(os.urandom(8), "big") & (2**63 - 1) or 1
        entries = self.seal_entries(key, {pid: dh for pid, dh in recipients.items()
                                          if pid != target and not self.roles.is_removed(pid)})
        record = self.roles.make(self.identity, action, target, cut, epoch, crypto.key_check(key))
        self.keys.add(epoch, key)
        self._use_latest()
        self.parts[epoch] = {}
        for number, start in enumerate(range(0, max(1, len(entries)), wire.REKEY_ENTRIES)):
            chunk = tuple(entries[start:start + wire.REKEY_ENTRIES])
            part = wire.Rekey(self.gid, record, number, chunk,
                              self.identity.sign(wire.rekey_bytes(self.gid, epoch, number, chunk)))
            self.parts[epoch][number] = part
            self.outbox.append(part)
        self.dirty = True
        return record

    @staticmethod
    def seal_entries(key: bytes, recipients: dict[str, bytes]) -> list[tuple[str, bytes]]:
        entries = []
        for pid, dh in sorted(recipients.items()):
            try:
                entries.append((pid, crypto.seal_epoch_key(dh, key)))
            except ValueError:
                continue  # a key only its owner could have signed: only that member goes without
        return entries

    def take_outbox(self) -> list[wire.Message]:
        out, self.outbox = self.outbox, []
        return out
