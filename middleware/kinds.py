"""Message kinds: what a group message is (chat text, an operation, a file offer, ...), and for each
kind how it is parsed and validated, what search indexes of it, what an export adds for it, and how
it reads wherever a message is shown.  This module is the only one that knows how a kind is written.

A message has one string its writer signs, its *body* (``wire.Data.text``, a DATA_BATCH item's
last field, the stored message's ``text``).  A chat message's body is its text.  Every other
kind's body is U+0000, the kind's *tag* (lowercase letters then a version number), then its
*payload*: ``"\\x00obg1"`` and a JSON array for an operation (:mod:`middleware.chatops`),
``"\\x00file1"`` and a JSON object for a file offer (:mod:`middleware.files`).  So what older
peers sent and stored reads as it always did, and the bytes a signature covers never change:
:func:`split` and :func:`body` turn a body into its kind and payload and back, and
``wire.Data``, ``wire.StoredMessage`` and ``types.ChatMessage`` carry both as ``kind`` and
``payload``.

A body that starts with U+0000 and a tag no kind here has is of kind :data:`UNKNOWN`: a kind a
newer peer added.  It is kept, relayed and stored like any message, shown as a line saying this
version cannot show it, and not indexed; a chat text a user writes cannot take that form
(:func:`chat_refusal`), so no one can forge a kind by typing.

Each kind's functions are here, or, for a kind whose value needs a module of its own (an operation's
fields, :mod:`middleware.chatops`; a file offer's checks, :mod:`middleware.files`), given by that
module when it is imported (:func:`implement`): those modules write their bodies through this one,
so this one does not import them.  :mod:`middleware.store_api` imports both, so every store has them.

A new kind is one :class:`Kind` in :data:`KINDS` (its tag, whether it is a message of the
conversation, its parse, index, export and show functions), the call that writes it (the core),
and a test.  The wire, the stores, search, the export and the views take it from here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping

from .mentions import shown_text

CHAT = "chat"
OPERATION = "operation"
FILE_OFFER = "file"
UNKNOWN = "unknown"

_MARK = "\x00"  # opens every body that is not chat text: chat is the one kind without a tag
_TAG = re.compile(r"[a-z]{1,16}[0-9]{1,4}")  # a tag: what a newer kind's can be, so it is told from chat


def _no_fields(payload: str) -> dict:
    return {}


def _nothing_indexed(payload: str) -> str | None:
    return None


def _as_is(payload: str) -> str:
    return payload


def _chat_shown(payload: str, names: Mapping[str, str]) -> str:
    return shown_text(payload, names)


def _operation_shown(payload: str, names: Mapping[str, str]) -> str:
    return "an edit, reaction, pin or topic change"  # never shown as a message: this is for a log line


def _unknown_shown(payload: str, names: Mapping[str, str]) -> str:
    return "a message of a kind this version of M2MC cannot show"


class _NotImplemented:
    """A kind's function before the module that implements it has said what it is (:func:`implement`):
    called, it says which module that is, so a missing import fails loudly, never silently as chat."""

    def __init__(self, kind: str, module: str) -> None:
        self.kind, self.module = kind, module

    def __call__(self, *args: Any) -> Any:
        raise LookupError(f"the {self.kind!r} kind is implemented by middleware.{self.module}, which is not imported")


@dataclass(frozen=True, slots=True)
class Kind:
    """How one kind of message is read.  Each function takes the payload (the body after the tag)."""

    name: str
    tag: str  # "" for chat
    listed: bool  # a message of the conversation (history, threads, pages, mentions); operations are not
    parse: Callable[[str], Any]  # the kind's value; raises ValueError when the payload is not a valid one
    indexed: Callable[[str], str | None]  # what search finds it by; None: not indexed
    exported: Callable[[str], dict]  # fields an export (and JSON-RPC's message objects) add for it
    shown: Callable[[str, Mapping[str, str]], str]  # how it reads in every view, banner and notification




# The kinds.  A kind whose value needs a module of its own (a file offer's checks, an operation's
# fields) is completed by that module at import (:func:`implement`): the module writes and reads
# bodies through this one, so this one cannot import it.  A small kind is written here whole.
KINDS: dict[str, Kind] = {kind.name: kind for kind in (
    Kind(CHAT, "", True, _as_is, _as_is, _no_fields, _chat_shown),
    Kind(OPERATION, "obg1", False, _NotImplemented(OPERATION, "chatops"), _nothing_indexed, _no_fields,
         _operation_shown),
    Kind(FILE_OFFER, "file1", True, *[_NotImplemented(FILE_OFFER, "files")] * 4),
)}
_UNKNOWN = Kind(UNKNOWN, "", True, _as_is, _nothing_indexed, _no_fields, _unknown_shown)
_CHAT = KINDS[CHAT]
_BY_TAG = {kind.tag: kind for kind in KINDS.values() if kind.tag}


def implement(name: str, parse: Callable[[str], Any], indexed: Callable[[str], str | None] | None = None,
              exported: Callable[[str], dict] | None = None,
              shown: Callable[[str, Mapping[str, str]], str] | None = None) -> None:
    """Complete kind ``name`` with its module's functions (called once, by that module, at import);
    one not given stays as the table has it."""
    kind = KINDS[name]
    done = replace(kind, parse=parse, indexed=indexed or kind.indexed, exported=exported or kind.exported,
                   shown=shown or kind.shown)
    KINDS[name] = _BY_TAG[done.tag] = done


MARKS: tuple[bytes, ...] = tuple((_MARK + tag).encode() for tag in _BY_TAG)
"""The UTF-8 openings of the bodies of the kinds here: bytes that hold none of them hold no such body
(the SQLite store looks for them before decoding a segment)."""


def _split(body: str) -> tuple[Kind, str]:
    if body[:1] != _MARK:  # chat text: one test
        return _CHAT, body
    for tag, kind in _BY_TAG.items():
        if body.startswith(tag, 1):
            return kind, body[1 + len(tag):]
    if _TAG.match(body, 1) is not None:
        return _UNKNOWN, body[1:]
    return _CHAT, body  # U+0000 without a tag: chat text, as older peers read it


def split(body: str) -> tuple[str, str]:
    """A body's kind and payload."""
    kind, payload = _split(body)
    return kind.name, payload


def kind_of(body: str) -> str:
    """A body's kind."""
    return _CHAT.name if body[:1] != _MARK else _split(body)[0].name


def payload_of(body: str) -> str:
    """A body's payload: chat's text, or what follows the kind's tag."""
    return body if body[:1] != _MARK else _split(body)[1]


def body(kind: str, payload: str) -> str:
    """The body that carries ``payload`` as a message of ``kind`` (what is signed, sent and stored)."""
    tag = KINDS[kind].tag
    return _MARK + tag + payload if tag else payload


def listed(body: str) -> bool:
    """Whether a body is a message of the conversation (not an operation on one)."""
    return body[:1] != _MARK or _split(body)[0].listed


def parse(body: str, kind: str) -> Any:
    """The value a body of ``kind`` carries (a file offer, an operation's fields); ValueError when the
    body is of another kind or not a valid one of it."""
    found, payload = _split(body)
    if found.name != kind:
        raise ValueError(f"not a message of kind {kind!r}")
    return found.parse(payload)


def indexed(body: str) -> str | None:
    """What the search index holds for a body: the text of chat; a file offer's file name; None for an
    operation (the text it changes is what is found) or a kind this version does not know."""
    if body[:1] != _MARK:
        return body
    kind, payload = _split(body)
    return kind.indexed(payload)


def exported(body: str) -> dict:
    """A body as an export line and JSON-RPC's message objects show it: its ``kind``, its ``text`` (the
    payload: a chat message's text, a file offer's JSON) and the fields its kind adds."""
    kind, payload = _split(body)
    return {"kind": kind.name, "text": payload, **kind.exported(payload)}


def shown(body: str, names: Mapping[str, str]) -> str:
    """A body as people read it: mention tokens as "@Name", a file offer as its caption (never its
    JSON), a kind this version does not know as a line that says so."""
    kind, payload = _split(body)
    return kind.shown(payload, names)


def chat_refusal(text: str) -> str | None:
    """Why ``text`` cannot be sent as a chat message (it reads as another kind's body), or None."""
    if text[:1] != _MARK:
        return None
    kind, _ = _split(text)
    if kind is _CHAT:
        return None
    if kind.name == OPERATION:
        return f"text must not start with the operation marker (U+0000 '{kind.tag}')"
    if kind.name == FILE_OFFER:
        return f"text must not start with the file offer marker (U+0000 '{kind.tag}'): use send_file"
    return f"text must not start with U+0000 and a kind's tag ({text[1:17]!r}): that is how other kinds are written"
