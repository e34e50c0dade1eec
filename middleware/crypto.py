"""Identities, signatures and private-group sealing.

- Every peer has an Ed25519 key pair (PyNaCl: libsodium verifies twice as fast
  as OpenSSL through ``cryptography`` here, and every receiver verifies every
  batch); its pid is the first 128 bits of the SHA-256 of the public key, so a
  pid cannot be claimed without the key.
- Chat messages are signed in bursts: the messages of one datagram are the
  leaves of a Merkle tree, the roots of up to eight datagrams' trees are the
  leaves of a top tree, and the peer signs the top root once.  A datagram
  travels with the signature and its root's path in the top tree; the receiver
  rebuilds each message's path to the signed root (its "proof"), so any member
  can relay a message with its proof (repairs, sync) and receivers still know
  who wrote it.  A receiver verifies each signed root once, so once per burst,
  not per datagram: verifying is most of what a receiver spends per datagram.
  Every other datagram is signed as a whole.
- A private group's key is derived from its passphrase with Argon2id (libsodium,
  through PyNaCl) and a per-group salt fixed in the group's signed descriptor;
  groups made before descriptors used scrypt, which stays available to read
  them.  Its datagrams' bodies are sealed with ChaCha20-Poly1305
  (``cryptography``), the gid, type and sender bound as associated data.
- Direct messages: each identity also has an X25519 key, derived from its signing
  seed with HKDF under a label of its own (nothing more to store, and the two keys
  never share material), published in its signed member records.  A direct
  message is signed by its sender over both pids and the body, padded to a size
  bucket, and sealed for the recipient with libsodium's sealed box (an ephemeral
  X25519 key per message): the sealed bytes name neither party, and the
  recipient opens any datagram with one attempt, without knowing who sent it
  (resources/docs/security.md, Direct messages).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections import OrderedDict
from typing import Callable

import msgpack
import nacl.bindings
import nacl.exceptions
import nacl.public
import nacl.pwhash.argon2id
import nacl.signing
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
SALT_BYTES = 16
NONCE_BYTES = 12
KEY_CHECK_BYTES = 16
# scrypt cost: 2**15 x 8 x 128 bytes = 32 MiB and ~0.1 s per guess on this class of machine.
# Only groups made before signed descriptors use it (their stored keys keep them readable).
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1
# Argon2id cost of new private groups: 4 passes over 256 MiB.  libsodium's "moderate"
# (3 passes) measured 0.46-0.58 CPU seconds per guess here, too close to the 0.5 floor;
# 4 passes cost 0.6-0.75 (python -m m2mc.app.bench.kdf; figures in resources/docs/benchmarks.md), so an offline
# guess costs an attacker >= 0.5 core-seconds while a join stays under 1 s.
ARGON2ID = "argon2id"
ARGON2_OPSLIMIT = 4
ARGON2_MEMLIMIT = 256 * 2**20
# What a descriptor may ask a joiner to spend: a hostile creator cannot make a join
# allocate gigabytes or run for minutes.
MAX_ARGON2_OPSLIMIT = 8
MIN_ARGON2_MEMLIMIT, MAX_ARGON2_MEMLIMIT = 8 * 2**20, 1024 * 2**20


def pid_of(public_key: bytes) -> str:
    return hashlib.sha256(public_key).hexdigest()[:32]


def _direct_private_key(seed: bytes) -> nacl.public.PrivateKey:
    """The X25519 key of direct messages: HKDF of the signing seed under its own label, so
    it needs no storage and shares no bytes with the signing key (key separation)."""
    return nacl.public.PrivateKey(HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                                       info=b"m2mc direct").derive(seed))


class Identity:
    """This peer's signing key, and the X25519 key derived from it for direct messages."""

    def __init__(self, signing_key: nacl.signing.SigningKey) -> None:
        self._key = signing_key
        self.public_key = bytes(signing_key.verify_key)
        self.pid = pid_of(self.public_key)
        direct_key = _direct_private_key(bytes(signing_key))
        self.direct_public = bytes(direct_key.public_key)
        self._direct_box = nacl.public.SealedBox(direct_key)
        self._direct_secret = bytes(direct_key)

    def relay_key(self, gid: str, peer_pid: str, peer_dh: bytes) -> bytes | None:
        """The key this peer and ``peer_pid`` share for their relay control in ``gid`` (X25519 of
        the two members' signed direct-message keys, hashed with the group and both pids), or
        None when ``peer_dh`` is no usable X25519 key.  Either side computes the same key."""
        if len(peer_dh) != PUBLIC_KEY_BYTES:
            return None
        try:
            shared = nacl.bindings.crypto_scalarmult(self._direct_secret, peer_dh)
        except (nacl.exceptions.CryptoError, nacl.exceptions.RuntimeError, ValueError, TypeError):
            return None  # libsodium refuses a shared secret of zero (a low-order point)
        if shared == bytes(len(shared)):
            return None
        low, high = sorted((self.pid, peer_pid))
        return hashlib.blake2b(b"\x00".join((shared, gid.encode(), low.encode(), high.encode())),
                               digest_size=32, person=b"m2mc-relay-key").digest()

    @classmethod
    def generate(cls) -> Identity:
        return cls(nacl.signing.SigningKey.generate())

    @classmethod
    def from_bytes(cls, raw: bytes) -> Identity:
        """From the 32-byte private seed (the RFC 8032 private key, as :meth:`private_bytes` gives it)."""
        return cls(nacl.signing.SigningKey(raw))

    def private_bytes(self) -> bytes:
        return bytes(self._key)

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data).signature


def verify(public_key: bytes, signature: bytes, data: bytes) -> bool:
    try:
        nacl.bindings.crypto_sign_open(signature + data, public_key)
    except (nacl.exceptions.CryptoError, ValueError, TypeError):  # bad signature, or not a key at all
        return False
    return True


MAX_BATCH = 32  # messages in one datagram: paths of at most 5 hashes up to the datagram's root
MAX_BURST = 8  # datagrams under one signature: at most 3 more hashes up to the signed root
MAX_BURST_PATH_HASHES = 3
MAX_PATH_HASHES = 5 + MAX_BURST_PATH_HASHES
HASH_BYTES = 32


def _leaf(message: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + message).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _root_signing_bytes(root: bytes) -> bytes:
    return b"m2mc-batch-root" + root


def _tree(level: list[bytes]) -> tuple[bytes, list[list[bytes]]]:
    """The root over ``level`` and the levels below it, each padded to even length."""
    levels = []
    while len(level) > 1:
        if len(level) & 1:
            level.append(level[-1])  # an odd node is paired with itself
        levels.append(level)
        level = [_node(level[j], level[j + 1]) for j in range(0, len(level), 2)]
    return level[0], levels


def _siblings(levels: list[list[bytes]], index: int) -> bytes:
    return b"".join([lower[(index >> height) ^ 1] for height, lower in enumerate(levels)])


# A datagram's tree, as the compiled core (middleware/_merkle.c) builds it: the root and
# every level below it (padded to even length, leaves first) concatenated into one bytes
# object, from which each message's proof is cut.  The functions below are the reference
# that the compiled core is tested against, and the fallback when it was not built.

def _level_sizes(count: int) -> list[int]:
    sizes = []
    while count > 1:
        count += count & 1
        sizes.append(count)
        count //= 2
    return sizes


def _py_message_tree(messages: list[bytes]) -> tuple[bytes, bytes]:
    """``(root, levels)`` of the tree whose leaves are ``messages``."""
    root, levels = _tree([_leaf(m) for m in messages])
    return root, b"".join([node for level in levels for node in level])


def _py_message_proofs(levels: bytes, count: int, signature: bytes, high: int, top: bytes) -> list[bytes]:
    """Each leaf's proof: ``signature || index || siblings || top``, index ``high << depth | leaf``."""
    sizes = _level_sizes(count)
    starts = [sum(sizes[:h]) for h in range(len(sizes))]
    proofs = []
    for index in range(count):
        path = b"".join([levels[(start + ((index >> h) ^ 1)) * HASH_BYTES:][:HASH_BYTES] for h, start in enumerate(starts)])
        proofs.append(signature + ((high << len(sizes)) | index).to_bytes(2, "big") + path + top)
    return proofs


_PROOF_HEAD = SIGNATURE_BYTES + 2


def _py_compact_proofs(proofs: list[bytes]) -> list[bytes]:
    """Each proof written against the one before it, for the store: messages stored
    together mostly share a datagram, so their proofs share the signature and the upper
    sibling hashes.  ``flags (1 = same signature, 2 = stored whole) || shared trailing
    hashes || the proof's own bytes``."""
    out, previous = [], None
    for proof in proofs:
        if len(proof) < _PROOF_HEAD or (len(proof) - _PROOF_HEAD) % HASH_BYTES:
            out.append(b"\x02\x00" + proof)
            continue
        flags, start, end, shared = 0, 0, len(proof), 0
        if previous is not None:
            if proof[:SIGNATURE_BYTES] == previous[:SIGNATURE_BYTES]:
                flags, start = 1, SIGNATURE_BYTES
            limit = min(len(proof), len(previous)) - _PROOF_HEAD
            while (shared + 1) * HASH_BYTES <= limit and \
                    proof[end - HASH_BYTES:end] == previous[len(previous) - (shared + 1) * HASH_BYTES:][:HASH_BYTES]:
                shared += 1
                end -= HASH_BYTES
        out.append(bytes((flags, shared)) + proof[start:end])
        previous = proof
    return out


def _py_expand_proofs(compact: list[bytes]) -> list[bytes]:
    """The proofs :func:`_py_compact_proofs` was given."""
    out, previous = [], None
    for index, item in enumerate(compact):
        flags, shared = item[:2] if len(item) >= 2 else (255, 0)
        if flags > 2 or (flags == 2 and shared) or ((flags == 1 or shared) and previous is None) \
                or (previous is not None and shared * HASH_BYTES > len(previous) - _PROOF_HEAD):
            raise ValueError(f"compact proof {index} does not fit the one before it")
        proof = (previous[:SIGNATURE_BYTES] if flags == 1 else b"") + item[2:] \
            + (previous[len(previous) - shared * HASH_BYTES:] if shared else b"")
        out.append(proof)
        if flags != 2:
            previous = proof
    return out


try:
    from . import _merkle
except ImportError:  # built without a C compiler: the pure-Python trees do the same
    _merkle = None
COMPILED = _merkle is not None and os.environ.get("M2MC_PURE_PYTHON", "") in ("", "0")
message_tree = _merkle.tree if COMPILED else _py_message_tree
message_proofs = _merkle.proofs if COMPILED else _py_message_proofs
compact_proofs = _merkle.compact_proofs if COMPILED else _py_compact_proofs
expand_proofs = _merkle.expand_proofs if COMPILED else _py_expand_proofs


def _climb(node: bytes, index: int, siblings: bytes) -> tuple[bytes, int]:
    """Hash ``node`` up a path of ``siblings``, ``index`` saying left or right at each level;
    returns the node reached and what is left of the index (0 for a well-formed path)."""
    for start in range(0, len(siblings), HASH_BYTES):
        sibling = siblings[start:start + HASH_BYTES]
        node = _node(sibling, node) if index & 1 else _node(node, sibling)
        index >>= 1
    return node, index


def sign_burst(identity: Identity, datagrams: list[list[bytes]]) -> tuple[bytes, list[bytes], list[list[bytes]]]:
    """One signature over the messages of up to MAX_BURST datagrams.

    Each datagram's messages are the leaves of a tree of their own; the roots of those
    trees are the leaves of a small top tree, whose root is signed.  Returns the
    signature, each datagram's *burst path* (``index (2 bytes) || sibling hashes`` from
    its root to the signed one), and each message's proof (``signature || index ||
    sibling hashes`` from the message to the signed root).
    """
    if not 1 <= len(datagrams) <= MAX_BURST or not all(1 <= len(d) <= MAX_BATCH for d in datagrams):
        raise ValueError(f"a burst holds 1..{MAX_BURST} datagrams of 1..{MAX_BATCH} messages")
    trees = [message_tree(messages) for messages in datagrams]
    top_root, top_levels = _tree([root for root, _ in trees])
    signature = identity.sign(_root_signing_bytes(top_root))
    burst_paths = [i.to_bytes(2, "big") + _siblings(top_levels, i) for i in range(len(datagrams))]
    proofs = [message_proofs(levels, len(messages), signature, i, path[2:])
              for i, ((_, levels), messages, path) in enumerate(zip(trees, datagrams, burst_paths))]
    return signature, burst_paths, proofs


def burst_path_is_well_formed(path: bytes) -> bool:
    extra = len(path) - 2
    return (extra >= 0 and extra % HASH_BYTES == 0 and extra // HASH_BYTES <= MAX_BURST_PATH_HASHES
            and int.from_bytes(path[:2], "big") < 1 << (extra // HASH_BYTES))


def open_batch(public_key: bytes, signature: bytes, messages: list[bytes], burst_path: bytes = b"\x00\x00"
               ) -> list[bytes] | None:
    """Proofs for a datagram's messages, which travelled with just the signature and their
    datagram's burst path; None if ``public_key`` did not sign exactly these messages.

    The receiver rebuilds the datagram's tree itself and climbs the burst path to the
    signed root, which it verifies once for the whole burst; the proofs it gets back
    let it relay each message on its own later.
    """
    if not 1 <= len(messages) <= MAX_BATCH or len(signature) != SIGNATURE_BYTES \
            or not burst_path_is_well_formed(burst_path):
        return None
    root, levels = message_tree(messages)
    burst_index = int.from_bytes(burst_path[:2], "big")
    top_root, _ = _climb(root, burst_index, burst_path[2:])
    if not _root_is_signed(public_key, signature, top_root):
        return None
    return message_proofs(levels, len(messages), signature, burst_index, burst_path[2:])


def proof_is_well_formed(proof: bytes) -> bool:
    extra = len(proof) - SIGNATURE_BYTES - 2
    return extra >= 0 and extra % HASH_BYTES == 0 and extra // HASH_BYTES <= MAX_PATH_HASHES


_verified_roots: OrderedDict[tuple[bytes, bytes, bytes], None] = OrderedDict()


def _root_is_signed(public_key: bytes, signature: bytes, root: bytes) -> bool:
    """Whether ``signature`` by ``public_key`` covers ``root``; each root is verified once.

    The signature is part of the key: Ed25519 signs deterministically, so the datagrams
    of a burst still hit, while a proof carrying other signature bytes is checked anew
    (it would fail at any peer that had not seen the burst)."""
    key = (public_key, root, signature)
    if key in _verified_roots:
        _verified_roots.move_to_end(key)
        return True
    if not verify(public_key, signature, _root_signing_bytes(root)):
        return False
    _verified_roots[key] = None
    if len(_verified_roots) > 8192:
        _verified_roots.popitem(last=False)
    return True


def verify_message(public_key: bytes, proof: bytes, message: bytes) -> bool:
    """Whether ``message`` is under a root that ``public_key`` signed."""
    if not proof_is_well_formed(proof):
        return False
    signature, index = proof[:SIGNATURE_BYTES], int.from_bytes(proof[SIGNATURE_BYTES:SIGNATURE_BYTES + 2], "big")
    root, index = _climb(_leaf(message), index, proof[SIGNATURE_BYTES + 2:])
    if index:
        return False  # the index claims more levels than the path has
    return _root_is_signed(public_key, signature, root)


_packers = threading.local()


def message_bytes(gid: str, sender: str, seqno: int, parent, sent_at: int, name: str, text: str) -> bytes:
    """The canonical bytes a chat message's signature covers."""
    # Every message is packed for its Merkle leaf; a Packer kept per thread halves
    # the cost of msgpack.packb, which builds a new one each call.
    packer = getattr(_packers, "packer", None)
    if packer is None:
        packer = _packers.packer = msgpack.Packer(use_bin_type=True)
    return packer.pack(["m2mc-msg", gid, sender, seqno, list(parent) if parent else None, sent_at, name, text])


# -- private groups --------------------------------------------------------------------


def new_salt() -> bytes:
    return os.urandom(SALT_BYTES)


def argon2_params_acceptable(opslimit: int, memlimit: int) -> bool:
    """Whether a descriptor's Argon2id cost is one a joiner should pay."""
    return (nacl.pwhash.argon2id.OPSLIMIT_MIN <= opslimit <= MAX_ARGON2_OPSLIMIT
            and MIN_ARGON2_MEMLIMIT <= memlimit <= MAX_ARGON2_MEMLIMIT)


def derive_group_key(passphrase: str, salt: bytes, kdf: str = "scrypt",
                     opslimit: int = ARGON2_OPSLIMIT, memlimit: int = ARGON2_MEMLIMIT) -> bytes:
    """The group key; slow on purpose (see ARGON2_*): call it off the event loop."""
    secret = passphrase.encode("utf-8")
    if kdf == ARGON2ID:
        if not argon2_params_acceptable(opslimit, memlimit):
            raise ValueError(f"Argon2id cost out of bounds: opslimit {opslimit}, memlimit {memlimit}")
        return nacl.pwhash.argon2id.kdf(32, secret, salt, opslimit=opslimit, memlimit=memlimit)
    if kdf == "scrypt":
        return Scrypt(salt=salt, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P).derive(secret)
    raise ValueError(f"unknown key derivation {kdf!r}")


def key_proof(key: bytes, signed: bytes) -> bytes:
    """A private group member's record is also tagged with the group key: members can then
    tell a record from someone who holds the key from one invented by an outsider."""
    return hmac.new(key, b"m2mc member" + signed, hashlib.sha256).digest()[:KEY_CHECK_BYTES]


def key_check(key: bytes) -> bytes:
    """A value announced with the group so a joiner can tell a wrong passphrase at once."""
    return hmac.new(key, b"m2mc key check", hashlib.sha256).digest()[:KEY_CHECK_BYTES]


class GroupCipher:
    """Seals and opens a private group's datagram bodies."""

    def __init__(self, key: bytes) -> None:
        self._aead = ChaCha20Poly1305(key)

    def seal(self, plaintext: bytes, associated: bytes) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return nonce + self._aead.encrypt(nonce, plaintext, associated)

    def open(self, sealed: bytes, associated: bytes) -> bytes | None:
        if len(sealed) < NONCE_BYTES + 16:
            return None
        try:
            return self._aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], associated)
        except InvalidTag:
            return None


class GroupKeys:
    """A private group's keys by epoch (issue 44): ``epoch`` 0 is the passphrase's key, each
    re-key adds one.  Seals with the current epoch's key (``wire.encode`` names the epoch in
    the envelope); :meth:`for_epoch` opens any epoch held, so old messages stay readable."""

    def __init__(self, keys: dict[int, bytes], epoch: int) -> None:
        self._ciphers = {e: GroupCipher(k) for e, k in keys.items()}
        self.keys = dict(keys)
        self.epoch = epoch
        self._current = self._ciphers[epoch]

    def add(self, epoch: int, key: bytes) -> None:
        self.keys[epoch] = key
        self._ciphers[epoch] = GroupCipher(key)

    def use(self, epoch: int) -> None:
        self.epoch, self._current = epoch, self._ciphers[epoch]

    def for_epoch(self, epoch: int) -> GroupCipher | None:
        return self._ciphers.get(epoch)

    def seal(self, plaintext: bytes, associated: bytes) -> bytes:
        return self._current.seal(plaintext, associated)

    def open(self, sealed: bytes, associated: bytes) -> bytes | None:
        return self._current.open(sealed, associated)


def new_group_key() -> bytes:
    return os.urandom(32)


def seal_epoch_key(recipient_dh: bytes, key: bytes) -> bytes:
    """A 32-byte key sealed for a member's X25519 key (80 bytes); ValueError for an unusable key."""
    try:
        return nacl.public.SealedBox(nacl.public.PublicKey(recipient_dh)).encrypt(key)
    except (nacl.exceptions.CryptoError, TypeError, ValueError):
        raise ValueError("not a usable X25519 key") from None


def open_epoch_key(identity: Identity, sealed: bytes) -> bytes | None:
    """The key sealed for this peer's X25519 key, or None (never raises)."""
    try:
        key = identity._direct_box.decrypt(sealed)
    except (nacl.exceptions.CryptoError, TypeError, ValueError):
        return None
    return key if len(key) == 32 else None


# -- direct messages -------------------------------------------------------------------

PID_BYTES = 16
# Padded plaintext sizes: a sealed message's length tells an onlooker only its bucket.
# Powers of four (one bucket per 2 bits of length) up to what fits one datagram with the
# envelope around it: a chat line, a paragraph, a page, a long text, the longest.
DIRECT_BUCKETS = (256, 1024, 4096, 16384, 60_000)
DIRECT_SEAL_OVERHEAD = nacl.bindings.crypto_box_SEALBYTES  # the ephemeral public key and the MAC
_DIRECT_HEAD = PID_BYTES + SIGNATURE_BYTES + 2  # sender pid, signature, body length
MAX_DIRECT_BODY = DIRECT_BUCKETS[-1] - _DIRECT_HEAD
DIRECT_SEALED_SIZES = frozenset(bucket + DIRECT_SEAL_OVERHEAD for bucket in DIRECT_BUCKETS)


def _direct_signing_bytes(sender_pid: bytes, recipient_pid: bytes, body: bytes) -> bytes:
    # The recipient is signed too: a recipient cannot re-seal a message it got for a third
    # party and pass it off as the sender's word to them.
    return b"m2mc-direct\x00" + sender_pid + recipient_pid + body


def direct_bucket(size: int) -> int:
    """The padded plaintext size for a body of ``size`` bytes."""
    for bucket in DIRECT_BUCKETS:
        if size + _DIRECT_HEAD <= bucket:
            return bucket
    raise ValueError(f"a direct message body holds at most {MAX_DIRECT_BODY} bytes, not {size}")


def seal_direct(identity: Identity, recipient_pid: str, recipient_dh: bytes, body: bytes) -> bytes:
    """``body`` signed by ``identity`` for ``recipient_pid``, padded to its bucket and sealed
    for ``recipient_dh``.  Raises ValueError for a body over MAX_DIRECT_BODY, a malformed pid,
    or a key that is no usable X25519 key (a low-order point: only its owner can have signed
    it into a record, so only messages to that owner fail)."""
    bucket = direct_bucket(len(body))
    sender = bytes.fromhex(identity.pid)
    recipient = bytes.fromhex(recipient_pid)
    if len(recipient) != PID_BYTES or len(recipient_dh) != PUBLIC_KEY_BYTES:
        raise ValueError("a recipient is a 32-hex-digit pid and a 32-byte X25519 key")
    signature = identity.sign(_direct_signing_bytes(sender, recipient, body))
    plain = sender + signature + len(body).to_bytes(2, "big") + body
    plain += bytes(bucket - len(plain))
    try:
        return nacl.public.SealedBox(nacl.public.PublicKey(recipient_dh)).encrypt(plain)
    except nacl.exceptions.CryptoError:  # libsodium refuses a shared secret of zero
        raise ValueError("the recipient's direct-message key is not a usable X25519 key") from None


def open_direct(identity: Identity, sealed: bytes,
                keys_of: Callable[[str], tuple[bytes, bytes] | None]) -> tuple[str, bytes] | None:
    """``(sender pid, body)`` of a direct message sealed for ``identity``, or None when it is
    not one: not for us, damaged, padded wrongly, from a sender ``keys_of`` does not know
    (it gives a pid's Ed25519 and X25519 keys), or not signed by that sender.  Never raises.

    A stranger can make it spend at most one X25519 and one MAC over at most 60 KB, and
    one ``keys_of`` look-up and one Ed25519 verification: a length outside the buckets
    costs nothing; there is one key to try and no trial over senders."""
    if type(sealed) is not bytes or len(sealed) not in DIRECT_SEALED_SIZES:
        return None
    try:
        plain = identity._direct_box.decrypt(sealed)
    except nacl.exceptions.CryptoError:
        return None
    sender, signature = plain[:PID_BYTES], plain[PID_BYTES:PID_BYTES + SIGNATURE_BYTES]
    size = int.from_bytes(plain[PID_BYTES + SIGNATURE_BYTES:_DIRECT_HEAD], "big")
    end = _DIRECT_HEAD + size
    if end > len(plain) or direct_bucket(size) != len(plain) or plain[end:] != bytes(len(plain) - end):
        return None  # only a message padded as seal_direct pads it: nothing else hides in the padding
    body = plain[_DIRECT_HEAD:end]
    sender_pid = sender.hex()
    keys = keys_of(sender_pid)
    if keys is None or pid_of(keys[0]) != sender_pid:
        return None
    if not verify(keys[0], signature, _direct_signing_bytes(sender, bytes.fromhex(identity.pid), body)):
        return None
    return sender_pid, body
