"""@mentions: a member's pid carried in a message's signed text as a token, ``<@pid>``.

A mention names a member by pid, never by display name, so a rename does not
break it: a reader shows the token as "@" and the member's current name from
its member record (:func:`render`).  The token is plain text, so the wire does
not change and an older peer shows the token itself (Slack's and Discord's way).

Bounds: a message counts at most :data:`MAX_MENTIONS` distinct pids; past that,
tokens stay in the text but mention no one.  A token whose pid is no member of
the group renders as the plain text it is.  Pure functions, no I/O.
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping, NamedTuple

MAX_MENTIONS = 20
"""Distinct pids one message may mention: a message that lists a whole big group notifies no one past it."""

DEFAULT_MENTIONS_LISTED = 50
MAX_MENTIONS_LISTED = 1_000
"""What one ``mentions`` query may ask for: a list to read, not an export."""

# A pid is the first 128 bits of its key's SHA-256, in lower-case hex (crypto.pid_of).
TOKEN = re.compile(r"<@([0-9a-f]{32})>")


def token(pid: str) -> str:
    return f"<@{pid}>"


def mentioned_pids(text: str) -> tuple[str, ...]:
    """The distinct pids ``text`` mentions, in order of first use, at most MAX_MENTIONS."""
    if "<@" not in text:  # nearly every message: skip the regex
        return ()
    found: dict[str, None] = {}
    for match in TOKEN.finditer(text):
        found.setdefault(match.group(1), None)
        if len(found) == MAX_MENTIONS:
            break
    return tuple(found)


def with_tokens(text: str, mentions: Iterable[str], names: Mapping[str, str]) -> str:
    """``text`` with the "@Name" the user typed for each pid in ``mentions`` made its token.

    ``names`` maps pids to current display names.  Longer names are replaced first, so
    "@Ann Lee" is not taken for "@Ann".  A pid whose "@Name" is not in the text (the user
    deleted it after completing) mentions no one; a pid already present as a token stays."""
    wanted = [pid for pid in dict.fromkeys(mentions) if pid in names][:MAX_MENTIONS]
    for pid in sorted(wanted, key=lambda p: len(names[p]), reverse=True):
        # not inside a longer word: "@Ann" in "@Annabel" is not Ann
        text = re.sub(re.escape("@" + names[pid]) + r"(?!\w)", token(pid), text)
    return text


class Run(NamedTuple):
    """A piece of a message's text as shown: plain (``pid`` None) or a mention of ``pid``."""

    text: str
    pid: str | None = None


def render(text: str, names: Mapping[str, str]) -> list[Run]:
    """``text`` as runs to show: each token of a member in ``names`` (pid -> current name) becomes
    "@Name"; tokens of non-members and those past MAX_MENTIONS stay as they are."""
    if "<@" not in text:
        return [Run(text)] if text else []
    counted = set(mentioned_pids(text))
    runs: list[Run] = []
    plain_from = 0
    for match in TOKEN.finditer(text):
        pid = match.group(1)
        if pid not in counted or pid not in names:
            continue
        if match.start() > plain_from:
            runs.append(Run(text[plain_from:match.start()]))
        runs.append(Run("@" + names[pid], pid))
        plain_from = match.end()
    if plain_from < len(text):
        runs.append(Run(text[plain_from:]))
    return runs


def shown_text(text: str, names: Mapping[str, str]) -> str:
    """``text`` with members' tokens shown as "@Name" (for plain-text uses: search, tooltips, copies)."""
    return "".join(run.text for run in render(text, names)) if "<@" in text else text
