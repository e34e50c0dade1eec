"""Files shared into a thread, the protocol part: the offer, the hash tree, the chunk plan, the caps.

A file is offered by a chat message of its sender whose text is ``FILE_MARKER``
followed by a JSON object (:class:`FileOffer`), so the offer is signed, repaired,
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

from .mentions import shown_text
from .types import UsageError

FILE_MARKER = "\x00file1"
FILE_MARK = "\U0001F4CE"  # 📎, before an offer's caption: the app ships its glyph (packaging/make_reaction_font.py)
MIN_CHUNK = 64 * 1024
"""The smallest chunk an offer may name: a million tiny chunks cannot be asked for."""
DEFAULT_CHUNK = 256 * 1024
MAX_CHUNK = 4 * 2**20
"""The largest: a chunk is held in memory (sealed: twice) per connection serving it."""
MAX_CHUNKS = 262_144
"""Chunks of one file at most: its hash list is at most 8 MiB, its bitmap 256 KiB."""
TARGET_CHUNKS = 1024  # the chunks of a file up to 4 GiB (1 MiB chunks from 256 MiB up)
MAX_OFFER_SIZE = MAX_CHUNK * MAX_CHUNKS  # 1 TiB: larger offers are refused as malformed
MAX_NAME = 255  # bytes of UTF-8, what most file systems allow
MAX_MIME = 127
DEFAULT_AUTO_DOWNLOAD = 10 * 2**20
DEFAULT_MAX_FILE_SIZE = 64 * 2**30
HASH_BYTES = 32
STRIPE = 16  # chunks (4 MiB of 256 KiB chunks) receivers fetching together split the offerer's uploads by
BAD_CHUNKS_TO_DROP = 3  # garbage chunks from one source before it is dropped for the transfer
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
    root: str  # hex, of the hash tree over the chunks' SHA-256 (:func:`tree_root`)

    @property
    def chunks(self) -> int:
        return chunk_count(self.size, self.chunk_size)

    def chunk_length(self, index: int) -> int:
        return min(self.chunk_size, self.size - index * self.chunk_size)

    def to_text(self) -> str:
        fields = {"name": self.name, "size": self.size, "mime": self.mime, "sha256": self.sha256,
                  "chunk": self.chunk_size, "root": self.root}
        return FILE_MARKER + json.dumps(fields, ensure_ascii=False, separators=(",", ":"))

    def to_json(self) -> dict:
        return {"name": self.name, "size": self.size, "mime": self.mime, "sha256": self.sha256,
                "chunk_size": self.chunk_size, "root": self.root}


def is_offer_text(text: str) -> bool:
    return text.startswith(FILE_MARKER)


def parse_offer(text: str) -> FileOffer:
    """The offer a message's text carries; OfferError says what is wrong with it.  A hostile
    member's offer is bounded here: at most :data:`MAX_OFFER_SIZE`, chunks of a power of two
    from :data:`MIN_CHUNK` to :data:`MAX_CHUNK`, at most :data:`MAX_CHUNKS` of them."""
    if not is_offer_text(text):
        raise OfferError("not a file offer")
    try:
        fields = json.loads(text[len(FILE_MARKER):])
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
    return FileOffer(safe_name(name), size, mime, sha256, chunk, root)


def offer_json(text: str) -> dict | None:
    """A message text's offer as JSON-RPC's message objects and the analytics export show it
    (``file``), or None when the text is no valid offer."""
    if not is_offer_text(text):
        return None
    try:
        return parse_offer(text).to_json()
    except OfferError:
        return None


def _is_hex_hash(text: str) -> bool:
    return len(text) == 2 * HASH_BYTES and all(c in "0123456789abcdef" for c in text)


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


def leaf_hash(chunk: bytes | memoryview) -> bytes:
    return hashlib.sha256(chunk).digest()


def tree_root(leaves: list[bytes]) -> bytes:
    """The root of the binary hash tree over the chunks' SHA-256 (the leaves, in order).  A node is
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


_RESERVED = {"CON", "PRN", "AUX", "NUL", *(f"COM{i}" for i in range(1, 10)), *(f"LPT{i}" for i in range(1, 10))}
_UNSAFE = set('/\\:*?"<>|')


def safe_name(name: str) -> str:
    """A file name that stays in the folder it is written to: the last path component only, no
    control or format characters, no leading dots, no characters Windows refuses, at most
    :data:`MAX_NAME` bytes of UTF-8 (the extension kept); "file" when nothing is left."""
    name = unicodedata.normalize("NFC", name.replace("\\", "/").rsplit("/", 1)[-1])
    kept = "".join("_" if c in _UNSAFE else c for c in name
                   if unicodedata.category(c)[0] != "C" and c not in "\u2028\u2029")
    kept = kept.strip().lstrip(".").rstrip(". ")
    if not kept or kept.split(".")[0].upper() in _RESERVED:
        kept = "file" + ("" if not kept else "_" + kept)
    if len(kept.encode()) > MAX_NAME:
        stem, dot, ext = kept.rpartition(".")
        ext = dot + ext if dot and len(ext.encode()) <= 16 else ""
        stem = kept[:len(kept) - len(ext)] if ext else kept
        while len((stem + ext).encode()) > MAX_NAME:
            stem = stem[:-1]
        kept = stem + ext
    return kept


def unique_name(name: str, taken: Callable[[str], bool]) -> str:
    """``name`` (made safe), or ``stem (2).ext``, ``stem (3).ext``… the first one not ``taken``:
    a file is never overwritten."""
    name = safe_name(name)
    if not taken(name):
        return name
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem:
        stem, dot, ext = name, "", ""
    for n in range(2, 10_000):
        candidate = safe_name(f"{stem} ({n}){dot}{ext}")
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
    try:
        return offer_caption(parse_offer(text))
    except OfferError:
        return f"{FILE_MARK} a file offer that cannot be read"


def readable_text(text: str, names: Mapping[str, str]) -> str:
    """A message's text as people read it, in every view, banner and notification: a file offer as its
    caption (never its JSON), mention tokens as "@Name" (:func:`middleware.mentions.shown_text`)."""
    return shown_offer(text) if is_offer_text(text) else shown_text(text, names)


# -- the chunk plan ----------------------------------------------------------------------


class ChunkPlan:
    """Which chunks one download still needs, which source has which, and what to ask whom.

    Sources are the members connected for this file, each with the bitmap it announced and
    its updates.  A chunk is asked of one source at a time, lowest index first (so the whole
    file's hash keeps up with the download).  The offerer (``spare``) is asked only for
    chunks no other connected source holds; receivers fetching at once (connected sources
    that hold part of the file, and this one) split the file into stripes of
    :data:`STRIPE` chunks (fewer for a small file, so that each has four stripes at least),
    each asking the offerer for its own stripes and the others for theirs, so they trade
    chunks and the offerer uploads each about once; one whose stripes have all come asks the
    offerer for the rest.  A source that serves a bad chunk is never asked
    for that chunk again, and after :data:`BAD_CHUNKS_TO_DROP` of them not at all.
    """

    def __init__(self, count: int, have: bytearray | None = None, spare: str | None = None, me: str = "") -> None:
        self.count = count
        self.spare = spare
        self.me = me
        self.have = have if have is not None else bytearray(count)
        self._missing = [i for i in range(count) if not self.have[i]]  # in index order (in flight ones too)
        self.inflight: dict[int, str] = {}
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

    def source_lacks(self, pid: str, index: int) -> bool:
        """``pid`` could not serve ``index`` after all (its copy is gone): ask others for it.
        Whether ``index`` had been asked of it (an answer to nothing asked frees no request slot)."""
        asked = self.inflight.get(index) == pid
        if asked:
            del self.inflight[index]
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
            del self.inflight[index]

    def elsewhere(self, pid: str, index: int, until: float) -> bool:
        """The offerer ``pid`` said another receiver asked it for chunk ``index`` first: it is asked
        of whoever announces it, and of the offerer again only from ``until`` on.  False, changing
        nothing, unless ``index`` is in flight to ``pid`` and ``pid`` is the offerer: anyone else's
        ELSEWHERE, or one for a chunk not asked, would free request slots it never held."""
        if pid != self.spare or self.inflight.get(index) != pid:
            return False
        del self.inflight[index]
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
            del self.inflight[index]
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
    """Concurrent uploads per member and in all: a member asking more waits (is refused)."""

    def __init__(self, per_peer: int, total: int) -> None:
        self.per_peer = per_peer
        self.total = total
        self.active: dict[str, int] = {}
        self.refused = 0

    def acquire(self, pid: str) -> bool:
        if self.active.get(pid, 0) >= self.per_peer or sum(self.active.values()) >= self.total:
            self.refused += 1
            return False
        self.active[pid] = self.active.get(pid, 0) + 1
        return True

    def release(self, pid: str) -> None:
        left = self.active.get(pid, 0) - 1
        if left > 0:
            self.active[pid] = left
        else:
            self.active.pop(pid, None)


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
