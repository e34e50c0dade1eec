"""Invites: one line of text that names a group and where its inviter can be reached.

``m2mc://join/<gid>?desc=<description>&peer=<host>:<port>``: the ``peer`` part lets
"join from invite" work on a LAN that carries no multicast and no broadcast at all
(the joiner probes the inviter there, :mod:`middleware.reach`).  An invite is a hint,
not a credential: the group is still checked against its creator's signed descriptor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, quote, unquote, urlsplit

from .addresses import Endpoint, parse_endpoint

INVITE = re.compile(r"m2mc://join/([^\s?]+)(\?\S*)?")
MAX_INVITE_PEERS = 8  # endpoints taken from one invite; the rest are ignored


@dataclass(frozen=True, slots=True)
class Invite:
    gid: str
    desc: str = ""
    peers: tuple[Endpoint, ...] = ()
    secret: bytes = b""  # a private group's one-time secret after a re-key (middleware.teams)


def invite_link(gid: str, desc: str, peers: list[Endpoint] | tuple[Endpoint, ...] = (), secret: bytes = b"") -> str:
    link = f"m2mc://join/{quote(gid, safe='')}?desc={quote(desc, safe='')}"
    return link + "".join(f"&peer={peer}" for peer in peers) + (f"&secret={secret.hex()}" if secret else "")


def parse_invite(text: str) -> Invite | None:
    """The invite in ``text`` (a pasted line may hold more words around it); None if there is none.
    Malformed ``peer`` parts are skipped: the group id alone still finds the group where
    multicast flows."""
    match = INVITE.search(text.strip()) if isinstance(text, str) else None
    if match is None:
        return None
    query = parse_qs(urlsplit(match.group(0)).query)
    peers = []
    for value in query.get("peer", [])[:MAX_INVITE_PEERS]:
        try:
            peers.append(parse_endpoint(value))
        except ValueError:
            continue
    secret = query.get("secret", [""])[0]
    try:
        secret_bytes = bytes.fromhex(secret) if len(secret) == 32 else b""
    except ValueError:
        secret_bytes = b""
    return Invite(unquote(match.group(1)), query.get("desc", [""])[0], tuple(peers), secret_bytes)
