"""Files shared into a thread, the protocol part: the offer, the hash tree, names that fit, the chunk
plan and its deadlines, and the slots (handshakes, uploads, downloads).

A file is offered by a message of its sender of the file offer kind (:mod:`middleware.kinds`),
whose payload is a JSON object (:class:`FileOffer`), so the offer is signed, repaired,
synced, stored and ordered like any message.  Members fetch the file in chunks
over TCP (:mod:`middleware.file_transfer`) from the offerer or any member holding
chunks; every chunk is checked against the hash tree whose root the offer carries
before it is written.

Sans-I/O: no sockets, no files, no clock.  What reads the disk or the network
hands bytes and ``now`` in.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import math
import unicodedata
from dataclasses import dataclass
from typing import Callable, Mapping

import blake3

from . import kinds
from .types import UsageError

FILE_MARK = "\U0001F4CE"  # 📎, before an offer's caption: the app ships its glyph (packaging/make_reaction_font.py)
MIN_CHUNK = 64 * 1024
"""The smallest chunk an offer may name: a million tiny chunks cannot be asked for."""
DEFAULT_CHUNK = 256 * 1024
MAX_CHUNK = 4 * 2**20
"""The largest: a chunk is held in memory (sealed: twice) per connection serving it."""
MAX_CHUNKS = 262_144
"""Chunks of one file at most: its hash list is at most 8 MiB, its bitmap 256 KiB."""
TARGET_CHUNKS = 256
"""The chunks ``send_file`` aims for: 256 KiB chunks up to 64 MiB, 4 MiB from 1 GiB up.  Each chunk
costs its sender a request, a sendfile(2) and its wake-ups, and its receiver a buffer's turn: 1 GiB
in 4 MiB chunks took the sender 0.25-0.33 CPU s against 0.36-0.49 in 1 MiB ones, and the receiver
0.82-1.27 against 1.11-1.87 (resources/docs/benchmarks.md, session 23)."""
MAX_OFFER_SIZE = MAX_CHUNK * MAX_CHUNKS  # 1 TiB: larger offers are refused as malformed
MAX_NAME = 255  # bytes of UTF-8, what most file systems allow
PART_SUFFIX = ".part"  # a download's name until it is whole: the name saved is shorter by this much
MAX_PATH = 260
"""Windows (without long paths switched on): a path of at most 259 UTF-16 code units and its NUL.
A download's folder, its name and :data:`PART_SUFFIX` must fit in that there."""
MAX_MIME = 127
DEFAULT_AUTO_DOWNLOAD = 10 * 2**20
DEFAULT_MAX_FILE_SIZE = 64 * 2**30
HASH_BYTES = 32
STRIPE = 16  # chunks (4 MiB of 256 KiB chunks) receivers fetching together split the offerer's uploads by
BAD_CHUNKS_TO_DROP = 3  # garbage chunks from one source before it is dropped for the transfer
CHUNK_DEADLINE = 3.0
"""Seconds a source has for the oldest chunk asked of it (from the request, or from its previous
chunk), plus the chunk's length at :data:`MIN_SOURCE_RATE`: later, its chunks go back to the
other sources (:meth:`ChunkPlan.stalled`).  Also the longest a source asked for chunks may
send no byte at all (:attr:`ChunkPlan.silence`): a member that claims every chunk and sends
none costs a download this long, whatever the chunks' size, not for ever."""
MIN_SOURCE_RATE = 256 * 1024
"""Bytes a second (2 Mbit/s): slower than this over a whole chunk, a source is taken for stalled,
and a receiver that takes a chunk slower is closed by the server.  Low enough for a weak Wi-Fi
link shared by a download's sources: a 256 KiB chunk is due within 4 s, a 4 MiB one within 19 s."""
LEAF_HASHES: dict[str, Callable[[bytes | memoryview], bytes]] = {
    "sha256": lambda chunk: hashlib.sha256(chunk).digest(),
    "blake3": lambda chunk: blake3.blake3(chunk).digest(),
}
"""How an offer's chunks are hashed into the tree's leaves, by the name its ``leaf`` field gives.
An offer without one is an earlier release's: SHA-256."""
OFFER_LEAF = "blake3"
"""The leaf hash of the offers this peer makes: a receiver checks every byte against its leaf on the
critical path, and BLAKE3 does that in about a quarter of SHA-256's CPU (0.25 against 1.06 CPU s
a GiB here, one thread, 1 MiB chunks)."""
_NODE = b"\x01"  # the tree's inner nodes are hashed with a prefix: a node is never taken for a leaf


class OfferError(ValueError):
    """A message that claims to be a file offer and is not a well-formed one."""


# -- the offer ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileOffer:
    name: str  # made safe (:func:`safe_name`)
    size: int
    mime: str
    sha256: str  # hex, of the whole file
    chunk_size: int
    root: str  # hex, of the hash tree over the chunks' leaf hashes (:func:`tree_root`)
    leaf: str = "sha256"  # how the chunks are hashed into leaves (:data:`LEAF_HASHES`)

    @property
    def chunks(self) -> int:
        return chunk_count(self.size, self.chunk_size)

    def chunk_length(self, index: int) -> int:
        return min(self.chunk_size, self.size - index * self.chunk_size)

    def leaf_of(self, chunk: bytes | memoryview) -> bytes:
        """The leaf a chunk of this file must hash to."""
        return LEAF_HASHES[self.leaf](chunk)

    def to_text(self) -> str:
        fields = {"name": self.name, "size": self.size, "mime": self.mime, "sha256": self.sha256,
                  "chunk": self.chunk_size, "root": self.root}
        if self.leaf != "sha256":  # an earlier release's offer stays byte for byte what it was
            fields["leaf"] = self.leaf
        return kinds.body(kinds.FILE_OFFER, json.dumps(fields, ensure_ascii=False, separators=(",", ":")))

    def to_json(self) -> dict:
        return {"name": self.name, "size": self.size, "mime": self.mime, "sha256": self.sha256,
                "chunk_size": self.chunk_size, "root": self.root}


def is_offer_text(text: str) -> bool:
    return kinds.kind_of(text) == kinds.FILE_OFFER


def parse_offer(text: str) -> FileOffer:
    """The offer a message's text (its body) carries; OfferError says what is wrong with it."""
    kind, payload = kinds.split(text)
    if kind != kinds.FILE_OFFER:
        raise OfferError("not a file offer")
    return parse_offer_payload(payload)


def parse_offer_payload(payload: str) -> FileOffer:
    """The offer a file offer's payload carries (the registry's parse, :mod:`middleware.kinds`);
    OfferError says what is wrong with it.  A hostile member's offer is bounded here: at most
    :data:`MAX_OFFER_SIZE`, chunks of a power of two from :data:`MIN_CHUNK` to :data:`MAX_CHUNK`,
    at most :data:`MAX_CHUNKS` of them."""
    try:
        fields = json.loads(payload)
    except (ValueError, RecursionError):
        raise OfferError("a file offer is a JSON object") from None
    if type(fields) is not dict:
        raise OfferError("a file offer is a JSON object")
    name, size, mime = fields.get("name"), fields.get("size"), fields.get("mime")
    sha256, chunk, root = fields.get("sha256"), fields.get("chunk"), fields.get("root")
    if type(name) is not str or type(mime) is not str or type(sha256) is not str or type(root) is not str \
            or type(size) is not int or type(chunk) is not int:
        raise OfferError("a file offer field is missing or has the wrong type")
    if not 0 <= size <= MAX_OFFER_SIZE:
        raise OfferError(f"a file offer's size is 0 to {MAX_OFFER_SIZE} bytes")
    if not MIN_CHUNK <= chunk <= MAX_CHUNK or chunk & (chunk - 1):
        raise OfferError(f"a file offer's chunk size is a power of two from {MIN_CHUNK} to {MAX_CHUNK}")
    if chunk_count(size, chunk) > MAX_CHUNKS:
        raise OfferError(f"a file offer has at most {MAX_CHUNKS} chunks")
    if not _is_hex_hash(sha256) or not _is_hex_hash(root):
        raise OfferError("a file offer's hashes are 64 lowercase hex digits")
    if len(mime) > MAX_MIME or not mime.isascii() or not mime.isprintable():
        raise OfferError("a file offer's MIME type is short printable ASCII")
    leaf = fields.get("leaf", "sha256")
    if type(leaf) is not str or leaf not in LEAF_HASHES:
        raise OfferError(f"a file offer's leaf hash is one of {', '.join(LEAF_HASHES)}")
    return FileOffer(safe_name(name), size, mime, sha256, chunk, root, leaf)


def _is_hex_hash(text: str) -> bool:
    return len(text) == 2 * HASH_BYTES and all(c in "0123456789abcdef" for c in text)


def chunk_deadline(chunk_size: int) -> float:
    """Seconds a source has for its oldest chunk asked (:data:`CHUNK_DEADLINE`)."""
    return CHUNK_DEADLINE + chunk_size / MIN_SOURCE_RATE


def chunk_count(size: int, chunk_size: int) -> int:
    return max(1, math.ceil(size / chunk_size))


def chunk_size_for(size: int) -> int:
    """The chunk size an offer of ``size`` bytes uses: 256 KiB, or the smallest power of two that
    keeps the chunks within :data:`TARGET_CHUNKS` (fewer, larger chunks cost less per byte), at
    most :data:`MAX_CHUNK`."""
    chunk = DEFAULT_CHUNK
    while chunk_count(size, chunk) > TARGET_CHUNKS and chunk < MAX_CHUNK:
        chunk *= 2
    return chunk


# -- the hash tree ----------------------------------------------------------------------


def leaf_hash(chunk: bytes | memoryview, leaf: str = "sha256") -> bytes:
    return LEAF_HASHES[leaf](chunk)


def tree_root(leaves: list[bytes]) -> bytes:
    """The root of the binary hash tree over the chunks' leaf hashes, in order.  A node is
    SHA-256(0x01 || left || right); an odd node at the end of a level moves up unchanged; one leaf
    is its own root."""
    level = list(leaves)
    if not level:
        raise ValueError("a tree has at least one leaf")
    while len(level) > 1:
        paired = [hashlib.sha256(_NODE + level[i] + level[i + 1]).digest() for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def split_leaves(data: bytes, offer: FileOffer) -> list[bytes]:
    """A hash list as it came from a holder -> the leaves, if it is the offer's (its root matches);
    OfferError otherwise (the holder is dropped)."""
    if len(data) != offer.chunks * HASH_BYTES:
        raise OfferError(f"a hash list of {len(data)} bytes; this file has {offer.chunks} chunks")
    leaves = [data[i:i + HASH_BYTES] for i in range(0, len(data), HASH_BYTES)]
    if tree_root(leaves).hex() != offer.root:
        raise OfferError("the hash list does not match the offer's root")
    return leaves


# -- names ------------------------------------------------------------------------------


_RESERVED = {"CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$",
             *(f"{port}{i}" for port in ("COM", "LPT") for i in [*range(1, 10), "\u00b9", "\u00b2", "\u00b3"])}
_UNSAFE = set('/\\:*?"<>|')


def safe_name(name: str) -> str:
    """A file name that stays in the folder it is written to: the last path component only, no
    control or format characters, no leading dots, no characters Windows refuses, at most
    :data:`MAX_NAME` bytes of UTF-8 (the extension kept); "file" when nothing is left."""
    name = unicodedata.normalize("NFC", name.replace("\\", "/").rsplit("/", 1)[-1])
    kept = "".join("_" if c in _UNSAFE else c for c in name
                   if unicodedata.category(c)[0] != "C" and c not in "\u2028\u2029")
    kept = kept.strip().lstrip(".").rstrip(". ")
    if not kept or kept.split(".")[0].rstrip(" ").upper() in _RESERVED:
        kept = "file" + ("" if not kept else "_" + kept)
    if len(kept.encode()) > MAX_NAME:
        stem, dot, ext = kept.rpartition(".")
        ext = dot + ext if dot and len(ext.encode()) <= 16 else ""
        stem = kept[:len(kept) - len(ext)] if ext else kept
        while len((stem + ext).encode()) > MAX_NAME:
            stem = stem[:-1]
        kept = stem + ext
    return kept


def name_fits(name: str, folder: str, windows: bool = False) -> bool:
    """Whether a download named ``name`` fits the file system in ``folder``, its partial name
    (``name`` + :data:`PART_SUFFIX`) too: at most :data:`MAX_NAME` bytes of UTF-8 (what Linux
    counts; never fewer than the UTF-16 code units Windows counts), and on ``windows`` the whole
    path within :data:`MAX_PATH`."""
    partial = name + PART_SUFFIX
    if len(partial.encode()) > MAX_NAME:
        return False
    if windows:
        path = folder.rstrip("\\/") + "\\" + partial
        return len(path.encode("utf-16-le")) // 2 < MAX_PATH
    return True


def unique_name(name: str, taken: Callable[[str], bool], fits: Callable[[str], bool] = lambda n: True) -> str:
    """``name`` (made safe), or ``stem (2).ext``, ``stem (3).ext``… the first one not ``taken``:
    a file is never overwritten.  Each is cut (its stem, from the end) until it ``fits``
    (:func:`name_fits`); UsageError if not even a one-character stem does."""
    name = safe_name(name)
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem or len(ext.encode()) > 16:
        stem, dot, ext = name, "", ""
    for n in range(1, 10_000):
        tail = (f" ({n})" if n > 1 else "") + dot + ext
        cut = stem
        while cut and not fits(cut + tail):
            cut = cut[:-1]
        if cut != stem:
            cut = cut.rstrip(". ")  # Windows drops a name's trailing dots and spaces
        if not cut:
            raise UsageError(f"no name for {name!r} fits the download folder (its path is too long)")
        candidate = cut + tail
        if not taken(candidate):
            return candidate
    raise UsageError(f"no free name for {name!r}: 10,000 files of that name already")


def check_fetch(offer: FileOffer, max_size: int, free_bytes: int) -> None:
    """Whether a download may start: UsageError says why not (size cap, free space)."""
    if offer.size > max_size:
        raise UsageError(f"file too large: {offer.name!r} is {offer.size:,} bytes; the limit is {max_size:,} "
                         "bytes (the max file size setting)")
    if offer.size > free_bytes:
        raise UsageError(f"not enough free space: {offer.name!r} needs {offer.size:,} bytes, "
                         f"{free_bytes:,} are free")


# -- how an offer reads ------------------------------------------------------------------


def human_size(size: int) -> str:
    """``size`` bytes in the units people read: "980 bytes", "1.5 KB", "12 MB" (powers of 1024)."""
    if size < 1024:
        return f"{size} byte{'s' if size != 1 else ''}"
    value = float(size)
    for unit in ("KB", "MB", "GB", "TB"):
        value /= 1024
        if value < 1024 or unit == "TB":
            break
    return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"


def offer_caption(offer: FileOffer) -> str:
    """How an offer reads wherever a message's text is shown: "📎 name · size · type"."""
    return f"{FILE_MARK} {offer.name} \u00b7 {human_size(offer.size)} \u00b7 {offer.mime}"


def shown_offer(text: str) -> str:
    """An offer message's text as it reads (:func:`offer_caption`); a malformed one says so, never its JSON."""
    return shown_offer_payload(kinds.payload_of(text))


def shown_offer_payload(payload: str) -> str:
    """An offer's payload as it reads (the registry's show, :mod:`middleware.kinds`)."""
    try:
        return offer_caption(parse_offer_payload(payload))
    except OfferError:
        return f"{FILE_MARK} a file offer that cannot be read"


def readable_text(text: str, names: Mapping[str, str]) -> str:
    """A message's text as people read it, in every view, banner and notification: a file offer as its
    caption (never its JSON), mention tokens as "@Name" (:func:`middleware.mentions.shown_text`): as its
    kind shows it (:func:`middleware.kinds.shown`)."""
    return kinds.shown(text, names)


def _offer_indexed(payload: str) -> str | None:
    # the file name alone: its JSON's hashes and field names would match queries and show in snippets
    try:
        return parse_offer_payload(payload).name
    except OfferError:
        return None  # shown as a broken offer, not as its text


def _offer_exported(payload: str) -> dict:
    try:
        return {"file": parse_offer_payload(payload).to_json()}
    except OfferError:
        return {}


kinds.implement(kinds.FILE_OFFER, parse=parse_offer_payload, indexed=_offer_indexed, exported=_offer_exported,
                shown=lambda payload, names: shown_offer_payload(payload))


# -- the chunk plan ----------------------------------------------------------------------


def _count(counts: dict[str, int], key: str, change: int) -> int:
    """``counts[key]`` changed by ``change``, the key gone once nothing is left; what is left."""
    left = counts.get(key, 0) + change
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
    return max(0, left)


class ChunkPlan:
    """Which chunks one download still needs, which source has which, and what to ask whom.

    Sources are the members connected for this file, each with the bitmap it announced and
    its updates.  A chunk is asked of one source at a time, lowest index first (so a download
    writes its file nearly in order).  The offerer (``spare``) is asked only for
    chunks no other connected source holds; receivers fetching at once (connected sources
    that hold part of the file, and this one) split the file into stripes of
    :data:`STRIPE` chunks (fewer for a small file, so that each has four stripes at least),
    each asking the offerer for its own stripes and the others for theirs, so they trade
    chunks and the offerer uploads each about once; one whose stripes have all come asks the
    offerer for the rest.  A source that serves a bad chunk is never asked
    for that chunk again, and after :data:`BAD_CHUNKS_TO_DROP` of them not at all.

    Every source that owes chunks has a deadline (``deadline`` seconds, :func:`chunk_deadline`,
    from its first request or its last chunk), and one awaited for bytes may be silent for at
    most ``silence`` seconds (since it was asked, or its last bytes, :meth:`heard_from`): past
    either the source is :meth:`stalled`, and the caller drops it, which gives its chunks (and
    the ones only it claimed) back to the others, the offerer included.  The silence bound is
    what finds a source that sends nothing when chunks are large: a 4 MiB chunk's deadline is 19 s.
    """

    def __init__(self, count: int, have: bytearray | None = None, spare: str | None = None, me: str = "",
                 deadline: float = math.inf, silence: float = math.inf) -> None:
        self.count = count
        self.deadline = deadline
        self.silence = silence
        self._owed: dict[str, int] = {}  # per source: chunks asked of it and not yet come
        self._due: dict[str, float] = {}  # per source that owes chunks: when its next one is due
        self._heard: dict[str, float] = {}  # per source that owes chunks: when it was last asked or heard
        self._awaited: dict[str, int] = {}  # per source: chunks asked of it whose bytes have not all come
        self.spare = spare
        self.me = me
        self.have = have if have is not None else bytearray(count)
        self._missing = [i for i in range(count) if not self.have[i]]  # in index order (in flight ones too)
        self.inflight: dict[int, str] = {}
        self.checking: set[int] = set()  # in flight, and come: being hashed (a second copy is not taken)
        self.sources: dict[str, bytearray] = {}
        self._holders = [0] * count  # connected sources holding each chunk
        self._refused: dict[int, set[str]] = {}  # chunk -> sources that served garbage for it
        self._elsewhere: dict[int, float] = {}  # chunk -> until when the offerer is not asked for it
        self.bad: dict[str, int] = {}
        self.dropped: set[str] = set()
        self.bad_chunks = 0

    @property
    def held(self) -> int:
        return self.count - len(self._missing)

    @property
    def complete(self) -> bool:
        return not self._missing

    def add_source(self, pid: str, bitmap: bytes) -> None:
        if pid in self.dropped:
            return
        self.drop_source(pid)
        own = bytearray(self.count)
        for i in range(min(self.count, len(bitmap))):
            if bitmap[i]:
                own[i] = 1
                self._holders[i] += 1
        self.sources[pid] = own

    def source_has(self, pid: str, index: int) -> None:
        own = self.sources.get(pid)
        if own is not None and 0 <= index < self.count and not own[index]:
            own[index] = 1
            self._holders[index] += 1

    def unask(self, index: int) -> None:
        """Chunk ``index`` is no longer asked of anyone (it came, or its source cannot give it)."""
        came = index in self.checking
        self.checking.discard(index)
        pid = self.inflight.pop(index, None)
        if pid is None:
            return
        if not came:
            _count(self._awaited, pid, -1)
        if not _count(self._owed, pid, -1):
            self._due.pop(pid, None)
            self._heard.pop(pid, None)

    def arrived(self, pid: str, now: float) -> None:
        """A chunk frame came from ``pid``: its next chunk is due a deadline from now."""
        if pid in self._due:
            self._due[pid] = now + self.deadline
            self._heard[pid] = now

    def heard_from(self, pid: str, now: float) -> None:
        """Bytes came from ``pid`` (part of a frame, or any frame): it is not silent."""
        if pid in self._heard:
            self._heard[pid] = now

    def came(self, index: int) -> None:
        """Chunk ``index``'s bytes have all come from the source it is in flight to: it is being
        checked (still in flight: a second copy is not taken)."""
        pid = self.inflight.get(index)
        if pid is not None and index not in self.checking:
            self.checking.add(index)
            _count(self._awaited, pid, -1)

    def stalled(self, now: float) -> list[str]:
        """The sources whose oldest chunk asked is overdue, or that have been silent too long while
        chunks were awaited of them: drop them (:meth:`drop_source`)."""
        return [pid for pid, due in self._due.items()
                if due <= now or (pid in self._awaited and self._heard[pid] + self.silence <= now)]

    def next_due(self) -> float | None:
        """When the next source's chunk falls due, or its silence runs out, if any is asked."""
        dues = list(self._due.values())
        if self.silence < math.inf:
            dues += [self._heard[pid] + self.silence for pid in self._awaited]  # each owes: it has a _heard
        return min(dues, default=None)

    def source_lacks(self, pid: str, index: int) -> bool:
        """``pid`` could not serve ``index`` after all (its copy is gone): ask others for it.
        Whether ``index`` had been asked of it (an answer to nothing asked frees no request slot)."""
        asked = self.inflight.get(index) == pid
        if asked:
            self.unask(index)
        own = self.sources.get(pid)
        if own is not None and 0 <= index < self.count and own[index]:
            own[index] = 0
            self._holders[index] -= 1
        return asked

    def drop_source(self, pid: str) -> None:
        """``pid`` disconnected: what it was asked for is free to ask of others."""
        own = self.sources.pop(pid, None)
        if own is not None:
            for i in range(self.count):
                if own[i]:
                    self._holders[i] -= 1
        for index in [i for i, source in self.inflight.items() if source == pid]:
            self.unask(index)

    def elsewhere(self, pid: str, index: int, until: float) -> bool:
        """The offerer ``pid`` said another receiver asked it for chunk ``index`` first: it is asked
        of whoever announces it, and of the offerer again only from ``until`` on.  False, changing
        nothing, unless ``index`` is in flight to ``pid`` and ``pid`` is the offerer: anyone else's
        ELSEWHERE, or one for a chunk not asked, would free request slots it never held."""
        if pid != self.spare or self.inflight.get(index) != pid:
            return False
        self.unask(index)
        if not self.have[index]:
            self._elsewhere[index] = until
        return True

    def pick(self, pid: str, limit: int, now: float = 0.0) -> list[int]:
        """Up to ``limit`` chunks to ask of ``pid`` now (marked in flight)."""
        own = self.sources.get(pid)
        if own is None or limit <= 0:
            return []
        spare = pid == self.spare
        others: list[tuple[str, bytearray]] = []
        rank, ways = 0, 1
        if spare:
            others = [(other, o) for other, o in self.sources.items() if other != pid]
            fetching = sorted([other for other, o in others if not all(o)] + [self.me])
            rank, ways = fetching.index(self.me), len(fetching)
        stripe = max(1, min(STRIPE, self.count // (4 * ways)))  # a small file: four stripes each at least
        picked: list[int] = []
        helping = own_left = False
        for index in self._missing:
            mine = not spare or (index // stripe) % ways == rank
            if self._askable(pid, own, index, others, now):
                if not mine:
                    helping = True
                    continue
                picked.append(index)
                if len(picked) == limit:
                    break
            elif mine:
                own_left = True  # in flight: the others' stripes wait until it has come
        if not picked and helping and not own_left:
            # This receiver's stripes are done: it helps with the others', from their far end,
            # where their owners (which go lowest index first) come last.
            for index in reversed(self._missing):
                if self._askable(pid, own, index, others, now):
                    picked.append(index)
                    if len(picked) == limit:
                        break
        for index in picked:
            self.inflight[index] = pid
        if picked:
            if pid not in self._owed:
                self._due[pid] = now + self.deadline
            if pid not in self._awaited:  # nothing was awaited of it: its silence counts from now
                self._heard[pid] = now
            _count(self._awaited, pid, len(picked))
            _count(self._owed, pid, len(picked))
        return picked

    def _askable(self, pid: str, own: bytearray, index: int, others: list[tuple[str, bytearray]],
                 now: float) -> bool:
        """Whether chunk ``index`` may be asked of ``pid`` now (``others``: the other sources, when
        ``pid`` is the offerer, which is asked only for chunks none of them holds)."""
        if index in self.inflight or not own[index]:
            return False
        if pid == self.spare and self._elsewhere.get(index, now) > now:
            return False
        refused = self._refused.get(index, ())
        if pid in refused:
            return False
        return not (others and self._holders[index] > 1
                    and any(o[index] and other not in refused for other, o in others))

    def received(self, pid: str, index: int, data: bytes | memoryview, leaves: list[bytes],
                 digest: bytes | None = None) -> bool:
        """A chunk from ``pid``: True if it checks against the tree's leaf and is new (write it,
        then call :meth:`stored`); False if it is garbage (dropped and counted) or not needed.
        ``digest``: its SHA-256, when already taken (off the event loop)."""
        if self.inflight.get(index) == pid:
            self.unask(index)
        if not 0 <= index < self.count or self.have[index]:
            return False
        if (digest if digest is not None else leaf_hash(data)) != leaves[index]:
            self.bad_chunks += 1
            self.bad[pid] = self.bad.get(pid, 0) + 1
            self._refused.setdefault(index, set()).add(pid)
            if self.bad[pid] >= BAD_CHUNKS_TO_DROP:
                self.dropped.add(pid)
                self.drop_source(pid)
            return False
        return True

    def stored(self, index: int) -> None:
        if not self.have[index]:
            self.have[index] = 1
            del self._missing[bisect.bisect_left(self._missing, index)]
            self._refused.pop(index, None)
            self._elsewhere.pop(index, None)

    def lost(self, index: int) -> None:
        """A chunk held but found bad on disk (the final check failed): fetch it again."""
        if self.have[index]:
            self.have[index] = 0
            bisect.insort(self._missing, index)


class FirstAskers:
    """The offerer's side of trading: which receiver asked it first for each chunk of its file.

    A receiver that asks for a chunk another receiver, still connected for this file, asked
    for first is told to get it there (ELSEWHERE), once per chunk: receivers that did not
    start together, and so did not split the file into stripes, still make the offerer
    upload each chunk about once.  Asked again, the offerer serves it (the first asker may
    have failed).
    """

    def __init__(self, count: int) -> None:
        self._first: list[str | None] = [None] * count
        self._sent_away: dict[str, bytearray] = {}  # per asker: the chunks it was sent away for

    def serve(self, pid: str, index: int, connected: Callable[[str], bool]) -> bool:
        """True: serve chunk ``index`` to ``pid``; False: tell it to get the chunk elsewhere."""
        if not 0 <= index < len(self._first):
            return True  # the caller answers MISSING
        first = self._first[index]
        if first is None or first == pid or not connected(first):
            self._first[index] = pid
            return True
        away = self._sent_away.setdefault(pid, bytearray(len(self._first)))
        if away[index]:
            return True
        away[index] = 1
        return False


# -- caps and progress --------------------------------------------------------------------


class Caps:
    """Upload slots: at most ``per_peer`` connections of one member at once and ``total`` in all.

    A slot is held by a proven member's connection while it fetches.  Holding one costs the
    holder: when all are taken, a newcomer takes the slot that has asked nothing for the
    longest, if that is ``idle`` seconds at least, from the member holding most slots; failing
    that, a member holding no slot takes one from a member holding two or more (the most, then
    the idlest).  So a few keys holding every slot, idle or busy, give way to a member with
    none; only as many keys as there are slots can keep one out.  Else the newcomer is refused
    (BUSY: it asks again later).  Sans-I/O: the caller passes ``now`` and closes what is evicted.
    """

    def __init__(self, per_peer: int, total: int, idle: float = math.inf) -> None:
        self.per_peer = per_peer
        self.total = total
        self.idle = idle
        self.active: dict[str, int] = {}
        self._slots: dict[int, list] = {}  # slot -> [pid, when it last asked for something, being served]
        self._next = 0
        self.refused = 0
        self.evicted = 0

    def acquire(self, pid: str, now: float = 0.0) -> tuple[int | None, int | None]:
        """(a slot for ``pid``, or None: refused; a slot taken from another, to close, or None)."""
        held = self.active.get(pid, 0)
        if held >= self.per_peer:
            self.refused += 1
            return None, None
        evicted = None
        if len(self._slots) >= self.total:
            evicted = self._victim(held, now)
            if evicted is None:
                self.refused += 1
                return None, None
            self.release(evicted)
            self.evicted += 1
        slot = self._next
        self._next += 1
        self._slots[slot] = [pid, now, False]
        self.active[pid] = held + 1
        return slot, evicted

    def _victim(self, held: int, now: float) -> int | None:
        def rank(item: tuple[int, list]) -> tuple[int, float]:
            return self.active[item[1][0]], -(now - item[1][1])

        idle = [item for item in self._slots.items() if not item[1][2] and now - item[1][1] >= self.idle]
        if idle:
            return max(idle, key=rank)[0]
        if held == 0:
            crowded = [item for item in self._slots.items() if self.active[item[1][0]] >= 2]
            if crowded:
                return max(crowded, key=rank)[0]
        return None

    def touch(self, slot: int, now: float, serving: bool = False) -> None:
        """``slot``'s connection asked for something at ``now``; ``serving``: it is being answered
        (never idle meanwhile: the caller bounds how long an answer may take)."""
        if slot in self._slots:
            self._slots[slot][1:] = [now, serving]

    def holds(self, slot: int) -> bool:
        return slot in self._slots

    def release(self, slot: int) -> None:
        held = self._slots.pop(slot, None)
        if held is None:
            return
        pid = held[0]
        left = self.active.get(pid, 0) - 1
        if left > 0:
            self.active[pid] = left
        else:
            self.active.pop(pid, None)


class HandshakeSlots:
    """Connections that have not proven their key yet: at most ``per_address`` from one source
    address and ``total`` in all.

    Nothing is known of a connection before its HELLO, so the address is what a flood shares.
    When all slots are taken, a newcomer takes the slot of the oldest connection from the
    address holding most, if that address would still hold as many as the newcomer's;
    connections that have named a current member (:meth:`named_member`) give way only after
    those that have not.  One address's flood thus never refuses another address, and a
    flood from many addresses only makes the slots turn over faster: a member's connection,
    the newest, names its member within milliseconds and then gives way last.  Sans-I/O: the
    caller passes ``now`` and closes what is evicted.
    """

    def __init__(self, per_address: int, total: int) -> None:
        self.per_address = per_address
        self.total = total
        self._slots: dict[int, list] = {}  # slot -> [address, since, named a member]
        self._count: dict[str, int] = {}
        self._next = 0
        self.refused = 0
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._slots)

    def admit(self, address: str, now: float) -> tuple[int | None, int | None]:
        """(a slot for a connection from ``address``, or None: close it; a slot to close, or None)."""
        held = self._count.get(address, 0)
        if held >= self.per_address:
            self.refused += 1
            return None, None
        evicted = None
        if len(self._slots) >= self.total:
            def rank(item: tuple[int, list]) -> tuple[bool, int, float]:
                return not item[1][2], self._count[item[1][0]], -item[1][1]

            slot, (victim, _, _) = max(self._slots.items(), key=rank)
            if victim == address or self._count[victim] < held + 1:
                self.refused += 1
                return None, None
            evicted = slot
            self.release(slot)
            self.evicted += 1
        slot = self._next
        self._next += 1
        self._slots[slot] = [address, now, False]
        self._count[address] = self._count.get(address, 0) + 1
        return slot, evicted

    def named_member(self, slot: int) -> None:
        if slot in self._slots:
            self._slots[slot][2] = True

    def release(self, slot: int) -> None:
        held = self._slots.pop(slot, None)
        if held is None:
            return
        left = self._count[held[0]] - 1
        if left:
            self._count[held[0]] = left
        else:
            del self._count[held[0]]


class SlotQueue:
    """Download slots: ``size`` downloads fetch at once; the others wait in line, those the user
    asked for before those fetched on their own (auto-download), each line first come first
    served.  Sans-I/O: keys in, keys granted out; the caller wakes whoever is granted."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.holding: set = set()
        self._asked: dict = {}  # insertion-ordered: the line of asked downloads
        self._auto: dict = {}

    @property
    def waiting(self) -> int:
        return len(self._asked) + len(self._auto)

    def request(self, key, auto: bool) -> bool:
        """True: ``key`` holds a slot now; False: it waits in line until :meth:`release` grants it."""
        if key in self.holding:
            return True
        if len(self.holding) < self.size and not self.waiting:
            self.holding.add(key)
            return True
        (self._auto if auto else self._asked)[key] = None
        return False

    def promote(self, key) -> None:
        """``key`` waited as an auto-download; the user has now asked for it."""
        if self._auto.pop(key, 1) is None:
            self._asked[key] = None

    def withdraw(self, key) -> list:
        """``key`` holds no slot and waits no more; what is granted in its place."""
        self._asked.pop(key, None)
        self._auto.pop(key, None)
        return self.release(key)

    def release(self, key) -> list:
        """``key`` gives its slot up: the keys granted one now, in order."""
        self.holding.discard(key)
        granted = []
        while len(self.holding) < self.size and self.waiting:
            line = self._asked if self._asked else self._auto
            first = next(iter(line))
            del line[first]
            self.holding.add(first)
            granted.append(first)
        return granted


class ProgressGate:
    """At most one progress report per ``interval`` seconds per transfer; the last always passes."""

    def __init__(self, interval: float = 0.25) -> None:
        self.interval = interval
        self._last: dict[object, float] = {}

    def allow(self, key: object, now: float, final: bool = False) -> bool:
        last = self._last.get(key)
        if final or last is None or now - last >= self.interval:
            self._last[key] = now
            return True
        return False
