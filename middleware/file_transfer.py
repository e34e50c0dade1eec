"""Files over TCP: the asyncio layer that serves and fetches the chunks :mod:`middleware.files` plans.

The protocol itself (frames, seals, the handshake, what a server answers, which chunks a download
keeps and what its bitmap says when) is :mod:`middleware.file_core`, and a download's decisions
(which sources to reach, what to ask of whom, stalls, liars, slots given up, the end) are
:class:`middleware.file_download.Download`; neither does I/O.  This module is their sockets,
files, threads and clock: it carries a download's commands out and tells it what happened.

Every peer listens on TCP at its unicast endpoint's address and port (the UDP
endpoint of :mod:`middleware.reach`), so wherever a member's datagrams come from,
its chunks can be fetched.  One connection carries one file of one group:

1. the client says HELLO (version, gid, offer mid, its public key, a nonce); a
   server that does not hold the client to be a current member of the group
   closes the connection, having sent nothing;
2. the server answers with its public key, a nonce and its signature over both
   nonces, the group, the file and the client's key; the client checks that the
   key is the member it meant to reach;
3. the client answers with its signature over the same and the server's key;
   the server checks it, then says which chunks it has (HAVE, or NONE).

In a private group every frame after that is sealed with ChaCha20-Poly1305, one
key per direction derived (HKDF-SHA256) from the group key and both nonces, the
nonce a frame counter.  Then the client asks for the hash list and for chunks;
the server pushes HAVE_ONE as it gets chunks of its own.  The offerer answers a
request for a chunk another receiver asked it for first with ELSEWHERE (once per
receiver and chunk), so receivers trade chunks even when they did not start together.

Every slot and wait has a bound, and strangers give way first (resources/docs/security.md,
"file serving and downloads"): handshake slots per source address and in all
(:class:`files.HandshakeSlots`), 5 s to prove a key; upload slots per member and in all,
an idle one giving way to a member that wants one (:class:`files.Caps`); a source's chunks
are due by a deadline, then asked of the others and the offerer (:meth:`files.ChunkPlan.stalled`);
download slots in a line (:class:`files.SlotQueue`), the user's downloads first, one that
gets nothing for a while giving its slot to one waiting; a few auto-downloads per offerer.

State lives in ``<data dir>/files/``: per transfer a JSON record, the hash list
and a bitmap of the chunks held (one byte each: 1 written, 2 synced at a resume point),
beside the partial file ``<final name>.part`` (the final name cut so that this fits the
file system); a chunk is written before its byte in the bitmap, so after a kill -9 the
bitmap never claims a chunk that is not written, and after a power cut (another boot) the
chunks marked 1 are checked against the tree again.

A receiver hashes each byte once: a chunk against its leaf, the leaves against the root the
signed offer carries.  The offer's whole-file SHA-256 is shown as the offerer gave it.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import hashlib
import json
import logging
import mimetypes
import os
import random
import shutil
import socket
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import msgpack

from . import clock
from .events import FileProgress
from .kinds import FILE_OFFER
from .file_download import Ask, Close, Command, Connect, Download, Finish, GiveUp, Timing
from .file_core import (BUSY, CHALLENGE, CHUNK, DURABLE, GET, GET_HASHES, HASHES, HAVE, HAVE_ONE, HELLO, INDEX,
                        LENGTH, MAX_FRAME, MAX_HANDSHAKE_FRAME, MISSING, NONE, PROOF, ClientHandshake, FrameCutter,
                        NotProven, ResumeMarks, Seal, ServerHandshake, TransferError, answer, bitmap_writes,
                        check_length, encode, encode_many, index_of, open_frame)
from .files import (CHUNK_DEADLINE, DEFAULT_AUTO_DOWNLOAD, DEFAULT_MAX_FILE_SIZE, HASH_BYTES, MAX_CHUNKS,
                    MIN_SOURCE_RATE, PART_SUFFIX, Caps, ChunkPlan, FileOffer, FirstAskers, HandshakeSlots,
                    OfferError, ProgressGate, SlotQueue, check_fetch, chunk_deadline, chunk_size_for, leaf_hash,
                    OFFER_LEAF, name_fits, parse_offer, safe_name, split_leaves, tree_root, unique_name)
from .types import ChatMessage, Mid, UsageError, format_mid, parse_mid

if TYPE_CHECKING:
    from .peer_core import PeerCore

log = logging.getLogger(__name__)

READ_BUFFER = 2**20  # a stream stops reading past twice this, unless a frame being read needs more
HANDSHAKE_TIMEOUT = 5.0  # seconds from a connection's accept to its key proven; a LAN's handshake takes milliseconds
MAX_HANDSHAKES = 64  # connections not yet proven, at once (:class:`files.HandshakeSlots`)
HANDSHAKES_PER_ADDRESS = 8  # of them from one source address: a flood from one host gives way first
CONNECT_TIMEOUT = 5.0
CHECKERS = 2  # threads hashing and writing chunks (both let go of the GIL): one hashes while the other writes
POOL_BYTES = 48 * 2**20  # chunk buffers kept for reuse: more than a download's window (16 MiB) and its checkers'
LOW_WATER = 256 * 1024
"""A connection reading a chunk is woken once this much of it has come (SO_RCVLOWAT, where the system
has it), not for every few packets: on a link held to 1 Gbit/s the receiver woke for each 10 KB."""
MAX_DOWNLOADS = 4  # downloads fetching at once; the others wait their turn (:class:`files.SlotQueue`)
DOWNLOAD_IDLE = 5.0  # seconds without a new chunk after which a download gives its slot to one waiting
AUTO_PER_MEMBER = 2  # auto-downloads of one member's offers not yet done; its later offers wait
MAX_AUTO_OPEN = 16  # auto-downloads not yet done in all (fresh keys cost nothing): later offers are left to the user
AUTO_LATER = 8  # offers of one member waiting for its auto-downloads to finish (older ones are left to the user)
UPLOADS_PER_PEER = 4  # connections one member may hold to this peer at once
MAX_UPLOADS = 16  # a sealed chunk is held twice while it is sent: 16 x 8 MiB at most
UPLOAD_IDLE = 15.0  # seconds a proven connection may ask nothing before it is closed
UPLOAD_GIVES_WAY = 2.0  # seconds asking nothing after which an upload slot goes to a member that wants one
LEAVES_WAIT = 30  # tenths of a second a server fetching the file itself waits for its hash list
ANSWER_TIMEOUT = HANDSHAKE_TIMEOUT + LEAVES_WAIT / 10  # seconds a client waits for HAVE, NONE or BUSY


# -- the stream adapter ----------------------------------------------------------------


class _Buffers:
    """Chunk frames' buffers, kept for the next chunks once checked and written.

    A fresh 1 MiB bytearray costs 256 page faults and their zeroing, as much CPU as receiving
    it: a download's chunks are received into the few buffers its window needs, over and over.
    Up to ``limit`` bytes are kept.  Used on the event loop only."""

    def __init__(self, limit: int = POOL_BYTES) -> None:
        self.limit = limit
        self._free: dict[int, list[bytearray]] = {}
        self._kept = 0

    def take(self, length: int) -> bytearray:
        free = self._free.get(length)
        if free:
            self._kept -= length
            return free.pop()
        return bytearray(length)

    def give(self, buffer: object) -> None:
        """``buffer`` is used no more (anything but a bytearray, such as a frame opened from its
        seal, is left alone)."""
        if type(buffer) is bytearray and self._kept + len(buffer) <= self.limit:
            self._free.setdefault(len(buffer), []).append(buffer)
            self._kept += len(buffer)


class _FrameReader(asyncio.BufferedProtocol):
    """A fetching connection's frames after its handshake, read straight into their own buffers.

    The socket's bytes go where the :class:`file_core.FrameCutter` says: a chunk into a buffer of
    its own (taken from ``buffers``), which a checker thread then hashes and writes, so its bytes
    are copied once, from the socket, where asyncio's StreamReader copied them twice more (into its
    buffer, and out).  While a chunk comes, the socket wakes the loop only once :data:`LOW_WATER`
    bytes of it are there.  ``limit``: the longest frame taken.
    """

    def __init__(self, transport: asyncio.BaseTransport, limit: int, buffers: _Buffers | None = None) -> None:
        self.transport = transport
        self.buffers = buffers or _Buffers(0)
        self.cutter = FrameCutter(limit, self.buffers.take)
        self._frames: collections.deque[bytes | bytearray] = collections.deque()
        self._waiter: asyncio.Future | None = None
        self._error: BaseException | None = None
        self._socket = transport.get_extra_info("socket") if hasattr(socket, "SO_RCVLOWAT") else None
        self._low_water = 1
        self.on_bytes: Callable[[], None] | None = None  # told whenever bytes came (the source is not silent)

    @property
    def limit(self) -> int:
        return self.cutter.limit

    @limit.setter
    def limit(self, limit: int) -> None:
        self.cutter.limit = limit

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.cutter.buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self.on_bytes is not None:
            self.on_bytes()
        for frame in self.cutter.updated(nbytes):
            self._push(frame)
        if self.cutter.error is not None:
            self._stop(self.cutter.error)
            return
        self._wake_at()

    def _wake_at(self) -> None:
        """Wake the loop when the rest of a chunk, or :data:`LOW_WATER` of it, is there; between
        chunks at any byte (a small frame must never wait for more)."""
        want = min(LOW_WATER, self.cutter.wanted())
        if want != self._low_water and self._socket is not None:
            try:
                self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, want)
                self._low_water = want
            except OSError:  # a system that has the option but does not take it (Windows): every packet wakes it
                self._socket = None

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop(exc or asyncio.IncompleteReadError(b"", None))

    def _push(self, frame: bytes | bytearray) -> None:
        self._frames.append(frame)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _stop(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self.transport.close()
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def read(self) -> bytes | bytearray:
        while not self._frames:
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        return self._frames.popleft()


class _Stream:
    """Frames (4-byte length, 1-byte type, payload) over an asyncio stream, sealed once keyed."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.seal_out: Seal | None = None
        self.seal_in: Seal | None = None
        self.bytes_in = 0
        self.bytes_out = 0
        self._held: list[bytes] | None = None  # frames written while sendfile(2) has the socket
        self.frames: _FrameReader | None = None  # reading past the StreamReader, once switched

    def read_frames(self, limit: int = MAX_FRAME, buffers: _Buffers | None = None) -> None:
        """From now on, read frames with a :class:`_FrameReader` (the StreamReader must hold no
        unread bytes: the other side sends nothing more until it hears from this one), chunks into
        ``buffers``' (a chunk's reader gives its buffer back there).  Writes still go through the
        StreamWriter, whose ``drain`` then no longer waits."""
        transport = self.writer.transport
        self.frames = _FrameReader(transport, limit, buffers)
        transport.set_protocol(self.frames)

    async def read(self, limit: int = MAX_FRAME) -> tuple[int, Any]:
        if self.frames is not None:
            body: bytes | bytearray = await self.frames.read()
            length = len(body)
            check_length(length, limit)
        else:
            length = LENGTH.unpack(await self.reader.readexactly(4))[0]
            check_length(length, limit)
            body = await self.reader.readexactly(length)
        self.bytes_in += 4 + length
        kind, payload = open_frame(body, self.seal_in)
        if self.frames is not None and (self.seal_in is not None or kind != CHUNK):
            self.frames.buffers.give(body)  # a chunk's own buffer goes back once it is checked
        return kind, payload

    def write(self, kind: int, *parts: bytes | memoryview) -> None:
        if self._held is not None:  # asyncio refuses writes during sendfile: they follow it
            self._held.append(bytes([kind]) + b"".join(parts))
            return
        for piece in encode(kind, *parts, seal=self.seal_out):
            self.writer.write(piece)
            self.bytes_out += len(piece)

    def write_many(self, kind: int, payloads: list[bytes]) -> None:
        """Small frames of one kind, in one write when unsealed."""
        if self.seal_out is not None or self._held is not None:
            for payload in payloads:
                self.write(kind, payload)
            return
        data = encode_many(kind, payloads)
        self.writer.write(data)
        self.bytes_out += len(data)

    async def send_file(self, source, offset: int, length: int) -> int:
        """``length`` bytes of the open file ``source`` from ``offset``, by sendfile(2) (unsealed only)."""
        self._held = []
        try:
            return await asyncio.get_running_loop().sendfile(self.writer.transport, source, offset, length)
        finally:
            held, self._held = self._held, None
            for frame in held:
                self.write(frame[0], frame[1:])

    def write_header(self, kind: int, length: int) -> None:
        """The head of an unsealed frame whose ``length`` bytes of payload the caller writes itself."""
        self.writer.write(LENGTH.pack(1 + length) + bytes([kind]))
        self.bytes_out += 5

    def close(self) -> None:
        self.writer.close()


# -- transfers ---------------------------------------------------------------------------


@dataclass(eq=False)
class Transfer:
    """One file of one group at this peer: offered by it, or being (or done being) fetched."""

    gid: str
    mid: Mid
    offer: FileOffer
    role: str  # "offer" or "download"
    path: Path  # the file offered, or the download's final name
    state: str  # "waiting", "fetching", "verifying", "done", "failed", "cancelled"
    have: bytearray
    leaves: list[bytes] | None = None
    error: str = ""
    received: int = 0  # chunk bytes received (good, bad and needless), over every run
    uploaded: int = 0
    download: Download | None = None  # a download's decisions (sources, asks, stalls, turns)
    streams: dict[int, _Stream] = field(default_factory=dict)  # its sources' connections, by the download's number
    subscribers: set[_Stream] = field(default_factory=set)
    askers: FirstAskers | None = None  # offered by this peer: who asked first for each chunk
    clients: dict[str, int] = field(default_factory=dict)  # members connected to fetch it: connections each
    task: asyncio.Task | None = None
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    part_fd: int | None = None
    bitmap_fd: int | None = None
    marks: ResumeMarks = field(default_factory=ResumeMarks)  # the bitmap's writes to make, and what is unsynced
    sync_job: asyncio.Future | None = None
    boot: str | None = None  # the boot whose page cache holds this download's unsynced writes
    synced: bool = True  # a finished download's file is on disk (its last sync done)
    auto: bool = False  # fetched on its own (auto-download), not asked for by the user

    @property
    def key(self) -> str:
        return f"{self.gid}-{self.mid[0]}-{self.mid[1]}"

    @property
    def part(self) -> Path:
        return self.path.with_name(self.path.name + PART_SUFFIX)

    @property
    def plan(self) -> ChunkPlan | None:
        return self.download.plan if self.download is not None else None

    @property
    def holders(self) -> set[str]:
        return self.download.holders if self.download is not None else set()

    @property
    def held_bytes(self) -> int:
        """The bytes of the chunks held: a count in C, not a sum over chunks (every progress report)."""
        offer, have = self.offer, self.have
        if not offer.size:
            return 0
        held = len(have) - have.count(0)
        if have and have[-1]:  # the last chunk is shorter than the others
            return (held - 1) * offer.chunk_size + offer.chunk_length(offer.chunks - 1)
        return held * offer.chunk_size

    def to_json(self) -> dict:
        return {"gid": self.gid, "mid": format_mid(self.mid), **self.offer.to_json(), "role": self.role,
                "state": self.state, "bytes": self.held_bytes, "received": self.received, "uploaded": self.uploaded,
                "holders": sorted(self.holders), "path": str(self.path), "error": self.error, "auto": self.auto,
                "bad_chunks": self.plan.bad_chunks if self.plan else 0}


def offer_from_file(path: Path, leaf: str = OFFER_LEAF) -> tuple[FileOffer, list[bytes]]:
    """Read ``path`` once: its offer (SHA-256, chunk size, tree root over ``leaf`` hashes) and its
    leaves.  Blocking."""
    size = path.stat().st_size
    chunk = chunk_size_for(size)
    whole = hashlib.sha256()
    leaves = []
    with path.open("rb") as source:
        while True:
            data = source.read(chunk)
            if not data:
                break
            whole.update(data)
            leaves.append(leaf_hash(data, leaf))
    if not leaves:
        leaves = [leaf_hash(b"", leaf)]
    if len(leaves) > MAX_CHUNKS:
        raise UsageError(f"{path} grew while it was read")
    mime = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return FileOffer(safe_name(path.name), size, mime, whole.hexdigest(), chunk, tree_root(leaves).hex(),
                     leaf), leaves


class FileService:
    """Serves and fetches the files of one peer's groups; driven by the peer's event loop."""

    offer_leaf = OFFER_LEAF  # the leaf hash of this peer's offers (an earlier release's: "sha256")

    def __init__(self, core: PeerCore, data_dir: Path, listener: Callable, *, download_dir: Path | None = None,
                 auto_download: int = DEFAULT_AUTO_DOWNLOAD, max_file_size: int = DEFAULT_MAX_FILE_SIZE,
                 rng: random.Random | None = None, windows: bool = os.name == "nt") -> None:
        self.core = core
        self.dir = Path(data_dir) / "files"
        self.download_dir = Path(download_dir) if download_dir else Path(data_dir) / "downloads"
        self.listener = listener
        self.auto_download = auto_download
        self.max_file_size = max_file_size
        self._rng = rng or random.Random()
        self.transfers: dict[tuple[str, Mid], Transfer] = {}
        self.caps = Caps(UPLOADS_PER_PEER, MAX_UPLOADS, UPLOAD_GIVES_WAY)
        self.handshakes = HandshakeSlots(HANDSHAKES_PER_ADDRESS, MAX_HANDSHAKES)
        self.slots = SlotQueue(MAX_DOWNLOADS)
        self.windows = windows
        self._granted: dict[Transfer, asyncio.Future] = {}  # downloads waiting for a slot: woken when granted
        self._auto_later: dict[str, collections.deque[tuple[str, Mid]]] = {}  # per offerer: offers not yet auto-fetched
        self._pending: dict[int, _Stream] = {}  # handshake slot -> its connection, to close when it gives way
        self._uploading: dict[int, _Stream] = {}  # upload slot -> its connection
        self.sources_stalled = 0
        self.auto_deferred = 0
        self.progress = ProgressGate()
        self.server: asyncio.base_events.Server | None = None
        self.port: int | None = None
        self.offers_rejected = 0
        self.strangers_refused = 0
        self.handshakes_failed = 0
        self.handshakes_refused = 0
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._buffers = _Buffers()
        self._checker = concurrent.futures.ThreadPoolExecutor(max_workers=CHECKERS, thread_name_prefix="m2mc-chunks")

    # -- life cycle -----------------------------------------------------------------------

    async def start(self, host: str, port: int) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        await self.listen_at(host, port)
        for record in sorted(self.dir.glob("*.json")):
            try:
                self._restore(record)
            except (OSError, ValueError, KeyError, OfferError) as exc:
                log.warning("files: cannot resume %s: %s", record.name, exc)

    async def listen_at(self, host: str, port: int) -> None:
        """Serve on TCP ``host``:``port`` from now on (at start, and when the peer's address moves);
        connections already open go on."""
        old, self.server = self.server, None
        if old is not None:
            old.close()
        try:
            self.server = await asyncio.start_server(self._serve, host, port, limit=READ_BUFFER)
            self.port = self.server.sockets[0].getsockname()[1]
        except OSError as exc:
            log.warning("files: cannot listen on TCP %s:%d (%s): this peer fetches files but serves none",
                        host, port, exc)

    async def close(self) -> None:
        self._closed = True
        if self.server is not None:
            self.server.close()
        for transfer in self.transfers.values():
            if transfer.task is not None:
                transfer.task.cancel()
            self._drop_sources(transfer)
            for stream in list(transfer.subscribers):
                stream.close()
        for task in list(self._tasks):
            task.cancel()
        for transfer in self.transfers.values():
            self._close_fds(transfer)
        self._checker.shutdown(wait=False, cancel_futures=True)

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- what the user asks ---------------------------------------------------------------

    async def offer(self, gid: str, path: str, parent: Mid | None, send: Callable[[str, str, Mid | None], Mid]
                    ) -> tuple[Mid, str]:
        """Offer the file at ``path`` in ``gid`` (a reply to ``parent``): hashed off the loop, then
        posted by ``send(gid, text, parent)``; served from ``path`` from then on."""
        self.core.channel(gid)
        source = Path(path).expanduser()
        if not source.is_file():
            raise UsageError(f"not a file: {path}")
        try:
            offer, leaves = await asyncio.get_running_loop().run_in_executor(
                None, offer_from_file, source, self.offer_leaf)
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
        mid = send(gid, offer.to_text(), parent)
        transfer = Transfer(gid, mid, offer, "offer", source.resolve(), "done", bytearray(b"\x01" * offer.chunks),
                            leaves)
        self.transfers[(gid, mid)] = transfer
        self._save(transfer, leaves=True, bitmap=True)
        return mid, offer.sha256

    def fetch_file(self, gid: str, mid: Mid, dest: str | None = None) -> dict:
        """``fetch_file``'s answer: the file object of :meth:`fetch`, whose ``path`` is where the file
        is or will be.  A file already here (downloaded, or offered by this peer) is put at ``dest``
        when one is given (:meth:`place`); a download under way to another place is refused, saying
        where it goes: never an answer that leaves nothing where it was asked for."""
        transfer = self.transfers.get((gid, mid))
        if dest and transfer is not None:
            self.core.channel(gid)
            if transfer.state == "done":
                return {**transfer.to_json(), "path": str(self.place(transfer, dest))}
            if transfer.state in ("waiting", "fetching", "verifying") and not self._lands_at(transfer, dest):
                raise UsageError(f"{transfer.offer.name} is already being fetched to {transfer.path}; "
                                 "ask again with that dest, or once it is done")
        return self.fetch(gid, mid, dest).to_json()

    @staticmethod
    def _lands_at(transfer: Transfer, dest: str) -> bool:
        target = Path(dest).expanduser()
        return target.is_dir() and target.resolve() == transfer.path.parent.resolve() \
            or target.resolve() == transfer.path.resolve()

    def place(self, transfer: Transfer, dest: str) -> Path:
        """Put the finished file of ``transfer`` at ``dest`` (a folder, or a file name there): a hard
        link where the disk allows, else a copy; a name taken gets `` (2)``…, nothing is replaced.
        Its path if it is there already.  UsageError if the file is gone from where it was put."""
        source = transfer.path
        if not source.is_file():
            raise UsageError(f"{transfer.offer.name} was put at {source}, which is gone: "
                             "cancel_file, then fetch_file fetches it again")
        folder, wanted = _folder_and_name(dest, source.name)
        folder.mkdir(parents=True, exist_ok=True)
        if (folder / wanted).exists() and os.path.samefile(folder / wanted, source):
            return folder / wanted
        while True:
            path = folder / unique_name(wanted, lambda n: (folder / n).exists(),
                                        lambda n: name_fits(n, str(folder), self.windows))
            try:
                os.link(source, path)
                return path
            except FileExistsError:  # taken meanwhile: the next free name
                continue
            except OSError:  # another disk, or a file system without hard links: a copy, given its name whole
                partial = path.with_name(path.name + PART_SUFFIX)
                try:
                    shutil.copyfile(source, partial)
                    try:
                        os.link(partial, path)
                    except FileExistsError:
                        raise
                    except OSError:  # no hard links on that disk either: the name is looked at, then taken
                        if path.exists():
                            raise FileExistsError(path) from None
                        os.replace(partial, path)
                except FileExistsError:
                    continue
                except OSError as exc:
                    raise UsageError(f"cannot put {transfer.offer.name} at {path}: {exc.strerror or exc}") from None
                finally:
                    partial.unlink(missing_ok=True)
                return path

    def fetch(self, gid: str, mid: Mid, dest: str | None = None, auto: bool = False) -> Transfer:
        """Start (or resume) fetching the file offered by ``mid``; ``dest`` a folder or a file name.
        ``auto``: fetched on its own (it waits behind the downloads the user asked for)."""
        self.core.channel(gid)
        transfer = self.transfers.get((gid, mid))
        if transfer is not None:
            if not auto and transfer.auto and transfer.role == "download":
                transfer.auto = False
                self.slots.promote(transfer)
            if transfer.state in ("failed", "cancelled"):
                transfer.state, transfer.error = "waiting", ""
                if transfer.download is not None:
                    transfer.download.restart()
                self._start(transfer)
            return transfer
        offer = self._offer_of(gid, mid)
        if mid[0] == self.core.pid:
            raise UsageError("this peer offered that file")
        folder, wanted = _folder_and_name(dest, offer.name) if dest else (self.download_dir, offer.name)
        folder.mkdir(parents=True, exist_ok=True)
        check_fetch(offer, self.max_file_size, shutil.disk_usage(folder).free)
        name = unique_name(wanted, lambda n: (folder / n).exists() or (folder / (n + PART_SUFFIX)).exists()
                           or any(t.path == folder / n for t in self.transfers.values()),
                           lambda n: name_fits(n, str(folder), self.windows))
        transfer = Transfer(gid, mid, offer, "download", folder / name, "waiting", bytearray(offer.chunks), auto=auto)
        self.transfers[(gid, mid)] = transfer
        self._save(transfer, bitmap=True)
        self._start(transfer)
        return transfer

    def cancel(self, gid: str, mid: Mid) -> Transfer:
        transfer = self.transfers.get((gid, mid))
        if transfer is None or transfer.role != "download":
            raise UsageError(f"no download of {format_mid(mid)} in this group")
        if transfer.state == "done":
            return transfer
        if transfer.task is not None:
            transfer.task.cancel()
            transfer.task = None
        self._drop_sources(transfer)
        transfer.state = "cancelled"
        self._close_fds(transfer)
        for stale in (transfer.part, self.dir / (transfer.key + ".bitmap")):
            stale.unlink(missing_ok=True)
        transfer.have = bytearray(transfer.offer.chunks)
        if transfer.download is not None:
            transfer.download.plan = None
        self._save(transfer)
        self._report(transfer, final=True)
        return transfer

    def files(self, gid: str) -> list[dict]:
        self.core.known(gid)
        rows = {t.mid: t.to_json() for t in self.transfers.values() if t.gid == gid}
        for message in self.core.store.file_offers(gid):
            if message.mid not in rows:
                try:
                    offer = parse_offer(message.text)
                except OfferError:
                    continue
                rows[message.mid] = {"gid": gid, "mid": format_mid(message.mid), **offer.to_json(), "role": "offered",
                                     "state": "offered", "bytes": 0, "received": 0, "uploaded": 0,
                                     "holders": [message.mid[0]], "path": "", "error": "", "bad_chunks": 0,
                                     "auto": False}
        return list(rows.values())

    def stats(self) -> dict:
        return {"file_uploads_refused": self.caps.refused, "file_uploads_evicted": self.caps.evicted,
                "file_strangers_refused": self.strangers_refused,
                "file_handshakes_failed": self.handshakes_failed, "file_handshakes_refused": self.handshakes_refused,
                "file_handshakes_evicted": self.handshakes.evicted, "file_sources_stalled": self.sources_stalled,
                "file_auto_deferred": self.auto_deferred,
                "file_offers_rejected": self.offers_rejected,
                "file_bytes_uploaded": sum(t.uploaded for t in self.transfers.values()),
                "file_bytes_received": sum(t.received for t in self.transfers.values())}

    # -- what the group delivers -------------------------------------------------------------

    def delivered(self, gid: str, messages: list[ChatMessage]) -> None:
        """New messages of ``gid``: offers up to the auto-download size are fetched at once."""
        for message in messages:
            if message.kind != FILE_OFFER or message.sender == self.core.pid:
                continue
            try:
                offer = parse_offer(message.text)
            except OfferError as exc:
                self.offers_rejected += 1
                log.info("files: offer %s refused: %s", format_mid(message.mid), exc)
                continue
            if offer.size <= self.auto_download and (gid, message.mid) not in self.transfers:
                self._auto_fetch(gid, message.mid, offer.name)

    def _auto_fetch(self, gid: str, mid: Mid, name: str) -> None:
        """Fetch an offer on its own, unless :data:`AUTO_PER_MEMBER` of its offerer's are not done
        yet: then it waits for one of them to finish (one of :data:`AUTO_LATER`), so offers that a
        member never serves hold at most that many of this peer's downloads; and unless
        :data:`MAX_AUTO_OPEN` are not done in all, whoever offered them (many fresh keys): then it
        is left to the user."""
        offerer = mid[0]
        open_ = [t for t in self.transfers.values() if t.auto and t.state in ("waiting", "fetching", "verifying")]
        if len(open_) >= MAX_AUTO_OPEN:
            self.auto_deferred += 1
            log.info("files: not fetching %s on its own: %d auto-downloads are not done yet", name, len(open_))
            return
        if sum(1 for t in open_ if t.mid[0] == offerer) >= AUTO_PER_MEMBER:
            later = self._auto_later.setdefault(offerer, collections.deque(maxlen=AUTO_LATER))
            if (gid, mid) not in later:
                later.append((gid, mid))
                self.auto_deferred += 1
            return
        try:
            self.fetch(gid, mid, auto=True)
        except (UsageError, OSError) as exc:
            log.warning("files: not fetching %s: %s", name, exc)

    def _auto_next(self, offerer: str) -> None:
        """One of ``offerer``'s auto-downloads is done: the next of its offers that waited."""
        later = self._auto_later.get(offerer)
        while later:
            gid, mid = later.popleft()
            if (gid, mid) in self.transfers:
                continue
            try:
                offer = self._offer_of(gid, mid)
            except UsageError:
                continue
            self._auto_fetch(gid, mid, offer.name)
            return
        self._auto_later.pop(offerer, None)

    def _offer_of(self, gid: str, mid: Mid) -> FileOffer:
        found = self.core.store.messages(gid, [mid])
        if not found or found[0].kind != FILE_OFFER:
            raise UsageError(f"no file offer {format_mid(mid)} in this group")
        try:
            return parse_offer(found[0].text)
        except OfferError as exc:
            raise UsageError(f"message {format_mid(mid)} is not a well-formed file offer: {exc}") from None

    # -- persistence ---------------------------------------------------------------------------

    def _save(self, transfer: Transfer, leaves: bool = False, bitmap: bool = False) -> None:
        base = self.dir / transfer.key
        self.dir.mkdir(parents=True, exist_ok=True)
        if leaves and transfer.leaves is not None:
            base.with_suffix(".hashes").write_bytes(b"".join(transfer.leaves))
        if bitmap:
            base.with_suffix(".bitmap").write_bytes(bytes(transfer.have))
        record = {"gid": transfer.gid, "mid": format_mid(transfer.mid), "offer": transfer.offer.to_text(),
                  "role": transfer.role, "path": str(transfer.path), "state": transfer.state,
                  "error": transfer.error, "received": transfer.received, "auto": transfer.auto,
                  "boot": transfer.boot, "synced": transfer.synced}
        tmp = base.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(base.with_suffix(".json"))

    def _restore(self, record_path: Path) -> None:
        record = json.loads(record_path.read_text())
        gid, mid = record["gid"], parse_mid(record["mid"])
        offer = parse_offer(record["offer"])
        base = record_path.with_suffix("")
        marks = bytes(offer.chunks)
        if (bitmap := base.with_suffix(".bitmap")).exists():
            marks = bitmap.read_bytes()[:offer.chunks].ljust(offer.chunks, b"\0")
        have = bytearray(1 if mark else 0 for mark in marks)
        leaves = None
        if (hashes_file := base.with_suffix(".hashes")).exists():
            leaves = split_leaves(hashes_file.read_bytes(), offer)
        transfer = Transfer(gid, mid, offer, record["role"], Path(record["path"]), record["state"], have, leaves,
                            record.get("error", ""), int(record.get("received", 0)), auto=record.get("auto") is True)
        transfer.synced = record.get("synced", True) is not False
        # Chunks written since the last resume point are on disk after a kill -9 (the page cache
        # outlives the process), perhaps not after a power cut: then they are checked against the
        # tree before anything else (_recheck).  A record of an older version: none are checked.
        boot = _boot_id()
        same_boot = boot is not None and record.get("boot", boot) == boot
        transfer.boot = boot if same_boot else None
        self.transfers[(gid, mid)] = transfer
        if transfer.role != "download":
            return
        if transfer.state in ("waiting", "fetching", "verifying"):
            if not same_boot:
                transfer.marks.unsynced = [i for i, mark in enumerate(marks) if mark == 1]
            transfer.state = "waiting"
            self._start(transfer)
        elif transfer.state == "done" and not transfer.synced:
            transfer.marks.unsynced = list(range(offer.chunks)) if not same_boot else []
            self._spawn(self._sync_done(transfer))

    def _close_fds(self, transfer: Transfer) -> None:
        self._mark(transfer)
        for fd in (transfer.part_fd, transfer.bitmap_fd):
            if fd is not None:
                os.close(fd)
        transfer.part_fd = transfer.bitmap_fd = None

    def _mark(self, transfer: Transfer) -> None:
        """The bitmap bytes of the chunks written since the last call, a write per run of them (at
        every progress report, a resume point and the end): a kill -9 loses at most the chunks of
        one report's interval, never claims one that is not written."""
        writes = transfer.marks.marks()
        if transfer.bitmap_fd is not None:
            for offset, data in writes:
                _pwrite(transfer.bitmap_fd, data, offset)

    # -- fetching ----------------------------------------------------------------------------

    def _start(self, transfer: Transfer) -> None:
        if transfer.download is None:
            transfer.download = Download(transfer.offer, transfer.mid[0], self.core.pid, transfer.leaves)
        if transfer.task is None or transfer.task.done():
            transfer.task = self._spawn(self._download(transfer))

    async def _download(self, transfer: Transfer) -> None:
        """Turns of fetching, each in a download slot, until the file is whole.  A turn that gets
        no chunk for :data:`DOWNLOAD_IDLE` while another download waits gives its slot up and goes
        to the back of the line; an auto-download that does so :data:`file_download.AUTO_IDLE_TURNS`
        times without a chunk fails (the user can still ask for it)."""
        download = transfer.download
        assert download is not None
        try:
            while True:
                await self._take_slot(transfer)
                try:
                    if await self._turn(transfer):
                        if transfer.auto:
                            self._auto_next(transfer.mid[0])
                        return
                finally:
                    self._wake(self.slots.release(transfer))
                if (reason := download.turn_ended(transfer.auto)) is not None:
                    self._auto_later.pop(transfer.mid[0], None)  # its offerer serves nothing: its other offers wait for the user
                    if not any(transfer.have):  # no empty .part left in the downloads folder
                        transfer.part.unlink(missing_ok=True)
                    raise UsageError(reason)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the disk (OSError), the offer (UsageError), or a bug
            if not isinstance(exc, (OSError, UsageError)):
                log.exception("files: %s failed", transfer.offer.name)
            self._fail(transfer, exc)

    async def _take_slot(self, transfer: Transfer) -> None:
        """Wait (at no cost: a future, woken by :meth:`_wake`) until ``transfer`` holds a download slot."""
        if self.slots.request(transfer, transfer.auto):
            return
        transfer.state = "waiting"
        self._report(transfer)
        granted = self._granted[transfer] = asyncio.get_running_loop().create_future()
        try:
            await granted
        except asyncio.CancelledError:
            self._granted.pop(transfer, None)
            self._wake(self.slots.withdraw(transfer))
            raise

    def _wake(self, granted: list) -> None:
        for transfer in granted:
            waiter = self._granted.pop(transfer, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            elif waiter is None:  # gone meanwhile (cancelled): its slot goes on
                self._wake(self.slots.release(transfer))

    async def _turn(self, transfer: Transfer) -> bool:
        """Fetch while holding a slot: True once the file is whole, False when the slot is given up.
        The decisions are the :class:`file_download.Download`'s; this carries them out, and ticks
        it at its deadline or when woken."""
        download = transfer.download
        assert download is not None
        await self._recheck(transfer)
        transfer.state = "fetching"
        download.leaves = transfer.leaves
        download.begin(clock.now(), transfer.have,
                       Timing(chunk_deadline(transfer.offer.chunk_size), DOWNLOAD_IDLE, CHUNK_DEADLINE))
        self._save(transfer)
        transfer.part.parent.mkdir(parents=True, exist_ok=True)
        transfer.part_fd = os.open(transfer.part, os.O_RDWR | os.O_CREAT | _O_BINARY, 0o600)
        transfer.bitmap_fd = os.open(self.dir / (transfer.key + ".bitmap"), os.O_RDWR | os.O_CREAT | _O_BINARY, 0o600)
        self._report(transfer)
        while True:
            now = clock.now()
            for command in download.tick(now, self._reachable(transfer, now), bool(self.slots.waiting)):
                if isinstance(command, Finish):
                    return await self._finish(transfer)
                if isinstance(command, GiveUp):
                    log.info("files: %s got nothing for %.0f s: its slot goes to a download waiting",
                             transfer.offer.name, command.idle)
                    self._drop_sources(transfer)
                    self._close_fds(transfer)
                    download.plan = None
                    transfer.state = "waiting"
                    self._save(transfer)
                    self._report(transfer)
                    return False
                self._carry_out(transfer, command)
            transfer.wake.clear()
            try:
                await asyncio.wait_for(transfer.wake.wait(), max(0.0, download.deadline(now) - now))
            except asyncio.TimeoutError:
                pass

    def _reachable(self, transfer: Transfer, now: float) -> list[str]:
        """The group's current members other than this peer whose address is known."""
        record = self.core.gjlp.groups.get(transfer.gid)
        if record is None:
            return []
        return [member.pid for member in record.current()
                if member.pid != self.core.pid and self.core.reach.address_of(member.pid, now) is not None]

    def _carry_out(self, transfer: Transfer, command: Command) -> None:
        """One command of the download's (a :class:`Finish` or :class:`GiveUp` is :meth:`_turn`'s)."""
        if isinstance(command, Ask):
            stream = transfer.streams.get(command.conn)
            if stream is not None:
                stream.write_many(GET, [INDEX.pack(index) for index in command.chunks])  # one write, one segment
        elif isinstance(command, Close):
            if command.stalled:
                self.sources_stalled += 1
                log.info("files: %s sent no chunk of %s in time: asking the others", command.pid,
                         transfer.offer.name)
            stream = transfer.streams.pop(command.conn, None)
            if stream is not None:
                stream.close()
        elif isinstance(command, Connect):
            address = self.core.reach.address_of(command.pid, clock.now())
            self._spawn(self._fetch_from(transfer, command.pid, command.conn, address))

    def _carry_all(self, transfer: Transfer, commands: list[Command]) -> None:
        for command in commands:
            self._carry_out(transfer, command)
        if transfer.download is not None and transfer.download.due_now:
            transfer.wake.set()

    def _fail(self, transfer: Transfer, exc: BaseException | None) -> None:
        """The download stops with ``exc`` as its error (``fetch_file`` starts it again)."""
        if transfer.state == "failed":
            return
        if transfer.task is not None and transfer.task is not asyncio.current_task():
            transfer.task.cancel()
            transfer.task = None
        transfer.state, transfer.error = "failed", str(exc)
        log.warning("files: %s failed: %s", transfer.offer.name, exc)
        self._drop_sources(transfer)
        self._close_fds(transfer)
        self._save(transfer)
        self._report(transfer, final=True)

    async def _fetch_from(self, transfer: Transfer, pid: str, conn: int, address) -> None:
        """Connection ``conn`` to source ``pid``: the handshake, its HAVE (and the hash list, the
        first time), then its frames, each told to the download."""
        download = transfer.download
        assert download is not None
        stream: _Stream | None = None
        try:
            if address is None:
                return
            stream = await self._connect(transfer, pid, address.host, address.port)
            if stream is None or not download.connected(pid, conn):
                return
            transfer.streams[conn] = stream
            kind, payload = await asyncio.wait_for(stream.read(), ANSWER_TIMEOUT)
            if kind != HAVE:
                return  # NONE or BUSY: asked again later
            announced = []  # what it gets while its hash list comes
            if download.needs_hashes:
                hashes_limit = max(MAX_FRAME, transfer.offer.chunks * HASH_BYTES + 64)
                if stream.frames is not None:
                    stream.frames.limit = hashes_limit
                stream.write(GET_HASHES)
                await stream.writer.drain()
                # The hash list's deadline is a chunk's, for as many bytes: no holder keeps this waiting.
                hashes_due = clock.now() + CHUNK_DEADLINE + hashes_limit / MIN_SOURCE_RATE
                while True:  # a hash list of 262,144 chunks is 8 MiB, more than a chunk frame
                    kind, data = await asyncio.wait_for(stream.read(hashes_limit), max(0.0, hashes_due - clock.now()))
                    if kind == HASHES:
                        if stream.frames is not None:
                            stream.frames.limit = MAX_FRAME
                        break
                    if kind == HAVE_ONE:
                        announced.append(index_of(data))
                try:
                    leaves = split_leaves(data, transfer.offer)
                except OfferError as exc:
                    log.warning("files: %s sent a bad hash list: %s", pid, exc)
                    download.hashes(pid, conn, None, clock.now())
                    return
                if download.hashes(pid, conn, leaves, clock.now()):  # the first list to come: the download's
                    transfer.leaves = leaves
                    self._save(transfer, leaves=True)
            if download.plan is None:
                return  # the turn ended while the hash list came
            self._carry_all(transfer, download.have(pid, conn, payload, announced, clock.now()))
            if stream.frames is not None:
                stream.frames.on_bytes = lambda: download.bytes_came(pid, conn, clock.now())
            while transfer.state == "fetching":
                kind, data = await stream.read()
                outcome, commands = download.frame(pid, conn, kind, data, clock.now())
                if kind == CHUNK:
                    transfer.received += len(data) - INDEX.size
                    if outcome.chunk is not None:
                        self._check_chunk(transfer, pid, conn, *outcome.chunk)
                    else:  # refused unchecked (not asked of this source, or not that chunk's length)
                        self._buffers.give(data.obj)
                self._carry_all(transfer, commands)
                if outcome.ask_at is not None:
                    transfer.wake.set()  # the deadline to ask again is the download's now
        except (OSError, asyncio.IncompleteReadError, TransferError, struct.error, asyncio.TimeoutError,
                ValueError, msgpack.ExtraData) as exc:
            log.debug("files: source %s of %s: %s", pid, transfer.offer.name, exc)
        except Exception:  # a bug: this source is dropped, the download goes on with the others
            log.exception("files: source %s of %s failed", pid, transfer.offer.name)
        finally:
            if stream is not None:
                stream.close()
                if transfer.streams.get(conn) is stream:
                    del transfer.streams[conn]
            self._carry_all(transfer, download.lost(pid, conn, clock.now()))
            transfer.wake.set()

    async def _connect(self, transfer: Transfer, pid: str, host: str, port: int) -> _Stream | None:
        """The handshake, client side: a stream to ``pid`` proven to be it, sealed in a private group."""
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=READ_BUFFER),
                                                CONNECT_TIMEOUT)
        stream = _Stream(reader, writer)
        try:
            handshake = ClientHandshake(self.core.identity, transfer.gid, format_mid(transfer.mid), pid,
                                        os.urandom(32))
            stream.write(HELLO, handshake.hello())
            kind, payload = await asyncio.wait_for(stream.read(MAX_HANDSHAKE_FRAME), HANDSHAKE_TIMEOUT)
            try:
                proof = handshake.challenged(kind, payload)
            except NotProven:
                self.handshakes_failed += 1
                raise TransferError(f"the server at {host}:{port} did not prove it is {pid}") from None
            stream.read_frames(buffers=self._buffers)  # before PROOF: the server sends nothing until it has it
            stream.write(PROOF, proof)
            stream.seal_out, stream.seal_in = handshake.seals(self.core.store.group_key(transfer.gid))
            await writer.drain()
            return stream
        except BaseException:
            stream.close()
            raise

    def _check_chunk(self, transfer: Transfer, pid: str, conn: int, index: int, data: memoryview) -> None:
        """A chunk came: hashed on a checker thread while the loop reads on, and written there if it
        matches its leaf (one write at a time, :data:`_WRITING`, while the other checker hashes);
        then taken (its bitmap byte, after the chunk is written).  It stays in flight to its
        source meanwhile: never asked twice."""
        download = transfer.download
        plan = transfer.plan
        assert download is not None and plan is not None and transfer.leaves is not None
        job = asyncio.get_running_loop().run_in_executor(
            self._checker, _check_and_write, data, transfer.leaves[index], transfer.part,
            index * transfer.offer.chunk_size, transfer.offer.leaf)

        def checked(job: asyncio.Future) -> None:
            if job.cancelled():  # its thread may still read the buffer: it is not reused
                return
            self._buffers.give(data.obj)
            if transfer.plan is not plan or transfer.state != "fetching":
                return
            if job.exception() is not None:  # the disk: full, gone, read-only
                download.check_failed(index)
                self._fail(transfer, job.exception())
                return
            stored, commands = download.checked(pid, conn, index, job.result(), clock.now())
            if stored:
                self._took(transfer, index)
            self._carry_all(transfer, commands)

        job.add_done_callback(checked)

    def _took(self, transfer: Transfer, index: int) -> None:
        """Chunk ``index`` is held: its bitmap byte comes at the next report, after the chunk, never
        before; the members fetching it from this peer hear of it."""
        resume_due = transfer.marks.stored(index, transfer.offer.chunk_length(index))
        for subscriber in list(transfer.subscribers):
            subscriber.write(HAVE_ONE, INDEX.pack(index))
        if resume_due and transfer.plan is not None and not transfer.plan.complete:
            self._resume_point(transfer)
        self._report(transfer)
    def _resume_point(self, transfer: Transfer) -> None:
        """Sync the partial file on a worker thread, then mark the chunks written before as durable
        (2 in the bitmap): after a power cut only the chunks since are checked again.  One at a
        time; the download goes on meanwhile."""
        if transfer.sync_job is not None:
            return
        self._mark(transfer)  # their 1s are written before the 2s that follow
        chunks = transfer.marks.resume_point()
        job = transfer.sync_job = asyncio.get_running_loop().run_in_executor(None, _sync_path, transfer.part)

        def synced(job: asyncio.Future) -> None:
            transfer.sync_job = None
            if job.cancelled() or job.exception() is not None or transfer.bitmap_fd is None:
                return  # not durable: a power cut checks them again
            for offset, data in bitmap_writes(chunks, DURABLE):
                _pwrite(transfer.bitmap_fd, data, offset)

        job.add_done_callback(synced)

    async def _recheck(self, transfer: Transfer) -> None:
        """After a power cut (another boot than the one that wrote them), the chunks written since
        the download's last resume point are checked against the tree before it goes on: those that
        do not match are fetched again.  The only bytes a receiver hashes twice, and only then."""
        if transfer.boot is not None:
            return
        if unsynced := transfer.marks.unsynced:
            bad = unsynced
            if transfer.leaves is not None:
                bad = await asyncio.get_running_loop().run_in_executor(
                    self._checker, _bad_chunks, transfer.part, transfer.offer, transfer.leaves, unsynced)
            if bad:
                log.warning("files: %d chunks of %s were lost in a power cut; fetching them again", len(bad),
                            transfer.offer.name)
            for index in bad:
                transfer.have[index] = 0
            self._save(transfer, bitmap=True)
        transfer.marks.forget()
        transfer.boot = _boot_id()

    async def _finish(self, transfer: Transfer) -> bool:
        """All chunks held, each checked against the tree as it came (the tree's root is what the
        offer signs): the file gets its name at once, and is synced to disk after that, off the
        user's wait (:meth:`_sync_done`)."""
        transfer.state = "verifying"
        self._drop_sources(transfer)
        assert transfer.plan is not None
        os.truncate(transfer.part, transfer.offer.size)
        self._close_fds(transfer)
        folder = transfer.path.parent
        while True:  # a hard link never replaces a file that appeared meanwhile
            try:
                os.link(transfer.part, transfer.path)
                break
            except FileExistsError:
                transfer.path = folder / unique_name(transfer.path.name, lambda n: (folder / n).exists())
        transfer.part.unlink()
        transfer.state, transfer.synced = "done", False
        transfer.marks.forget()
        self._save(transfer, bitmap=True)
        self._report(transfer, final=True)
        log.info("files: %s done (%d bytes received for %d)", transfer.path, transfer.received, transfer.offer.size)
        self._spawn(self._sync_done(transfer))
        return True

    async def _sync_done(self, transfer: Transfer) -> None:
        """A finished download's last sync (fsync at the end), recorded once done.  Restored after a
        power cut that came before it: its file is checked against the tree first, and what does
        not match goes back to being fetched."""
        loop = asyncio.get_running_loop()
        try:
            if transfer.boot is None and transfer.leaves is not None:
                bad = await loop.run_in_executor(self._checker, _bad_chunks, transfer.path, transfer.offer,
                                                 transfer.leaves, transfer.marks.unsynced)
                transfer.marks.forget()
                if bad:
                    log.warning("files: %d chunks of %s were lost in a power cut; fetching them again", len(bad),
                                transfer.offer.name)
                    os.replace(transfer.path, transfer.part)
                    for index in bad:
                        transfer.have[index] = 0
                    transfer.state, transfer.synced, transfer.boot = "waiting", True, _boot_id()
                    self._save(transfer, bitmap=True)
                    self._start(transfer)
                    return
            await loop.run_in_executor(None, _sync_path, transfer.path)
        except OSError as exc:  # moved or deleted meanwhile: nothing of ours to sync
            log.info("files: cannot sync %s: %s", transfer.path, exc)
            return
        if transfer.state == "done":
            transfer.synced, transfer.boot = True, _boot_id()
            self._save(transfer)

    def _drop_sources(self, transfer: Transfer) -> None:
        if transfer.download is not None:
            transfer.download.stop()
        for stream in transfer.streams.values():
            stream.close()
        transfer.streams.clear()

    def _report(self, transfer: Transfer, final: bool = False) -> None:
        if self.progress.allow(transfer.key, clock.now(), final or transfer.state != "fetching"):
            if transfer.role == "download" and transfer.state == "fetching":
                self._mark(transfer)  # the bitmap claims at least what this report tells
                self._save(transfer)  # what was received so far, for the bound over every run
            self.listener(FileProgress(transfer.gid, format_mid(transfer.mid), transfer.state, transfer.held_bytes,
                                       transfer.offer.size))

    # -- serving -------------------------------------------------------------------------------

    def _is_member(self, gid: str, pid: str) -> bool:
        """Whether ``pid`` is a current member of ``gid``, a group this peer has joined."""
        record = self.core.gjlp.groups.get(gid)
        return record is not None and gid in self.core.joined and record.is_current(pid)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        stream = _Stream(reader, writer)
        client = None
        transfer = None
        upload = None
        peer = writer.get_extra_info("peername")
        handshake, evicted = self.handshakes.admit(str(peer[0]) if peer else "", clock.now())
        if evicted is not None and (gone := self._pending.pop(evicted, None)) is not None:
            gone.close()  # the oldest of a flood's connections gives way
        if handshake is None:
            self.handshakes_refused += 1
            stream.close()
            return
        self._pending[handshake] = stream
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):
                server = ServerHandshake(self.core.identity, os.urandom(32))
                kind, payload = await stream.read(MAX_HANDSHAKE_FRAME)
                challenge = server.hello(kind, payload, self._is_member)
                if challenge is None:
                    self.strangers_refused += 1  # a stranger gets nothing, not even a signature
                    return
                self.handshakes.named_member(handshake)
                stream.write(CHALLENGE, challenge)
                try:
                    hello = server.proven(*await stream.read(MAX_HANDSHAKE_FRAME))
                except NotProven:
                    self.handshakes_failed += 1
                    raise
            self._pending.pop(handshake, None)
            self.handshakes.release(handshake)
            handshake = None
            gid, pid = hello.gid, hello.pid
            stream.seal_in, stream.seal_out = server.seals(self.core.store.group_key(gid))
            try:
                transfer = self.transfers.get((gid, parse_mid(hello.mid)))
            except ValueError:
                transfer = None
            for _ in range(LEAVES_WAIT):  # a receiver that started at the same time: soon a holder
                if transfer is None or transfer.leaves is not None or transfer.state != "fetching":
                    break
                await asyncio.sleep(0.1)
            if transfer is None or transfer.leaves is None or transfer.state == "cancelled":
                transfer = None
                stream.write(NONE)
                await writer.drain()
                return
            upload, evicted = self.caps.acquire(pid, clock.now())
            if evicted is not None and (gone := self._uploading.pop(evicted, None)) is not None:
                gone.close()  # an idle connection, or one of a member holding many, gives way
            if upload is None:
                stream.write(BUSY)
                await writer.drain()
                return
            self._uploading[upload] = stream
            client = pid
            transfer.subscribers.add(stream)
            transfer.clients[pid] = transfer.clients.get(pid, 0) + 1
            if transfer.role == "offer" and transfer.askers is None:
                transfer.askers = FirstAskers(transfer.offer.chunks)
            if transfer.role == "download" and transfer.state == "fetching" and transfer.download is not None:
                # A receiver fetching it too: reached back at once, not at the next retry, so the two
                # split the offerer's chunks (a small file is done before that retry comes).
                transfer.download.reached_back(pid)
                if transfer.download.due_now:
                    transfer.wake.set()
            stream.write(HAVE, bytes(transfer.have))
            # A client must take what it asked for as fast as a source must send it (files.chunk_deadline):
            # one that asks and never reads holds no slot for longer.
            deadline = chunk_deadline(transfer.offer.chunk_size)
            while not self._closed:
                self.caps.touch(upload, clock.now(), serving=True)
                await asyncio.wait_for(writer.drain(), deadline)
                self.caps.touch(upload, clock.now())
                # A slot held asking nothing is closed after UPLOAD_IDLE (and gives way after UPLOAD_GIVES_WAY).
                kind, data = await asyncio.wait_for(stream.read(64), UPLOAD_IDLE)
                self.caps.touch(upload, clock.now(), serving=True)
                reply, index = answer(kind, data, transfer.have, transfer.askers, client,
                                      lambda pid: transfer.clients.get(pid, 0) > 0)
                if reply == HASHES:
                    hashes = b"".join(transfer.leaves)
                    stream.write(HASHES, hashes)
                    await asyncio.wait_for(writer.drain(), CHUNK_DEADLINE + len(hashes) / MIN_SOURCE_RATE)
                    continue
                assert index is not None
                if reply == CHUNK:
                    sent = await asyncio.wait_for(self._send_chunk(stream, transfer, index), deadline)
                    transfer.uploaded += sent  # not "+= await": other connections add meanwhile
                else:  # ELSEWHERE or MISSING
                    stream.write(reply, INDEX.pack(index))
        except (OSError, asyncio.IncompleteReadError, TransferError, asyncio.TimeoutError, ValueError,
                msgpack.ExtraData, struct.error) as exc:
            log.debug("files: serving: %s", exc)
        except Exception:
            if writer.is_closing():  # closed under it (a slot given way): it ends, as it should
                log.debug("files: serving a connection that gave way ended")
            else:  # a bug: this connection ends, the others go on
                log.exception("files: serving failed")
        finally:
            if handshake is not None:
                self._pending.pop(handshake, None)
                self.handshakes.release(handshake)
            if transfer is not None:
                transfer.subscribers.discard(stream)
            if upload is not None:
                self._uploading.pop(upload, None)
                self.caps.release(upload)
            if client is not None and transfer is not None:
                left = transfer.clients.get(client, 0) - 1
                if left > 0:
                    transfer.clients[client] = left
                else:
                    transfer.clients.pop(client, None)
            stream.close()

    async def _send_chunk(self, stream: _Stream, transfer: Transfer, index: int) -> int:
        """CHUNK for ``index``, a chunk held (or MISSING if its file is gone or changed); the bytes of
        chunk sent.  Unsealed, the chunk goes from
        the file to the socket by sendfile(2), never through this process's memory."""
        offer = transfer.offer
        path = transfer.part if transfer.role == "download" and transfer.state != "done" else transfer.path
        length, offset = offer.chunk_length(index), index * offer.chunk_size
        try:
            with open(path, "rb") as source:
                if os.fstat(source.fileno()).st_size < offset + length:
                    raise OSError(f"{path} is shorter than the offer")
                if stream.seal_out is not None:
                    stream.write(CHUNK, INDEX.pack(index), _pread(source.fileno(), length, offset))
                    return length
                stream.write_header(CHUNK, 4 + length)
                stream.writer.write(INDEX.pack(index))
                await stream.writer.drain()
                sent = await stream.send_file(source, offset, length)
                if sent != length:
                    raise TransferError(f"sent {sent} of a chunk's {length} bytes")
                stream.bytes_out += length
                return length
        except OSError as exc:  # gone or changed since: the receivers ask others
            log.info("files: cannot serve chunk %d of %s: %s", index, path, exc)
            stream.write(MISSING, INDEX.pack(index))
            return 0


def _folder_and_name(dest: str, name: str) -> tuple[Path, str]:
    """Where ``dest`` puts a file called ``name``: into it if it is a folder (or ends with a
    separator: one to make), else as that file name in its folder."""
    target = Path(dest).expanduser()
    if target.is_dir() or dest.endswith(("/", os.sep)):
        return target, name
    return target.parent, target.name


_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: never translate line ends


def _pwrite(fd: int, data: bytes | memoryview, offset: int) -> None:
    """``data`` at ``offset`` of ``fd``, whole.  Where os.pwrite is missing (Windows), a seek and a
    write: each caller's descriptor is its own, so no other write moves the offset between."""
    view = memoryview(data)
    while view:
        if _HAS_PWRITE:
            written = os.pwrite(fd, view, offset)
        else:
            os.lseek(fd, offset, os.SEEK_SET)
            written = os.write(fd, view)
        view, offset = view[written:], offset + written


def _pread(fd: int, length: int, offset: int) -> bytes:
    if _HAS_PWRITE:
        return os.pread(fd, length, offset)
    os.lseek(fd, offset, os.SEEK_SET)
    return os.read(fd, length)


_HAS_PWRITE = hasattr(os, "pwrite") and hasattr(os, "pread")


def _boot_id() -> str | None:
    """This boot of the system (Linux), or None where it cannot be told: a page cache written in
    the same boot is still there, whatever happened to the process that wrote it."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as source:
            return source.read().strip() or None
    except OSError:
        return None


def _sync_path(path: Path) -> None:
    """fsync ``path``'s data (fdatasync where the system has it).  Blocking (a worker thread)."""
    fd = os.open(path, os.O_RDONLY | _O_BINARY) if os.name != "nt" else os.open(path, os.O_RDWR | _O_BINARY)
    try:
        getattr(os, "fdatasync", os.fsync)(fd)
    finally:
        os.close(fd)


_WRITING = threading.Lock()
"""One chunk written at a time: two threads writing one file at once only spin on its lock in the
kernel (a tenth of a download's CPU), where this one sleeps."""


WRITE_PIECE = 32 * 1024
"""A chunk is written in pieces of this many bytes.  Larger writes let the page cache take its
memory in large blocks, and on a virtual machine whose host takes free memory back (free page
reporting) those blocks cost the kernel up to ten times as much to fill: 1 GiB written into
memory just freed took 2.0 CPU s in 1 MiB writes, 1.0-1.2 in 256 KiB, 0.3-0.5 in 32 KiB
(resources/docs/benchmarks.md, session 23)."""


def _write_chunk(data: memoryview, part: Path, offset: int) -> None:
    """A checked chunk at ``offset`` of ``part``, from the buffer it was received into (in
    :data:`WRITE_PIECE` pieces), never synced here (resume points and the end do that).  Blocking
    (a checker thread): the file is opened here, so no descriptor the loop may close is used."""
    fd = os.open(part, os.O_WRONLY | _O_BINARY)
    try:
        with _WRITING:
            for start in range(0, len(data), WRITE_PIECE):
                _pwrite(fd, data[start:start + WRITE_PIECE], offset + start)
    finally:
        os.close(fd)


def _check_and_write(data: memoryview, leaf: bytes, part: Path, offset: int, leaf_kind: str = "sha256") -> bytes:
    """The chunk's leaf hash (by ``leaf_kind``); the chunk is written at ``offset`` of ``part`` only
    if it is ``leaf``.  Blocking."""
    digest = leaf_hash(data, leaf_kind)
    if digest == leaf:
        _write_chunk(data, part, offset)
    return digest


def _bad_chunks(path: Path, offer: FileOffer, leaves: list[bytes], indices: list[int]) -> list[int]:
    """Which of chunks ``indices`` of ``path`` do not match their leaf (all of them if the file is
    gone).  Blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_BINARY)
    except FileNotFoundError:
        return list(indices)
    try:
        return [index for index in indices
                if offer.leaf_of(_pread(fd, offer.chunk_length(index), index * offer.chunk_size)) != leaves[index]]
    finally:
        os.close(fd)


__all__ = ["FileService", "Transfer", "offer_from_file", "HASH_BYTES"]
