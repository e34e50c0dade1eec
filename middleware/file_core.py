"""File transfer's protocol without I/O: frames, the handshake, and what a request or a chunk may be.

:mod:`middleware.file_transfer` is the asyncio layer over this module (sockets, files, threads,
the clock); :mod:`middleware.files` holds the offer, the hash tree and the chunk plan.  Here bytes
go in and bytes, values and refusals come out: no socket, no file, no clock, no randomness (the
nonces are handed in).

A frame is a 4-byte big-endian length, then its body: a 1-byte kind and a payload.  In a private
group every body after the handshake is sealed with ChaCha20-Poly1305 (:class:`Seal`), one key per
direction derived from the group key and both nonces (:func:`session_keys`), the nonce a frame
counter.  The handshake (HELLO, CHALLENGE, PROOF) is :class:`ClientHandshake` and
:class:`ServerHandshake`.  After it, a server's reply to each request is :func:`answer`; a
download asks its sources by :func:`asks`, takes each frame from one by :func:`heard` (a chunk
frame goes to be hashed only if :func:`chunk_admitted`: asked of that source, of the right
length) and each chunk hashed by :func:`taken`, over the plan of :class:`files.ChunkPlan`; what
its bitmap says, and when, is :class:`ResumeMarks`, as writes to make.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable

import msgpack
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from . import crypto
from .files import MAX_CHUNK, ChunkPlan, FileOffer, FirstAskers

VERSION = "m2mc-file1"
HELLO, CHALLENGE, PROOF, HAVE, NONE, HAVE_ONE, GET_HASHES, HASHES, GET, CHUNK, BUSY, MISSING, ELSEWHERE = range(1, 14)
MAX_FRAME = MAX_CHUNK + 64
MAX_HANDSHAKE_FRAME = 4096
SEAL_BYTES = 16  # a sealed body is this much longer (Poly1305's tag)
INDEX = struct.Struct(">I")
LENGTH = struct.Struct(">I")


class TransferError(Exception):
    """The other side broke the protocol, or is not who it should be: the connection is closed."""


class NotProven(TransferError):
    """A handshake's signature does not check: the other side is not the key it claims."""


# -- framing ---------------------------------------------------------------------------


class Seal:
    """One direction of a private group's stream: ChaCha20-Poly1305, the nonce a frame counter."""

    def __init__(self, key: bytes) -> None:
        self._aead = ChaCha20Poly1305(key)
        self._counter = 0

    def seal(self, body: bytes) -> bytes:
        nonce = self._counter.to_bytes(12, "big")
        self._counter += 1
        return self._aead.encrypt(nonce, body, None)

    def open(self, body: bytes | bytearray) -> bytes:
        nonce = self._counter.to_bytes(12, "big")
        self._counter += 1
        try:
            return self._aead.decrypt(nonce, body, None)
        except InvalidTag:
            raise TransferError("a sealed frame does not open") from None


def session_keys(group_key: bytes, nonce_c: bytes, nonce_s: bytes) -> tuple[bytes, bytes]:
    """(client to server, server to client) keys of one connection."""
    out = []
    for info in (b"m2mc-file c2s", b"m2mc-file s2c"):
        out.append(HKDF(algorithm=hashes.SHA256(), length=32, salt=nonce_c + nonce_s, info=info).derive(group_key))
    return out[0], out[1]


def encode(kind: int, *parts: bytes | memoryview, seal: Seal | None = None) -> list[bytes | memoryview]:
    """One frame as the pieces to write in order: unsealed, its head then ``parts`` uncopied."""
    if seal is not None:
        body = seal.seal(bytes([kind]) + b"".join(parts))
        return [LENGTH.pack(len(body)) + body]
    return [LENGTH.pack(1 + sum(len(p) for p in parts)) + bytes([kind]), *parts]


def encode_many(kind: int, payloads: list[bytes]) -> bytes:
    """Unsealed small frames of one kind, in one piece."""
    head = bytes([kind])
    return b"".join(LENGTH.pack(1 + len(p)) + head + p for p in payloads)


def check_length(length: int, limit: int) -> None:
    """A frame's length, before its body is read: at most ``limit`` of payload (and a seal's tag)."""
    if not 1 <= length <= limit + SEAL_BYTES:
        raise TransferError(f"a frame of {length} bytes")


def open_frame(body: bytes | bytearray, seal: Seal | None) -> tuple[int, bytes | memoryview]:
    """A frame's body -> (kind, payload).  A chunk's payload is a view of the body, not a copy
    (chunks are most of the bytes); any other's is bytes of its own."""
    if seal is not None:
        body = seal.open(body)
    if not body:
        raise TransferError("an empty frame")
    if body[0] == CHUNK:
        return CHUNK, memoryview(body)[1:]
    return body[0], bytes(body[1:])


class FrameCutter:
    """Cuts frames out of a byte stream received into buffers it hands out (:meth:`buffer`).

    A frame larger than the scratch buffer (every chunk) is received into a buffer of its own,
    taken by ``take(length)``, so its bytes are copied once, from the socket.  Small frames are
    cut out of the scratch buffer.  ``limit``: the longest payload taken; a longer frame is an
    :attr:`error`, and nothing after it is cut."""

    SCRATCH = 64 * 1024

    def __init__(self, limit: int, take: Callable[[int], bytearray] = bytearray) -> None:
        self.limit = limit
        self.take = take
        self.error: TransferError | None = None
        self._scratch = bytearray(self.SCRATCH)
        self._filled = 0
        self._body: bytearray | None = None
        self._body_at = 0

    def buffer(self) -> memoryview:
        """Where the next bytes received go."""
        if self._body is not None:
            return memoryview(self._body)[self._body_at:]
        return memoryview(self._scratch)[self._filled:]

    def wanted(self) -> int:
        """Bytes worth waking for: the rest of a chunk being received; between chunks, any byte."""
        return 1 if self._body is None else len(self._body) - self._body_at

    def feed(self, data: bytes) -> list[bytes | bytearray]:
        """``data`` received (copied into :meth:`buffer` as it fits): the frames it completes."""
        frames: list[bytes | bytearray] = []
        view = memoryview(data)
        while view and self.error is None:
            buffer = self.buffer()
            n = min(len(buffer), len(view))
            buffer[:n] = view[:n]
            view = view[n:]
            frames += self.updated(n)
        return frames

    def updated(self, nbytes: int) -> list[bytes | bytearray]:
        """``nbytes`` more were received into :meth:`buffer`: the frames now whole, in order."""
        if self.error is not None:
            return []
        if self._body is not None:
            self._body_at += nbytes
            if self._body_at == len(self._body):
                body, self._body = self._body, None
                return [body]
            return []
        frames: list[bytes | bytearray] = []
        self._filled += nbytes
        scratch, at = self._scratch, 0
        while self._filled - at >= 4:
            length = LENGTH.unpack_from(scratch, at)[0]
            try:
                check_length(length, self.limit)
            except TransferError as exc:
                self.error = exc
                return frames
            start = at + 4
            if self._filled - start >= length:
                frames.append(bytes(scratch[start:start + length]))
                at = start + length
            elif 4 + length > self.SCRATCH:  # a chunk: the rest comes straight into its own buffer
                self._body = self.take(length)
                self._body_at = self._filled - start
                self._body[:self._body_at] = scratch[start:self._filled]
                at = self._filled
                break
            else:
                break
        if at:
            left = self._filled - at
            scratch[:left] = scratch[at:self._filled]
            self._filled = left
        return frames


# -- the handshake ------------------------------------------------------------------------


def server_signed(gid: str, mid: str, nonce_c: bytes, nonce_s: bytes, client_key: bytes) -> bytes:
    return b"\0".join([b"m2mc-file-server", gid.encode(), mid.encode(), nonce_c, nonce_s, client_key])


def client_signed(gid: str, mid: str, nonce_c: bytes, nonce_s: bytes, server_key: bytes) -> bytes:
    return b"\0".join([b"m2mc-file-client", gid.encode(), mid.encode(), nonce_c, nonce_s, server_key])


@dataclass(frozen=True, slots=True)
class Hello:
    """What a client says first: the file it wants (group, offer's mid as text), its key, its nonce."""

    gid: str
    mid: str
    client_key: bytes
    nonce: bytes

    @property
    def pid(self) -> str:
        return crypto.pid_of(self.client_key)


def _bytes32(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == 32


class ClientHandshake:
    """The client's side: HELLO, then the server's CHALLENGE checked (it must be ``server_pid``),
    then PROOF.  ``identity``: this peer's (signs); ``nonce``: 32 random bytes."""

    def __init__(self, identity, gid: str, mid: str, server_pid: str, nonce: bytes) -> None:
        self.identity = identity
        self.gid, self.mid, self.server_pid, self.nonce = gid, mid, server_pid, nonce
        self.server_key: bytes | None = None
        self.server_nonce: bytes | None = None

    def hello(self) -> bytes:
        """HELLO's payload."""
        return msgpack.packb([VERSION, self.gid, self.mid, self.identity.public_key, self.nonce])

    def challenged(self, kind: int, payload: bytes) -> bytes:
        """The server's answer -> PROOF's payload.  TransferError if it is not a CHALLENGE;
        NotProven if it does not prove the server is ``server_pid``."""
        fields = msgpack.unpackb(payload)
        if kind != CHALLENGE or type(fields) is not list or len(fields) != 3:
            raise TransferError("expected a challenge")
        server_key, nonce_s, signature = fields
        if not isinstance(server_key, bytes) or crypto.pid_of(server_key) != self.server_pid \
                or not _bytes32(nonce_s) or not isinstance(signature, bytes) \
                or not crypto.verify(server_key, signature, server_signed(
                    self.gid, self.mid, self.nonce, nonce_s, self.identity.public_key)):
            raise NotProven(f"the server did not prove it is {self.server_pid}")
        self.server_key, self.server_nonce = server_key, nonce_s
        return self.identity.sign(client_signed(self.gid, self.mid, self.nonce, nonce_s, server_key))

    def seals(self, group_key: bytes | None) -> tuple[Seal | None, Seal | None]:
        """(out, in) once challenged: sealed in a private group (``group_key``), else none."""
        if not group_key:
            return None, None
        assert self.server_nonce is not None
        to_server, to_client = session_keys(group_key, self.nonce, self.server_nonce)
        return Seal(to_server), Seal(to_client)


class ServerHandshake:
    """The server's side: a HELLO from a current member (anyone else gets nothing, not even a
    signature), CHALLENGE, then the client's PROOF checked.  ``nonce``: 32 random bytes."""

    def __init__(self, identity, nonce: bytes) -> None:
        self.identity = identity
        self.nonce = nonce
        self.client: Hello | None = None

    def hello(self, kind: int, payload: bytes, is_member: Callable[[str, str], bool]) -> bytes | None:
        """A HELLO -> CHALLENGE's payload, or None if ``is_member(gid, pid)`` says the client is
        not a current member (send nothing, close).  TransferError if it is not a HELLO."""
        fields = msgpack.unpackb(payload) if kind == HELLO else None
        if type(fields) is not list or len(fields) != 5 or fields[0] != VERSION:
            raise TransferError("expected a HELLO")
        _, gid, mid, client_key, nonce_c = fields
        if not (isinstance(gid, str) and isinstance(mid, str) and _bytes32(client_key) and _bytes32(nonce_c)):
            raise TransferError("a malformed HELLO")
        hello = Hello(gid, mid, client_key, nonce_c)
        if not is_member(gid, hello.pid):
            return None
        self.client = hello
        return msgpack.packb([self.identity.public_key, self.nonce, self.identity.sign(
            server_signed(gid, mid, nonce_c, self.nonce, client_key))])

    def proven(self, kind: int, signature: bytes) -> Hello:
        """The client's PROOF: the HELLO it proved, or NotProven."""
        hello = self.client
        assert hello is not None
        if kind != PROOF or not crypto.verify(hello.client_key, signature, client_signed(
                hello.gid, hello.mid, hello.nonce, self.nonce, self.identity.public_key)):
            raise NotProven(f"{hello.pid} did not prove its key")
        return hello

    def seals(self, group_key: bytes | None) -> tuple[Seal | None, Seal | None]:
        """(in, out) once proven: sealed in a private group (``group_key``), else none."""
        if not group_key:
            return None, None
        assert self.client is not None
        to_server, to_client = session_keys(group_key, self.client.nonce, self.nonce)
        return Seal(to_server), Seal(to_client)


# -- requests and chunks ---------------------------------------------------------------------


def request(kind: int, payload: bytes) -> int | None:
    """A proven client's request: None for the hash list (GET_HASHES), a chunk's index for GET.
    TransferError for anything else."""
    if kind == GET_HASHES:
        return None
    if kind == GET and len(payload) == INDEX.size:
        return INDEX.unpack(payload)[0]
    raise TransferError(f"unexpected frame {kind}")


def answer(kind: int, payload: bytes, have: bytearray, askers: FirstAskers | None, client: str,
           connected: Callable[[str], bool]) -> tuple[int, int | None]:
    """A proven client's request -> what the server sends: (HASHES, None), (ELSEWHERE, index) when
    the offerer's ``askers`` say another receiver, still ``connected``, asked for that chunk first,
    (MISSING, index) for a chunk not held (``have``), else (CHUNK, index).  TransferError for
    anything but GET_HASHES or GET."""
    index = request(kind, payload)
    if index is None:
        return HASHES, None
    if askers is not None and not askers.serve(client, index, connected):
        return ELSEWHERE, index
    if not 0 <= index < len(have) or not have[index]:
        return MISSING, index
    return CHUNK, index


def index_of(payload: bytes) -> int:
    """The chunk index a HAVE_ONE, ELSEWHERE or MISSING payload is."""
    if len(payload) != INDEX.size:
        raise TransferError(f"an index of {len(payload)} bytes")
    return INDEX.unpack(payload)[0]


def split_chunk(payload: memoryview) -> tuple[int, memoryview]:
    """A CHUNK payload -> (its index, its bytes, not copied)."""
    if len(payload) < INDEX.size:
        raise TransferError("a chunk frame too short for its index")
    return INDEX.unpack_from(payload)[0], payload[INDEX.size:]


def chunk_asked(plan: ChunkPlan, pid: str, index: int) -> bool:
    """Whether chunk ``index`` is in flight to ``pid``: asked of it and not come yet (a copy that
    came is being checked, or taken), so not held.  A chunk frame that is not is never hashed nor
    written: a source cannot make a receiver hash what it never asked for, or twice, nor write
    over a chunk held."""
    return plan.inflight.get(index) == pid and index not in plan.checking


def chunk_admitted(plan: ChunkPlan, offer: FileOffer, pid: str, index: int, length: int) -> bool:
    """Whether a chunk frame from ``pid`` may go to be checked against its leaf (and written
    there if it matches): it was asked of ``pid`` (:func:`chunk_asked`) and is that chunk's
    length.  A wrong length is garbage, counted against its source (:meth:`ChunkPlan.received`)."""
    return chunk_asked(plan, pid, index) and length == offer.chunk_length(index)


# -- a download's sources ----------------------------------------------------------------------

WINDOW_BYTES = 16 * 2**20  # asked of one source and not yet checked and written: resources/docs/benchmarks.md
DOWNLOAD_WINDOW_BYTES = 64 * 2**20
"""Asked of all a download's sources together and not yet checked and written: what a slow disk
can make a download hold in memory (a chunk received waits in its buffer to be written).  More
than four sources share it, each its part (8 sources: 8 MiB each)."""


def window(offer: FileOffer, sources: int = 1) -> int:
    """Chunks asked of one source at most, not yet come and checked, while ``sources`` sources are
    connected: its :data:`WINDOW_BYTES`, or its share of :data:`DOWNLOAD_WINDOW_BYTES`; at least 2
    (one coming while the one before is checked), which 8 sources of 4 MiB chunks fill exactly."""
    share = min(WINDOW_BYTES, DOWNLOAD_WINDOW_BYTES // max(1, sources))
    return max(2, share // offer.chunk_size)


def asks(plan: ChunkPlan, owed: dict[str, int], limit: int, settling: bool, now: float) -> dict[str, list[int]]:
    """What to ask of each connected source now (``owed``: the chunks asked of each and not yet
    checked): as many as its window (``limit``) has room for, marked in flight in ``plan``.
    ``settling``: the offerer waits (the members reached have not said yet what they hold)."""
    out: dict[str, list[int]] = {}
    for pid, count in owed.items():
        if count >= limit or (settling and pid == plan.spare):
            continue
        picked = plan.pick(pid, limit - count, now)
        if picked:
            out[pid] = picked
    return out


@dataclass(slots=True)
class Heard:
    """What one frame from a download's source comes to.  ``chunk``: (index, bytes) to check against
    its leaf, then :func:`taken`; ``freed``: requests of that source answered without a chunk;
    ``ask_at``: when to ask again (a chunk the offerer sent elsewhere); ``holds``: the source holds
    chunks of the file."""

    chunk: tuple[int, memoryview] | None = None
    freed: int = 0
    ask_at: float | None = None
    holds: bool = False


def heard(plan: ChunkPlan, offer: FileOffer, leaves: list[bytes], pid: str, kind: int,
          payload: bytes | memoryview, now: float, elsewhere_wait: float) -> Heard:
    """A frame from source ``pid`` after its HAVE.  A chunk not asked of it (:func:`chunk_asked`)
    is dropped unchecked, and keeps no deadline of ``pid``'s; one asked but of the wrong length is
    counted against it and its request slot freed; one admitted stays in flight to ``pid`` until
    :func:`taken` (never asked twice)."""
    if kind == CHUNK:
        index, data = split_chunk(memoryview(payload))
        if not chunk_asked(plan, pid, index):
            return Heard()
        plan.arrived(pid, now)
        if not chunk_admitted(plan, offer, pid, index, len(data)):
            plan.received(pid, index, b"", leaves)  # counted as bad
            return Heard(freed=1)
        plan.came(index)
        return Heard(chunk=(index, data))
    if kind == HAVE_ONE:
        plan.source_has(pid, index_of(bytes(payload)))
        return Heard(holds=True)
    if kind == ELSEWHERE:  # another receiver asked the offerer first: from it, or later
        if plan.elsewhere(pid, index_of(bytes(payload)), now + elsewhere_wait):
            return Heard(freed=1, ask_at=now + elsewhere_wait)
        return Heard()
    if kind == MISSING:  # its copy is gone or changed: not asked of it again
        return Heard(freed=1 if plan.source_lacks(pid, index_of(bytes(payload))) else 0)
    return Heard()


def taken(plan: ChunkPlan, leaves: list[bytes], pid: str, index: int, digest: bytes) -> bool:
    """A chunk from ``pid`` was hashed (``digest``) and, if it matched, written: whether it is now
    held (else it was garbage, counted against ``pid``, or not needed any more)."""
    if not plan.received(pid, index, b"", leaves, digest):
        return False
    plan.stored(index)
    return True


# -- resume points ---------------------------------------------------------------------------

RESUME_BYTES = 2**30
"""A download's resume point every this many bytes: its file is synced and the chunks written
before are marked durable in its bitmap (2), so that after a power cut only the chunks since are
checked against the tree again.  A kill -9 costs no check at all: the page cache outlives the
process."""
WRITTEN, DURABLE = b"\x01", b"\x02"  # a chunk's byte in a download's bitmap (0: not held)


def runs(indices: list[int]) -> list[tuple[int, int]]:
    """``indices`` as (first, how many) runs of consecutive ones, in order."""
    out: list[tuple[int, int]] = []
    for index in sorted(indices):
        if out and out[-1][0] + out[-1][1] == index:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        elif not out or out[-1][0] + out[-1][1] < index:
            out.append((index, 1))
    return out


def bitmap_writes(indices: list[int], mark: bytes) -> list[tuple[int, bytes]]:
    """The writes (offset in the bitmap, bytes) that give chunks ``indices`` the byte ``mark``."""
    return [(start, mark * count) for start, count in runs(indices)]


class ResumeMarks:
    """A download's bitmap, as writes to make: a chunk is marked written (1) only after it was
    written, at the next :meth:`marks` (a kill -9 then never finds a chunk claimed that is not
    there), and durable (2) only after a sync that followed it (:meth:`resume_point`, then
    :func:`bitmap_writes` with :data:`DURABLE` once the sync is done).  ``unsynced``: the chunks
    written since the last resume point, which a power cut may have lost."""

    def __init__(self, every: int = RESUME_BYTES, unsynced: list[int] | None = None) -> None:
        self.every = every
        self.unmarked: list[int] = []
        self.unsynced: list[int] = list(unsynced or [])
        self.unsynced_bytes = 0

    def stored(self, index: int, length: int) -> bool:
        """Chunk ``index`` (``length`` bytes) was written: whether a resume point is due."""
        self.unmarked.append(index)
        self.unsynced.append(index)
        self.unsynced_bytes += length
        return self.unsynced_bytes >= self.every

    def marks(self) -> list[tuple[int, bytes]]:
        """The bitmap writes marking the chunks written since the last call."""
        writes, self.unmarked = bitmap_writes(self.unmarked, WRITTEN), []
        return writes

    def resume_point(self) -> list[int]:
        """The chunks to mark durable once a sync that starts now is done (write :meth:`marks`
        first: their 1s go before the 2s)."""
        chunks, self.unsynced, self.unsynced_bytes = self.unsynced, [], 0
        return chunks

    def forget(self) -> None:
        """No chunk is unsynced any more (checked after a power cut, or the file is done)."""
        self.unsynced, self.unsynced_bytes = [], 0
