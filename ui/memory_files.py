"""Files for the in-memory backend: the file service a GroupManager on the in-memory LAN is given
(its ``Parts.files``, in place of the TCP one), with the bytes moved when a test says so.

The offer is the real one (:func:`middleware.file_transfer.offer_from_file` hashes the file, the
peer's core posts it as a message), and a fetch is refused by the real
:func:`middleware.files.check_fetch` (size cap, free space) and named by the real
:func:`middleware.files.unique_name`.  What is not real is the transfer: the bytes of every file
offered on the LAN are kept here, and :meth:`MemoryFiles.advance` moves a download on by as many
bytes as a test asks, telling :class:`middleware.events.FileProgress` as the middleware does.  So a
GUI test sees every state and every byte count it chooses, with no sockets and no waiting.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..middleware.events import Event, FileProgress
from ..middleware.file_transfer import offer_from_file
from ..middleware.files import (DEFAULT_AUTO_DOWNLOAD, DEFAULT_MAX_FILE_SIZE, FileOffer, OfferError,
                                check_fetch, is_offer_text, name_fits, parse_offer, unique_name)
from ..middleware.peer_core import PeerCore
from ..middleware.types import ChatMessage, Mid, UsageError, format_mid


@dataclass
class _Transfer:
    gid: str
    mid: Mid
    offer: FileOffer
    role: str  # "offer" or "download"
    path: Path
    state: str
    bytes: int = 0
    error: str = ""
    auto: bool = False

    def to_json(self) -> dict:
        return {"gid": self.gid, "mid": format_mid(self.mid), **self.offer.to_json(), "role": self.role,
                "state": self.state, "bytes": self.bytes, "received": self.bytes if self.role == "download" else 0,
                "uploaded": 0, "holders": [self.mid[0]], "path": str(self.path), "error": self.error,
                "bad_chunks": 0, "auto": self.auto}


class MemoryFiles:
    """One in-memory peer's files; ``contents`` (shared by the LAN's peers) holds every offered file's bytes."""

    def __init__(self, core: PeerCore, listener: Callable[[Event], None], contents: dict[tuple[str, Mid], bytes],
                 download_dir: Path | None = None) -> None:
        self.core = core
        self.listener = listener
        self.contents = contents
        self.download_dir = download_dir or Path(tempfile.mkdtemp(prefix="m2mc-memory-downloads-"))
        self.auto_download = DEFAULT_AUTO_DOWNLOAD
        self.max_file_size = DEFAULT_MAX_FILE_SIZE
        self.free_bytes: int | None = None  # a test's stand-in for the disk's free space
        self.transfers: dict[tuple[str, Mid], _Transfer] = {}

    @staticmethod
    def readable(path: str) -> Path:
        """The file ``path`` names, as send_file takes it (UsageError if it is none)."""
        source = Path(path).expanduser()
        if not source.is_file():
            raise UsageError(f"not a file: {path}")
        return source

    # -- what GroupManager calls of its file service (middleware.file_transfer.FileService) --

    async def start(self, host: str, port: int) -> None:
        pass  # nothing to serve on: the bytes move by advance()

    async def listen_at(self, host: str, port: int) -> None:
        pass

    async def close(self) -> None:
        pass

    def stats(self) -> dict:
        return {}

    async def offer(self, gid: str, path: str, parent: Mid | None,
                    send_offer: Callable[[str, str, Mid | None], Mid]) -> tuple[Mid, str]:
        """Offer the file at ``path`` in ``gid``: its offer posted by ``send_offer``, its bytes kept."""
        source = self.readable(path)
        offer = offer_of_file(source)
        mid = send_offer(gid, offer.to_text(), parent)
        self.contents[(gid, mid)] = source.read_bytes()
        self.transfers[(gid, mid)] = _Transfer(gid, mid, offer, "offer", source.resolve(), "done", offer.size)
        return mid, offer.sha256

    def fetch_file(self, gid: str, mid: Mid, dest: str | None = None) -> dict:
        return self.fetch(gid, mid, dest)

    # -- the in-memory side ------------------------------------------------------------------

    def fetch(self, gid: str, mid: Mid, dest: str | None = None, auto: bool = False) -> dict:
        self.core.channel(gid)
        transfer = self.transfers.get((gid, mid))
        if transfer is not None:
            transfer.auto = transfer.auto and auto
            if transfer.state in ("failed", "cancelled"):
                transfer.state, transfer.error = "waiting", ""
                self._tell(transfer)
            return transfer.to_json()
        offer = self._offer_of(gid, mid)
        if mid[0] == self.core.pid:
            raise UsageError("this peer offered that file")
        folder = Path(dest).expanduser() if dest else self.download_dir
        folder.mkdir(parents=True, exist_ok=True)
        free = self.free_bytes if self.free_bytes is not None else shutil.disk_usage(folder).free
        check_fetch(offer, self.max_file_size, free)
        name = unique_name(offer.name, lambda n: (folder / n).exists()
                           or any(t.path == folder / n for t in self.transfers.values()),
                           lambda n: name_fits(n, str(folder)))
        transfer = _Transfer(gid, mid, offer, "download", folder / name, "waiting", auto=auto)
        self.transfers[(gid, mid)] = transfer
        self._tell(transfer)
        return transfer.to_json()

    def cancel(self, gid: str, mid: Mid) -> _Transfer:
        transfer = self.transfers.get((gid, mid))
        if transfer is None or transfer.role != "download":
            raise UsageError(f"no download of {format_mid(mid)} in this group")
        if transfer.state != "done":
            transfer.state, transfer.bytes = "cancelled", 0
            self._tell(transfer)
        return transfer

    def files(self, gid: str) -> list[dict]:
        self.core.known(gid)
        rows = {t.mid: t.to_json() for t in self.transfers.values() if t.gid == gid}
        for message in self.core.store.history(gid):
            if message.mid not in rows and is_offer_text(message.text):
                try:
                    offer = parse_offer(message.text)
                except OfferError:
                    continue
                rows[message.mid] = {"gid": gid, "mid": format_mid(message.mid), **offer.to_json(),
                                     "role": "offered", "state": "offered", "bytes": 0, "received": 0, "uploaded": 0,
                                     "holders": [message.mid[0]], "path": "", "error": "", "bad_chunks": 0,
                                     "auto": False}
        return list(rows.values())

    def delivered(self, gid: str, messages: list[ChatMessage]) -> None:
        """Offers up to the auto-download size are fetched on their own, as FileService.delivered does."""
        for message in messages:
            if not is_offer_text(message.text) or message.sender == self.core.pid:
                continue
            try:
                offer = parse_offer(message.text)
            except OfferError:
                continue
            if offer.size <= self.auto_download and (gid, message.mid) not in self.transfers:
                try:
                    self.fetch(gid, message.mid, auto=True)
                except (UsageError, OSError):
                    pass

    def advance(self, gid: str, mid: Mid, count: int | None = None, error: str = "") -> None:
        """The download of ``mid`` gets ``count`` more bytes (None: the rest, and it is done); ``error``:
        it fails with that message instead."""
        transfer = self.transfers[(gid, mid)]
        if error:
            transfer.state, transfer.error = "failed", error
            self._tell(transfer)
            return
        size = transfer.offer.size
        transfer.bytes = size if count is None else min(size, transfer.bytes + count)
        if transfer.bytes < size:
            transfer.state = "fetching"
        else:
            transfer.path.write_bytes(self.contents[(gid, mid)])
            transfer.state = "done"
        self._tell(transfer)

    def _offer_of(self, gid: str, mid: Mid) -> FileOffer:
        found = self.core.store.messages(gid, [mid])
        if not found or not is_offer_text(found[0].text):
            raise UsageError(f"no file offer {format_mid(mid)} in this group")
        try:
            return parse_offer(found[0].text)
        except OfferError as exc:
            raise UsageError(f"message {format_mid(mid)} is not a well-formed file offer: {exc}") from None

    def _tell(self, transfer: _Transfer) -> None:
        self.listener(FileProgress(transfer.gid, format_mid(transfer.mid), transfer.state, transfer.bytes,
                                   transfer.offer.size))


def offer_of_file(path: Path) -> FileOffer:
    """The offer of the file at ``path`` (hashed, as send_file does)."""
    return offer_from_file(path)[0]
