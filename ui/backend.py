"""The GUI's seam with the middleware, typed: the calls it makes on a peer, and the events it hears.

:class:`Peer` declares every call the GUI makes on the middleware.  The real
``GroupManager`` satisfies it, and so does ``ui.memory_backend.MemoryManager``
(tests/ui/test_backend_seam.py has mypy check both); the bridge runs a call as
``backend.call(lambda peer: peer.send(gid, text, parent), on_result=...)``, so
a misspelt method or a wrong argument is a type error, not a string that fails
at run time.  What the middleware tells its listener crosses the thread
boundary as the event values of :mod:`middleware.events`, as they are, and
the bridge emits each on the GUI thread; a call's outcome crosses back as a
:class:`CallFinished`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

from ..middleware.addresses import Endpoint
from ..middleware.store_api import SearchHit
from ..middleware.types import ChatMessage, GroupView, Mid


@runtime_checkable
class Peer(Protocol):
    """What the GUI calls on the middleware; every call runs on the middleware's thread."""

    async def create_group_async(self, desc: str, passphrase: str | None = None) -> str: ...

    def join_group(self, gid: str, passphrase: str | None = None) -> str: ...

    async def join_group_async(self, gid: str, passphrase: str | None = None) -> str: ...

    def leave_group(self, gid: str) -> None: ...

    def set_name(self, name: str) -> None: ...

    def advertise(self) -> None: ...

    def send(self, gid: str, text: str, parent: Mid | None = None, mentions: Sequence[str] = ()) -> Mid: ...

    def mentions(self, limit: int = 50) -> list[ChatMessage]: ...

    def edit(self, gid: str, mid: Mid, text: str) -> Mid: ...

    def delete(self, gid: str, mid: Mid) -> Mid: ...

    def react(self, gid: str, mid: Mid, emoji: str, on: bool = True) -> Mid: ...

    def pin(self, gid: str, mid: Mid, on: bool = True) -> Mid: ...

    def set_topic(self, gid: str, text: str) -> Mid: ...

    def groups(self) -> list[GroupView]: ...

    def group(self, gid: str) -> GroupView: ...

    def history(self, gid: str) -> list[ChatMessage]: ...

    def pending(self, gid: str | None = None) -> int: ...

    def presence_of(self, gid: str) -> dict[str, str]: ...

    def read_marks(self, gid: str) -> list[tuple[int, int]] | None: ...

    def mark_read(self, gid: str, ranges: list[tuple[int, int]]) -> None: ...

    def export_log(self, path: str | Path, gid: str | None = None) -> int: ...

    def invite(self, gid: str) -> str: ...

    async def find_invited_async(self, text: str) -> GroupView: ...

    def add_peer(self, address: str, found_by: str = "manual") -> Endpoint: ...

    def peers(self) -> list[dict]: ...

    def reached_directly(self, gid: str) -> list[str]: ...

    def search(self, query: str, *, limit: int = 20, by_time: bool = False) -> list[tuple[SearchHit, Mid]]: ...


# -- what crosses back to the GUI thread besides the middleware's events (middleware.events) -----

@dataclass(frozen=True, slots=True)
class CallFinished:
    """A call's outcome, back from the middleware's thread."""

    token: int
    result: Any
    error: Exception | None
