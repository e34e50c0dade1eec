"""What an application asks of the middleware, as values: one frozen dataclass per public call.

Events (:mod:`middleware.events`) are what the middleware tells; commands are
what it is told.  Each call is one dataclass here, named in the imperative,
whose fields are the call's typed arguments.  :meth:`PeerCore.execute
<middleware.peer_core.PeerCore.execute>` runs a :data:`CoreCommand` with ``now``
(no clock is read there); an adapter runs everything else, the
:data:`AdapterCommand` calls that need what a core does not do (deriving a key
off the loop, files on disk and TCP, waiting for the network).
``GroupManager.execute`` and ``MemoryManager.execute`` take any
:data:`Command` (the adapter's own by :func:`run_on_adapter`); the JSON-RPC peer (``app/peer.py``) builds one from a request's
params, checked against the fields' types (and their :class:`Between` and
:class:`IsoTime` marks), and :class:`Calls` gives the GUI typed methods that
build them.

A :class:`Query` only reads: an adapter commits what was delivered first, so it
is seen.  An :class:`Action` changes something: an adapter commits and sends it
after (on the next loop turn), or first as well when :attr:`Action.flush_first`
says what was just delivered counts (an operation names the last message it saw).

A new call is one dataclass here (marked :func:`method` if scripts call it over
JSON-RPC, with its :class:`Calls` method if the GUI makes it), its arm in
``PeerCore.execute``, and a test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, Protocol, Sequence

from .addresses import ANSWER_WAIT
from .mentions import DEFAULT_MENTIONS_LISTED, MAX_MENTIONS_LISTED
from .types import Mid, UsageError, format_mid, iso_millis

if TYPE_CHECKING:
    from .store_api import SearchHit, StoredThread
    from .types import ChatMessage, ConversationView, DirectMessage, GroupView, Notice

MAX_SEARCH_RESULTS = 200
MAX_HISTORY_PAGE = 1_000
DEFAULT_HISTORY_PAGE = 50
LARGEST = 2**62  # past any order or count a store holds (SQLite's INTEGER is 64-bit)


@dataclass(frozen=True, slots=True)
class Between:
    """A number field's bounds, inclusive (``Annotated[int, Between(1, 200)]``)."""

    low: float
    high: float


@dataclass(frozen=True, slots=True)
class IsoTime:
    """A time field given as an ISO-8601 string (``2026-01-31T09:00:00Z``), held as ms since the epoch."""


METHODS: dict[str, type] = {}
"""m2mc-peer's JSON-RPC methods (``app/peer.py``), each a command marked :func:`method`, by name."""


def method(command: type) -> type:
    """Marks ``command`` as one of m2mc-peer's JSON-RPC methods, named in snake case (``SetRole``:
    ``set_role``); its params are its fields.  A command not marked is the GUI's only."""
    name = re.sub(r"(?<!^)(?=[A-Z])", "_", command.__name__).lower()
    METHODS[name] = command
    return command


class Query:
    """A call that only reads: what was delivered so far is committed first, so it is seen."""

    __slots__ = ()
    flush_first: ClassVar[bool] = True
    answers: ClassVar[tuple[str, ...]] = ()
    """The names of what the call answers when it is one value or a tuple of them (JSON-RPC's keys)."""


class Action:
    """A call that changes something: committed and sent after it (on the adapter's next flush)."""

    __slots__ = ()
    flush_first: ClassVar[bool] = False
    answers: ClassVar[tuple[str, ...]] = ()


# -- this peer ----------------------------------------------------------------------------------

@method
@dataclass(frozen=True, slots=True)
class Whoami(Query):
    """This peer's pid and display name."""


@dataclass(frozen=True, slots=True)
class SetName(Action):
    """A new display name, kept and re-announced (a new signed member record) in every joined group."""

    name: str


@method
@dataclass(frozen=True, slots=True)
class Stats(Query):
    """The counters: the core's, the transport's and the file service's."""


@method
@dataclass(frozen=True, slots=True)
class Network(Query):
    """Whether this peer is on the network: state, interface, address and reason."""


@method
@dataclass(frozen=True, slots=True)
class Shutdown(Action):
    """Stop the application cleanly (an application's own call: closing is not leaving)."""


# -- groups -------------------------------------------------------------------------------------

@method
@dataclass(frozen=True, slots=True)
class CreateGroup(Action):
    """A new group, described by ``desc``; private with a passphrase (its key derived off the loop)."""

    desc: str
    passphrase: str | None = None
    answers: ClassVar[tuple[str, ...]] = ("gid",)


@method
@dataclass(frozen=True, slots=True)
class JoinGroup(Action):
    """Join a known, verified group by ``gid``, or the group an ``invite`` link names (its peers probed
    first; with a one-time secret, admitted by a member instead of by the passphrase)."""

    gid: str | None = None
    invite: str | None = None
    passphrase: str | None = None
    answers: ClassVar[tuple[str, ...]] = ("gid",)

    def __post_init__(self) -> None:
        if (self.gid is None) == (self.invite is None):
            raise ValueError("missing parameter 'gid' or 'invite' (give one of them)")


@method
@dataclass(frozen=True, slots=True)
class LeaveGroup(Action):
    """Leave a joined group (its history stays readable here)."""

    gid: str


@method
@dataclass(frozen=True, slots=True)
class ListGroups(Query):
    """Every known group's view."""


@dataclass(frozen=True, slots=True)
class Group(Query):
    """One known group's view."""

    gid: str


@method
@dataclass(frozen=True, slots=True)
class Invite(Action):
    """The invite link for ``gid`` (with a one-time secret, stored, for a private group that re-keyed)."""

    gid: str
    answers: ClassVar[tuple[str, ...]] = ("invite",)


@method
@dataclass(frozen=True, slots=True)
class SetRole(Action):
    """The owner makes ``pid`` an admin (``role`` "admin") or takes it back ("member")."""

    gid: str
    pid: str
    role: str


@method
@dataclass(frozen=True, slots=True)
class SetAdminsOnly(Action):
    """The owner's setting: while on, only the owner's and admins' pins and topic count."""

    gid: str
    on: bool = True


@method
@dataclass(frozen=True, slots=True)
class RemoveMember(Action):
    """The owner or an admin removes ``pid``; a private group re-keys."""

    gid: str
    pid: str


@method
@dataclass(frozen=True, slots=True)
class Presence(Query):
    """Each current member's presence in ``gid``: "online", "away" or "offline"."""

    gid: str


@dataclass(frozen=True, slots=True)
class ReachedDirectly(Query):
    """The members of ``gid`` reached by unicast (multicast does not join them to this peer)."""

    gid: str


@dataclass(frozen=True, slots=True)
class Pending(Query):
    """Messages held back (in ``gid``, or everywhere), waiting for the message they answer."""

    gid: str | None = None


# -- peers --------------------------------------------------------------------------------------

@method
@dataclass(frozen=True, slots=True)
class Advertise(Action):
    """Ask every peer on the LAN for the groups it knows (a GJLP advertisement)."""


@method
@dataclass(frozen=True, slots=True)
class AddPeer(Action):
    """A peer's ``host:port``: probed, answered once the peer there proves itself, within ``wait`` seconds."""

    address: str
    wait: Annotated[float, Between(0, 60)] = ANSWER_WAIT


@method
@dataclass(frozen=True, slots=True)
class Peers(Query):
    """Every peer known by endpoint or heard by multicast lately."""


# -- messages and operations --------------------------------------------------------------------

@method
@dataclass(frozen=True, slots=True)
class Send(Action):
    """A message in ``gid`` (a reply to ``parent``); each of ``mentions`` whose "@Name" is in ``text``
    is mentioned.  Stored and sent by the next flush, or taken back if it cannot be stored."""

    gid: str
    text: str
    parent: Mid | None = None
    mentions: tuple[str, ...] = ()
    answers: ClassVar[tuple[str, ...]] = ("mid",)


@method
@dataclass(frozen=True, slots=True)
class Edit(Action):
    """Replace the text of our own message ``mid``."""

    gid: str
    mid: Mid
    text: str
    flush_first: ClassVar[bool] = True
    answers: ClassVar[tuple[str, ...]] = ("mid",)


@method
@dataclass(frozen=True, slots=True)
class Delete(Action):
    """Delete our own message ``mid`` (the owner or an admin: anyone's); its place and replies stay."""

    gid: str
    mid: Mid
    flush_first: ClassVar[bool] = True
    answers: ClassVar[tuple[str, ...]] = ("mid",)


@method
@dataclass(frozen=True, slots=True)
class React(Action):
    """Add (``on``) or take back a reaction ``emoji`` to ``mid``."""

    gid: str
    mid: Mid
    emoji: str
    on: bool = True
    flush_first: ClassVar[bool] = True
    answers: ClassVar[tuple[str, ...]] = ("mid",)


@method
@dataclass(frozen=True, slots=True)
class Pin(Action):
    """Pin (``on``) or unpin ``mid``."""

    gid: str
    mid: Mid
    on: bool = True
    flush_first: ClassVar[bool] = True
    answers: ClassVar[tuple[str, ...]] = ("mid",)


@method
@dataclass(frozen=True, slots=True)
class SetTopic(Action):
    """The group's topic (``""`` clears it)."""

    gid: str
    text: str
    flush_first: ClassVar[bool] = True
    answers: ClassVar[tuple[str, ...]] = ("mid",)


@dataclass(frozen=True, slots=True)
class Topic(Query):
    """``(topic, pid of who set it)``; ``("", "")`` if none."""

    gid: str


@dataclass(frozen=True, slots=True)
class Pinned(Query):
    """The group's pinned messages."""

    gid: str


# -- reading ------------------------------------------------------------------------------------

@method
@dataclass(frozen=True, slots=True)
class History(Query):
    """The group's delivered messages in this peer's delivery order: all of them, or with any of
    ``before``, ``after`` or ``limit``, one page (the first ``limit`` above ``after``, else the last
    below ``before``, ``limit`` defaulting to 50)."""

    gid: str
    before: Annotated[int | None, Between(0, LARGEST)] = None
    after: Annotated[int | None, Between(0, LARGEST)] = None
    limit: Annotated[int | None, Between(1, MAX_HISTORY_PAGE)] = None

    @property
    def paged(self) -> bool:
        return not (self.before is None and self.after is None and self.limit is None)


@dataclass(frozen=True, slots=True)
class MessageCount(Query):
    """How many messages the store holds of ``gid`` (operations included)."""

    gid: str


@dataclass(frozen=True, slots=True)
class HistoryAround(Query):
    """Up to ``limit`` messages around ``mid``, in delivery order."""

    gid: str
    mid: Mid
    limit: int = 50


@dataclass(frozen=True, slots=True)
class Messages(Query):
    """The messages ``mids`` of ``gid`` that are stored, as they are now."""

    gid: str
    mids: tuple[Mid, ...]


@dataclass(frozen=True, slots=True)
class Notices(Query):
    """The group's latest topic and pin changes, to show among its messages."""

    gid: str


@method
@dataclass(frozen=True, slots=True)
class Thread(Query):
    """The message ``root`` and every answer under it, in delivery order."""

    gid: str
    root: Mid


@dataclass(frozen=True, slots=True)
class ThreadRoot(Query):
    """The first message of the thread ``mid`` is in."""

    gid: str
    mid: Mid


@dataclass(frozen=True, slots=True)
class Threads(Query):
    """The group's threads, latest first: up to ``limit`` whose latest message is below ``before``."""

    gid: str
    before: int | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class UnreadBefore(Query):
    """How many unread messages of ``gid`` are below order ``below``."""

    gid: str
    below: int


@dataclass(frozen=True, slots=True)
class ReadMarks(Query):
    """The delivery orders read in ``gid`` as inclusive ranges; None if never marked."""

    gid: str


@dataclass(frozen=True, slots=True)
class MarkRead(Action):
    """Add delivery-order ranges (inclusive) to what was read in ``gid`` (kept across restarts)."""

    gid: str
    ranges: tuple[tuple[int, int], ...]


@method
@dataclass(frozen=True, slots=True)
class Mentions(Query):
    """The messages that mention this peer, newest first, across groups."""

    limit: Annotated[int, Between(1, MAX_MENTIONS_LISTED)] = DEFAULT_MENTIONS_LISTED


@method
@dataclass(frozen=True, slots=True)
class Search(Query):
    """Messages whose current text matches ``query`` (FTS5 syntax), in every group (and, with
    ``direct``, every direct conversation), or in the one group or conversation ``gid`` names;
    by ``sender``, sent from ``since`` to ``until``; by relevance or newest first (``order``), a page
    of ``limit`` from ``cursor`` (the previous page's)."""

    query: str
    gid: str | None = None
    sender: str | None = None
    since: Annotated[int | None, IsoTime()] = None
    until: Annotated[int | None, IsoTime()] = None
    limit: Annotated[int, Between(1, MAX_SEARCH_RESULTS)] = 20
    cursor: str | None = None
    order: Literal["relevance", "time"] = "relevance"
    direct: bool = True

    def __post_init__(self) -> None:
        if not self.query.strip():
            raise ValueError("empty search query: give at least one word")
        if self.cursor is not None and not (self.cursor.isascii() and self.cursor.isdigit() and len(self.cursor) <= 9):
            raise ValueError("invalid parameter 'cursor' (pass back the 'cursor' of a previous answer)")


@dataclass(frozen=True, slots=True)
class SearchResults:
    """What a :class:`Search` found: each hit with its thread's root, and the next page's cursor (None: no more)."""

    hits: list[tuple[SearchHit, Mid]]
    cursor: str | None

    def to_json(self) -> dict:
        return {"results": [{"gid": hit.gid, "mid": format_mid(hit.mid), "sender": hit.mid[0],
                             "sent_at": iso_millis(hit.sent_at), "order": hit.order, "snippet": hit.snippet,
                             "thread_root": format_mid(root),
                             **({"direct": True, "peer": hit.peer} if hit.peer is not None else {})}
                            for hit, root in self.hits],
                "cursor": self.cursor}


@method
@dataclass(frozen=True, slots=True)
class ExportLog(Action):
    """Write delivered messages to ``path`` as JSON Lines: ``gid``'s, else every joined group's, and
    with ``direct`` the direct conversations too."""

    path: str
    gid: str | None = None
    direct: bool = False
    answers: ClassVar[tuple[str, ...]] = ("path", "messages")


# -- direct messages ----------------------------------------------------------------------------

@method
@dataclass(frozen=True, slots=True)
class SendDirect(Action):
    """A direct message to ``pid`` (a member of a group this peer is in), a reply to ``parent``."""

    pid: str
    text: str
    parent: Mid | None = None
    answers: ClassVar[tuple[str, ...]] = ("mid",)


@method
@dataclass(frozen=True, slots=True)
class DirectHistory(Query):
    """The conversation with ``pid``: the newest ``limit`` messages (all without one) below order ``before``."""

    pid: str
    before: Annotated[int | None, Between(0, LARGEST)] = None
    limit: Annotated[int | None, Between(0, LARGEST)] = None


@method
@dataclass(frozen=True, slots=True)
class ListConversations(Query):
    """Every direct conversation with a message, the most recent first."""


@method
@dataclass(frozen=True, slots=True)
class MarkDirectRead(Action):
    """The conversation with ``pid`` is read up to ``mid``; with read receipts on, ``pid`` is told."""

    pid: str
    mid: Mid
    flush_first: ClassVar[bool] = True


@method
@dataclass(frozen=True, slots=True)
class ReadReceipts(Action):
    """Whether marking read tells the sender (kept across restarts)."""

    on: bool
    answers: ClassVar[tuple[str, ...]] = ("on",)


# -- files --------------------------------------------------------------------------------------

@method
@dataclass(frozen=True, slots=True)
class SendFile(Action):
    """Offer the file at ``path`` in ``gid`` (a reply to ``parent``): hashed, then its offer posted."""

    gid: str
    path: str
    parent: Mid | None = None
    answers: ClassVar[tuple[str, ...]] = ("mid", "sha256")


@method
@dataclass(frozen=True, slots=True)
class FetchFile(Action):
    """Fetch (or resume fetching) the file offered by ``mid`` to ``dest`` (a folder or a file name)."""

    gid: str
    mid: Mid
    dest: str | None = None


@method
@dataclass(frozen=True, slots=True)
class CancelFile(Action):
    """Stop fetching the file offered by ``mid`` (the partial file is deleted)."""

    gid: str
    mid: Mid


@method
@dataclass(frozen=True, slots=True)
class Files(Query):
    """The files offered in ``gid``, each with its state here."""

    gid: str


CoreCommand = (Whoami | SetName | ListGroups | Group | Invite | LeaveGroup | SetRole | SetAdminsOnly | RemoveMember
               | Presence | ReachedDirectly | Pending | Advertise | Peers | Send | Edit | Delete | React | Pin
               | SetTopic | Topic | Pinned | History | MessageCount | HistoryAround | Messages | Notices | Thread
               | ThreadRoot | Threads | UnreadBefore | ReadMarks | MarkRead | Mentions | Search | SendDirect
               | DirectHistory | ListConversations | MarkDirectRead | ReadReceipts)
"""What :meth:`PeerCore.execute <middleware.peer_core.PeerCore.execute>` runs."""

AdapterCommand = (CreateGroup | JoinGroup | AddPeer | Stats | Network | Shutdown | ExportLog | SendFile | FetchFile
                  | CancelFile | Files)
"""What an adapter runs itself: a key derived off the loop, the network waited for, files and the disk."""

Command = CoreCommand | AdapterCommand

ADAPTER_COMMANDS = (CreateGroup, JoinGroup, AddPeer, Stats, Network, Shutdown, ExportLog, SendFile, FetchFile,
                    CancelFile, Files)
"""The :data:`AdapterCommand` classes, for ``isinstance``."""


class Adapter(Protocol):
    """What an adapter does itself for the :data:`AdapterCommand` calls (GroupManager's, and the
    in-memory one's for the GUI's tests)."""

    async def create_group_async(self, desc: str, passphrase: str | None = None) -> str: ...

    async def join_group_async(self, gid: str, passphrase: str | None = None) -> str: ...

    async def join_invite_async(self, text: str, passphrase: str | None = None) -> str: ...

    async def add_peer_async(self, address: str, wait: float = ...) -> dict: ...

    async def send_file(self, gid: str, path: str, parent: Mid | None = None) -> tuple[Mid, str]: ...

    def fetch_file(self, gid: str, mid: Mid, dest: str | None = None) -> dict: ...

    def cancel_file(self, gid: str, mid: Mid) -> dict: ...

    def file_list(self, gid: str) -> list[dict]: ...

    def export_log(self, path: str | Path, gid: str | None = None, direct: bool = False) -> int: ...

    def stats_dict(self) -> dict: ...

    def network_state(self) -> dict: ...


def run_on_adapter(adapter: Adapter, command: AdapterCommand) -> Any:
    """``command`` run by ``adapter``'s own methods; a coroutine for a call that waits."""
    match command:
        case CreateGroup(desc, passphrase):
            return adapter.create_group_async(desc, passphrase)
        case JoinGroup(gid, invite, passphrase):
            if invite is not None:
                return adapter.join_invite_async(invite, passphrase)
            assert gid is not None  # JoinGroup holds one of them
            return adapter.join_group_async(gid, passphrase)
        case AddPeer(address, wait):
            return adapter.add_peer_async(address, wait)
        case SendFile(gid, path, parent):
            return adapter.send_file(gid, path, parent)
        case FetchFile(gid, mid, dest):
            return adapter.fetch_file(gid, mid, dest)
        case CancelFile(gid, mid):
            return adapter.cancel_file(gid, mid)
        case Files(gid):
            return adapter.file_list(gid)
        case ExportLog(path, gid, direct):
            try:
                return str(Path(path)), adapter.export_log(path, gid, direct)
            except OSError as exc:
                raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
        case Stats():
            return adapter.stats_dict()
        case Network():
            return adapter.network_state()
        case Shutdown():
            raise UsageError("shutdown is the application's call: it closes the adapter")
    raise TypeError(f"{type(command).__name__} is not an adapter command")


class Calls(Protocol):
    """The GUI's calls (``ui.backend.Peer``, which extends this protocol) as typed methods, each
    building its command for :meth:`execute`: the one implementation and the one signature of
    each, for every adapter that can execute (an adapter subclasses this to have them)."""

    __slots__ = ()

    def execute(self, command: Any) -> Any:
        raise NotImplementedError

    def set_name(self, name: str) -> None:
        self.execute(SetName(name))

    def advertise(self) -> None:
        self.execute(Advertise())

    def invite(self, gid: str) -> str:
        return self.execute(Invite(gid))

    def peers(self) -> list[dict]:
        return self.execute(Peers())

    def reached_directly(self, gid: str) -> list[str]:
        return self.execute(ReachedDirectly(gid))

    def leave_group(self, gid: str) -> None:
        self.execute(LeaveGroup(gid))

    def set_role(self, gid: str, pid: str, role: str) -> None:
        self.execute(SetRole(gid, pid, role))

    def set_admins_only(self, gid: str, on: bool) -> None:
        self.execute(SetAdminsOnly(gid, on))

    def remove_member(self, gid: str, pid: str) -> None:
        self.execute(RemoveMember(gid, pid))

    def send(self, gid: str, text: str, parent: Mid | None = None, mentions: Sequence[str] = ()) -> Mid:
        return self.execute(Send(gid, text, parent, _as_tuple(mentions)))

    def mentions(self, limit: int = DEFAULT_MENTIONS_LISTED) -> list[ChatMessage]:
        return self.execute(Mentions(limit))

    def edit(self, gid: str, mid: Mid, text: str) -> Mid:
        return self.execute(Edit(gid, mid, text))

    def delete(self, gid: str, mid: Mid) -> Mid:
        return self.execute(Delete(gid, mid))

    def react(self, gid: str, mid: Mid, emoji: str, on: bool = True) -> Mid:
        return self.execute(React(gid, mid, emoji, on))

    def pin(self, gid: str, mid: Mid, on: bool = True) -> Mid:
        return self.execute(Pin(gid, mid, on))

    def set_topic(self, gid: str, text: str) -> Mid:
        return self.execute(SetTopic(gid, text))

    def topic(self, gid: str) -> tuple[str, str]:
        return self.execute(Topic(gid))

    def pinned(self, gid: str) -> list[ChatMessage]:
        return self.execute(Pinned(gid))

    def groups(self) -> list[GroupView]:
        return self.execute(ListGroups())

    def group(self, gid: str) -> GroupView:
        return self.execute(Group(gid))

    def history(self, gid: str) -> list[ChatMessage]:
        return self.execute(History(gid))

    def history_page(self, gid: str, before: int | None = None, after: int | None = None,
                     limit: int = DEFAULT_HISTORY_PAGE) -> list[ChatMessage]:
        return self.execute(History(gid, before, after, limit))

    def message_count(self, gid: str) -> int:
        return self.execute(MessageCount(gid))

    def history_around(self, gid: str, mid: Mid, limit: int = 50) -> list[ChatMessage]:
        return self.execute(HistoryAround(gid, mid, limit))

    def messages(self, gid: str, mids: list[Mid]) -> list[ChatMessage]:
        return self.execute(Messages(gid, tuple(mids)))

    def notices(self, gid: str) -> list[Notice]:
        return self.execute(Notices(gid))

    def thread(self, gid: str, root: Mid) -> list[ChatMessage]:
        return self.execute(Thread(gid, root))

    def thread_root(self, gid: str, mid: Mid) -> Mid:
        return self.execute(ThreadRoot(gid, mid))

    def threads(self, gid: str, before: int | None = None, limit: int = 50) -> list[StoredThread]:
        return self.execute(Threads(gid, before, limit))

    def unread_before(self, gid: str, below: int) -> int:
        return self.execute(UnreadBefore(gid, below))

    def pending(self, gid: str | None = None) -> int:
        return self.execute(Pending(gid))

    def presence_of(self, gid: str) -> dict[str, str]:
        return self.execute(Presence(gid))

    def read_marks(self, gid: str) -> list[tuple[int, int]] | None:
        return self.execute(ReadMarks(gid))

    def mark_read(self, gid: str, ranges: list[tuple[int, int]]) -> None:
        self.execute(MarkRead(gid, tuple(ranges)))

    def search(self, query: str, *, limit: int = 20, by_time: bool = False,
               direct: bool = False) -> list[tuple[SearchHit, Mid]]:
        """The first ``limit`` hits (newest first ``by_time``), with their threads' roots."""
        found: SearchResults = self.execute(Search(query, limit=limit, order="time" if by_time else "relevance",
                                                   direct=direct))
        return found.hits

    def send_direct(self, pid: str, text: str, parent: Mid | None = None) -> Mid:
        return self.execute(SendDirect(pid, text, parent))

    def direct_history(self, pid: str, before: int | None = None, limit: int | None = None) -> list[DirectMessage]:
        return self.execute(DirectHistory(pid, before, limit))

    def conversations(self) -> list[ConversationView]:
        return self.execute(ListConversations())

    def mark_direct_read(self, pid: str, mid: Mid) -> None:
        self.execute(MarkDirectRead(pid, mid))

    def set_read_receipts(self, on: bool) -> None:
        self.execute(ReadReceipts(on))


def _as_tuple(items: Any) -> Any:
    """A list or tuple as a tuple; anything else as it is, for the core's check to refuse with a reason."""
    return tuple(items) if isinstance(items, (list, tuple)) else items
