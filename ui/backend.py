"""The GUI's seam with the middleware, typed: the calls it makes on a peer, and the events it hears.

:class:`Peer` declares every call the GUI makes on the middleware.  The real
``GroupManager`` satisfies it, and so does ``ui.memory_backend.MemoryManager``
(tests/ui/test_backend_seam.py has mypy check both); the bridge runs a call as
``backend.call(lambda peer: peer.send(gid, text, parent), on_result=...)``, so
a misspelt method or a wrong argument is a type error, not a string that fails
at run time.  Each such method builds its command (:mod:`middleware.commands`,
whose ``Calls`` both managers share) and runs it by ``execute``, the path the
JSON-RPC peer takes too; ``backend.execute(command, on_result=...)`` runs a
command as it is.  What the middleware tells its listener crosses the thread
boundary as the event values of :mod:`middleware.events`, as they are, and
the bridge emits each on the GUI thread; a call's outcome crosses back as a
:class:`CallFinished`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..middleware.addresses import Endpoint
from ..middleware.commands import Calls
from ..middleware.types import GroupView, Mid


@runtime_checkable
class Peer(Calls, Protocol):
    """What the GUI calls on the middleware; every call runs on the middleware's thread: the calls a
    command carries out, typed once in :class:`middleware.commands.Calls`, and these, which an
    adapter does itself (a key derived off the loop, files and the disk, the network waited for)."""

    async def create_group_async(self, desc: str, passphrase: str | None = None) -> str: ...

    def join_group(self, gid: str, passphrase: str | None = None) -> str: ...

    async def join_group_async(self, gid: str, passphrase: str | None = None) -> str: ...

    async def join_invite_async(self, text: str, passphrase: str | None = None) -> str: ...

    async def send_file(self, gid: str, path: str, parent: Mid | None = None) -> tuple[Mid, str]: ...

    def fetch_file(self, gid: str, mid: Mid, dest: str | None = None) -> dict: ...

    def cancel_file(self, gid: str, mid: Mid) -> dict: ...

    def file_list(self, gid: str) -> list[dict]: ...

    def export_log(self, path: str | Path, gid: str | None = None) -> int: ...

    async def find_invited_async(self, text: str) -> GroupView: ...

    def add_peer(self, address: str, found_by: str = "manual") -> Endpoint: ...

    async def add_peer_async(self, address: str, wait: float = ...) -> dict: ...


# -- what crosses back to the GUI thread besides the middleware's events (middleware.events) -----

@dataclass(frozen=True, slots=True)
class CallFinished:
    """A call's outcome, back from the middleware's thread."""

    token: int
    result: Any
    error: Exception | None
