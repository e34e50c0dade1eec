"""Cut the emoji the app shows out of Noto Color Emoji into resources/fonts (about 20 KB): the reaction
picker's, and the paperclip before a file offer's caption.

Where no colour emoji font is installed (a bare Linux desktop), two of the six picker emoji
drew as empty boxes; the app now ships these glyphs and registers them as its emoji fallback
(ui.resources.load_bundled_fonts).  Run again when REACTION_CHOICES change:

    apt-get download fonts-noto-color-emoji && dpkg-deb -x fonts-noto-color-emoji_*.deb noto
    python packaging/make_reaction_font.py noto/usr/share/fonts/truetype/noto/NotoColorEmoji.ttf
"""

import sys
from pathlib import Path

from fontTools import subset

from m2mc.middleware.files import FILE_MARK
from m2mc.ui.main_window import REACTION_CHOICES

REPO = Path(__file__).resolve().parent.parent

VARIATION_SELECTOR_16 = 0xFE0F  # "❤️" as an emoji rather than a text heart


def main(source: str) -> None:
    codepoints = sorted({ord(ch) for emoji in (*REACTION_CHOICES, FILE_MARK) for ch in emoji} | {VARIATION_SELECTOR_16})
    out = REPO / "resources" / "fonts" / "NotoColorEmoji-reactions.ttf"
    subset.main([source, "--unicodes=" + ",".join(f"U+{cp:04X}" for cp in codepoints), f"--output-file={out}"])
    print(f"{out}: {out.stat().st_size} bytes, {len(codepoints)} code points")


if __name__ == "__main__":
    main(sys.argv[1])
