"""The M2MC datagram codec: msgpack envelopes, strictly validated on the way in.

Every datagram is a msgpack array ``[version, type, sender_pid, public_key, body,
sealed_gid]`` where ``body`` is the array of the type's fields in the order their
dataclass declares them (or, for a private group, those fields sealed with the
group's key, ``sealed_gid`` naming the group).  Chat messages travel as
DATA_BATCHes: one writer's messages in one datagram, under a signature shared
by up to eight datagrams of one burst (:func:`crypto.sign_burst`).  A DATA
message carries its own signature proof, so any member can relay it; every other datagram
ends in a 64-byte Ed25519 signature of the envelope.  The pid must be the
fingerprint of the key.
Groups are described by their creator's signed :class:`GroupDescriptor` (the gid is
its hash) and members by their own signed :class:`MemberRecord` (with the member's
direct-message key as an 8th field; records made before it have 7); ``decode`` checks
their shape, and :func:`verify_descriptor` / :func:`verify_member` their signatures
(the GJLP calls them only when a record would change something).
A chat message's ``text`` is its *body*: chat text as it is, or another kind's tag and payload
(an operation, a file offer: :mod:`middleware.kinds`, the one module that reads and writes tags);
``Data.kind``/``payload``, ``StoredMessage.kind``/``payload`` and :func:`item_kind` give them.
The wire does not change with kinds: every item stays 5 values, which older peers require.
``decode`` accepts bytes from anyone on the LAN, so it trusts nothing: any input it
cannot turn into a well-formed, verified message raises :class:`WireError` (or its
subclasses :class:`SignatureError` and :class:`SealedError`) and nothing else.

Limits (all enforced by both ``encode`` and ``decode``):

=====================  ==========================================================
``MAX_DATAGRAM``       65,000 bytes: fits one IPv4 UDP datagram (65,507) with room
``MAX_ID``             64 characters for a peer id (pid) or group id (gid)
``MAX_NAME``           64 characters for a display name
``MAX_DESC``           200 characters for a group description
``MAX_TEXT``           8,000 characters for a chat message's text
``MAX_ITEMS``          10,000 entries in any list (members, ranges, messages)
``MAX_MEMBER_COUNTER`` 2**31 - 1: a member record's counter (signed by the member)
=====================  ==========================================================

Every number a datagram carries, its bound at ``decode``, and what bounds it where it is used
(a stored value must never make a formatter, a query or a signal raise):

==============================  ==============  ===================================================
field                           decode accepts  bounded where used
==============================  ==============  ===================================================
envelope ``version``            ``VERSION``     anything else is refused
envelope ``type``               a ``MsgType``   anything else is refused (14, DIRECT, is not an
                                                envelope: ``direct_payload``; nor are 19-22, the
                                                relay tree's: ``parse_relay``)
role record ``clock``           1..2**31-1      ``MAX_ROLE_CLOCK``; the order of a group's roles
role record ``cut``, ``epoch``  0..2**63-1      ``epoch`` names a re-key's key (:mod:`.roles`)
sealed tag epoch                1..2**63-1      ``gid~<hex>``: which epoch's key sealed the body
relay ``stamp`` (ms)            0..2**48-1      grows per sender; a replay is refused
                                                (``relay_link``'s window)
relay range seqnos              1..2**63-1      at most ``MAX_RELAY_RANGES``; the core looks at
                                                ``relay.MAX_SEQNOS`` seqnos of them at most
DATA / item ``seqno``           1..2**63-1      fits SQLite's INTEGER; the orderer counts in uint64
``parent`` seqno                1..2**63-1      as ``seqno``
``sent_at`` (ms)                0..2**63-1      signed, so kept; shown and exported clamped to
                                                2020-01-01 .. a day after arrival
                                                (``types.shown_sent_at``), and counted
                                                (``stats.sent_at_clamped``)
proof / ``burst_path`` index    2 bytes         must climb to the signed root
descriptor ``kdf_ops``          0..2**32        private: ``crypto.argon2_params_acceptable``;
                                                public: 0
descriptor ``kdf_mem``          0..2**40        as ``kdf_ops`` (at most 1 GiB)
descriptor ``port``             1..65535
descriptor ``created_at`` (ms)  0..2**63-1      signed by the creator; no receiver reads it, and
                                                ``types.iso_millis`` formats any int64
member record ``counter``       1..2**31-1      ``MAX_MEMBER_COUNTER``; only its signer can spend it
SYNC_REQ ``sync_seqno``         0..2**63-1      per requester (the PSSIT): a high one stales only
                                                its own signer's later requests
SYNC_REQ / NAK ranges           1..2**63-1      ascending, disjoint, at most ``MAX_ITEMS``
SYNC_RESP ``sync_seqno``        0..2**63-1      matched against this peer's own requests
SYNC_RESP ``remaining``         0..2**31-1      ``MAX_SYNC_REMAINING``: the progress it feeds is
                                                capped there too (Qt signals carry C ints)
HEARTBEAT ``seqno``             0..2**63-1      as ``seqno``; its gap is asked for ``NAK_TRIES`` times
HEARTBEAT/GOODBYE ``at`` (ms)   0..2**63-1      presence moves only when it is fresh
                                                (``presence.Presence.fresh_at``: within
                                                ``CLOCK_SKEW`` and newer than the last)
operation ``counter`` (text)    see ``obg``     1..2**53-1, checked by the OBG; its rank uses an
                                                effective counter with no limit (``obg``)
==============================  ==============  ===================================================
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import msgpack

from . import crypto, kinds

VERSION = 2  # 2: signed group descriptors and member records (GROUPS_INFO, JOIN, LEAVE, ADV)
MAX_DATAGRAM = 65_000
MAX_ID = 64
MAX_NAME = 64
MAX_DESC = 200
MAX_TEXT = 8_000
MAX_ITEMS = 10_000
MAX_SEQNO = 2**63 - 1
MAX_SYNC_REMAINING = 2**31 - 1  # a progress count: what a Qt int (and a progress bar) can carry

Mid = tuple[str, int]
"""A message id: (sender pid, seqno). Seqnos count from 1 per sender per group."""

SeqRanges = tuple[tuple[int, int], ...]
"""Inclusive seqno ranges ``((first, last), ...)``, ascending and disjoint."""


class WireError(ValueError):
    """A datagram that is not a well-formed M2MC message (or cannot become one)."""


class MsgType(enum.IntEnum):
    """Datagram types. DATA, DATA_BATCH, NAK, REPAIR, HEARTBEAT and SYNC_* travel on a group's own
    channel; ADV, GROUPS_INFO, JOIN and LEAVE on the control channel; HELLO only by unicast."""

    DATA = 1
    ADV = 2
    GROUPS_INFO = 3
    JOIN = 4
    LEAVE = 5
    SYNC_REQ = 6
    SYNC_RESP = 7
    NAK = 8
    HEARTBEAT = 9
    REPAIR = 10
    DATA_BATCH = 11
    HELLO = 12
    PEER_LIST = 13
    DIRECT = 14  # not an envelope: see encode_direct
    GOODBYE = 17  # (15 and 16 are kept for direct messages)
    ROLES = 18
    REKEY = 23
    KEY_REQUEST = 24
    ADMIT = 25
    # Relay trees (middleware/relay.py): not envelopes, see encode_relay.
    RELAY = 19
    IHAVE = 20
    GRAFT = 21
    PRUNE = 22


# ---------------------------------------------------------------------------
# Field validators: each takes the decoded msgpack value and the field's name,
# returns the Python value, or raises WireError.  They are also run by encode,
# so a message that could not be decoded is never sent.


def _fail(name: str, why: str) -> WireError:
    return WireError(f"field {name!r}: {why}")


def _string(max_len: int, *, allow_empty: bool = False) -> Callable[[Any, str], str]:
    def check(value: Any, name: str) -> str:
        if type(value) is not str:
            raise _fail(name, f"expected a string, got {type(value).__name__}")
        if len(value) > max_len:
            raise _fail(name, f"{len(value)} characters, limit is {max_len}")
        if not value and not allow_empty:
            raise _fail(name, "must not be empty")
        return value

    return check


def _uint(max_value: int = MAX_SEQNO) -> Callable[[Any, str], int]:
    def check(value: Any, name: str) -> int:
        if type(value) is not int or not 0 <= value <= max_value:
            raise _fail(name, f"expected an integer in 0..{max_value}, got {value!r:.40}")
        return value

    return check


def _bytes(length: int) -> Callable[[Any, str], bytes]:
    def check(value: Any, name: str) -> bytes:
        if type(value) is not bytes or len(value) != length:
            raise _fail(name, f"expected {length} bytes")
        return value

    return check


def _bytes_or_empty(length: int) -> Callable[[Any, str], bytes]:
    exact = _bytes(length)

    def check(value: Any, name: str) -> bytes:
        return b"" if value == b"" else exact(value, name)

    return check


def _proof(value: Any, name: str) -> bytes:
    if type(value) is not bytes or not crypto.proof_is_well_formed(value):
        raise _fail(name, f"expected a signature proof (64-byte signature, index, up to {crypto.MAX_PATH_HASHES} hashes)")
    return value


def _burst_path(value: Any, name: str) -> bytes:
    if type(value) is not bytes or not crypto.burst_path_is_well_formed(value):
        raise _fail(name, f"expected a burst path (2-byte index, up to {crypto.MAX_BURST_PATH_HASHES} hashes)")
    return value


def _bool(value: Any, name: str) -> bool:
    if type(value) is not bool:
        raise _fail(name, f"expected a boolean, got {type(value).__name__}")
    return value


_pid = _string(MAX_ID)
_gid = _string(MAX_ID)
_seqno = _uint()
_millis = _uint()


def _positive_seqno(value: Any, name: str) -> int:
    if _seqno(value, name) == 0:
        raise _fail(name, "seqnos start at 1")
    return value


def _list_of(item: Callable[[Any, str], Any]) -> Callable[[Any, str], tuple]:
    def check(value: Any, name: str) -> tuple:
        if type(value) is not list:
            raise _fail(name, f"expected a list, got {type(value).__name__}")
        if len(value) > MAX_ITEMS:
            raise _fail(name, f"{len(value)} items, limit is {MAX_ITEMS}")
        return tuple(item(v, name) for v in value)

    return check


def _fixed(*items: Callable[[Any, str], Any]) -> Callable[[Any, str], tuple]:
    def check(value: Any, name: str) -> tuple:
        if type(value) is not list or len(value) != len(items):
            raise _fail(name, f"expected a list of {len(items)} values")
        return tuple(check_item(v, name) for check_item, v in zip(items, value))

    return check


_mid_fields = _fixed(_pid, _positive_seqno)


def _mid(value: Any, name: str) -> Mid:
    return _mid_fields(value, name)


def _optional_mid(value: Any, name: str) -> Mid | None:
    return None if value is None else _mid(value, name)


_range = _fixed(_seqno, _seqno)


def _ranges(value: Any, name: str) -> SeqRanges:
    ranges = _list_of(_range)(value, name)
    previous_last = 0
    for first, last in ranges:
        if first == 0 or last < first or first <= previous_last:
            raise _fail(name, "ranges must be ascending, disjoint and start at 1")
        previous_last = last
    return ranges


_digest = _list_of(_fixed(_pid, _ranges))


def _unpack_obj(cls: type) -> Callable[[Any, str], Any]:
    """Validator for a nested message-like dataclass sent as a positional array."""

    def check(value: Any, name: str) -> Any:
        if type(value) is not list or len(value) != len(cls.FIELDS):
            raise _fail(name, f"expected a list of {len(cls.FIELDS)} values")
        return cls(*(v(x, f"{name}.{n}") for (n, v), x in zip(cls.FIELDS, value)))

    return check


# ---------------------------------------------------------------------------
# Messages.  FIELDS lists (name, validator) in wire order; it must match the
# dataclass's own field order.


@dataclass(frozen=True, slots=True)
class Data:
    """A chat message: the MOP's ``<mid_c, mid_p, data>`` plus what a reader needs."""

    TYPE: ClassVar[MsgType] = MsgType.DATA
    gid: str
    seqno: int
    parent: Mid | None
    sent_at: int
    name: str
    text: str  # the body: chat text, or another kind's tag and payload (middleware.kinds)
    sig: bytes  # the writer's burst signature and this message's Merkle path (crypto.sign_burst)

    @property
    def kind(self) -> str:
        return kinds.kind_of(self.text)

    @property
    def payload(self) -> str:
        return kinds.payload_of(self.text)

    FIELDS: ClassVar = (
        ("gid", _gid),
        ("seqno", _positive_seqno),
        ("parent", _optional_mid),
        ("sent_at", _millis),
        ("name", _string(MAX_NAME, allow_empty=True)),
        ("text", _string(MAX_TEXT, allow_empty=True)),
        ("sig", _proof),
    )


def _batch_items(value: Any, name: str) -> tuple:
    if type(value) is not list:
        return _batch_item_list(value, name)  # raises, and says why
    if not 1 <= len(value) <= crypto.MAX_BATCH:
        raise _fail(name, f"a batch holds 1..{crypto.MAX_BATCH} messages, got {len(value)}")
    # Every chat message passes here, so the usual shape is checked inline; anything
    # else goes through the field validators, which say precisely what is wrong.
    items = []
    for item in value:
        if type(item) is list and len(item) == 5:
            seqno, parent, sent_at, name_, text = item
            if (type(seqno) is int and 0 < seqno <= MAX_SEQNO and type(sent_at) is int and 0 <= sent_at <= MAX_SEQNO
                    and type(name_) is str and len(name_) <= MAX_NAME and type(text) is str and len(text) <= MAX_TEXT):
                if parent is None:
                    items.append((seqno, None, sent_at, name_, text))
                    continue
                if type(parent) is list and len(parent) == 2:
                    pid, parent_seqno = parent
                    if (type(pid) is str and 0 < len(pid) <= MAX_ID
                            and type(parent_seqno) is int and 0 < parent_seqno <= MAX_SEQNO):
                        items.append((seqno, (pid, parent_seqno), sent_at, name_, text))
                        continue
        return _batch_item_list(value, name)
    return tuple(items)


_batch_item_list = _list_of(_fixed(*(check for _, check in Data.FIELDS[1:6])))


@dataclass(frozen=True, slots=True)
class DataBatch:
    """One writer's chat messages in one datagram, under a signature it shares with the
    other datagrams of its burst.

    Items are ``(seqno, parent, sent_at, name, text)``, ``text`` the body (:func:`item_kind`).  The receiver rebuilds the
    datagram's Merkle tree from the items and climbs ``burst_path`` (this datagram's
    index among the burst's and the sibling hashes) to the signed root; decoding fills
    ``proofs`` with each item's proof, to relay it later.
    """

    TYPE: ClassVar[MsgType] = MsgType.DATA_BATCH
    gid: str
    items: tuple[tuple[int, Mid | None, int, str, str], ...]
    signature: bytes
    burst_path: bytes = b"\x00\x00"
    proofs: tuple[bytes, ...] = ()  # not on the wire: filled in by sign_burst and decode

    FIELDS: ClassVar = (("gid", _gid), ("items", _batch_items), ("signature", _bytes(crypto.SIGNATURE_BYTES)),
                        ("burst_path", _burst_path))


def item_kind(item: tuple) -> tuple[str, str]:
    """A DATA_BATCH item's kind and payload (:func:`middleware.kinds.split` of its body)."""
    return kinds.split(item[4])


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """A DATA message relayed by any member (repair, sync): its writer's key and signature travel with it."""

    sender: str
    seqno: int
    parent: Mid | None
    sent_at: int
    name: str
    text: str  # the body, as Data's
    public_key: bytes
    sig: bytes

    @property
    def kind(self) -> str:
        return kinds.kind_of(self.text)

    @property
    def payload(self) -> str:
        return kinds.payload_of(self.text)

    FIELDS: ClassVar = (("sender", _pid),) + Data.FIELDS[1:6] + (("public_key", _bytes(32)), ("sig", _proof))


MAX_MEMBER_COUNTER = 2**31 - 1
"""A member record's counter: far inside msgpack's integer range, and refused beyond."""
GID_CHARS = 26  # base32 of 128 bits of SHA-256


def _group_address(value: Any, name: str) -> str:
    """A group's data channel: an administratively scoped 239.255.x.y address."""
    text = _string(15)(value, name)
    parts = text.split(".")
    if len(parts) != 4 or parts[:2] != ["239", "255"] or not all(p.isdigit() and len(p) <= 3 for p in parts[2:]) \
            or not 0 <= int(parts[2]) <= 255 or not 0 < int(parts[3]) < 255:
        raise _fail(name, f"expected a multicast address in 239.255.0.0/16, got {text!r:.20}")
    return text


def _port(value: Any, name: str) -> int:
    if _uint(65535)(value, name) == 0:
        raise _fail(name, "port 0")
    return value


@dataclass(frozen=True, slots=True)
class GroupDescriptor:
    """What a group is, fixed by its creator at creation and signed with the creator's key.

    The gid is derived from it (:func:`descriptor_gid`), so nobody can announce a gid
    before its creator, or with other parameters.  Public groups have ``kdf`` "" and no
    key check; private ones name the key derivation (``argon2id``), its cost, and the
    key check a joiner's key must match.  ``salt`` is random in both (it also keeps two
    groups made alike apart).
    """

    creator_key: bytes
    desc: str
    private: bool
    kdf: str
    kdf_ops: int
    kdf_mem: int
    salt: bytes
    key_check: bytes
    addr: str
    port: int
    created_at: int  # ms since the epoch, the creator's clock
    signature: bytes

    FIELDS: ClassVar = (
        ("creator_key", _bytes(32)),
        ("desc", _string(MAX_DESC)),
        ("private", _bool),
        ("kdf", _string(16, allow_empty=True)),
        ("kdf_ops", _uint(2**32)),
        ("kdf_mem", _uint(2**40)),
        ("salt", _bytes(16)),
        ("key_check", _bytes_or_empty(16)),
        ("addr", _group_address),
        ("port", _port),
        ("created_at", _millis),
        ("signature", _bytes(crypto.SIGNATURE_BYTES)),
    )

    def signing_bytes(self) -> bytes:
        return msgpack.packb(["m2mc-group", *(_to_wire(getattr(self, n)) for n, _ in self.FIELDS[:-1])],
                             use_bin_type=True)

    @property
    def gid(self) -> str:
        return descriptor_gid(self)


def _descriptor(value: Any, name: str) -> GroupDescriptor:
    descriptor = _unpack_obj(GroupDescriptor)(value, name)
    if descriptor.private != (descriptor.kdf != "") or descriptor.private != (descriptor.key_check != b""):
        raise _fail(name, "a private group names its key derivation and key check, a public one neither")
    if descriptor.private:
        if descriptor.kdf != crypto.ARGON2ID:
            raise _fail(name, f"unknown key derivation {descriptor.kdf!r:.20}")
        if not crypto.argon2_params_acceptable(descriptor.kdf_ops, descriptor.kdf_mem):
            raise _fail(name, "key derivation cost out of bounds")
    elif descriptor.kdf_ops or descriptor.kdf_mem:
        raise _fail(name, "a public group has no key derivation cost")
    return descriptor


def descriptor_gid(descriptor: GroupDescriptor) -> str:
    """The gid a descriptor defines: base32 of the first 128 bits of SHA-256 of its signed bytes."""
    digest = hashlib.sha256(descriptor.signing_bytes()).digest()[:16]
    return base64.b32encode(digest).decode().rstrip("=").lower()


def sign_descriptor(identity: Any, desc: str, private: bool, kdf: str, kdf_ops: int, kdf_mem: int, salt: bytes,
                    key_check: bytes, addr: str, port: int, created_at: int) -> GroupDescriptor:
    unsigned = GroupDescriptor(identity.public_key, desc, private, kdf, kdf_ops, kdf_mem, salt, key_check, addr,
                               port, created_at, bytes(crypto.SIGNATURE_BYTES))
    signed = GroupDescriptor(*(getattr(unsigned, n) for n, _ in GroupDescriptor.FIELDS[:-1]),
                             identity.sign(unsigned.signing_bytes()))
    _descriptor(_to_wire(signed), "descriptor")  # what receivers would refuse is never made
    return signed


def verify_descriptor(descriptor: GroupDescriptor) -> bool:
    """Whether the descriptor's creator signed it (its gid then follows from it)."""
    return crypto.verify(descriptor.creator_key, descriptor.signature, descriptor.signing_bytes())


@dataclass(frozen=True, slots=True)
class MemberRecord:
    """One member's own word on its membership of a group: signed by that member.

    ``counter`` grows with every change the member makes (join, leave, new name), so
    a newer record replaces an older one and a replayed old one changes nothing.  In
    a private group ``key_proof`` shows that the signer holds the group key.  ``dh``
    is the member's X25519 key for direct messages, signed with the rest; records
    made before it existed have none (b"") and keep their 7-field shape and signed
    bytes, so they stay valid (their owner just cannot be messaged until it re-signs).
    """

    gid: str
    public_key: bytes
    name: str
    counter: int
    joined: bool
    key_proof: bytes
    signature: bytes
    pid: str = ""  # not on the wire: the fingerprint of public_key, filled in on decode
    dh: bytes = b""  # on the wire as an 8th field, only when present

    FIELDS: ClassVar = (
        ("gid", _gid),
        ("public_key", _bytes(32)),
        ("name", _string(MAX_NAME, allow_empty=True)),
        ("counter", _uint(MAX_MEMBER_COUNTER)),
        ("joined", _bool),
        ("key_proof", _bytes_or_empty(crypto.KEY_CHECK_BYTES)),
        ("signature", _bytes(crypto.SIGNATURE_BYTES)),
    )
    DH_FIELD: ClassVar = ("dh", _bytes(crypto.PUBLIC_KEY_BYTES))

    def content_bytes(self) -> bytes:
        """What the key proof covers (and the signature, with the proof)."""
        content = ["m2mc-member", self.gid, self.public_key, self.name, self.counter, self.joined]
        return msgpack.packb(content + [self.dh] if self.dh else content, use_bin_type=True)

    def signing_bytes(self) -> bytes:
        return self.content_bytes() + self.key_proof

    def to_wire(self) -> list:
        fields = [getattr(self, n) for n, _ in self.FIELDS]
        return fields + [self.dh] if self.dh else fields


def _member_record(value: Any, name: str) -> MemberRecord:
    if type(value) is not list or len(value) not in (len(MemberRecord.FIELDS), len(MemberRecord.FIELDS) + 1):
        raise _fail(name, f"expected a list of {len(MemberRecord.FIELDS)} or {len(MemberRecord.FIELDS) + 1} values")
    fields = MemberRecord.FIELDS + (MemberRecord.DH_FIELD,)
    checked = {n: v(x, f"{name}.{n}") for (n, v), x in zip(fields, value)}
    if checked["counter"] == 0:
        raise _fail(name, "member counters start at 1")
    return MemberRecord(**checked, pid=crypto.pid_of(checked["public_key"]))


def sign_member(identity: Any, gid: str, name: str, counter: int, joined: bool, group_key: bytes | None = None
                ) -> MemberRecord:
    """This peer's record in ``gid``, with its direct-message key; with a private group's key
    it carries the key proof."""
    if not 1 <= counter <= MAX_MEMBER_COUNTER:
        raise WireError(f"member counter {counter} is out of range 1..{MAX_MEMBER_COUNTER}")
    dh = identity.direct_public
    unsigned = MemberRecord(gid, identity.public_key, name, counter, joined, b"", bytes(crypto.SIGNATURE_BYTES), dh=dh)
    proof = crypto.key_proof(group_key, unsigned.content_bytes()) if group_key else b""
    with_proof = MemberRecord(gid, identity.public_key, name, counter, joined, proof, unsigned.signature, dh=dh)
    return MemberRecord(gid, identity.public_key, name, counter, joined, proof,
                        identity.sign(with_proof.signing_bytes()), identity.pid, dh)


def verify_member(record: MemberRecord) -> bool:
    """Whether the member the record is about signed it (``dh`` included)."""
    return crypto.verify(record.public_key, record.signature, record.signing_bytes())


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """The GJLP's grpInfo: a group's signed descriptor and members' own signed records.

    Any peer may relay it; receivers check that ``gid`` is the descriptor's, that its
    creator signed it, and each record's signature before it changes anything.
    """

    gid: str
    descriptor: GroupDescriptor
    members: tuple[MemberRecord, ...]

    FIELDS: ClassVar = (("gid", _gid), ("descriptor", _descriptor), ("members", _list_of(_member_record)))


@dataclass(frozen=True, slots=True)
class Adv:
    """GJLP advertisement: "I am here, tell me your groups" (only ``gids``, when given:
    a peer fetching the descriptors of groups it saw in zeroconf announcements)."""

    TYPE: ClassVar[MsgType] = MsgType.ADV
    name: str
    gids: tuple[str, ...] = ()

    FIELDS: ClassVar = (("name", _string(MAX_NAME, allow_empty=True)), ("gids", _list_of(_gid)))


@dataclass(frozen=True, slots=True)
class GroupsInfo:
    TYPE: ClassVar[MsgType] = MsgType.GROUPS_INFO
    groups: tuple[GroupInfo, ...]

    FIELDS: ClassVar = (("groups", _list_of(_unpack_obj(GroupInfo))),)


@dataclass(frozen=True, slots=True)
class Join:
    """GJLP join: the member's own signed record, ``joined`` true."""

    TYPE: ClassVar[MsgType] = MsgType.JOIN
    record: MemberRecord

    FIELDS: ClassVar = (("record", _member_record),)


@dataclass(frozen=True, slots=True)
class Leave:
    """GJLP leave: the member's own signed record, ``joined`` false."""

    TYPE: ClassVar[MsgType] = MsgType.LEAVE
    record: MemberRecord

    FIELDS: ClassVar = Join.FIELDS


@dataclass(frozen=True, slots=True)
class SyncReq:
    """MSP request: what the requester holds, as per-sender seqno ranges."""

    TYPE: ClassVar[MsgType] = MsgType.SYNC_REQ
    gid: str
    sync_seqno: int
    digest: tuple[tuple[str, SeqRanges], ...]

    FIELDS: ClassVar = (("gid", _gid), ("sync_seqno", _seqno), ("digest", _digest))


@dataclass(frozen=True, slots=True)
class SyncResp:
    """MSP answer to ``requester``'s request ``sync_seqno``: one chunk of the messages it lacks.

    ``remaining`` counts the messages this responder will still send after this
    chunk, so the requester can show progress.
    """

    TYPE: ClassVar[MsgType] = MsgType.SYNC_RESP
    gid: str
    requester: str
    sync_seqno: int
    remaining: int
    messages: tuple[StoredMessage, ...]

    FIELDS: ClassVar = (
        ("gid", _gid),
        ("requester", _pid),
        ("sync_seqno", _seqno),
        ("remaining", _uint(MAX_SYNC_REMAINING)),
        ("messages", _list_of(_unpack_obj(StoredMessage))),
    )


@dataclass(frozen=True, slots=True)
class Repair:
    """An answer to a NAK: copies of the requested messages, from any member that holds them."""

    TYPE: ClassVar[MsgType] = MsgType.REPAIR
    gid: str
    messages: tuple[StoredMessage, ...]

    FIELDS: ClassVar = (("gid", _gid), ("messages", _list_of(_unpack_obj(StoredMessage))))


@dataclass(frozen=True, slots=True)
class Nak:
    """Repair request: ``target``'s messages in ``ranges`` are missing here."""

    TYPE: ClassVar[MsgType] = MsgType.NAK
    gid: str
    target: str
    ranges: SeqRanges

    FIELDS: ClassVar = (("gid", _gid), ("target", _pid), ("ranges", _ranges))


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The sender's highest seqno in the group, so a lost last message is noticed; ``at``: the
    sender's wall clock in ms when it sent it, signed, so a replay is told from fresh evidence
    of presence (``presence.Presence.fresh_at``; the sending peer core stamps it)."""

    TYPE: ClassVar[MsgType] = MsgType.HEARTBEAT
    gid: str
    seqno: int
    at: int = 0

    FIELDS: ClassVar = (("gid", _gid), ("seqno", _seqno), ("at", _uint()))


@dataclass(frozen=True, slots=True)
class Goodbye:
    """The sender's app is closing: show it offline now rather than after its beacons stop.
    Not leaving: its membership stands, and anything fresh it sends later shows it online again.
    ``at``: as HEARTBEAT's, so a replayed GOODBYE shows nobody offline."""

    TYPE: ClassVar[MsgType] = MsgType.GOODBYE
    gid: str
    at: int = 0

    FIELDS: ClassVar = (("gid", _gid), ("at", _uint()))


MAX_ROLE_CLOCK = 2**31 - 1
ROLE_ACTIONS = ("admin", "member", "remove", "rekey", "setting")
ADMINS_PIN = "admins-pin"  # a "setting" record's target: only admins pin and set the topic (``cut`` 1: on)


def _role_action(value: Any, name: str) -> str:
    if value not in ROLE_ACTIONS or type(value) is not str:
        raise _fail(name, f"expected one of {ROLE_ACTIONS}")
    return value


@dataclass(frozen=True, slots=True)
class RoleRecord:
    """An owner's or admin's signed word on a group's roles (:mod:`middleware.roles`): make
    ``target`` an admin, a plain member again, or remove it.  ``clock`` orders a group's role
    records (a Lamport clock); a removal carries ``cut``, the highest of the removed member's
    seqnos that stay part of the group, and in a private group ``epoch`` (the new key's id)
    and ``key_check`` (so a recipient knows the key it opened is the one the remover meant)."""

    gid: str
    author_key: bytes
    clock: int
    action: str
    target: str
    cut: int
    epoch: int
    key_check: bytes
    signature: bytes

    FIELDS: ClassVar = (
        ("gid", _gid),
        ("author_key", _bytes(32)),
        ("clock", _uint(MAX_ROLE_CLOCK)),
        ("action", _role_action),
        ("target", _pid),
        ("cut", _seqno),
        ("epoch", _seqno),
        ("key_check", _bytes_or_empty(crypto.KEY_CHECK_BYTES)),
        ("signature", _bytes(crypto.SIGNATURE_BYTES)),
    )

    @property
    def author(self) -> str:
        return crypto.pid_of(self.author_key)

    def signing_bytes(self) -> bytes:
        return msgpack.packb(["m2mc-role", *(_to_wire(getattr(self, n)) for n, _ in self.FIELDS[:-1])],
                             use_bin_type=True)


def sign_role(identity: Any, gid: str, clock: int, action: str, target: str, cut: int = 0, epoch: int = 0,
              key_check: bytes = b"") -> RoleRecord:
    unsigned = RoleRecord(gid, identity.public_key, clock, action, target, cut, epoch, key_check,
                          bytes(crypto.SIGNATURE_BYTES))
    record = RoleRecord(*(getattr(unsigned, n) for n, _ in RoleRecord.FIELDS[:-1]),
                        identity.sign(unsigned.signing_bytes()))
    _unpack_obj(RoleRecord)(_to_wire(record), "record")  # what receivers would refuse is never made
    return record


def verify_role(record: RoleRecord) -> bool:
    return crypto.verify(record.author_key, record.signature, record.signing_bytes())


MAX_ROLES_PER_DATAGRAM = 100


@dataclass(frozen=True, slots=True)
class Roles:
    """A group's role records (or some of them), on its channel; sealed in a private group."""

    TYPE: ClassVar[MsgType] = MsgType.ROLES
    gid: str
    records: tuple[RoleRecord, ...]

    FIELDS: ClassVar = (("gid", _gid), ("records", _list_of(_unpack_obj(RoleRecord))))


SEALED_KEY_BYTES = 32 + 48  # an epoch key in an X25519 sealed box (crypto.seal_epoch_key)
REKEY_ENTRIES = 7  # sealed keys per REKEY datagram: about 1,150 bytes, one Ethernet frame


def _sealed_key_entry(value: Any, name: str) -> tuple[str, bytes]:
    return _fixed(_pid, _bytes(SEALED_KEY_BYTES))(value, name)


@dataclass(frozen=True, slots=True)
class Rekey:
    """One part of a private group's re-key: the removal that made the epoch, and the new key
    sealed to some of the remaining members' X25519 keys, ``(pid, sealed key)``; ``keys_sig``
    is the remover's signature over the part, so any member can relay it (KEY_REQUEST) and
    none can change it.  Not sealed with the group key: a member that missed the epoch opens
    its entry with its own key, and the removed member learns from it that it was removed."""

    TYPE: ClassVar[MsgType] = MsgType.REKEY
    gid: str
    removal: RoleRecord
    part: int
    keys: tuple[tuple[str, bytes], ...]
    keys_sig: bytes

    FIELDS: ClassVar = (("gid", _gid), ("removal", _unpack_obj(RoleRecord)), ("part", _uint(2**16)),
                        ("keys", _list_of(_sealed_key_entry)), ("keys_sig", _bytes(crypto.SIGNATURE_BYTES)))

    def keys_bytes(self) -> bytes:
        return rekey_bytes(self.gid, self.removal.epoch, self.part, self.keys)


def rekey_bytes(gid: str, epoch: int, part: int, keys: tuple) -> bytes:
    return msgpack.packb(["m2mc-rekey", gid, epoch, part, [list(k) for k in keys]], use_bin_type=True)


def verify_rekey(message: Rekey) -> bool:
    """Whether the removal's author signed the removal and this part's sealed keys."""
    return (message.removal.action in ("remove", "rekey") and message.removal.gid == message.gid
            and verify_role(message.removal)
            and crypto.verify(message.removal.author_key, message.keys_sig, message.keys_bytes()))


@dataclass(frozen=True, slots=True)
class KeyRequest:
    """A member asks for the key of ``epoch`` (it saw datagrams sealed under it); any member
    that holds the re-key part with the asker's sealed key sends it again.  An invited joiner
    (not a member yet) sends ``proof``, an HMAC under the invite's one-time secret of the gid,
    its pid and ``dh`` (:func:`admit_proof`); the inviting member answers with an ADMIT."""

    TYPE: ClassVar[MsgType] = MsgType.KEY_REQUEST
    gid: str
    epoch: int
    proof: bytes
    dh: bytes = b""  # an invited joiner's X25519 key (a member's is in its record)

    FIELDS: ClassVar = (("gid", _gid), ("epoch", _seqno), ("proof", _bytes_or_empty(crypto.KEY_CHECK_BYTES)),
                        ("dh", _bytes_or_empty(crypto.PUBLIC_KEY_BYTES)))


@dataclass(frozen=True, slots=True)
class Admit:
    """A member admits an invited joiner after a re-key (the passphrase no longer admits):
    the joiner's pid, signed by the admitting member, and the current epoch's key sealed to
    the joiner's X25519 key; ``group_key`` sealed too (the key proofs of member records)."""

    TYPE: ClassVar[MsgType] = MsgType.ADMIT
    gid: str
    author_key: bytes
    target: str
    epoch: int
    sealed_key: bytes
    sealed_group_key: bytes
    signature: bytes

    FIELDS: ClassVar = (("gid", _gid), ("author_key", _bytes(32)), ("target", _pid), ("epoch", _seqno),
                        ("sealed_key", _bytes(SEALED_KEY_BYTES)), ("sealed_group_key", _bytes(SEALED_KEY_BYTES)),
                        ("signature", _bytes(crypto.SIGNATURE_BYTES)))

    def signing_bytes(self) -> bytes:
        return msgpack.packb(["m2mc-admit", *(_to_wire(getattr(self, n)) for n, _ in self.FIELDS[:-1])],
                             use_bin_type=True)


def admit_proof(secret: bytes, gid: str, pid: str, dh: bytes) -> bytes:
    """What an invited joiner's KEY_REQUEST carries: proof that it holds the invite's secret."""
    return hmac.new(secret, msgpack.packb(["m2mc-admit", gid, pid, dh], use_bin_type=True),
                    hashlib.sha256).digest()[:crypto.KEY_CHECK_BYTES]


def sign_admit(identity: Any, gid: str, target: str, epoch: int, sealed_key: bytes, sealed_group_key: bytes) -> Admit:
    unsigned = Admit(gid, identity.public_key, target, epoch, sealed_key, sealed_group_key,
                     bytes(crypto.SIGNATURE_BYTES))
    return Admit(*(getattr(unsigned, n) for n, _ in Admit.FIELDS[:-1]), identity.sign(unsigned.signing_bytes()))


def verify_admit(message: Admit) -> bool:
    return crypto.verify(message.author_key, message.signature, message.signing_bytes())


def sealed_tag(gid: str, epoch: int) -> str:
    """The envelope's ``sealed_gid``: the gid, and after a re-key the epoch whose key sealed it."""
    return gid if not epoch else f"{gid}~{epoch:x}"


def parse_sealed_tag(tag: str) -> tuple[str, int]:
    gid, sep, epoch = tag.partition("~")
    if not sep:
        return gid, 0
    if not epoch or len(epoch) > 16 or any(c not in "0123456789abcdef" for c in epoch) or not gid:
        raise SealedError(f"malformed sealed tag {tag!r:.80}")
    value = int(epoch, 16)
    if not 0 < value <= MAX_SEQNO:
        raise SealedError(f"malformed sealed tag {tag!r:.80}")
    return gid, value


NONCE_BYTES = 16


@dataclass(frozen=True, slots=True)
class Hello:
    """The unicast handshake (:mod:`middleware.reach`): ``nonce`` asks the other to echo it,
    ``echo`` returns the other's nonce and so proves that this endpoint is where the signer is.
    ``unheard``: the receiver's multicast does not reach the sender, so it should copy what it
    multicasts to the sender by unicast (sent again every ``reach.REPORT_INTERVAL`` while true)."""

    TYPE: ClassVar[MsgType] = MsgType.HELLO
    nonce: bytes
    echo: bytes
    name: str
    unheard: bool = False

    FIELDS: ClassVar = (("nonce", _bytes_or_empty(NONCE_BYTES)), ("echo", _bytes_or_empty(NONCE_BYTES)),
                        ("name", _string(MAX_NAME, allow_empty=True)), ("unheard", _bool))


MAX_PEER_LIST = 64


def _unicast_host(value: Any, name: str) -> str:
    """One peer's IPv4 address, in dotted form (never a multicast or broadcast one)."""
    text = _string(15)(value, name)
    parts = text.split(".")
    if len(parts) != 4 or not all(p.isdigit() and len(p) <= 3 and int(p) <= 255 for p in parts) \
            or not 1 <= int(parts[0]) <= 223 or text == "255.255.255.255":
        raise _fail(name, f"expected a unicast IPv4 address, got {text!r:.20}")
    return text


def _peer_entries(value: Any, name: str) -> tuple:
    entries = _list_of(_fixed(_pid, _unicast_host, _port))(value, name)
    if len(entries) > MAX_PEER_LIST:
        raise _fail(name, f"{len(entries)} entries, limit is {MAX_PEER_LIST}")
    return entries


@dataclass(frozen=True, slots=True)
class PeerList:
    """Peer exchange: endpoints where the sender has proven other peers to be, ``(pid, host,
    port)``.  A hint only: the receiver believes an endpoint once its own HELLO's nonce comes
    back from there signed by that pid (:mod:`middleware.reach`)."""

    TYPE: ClassVar[MsgType] = MsgType.PEER_LIST
    peers: tuple[tuple[str, str, int], ...]

    FIELDS: ClassVar = (("peers", _peer_entries),)


Message = (Data | DataBatch | Adv | GroupsInfo | Join | Leave | SyncReq | SyncResp | Nak | Heartbeat | Repair | Hello
           | PeerList | Goodbye | Roles | Rekey | KeyRequest | Admit)

_BY_TYPE: dict[int, type] = {
    cls.TYPE: cls for cls in (Data, DataBatch, Adv, GroupsInfo, Join, Leave, SyncReq, SyncResp, Nak, Heartbeat, Repair,
                              Hello, PeerList, Goodbye, Roles, Rekey, KeyRequest, Admit)
}
_SELF_SIGNED = (Data, DataBatch)  # their signature is in the body, not in a trailer


@dataclass(frozen=True, slots=True)
class Envelope:
    """A decoded, verified datagram: who sent it (pid and key) and what it says."""

    sender: str
    message: Message
    public_key: bytes = b""
    sealed: bool = False
    epoch: int = 0  # the epoch whose key sealed it (private groups)


class SignatureError(WireError):
    """A datagram whose signature (or sender id) does not check out: forged or tampered."""


class SealedError(WireError):
    """A private group's datagram this peer holds no key for, or that fails to open; ``epoch``
    names the key it was sealed under (0: the passphrase's), ``sender`` its verified sender."""

    def __init__(self, text: str, gid: str = "", epoch: int = 0, sender: str = "") -> None:
        super().__init__(text)
        self.gid, self.epoch, self.sender = gid, epoch, sender


def _to_wire(value: Any) -> Any:
    if type(value) is DataBatch:  # the busiest message: its shape is known
        return [value.gid, [[seqno, parent and list(parent), sent_at, name, text]
                            for seqno, parent, sent_at, name, text in value.items], value.signature, value.burst_path]
    if type(value) is MemberRecord:
        return value.to_wire()
    fields = getattr(value, "FIELDS", None)
    if fields is not None:
        return [_to_wire(getattr(value, name)) for name, _ in fields]
    if type(value) is tuple or type(value) is list:
        return [_to_wire(v) for v in value]
    return value


def _associated(type_code: int, sender: str, public_key: bytes, gid: str) -> bytes:
    return msgpack.packb([VERSION, type_code, sender, public_key, gid], use_bin_type=True)


def _data_bytes(sender: str, data: Data | StoredMessage, gid: str) -> bytes:
    return crypto.message_bytes(gid, sender, data.seqno, data.parent, data.sent_at, data.name, data.text)


def sign_burst(identity: Any, datagrams: list[list[Data]]) -> list[DataBatch]:
    """``identity``'s DATA messages of one group, a DATA_BATCH per list (at most
    crypto.MAX_BURST lists of crypto.MAX_BATCH), all under one signature."""
    gid = datagrams[0][0].gid
    signature, paths, proofs = crypto.sign_burst(
        identity, [[_data_bytes(identity.pid, m, gid) for m in messages] for messages in datagrams])
    return [
        DataBatch(gid, tuple((m.seqno, m.parent, m.sent_at, m.name, m.text) for m in messages), signature, path,
                  tuple(message_proofs))
        for messages, path, message_proofs in zip(datagrams, paths, proofs)
    ]


def signed_data(identity: Any, gid: str, seqno: int, parent: Mid | None, sent_at: int, name: str, text: str) -> Data:
    """One DATA message signed by ``identity``, carrying its own proof."""
    proof = sign_burst(identity, [[Data(gid, seqno, parent, sent_at, name, text, b"")]])[0].proofs[0]
    return Data(gid, seqno, parent, sent_at, name, text, proof)


def encode(identity: Any, message: Message, cipher: Any = None) -> bytes:
    """Serialize and sign ``message`` from ``identity`` (a :class:`crypto.Identity`).

    With a private group's ``cipher`` the body is sealed.  The body goes through
    the validators ``decode`` uses, so a message its receivers would reject is
    never sent.  DATA is signed by its own ``sig`` field; everything else gets a
    64-byte signature appended to the msgpack envelope.
    """
    cls = type(message)
    if _BY_TYPE.get(getattr(cls, "TYPE", None)) is not cls:
        raise WireError(f"cannot encode {cls.__name__}")
    body = _to_wire(message)
    sender = _pid(identity.pid, "sender")
    for (name, check), value in zip(cls.FIELDS, body):
        check(value, name)
    type_code = int(cls.TYPE)
    sealed_gid = None
    if cipher is not None:
        sealed_gid = sealed_tag(message.gid, getattr(cipher, "epoch", 0))
        body = cipher.seal(msgpack.packb(body, use_bin_type=True),
                           _associated(type_code, sender, identity.public_key, sealed_gid))
    data = msgpack.packb([VERSION, type_code, sender, identity.public_key, body, sealed_gid], use_bin_type=True)
    if cls not in _SELF_SIGNED:
        data += identity.sign(data)
    if len(data) > MAX_DATAGRAM:
        raise WireError(f"{cls.TYPE.name} of {len(data)} bytes exceeds the {MAX_DATAGRAM}-byte datagram limit")
    return data


_UNPACK_LIMITS = dict(
    raw=False, use_list=True, strict_map_key=True, max_str_len=MAX_DATAGRAM, max_bin_len=MAX_DATAGRAM,
    max_array_len=MAX_ITEMS, max_map_len=0, max_ext_len=0,
)


def _unpack_prefix(data: bytes) -> tuple[Any, int]:
    """The first msgpack value in ``data`` and how many bytes it took."""
    unpacker = msgpack.Unpacker(**_UNPACK_LIMITS)
    unpacker.feed(data)
    try:
        value = unpacker.unpack()
    except msgpack.OutOfData:
        raise WireError("truncated datagram") from None
    except (msgpack.FormatError, msgpack.StackError, msgpack.ExtraData) as exc:
        raise WireError(f"malformed msgpack: {exc}") from None
    except (ValueError, TypeError, UnicodeDecodeError, OverflowError) as exc:
        raise WireError(f"malformed msgpack: {exc}") from None
    return value, unpacker.tell()


def _unpack(data: bytes) -> Any:
    try:
        return msgpack.unpackb(data, **_UNPACK_LIMITS)
    except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise WireError(f"not a single msgpack value: {exc}") from None
    except (ValueError, TypeError, UnicodeDecodeError, OverflowError) as exc:
        raise WireError(f"malformed msgpack: {exc}") from None


_DIRECT_PREFIX = bytes((0x93, VERSION, MsgType.DIRECT))  # a msgpack fixarray of 3, then two fixints


def encode_direct(sealed: bytes) -> bytes:
    """A DIRECT datagram: ``[version, DIRECT, sealed]`` and nothing else, no sender, no signature
    outside the seal (:func:`crypto.seal_direct` signs inside it), so an onlooker learns no pid."""
    data = msgpack.packb([VERSION, int(MsgType.DIRECT), bytes(sealed)], use_bin_type=True)
    if len(data) > MAX_DATAGRAM:
        raise WireError(f"DIRECT of {len(data)} bytes exceeds the {MAX_DATAGRAM}-byte datagram limit")
    return data


def direct_payload(data: bytes) -> bytes | None:
    """The sealed payload if ``data`` is a DIRECT datagram, else None (then it is an envelope, or
    malformed); raises :class:`WireError` for a DIRECT datagram that is not well formed."""
    if data[:3] != _DIRECT_PREFIX:
        return None
    if len(data) > MAX_DATAGRAM:
        raise WireError(f"datagram of {len(data)} bytes exceeds {MAX_DATAGRAM}")
    value = _unpack(bytes(data))
    if type(value) is not list or len(value) != 3 or type(value[2]) is not bytes:
        raise WireError("DIRECT must be [version, type, sealed bytes]")
    return value[2]


def sent_by(data: bytes, pid: bytes) -> bool:
    """Whether ``data`` is an envelope from ``pid`` (an ASCII id), without decoding it.

    msgpack lays out ``[version, type, sender, …]`` as a fixarray byte, two
    fixints, then the sender as a fixstr (0xa0 | length) for ids under 32
    bytes, or as str8 (0xd9, length).  Checking those bytes lets a peer drop the
    echoes of its own multicast at almost no cost.
    """
    n = len(pid)
    if n < 32:
        return data[3:4] == bytes((0xA0 | n,)) and data[4 : 4 + n] == pid
    return data[3:5] == bytes((0xD9, n)) and data[5 : 5 + n] == pid


def verify_stored(gid: str, message: StoredMessage) -> bool:
    """Whether a relayed message really was written by its sender."""
    return crypto.pid_of(message.public_key) == message.sender and crypto.verify_message(
        message.public_key, message.sig, _data_bytes(message.sender, message, gid))


def decode(data: bytes, cipher_for: Callable[[str], Any] | None = None) -> Envelope:
    """Parse and verify one datagram.  Raises :class:`WireError` (only) on anything wrong.

    ``cipher_for(gid)`` gives the cipher of a private group this peer belongs
    to, or None.  Relayed messages inside REPAIR and SYNC_RESP are checked by
    the receiver with :func:`verify_stored` (only those it does not have yet).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError(f"expected bytes, got {type(data).__name__}")
    if len(data) > MAX_DATAGRAM:
        raise WireError(f"datagram of {len(data)} bytes exceeds {MAX_DATAGRAM}")
    if not data:
        raise WireError("empty datagram")
    data = bytes(data)
    value, used = _unpack_prefix(data)
    if type(value) is not list or len(value) != 6:
        raise WireError("envelope must be [version, type, sender, public_key, body, sealed_gid]")
    version, type_code, sender, public_key, body, sealed_gid = value
    if version != VERSION or type(version) is not int:
        raise WireError(f"unsupported protocol version {version!r:.20}")
    cls = _BY_TYPE.get(type_code) if type(type_code) is int else None
    if cls is None:
        raise WireError(f"unknown message type {type_code!r:.20}")
    sender = _pid(sender, "sender")
    public_key = _bytes(crypto.PUBLIC_KEY_BYTES)(public_key, "public_key")
    trailer = data[used:]
    if cls in _SELF_SIGNED:
        if trailer:
            raise WireError(f"unexpected bytes after a {cls.TYPE.name} envelope")
    elif len(trailer) != crypto.SIGNATURE_BYTES:
        raise WireError(f"{cls.TYPE.name} must end in a {crypto.SIGNATURE_BYTES}-byte signature")
    if crypto.pid_of(public_key) != sender:
        raise SignatureError("sender id is not the fingerprint of its key")
    if cls not in _SELF_SIGNED and not crypto.verify(public_key, trailer, data[:used]):
        raise SignatureError(f"bad signature on {cls.TYPE.name} from {sender}")
    epoch = 0
    if sealed_gid is not None:
        tag = _gid(sealed_gid, "sealed_gid")
        sealed_gid, epoch = parse_sealed_tag(tag)
        if type(body) is not bytes:
            raise WireError("a sealed body must be bytes")
        cipher = cipher_for(sealed_gid) if cipher_for else None
        if cipher is not None and epoch != getattr(cipher, "epoch", 0):
            for_epoch = getattr(cipher, "for_epoch", None)
            cipher = for_epoch(epoch) if for_epoch is not None else None
        if cipher is None:
            raise SealedError(f"sealed for group {sealed_gid} (epoch {epoch}), whose key this peer does not hold",
                              sealed_gid, epoch, sender)
        plain = cipher.open(body, _associated(type_code, sender, public_key, tag))
        if plain is None:
            raise SealedError(f"a {cls.TYPE.name} for group {sealed_gid} does not open with its key")
        body = _unpack(plain)
    if type(body) is not list or len(body) != len(cls.FIELDS):
        raise WireError(f"{cls.TYPE.name} body must be a list of {len(cls.FIELDS)} fields")
    message = cls(*[check(v, name) for (name, check), v in zip(cls.FIELDS, body)])
    if sealed_gid is not None and getattr(message, "gid", sealed_gid) != sealed_gid:
        raise SealedError("sealed body names another group")
    if cls is Data and not crypto.verify_message(public_key, message.sig, _data_bytes(sender, message, message.gid)):
        raise SignatureError(f"bad signature on DATA {sender}:{message.seqno}")
    if cls is DataBatch:
        gid = message.gid
        proofs = crypto.open_batch(public_key, message.signature,
                                   [crypto.message_bytes(gid, sender, *item) for item in message.items],
                                   message.burst_path)
        if proofs is None:
            raise SignatureError(f"bad signature on a DATA_BATCH from {sender}")
        message = DataBatch(gid, message.items, message.signature, message.burst_path, tuple(proofs))
    return Envelope(sender, message, public_key, sealed_gid is not None, epoch)


# ---------------------------------------------------------------------------
# Relay-tree datagrams (RELAY, IHAVE, GRAFT, PRUNE): between two members that relay a group's
# messages to each other by unicast (middleware/relay.py).  Many go out each second, so they are
# not envelopes signed with Ed25519: each is authenticated by a 16-byte keyed BLAKE2b tag under the
# two members' pairwise key (crypto.Identity.relay_key), and is fresh by a stamp that grows:
#
#     0xC1  type  sender pid (16)  group tag (4)  stamp (6, ms)  body  tag (16)
#
# 0xC1 is a byte msgpack never uses, so no envelope or DIRECT datagram starts with it.  The body:
#   IHAVE, GRAFT  count, then per range: writer ref (6), first seqno, last - first (varints)
#   PRUNE         count, then writer refs (6 each)
#   RELAY         the ranges of an IHAVE riding along, then the relayed datagram as it was
#                 sent by its writer (a DATA_BATCH, verified by its own signature)
# A writer ref is the first 6 bytes of the writer's pid: the receiver names it among the group's
# members (a ref two members share names neither).  Control costs 44 bytes and about 10 a range.

RELAY_MAGIC = 0xC1
RELAY_TYPES = frozenset((MsgType.RELAY, MsgType.IHAVE, MsgType.GRAFT, MsgType.PRUNE))
RELAY_TAG_BYTES = 16
RELAY_GROUP_TAG_BYTES = 4
WRITER_REF_BYTES = 6
MAX_STAMP = 2**48 - 1
MAX_RELAY_RANGES = 256
"""Ranges (or writers) one relay datagram names at most (relay.MAX_RANGES_PER_IHAVE)."""
_RELAY_HEAD = 2 + crypto.PID_BYTES + RELAY_GROUP_TAG_BYTES + 6
RELAY_OVERHEAD = _RELAY_HEAD + RELAY_TAG_BYTES

RelayRanges = tuple[tuple[bytes, int, int], ...]
"""``(writer ref, first seqno, last seqno)`` runs, inclusive."""


@dataclass(frozen=True, slots=True)
class RelayDatagram:
    """A relay-tree datagram as parsed, its tag not yet checked (:func:`relay_authentic`)."""

    type: MsgType
    sender: str
    group_tag: bytes
    stamp: int
    ranges: RelayRanges = ()
    writers: tuple[bytes, ...] = ()
    inner: bytes = b""


def relay_group_tag(gid: str) -> bytes:
    return hashlib.blake2s(gid.encode(), digest_size=RELAY_GROUP_TAG_BYTES, person=b"m2mcgrp").digest()


def writer_ref(pid: str) -> bytes:
    raw = _relay_pid(pid)
    return raw[:WRITER_REF_BYTES]


def _relay_pid(pid: str) -> bytes:
    try:
        raw = bytes.fromhex(pid)
    except (ValueError, TypeError):
        raw = b""
    if len(raw) != crypto.PID_BYTES or raw.hex() != pid:
        raise WireError(f"a relaying member's pid is {2 * crypto.PID_BYTES} lowercase hex digits, got {pid!r:.40}")
    return raw


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(0x80 | value & 0x7F)
        value >>= 7
    out.append(value)
    return bytes(out)


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    for i in range(at, min(at + 10, len(data))):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i + 1
        shift += 7
    raise WireError("truncated or overlong number in a relay datagram")


def _relay_ranges(ranges: RelayRanges) -> bytes:
    if len(ranges) > MAX_RELAY_RANGES:
        raise WireError(f"{len(ranges)} ranges, limit is {MAX_RELAY_RANGES}")
    out = [_varint(len(ranges))]
    for ref, first, last in ranges:
        if type(ref) is not bytes or len(ref) != WRITER_REF_BYTES or not 1 <= first <= last <= MAX_SEQNO:
            raise WireError(f"bad relay range {(ref, first, last)!r:.60}")
        out += [ref, _varint(first), _varint(last - first)]
    return b"".join(out)


def _read_relay_ranges(data: bytes, at: int) -> tuple[RelayRanges, int]:
    count, at = _read_varint(data, at)
    if count > MAX_RELAY_RANGES:
        raise WireError(f"{count} ranges in a relay datagram, limit is {MAX_RELAY_RANGES}")
    ranges = []
    for _ in range(count):
        ref = data[at:at + WRITER_REF_BYTES]
        if len(ref) != WRITER_REF_BYTES:
            raise WireError("truncated relay range")
        first, at = _read_varint(data, at + WRITER_REF_BYTES)
        span, at = _read_varint(data, at)
        if not 1 <= first <= MAX_SEQNO or span > MAX_SEQNO - first:
            raise WireError("relay range out of bounds")
        ranges.append((ref, first, first + span))
    return tuple(ranges), at


def encode_relay(key: bytes, kind: MsgType, sender: str, gid: str, stamp: int, *, ranges: RelayRanges = (),
                 writers: tuple[bytes, ...] = (), inner: bytes = b"") -> bytes:
    """A relay-tree datagram from member ``sender`` in ``gid``, tagged with the pairwise ``key``."""
    if kind not in RELAY_TYPES:
        raise WireError(f"{kind!r} is not a relay-tree type")
    if type(stamp) is not int or not 0 <= stamp <= MAX_STAMP:
        raise WireError(f"relay stamp {stamp!r:.30} out of 0..{MAX_STAMP}")
    if kind is MsgType.PRUNE:
        if len(writers) > MAX_RELAY_RANGES or any(type(w) is not bytes or len(w) != WRITER_REF_BYTES for w in writers):
            raise WireError("a PRUNE names at most 256 writer refs of 6 bytes")
        body = _varint(len(writers)) + b"".join(writers)
    else:
        body = _relay_ranges(ranges)
    if kind is MsgType.RELAY:
        if not inner:
            raise WireError("a RELAY carries a datagram")
        body += inner
    elif inner:
        raise WireError(f"only a RELAY carries a datagram, not a {kind.name}")
    data = (bytes((RELAY_MAGIC, int(kind))) + _relay_pid(sender) + relay_group_tag(gid)
            + stamp.to_bytes(6, "big") + body)
    data += hashlib.blake2b(data, key=key, digest_size=RELAY_TAG_BYTES).digest()
    if len(data) > MAX_DATAGRAM:
        raise WireError(f"{kind.name} of {len(data)} bytes exceeds the {MAX_DATAGRAM}-byte datagram limit")
    return data


def is_relay(data: bytes) -> bool:
    return data[:1] == bytes((RELAY_MAGIC,))


# Site relays (protocol.md, "Site relays"): a member's datagram carried from one subnet to another,
# and multicast again there, is wrapped in one byte so its receivers know it came relayed (and that
# its writer's multicast did not reach them).  The inner datagram is verified by its own signature.
SITE_MAGIC = 0xC2


def encode_site(inner: bytes) -> bytes:
    """``inner`` (a member's signed datagram, as its writer sent it) wrapped as a site relay's copy."""
    if len(inner) + 1 > MAX_DATAGRAM:
        raise WireError(f"a site relay's copy of {len(inner)} bytes exceeds {MAX_DATAGRAM}")
    return bytes((SITE_MAGIC,)) + inner


def site_payload(data: bytes) -> bytes | None:
    """The datagram a site relay's copy carries, if ``data`` is one, else None."""
    return bytes(data[1:]) if data[:1] == bytes((SITE_MAGIC,)) else None


def parse_relay(data: bytes) -> RelayDatagram:
    """The fields of a relay-tree datagram (:func:`is_relay`), bounds checked; raises
    :class:`WireError` (only).  Its tag is checked apart, once the sender's key is known."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise WireError(f"expected bytes, got {type(data).__name__}")
    data = bytes(data)
    if len(data) > MAX_DATAGRAM:
        raise WireError(f"datagram of {len(data)} bytes exceeds {MAX_DATAGRAM}")
    if len(data) < RELAY_OVERHEAD + 1 or data[0] != RELAY_MAGIC:
        raise WireError("not a relay-tree datagram")
    try:
        kind = MsgType(data[1])
    except ValueError:
        kind = None
    if kind not in RELAY_TYPES:
        raise WireError(f"unknown relay-tree type {data[1]}")
    sender = data[2:2 + crypto.PID_BYTES].hex()
    at = 2 + crypto.PID_BYTES
    group_tag = data[at:at + RELAY_GROUP_TAG_BYTES]
    stamp = int.from_bytes(data[at + RELAY_GROUP_TAG_BYTES:_RELAY_HEAD], "big")
    body = data[_RELAY_HEAD:-RELAY_TAG_BYTES]
    if kind is MsgType.PRUNE:
        count, at = _read_varint(body, 0)
        if count > MAX_RELAY_RANGES or len(body) != at + count * WRITER_REF_BYTES:
            raise WireError("a PRUNE names at most 256 writer refs of 6 bytes, and nothing else")
        writers = tuple(body[at + i * WRITER_REF_BYTES:at + (i + 1) * WRITER_REF_BYTES] for i in range(count))
        return RelayDatagram(kind, sender, group_tag, stamp, writers=writers)
    ranges, at = _read_relay_ranges(body, 0)
    inner = body[at:]
    if (kind is MsgType.RELAY) != bool(inner):
        raise WireError("a RELAY carries a datagram after its ranges; an IHAVE or GRAFT nothing")
    return RelayDatagram(kind, sender, group_tag, stamp, ranges, inner=inner)


def relay_authentic(data: bytes, key: bytes) -> bool:
    """Whether ``data``'s tag was made with ``key`` (the sender's and this member's pairwise key)."""
    tag = hashlib.blake2b(bytes(data[:-RELAY_TAG_BYTES]), key=key, digest_size=RELAY_TAG_BYTES).digest()
    return hmac.compare_digest(tag, bytes(data[-RELAY_TAG_BYTES:]))
