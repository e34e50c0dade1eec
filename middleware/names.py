"""Display names: which are refused, how one is shown, and which look alike.

Anyone picks any display name, so a name says little; what this module keeps
from happening is a name that *looks* like another member's while differing
in its code points (a Cyrillic ``а``, a zero-width space, a right-to-left
override, full-width letters).

- :func:`check_new` refuses, in a name this peer sets, the code points that
  change how text around them is shown or that show nothing: bidi controls,
  default-ignorable code points (outside an emoji, where a joiner or a
  variation selector belongs) and control characters.
- :func:`shown` is how a name received on the wire is shown: those same code
  points removed.  A received name holding them is not refused: its record is
  signed by its member, who may run an older peer, and refusing it would leave
  that member unheard; removing them shows what the member's peer should have sent.
- :func:`lookalikes` finds the members whose names compare equal under
  :func:`comparison_keys`: NFKC, default-ignorables and bidi controls removed,
  case folded, then the confusables skeleton of Unicode's UTS #39 (section 4),
  built from Unicode's own ``confusables.txt``.  A name under a right-to-left
  override is also compared as it is seen, reversed.

The Unicode properties come from the ``regex`` package (kept up with Unicode);
the confusables mapping is Unicode's ``confusables.txt``, kept as it is in
``resources/`` (see pyproject.toml for why it is not a dependency's file).
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache

import regex

from .data_files import resource_dir
from .types import UsageError, short_fingerprint

# Unicode's file as it is (UTS #39 version 13.0), in resources/.
CONFUSABLES_FILE = "confusables.txt"
RIGHT_TO_LEFT_OVERRIDE = "\u202e"
# The explicit bidi formatting characters that open a scope, and the two that close one.
_BIDI_OPENERS = frozenset("\u202a\u202b\u202d\u202e\u2066\u2067\u2068")
_BIDI_CLOSERS = frozenset("\u202c\u2069")

_BIDI_CONTROL = regex.compile(r"\p{Bidi_Control}")
# Code points that show nothing (or change what is shown), and control characters.
_INVISIBLE = regex.compile(r"[\p{Default_Ignorable_Code_Point}\p{Bidi_Control}\p{Cc}]")
# An emoji grapheme: a pictograph, a keycap or a flag, where joiners and variation selectors belong.
_EMOJI_GRAPHEME = regex.compile(r"\p{Extended_Pictographic}|\p{Regional_Indicator}|.\ufe0f?\u20e3", regex.DOTALL)
_GRAPHEME = regex.compile(r"\X", regex.DOTALL)
_SPACES = regex.compile(r"\s+")


def _visible_clusters(name: str):
    """``name``'s grapheme clusters, each with what of it must go (bidi controls, control
    characters, and default-ignorables outside an emoji)."""
    for cluster in _GRAPHEME.findall(name):
        if _EMOJI_GRAPHEME.match(cluster):
            yield cluster, "".join(_BIDI_CONTROL.findall(cluster) + regex.findall(r"\p{Cc}", cluster))
        else:
            yield cluster, "".join(_INVISIBLE.findall(cluster))


def refused_code_points(name: str) -> str:
    """The code points :func:`check_new` refuses in ``name``, in order."""
    return "".join(bad for _, bad in _visible_clusters(name))


def shown(name: str) -> str:
    """A received name as it is shown: without what :func:`check_new` refuses, spaces collapsed."""
    if name.isascii() and name.isprintable():
        return name  # the common case, nothing to remove
    kept = []
    for cluster, bad in _visible_clusters(name):
        kept.append(cluster if not bad else " " if regex.fullmatch(r"\p{Cc}+", cluster) else
                    "".join(c for c in cluster if c not in bad))
    return _SPACES.sub(" ", "".join(kept)).strip()


def check_new(name: str) -> str:
    """``name`` if this peer may set it; a clear :class:`UsageError` naming the first code point
    that shows nothing or changes the direction of the text around it."""
    bad = refused_code_points(name)
    if bad:
        first = bad[0]
        label = unicodedata.name(first, "a control character")
        raise UsageError(f"display name must not hold invisible or text-direction characters: "
                         f"U+{ord(first):04X} {label} (at position {name.index(first) + 1})")
    return name


# -- look-alikes ----------------------------------------------------------------------


@lru_cache(maxsize=1)
def prototypes() -> dict[str, str]:
    """UTS #39's confusables mapping: each source code point to its prototype string."""
    table = {}
    with (resource_dir() / CONFUSABLES_FILE).open(encoding="utf-8-sig") as lines:
        for line in lines:
            fields = line.split("#", 1)[0].split(";")
            if len(fields) < 3:
                continue
            source = "".join(chr(int(cp, 16)) for cp in fields[0].split())
            table[source] = "".join(chr(int(cp, 16)) for cp in fields[1].split())
    return table


def skeleton(text: str) -> str:
    """UTS #39 section 4: NFD, default-ignorables removed, each code point by its prototype, NFD."""
    table = prototypes()
    text = _INVISIBLE.sub("", unicodedata.normalize("NFD", text))
    return unicodedata.normalize("NFD", "".join(table.get(c, c) for c in text))


def _as_seen(name: str) -> str:
    """``name`` in the order it is shown when it holds a right-to-left override: the override's
    scope reversed (left-to-right letters inside any other bidi scope keep their order)."""
    scopes: list[tuple[str, list[str]]] = [("", [])]
    for c in name:
        if c in _BIDI_OPENERS:
            scopes.append((c, []))
        elif c in _BIDI_CLOSERS and len(scopes) > 1:
            opener, text = scopes.pop()
            scopes[-1][1].extend(reversed(text) if opener == RIGHT_TO_LEFT_OVERRIDE else text)
        else:
            scopes[-1][1].append(c)
    while len(scopes) > 1:
        opener, text = scopes.pop()
        scopes[-1][1].extend(reversed(text) if opener == RIGHT_TO_LEFT_OVERRIDE else text)
    return "".join(scopes[0][1])


@lru_cache(maxsize=4096)
def comparison_keys(name: str) -> frozenset[str]:
    """The forms under which ``name`` is compared: two names look alike when they share one.

    Case is folded before and after the skeleton, since the skeleton itself keeps case and maps
    some capitals to lower-case letters (``I`` to ``l``): "ALICE" and "AIice" both meet "alice".
    """
    forms = {name, _as_seen(name)} if RIGHT_TO_LEFT_OVERRIDE in name else {name}
    keys = set()
    for form in forms:
        text = _SPACES.sub(" ", _INVISIBLE.sub("", unicodedata.normalize("NFKC", form))).strip()
        keys.add(skeleton(text.casefold()))
        keys.add(skeleton(skeleton(text).casefold()))
    return frozenset(keys)


def look_alike(a: str, b: str) -> bool:
    return not comparison_keys(a).isdisjoint(comparison_keys(b))


def lookalikes(members) -> set[str]:
    """The pids of ``members`` whose display name looks like another member's (identical included)."""
    by_key: dict[str, set[str]] = {}
    for member in members:
        for key in comparison_keys(member.name):
            by_key.setdefault(key, set()).add(member.pid)
    return {pid for pids in by_key.values() if len(pids) > 1 for pid in pids}


def unverified(signed_name: str, pid: str) -> str:
    """How an author whose member record this peer does not hold is shown: the name it signed,
    marked, with its key's fingerprint (so no one passes for a member by the name alone)."""
    return f"{shown(signed_name) or '?'} (unverified · {short_fingerprint(pid)[:9]})"

