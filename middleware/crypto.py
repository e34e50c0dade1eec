"""Identities, signatures and private-group sealing.

- Every peer has an Ed25519 key pair (PyNaCl: libsodium verifies twice as fast
  as OpenSSL through ``cryptography`` here, and every receiver verifies every
  batch); its pid is the first 128 bits of the SHA-256 of the public key, so a
  pid cannot be claimed without the key.
- Chat messages are signed in batches: the messages a peer sends in one
  burst are the leaves of a Merkle tree whose root it signs once.  A batch
  travels in one datagram with just the signature, and the receiver rebuilds
  each message's path to the root (its "proof"), so any member can relay a
  message with its proof (repairs, sync) and receivers still know who wrote
  it; a receiver verifies each root once.  Every other datagram is signed as
  a whole.
- A private group's key (``cryptography``) is derived from its passphrase with scrypt and a
  per-group salt announced with the group; its datagrams' bodies are sealed
  with ChaCha20-Poly1305, the gid, type and sender bound as associated data.
"""

from __future__ import annotations

import hashlib
import threading
import hmac
import os
from collections import OrderedDict

import msgpack
import nacl.bindings
import nacl.exceptions
import nacl.signing
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
SALT_BYTES = 16
NONCE_BYTES = 12
KEY_CHECK_BYTES = 16
# scrypt cost: 2**15 x 8 x 128 bytes = 32 MiB and ~0.1 s per guess on this class of machine.
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1


def pid_of(public_key: bytes) -> str:
    return hashlib.sha256(public_key).hexdigest()[:32]


class Identity:
    """This peer's signing key."""

    def __init__(self, signing_key: nacl.signing.SigningKey) -> None:
        self._key = signing_key
        self.public_key = bytes(signing_key.verify_key)
        self.pid = pid_of(self.public_key)

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


MAX_BATCH = 32  # messages under one signature: paths of at most 5 hashes
HASH_BYTES = 32


def _leaf(message: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + message).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _root_signing_bytes(root: bytes) -> bytes:
    return b"m2mc-batch-root" + root


def _merkle(messages: list[bytes]) -> tuple[bytes, list[bytes]]:
    """The Merkle root over ``messages`` and each one's ``index (2 bytes) || sibling hashes``."""
    level = [_leaf(m) for m in messages]
    levels = []
    while len(level) > 1:
        if len(level) & 1:
            level.append(level[-1])  # an odd node is paired with itself
        levels.append(level)
        level = [_node(level[j], level[j + 1]) for j in range(0, len(level), 2)]
    return level[0], [
        index.to_bytes(2, "big") + b"".join([lower[(index >> height) ^ 1] for height, lower in enumerate(levels)])
        for index in range(len(messages))
    ]


def sign_batch(identity: Identity, messages: list[bytes]) -> list[bytes]:
    """Proofs for up to MAX_BATCH messages: signature || index (2 bytes) || sibling hashes."""
    if not 1 <= len(messages) <= MAX_BATCH:
        raise ValueError(f"a batch holds 1..{MAX_BATCH} messages")
    root, paths = _merkle(messages)
    signature = identity.sign(_root_signing_bytes(root))
    return [signature + path for path in paths]


def open_batch(public_key: bytes, signature: bytes, messages: list[bytes]) -> list[bytes] | None:
    """Proofs for a whole batch that travelled together with just its signature, or None
    if ``public_key`` did not sign exactly these messages.

    The receiver rebuilds the tree itself, so no path needs to travel; the proofs it
    gets back let it relay each message on its own later.
    """
    if not 1 <= len(messages) <= MAX_BATCH or len(signature) != SIGNATURE_BYTES:
        return None
    root, paths = _merkle(messages)
    if not _root_is_signed(public_key, signature, root):
        return None
    return [signature + path for path in paths]


def proof_is_well_formed(proof: bytes) -> bool:
    extra = len(proof) - SIGNATURE_BYTES - 2
    return extra >= 0 and extra % HASH_BYTES == 0 and extra // HASH_BYTES <= 5


_verified_roots: OrderedDict[tuple[bytes, bytes], None] = OrderedDict()


def _root_is_signed(public_key: bytes, signature: bytes, root: bytes) -> bool:
    """Whether ``signature`` by ``public_key`` covers ``root``; each root is verified once."""
    key = (public_key, root)
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
    node = _leaf(message)
    for start in range(SIGNATURE_BYTES + 2, len(proof), HASH_BYTES):
        sibling = proof[start:start + HASH_BYTES]
        node = _node(sibling, node) if index & 1 else _node(node, sibling)
        index >>= 1
    if index:
        return False  # the index claims more levels than the path has
    return _root_is_signed(public_key, signature, node)


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


def derive_group_key(passphrase: str, salt: bytes) -> bytes:
    kdf = Scrypt(salt=salt, length=32, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P)
    return kdf.derive(passphrase.encode("utf-8"))


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
