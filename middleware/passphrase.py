"""How guessable a new private group's passphrase is: a strength estimate and the trivially weak refused.

The key check announced with a private group lets anyone guess its passphrase
offline (Argon2id makes each guess cost about half a core-second), so a
passphrase that is a common password, a common word with a few digits or
symbols around it, a keyboard row, a sequence or a repetition would fall in
minutes.  Those are refused.  The ranked block-list (``resources/
passphrase-blocklist.txt``, about 6,000 entries: see ``app/make_blocklist.py``
for its source) also prices the words of a longer passphrase by how common they
are, in the manner of zxcvbn: a word of rank r costs an attacker about log2(r)
bits, other characters by their class.  Qt-free, so the create dialog and the
middleware refuse the same passphrases.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .data_files import resource_dir

MIN_LENGTH = 8
MAX_LENGTH = 1024
MIN_BITS = 28  # below this, refused even with no named weakness (e.g. "abc12345")
LABELS = ("very weak", "weak", "fair", "good", "strong")
_SCORE_BITS = (28, 40, 56, 72)  # the lower bounds of weak .. strong
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s", "!": "i"})
_ROWS = ("1234567890", "qwertyuiop", "asdfghjkl", "zxcvbnm", "qwertzuiop", "azertyuiop", "1qaz2wsx3edc4rfv")


def _blocklist_path() -> Path:
    return resource_dir() / "passphrase-blocklist.txt"


@lru_cache(maxsize=1)
def blocklist() -> dict[str, int]:
    """Entry -> rank (1 is the most common); empty if the file is missing."""
    try:
        lines = _blocklist_path().read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    entries = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return {entry: rank for rank, entry in enumerate(entries, 1)}


@dataclass(frozen=True, slots=True)
class Assessment:
    bits: float  # an estimate of the guesses needed, log2
    score: int  # 0..4, an index into LABELS
    weakness: str  # why it is refused ("" if it is not)

    @property
    def label(self) -> str:
        return LABELS[self.score]


def _is_sequence(text: str) -> bool:
    steps = {ord(b) - ord(a) for a, b in zip(text, text[1:])}
    return len(text) > 2 and len(steps) == 1 and steps.pop() in (-1, 0, 1)


def _is_repetition(text: str) -> bool:
    return any(len(text) % n == 0 and text == text[:n] * (len(text) // n) for n in range(1, len(text) // 2 + 1))


def _on_keyboard_row(text: str) -> bool:
    return len(text) >= 4 and any(text in row or text in row[::-1] for row in _ROWS)


def _weakness(phrase: str, words: dict[str, int]) -> str:
    lowered = phrase.lower()
    core = re.sub(r"^[\W\d_]+|[\W\d_]+$", "", lowered)
    plain = lowered.translate(_LEET)
    plain_core = core.translate(_LEET)
    if lowered in words or plain in words:
        return "it is one of the most common passwords"
    if not core:
        return "it has no letters: digits and symbols alone are guessed first"
    if core in words or plain_core in words:
        return "it is a common word with a few digits or symbols around it"
    squeezed = re.sub(r"[\W_]+", "", lowered)
    for text in (lowered, squeezed, core):
        if _is_repetition(text):
            return "it repeats one short pattern"
        if _is_sequence(text):
            return "it is a sequence, like abcdefgh or 12345678"
        if _on_keyboard_row(text):
            return "it is a row of the keyboard"
    half = len(core) // 2
    if len(core) % 2 == 0 and core[:half] == core[half:] and core[:half] in words:
        return "it is a common word twice"
    return ""


def _token_bits(token: str, words: dict[str, int]) -> float:
    rank = words.get(token) or words.get(token.translate(_LEET))
    if rank is not None:
        return math.log2(rank + 1) + 1
    if _is_repetition(token) or _is_sequence(token) or _on_keyboard_row(token):
        return math.log2(len(token) * 26)
    if token.isalpha() and token.islower():
        # A word of a dictionary of ~100,000 costs an attacker at most ~17 bits (one per
        # six letters, for words run together).
        return min(len(token) * math.log2(26), math.log2(100_000) * max(1, len(token) // 6))
    pool = 0
    pool += 26 if re.search(r"[a-z]", token) else 0
    pool += 26 if re.search(r"[A-Z]", token) else 0
    pool += 10 if re.search(r"\d", token) else 0
    pool += 33 if re.search(r"[^a-zA-Z\d]", token) else 0
    return len(token) * math.log2(max(pool, 2))


def assess(phrase: str) -> Assessment:
    """How hard ``phrase`` is to guess, and why it is refused if it is trivially weak."""
    phrase = unicodedata.normalize("NFKC", phrase)
    words = blocklist()
    if len(phrase) < MIN_LENGTH:
        weakness = f"it needs at least {MIN_LENGTH} characters"
    else:
        weakness = _weakness(phrase, words)
    # Words and other runs, each priced alone; a capital first letter adds a bit.
    bits = 0.0
    for token in re.findall(r"[A-Za-z]+|\d+|[^A-Za-z\d\s]+", phrase):
        lower = token.lower()
        bits += _token_bits(lower if lower in words or token.istitle() else token, words)
        bits += 1 if token.istitle() and len(token) > 1 else 0
    bits += phrase.count(" ") and 1
    if weakness:
        bits = min(bits, MIN_BITS - 1)
    elif bits < MIN_BITS:
        weakness = "it is too short and simple: add a few more words"
    score = sum(bits >= bound for bound in _SCORE_BITS)
    return Assessment(bits, score, weakness)
