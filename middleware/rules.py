"""The rules a user's input must meet, and the words that refuse it, defined once.

The middleware checks every call against these (the GUI's in-memory backend,
``ui/memory_backend.py``, runs the same GroupManager), so that a GUI test sees the
refusal a user of the real app would see.  Each check
returns the value as it is kept (stripped, for a description or a name) or
raises :class:`~middleware.types.UsageError` (:class:`PassphraseRefused` for a
passphrase) with a sentence the GUI can show as it is.
"""

from __future__ import annotations

from . import names, passphrase as passphrases, wire
from . import kinds
from .mentions import MAX_MENTIONS, TOKEN, token
from .obg import is_reaction_emoji
from .types import PassphraseRefused, UsageError, check_unicode

MAX_DESC = wire.MAX_DESC
MAX_NAME = wire.MAX_NAME
MAX_TEXT = wire.MAX_TEXT
MIN_PASSPHRASE = passphrases.MIN_LENGTH
MAX_PASSPHRASE = passphrases.MAX_LENGTH


def check_desc(desc: str) -> str:
    """A new group's description, stripped."""
    desc = desc.strip() if isinstance(desc, str) else desc
    if not isinstance(desc, str) or not desc:
        raise UsageError("a group needs a description")
    if len(desc) > MAX_DESC:
        raise UsageError(f"description too long: {len(desc)} characters, limit is {MAX_DESC}")
    return check_unicode(desc, "description")


def check_new_passphrase(passphrase: str) -> None:
    """A private group's new passphrase: long enough, not too long, and not trivially guessed."""
    if not isinstance(passphrase, str) or len(passphrase) < MIN_PASSPHRASE:
        raise PassphraseRefused(f"a passphrase needs at least {MIN_PASSPHRASE} characters")
    if len(passphrase) > MAX_PASSPHRASE:
        raise PassphraseRefused(f"passphrase too long (limit {MAX_PASSPHRASE} characters)")
    check_unicode(passphrase, "passphrase")
    weakness = passphrases.assess(passphrase).weakness
    if weakness:
        raise PassphraseRefused(f"passphrase too easy to guess: {weakness}")


def check_name(name: str) -> str:
    """A display name, stripped, without invisible or text-direction characters (``names.check_new``)."""
    if not isinstance(name, str) or not name.strip():
        raise UsageError("a display name must not be empty")
    name = check_unicode(name.strip(), "display name")
    if len(name) > MAX_NAME:
        raise UsageError(f"display name too long: {len(name)} characters, limit is {MAX_NAME}")
    return names.check_new(name)


def check_join_passphrase(desc: str, private: bool, passphrase: str | None) -> None:
    """Whether a passphrase is given exactly when the group is private."""
    if private and not passphrase:
        raise UsageError(f"group {desc!r} is private: its passphrase is needed to join")
    if not private and passphrase:
        # Whoever expects a private group must not write to an open one believing it sealed.
        raise UsageError(f"group {desc!r} is open, not private: anyone on the network can read it; "
                         "join it without a passphrase if that is what you want")


def wrong_passphrase(desc: str) -> PassphraseRefused:
    """The refusal of a passphrase that does not open group ``desc``."""
    return PassphraseRefused(f"wrong passphrase for group {desc!r}", wrong=True)


def check_message_text(text: str) -> str:
    """A chat message's text, as the sender writes it (the manager's and the channel's checks, in their order)."""
    if not isinstance(text, str):
        raise UsageError("text must be a string")
    refusal = kinds.chat_refusal(text)
    if refusal is not None:
        raise UsageError(refusal)
    if len(text) > MAX_TEXT:
        raise UsageError(f"text too long: {len(text)} characters, limit is {MAX_TEXT}")
    if not text.strip():
        raise UsageError("text is empty")
    return check_unicode(text, "text")


def check_mentions(mentions: object) -> list[str]:
    """A send's ``mentions``: a list of pids, at most MAX_MENTIONS.  A pid that is no current member
    of the group is let through and mentions no one (they may have left since the user typed)."""
    if not isinstance(mentions, (list, tuple)) or not all(isinstance(pid, str) for pid in mentions):
        raise UsageError("mentions must be a list of pids")
    if len(set(mentions)) > MAX_MENTIONS:
        raise UsageError(f"too many mentions: {len(set(mentions))}, limit is {MAX_MENTIONS}")
    bad = next((pid for pid in mentions if not TOKEN.fullmatch(token(pid))), None)
    if bad is not None:
        raise UsageError(f"not a pid (32 lower-case hex digits): {bad!r:.80}")
    return list(mentions)


def check_edit_text(text: str) -> str:
    """An edit's new text (its length is the operation's rule, in ``chatops``)."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError("text must be a non-empty string")
    return check_unicode(text, "text")


def check_topic(text: str) -> str:
    """A new topic, stripped (its length is the operation's rule, in ``chatops``)."""
    if not isinstance(text, str):
        raise UsageError("topic must be a string")
    return check_unicode(text.strip(), "topic")


def not_a_member(gid: str) -> UsageError:
    return UsageError(f"not a member of group {gid}")


def bad_parent(gid: str, parent: tuple[str, int]) -> UsageError:
    return UsageError(f"bad parent: message {parent[0]}:{parent[1]} is not in group {gid}")


def not_verified(desc: str) -> UsageError:
    return UsageError(f"group {desc!r} has not been verified yet (its creator's signed description "
                      "has not arrived): try again in a moment")


def unknown_group(gid: str) -> UsageError:
    return UsageError(f"unknown group {gid!r:.80}")


def check_target(target: object) -> None:
    """An operation's target: a message id, or None (the topic's)."""
    if target is not None and (type(target) is not tuple or len(target) != 2):
        raise UsageError("a message id is (pid, seqno)")


def check_emoji(emoji: str) -> str:
    """A reaction's emoji: one emoji grapheme (how many a message may show is the operation's rule,
    in ``chatops``)."""
    if not isinstance(emoji, str):
        raise UsageError("emoji must be a string")
    if not is_reaction_emoji(emoji):
        raise UsageError(f"a reaction is a single emoji, such as 👍; {emoji[:16]!r} is not one")
    return emoji

