"""Identities, signatures and private-group sealing, on the ``cryptography`` package.

- Every peer has an Ed25519 key pair; its pid is the first 128 bits of the
  SHA-256 of the public key, so a pid cannot be claimed without the key.
- A chat message is signed over its canonical bytes (:func:`message_bytes`),
  so any member can relay it (repairs, sync) and receivers still know who
  wrote it; every other datagram is signed as a whole.
- A private group's key is derived from its passphrase with scrypt and a
  per-group salt announced with the group; its datagrams' bodies are sealed
  with ChaCha20-Poly1305, the gid, type and sender bound as associated data.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from functools import lru_cache

import msgpack
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
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

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        self._key = private_key
        self.public_key = private_key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.pid = pid_of(self.public_key)

    @classmethod
    def generate(cls) -> Identity:
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_bytes(cls, raw: bytes) -> Identity:
        return cls(Ed25519PrivateKey.from_private_bytes(raw))

    def private_bytes(self) -> bytes:
        return self._key.private_bytes(
            serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
        )

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)


@lru_cache(maxsize=4096)
def _public_key(raw: bytes) -> Ed25519PublicKey:
    return Ed25519PublicKey.from_public_bytes(raw)


def verify(public_key: bytes, signature: bytes, data: bytes) -> bool:
    try:
        _public_key(public_key).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True


def message_bytes(gid: str, sender: str, seqno: int, parent, sent_at: int, name: str, text: str) -> bytes:
    """The canonical bytes a chat message's signature covers."""
    return msgpack.packb(
        ["m2mc-msg", gid, sender, seqno, list(parent) if parent else None, sent_at, name, text], use_bin_type=True
    )


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
