"""Regenerate resources/passphrase-blocklist.txt from zxcvbn's frequency lists.

Source: the ``zxcvbn`` package on PyPI (4.5.0, MIT licence), module
``zxcvbn.frequency_lists``: ``passwords`` (the most common passwords of Mark
Burnett's 10-million-password corpus, ranked) and ``english_wikipedia`` (the
most frequent words of English Wikipedia, ranked).  We ship the top PASSWORDS
passwords and top WORDS words of four letters or more, lowercased, in rank
order (passwords first), so the checker can also tell how common an entry is.
zxcvbn is not a dependency: run this by hand after
``pip download --no-deps zxcvbn==4.5.0`` and unzipping the wheel into DIR:

    python -m m2mc.app.make_blocklist DIR > resources/passphrase-blocklist.txt
"""

from __future__ import annotations

import sys

PASSWORDS = 4_000
WORDS = 2_000


def main(argv: list[str]) -> int:
    sys.path.insert(0, argv[0])
    from zxcvbn.frequency_lists import FREQUENCY_LISTS  # noqa: E402 (found only in DIR)

    seen: set[str] = set()
    lines = []
    for source, limit, shortest in (("passwords", PASSWORDS, 4), ("english_wikipedia", WORDS, 4)):
        taken = 0
        for entry in FREQUENCY_LISTS[source]:
            entry = entry.strip().lower()
            if len(entry) < shortest or entry in seen or not entry.isprintable():
                continue
            seen.add(entry)
            lines.append(entry)
            taken += 1
            if taken == limit:
                break
    print("# M2MC passphrase block-list: see app/make_blocklist.py for its source (zxcvbn 4.5.0 frequency lists).")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
